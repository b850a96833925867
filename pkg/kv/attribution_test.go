package kv_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/kv"
)

// TestAuditReach: the audit trail reaches back to its creation while it
// has lost nothing; once records left it, to the oldest it still holds
// (the newest it held when it holds none), and a minute more.
func TestAuditReach(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)
	ctx := ctxT(t)
	s, err := f.JS.Stream(ctx, kv.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	created := s.CachedInfo().Created
	reach, err := f.AuditReach(ctx)
	if err != nil || !reach.Equal(created) {
		t.Fatalf("fresh stream: reach %v, %v, want its creation %v", reach, err, created)
	}
	for i := range 3 {
		r := kv.AuditRecord{V: 1, At: time.Now().UTC(), Actor: "alice", Command: "plan set", Bucket: kv.BucketPlan, Key: kv.KeySpec, Revision: uint64(10 + i)}
		if err := f.PublishAudit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	revs, err := f.AuditedRevisions(ctx, created)
	if want := map[string]map[uint64]bool{"fleet_plan/spec": {10: true, 11: true, 12: true}}; err != nil || !cmp.Equal(revs, want) {
		t.Errorf("AuditedRevisions: %v, %v, want %v", revs, err, want)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSequence(3)); err != nil {
		t.Fatal(err)
	}
	third, err := s.GetMsg(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	reach, err = f.AuditReach(ctx)
	if want := third.Time.Add(time.Minute); err != nil || !reach.Equal(want) {
		t.Errorf("records 1-2 gone: reach %v, %v, want the oldest left plus a minute, %v", reach, err, want)
	}
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	reach, err = f.AuditReach(ctx)
	if want := third.Time.Add(time.Minute); err != nil || !reach.Equal(want) {
		t.Errorf("every record gone: reach %v, %v, want the newest it held plus a minute, %v", reach, err, want)
	}
	if _, _, err := kv.ReadAttribution(ctx, f.JS.Conn()); !errors.Is(err, kv.ErrNotFound) {
		t.Errorf("no attribution state yet: %v, want ErrNotFound", err)
	}
	st := kv.AttributionState{V: 1, Keys: map[string]kv.AttributionKey{"fleet_plan/spec": {Checked: 12, Unattributed: 11}}, At: time.Now().UTC(), By: "c1"}
	rev, err := kv.SaveAttribution(ctx, f.JS, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.SaveAttribution(ctx, f.JS, st, 0); !errors.Is(err, kv.ErrConflict) {
		t.Errorf("second create: %v, want ErrConflict", err)
	}
	got, gotRev, err := kv.ReadAttribution(ctx, f.JS.Conn())
	if err != nil || gotRev != rev || !cmp.Equal(got.Keys, st.Keys) {
		t.Errorf("ReadAttribution: %+v rev %d, %v", got, gotRev, err)
	}
	stats, _, err := f.ReadValidStats(ctx)
	if err != nil || len(stats) != 0 {
		t.Errorf("the attribution state read as stats: %v, %v", stats, err)
	}
}
