package controller_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestDashboardTimelineAfterAFlood: the events stream filled with maximal
// events (what the controller's creds can publish) leaves /api/v1/timeline
// small and quick, with the operator's record still in it (issue 24: it
// answered 24 MB per request).
func TestDashboardTimelineAfterAFlood(t *testing.T) {
	f := newFixture(t)
	rc := f.startController("c1")
	srv := f.startDashboard(rc).serve()
	rec := kv.AuditRecord{V: 1, At: time.Now().UTC(), Actor: "alice", Reason: "night freeze", Command: "pause", Group: "prod",
		Bucket: kv.BucketPlan, Key: "group.prod"}
	if err := f.fleet.PublishAudit(f.ctx, rec); err != nil {
		t.Fatal(err)
	}
	ev, err := kv.EncodeEvent(rollout.Event{V: 1, Group: "prod", Kind: rollout.EventAlert, Reason: strings.Repeat("\x1b", 4000), At: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	nc := f.srv.Conn("flood")
	n := 2 * kv.DefaultEventsMaxBytesMemory / len(ev) // the stream twice over
	for range n {
		if err := nc.Publish(kv.EventSubject("prod"), ev); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, waitLong, func() error {
		s, err := f.fleet.JS.Stream(f.ctx, kv.StreamEvents)
		if err != nil {
			return err
		}
		if last := s.CachedInfo().State.LastSeq; last < uint64(n) {
			return fmt.Errorf("%d of %d events stored", last, n)
		}
		return nil
	})
	start := time.Now()
	code, _, body := httpGet(t, srv.URL+controller.PathAPIHistory)
	took := time.Since(start)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", controller.PathAPIHistory, code, body)
	}
	var rows []view.TimelineRow
	if err := json.Unmarshal([]byte(body), &rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events of %d bytes published; /api/v1/timeline: %d rows, %d bytes, in %v", n, len(ev), len(rows), len(body), took)
	if len(body) > 512<<10 || took > 2*time.Second {
		t.Errorf("/api/v1/timeline answered %d bytes in %v", len(body), took)
	}
	if len(rows) == 0 || rows[0].Kind != view.KindAudit || rows[0].Actor != "alice" {
		t.Errorf("the operator's record is not in the timeline after the flood: first row %+v", rows[0])
	}
}

// TestWebhookCursorOfAnOlderController: a webhook's cursor written before
// FLEET_EVENTS existed (no events_seq) starts in FLEET_EVENTS with the
// events stored after the cursor's time: the one stored before is not sent
// again, the one after is, and the cursor gains its events_seq.
func TestWebhookCursorOfAnOlderController(t *testing.T) {
	f := newFixture(t)
	rcv := newReceiver(t, controller.WebhookJSON)
	f.notify = testNotify(rcv.srv.URL)
	stored := func(n int) {
		t.Helper()
		natstest.Eventually(t, waitLong, func() error {
			entries, _, err := f.fleet.ReadTimeline(f.ctx, time.Time{})
			if err == nil && len(entries) < n {
				err = fmt.Errorf("%d entries stored", len(entries))
			}
			return err
		})
	}
	halt := func(reason string) {
		t.Helper()
		if err := f.fleet.PublishEvent(rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, Reason: reason, At: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	halt("before the cursor")
	stored(1)
	key := kv.WebhookCursorKey(rcv.srv.URL)
	if _, err := kv.SaveWebhookCursor(f.ctx, f.fleet.JS, key, kv.WebhookCursor{V: 1, Webhook: "old", At: time.Now().UTC(), By: "c0"}, 0); err != nil {
		t.Fatal(err)
	}
	halt("after the cursor")
	stored(2)
	f.startController("c1")
	natstest.Eventually(t, waitLong, func() error {
		got := rcv.accepted()
		if len(got) != 1 || got[0].Event == nil || got[0].Event.Reason != "after the cursor" || got[0].Stream != kv.StreamEvents {
			return fmt.Errorf("received %+v, want the event after the cursor alone", got)
		}
		c, _, err := kv.ReadWebhookCursor(f.ctx, f.fleet.JS.Conn(), key)
		if err != nil {
			return err
		}
		if c.EventsSeq == nil || *c.EventsSeq != got[0].Sequence {
			return fmt.Errorf("cursor %+v, want events_seq %d", c, got[0].Sequence)
		}
		return nil
	})
}
