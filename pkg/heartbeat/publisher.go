package heartbeat

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/clock"
)

// Sender is the part of jetstream.JetStream the publisher needs.
type Sender interface {
	Publish(ctx context.Context, subject string, data []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// Publisher sends an agent's heartbeat every Interval ± Jitter, at once when
// Kick is called (a state change, a reconnect), and retries with backoff
// while the bus is unreachable. It never queues old beats: every attempt is
// built fresh from Status, so the first beat after an outage is current.
type Publisher struct {
	JS       Sender
	Interval time.Duration
	Jitter   time.Duration
	Clock    clock.Clock
	Log      *slog.Logger
	// Status returns the agent's current status and identity; the publisher
	// fills in V, At and Seq.
	Status func() Heartbeat
	// Timeout bounds one publish (waiting for the stream's ack). Default 5s.
	Timeout time.Duration
	// OnAck, when set, is told how every publish ended: nil when the stream
	// acked the beat, the error otherwise (a timeout, a connection down,
	// no stream). A beat that does not encode is not reported: it says
	// nothing about the bus. Called on Run's goroutine; it must not block.
	OnAck func(err error)

	once sync.Once
	kick chan struct{}
	seq  uint64
}

// Retry backoff while publishing fails: doubling from retryMin, capped at the
// interval (the cap also keeps the doubling from ever overflowing).
const retryMin = 500 * time.Millisecond

func (p *Publisher) init() {
	p.once.Do(func() { p.kick = make(chan struct{}, 1) })
}

// Kick asks for a heartbeat now. It never blocks; kicks that arrive while one
// is pending are merged.
func (p *Publisher) Kick() {
	p.init()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run publishes until ctx is done. The first heartbeat goes out at once.
func (p *Publisher) Run(ctx context.Context) error {
	p.init()
	timer := p.Clock.NewTimer(0)
	defer timer.Stop()
	failing := false
	backoff := retryMin
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C():
		case <-p.kick:
		}
		err := p.publish(ctx)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrMalformed) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrUnsupportedVersion):
			// Our own status does not encode: retrying will not help,
			// and the agent is missing from the inventory until fixed.
			p.Log.Error("heartbeat not sent: this agent's status is invalid", slog.Any("err", err))
		case err != nil:
			p.acked(err)
			if !failing {
				p.Log.Warn("heartbeat not delivered; retrying until the bus answers", slog.Any("err", err))
				failing = true
			}
			timer.Reset(min(backoff, p.Interval))
			backoff = min(backoff*2, p.Interval)
			continue
		case failing:
			p.acked(nil)
			p.Log.Info("heartbeats delivered again")
			failing, backoff = false, retryMin
		default:
			p.acked(nil)
		}
		timer.Reset(NextDelay(p.Interval, p.Jitter, rand.Float64))
	}
}

func (p *Publisher) acked(err error) {
	if p.OnAck != nil {
		p.OnAck(err)
	}
}

func (p *Publisher) publish(ctx context.Context) error {
	hb := p.Status()
	p.seq++
	hb.V, hb.At, hb.Seq = SchemaVersion, p.Clock.Now().UTC(), p.seq
	data, err := Encode(&hb)
	if err != nil {
		return err
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err = p.JS.Publish(ctx, SubjectForApp(hb.App, hb.Group, hb.AgentID), data)
	return err
}

// NextDelay is the wait before the next regular heartbeat: interval shifted
// by a uniform amount in [-jitter, +jitter), so a fleet started at once does
// not beat in lockstep. rnd returns a float in [0, 1). The result is never
// below a tenth of the interval.
func NextDelay(interval, jitter time.Duration, rnd func() float64) time.Duration {
	d := interval
	if jitter > 0 {
		d += time.Duration((rnd()*2 - 1) * float64(jitter))
	}
	return max(d, interval/10)
}
