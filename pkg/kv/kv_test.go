package kv_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// ctxT is a context for one bus operation in a test: it fails the call
// rather than hang the test.
func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ensure starts a server and creates the fleet on it, in memory.
func ensure(t *testing.T) (*natstest.Server, *kv.Fleet) {
	t.Helper()
	s := natstest.Start(t)
	f, err := kv.Ensure(ctxT(t), s.JetStream("controller"), kv.Options{Memory: true})
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	return s, f
}

func streamConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	st, err := js.Stream(ctxT(t), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return st.CachedInfo().Config
}

func TestEnsure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		opts         kv.Options
		wantExpiry   time.Duration
		wantStatsTTL time.Duration
		wantStorage  jetstream.StorageType
	}{
		{name: "defaults in memory", opts: kv.Options{Memory: true}, wantExpiry: time.Hour, wantStatsTTL: time.Hour, wantStorage: jetstream.MemoryStorage},
		{name: "defaults on file", opts: kv.Options{}, wantExpiry: time.Hour, wantStatsTTL: time.Hour, wantStorage: jetstream.FileStorage},
		{name: "custom expiry and TTL", opts: kv.Options{Memory: true, AgentExpiry: 90 * time.Minute, StatsTTL: 5 * time.Minute},
			wantExpiry: 90 * time.Minute, wantStatsTTL: 5 * time.Minute, wantStorage: jetstream.MemoryStorage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := natstest.Start(t)
			js := s.JetStream("controller")
			f, err := kv.Ensure(ctxT(t), js, tc.opts)
			if err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			if f.JS == nil || f.HB == nil || f.Config == nil || f.Plan == nil || f.Stats == nil {
				t.Fatalf("Ensure returned a Fleet with nil handles: %+v", f)
			}

			hb := streamConfig(t, js, kv.StreamHB)
			type hbShape struct {
				Subjects          []string
				MaxMsgsPerSubject int64
				MaxAge            time.Duration
				Storage           jetstream.StorageType
				Replicas          int
				Discard           jetstream.DiscardPolicy
				AllowDirect       bool
			}
			wantHB := hbShape{
				Subjects:          []string{"fleet.hb.>"},
				MaxMsgsPerSubject: 1,
				MaxAge:            tc.wantExpiry,
				Storage:           tc.wantStorage,
				Replicas:          1,
				Discard:           jetstream.DiscardOld,
				AllowDirect:       true,
			}
			gotHB := hbShape{hb.Subjects, hb.MaxMsgsPerSubject, hb.MaxAge, hb.Storage, hb.Replicas, hb.Discard, hb.AllowDirect}
			if diff := cmp.Diff(wantHB, gotHB); diff != "" {
				t.Errorf("stream %s (-want +got):\n%s", kv.StreamHB, diff)
			}
			if hb.MaxMsgSize < heartbeat.MaxSize {
				t.Errorf("stream MaxMsgSize %d is below heartbeat.MaxSize %d", hb.MaxMsgSize, heartbeat.MaxSize)
			}

			type bucketShape struct {
				Name        string
				History     int64
				TTL         time.Duration
				Storage     jetstream.StorageType
				AllowDirect bool
				RePublish   *jetstream.RePublish
			}
			var gotBuckets []bucketShape
			for _, b := range []jetstream.KeyValue{f.Config, f.Plan, f.Stats} {
				cfg := streamConfig(t, js, "KV_"+b.Bucket())
				gotBuckets = append(gotBuckets, bucketShape{b.Bucket(), cfg.MaxMsgsPerSubject, cfg.MaxAge, cfg.Storage, cfg.AllowDirect, cfg.RePublish})
			}
			wantBuckets := []bucketShape{
				{Name: "fleet_config", History: 10, Storage: tc.wantStorage, AllowDirect: true},
				{Name: "fleet_plan", History: 5, Storage: tc.wantStorage, AllowDirect: true,
					RePublish: &jetstream.RePublish{Source: "$KV.fleet_plan.>", Destination: "fleet.plan.>"}},
				{Name: "fleet_stats", History: 1, TTL: tc.wantStatsTTL, Storage: tc.wantStorage, AllowDirect: true},
			}
			if diff := cmp.Diff(wantBuckets, gotBuckets); diff != "" {
				t.Errorf("buckets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnsureIdempotent(t *testing.T) {
	t.Parallel()
	s, f := ensure(t)
	js := s.JetStream("second-controller")
	if _, err := kv.Create(ctxT(t), f.Plan, kv.KeySpec, map[string]string{"target_version": "1.2.3"}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	hbSubject := heartbeat.SubjectFor("prod", "00000000-0000-4000-8000-000000000001")
	if _, err := js.Publish(ctxT(t), hbSubject, []byte("{}")); err != nil {
		t.Fatalf("publish: %v", err)
	}

	// A second controller starting up ensures again with the same options:
	// nothing is recreated or lost.
	f2, err := kv.Ensure(ctxT(t), js, kv.Options{Memory: true})
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	got, err := kv.Get[map[string]string](ctxT(t), f2.Plan, kv.KeySpec)
	if err != nil {
		t.Fatalf("Get after second Ensure: %v", err)
	}
	if diff := cmp.Diff(map[string]string{"target_version": "1.2.3"}, got.Value); diff != "" {
		t.Errorf("plan spec after second Ensure (-want +got):\n%s", diff)
	}
	if _, err := f2.HB.GetLastMsgForSubject(ctxT(t), hbSubject); err != nil {
		t.Errorf("heartbeat lost by second Ensure: %v", err)
	}

	// Ensure with new options brings the existing stream and buckets to them.
	if _, err := kv.Ensure(ctxT(t), js, kv.Options{Memory: true, AgentExpiry: 2 * time.Hour, StatsTTL: 10 * time.Minute}); err != nil {
		t.Fatalf("Ensure with new options: %v", err)
	}
	if got := streamConfig(t, js, kv.StreamHB).MaxAge; got != 2*time.Hour {
		t.Errorf("heartbeat MaxAge after re-Ensure = %v, want 2h", got)
	}
	if got := streamConfig(t, js, "KV_"+kv.BucketStats).MaxAge; got != 10*time.Minute {
		t.Errorf("stats TTL after re-Ensure = %v, want 10m", got)
	}
}

func TestOpen(t *testing.T) {
	t.Parallel()
	t.Run("without Ensure", func(t *testing.T) {
		t.Parallel()
		s := natstest.Start(t)
		js := s.JetStream("fleetctl")
		f, err := kv.Open(ctxT(t), js)
		if err == nil {
			t.Fatalf("Open on an empty server succeeded: %+v", f)
		}
		if !strings.Contains(err.Error(), "controller") {
			t.Errorf("Open error %q does not point at the controller", err)
		}
		// Open must not create anything.
		names := js.StreamNames(ctxT(t))
		var got []string
		for n := range names.Name() {
			got = append(got, n)
		}
		if len(got) != 0 {
			t.Errorf("Open created streams %v", got)
		}
	})
	t.Run("after Ensure", func(t *testing.T) {
		t.Parallel()
		s, f := ensure(t)
		rev, err := kv.Create(ctxT(t), f.Config, kv.KeyConfig, map[string]string{"mode": "enabled"})
		if err != nil {
			t.Fatal(err)
		}
		o, err := kv.Open(ctxT(t), s.JetStream("fleetctl"))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		got, err := kv.Get[map[string]string](ctxT(t), o.Config, kv.KeyConfig)
		if err != nil {
			t.Fatalf("Get through Open's handle: %v", err)
		}
		if got.Revision != rev || got.Value["mode"] != "enabled" {
			t.Errorf("Get = %+v, want mode enabled at revision %d", got, rev)
		}
		for _, b := range []jetstream.KeyValue{o.Config, o.Plan, o.Stats} {
			if b == nil {
				t.Fatalf("Open returned nil bucket handles: %+v", o)
			}
		}
		if o.HB == nil || o.HB.CachedInfo().Config.Name != kv.StreamHB {
			t.Errorf("Open returned stream %v, want %s", o.HB, kv.StreamHB)
		}
	})
}

// TestPlanRepublish: agents follow the plan with a core subscription, not a
// consumer; every write must arrive with its revision.
func TestPlanRepublish(t *testing.T) {
	t.Parallel()
	s, f := ensure(t)
	nc := s.Conn("agent")
	sub, err := nc.SubscribeSync("fleet.plan.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		key         string
		value       string
		wantSubject string
	}{
		{name: "spec", key: kv.KeySpec, value: `{"target_version":"1.2.3"}`, wantSubject: "fleet.plan.spec"},
		{name: "group status", key: kv.GroupKey("prod"), value: `{"state":"canary"}`, wantSubject: "fleet.plan.group.prod"},
		{name: "spec again", key: kv.KeySpec, value: `{"target_version":"1.2.4"}`, wantSubject: "fleet.plan.spec"},
	}
	for _, tc := range tests {
		// Not parallel: the subscription sees the writes in order.
		t.Run(tc.name, func(t *testing.T) {
			rev, err := f.Plan.Put(ctxT(t), tc.key, []byte(tc.value))
			if err != nil {
				t.Fatalf("Put: %v", err)
			}
			msg, err := sub.NextMsg(10 * time.Second)
			if err != nil {
				t.Fatalf("no republished message: %v", err)
			}
			got := []string{msg.Subject, msg.Header.Get(jetstream.SequenceHeader), string(msg.Data)}
			want := []string{tc.wantSubject, strconv.FormatUint(rev, 10), tc.value}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("republished [subject, Nats-Sequence, data] (-want +got):\n%s", diff)
			}
		})
	}
}

type doc struct {
	Name string `json:"name"`
	N    int    `json:"n"`
}

func TestGetCreateUpdateSave(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)
	b := f.Config
	ctx := ctxT(t)

	if _, err := kv.Get[doc](ctx, b, "k"); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	rev1, err := kv.Create(ctx, b, "k", doc{"a", 1})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := kv.Create(ctx, b, "k", doc{"b", 2}); !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("second Create: %v, want ErrConflict", err)
	}
	wantGet(t, b, "k", kv.Entry[doc]{Value: doc{"a", 1}, Revision: rev1})

	rev2, err := kv.Update(ctx, b, "k", doc{"c", 3}, rev1)
	if err != nil {
		t.Fatalf("Update at the current revision: %v", err)
	}
	if rev2 <= rev1 {
		t.Errorf("Update returned revision %d, not after %d", rev2, rev1)
	}
	if _, err := kv.Update(ctx, b, "k", doc{"stale", 0}, rev1); !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("Update with stale revision: %v, want ErrConflict", err)
	}
	wantGet(t, b, "k", kv.Entry[doc]{Value: doc{"c", 3}, Revision: rev2})

	if _, err := kv.Update(ctx, b, "missing", doc{"x", 0}, rev2); !errors.Is(err, kv.ErrConflict) {
		t.Errorf("Update of a missing key: %v, want ErrConflict", err)
	}
	if _, err := kv.Get[doc](ctx, b, "missing"); !errors.Is(err, kv.ErrNotFound) {
		t.Errorf("failed Update created the key: Get = %v", err)
	}

	// Save: Create at revision 0, Update otherwise.
	if _, err := kv.Save(ctx, b, "k", doc{"blind", 0}, 0); !errors.Is(err, kv.ErrConflict) {
		t.Errorf("Save at revision 0 over an existing key: %v, want ErrConflict", err)
	}
	if _, err := kv.Save(ctx, b, "k", doc{"stale", 0}, rev1); !errors.Is(err, kv.ErrConflict) {
		t.Errorf("Save with stale revision: %v, want ErrConflict", err)
	}
	wantGet(t, b, "k", kv.Entry[doc]{Value: doc{"c", 3}, Revision: rev2})
	rev3, err := kv.Save(ctx, b, "k", doc{"d", 4}, rev2)
	if err != nil {
		t.Fatalf("Save at the current revision: %v", err)
	}
	wantGet(t, b, "k", kv.Entry[doc]{Value: doc{"d", 4}, Revision: rev3})
	revNew, err := kv.Save(ctx, b, "new", doc{"e", 5}, 0)
	if err != nil {
		t.Fatalf("Save of a new key: %v", err)
	}
	wantGet(t, b, "new", kv.Entry[doc]{Value: doc{"e", 5}, Revision: revNew})

	// A deleted key is not found, and can be created again.
	if err := b.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get[doc](ctx, b, "k"); !errors.Is(err, kv.ErrNotFound) {
		t.Errorf("Get of a deleted key: %v, want ErrNotFound", err)
	}
	rev4, err := kv.Save(ctx, b, "k", doc{"f", 6}, 0)
	if err != nil {
		t.Fatalf("Save at revision 0 after delete: %v", err)
	}
	wantGet(t, b, "k", kv.Entry[doc]{Value: doc{"f", 6}, Revision: rev4})
}

func wantGet(t *testing.T, b jetstream.KeyValue, key string, want kv.Entry[doc]) {
	t.Helper()
	got, err := kv.Get[doc](ctxT(t), b, key)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get %s (-want +got):\n%s", key, diff)
	}
}

func TestGetCorrupt(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)
	tests := []struct {
		name  string
		value string
	}{
		{name: "not JSON", value: "garbage"},
		{name: "truncated JSON", value: `{"name":"a"`},
		{name: "wrong type", value: `{"name":42}`},
		{name: "array", value: `[1,2]`},
		{name: "empty", value: ``},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("bad%d", i)
			if _, err := f.Config.Put(ctxT(t), key, []byte(tc.value)); err != nil {
				t.Fatal(err)
			}
			_, err := kv.Get[doc](ctxT(t), f.Config, key)
			if !errors.Is(err, kv.ErrCorrupt) {
				t.Errorf("Get of %q: %v, want ErrCorrupt", tc.value, err)
			}
		})
	}
}

// TestConcurrentUpdatesLoseNothing: writers doing read-modify-write with
// Update and retrying on ErrConflict never lose an increment.
func TestConcurrentUpdatesLoseNothing(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)
	if _, err := kv.Create(ctxT(t), f.Config, "counter", doc{N: 0}); err != nil {
		t.Fatal(err)
	}
	const writers, increments = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	conflicts := make(chan int, writers)
	for range writers {
		wg.Go(func() {
			ctx := t.Context()
			n := 0
			for done := 0; done < increments; {
				e, err := kv.Get[doc](ctx, f.Config, "counter")
				if err != nil {
					errs <- err
					return
				}
				e.Value.N++
				_, err = kv.Update(ctx, f.Config, "counter", e.Value, e.Revision)
				switch {
				case errors.Is(err, kv.ErrConflict):
					n++
				case err != nil:
					errs <- err
					return
				default:
					done++
				}
			}
			conflicts <- n
		})
	}
	wg.Wait()
	close(errs)
	close(conflicts)
	for err := range errs {
		t.Fatalf("writer: %v", err)
	}
	got, err := kv.Get[doc](ctxT(t), f.Config, "counter")
	if err != nil {
		t.Fatal(err)
	}
	if got.Value.N != writers*increments {
		t.Errorf("counter = %d, want %d (an update was lost)", got.Value.N, writers*increments)
	}
	total := 0
	for n := range conflicts {
		total += n
	}
	t.Logf("%d conflicts retried", total)
}

func TestMergeStats(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	counts := func(n int) rollout.Counts {
		return rollout.Counts{"1.2.3": {Count: n, LowestID: "00000000-0000-4000-8000-000000000001"}}
	}
	entry := func(group, controller string, age time.Duration, n int) kv.Stats {
		return kv.Stats{V: 1, ControllerID: controller, Group: group, At: now.Add(-age), Agents: n, Versions: counts(n)}
	}
	tests := []struct {
		name    string
		entries []kv.Stats
		want    []kv.GroupStats
	}{
		{name: "none", entries: nil, want: nil},
		{name: "one fresh", entries: []kv.Stats{entry("prod", "c1", 10*time.Second, 5)},
			want: []kv.GroupStats{{Stats: entry("prod", "c1", 10*time.Second, 5), Reporting: 1}}},
		{name: "exactly one minute old is fresh", entries: []kv.Stats{entry("prod", "c1", time.Minute, 5)},
			want: []kv.GroupStats{{Stats: entry("prod", "c1", time.Minute, 5), Reporting: 1}}},
		{name: "older than a minute is ignored", entries: []kv.Stats{entry("prod", "c1", time.Minute+time.Nanosecond, 5)}, want: nil},
		{
			name: "two controllers: newest wins, not the sum",
			entries: []kv.Stats{
				entry("prod", "c1", 20*time.Second, 100),
				entry("prod", "c2", 5*time.Second, 101),
				entry("prod", "c3", 40*time.Second, 99),
			},
			want: []kv.GroupStats{{Stats: entry("prod", "c2", 5*time.Second, 101), Reporting: 3}},
		},
		{
			name: "two apps' groups of one name stay apart",
			entries: []kv.Stats{
				func() kv.Stats { e := entry("prod", "c1", 5*time.Second, 7); e.App = "db"; return e }(),
				entry("prod", "c1", 20*time.Second, 100),
			},
			want: []kv.GroupStats{
				{Stats: entry("prod", "c1", 20*time.Second, 100), Reporting: 1},
				{Stats: func() kv.Stats { e := entry("prod", "c1", 5*time.Second, 7); e.App = "db"; return e }(), Reporting: 1},
			},
		},
		{
			name: "newest first in the input",
			entries: []kv.Stats{
				entry("prod", "c2", 5*time.Second, 101),
				entry("prod", "c1", 20*time.Second, 100),
			},
			want: []kv.GroupStats{{Stats: entry("prod", "c2", 5*time.Second, 101), Reporting: 2}},
		},
		{
			name: "a stale newer-looking controller does not count",
			entries: []kv.Stats{
				entry("prod", "dead", 10*time.Minute, 500),
				entry("prod", "c1", 30*time.Second, 100),
			},
			want: []kv.GroupStats{{Stats: entry("prod", "c1", 30*time.Second, 100), Reporting: 1}},
		},
		{
			name: "groups sorted",
			entries: []kv.Stats{
				entry("staging", "c1", time.Second, 3),
				entry("canary", "c1", time.Second, 1),
				entry("prod", "c1", time.Second, 2),
				entry("prod", "c2", 2*time.Second, 2),
				entry("old", "c1", time.Hour, 7),
			},
			want: []kv.GroupStats{
				{Stats: entry("canary", "c1", time.Second, 1), Reporting: 1},
				{Stats: entry("prod", "c1", time.Second, 2), Reporting: 2},
				{Stats: entry("staging", "c1", time.Second, 3), Reporting: 1},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := kv.MergeStats(tc.entries, now)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("MergeStats (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadStats(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)

	got, err := f.ReadStats(ctxT(t))
	if err != nil {
		t.Fatalf("ReadStats of an empty bucket: %v", err)
	}
	if len(got) != 0 {
		t.Fatalf("ReadStats of an empty bucket = %+v, want nothing", got)
	}

	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	want := []kv.Stats{
		{V: 1, ControllerID: "c1", Group: "prod", At: at, Agents: 2, Versions: rollout.Counts{"1.2.3": {Count: 2, FailedCount: 1, LowestID: "00000000-0000-4000-8000-000000000001"}}},
		{V: 1, ControllerID: "c2", Group: "prod", At: at.Add(time.Second), Agents: 2, Versions: rollout.Counts{"1.2.3": {Count: 2}}},
		{V: 1, ControllerID: "c1", Group: "staging", At: at, Agents: 1, Versions: rollout.Counts{rollout.NoVersion: {Count: 1}}},
	}
	for _, s := range want {
		if _, err := kv.Create(ctxT(t), f.Stats, kv.StatsKey(s.Group, s.ControllerID), s); err != nil {
			t.Fatal(err)
		}
	}
	// Rewrites replace (history 1), deletes disappear.
	gone := kv.Stats{V: 1, ControllerID: "c9", Group: "prod", At: at}
	if _, err := kv.Create(ctxT(t), f.Stats, kv.StatsKey("prod", "c9"), gone); err != nil {
		t.Fatal(err)
	}
	if err := f.Stats.Delete(ctxT(t), kv.StatsKey("prod", "c9")); err != nil {
		t.Fatal(err)
	}
	want[0].Agents = 3
	if _, err := f.Stats.Put(ctxT(t), kv.StatsKey("prod", "c1"), mustJSON(t, want[0])); err != nil {
		t.Fatal(err)
	}

	got, err = f.ReadStats(ctxT(t))
	if err != nil {
		t.Fatalf("ReadStats: %v", err)
	}
	byKey := func(s []kv.Stats) {
		sort.Slice(s, func(i, j int) bool {
			return kv.StatsKey(s[i].Group, s[i].ControllerID) < kv.StatsKey(s[j].Group, s[j].ControllerID)
		})
	}
	byKey(want)
	byKey(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadStats (-want +got):\n%s", diff)
	}

	// A corrupt entry is reported, not skipped.
	if _, err := f.Stats.Put(ctxT(t), kv.StatsKey("prod", "broken"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadStats(ctxT(t)); !errors.Is(err, kv.ErrCorrupt) {
		t.Errorf("ReadStats with a corrupt entry: %v, want ErrCorrupt", err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func agentID(n int) rollout.AgentID {
	return rollout.AgentID(fmt.Sprintf("00000000-0000-4000-8000-%012x", n))
}

// publishBeat stores a heartbeat of agent id in group with sequence seq.
func publishBeat(t *testing.T, js jetstream.JetStream, group string, id rollout.AgentID, seq uint64) {
	t.Helper()
	data, err := heartbeat.Encode(&heartbeat.Heartbeat{V: 1, AgentID: id, Group: group, At: time.Now().UTC(), Seq: seq})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctxT(t), heartbeat.SubjectFor(group, id), data); err != nil {
		t.Fatalf("publish heartbeat: %v", err)
	}
}

// lastHeartbeats calls LastHeartbeats and returns subject → heartbeat seq,
// failing on duplicates and on a call that only returned after a fetch
// timed out.
func lastHeartbeats(t *testing.T, f *kv.Fleet, group string) (map[string]uint64, bool) {
	t.Helper()
	start := time.Now()
	stored, err := f.LastHeartbeats(ctxT(t), group)
	if err != nil {
		t.Fatalf("LastHeartbeats(%q): %v", group, err)
	}
	// The fetch waits up to 5s for messages that do not come; a correct
	// read never does.
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("LastHeartbeats(%q) took %v: it waited for messages that were not there", group, took)
	}
	if stored == nil {
		return nil, true
	}
	out := make(map[string]uint64)
	for _, s := range stored {
		hb, err := heartbeat.DecodeFrom(s.Subject, s.Data)
		if err != nil {
			t.Fatalf("stored heartbeat on %s: %v", s.Subject, err)
		}
		if _, dup := out[s.Subject]; dup {
			t.Errorf("LastHeartbeats(%q) returned %s twice", group, s.Subject)
		}
		if s.Stored.IsZero() || time.Since(s.Stored) > time.Minute {
			t.Errorf("%s: stored time %v is not the time it was published", s.Subject, s.Stored)
		}
		out[s.Subject] = hb.Seq
	}
	return out, false
}

func TestLastHeartbeats(t *testing.T) {
	t.Parallel()
	s, f := ensure(t)
	js := s.JetStream("agents")

	if got, isNil := lastHeartbeats(t, f, ""); !isNil {
		t.Fatalf("LastHeartbeats on an empty stream = %v, want nil", got)
	}
	if got, isNil := lastHeartbeats(t, f, "prod"); !isNil {
		t.Fatalf("LastHeartbeats(prod) on an empty stream = %v, want nil", got)
	}

	a1, a2, a3, a4 := agentID(1), agentID(2), agentID(3), agentID(4)
	for _, b := range []struct {
		group string
		id    rollout.AgentID
		seq   uint64
	}{
		{"prod", a1, 1}, {"prod", a2, 1}, {"prod", a1, 2}, {"prod-eu", a3, 1},
		{"staging", a4, 1}, {"prod-eu", a3, 2}, {"prod", a1, 3},
	} {
		publishBeat(t, js, b.group, b.id, b.seq)
	}
	sub := heartbeat.SubjectFor
	tests := []struct {
		name  string
		group string
		want  map[string]uint64 // nil: want a nil result
	}{
		{name: "all groups", group: "", want: map[string]uint64{
			sub("prod", a1): 3, sub("prod", a2): 1, sub("prod-eu", a3): 2, sub("staging", a4): 1}},
		{name: "one group", group: "prod", want: map[string]uint64{sub("prod", a1): 3, sub("prod", a2): 1}},
		{name: "group whose name extends another", group: "prod-eu", want: map[string]uint64{sub("prod-eu", a3): 2}},
		{name: "single agent group", group: "staging", want: map[string]uint64{sub("staging", a4): 1}},
		{name: "group with no agents", group: "nope", want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, isNil := lastHeartbeats(t, f, tc.group)
			if tc.want == nil {
				if !isNil {
					t.Errorf("LastHeartbeats(%q) = %v, want nil", tc.group, got)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("LastHeartbeats(%q): subject → seq (-want +got):\n%s", tc.group, diff)
			}
		})
	}
}

// TestLastHeartbeatsMany reads more agents than one fetch batch holds.
func TestLastHeartbeatsMany(t *testing.T) {
	t.Parallel()
	s, f := ensure(t)
	js := s.JetStream("agents")
	const n = 2500
	groups := []string{"blue", "green"}
	for round := uint64(1); round <= 2; round++ {
		for i := range n {
			g := groups[i%2]
			data, err := heartbeat.Encode(&heartbeat.Heartbeat{V: 1, AgentID: agentID(i), Group: g, At: time.Now().UTC(), Seq: round})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.PublishAsync(heartbeat.SubjectFor(g, agentID(i)), data); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctxT(t).Done():
			t.Fatal("async publishes not acknowledged in time")
		}
	}
	tests := []struct {
		group string
		want  int
	}{{"", n}, {"blue", n / 2}, {"green", n / 2}}
	for _, tc := range tests {
		t.Run("group "+tc.group, func(t *testing.T) {
			got, _ := lastHeartbeats(t, f, tc.group)
			if len(got) != tc.want {
				t.Errorf("LastHeartbeats(%q) returned %d agents, want %d", tc.group, len(got), tc.want)
			}
			for subject, seq := range got {
				if seq != 2 {
					t.Fatalf("%s: seq %d, want the last beat (2)", subject, seq)
				}
			}
		})
	}
}
