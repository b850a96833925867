package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"

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
	nc  *nats.Conn
	c   *Controller
	sub *nats.Subscription

	mu        sync.Mutex
	scanning  bool
	held      []*nats.Msg
	floor     uint64 // the last sequence the latest scan read
	dropped   int    // sub.Dropped() when the latest scan started
	reconnect uint64 // nc.Stats().Reconnects when the latest scan started
	failed    bool   // the latest scan failed
}

// Subscription bounds: the stream republishes every heartbeat, and a
// controller busy with a pass must not lose them; past these it drops and
// rescans.
const (
	feedPendingMsgs  = 1 << 20
	feedPendingBytes = 512 << 20
)

func (f *inventoryFeed) start() error {
	sub, err := f.nc.Subscribe(kv.InventoryRepublish+">", f.live)
	if err != nil {
		return fmt.Errorf("follow %s: %w", kv.InventoryRepublish+">", err)
	}
	if err := sub.SetPendingLimits(feedPendingMsgs, feedPendingBytes); err != nil {
		return err
	}
	f.sub = sub
	return nil
}

func (f *inventoryFeed) stop() {
	if f.sub != nil {
		_ = f.sub.Unsubscribe()
	}
}

// live takes one republished heartbeat.
func (f *inventoryFeed) live(msg *nats.Msg) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.scanning {
		f.held = append(f.held, msg)
		return
	}
	f.apply(msg)
}

// apply observes a republished heartbeat newer than the last scan (with mu
// held: one at a time, in the order the stream stored them).
func (f *inventoryFeed) apply(msg *nats.Msg) {
	m, err := kv.ParseStored(msg.Header, msg.Data)
	if err != nil {
		f.c.received.Add(1)
		f.c.reject(msg.Subject, rejectNotRepublished, fmt.Errorf("not a heartbeat republished by %s: %w", kv.StreamHB, err))
		return
	}
	if m.Stream != kv.StreamHB || m.Sequence <= f.floor {
		return
	}
	f.c.observe(m, false, false)
}

// scan reads the whole stream and then what arrived meanwhile. recovered
// marks the first scan: its agents count at once (Aggregator.Observe).
func (f *inventoryFeed) scan(ctx context.Context, recovered bool) error {
	f.mu.Lock()
	f.scanning, f.held = true, nil
	f.dropped, f.reconnect = f.droppedNow(), f.nc.Stats().Reconnects
	f.mu.Unlock()
	last, err := kv.ScanFrom(ctx, f.nc, kv.StreamHB, "", 1, func(m kv.StoredMsg) error {
		f.c.observe(m, recovered, true)
		return nil
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scanning, f.failed = false, err != nil
	if err == nil {
		f.floor = last
	} // else keep what arrived meanwhile too: the next scan starts over
	for _, msg := range f.held {
		f.apply(msg)
	}
	f.held = nil
	return err
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

// rescan scans again when the subscription may have missed heartbeats.
func (f *inventoryFeed) rescan(ctx context.Context) {
	if !f.stale() {
		return
	}
	f.c.o.Log.Info("reading the inventory again: heartbeats may have been missed (a reconnect, or a slow subscription)")
	if err := f.scan(ctx, false); err != nil && ctx.Err() == nil {
		f.c.o.Log.Warn("reading the inventory failed; retrying next interval", slog.Any("err", err))
	}
}
