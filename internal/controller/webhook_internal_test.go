package controller

import (
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestWebhookPayloadApp: an operator's record of another app's plan key
// names that app in the payload and the text (from the key: the body is the
// same whichever controller sends it); one of the default app's keys or of
// the config names none, and its text is what it was.
func TestWebhookPayloadApp(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	m := kv.StoredMsg{Stream: kv.StreamAudit, Sequence: 7, Time: at}
	for _, tc := range []struct {
		rec       kv.AuditRecord
		app, text string
	}{
		{kv.AuditRecord{Actor: "alice", Command: "plan set", Bucket: kv.BucketPlan, Key: "db.spec"}, "db",
			`:memo: fleetwave: alice ran "fleetctl plan set" for app db`},
		{kv.AuditRecord{Actor: "alice", Command: "rollback", Group: "prod", Bucket: kv.BucketPlan, Key: "db.group.prod"}, "db",
			`:memo: fleetwave: alice ran "fleetctl rollback" on group prod of app db`},
		{kv.AuditRecord{Actor: "alice", Command: "plan set", Bucket: kv.BucketPlan, Key: kv.KeySpec}, "",
			`:memo: fleetwave: alice ran "fleetctl plan set" fleet-wide`},
		{kv.AuditRecord{Actor: "alice", Command: "config set", Bucket: kv.BucketConfig, Key: kv.KeyConfig}, "",
			`:memo: fleetwave: alice ran "fleetctl config set" fleet-wide`},
	} {
		rec := tc.rec
		rec.V, rec.At = 1, at
		p := webhookPayloadOf(kv.TimelineEntry{Audit: &rec}, m)
		if p.App != tc.app || p.Text != tc.text {
			t.Errorf("%s %s: app %q text %q, want app %q text %q", rec.Command, rec.Key, p.App, p.Text, tc.app, tc.text)
		}
	}
	ev := rollout.Event{V: 1, App: "db", Group: "prod", Kind: rollout.EventTransition, From: rollout.StateActive, To: rollout.StateDone, Reason: "all on 6.0.0", At: at}
	if p := webhookPayloadOf(kv.TimelineEntry{Event: &ev}, m); p.App != "db" || p.Text != ":white_check_mark: fleetwave: group prod of app db active → done: all on 6.0.0" {
		t.Errorf("event: app %q text %q", p.App, p.Text)
	}
}
