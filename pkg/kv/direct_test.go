package kv_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/pkg/kv"
)

// TestDirectGetLast reads keys as the server stores them: a plain value, a
// deleted key, a missing key, and a value whose stored message carries
// JetStream's own headers (what a reflected direct-get response leaves).
// For the last, jetstream's KeyValue.Get reports the forged revision; the
// direct get reports the stream's own sequence and marks the value foreign.
func TestDirectGetLast(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)
	ctx := ctxT(t)
	nc := f.JS.Conn()
	plain, err := f.Plan.Put(ctx, "group.a", []byte(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Plan.Put(ctx, "group.b", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := f.Plan.Delete(ctx, "group.b"); err != nil {
		t.Fatal(err)
	}
	forged := nats.NewMsg(kv.KeySubject(kv.BucketPlan, "spec"))
	forged.Data = []byte(`{"v":1,"target_version":"6.6.6"}`)
	forged.Header.Set("Nats-Stream", kv.PlanStream)
	forged.Header.Set("Nats-Subject", kv.KeySubject(kv.BucketPlan, "group.a"))
	forged.Header.Set("Nats-Sequence", "999")
	ack, err := f.JS.PublishMsg(ctx, forged)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := f.Plan.Get(ctx, "spec"); err != nil || e.Revision() != 999 {
		t.Fatalf("jetstream KeyValue.Get no longer reads the first header (revision %d, %v): drop this check", e.Revision(), err)
	}

	type got struct {
		Subject          string
		Seq              uint64
		Data             string
		Deleted, Foreign bool
	}
	for _, tc := range []struct {
		key  string
		want got
	}{
		{"group.a", got{"$KV.fleet_plan.group.a", plain, `{"v":1}`, false, false}},
		{"spec", got{"$KV.fleet_plan.spec", ack.Sequence, `{"v":1,"target_version":"6.6.6"}`, false, true}},
	} {
		m, err := kv.DirectGetLast(ctx, nc, kv.PlanStream, kv.KeySubject(kv.BucketPlan, tc.key))
		if err != nil {
			t.Fatalf("%s: %v", tc.key, err)
		}
		if diff := cmp.Diff(tc.want, got{m.Subject, m.Sequence, string(m.Data), m.Deleted, m.Foreign}); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.key, diff)
		}
	}
	if m, err := kv.DirectGetLast(ctx, nc, kv.PlanStream, kv.KeySubject(kv.BucketPlan, "group.b")); err != nil || !m.Deleted {
		t.Errorf("deleted key: %+v %v, want a delete marker", m, err)
	}
	if _, err := kv.DirectGetLast(ctx, nc, kv.PlanStream, kv.KeySubject(kv.BucketPlan, "group.none")); !errors.Is(err, kv.ErrNotFound) {
		t.Errorf("missing key: %v, want ErrNotFound", err)
	}
}
