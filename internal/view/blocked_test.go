package view_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestBlockedAgentsShown (issue 15 points 1 and 2): agents blocked on
// infrastructure are counted apart from failed ones (the FAILED cell and
// failed counts leave them out), WAITING says how many are blocked, and the
// notes carry the hold, or point at the causes when there is none.
func TestBlockedAgentsShown(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var agents []rollout.AgentView
	add := func(n int, a rollout.AgentView) {
		for range n {
			id, err := rollout.NewAgentID(nil)
			if err != nil {
				t.Fatal(err)
			}
			a.ID = id
			agents = append(agents, a)
		}
	}
	add(5, rollout.AgentView{ActiveVersion: "2.0.0"})
	add(2, rollout.AgentView{ActiveVersion: "1.0.0", Error: "download: HTTP 503", ErrorClass: rollout.FailureInfrastructure, ErrorCause: "download failed (HTTP 503)"})
	add(1, rollout.AgentView{ActiveVersion: "1.0.0", Rollback: true, RollbackFrom: "2.0.0", Error: "unhealthy", ErrorClass: rollout.FailureRelease})
	add(2, rollout.AgentView{ActiveVersion: "1.0.0"})
	counts := rollout.CountAgents(agents)
	if vc := counts["1.0.0"]; vc.Blocked != 2 || vc.FailedCount != 1 || vc.Count != 5 {
		t.Fatalf("1.0.0 counts %+v: want 5 agents, 2 blocked, 1 failed", vc)
	}
	entries := []kv.Stats{{V: 1, ControllerID: "c1", Group: "prod", At: now, Agents: len(agents), Versions: counts}}
	for _, tc := range []struct {
		name  string
		held  string
		notes string
	}{
		{"blocked, not held", "", "2 agents blocked on infrastructure, retrying by themselves (not failed): fleetctl agents ls --group prod shows the causes"},
		{"held", "2 of 2 agents in flight blocked on infrastructure (download failed (HTTP 503): 2), …", "held: 2 of 2 agents in flight blocked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rollout.DefaultConfig()
			cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("prod")}
			st := &kv.State{HasSpec: true, Spec: kv.Entry[rollout.Spec]{Value: rollout.DefaultSpec("1.0.0", "2.0.0")},
				Config: kv.Entry[rollout.Config]{Value: cfg},
				Groups: map[string]kv.Entry[rollout.GroupStatus]{"prod": {Value: rollout.GroupStatus{V: 1, Group: "prod", State: rollout.StateActive,
					TargetVersion: "2.0.0", StartVersion: "1.0.0", InitialCount: 10, Progress: 0.5, FailedCount: 1, Held: tc.held, Blocked: 2}}}}
			rep := view.BuildRolloutStatus(entries, st, now)
			g := rep.Groups[0]
			if g.Failed != 1 || g.Blocked != 2 || g.Rollout.Agents.Failed != 1 || g.Rollout.Agents.Blocked != 2 || g.Rollout.Agents.Waiting != 2 {
				t.Errorf("report %+v, split %+v: want 1 failed, 2 blocked, 2 waiting", g, g.Rollout.Agents)
			}
			rows := view.Rows(rep, &cfg, now)
			if r := rows[0]; r.Failed != "1" || r.Waiting != "4 (2 blocked)" {
				t.Errorf("row failed %q waiting %q, want 1 and \"4 (2 blocked)\"", r.Failed, r.Waiting)
			}
			if !slices.ContainsFunc(rows[0].Notes, func(n string) bool { return strings.HasPrefix(n, tc.notes) }) {
				t.Errorf("notes %q, want one starting %q", rows[0].Notes, tc.notes)
			}
		})
	}
	if got := view.AgentClass(&heartbeat.Heartbeat{Error: "x", ErrorClass: heartbeat.ClassInfrastructure}, now, now, time.Second); got != view.AgentBlocked {
		t.Errorf("class of a blocked agent %q, want blocked", got)
	}
}
