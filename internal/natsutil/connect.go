package natsutil

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ConnectOptions say where and as whom to connect.
type ConnectOptions struct {
	URL   string
	Name  string // client name shown by the server (nats server report connections)
	Creds string // user credentials file (JWT + seed)
	// TLS are the client's TLS files (all optional).
	TLS TLS
	// InboxPrefix replaces "_INBOX" for this connection's reply subjects
	// (nats.CustomInboxPrefix). Agents use kv.AgentInboxPrefix(id): their
	// credentials allow subscribing to that prefix only.
	InboxPrefix string
	Log         *slog.Logger
	// NoBuffer makes publishes fail at once while disconnected instead of
	// queueing them for the reconnect. Agents set it: a heartbeat queued
	// during an outage is stale by the time it is sent.
	NoBuffer bool
	// RetryFirst keeps trying when the server is down at start instead of
	// failing: an agent must come up before the bus does.
	RetryFirst bool
	// OnReconnect runs after every reconnect and after a first connect
	// made late (RetryFirst), after the log line. A connection that is up
	// when Connect returns is not reported: the caller starts its work
	// afterwards anyway, and a second, concurrent start (a heartbeat
	// kicked while the first is in flight) would be noise.
	OnReconnect func()
	// Extra options appended last.
	Extra []nats.Option
}

// Connect opens a connection that reconnects forever with jittered backoff
// and logs every change of connection state once.
func Connect(o ConnectOptions) (*nats.Conn, error) {
	if o.URL == "" {
		return nil, errors.New("no NATS server given: pass --nats URL or set NATS_URL")
	}
	if err := o.TLS.Validate(); err != nil {
		return nil, err
	}
	log := o.Log
	// Whether the first connect came after Connect returned; the handler
	// runs at most once, on the client's callback goroutine, and waits for
	// the answer (Connect queues it just before returning).
	connectedLate := make(chan bool, 1)
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.ReconnectJitter(500*time.Millisecond, 2*time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS; reconnecting", slog.Any("err", err))
			} else {
				log.Info("disconnected from NATS")
			}
		}),
		nats.ConnectHandler(func(nc *nats.Conn) {
			// The first successful connect (with RetryFirst, possibly late).
			log.Info("connected to NATS", slog.String("server", nc.ConnectedUrlRedacted()))
			if late := <-connectedLate; late && o.OnReconnect != nil {
				o.OnReconnect()
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("reconnected to NATS", slog.String("server", nc.ConnectedUrlRedacted()))
			if o.OnReconnect != nil {
				o.OnReconnect()
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			// A denied publish or request only times out for the caller;
			// the real "Permissions Violation" arrives here, so say it.
			attrs := []any{slog.Any("err", err)}
			if sub != nil {
				attrs = append(attrs, slog.String("subject", sub.Subject))
			}
			log.Error("NATS error", attrs...)
		}),
	}
	if o.Creds != "" {
		opts = append(opts, nats.UserCredentials(o.Creds))
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	opts = append(opts, o.TLS.options()...)
	if o.RetryFirst {
		opts = append(opts, nats.RetryOnFailedConnect(true))
	}
	if o.NoBuffer {
		opts = append(opts, nats.ReconnectBufSize(-1))
	}
	opts = append(opts, o.Extra...)
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w%s", o.URL, err, authHint(err, o.Creds))
	}
	connectedLate <- !nc.IsConnected()
	return nc, nil
}

// ConnectJetStream is Connect plus a JetStream context on the connection,
// which the caller closes (nc.Close) when done.
func ConnectJetStream(o ConnectOptions) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := Connect(o)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream on %s: %w", o.URL, err)
	}
	return nc, js, nil
}

// authHint says what to do about a connection the server refused: the
// server's "Authorization Violation" alone does not say that credentials
// are missing, or which ones it refused.
func authHint(err error, creds string) string {
	if !errors.Is(err, nats.ErrAuthorization) {
		return ""
	}
	if creds == "" {
		return ": this server needs credentials: pass --creds or set NATS_CREDS"
	}
	return fmt.Sprintf(": the server refuses the credentials in %s (another operator's, or revoked?)", creds)
}
