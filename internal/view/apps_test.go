package view

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestProgress: an app's line sums its report's groups: the config's
// groups and those done, halted or rolled back (a stale or invalid status
// is none of them), every agent counted, those on the target and those
// that failed it; a group out of the config counts its agents but is not
// one of the app's groups. No plan: no target, nothing on it.
func TestProgress(t *testing.T) {
	group := func(name string, agents int, r *GroupRollout) GroupReport {
		return GroupReport{Name: name, Agents: agents, Rollout: r}
	}
	rep := StatusReport{
		Plan: &PlanReport{Mode: rollout.ModePaused, StartVersion: "1.0.0", TargetVersion: "2.0.0"},
		Groups: []GroupReport{
			group("canary", 2, &GroupRollout{InConfig: true, State: rollout.StateDone, Agents: AgentSplit{Updated: 2}}),
			group("prod", 10, &GroupRollout{InConfig: true, State: rollout.StateActive, Halted: true, Agents: AgentSplit{Updated: 3, Failed: 2, Unchanged: 5}}),
			group("eu", 4, &GroupRollout{InConfig: true, State: rollout.StateRolledBack, Agents: AgentSplit{Failed: 1, Unchanged: 3}}),
			group("us", 3, &GroupRollout{InConfig: true, State: rollout.StateDone, Stale: true, Agents: AgentSplit{Unchanged: 3}}),
			group("bad", 0, &GroupRollout{InConfig: true, StatusInvalid: true}),
			group("lab", 5, &GroupRollout{Agents: AgentSplit{Updated: 1, Unchanged: 4}}),
		},
	}
	want := AppProgress{Start: "1.0.0", Target: "2.0.0", Mode: rollout.ModePaused, Groups: 5, GroupsDone: 1,
		Halted: []string{"prod"}, RolledBack: []string{"eu"}, Agents: 24, OnTarget: 6, Failed: 3}
	if diff := cmp.Diff(want, Progress(rep)); diff != "" {
		t.Errorf("Progress (-want +got):\n%s", diff)
	}
	noPlan := StatusReport{Groups: []GroupReport{group("prod", 7, nil)}}
	want = AppProgress{Halted: []string{}, RolledBack: []string{}, Agents: 7}
	if diff := cmp.Diff(want, Progress(noPlan)); diff != "" {
		t.Errorf("Progress with no plan (-want +got):\n%s", diff)
	}
}
