package controller_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestGroupWriteFailureSparesOthers: a group whose status the bus will not
// store (here: the plan stream's max message size, lowered under the
// status's size) does not stop the pass: the group after it in the
// evaluation order is still written. Once the bus takes it again, the
// group's status is written. (Before: Reconcile returned at the first
// failed write, every pass, and the groups after it never moved.)
func TestGroupWriteFailureSparesOthers(t *testing.T) {
	f := newFixture(t)
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("big"), rollout.DefaultGroup("small")}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}
	// big's status as an operator's long note left it: 20 KiB.
	big := rollout.GroupStatus{V: rollout.SchemaVersion, Group: "big", State: rollout.StateUnstarted, Reason: strings.Repeat("n", 20<<10),
		Since: f.clk.Now().UTC(), TargetVersion: "2.0.0", StartVersion: "1.0.0"}
	bigRev, err := kv.Save(f.ctx, f.fleet.Plan, kv.GroupKey("big"), big, 0)
	if err != nil {
		t.Fatal(err)
	}
	setMaxMsgSize := func(n int32) {
		t.Helper()
		st, err := f.fleet.JS.Stream(f.ctx, kv.StreamOf(kv.BucketPlan))
		if err != nil {
			t.Fatal(err)
		}
		sc := st.CachedInfo().Config
		sc.MaxMsgSize = n
		if _, err := f.fleet.JS.UpdateStream(f.ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	setMaxMsgSize(16 << 10)

	f.startController("c1")
	var small rollout.GroupStatus
	natstest.Eventually(t, waitLong, func() error {
		e, err := f.fleet.ReadGroupStatus(f.ctx, "small")
		if err != nil {
			return fmt.Errorf("small: %w", err)
		}
		small = e.Value
		return nil
	})
	if small.TargetVersion != "2.0.0" {
		t.Errorf("small's status %+v: want one for 2.0.0", small)
	}
	if e, err := f.fleet.ReadGroupStatus(f.ctx, "big"); err != nil || e.Revision != bigRev {
		t.Fatalf("big: revision %d (%v), want %d: the bus should refuse its write", e.Revision, err, bigRev)
	}

	setMaxMsgSize(-1)
	f.advance(controller.DefaultReconcileInterval)
	natstest.Eventually(t, waitLong, func() error {
		e, err := f.fleet.ReadGroupStatus(f.ctx, "big")
		if err != nil || e.Revision == bigRev {
			return fmt.Errorf("big: revision %d (%v): not written yet", e.Revision, err)
		}
		return nil
	})
}
