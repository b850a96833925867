package controller

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// inventoryFeed fills the controller's inventory without a JetStream
// consumer: the last heartbeat of every agent from a scan of the heartbeat
// stream (batched direct gets, kv.ScanFrom), then every heartbeat the stream
// stores as it republishes it on fleet.inventory.<group>.<agent_id>, read
// with a core subscription.
//
// Why no consumer: a consumer's deliver subject is written in the body of
// the request that creates it, beyond the reach of any permission, so a
// user that may create consumers can make the server publish stored
// messages onto any subject of the account, the plan spec included. The
// controller's account (CONTROL) may create none.
//
// The subscription starts before the scan; what arrives during the scan is
// held, and once the scan is done, applied if it is newer than everything
// the scan read (its stream sequence is above the scan's last). A scan runs
// at start, after every reconnect, and when the subscription dropped
// messages (a slow consumer): each is a full, consistent picture again.
type inventoryFeed struct {
	nc   *nats.Conn
	c    *Controller
	sub  *nats.Subscription
	ch   chan *nats.Msg // what the subscription delivers
	quit chan struct{}  // closed by stop
	done chan struct{}  // closed when follow returns
	// stale is signalled (at most one pending) when a batch arrives after
	// a reconnect or a drop since the latest scan: the controller rescans
	// at once instead of at its next stats tick, so an agent heartbeating
	// more often than the stats interval is not shown unreachable for the
	// heartbeats lost while the connection was down.
	staleCh chan struct{}

	mu        sync.Mutex
	scanning  bool
	held      []*nats.Msg
	floor     uint64 // the last sequence the latest scan read
	dropped   int    // sub.Dropped() when the latest scan started
	reconnect uint64 // nc.Stats().Reconnects when the latest scan started
	failed    bool   // the latest scan failed
	live      ingest // with mu held
}

// Subscription bounds: the stream republishes every heartbeat, and a
// controller busy with a pass must not lose them; past this it drops and
// rescans. feedBatch is the most heartbeats taken in at once: one lock of
// the inventory and one clock read for all of them.
const (
	feedPendingMsgs = 1 << 20
	feedBatch       = 1024
)

func (f *inventoryFeed) start() error {
	f.ch = make(chan *nats.Msg, feedPendingMsgs)
	sub, err := f.nc.ChanSubscribe(kv.InventoryRepublish+">", f.ch)
	if err != nil {
		return fmt.Errorf("follow %s: %w", kv.InventoryRepublish+">", err)
	}
	f.sub = sub
	f.live.c = f.c
	f.quit, f.done = make(chan struct{}), make(chan struct{})
	f.staleCh = make(chan struct{}, 1)
	go f.follow()
	return nil
}

func (f *inventoryFeed) stop() {
	if f.sub != nil {
		_ = f.sub.Unsubscribe()
		close(f.quit)
		<-f.done
	}
}

// follow takes the republished heartbeats in batches: whatever has arrived,
// up to feedBatch, at once.
func (f *inventoryFeed) follow() {
	defer close(f.done)
	batch := make([]*nats.Msg, 0, feedBatch)
	for {
		select {
		case m := <-f.ch:
			batch = append(batch, m)
		case <-f.quit:
			return
		}
	more:
		for len(batch) < cap(batch) {
			select {
			case m := <-f.ch:
				batch = append(batch, m)
			default:
				break more
			}
		}
		f.take(batch)
		clear(batch)
		batch = batch[:0]
	}
}

// take is one batch of republished heartbeats: held while a scan runs,
// observed otherwise.
func (f *inventoryFeed) take(batch []*nats.Msg) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.scanning {
		f.held = append(f.held, batch...)
		return
	}
	f.apply(batch)
	if f.nc.Stats().Reconnects != f.reconnect || f.droppedNow() != f.dropped {
		select {
		case f.staleCh <- struct{}{}:
		default:
		}
	}
}

// apply observes the republished heartbeats newer than the last scan (with
// mu held: in the order the stream stored them).
func (f *inventoryFeed) apply(msgs []*nats.Msg) {
	for _, msg := range msgs {
		m, err := kv.ParseStored(msg.Header, msg.Data)
		if err != nil {
			f.c.received.Add(1)
			f.c.reject(msg.Subject, rejectNotRepublished, fmt.Errorf("not a heartbeat republished by %s: %w", kv.StreamHB, err))
			continue
		}
		if m.Stream != kv.StreamHB || m.Sequence <= f.floor {
			continue
		}
		f.live.add(m, false, false)
	}
	f.live.flush()
}

// scan reads the whole stream and then what arrived meanwhile. recovered
// marks the first scan: its agents count at once (Aggregator.Observe).
func (f *inventoryFeed) scan(ctx context.Context, recovered bool) error {
	f.mu.Lock()
	f.scanning, f.held = true, nil
	f.dropped, f.reconnect = f.droppedNow(), f.nc.Stats().Reconnects
	f.mu.Unlock()
	in := ingest{c: f.c}
	last, err := kv.ScanFrom(ctx, f.nc, kv.StreamHB, "", 1, func(m kv.StoredMsg) error {
		in.add(m, recovered, true)
		return nil
	})
	in.flush()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scanning, f.failed = false, err != nil
	if err == nil {
		f.floor = last
	} // else keep what arrived meanwhile too: the next scan starts over
	for len(f.held) > 0 {
		n := min(len(f.held), feedBatch)
		f.apply(f.held[:n])
		f.held = f.held[n:]
	}
	f.held = nil
	return err
}

// ingest decodes heartbeats into a batch per app and observes each batch
// under one lock of its app's inventory. Its Decoder reuses one Heartbeat
// and shares the strings agents repeat (groups, versions). One ingest per
// goroutine.
type ingest struct {
	c    *Controller
	dec  heartbeat.Decoder
	apps *appSet // the apps the batch was begun with
	bufs []appBatch
	n    int       // heartbeats in bufs
	now  time.Time // when the batch began: the time it is observed at
}

// appBatch is the heartbeats of one app in a batch.
type appBatch struct {
	agg *heartbeat.Aggregator
	obs []heartbeat.Observation
}

// batchOf is the batch of app's inventory.
func (in *ingest) batchOf(agg *heartbeat.Aggregator) *appBatch {
	for i := range in.bufs {
		if in.bufs[i].agg == agg {
			return &in.bufs[i]
		}
	}
	in.bufs = append(in.bufs, appBatch{agg: agg})
	return &in.bufs[len(in.bufs)-1]
}

// add decodes one stored heartbeat; fromScan: read back from the stream,
// where it was stored at m.Time; recovered: by the scan at start, so the
// agent counts at once.
func (in *ingest) add(m kv.StoredMsg, recovered, fromScan bool) {
	in.c.received.Add(1)
	if in.n == 0 {
		in.now = in.c.o.Clock.Now()
		if apps := in.c.apps.Load(); apps != in.apps {
			in.apps, in.bufs = apps, in.bufs[:0] // none of a removed app's kept
		}
	}
	now := in.now
	s := kv.StoredHeartbeatOf(m)
	hb, err := s.DecodeWith(&in.dec)
	if err != nil {
		in.c.reject(m.Subject, rejectReason(m), err)
		return
	}
	app, ok := in.apps.byKey[hb.App]
	if !ok {
		in.c.reject(m.Subject, rejectUnknownApp, fmt.Errorf("app %q is not in the config (apps: %s)", hb.App, strings.Join(in.apps.names(), ", ")))
		return
	}
	seen := now
	if fromScan && !m.Time.IsZero() && m.Time.Before(now) {
		// Heard by the stream before we read it: that is when the agent
		// was last alive, not now.
		seen = m.Time
	}
	if !fromScan {
		in.c.lag.observe(hb.At, now) // read live: its age is the lag (lag.go)
	}
	b := in.batchOf(app.agg)
	b.obs = append(b.obs, heartbeat.Observation{Heartbeat: *hb, At: seen, Recovered: recovered})
	if in.n++; in.n == feedBatch {
		in.flush()
	}
}

func (in *ingest) flush() {
	for i := range in.bufs {
		b := &in.bufs[i]
		if len(b.obs) > 0 {
			b.agg.ObserveBatch(b.obs)
			clear(b.obs)
			b.obs = b.obs[:0]
		}
	}
	in.n = 0
}

// stale reports whether the subscription may have missed heartbeats since
// the last scan: the connection reconnected, or the subscription dropped
// messages.
func (f *inventoryFeed) stale() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed || f.nc.Stats().Reconnects != f.reconnect || f.droppedNow() != f.dropped
}

func (f *inventoryFeed) droppedNow() int {
	if f.sub == nil {
		return 0
	}
	n, _ := f.sub.Dropped()
	return n
}

// rescan scans again when the subscription may have missed heartbeats, or
// the config gained an app (whose hosts' heartbeats were rejected until
// then).
func (f *inventoryFeed) rescan(ctx context.Context) {
	switch {
	case f.c.rescanWanted.Swap(false):
		f.c.o.Log.Info("reading the inventory again: the config has a new app")
	case f.stale():
		f.c.o.Log.Info("reading the inventory again: heartbeats may have been missed (a reconnect, or a slow subscription)")
	default:
		return
	}
	if err := f.scan(ctx, false); err != nil && ctx.Err() == nil {
		f.c.o.Log.Warn("reading the inventory failed; retrying next interval", slog.Any("err", err))
	}
}
