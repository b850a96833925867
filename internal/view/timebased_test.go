package view_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestTimeBasedWindowNotes: under a time-based plan, the rows fleetctl
// status, watch and the dashboard show say when an active group's window
// closes, or that it closed; the wait for a window names its length; a
// regular plan's group shows none of it.
func TestTimeBasedWindowNotes(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 3, 4, 23, 0, 0, 0, time.UTC)
	closes := time.Date(2024, 3, 5, 2, 0, 0, 0, time.UTC)
	active := rollout.GroupStatus{V: 1, Group: "prod", State: rollout.StateActive, TargetVersion: "1.1.0", StartVersion: "1.0.0",
		Since: now, StartedAt: now, Progress: 0.2, InitialCount: 10, WindowCloses: closes}
	waiting := rollout.GroupStatus{V: 1, Group: "dev", State: rollout.StateUnstarted, TargetVersion: "1.1.0", StartVersion: "1.0.0", Since: now,
		Waiting: "window: next opens Mon 2024-03-11 22:00 UTC (Mon 22:00-02:00 next day UTC (window_length 4h))", WaitingUntil: closes}
	for _, tc := range []struct {
		name     string
		schedule rollout.Schedule
		at       time.Time
		want     string // in prod's notes; "" for no window note
	}{
		{"open", rollout.ScheduleTimeBased, now, "time-based: its window closes in 3h (Tue 02:00 UTC); the group is done then, and no agent starts an update after"},
		{"closed", rollout.ScheduleTimeBased, closes.Add(2 * time.Minute), "time-based: its window closed 2m ago (Tue 02:00 UTC); no agent starts an update until it reopens"},
		{"regular plan", rollout.ScheduleRegular, now, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := badNewsState("1.0.0", "1.1.0", map[string]rollout.GroupStatus{"prod": active, "dev": waiting}, "dev", "prod")
			st.Spec.Value.Schedule = tc.schedule
			rows := view.Rows(view.BuildRolloutStatus(nil, st, tc.at), nil, tc.at)
			var notes []string
			for _, r := range rows {
				if r.Group == "prod" {
					notes = r.Notes
				}
				if r.Group == "dev" && !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "(window_length 4h)") }) {
					t.Errorf("dev's wait does not name the window's length: %q", r.Notes)
				}
			}
			has := slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "time-based") })
			if tc.want == "" && has || tc.want != "" && !slices.Contains(notes, tc.want) {
				t.Errorf("prod notes %q, want %q", notes, tc.want)
			}
		})
	}
}
