package auth_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestControllerOnTheLegacyAuditLayout: a bus created before FLEET_EVENTS
// (FLEET_AUDIT captures fleet.events.> too). The controller's minted creds
// may not change it: the controller warns, naming fleetctl bus ensure, and
// keeps working (its events still stored in FLEET_AUDIT, the timeline
// read). The admin's Ensure (fleetctl bus ensure) moves the events to
// FLEET_EVENTS; the events stored before stay in the timeline, and the
// controller, started again, runs with the new layout without a warning.
func TestControllerOnTheLegacyAuditLayout(t *testing.T) {
	e := newFleetEnvBare(t)
	admin := e.js(auth.CredsFile(auth.UserAdmin))
	if _, err := admin.CreateStream(e.ctx, jetstream.StreamConfig{Name: kv.StreamAudit, Subjects: kv.LegacyAuditSubjects,
		MaxBytes: kv.DefaultAuditMaxBytesMemory, MaxAge: kv.DefaultAuditMaxAge, Storage: jetstream.MemoryStorage,
		AllowDirect: true, Discard: jetstream.DiscardOld}); err != nil {
		t.Fatal(err)
	}
	adminFleet := &kv.Fleet{JS: admin}
	rec := kv.AuditRecord{V: 1, At: time.Now().UTC(), Actor: "alice", Command: "plan set", Bucket: kv.BucketPlan, Key: kv.KeySpec, Revision: 1}
	if err := adminFleet.PublishAudit(e.ctx, rec); err != nil {
		t.Fatal(err)
	}
	ctl := e.watched(auth.CredsFile(auth.UserController))
	ensure := func() (*kv.Fleet, []string) {
		t.Helper()
		var drift []string
		f, err := kv.Ensure(e.ctx, ctl.js, kv.Options{Memory: true, OnDrift: func(what string, d []string) {
			drift = append(drift, what+": "+strings.Join(d, "; "))
		}})
		if err != nil {
			t.Fatalf("the controller's Ensure on the legacy layout: %v", err)
		}
		return f, drift
	}
	f, drift := ensure()
	if !f.LegacyAudit || len(drift) != 1 || !strings.Contains(drift[0], "stream "+kv.StreamAudit) || !strings.Contains(drift[0], "fleetctl bus ensure") {
		t.Fatalf("legacy %t, drift %q: want one warning naming fleetctl bus ensure", f.LegacyAudit, drift)
	}
	if _, err := admin.Stream(e.ctx, kv.StreamEvents); err == nil {
		t.Fatalf("%s created beside a FLEET_AUDIT that captures its subjects", kv.StreamEvents)
	}
	old := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, Reason: "before the migration", At: time.Now().UTC()}
	if err := f.PublishEvent(old); err != nil {
		t.Fatal(err)
	}
	// Events are core publishes: wait until the n-th is stored.
	readKinds := func(f *kv.Fleet, n int) []string {
		t.Helper()
		var got []string
		natstest.Eventually(t, 10*time.Second, func() error {
			tl, err := f.ReadTimelineQuery(e.ctx, kv.TimelineQuery{})
			if err != nil {
				return fmt.Errorf("timeline with the controller's creds: %w (server said %q)", err, ctl.violations())
			}
			got = got[:0]
			for _, en := range tl.Entries {
				if en.Audit != nil {
					got = append(got, en.Stream+" audit "+en.Audit.Command)
				} else {
					got = append(got, en.Stream+" event "+en.Event.Reason)
				}
			}
			if len(got) < n {
				return fmt.Errorf("%d entries: %q", len(got), got)
			}
			return nil
		})
		return got
	}
	want := []string{kv.StreamAudit + " audit plan set", kv.StreamAudit + " event before the migration"}
	if got := readKinds(f, 2); !slices.Equal(got, want) {
		t.Fatalf("legacy timeline %q, want %q", got, want)
	}

	// fleetctl bus ensure, with admin creds.
	if _, err := kv.Ensure(e.ctx, admin, kv.Options{Memory: true}); err != nil {
		t.Fatal(err)
	}
	f, drift = ensure() // the controller, restarted
	if f.LegacyAudit || len(drift) != 0 {
		t.Fatalf("after the migration: legacy %t, drift %q", f.LegacyAudit, drift)
	}
	if err := f.PublishEvent(rollout.Event{V: 1, Group: "prod", Kind: rollout.EventAlert, Reason: "after the migration", At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	want = append(want, kv.StreamEvents+" event after the migration")
	if got := readKinds(f, 3); !slices.Equal(got, want) {
		t.Errorf("timeline after the migration %q, want %q", got, want)
	}
	if v := ctl.violations(); len(v) > 0 {
		t.Errorf("the controller was refused: %q", v)
	}
}

// TestControllerRefusesAnUnboundedEventsStream: a FLEET_EVENTS that takes
// messages of any size (created by someone else before the fleet's first
// controller, with a stolen controller credential say) would undo the
// readers' bounds: the controller, which may not fix it, refuses to run on
// it and names fleetctl bus ensure; the admin's Ensure brings it to 8 KiB.
func TestControllerRefusesAnUnboundedEventsStream(t *testing.T) {
	e := newFleetEnvBare(t)
	admin := e.js(auth.CredsFile(auth.UserAdmin))
	if _, err := admin.CreateStream(e.ctx, jetstream.StreamConfig{Name: kv.StreamEvents, Subjects: []string{kv.EventsPrefix + ">"},
		Storage: jetstream.MemoryStorage, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	ctl := e.js(auth.CredsFile(auth.UserController))
	_, err := kv.Ensure(e.ctx, ctl, kv.Options{Memory: true})
	if err == nil || !strings.Contains(err.Error(), "fleetctl bus ensure") || !strings.Contains(err.Error(), "messages of") {
		t.Fatalf("controller on an unbounded %s: %v, want a refusal naming fleetctl bus ensure", kv.StreamEvents, err)
	}
	if _, err := kv.Ensure(e.ctx, admin, kv.Options{Memory: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Ensure(e.ctx, ctl, kv.Options{Memory: true}); err != nil {
		t.Errorf("controller after the admin's ensure: %v", err)
	}
}
