package view_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestAnalysisNotes: a group rolling out gets one note per metric analysis
// check (the notes fleetctl status, watch and the dashboard show); a group
// that is not rolling out, or a stale status, none.
func TestAnalysisNotes(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v := 0.002
	checks := []rollout.CheckStatus{
		{Name: "fresh", Count: 3},
		{Name: "errors", Count: 3, Measurements: 2, Passes: 2, Result: rollout.ResultSuccessful, Value: &v, Detail: "0.002 meets success < 0.01", At: now.Add(-12 * time.Second)},
		{Name: "latency", Count: 1, InconclusiveLimit: 5, Measurements: 4, Passes: 1, Inconclusive: 2, Result: rollout.ResultInconclusive,
			Detail: "no data (the query returned no series)", At: now.Add(-3 * time.Second)},
		{Name: "per-host", Count: 1, Measurements: 1, Result: rollout.ResultFailed, Series: `{instance="a"}`, Detail: "0.3 does not meet success < 0.01", At: now.Add(-time.Minute)},
	}
	tests := []struct {
		name  string
		state rollout.State
		stale bool
		want  []string
	}{
		{"canary", rollout.StateCanary, false, []string{
			"check fresh: not measured yet (runs once every canary is healthy on the target; needs 3 passes)",
			"check errors: 0.002 meets success < 0.01, passed 2 of 3, measured 12s ago",
			"check latency: inconclusive, 2 of inconclusive_limit 5 in a row: no data (the query returned no series), passed 1 of 1, measured 3s ago",
			`check per-host: failed: 0.3 does not meet success < 0.01 (series {instance="a"}), passed 0 of 1, measured 1m ago`,
		}},
		{"active", rollout.StateActive, false, []string{
			"check fresh: not measured yet",
			"check errors: 0.002 meets success < 0.01, 2 of 2 measurements passed, measured 12s ago",
			"check latency: inconclusive, 2 of inconclusive_limit 5 in a row: no data (the query returned no series), 1 of 4 measurements passed, measured 3s ago",
			`check per-host: failed: 0.3 does not meet success < 0.01 (series {instance="a"}), 0 of 1 measurements passed, measured 1m ago`,
		}},
		{"done", rollout.StateDone, false, nil},
		{"stale", rollout.StateActive, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &view.GroupRollout{InConfig: true, State: tc.state, Stale: tc.stale, Analysis: checks}
			if diff := cmp.Diff(tc.want, view.AnalysisNotes(r, now)); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
		})
	}
	// The rows fleetctl status and the dashboard show carry them.
	rep := view.StatusReport{Plan: &view.PlanReport{StartVersion: "1.0.0", TargetVersion: "2.0.0"}, Groups: []view.GroupReport{{Name: "prod",
		Rollout: &view.GroupRollout{InConfig: true, State: rollout.StateCanary, Hold: "1.0.0", Analysis: checks[1:2]}}}}
	rows := view.Rows(rep, nil, now)
	if diff := cmp.Diff([]string{"check errors: 0.002 meets success < 0.01, passed 2 of 3, measured 12s ago"}, rows[0].Notes); diff != "" {
		t.Errorf("row notes (-want +got):\n%s", diff)
	}
}
