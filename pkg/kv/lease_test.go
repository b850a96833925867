package kv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

func TestLeaseOneHolderFailoverAndFencing(t *testing.T) {
	srv := natstest.Start(t)
	ctx := context.Background()
	js := srv.JetStream("lease")
	f, err := kv.Ensure(ctx, js, kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Second
	a := &kv.Lease{Bucket: f.Stats, JS: js, Key: kv.KeyLeader, Holder: "a", TTL: ttl}
	b := &kv.Lease{Bucket: f.Stats, JS: js, Key: kv.KeyLeader, Holder: "b", TTL: ttl}
	now := time.Now()

	if held, err := a.Campaign(ctx, now); err != nil || !held {
		t.Fatalf("a: first campaign: held=%v err=%v, want held", held, err)
	}
	if held, err := b.Campaign(ctx, now); err != nil || held {
		t.Fatalf("b: campaign against a live lease: held=%v err=%v, want not held", held, err)
	}
	// Renewals keep it, and keep the TTL (a Put would drop it).
	for i := range 3 {
		if held, err := a.Campaign(ctx, now); err != nil || !held {
			t.Fatalf("a: renewal %d: held=%v err=%v", i, held, err)
		}
	}
	e, err := kv.Get[kv.LeaseValue](ctx, f.Stats, kv.KeyLeader)
	if err != nil || e.Value.Holder != "a" {
		t.Fatalf("lease value: %+v, %v", e.Value, err)
	}
	// The stats reader does not mistake the lease for stats.
	if stats, err := f.ReadStats(ctx); err != nil || len(stats) != 0 {
		t.Fatalf("ReadStats with only a lease present: %v, %v", stats, err)
	}

	// a stops renewing (crashed): the key expires by its TTL and b takes over.
	natstest.Eventually(t, 10*ttl, func() error {
		held, err := b.Campaign(ctx, time.Now())
		if err != nil {
			return err
		}
		if !held {
			return fmt.Errorf("b has not taken the lease yet")
		}
		return nil
	})
	// a comes back and tries to renew its old lease: fenced off, no steal.
	if held, err := a.Campaign(ctx, time.Now()); err != nil || held {
		t.Fatalf("a: renewal after losing the lease: held=%v err=%v, want not held", held, err)
	}
	e, err = kv.Get[kv.LeaseValue](ctx, f.Stats, kv.KeyLeader)
	if err != nil || e.Value.Holder != "b" {
		t.Fatalf("after a's stale renewal the holder is %+v (%v), want b", e.Value, err)
	}

	// A clean release hands over at once, without waiting for the TTL.
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if held, err := a.Campaign(ctx, time.Now()); err != nil || !held {
		t.Fatalf("a after b released: held=%v err=%v, want held", held, err)
	}
	raw, _ := f.Stats.Get(ctx, kv.KeyLeader)
	var v map[string]any
	if err := json.Unmarshal(raw.Value(), &v); err != nil || v["v"] != float64(1) {
		t.Errorf("lease value is not readable JSON with v=1: %s", raw.Value())
	}
}
