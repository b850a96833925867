package kv_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestGroupStatusStoredBounded: a group status carrying a peer's huge text
// (a 1.5 MB Prometheus label in a check's series and the halt reason: more
// than the server's 1 MiB max payload) is stored, created and updated,
// under rollout.MaxStatusBytes with its halt, state and check intact, and
// reads back valid. One that cannot be bounded (queries longer than a
// valid config has) is refused with rollout.ErrStatusTooLarge and nothing
// is written.
func TestGroupStatusStoredBounded(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)
	ctx := ctxT(t)
	label := `{instance="` + strings.Repeat("x", 1500<<10) + `"}`
	v := 0.5
	st := rollout.GroupStatus{V: rollout.SchemaVersion, Group: "prod", State: rollout.StateCanary, Reason: "started",
		Since: time.Now().UTC(), TargetVersion: "2.0.0", StartVersion: "1.0.0",
		Halted: true, HaltReason: "analysis failed: check \"errors\" (series " + label + ")", HaltedAt: time.Now().UTC(),
		Analysis: []rollout.CheckStatus{{Name: "errors", Query: `max(errors{version="2.0.0"})`, Success: "< 0.01",
			Interval: rollout.Duration(time.Second), Count: 3, InconclusiveLimit: 5, Measurements: 1,
			Result: rollout.ResultFailed, Value: &v, Series: label, Detail: "0.5 does not meet success < 0.01"}}}
	key := kv.GroupKey("prod")
	rev, err := kv.Save(ctx, f.Plan, key, st, 0)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	st.Reason = "still " + label
	if rev, err = kv.Save(ctxT(t), f.Plan, key, st, rev); err != nil {
		t.Fatalf("update: %v", err)
	}
	raw, err := f.Plan.Get(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(raw.Value()); n >= rollout.MaxStatusBytes {
		t.Errorf("stored %d bytes, want under %d", n, rollout.MaxStatusBytes)
	}
	back, err := f.ReadGroupStatus(ctxT(t), "prod")
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	got := back.Value
	if !got.Halted || got.State != rollout.StateCanary || got.Analysis[0].Result != rollout.ResultFailed ||
		got.Analysis[0].Query != st.Analysis[0].Query || !strings.HasPrefix(got.HaltReason, "analysis failed: check \"errors\"") {
		t.Errorf("read back %+v: want the halt, state and check kept", got)
	}

	st.Analysis[0].Query = strings.Repeat(">", 60<<10)
	if _, err := kv.Save(ctxT(t), f.Plan, key, st, rev); !errors.Is(err, rollout.ErrStatusTooLarge) {
		t.Errorf("a status that cannot be bounded: %v, want rollout.ErrStatusTooLarge", err)
	}
	if e, err := f.ReadGroupStatus(ctxT(t), "prod"); err != nil || e.Revision != rev {
		t.Errorf("after the refused write: revision %d (%v), want %d", e.Revision, err, rev)
	}
}
