package kv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestEnsureSplitsTheTrail: the operators' records and the rollout events
// live in two streams, each bounded on its own; the events' stream takes
// small messages only.
func TestEnsureSplitsTheTrail(t *testing.T) {
	t.Parallel()
	s, _ := ensure(t)
	js := s.JetStream("check")
	type shape struct {
		Subjects   []string
		MaxBytes   int64
		MaxAge     time.Duration
		MaxMsgSize int32
		Discard    jetstream.DiscardPolicy
		Direct     bool
	}
	got := map[string]shape{}
	for _, name := range []string{kv.StreamAudit, kv.StreamEvents} {
		c := streamConfig(t, js, name)
		got[name] = shape{c.Subjects, c.MaxBytes, c.MaxAge, c.MaxMsgSize, c.Discard, c.AllowDirect}
	}
	want := map[string]shape{
		kv.StreamAudit: {[]string{"fleet.audit.>"}, kv.DefaultAuditMaxBytesMemory, kv.DefaultAuditMaxAge, 256 << 10, jetstream.DiscardOld, true},
		kv.StreamEvents: {[]string{"fleet.events.>"}, kv.DefaultEventsMaxBytesMemory, kv.DefaultEventsMaxAge, kv.MaxEventSize,
			jetstream.DiscardOld, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("trail streams (-want +got):\n%s", diff)
	}
}

// TestEventsBounded: an event with a reason of any size is published cut
// to fit and stored; a message over the events' size (what a hostile
// publisher sends) is not stored at all.
func TestEventsBounded(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)
	ctx := longCtx(t)
	huge := rollout.Event{V: 1, Group: strings.Repeat("g", rollout.MaxGroupNameLen), Kind: rollout.EventHalt,
		Reason: strings.Repeat("<\x1b>", 40<<10), At: time.Now().UTC()}
	if err := f.PublishEvent(huge); err != nil {
		t.Fatalf("publish an event with a 120 KB reason: %v", err)
	}
	raw := make([]byte, 120<<10)
	for i := range raw {
		raw[i] = 'x'
	}
	if err := f.JS.Conn().Publish(kv.EventSubject("prod"), raw); err != nil {
		t.Fatal(err)
	}
	if err := f.PublishEvent(rollout.Event{V: 1, Group: "prod", Kind: rollout.EventAlert, Reason: "after", At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	var entries []kv.TimelineEntry
	natstest.Eventually(t, 5*time.Second, func() error {
		var err error
		if entries, _, err = f.ReadTimeline(ctx, time.Time{}); err != nil {
			return err
		}
		if len(entries) < 2 {
			return fmt.Errorf("%d entries", len(entries))
		}
		return nil
	})
	if len(entries) != 2 || entries[0].Event == nil || entries[1].Event == nil || entries[1].Event.Reason != "after" {
		t.Fatalf("timeline: %+v, want the cut event and the small one (the 120 KB message refused)", entries)
	}
	if r := entries[0].Event.Reason; len(r) > rollout.MaxEventReason || !strings.HasSuffix(r, "…") {
		t.Errorf("stored reason of %d bytes, want at most %d and cut", len(r), rollout.MaxEventReason)
	}
	if entries[0].Stream != kv.StreamEvents {
		t.Errorf("event stored in %s, want %s", entries[0].Stream, kv.StreamEvents)
	}
}

// TestEncodeEventAgentsGiveWay: a halt's agents (their errors and
// outputs, issue 25) never make the event too large to store: their
// outputs go first, then they, and the event is published whatever they
// held; a small one keeps them all.
func TestEncodeEventAgentsGiveWay(t *testing.T) {
	t.Parallel()
	agent := func(text string) rollout.EventAgent {
		return rollout.EventAgent{ID: "0b000000-0000-4000-8000-000000000000", Hostname: "web-1",
			Error: strings.Repeat(text, rollout.MaxEventAgentError), Output: strings.Repeat(text, rollout.MaxEventAgentOutput)}
	}
	ev := func(text string) rollout.Event {
		return rollout.Event{V: 1, Group: strings.Repeat("g", rollout.MaxGroupNameLen), Kind: rollout.EventHalt,
			Reason: strings.Repeat(text, rollout.MaxEventReason), At: time.Now().UTC(),
			Agents: []rollout.EventAgent{agent(text), agent(text), agent(text)}}
	}
	for _, tc := range []struct {
		name, text          string
		wantAgents, wantOut bool
	}{
		{"plain", "a", true, true},
		{"escaped to six bytes each", "<", false, false},
		{"newlines, escaped to two bytes each", "\n", true, false},
	} {
		data, err := kv.EncodeEvent(ev(tc.text))
		if err != nil || len(data) > kv.MaxEventSize {
			t.Fatalf("%s: %d bytes, %v; want at most %d", tc.name, len(data), err, kv.MaxEventSize)
		}
		var got rollout.Event
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		hasOut := len(got.Agents) > 0 && got.Agents[0].Output != ""
		if (len(got.Agents) == 3) != tc.wantAgents || hasOut != tc.wantOut {
			t.Errorf("%s: %d agents, output kept %v; want agents %v, outputs %v", tc.name, len(got.Agents), hasOut, tc.wantAgents, tc.wantOut)
		}
	}
}

// longCtx bounds a test of many bus operations (on a loaded machine, or
// under -race, their sum exceeds ctxT's bound for one).
func longCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// publishEvents publishes n events of group g with the JetStream ack (so
// that they are stored in order before the next step).
func publishEvents(t *testing.T, f *kv.Fleet, g string, n int, reason string) {
	t.Helper()
	ctx := longCtx(t)
	for i := range n {
		data, err := json.Marshal(rollout.Event{V: 1, Group: g, Kind: rollout.EventAlert, Reason: fmt.Sprintf("%s %d", reason, i), At: time.Now().UTC()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.JS.Publish(ctx, kv.EventSubject(g), data); err != nil {
			t.Fatal(err)
		}
	}
}

func record(t *testing.T, f *kv.Fleet, group, reason string) {
	t.Helper()
	r := kv.AuditRecord{V: 1, At: time.Now().UTC(), Actor: "alice", Reason: reason, Command: "pause", Group: group, Bucket: kv.BucketPlan, Key: kv.KeySpec}
	if group != "" {
		r.Key = kv.GroupKey(group)
	}
	if err := f.PublishAudit(ctxT(t), r); err != nil {
		t.Fatal(err)
	}
}

// what names timeline entries for comparisons: "audit <reason>",
// "event <group> <reason>".
func what(entries []kv.TimelineEntry) []string {
	var out []string
	for _, e := range entries {
		if e.Audit != nil {
			out = append(out, "audit "+e.Audit.Reason)
		} else {
			out = append(out, "event "+e.Event.Group+" "+e.Event.Reason)
		}
	}
	return out
}

// TestReadTimelineQuery: the newest Limit records and the newest Limit
// events, merged by the time the bus stored them, with a group's filter and
// since, and More when older ones were left out; ReadTimelineAfter goes on
// from the cursor.
func TestReadTimelineQuery(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)
	ctx := longCtx(t)
	record(t, f, "", "r1")
	publishEvents(t, f, "prod", 3, "p")
	record(t, f, "dev", "r2")
	publishEvents(t, f, "dev", 300, "d")
	record(t, f, "", "r3")
	publishEvents(t, f, "prod", 1, "q")

	for _, tc := range []struct {
		name string
		q    kv.TimelineQuery
		want []string
		more bool
	}{
		{"everything", kv.TimelineQuery{Limit: math.MaxInt}, nil, false},
		{"newest 3 records and 3 events", kv.TimelineQuery{Limit: 3},
			[]string{"audit r1", "audit r2", "event dev d 298", "event dev d 299", "audit r3", "event prod q 0"}, true},
		{"prod's newest 2 of each: the dev flood is skipped", kv.TimelineQuery{Group: "prod", Limit: 2},
			[]string{"audit r1", "event prod p 2", "audit r3", "event prod q 0"}, true},
		{"prod's all", kv.TimelineQuery{Group: "prod", Limit: 100},
			[]string{"audit r1", "event prod p 0", "event prod p 1", "event prod p 2", "audit r3", "event prod q 0"}, false},
		{"a group with no entries: the fleet-wide ones", kv.TimelineQuery{Group: "nope", Limit: 10}, []string{"audit r1", "audit r3"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl, err := f.ReadTimelineQuery(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			got := what(tl.Entries)
			if tc.want == nil {
				if len(got) != 307 || got[0] != "audit r1" || got[306] != "event prod q 0" {
					t.Errorf("everything: %d entries, first %q, last %q", len(got), got[0], got[len(got)-1])
				}
			} else if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			if tl.More != tc.more {
				t.Errorf("More %t, want %t", tl.More, tc.more)
			}
			if tl.Cursor != (kv.TimelineCursor{Audit: 3, Events: 304}) {
				t.Errorf("cursor %+v, want audit 3, events 304", tl.Cursor)
			}
		})
	}

	// Since: only what was stored from then on.
	mid := time.Now()
	record(t, f, "", "r4")
	publishEvents(t, f, "prod", 1, "s")
	tl, err := f.ReadTimelineQuery(ctx, kv.TimelineQuery{Since: mid})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"audit r4", "event prod s 0"}, what(tl.Entries)); diff != "" || tl.More {
		t.Errorf("since (-want +got):\n%s (more %t)", diff, tl.More)
	}

	// After a cursor: what came since, at most limit of each stream.
	tl, err = f.ReadTimelineAfter(ctx, kv.TimelineCursor{Audit: 3, Events: 304}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"audit r4", "event prod s 0"}, what(tl.Entries)); diff != "" || tl.More || tl.Cursor != (kv.TimelineCursor{Audit: 4, Events: 305}) {
		t.Errorf("after the cursor (-want +got):\n%s (more %t, cursor %+v)", diff, tl.More, tl.Cursor)
	}
	tl, err = f.ReadTimelineAfter(ctx, kv.TimelineCursor{Audit: 4, Events: 1}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Entries) != 10 || !tl.More || what(tl.Entries)[9] != "event prod s 0" {
		t.Errorf("after an old cursor: %d entries, more %t, want the newest 10 and more", len(tl.Entries), tl.More)
	}
}

// TestTimelineOfTheLegacyLayout: FLEET_AUDIT as fleetwave created it before
// FLEET_EVENTS (both subject spaces in one stream). The timeline reads it as
// it is; Ensure with rights to update it (fleetctl bus ensure) takes the
// events out of it and creates FLEET_EVENTS; the events stored before stay
// in the timeline, the new ones land in FLEET_EVENTS.
func TestTimelineOfTheLegacyLayout(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	js := s.JetStream("admin")
	ctx := longCtx(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: kv.StreamAudit, Subjects: kv.LegacyAuditSubjects,
		MaxBytes: 1 << 20, Storage: jetstream.MemoryStorage, AllowDirect: true, Discard: jetstream.DiscardOld}); err != nil {
		t.Fatal(err)
	}
	f := &kv.Fleet{JS: js}
	record(t, f, "", "old record")
	publishEvents(t, f, "prod", 1, "old event")
	tl, err := f.ReadTimelineQuery(ctx, kv.TimelineQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"audit old record", "event prod old event 0"}, what(tl.Entries)); diff != "" || !tl.LegacyAudit {
		t.Errorf("legacy timeline (-want +got):\n%s (legacy %t)", diff, tl.LegacyAudit)
	}

	var drift []string
	f2, err := kv.Ensure(ctx, js, kv.Options{Memory: true, OnDrift: func(what string, d []string) { drift = append(drift, what) }})
	if err != nil {
		t.Fatal(err)
	}
	if f2.LegacyAudit || len(drift) > 0 {
		t.Errorf("with update rights: legacy %t, drift %q", f2.LegacyAudit, drift)
	}
	if got := streamConfig(t, js, kv.StreamAudit).Subjects; !slices.Equal(got, []string{"fleet.audit.>"}) {
		t.Errorf("%s subjects %v after Ensure", kv.StreamAudit, got)
	}
	record(t, f2, "", "new record")
	publishEvents(t, f2, "prod", 1, "new event")
	tl, err = f2.ReadTimelineQuery(ctx, kv.TimelineQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var where []string
	for _, e := range tl.Entries {
		where = append(where, e.Stream)
	}
	if diff := cmp.Diff([]string{"audit old record", "event prod old event 0", "audit new record", "event prod new event 0"}, what(tl.Entries)); diff != "" || tl.LegacyAudit {
		t.Errorf("after the migration (-want +got):\n%s (legacy %t)", diff, tl.LegacyAudit)
	}
	if want := []string{kv.StreamAudit, kv.StreamAudit, kv.StreamAudit, kv.StreamEvents}; !slices.Equal(where, want) {
		t.Errorf("stored in %v, want %v", where, want)
	}
	// Filtered by group, the old events in FLEET_AUDIT are still found.
	tl, err = f2.ReadTimelineQuery(ctx, kv.TimelineQuery{Group: "prod"})
	if err != nil || len(tl.Entries) != 4 {
		t.Errorf("prod's timeline after the migration: %v, %q", err, what(tl.Entries))
	}
}

// TestReadTimelineFastWhenFull: a full events stream of maximal events
// costs a reader the newest Limit only, and the operator's record older
// than all of them is still read.
func TestReadTimelineFastWhenFull(t *testing.T) {
	_, f := ensure(t) // memory: FLEET_EVENTS holds 8 MiB
	ctx := longCtx(t)
	record(t, f, "", "keep me")
	ev, err := kv.EncodeEvent(rollout.Event{V: 1, Group: "prod", Kind: rollout.EventAlert, Reason: strings.Repeat("\x01", 2000), At: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	nc := f.JS.Conn()
	// Twice the stream's bytes, as fast as the connection sends.
	n := 2 * kv.DefaultEventsMaxBytesMemory / len(ev)
	for range n {
		if err := nc.Publish(kv.EventSubject("prod"), ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	tl, err := f.ReadTimelineQuery(ctx, kv.TimelineQuery{})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events of %d bytes published; newest %d read in %v", n, len(ev), len(tl.Entries), took)
	if len(tl.Entries) != kv.DefaultTimelineLimit+1 || !tl.More || tl.Entries[0].Audit == nil {
		t.Errorf("%d entries (more %t), want the record and the newest %d events", len(tl.Entries), tl.More, kv.DefaultTimelineLimit)
	}
	if took > 2*time.Second {
		t.Errorf("read took %v", took)
	}
	entries, _, err := f.ReadTimeline(context.Background(), time.Time{})
	if err != nil || len(entries) == 0 || entries[0].Audit == nil || entries[0].Audit.Reason != "keep me" {
		t.Errorf("the operator's record is gone: %v", err)
	}
}
