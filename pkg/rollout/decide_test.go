package rollout

import (
	"fmt"
	"math"
	"testing"
)

// TestDecideProxyAnswer checks every row of RFD 169's three "Proxy answer"
// tables, for a canary, an agent below progress and one above it.
func TestDecideProxyAnswer(t *testing.T) {
	const v1, v2 = "1.0.0", "2.0.0"
	spec := DefaultSpec(v1, v2)
	canary, low, high := idAt(0.5), idAt(0.1), idAt(0.9)
	status := func(s State) GroupStatus {
		return GroupStatus{V: 1, Group: "prod", State: s, TargetVersion: v2, StartVersion: v1, Progress: 0.3,
			Canaries: []Canary{{ID: canary}}}
	}
	type answer struct {
		version string
		update  bool
	}
	tests := []struct {
		mode  Mode
		state State
		// canary, below progress, above progress
		want [3]answer
	}{
		// Rollout status: disabled.
		{ModeDisabled, StateUnstarted, [3]answer{{v2, false}, {v2, false}, {v2, false}}},
		{ModeDisabled, StateCanary, [3]answer{{v2, false}, {v2, false}, {v2, false}}},
		{ModeDisabled, StateActive, [3]answer{{v2, false}, {v2, false}, {v2, false}}},
		{ModeDisabled, StateDone, [3]answer{{v2, false}, {v2, false}, {v2, false}}},
		{ModeDisabled, StateRolledBack, [3]answer{{v2, false}, {v2, false}, {v2, false}}},
		// Rollout status: paused.
		{ModePaused, StateUnstarted, [3]answer{{v1, false}, {v1, false}, {v1, false}}},
		{ModePaused, StateCanary, [3]answer{{v1, false}, {v1, false}, {v1, false}}},
		{ModePaused, StateActive, [3]answer{{v2, false}, {v2, false}, {v2, false}}},
		{ModePaused, StateDone, [3]answer{{v2, false}, {v2, false}, {v2, false}}},
		{ModePaused, StateRolledBack, [3]answer{{v1, false}, {v1, false}, {v1, false}}},
		// Rollout status: enabled.
		{ModeEnabled, StateUnstarted, [3]answer{{v1, false}, {v1, false}, {v1, false}}},
		{ModeEnabled, StateCanary, [3]answer{{v2, true}, {v1, false}, {v1, false}}},
		{ModeEnabled, StateActive, [3]answer{{v2, true}, {v2, true}, {v2, false}}},
		{ModeEnabled, StateDone, [3]answer{{v2, true}, {v2, true}, {v2, true}}},
		{ModeEnabled, StateRolledBack, [3]answer{{v1, true}, {v1, true}, {v1, true}}},
	}
	for _, tt := range tests {
		for i, id := range []AgentID{canary, low, high} {
			who := [3]string{"canary", "below progress", "above progress"}[i]
			t.Run(fmt.Sprintf("%s/%s/%s", tt.mode, tt.state, who), func(t *testing.T) {
				v, u := Decide(id, spec, status(tt.state), tt.mode)
				if got := (answer{v, u}); got != tt.want[i] {
					t.Errorf("Decide = %+v, want %+v", got, tt.want[i])
				}
			})
		}
	}
}

func TestDecideEdges(t *testing.T) {
	const v1, v2 = "1.0.0", "2.0.0"
	spec := DefaultSpec(v1, v2)
	canary, low, high := idAt(0.5), idAt(0.1), idAt(0.9)
	status := func(s State, edit func(*GroupStatus)) GroupStatus {
		st := GroupStatus{V: 1, Group: "prod", State: s, TargetVersion: v2, StartVersion: v1, Progress: 0.3,
			Canaries: []Canary{{ID: canary}}}
		if edit != nil {
			edit(&st)
		}
		return st
	}
	halted := func(st *GroupStatus) { st.Halted = true }
	tests := []struct {
		name        string
		id          AgentID
		spec        Spec
		st          GroupStatus
		mode        Mode
		wantVersion string
		wantUpdate  bool
	}{
		{"halted canary state stops the canary", canary, spec, status(StateCanary, halted), ModeEnabled, v1, false},
		{"halted active stops agents below progress", low, spec, status(StateActive, halted), ModeEnabled, v1, false},
		{"halted active stops canaries", canary, spec, status(StateActive, halted), ModeEnabled, v1, false},
		{"halted and paused", low, spec, status(StateActive, halted), ModePaused, v1, false},
		{"halted and disabled is the RFD row", low, spec, status(StateActive, halted), ModeDisabled, v2, false},
		{"id exactly at progress is not below it", idAt(0.25), spec, status(StateActive, func(st *GroupStatus) { st.Progress = 0.25 }), ModeEnabled, v2, false},
		{"id just below progress", idAt(0.25), spec, status(StateActive, func(st *GroupStatus) { st.Progress = math.Nextafter(0.25, 1) }), ModeEnabled, v2, true},
		{"progress 1 takes everyone", high, spec, status(StateActive, func(st *GroupStatus) { st.Progress = 1 }), ModeEnabled, v2, true},
		{"progress 0 takes nobody", idAt(0), spec, status(StateActive, func(st *GroupStatus) { st.Progress = 0 }), ModeEnabled, v2, false},
		{"stale status done on another target holds that target", low, spec, status(StateDone, func(st *GroupStatus) { st.TargetVersion = "1.5.0" }), ModeEnabled, "1.5.0", false},
		{"stale status not done on another target holds what it held", low, spec, status(StateActive, func(st *GroupStatus) { st.TargetVersion = "1.5.0"; st.HoldVersion = "0.9.0" }), ModeEnabled, "0.9.0", false},
		{"stale halted status is unstarted", low, spec, status(StateActive, func(st *GroupStatus) { st.TargetVersion = "1.5.0"; st.Halted = true }), ModePaused, v1, false},
		{"no status yet", low, spec, GroupStatus{}, ModeEnabled, v1, false},
		{"unknown state", low, spec, status("exploded", nil), ModeEnabled, v1, false},
		{"status mode paused wins over enabled", low, spec, status(StateDone, func(st *GroupStatus) { st.Mode = ModePaused }), ModeEnabled, v2, false},
		{"spec mode disabled wins", low, func() Spec { s := spec; s.Mode = ModeDisabled; return s }(), status(StateRolledBack, nil), ModeEnabled, v2, false},
		{"empty mode is enabled", high, spec, status(StateDone, nil), "", v2, true},
		{"no valid target: keep what you have", low, Spec{}, status(StateDone, nil), ModeEnabled, "", false},
		{"rolledback without a valid start version", low, func() Spec { s := spec; s.StartVersion = ""; return s }(), status(StateRolledBack, nil), ModeEnabled, "", false},
		{"downgrade rolls the other way", low, DefaultSpec(v2, v1), GroupStatus{V: 1, State: StateDone, TargetVersion: v1}, ModeEnabled, v1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, u := Decide(tt.id, tt.spec, tt.st, tt.mode)
			if v != tt.wantVersion || u != tt.wantUpdate {
				t.Errorf("Decide = (%q, %v), want (%q, %v)", v, u, tt.wantVersion, tt.wantUpdate)
			}
		})
	}
}
