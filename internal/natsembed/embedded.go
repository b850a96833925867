// Package natsembed runs a JetStream-enabled nats-server inside this process:
// the controller's one-command default and every test's bus. Only the
// controller and tests import it, so agentd and fleetctl stay small.
package natsembed

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configure the in-process JetStream server.
type Options struct {
	// Listen is host:port for clients; port -1 picks a free one.
	Listen string
	// StoreDir is where JetStream keeps its data.
	StoreDir string
	// ServerName names the server in logs and cluster views. With a
	// ConfigFile that names the server, empty keeps the file's name.
	ServerName string
	// ConfigFile, when set, is a nats-server configuration file the server
	// starts from: operator mode (what "fleetctl auth init" writes as
	// resolver.conf), TLS, a JetStream domain, limits. Listen and StoreDir
	// still apply and replace the file's listen and store_dir; JetStream
	// is always on (the controller needs it), and so is no_sublist_cache
	// (unless SublistCache).
	// An operator-mode file without a resolver gets a full directory
	// resolver in StoreDir/jwt, so pushed account updates (revocations)
	// persist.
	ConfigFile string
	// Debug routes the server's own log to stderr.
	Debug bool
	// SublistCache turns nats-server's subscription match cache back on,
	// for benchmarks that compare; fleetwave runs without it (see Start).
	SublistCache bool
}

// readyTimeout bounds the wait for a started server to accept clients.
// Start fails sooner on what nats-server reports as fatal (a port it cannot
// bind, a store it cannot open).
const readyTimeout = 10 * time.Second

// Start starts a JetStream-enabled nats-server in this process and
// waits until it accepts clients. A listen port in use or a store
// directory that cannot be created fails it at once, with the OS error.
func Start(o Options) (*server.Server, error) {
	host, port, err := ParseListen(o.Listen)
	if err != nil {
		return nil, err
	}
	if o.StoreDir == "" {
		return nil, fmt.Errorf("embedded server: a store directory is required (--store-dir)")
	}
	if err := CheckListen(o.Listen); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.StoreDir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded server: store directory: %w", err)
	}
	opts := &server.Options{}
	if o.ConfigFile != "" {
		if opts, err = server.ProcessConfigFile(o.ConfigFile); err != nil {
			return nil, fmt.Errorf("embedded server: config %s: %w", o.ConfigFile, err)
		}
	}
	if noResolver(opts) {
		res, err := server.NewDirAccResolver(filepath.Join(o.StoreDir, "jwt"), 0, 2*time.Minute, server.NoDelete)
		if err != nil {
			return nil, fmt.Errorf("embedded server: account resolver: %w", err)
		}
		opts.AccountResolver = res
	}
	if o.ServerName != "" || opts.ServerName == "" {
		opts.ServerName = o.ServerName
	}
	opts.Host, opts.Port = host, port
	opts.JetStream, opts.StoreDir = true, o.StoreDir
	opts.NoSigs = true // the controller owns signal handling
	// Agents subscribe the same few plan subjects by the thousand; with
	// the sublist cache a mass (re)connect is O(n^2) in their number, and
	// the cache cannot help heartbeats (one subject per agent). As in
	// every deploy/nats config; docs/PERFORMANCE.md section 2b.
	opts.NoSublistCache = !o.SublistCache
	opts.NoLog = !o.Debug
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	// nats-server reports what stops its start (a bind error, a store it
	// cannot open) only through its logger's Fatalf, and then never
	// becomes ready: catch it to fail now, with its words, instead of
	// after readyTimeout.
	logger := &startLogger{fatal: make(chan string, 1)}
	if o.Debug {
		ns.ConfigureLogger()
		logger.next = ns.Logger()
	}
	ns.SetLoggerV2(logger, opts.Debug, opts.Trace, opts.TraceVerbose)
	go ns.Start()
	deadline := time.Now().Add(readyTimeout)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-logger.fatal:
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil, fmt.Errorf("embedded server on %s, store %s: %s", o.Listen, o.StoreDir, msg)
		default:
		}
		if time.Now().After(deadline) {
			ns.Shutdown()
			return nil, fmt.Errorf("embedded server: not accepting clients on %s after %v", o.Listen, readyTimeout)
		}
	}
	return ns, nil
}

// ParseListen splits an Options.Listen address into host and port, with
// an error that says what is wrong with it.
func ParseListen(listen string) (host string, port int, err error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("listen address %q: want host:port, e.g. 127.0.0.1:4222: %w", listen, err)
	}
	port, err = strconv.Atoi(portStr)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("listen address %q: port must be 0-65535 (or -1 for any free port)", listen)
	}
	return host, port, nil
}

// CheckListen binds listen (host:port, as Options.Listen) and lets it go
// again, so that a port in use or an address not on this host is reported
// with the OS error before anything else starts. Port -1 (any free port)
// always passes; port 0 is nats-server's default, 4222.
func CheckListen(listen string) error {
	host, port, err := ParseListen(listen)
	if err != nil {
		return err
	}
	switch port {
	case -1:
		return nil
	case 0:
		port = server.DEFAULT_PORT
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("embedded server: %w", err)
	}
	return ln.Close()
}

// startLogger is the embedded server's logger: it passes lines on to next
// (the stderr logger with Debug, else nowhere) and keeps the first fatal
// message for Start, which nats-server's own logger would have ended the
// process on.
type startLogger struct {
	next  server.Logger
	fatal chan string
}

func (l *startLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	select {
	case l.fatal <- msg:
	default:
	}
	if l.next != nil {
		l.next.Errorf("%s", msg)
	}
}

func (l *startLogger) Noticef(format string, v ...any) {
	if l.next != nil {
		l.next.Noticef(format, v...)
	}
}

func (l *startLogger) Warnf(format string, v ...any) {
	if l.next != nil {
		l.next.Warnf(format, v...)
	}
}

func (l *startLogger) Errorf(format string, v ...any) {
	if l.next != nil {
		l.next.Errorf(format, v...)
	}
}

func (l *startLogger) Debugf(format string, v ...any) {
	if l.next != nil {
		l.next.Debugf(format, v...)
	}
}

func (l *startLogger) Tracef(format string, v ...any) {
	if l.next != nil {
		l.next.Tracef(format, v...)
	}
}

// noResolver reports an operator-mode config without a resolver of its own.
// (nats-server then derives a URL resolver from the operator JWT's account
// server URL, a bogus one when the JWT has none.)
func noResolver(opts *server.Options) bool {
	if len(opts.TrustedOperators) == 0 {
		return false
	}
	_, isURL := opts.AccountResolver.(*server.URLAccResolver)
	return opts.AccountResolver == nil || isURL && opts.TrustedOperators[0].AccountServerURL == ""
}
