package view_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestCanaryNotes (issue 28 point 4): status and the dashboard (the same
// rows) say that a small group skipped its canary phase and which lost
// canaries were replaced, and the JSON report carries both.
func TestCanaryNotes(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const lost, by = rollout.AgentID("0b000000-0000-4000-8000-000000000000"), rollout.AgentID("7f000000-0000-4000-8000-000000000000")
	entries := []kv.Stats{{V: 1, ControllerID: "c1", Group: "prod", At: now, Agents: 3, Versions: rollout.Counts{"1.0.0": {Count: 3}}}}
	for _, tc := range []struct {
		name string
		edit func(*rollout.GroupStatus)
		want string
	}{
		{"small group", func(s *rollout.GroupStatus) { s.CanariesSkipped = "small group: 3 agents ≤ small_group 5" },
			"no canary phase: small group: 3 agents ≤ small_group 5"},
		{"one replaced", func(s *rollout.GroupStatus) {
			s.State, s.Canaries = rollout.StateCanary, []rollout.Canary{{ID: by}}
			s.ReplacedCanaries = []rollout.ReplacedCanary{{ID: lost, Hostname: "web-8", By: by, At: now}}
		}, "1 lost canary replaced (vanished before reporting on the target): " + string(lost) + " (web-8) by " + string(by)},
		{"two replaced", func(s *rollout.GroupStatus) {
			s.ReplacedCanaries = []rollout.ReplacedCanary{{ID: lost, By: by, At: now}, {ID: by, By: lost, At: now}}
		}, "2 lost canaries replaced (vanished before reporting on the target): " + string(lost) + " by " + string(by) + ", " + string(by) + " by " + string(lost)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rollout.DefaultConfig()
			cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("prod")}
			gs := rollout.GroupStatus{V: 1, Group: "prod", State: rollout.StateActive, TargetVersion: "2.0.0", StartVersion: "1.0.0", InitialCount: 3, Progress: 0.5}
			tc.edit(&gs)
			st := &kv.State{HasSpec: true, Spec: kv.Entry[rollout.Spec]{Value: rollout.DefaultSpec("1.0.0", "2.0.0")},
				Config: kv.Entry[rollout.Config]{Value: cfg}, Groups: map[string]kv.Entry[rollout.GroupStatus]{"prod": {Value: gs}}}
			rep := view.BuildRolloutStatus(entries, st, now)
			rows := view.Rows(rep, &cfg, now)
			if !slices.Contains(rows[0].Notes, tc.want) {
				t.Errorf("notes %q, want %q", rows[0].Notes, tc.want)
			}
			data, err := json.Marshal(rep.Groups[0].Rollout)
			if err != nil {
				t.Fatal(err)
			}
			if gs.CanariesSkipped != "" && !strings.Contains(string(data), `"canaries_skipped":"small group`) ||
				len(gs.ReplacedCanaries) > 0 && !strings.Contains(string(data), `"replaced_canaries":[{"id":"`+string(lost)) {
				t.Errorf("JSON report %s lacks the canary fields", data)
			}
		})
	}
}
