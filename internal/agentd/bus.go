package agentd

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fleetwave/fleetwave/internal/clock"
)

// Defaults of lost-bus detection (docs/agent.md, "When the bus is lost").
const (
	// DefaultMaxMissedAcks heartbeats in a row without an ack make the bus
	// lost: one slow ack is tolerated, two are a cut.
	DefaultMaxMissedAcks = 2
	// DefaultAckTimeout bounds one heartbeat publish (the wait for the
	// stream's ack).
	DefaultAckTimeout = 5 * time.Second
	// DefaultPingInterval and DefaultMaxPingsOut make the NATS client
	// itself give up a silent connection within 45 s (a pong is due
	// within two more pings), not nats.go's 4-6 minutes.
	DefaultPingInterval = 15 * time.Second
	DefaultMaxPingsOut  = 2
)

// busLostCause says why the bus counts as lost, or "" while it does not:
// the NATS connection is down (connState says how it stands), or
// maxMissed heartbeats in a row went without an ack, the last one failing
// with lastErr, the last ack unacked ago. The connection comes first: it
// is the cause when both hold.
func busLostCause(connected bool, connState string, missed, maxMissed int, unacked time.Duration, lastErr error) string {
	switch {
	case !connected:
		return "connection down (NATS client " + connState + ")"
	case missed >= maxMissed:
		return fmt.Sprintf("no heartbeat ack for %d tries / %v: %v", missed, unacked.Round(time.Millisecond), lastErr)
	}
	return ""
}

// busWatch decides whether the bus is lost: from the connection's state
// (which a silent cut changes only once the client's pings go unanswered)
// and from heartbeat acks (which stop at the next beat). It logs every
// change once, with its cause, and remembers when the change happened:
// the find fallback counts --fallback-after from there.
type busWatch struct {
	clock     clock.Clock
	log       *slog.Logger
	maxMissed int
	// conn reports the connection's state ("CONNECTED", "RECONNECTING"…).
	conn func() (up bool, state string)

	mu      sync.Mutex
	missed  int       // heartbeats in a row without an ack
	lastAck time.Time // or the watch's start
	lastErr error
	lost    bool
	since   time.Time // of the last change, or the watch's start
}

func newBusWatch(clk clock.Clock, log *slog.Logger, maxMissed int, conn func() (bool, string)) *busWatch {
	now := clk.Now()
	return &busWatch{clock: clk, log: log, maxMissed: maxMissed, conn: conn, since: now, lastAck: now}
}

// acked records how a heartbeat publish ended (heartbeat.Publisher.OnAck).
func (w *busWatch) acked(err error) {
	up, state := w.conn()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.missed, w.lastErr, w.lastAck = 0, nil, w.clock.Now()
		w.eval(up, state, "heartbeat acked")
		return
	}
	w.missed++
	w.lastErr = err
	w.eval(up, state, "")
}

// check looks at the connection again (a poll, a reconnect).
func (w *busWatch) check() {
	up, state := w.conn()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.eval(up, state, "connected")
}

// eval applies the rule; back says why the bus is back if it is. w.mu is
// held.
func (w *busWatch) eval(up bool, state, back string) {
	now := w.clock.Now()
	cause := busLostCause(up, state, w.missed, w.maxMissed, now.Sub(w.lastAck), w.lastErr)
	lost := cause != ""
	if lost == w.lost {
		return
	}
	w.lost, w.since = lost, now
	if lost {
		w.log.Warn("bus lost", slog.String("cause", cause))
	} else {
		w.log.Info("bus back", slog.String("cause", back))
	}
}

// state says whether the bus is lost and since when it is (or is not).
func (w *busWatch) state() (lost bool, since time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost, w.since
}

// run looks at the connection every period until ctx is done: a
// connection that went down is noticed without waiting for a heartbeat.
func (w *busWatch) run(ctx context.Context, period time.Duration) error {
	t := w.clock.NewTimer(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		}
		w.check()
		t.Reset(period)
	}
}
