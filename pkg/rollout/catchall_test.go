package rollout

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// caughtGroups are n groups not in testConfig, each with per agents on
// version v, their ids spread over the id space and apart from those of
// spreadIDs(…, 0.5).
func caughtGroups(n, per int, v string) []CaughtGroup {
	var out []CaughtGroup
	ids := spreadIDs(n*per, 0.25)
	for i := range n {
		out = append(out, CaughtGroup{Group: fmt.Sprintf("lab-%03d", i), Agents: onVersion(ids[i*per:(i+1)*per], v)})
	}
	return out
}

// The catch-all group (prod, the last of testConfig, unless catch_all names
// another) counts the agents of the groups that follow it as its own: the
// initial count and the canaries, progress, the failures and done.
func TestNextCatchAll(t *testing.T) {
	inWindow := mustTime(t, "2024-03-05T03:10:00Z")
	done := GroupStatus{V: 1, Group: "staging", State: StateDone, TargetVersion: v2, DoneAt: mustTime(t, "2024-03-04T20:00:00Z")}
	own := onVersion(spreadIDs(10, 0.5), v1)
	base := func(group string, agents []AgentView) Input {
		return Input{Config: testConfig(), Group: group, Spec: DefaultSpec(v1, v2), Now: inWindow,
			Predecessors: map[string]GroupStatus{"staging": done}, Agents: agents, Counts: CountAgents(agents)}
	}
	active := func(initial int, progress float64) GroupStatus {
		st := startedStatus(StateActive, inWindow.Add(-time.Hour), "")
		st.Group, st.InitialCount, st.Progress = "prod", initial, progress
		return st
	}
	tests := []struct {
		name string
		in   Input
		// want: state, initial count, the reason's start or the waiting text.
		state   State
		initial int
		text    string
		halted  bool
		failed  int
		check   func(t *testing.T, st GroupStatus)
	}{
		{name: "zero caught hosts: as before", in: base("prod", own), state: StateCanary, initial: 10, text: "window open: starting with 10 agents, 3 canaries"},
		{name: "zero caught hosts, none of its own: waits as before", in: base("prod", nil), state: StateUnstarted, text: "no agents present"},
		{name: "caught groups with no agents count nothing", in: func() Input {
			in := base("prod", own)
			in.Caught = []CaughtGroup{{Group: "lab"}, {Group: "edge"}}
			return in
		}(), state: StateCanary, initial: 10, text: "starting with 10 agents"},
		{name: "many caught hosts and none of its own: starts with them", in: func() Input {
			in := base("prod", nil)
			in.Caught = caughtGroups(30, 20, v1)
			return in
		}(), state: StateCanary, initial: 600, text: "window open: starting with 600 agents, 3 canaries", check: func(t *testing.T, st GroupStatus) {
			caught := map[AgentID]bool{}
			for _, cg := range caughtGroups(30, 20, v1) {
				for _, a := range cg.Agents {
					caught[a.ID] = true
				}
			}
			for _, c := range st.Canaries {
				if !caught[c.ID] {
					t.Errorf("canary %s is not a caught host", c.ID)
				}
			}
		}},
		{name: "caught hosts beside its own", in: func() Input {
			in := base("prod", own)
			in.Caught = caughtGroups(2, 5, v1)
			return in
		}(), state: StateCanary, initial: 20, text: "starting with 20 agents"},
		{name: "CatchAllNone: caught hosts count in no group", in: func() Input {
			in := base("prod", nil)
			in.Config.CatchAll = CatchAllNone
			in.Caught = caughtGroups(3, 4, v1)
			return in
		}(), state: StateUnstarted, text: "no agents present"},
		{name: "a group that is not the catch-all ignores them", in: func() Input {
			in := base("staging", nil)
			in.Caught = caughtGroups(3, 4, v1)
			return in
		}(), state: StateUnstarted, text: "no agents present"},
		{name: "catch_all names the first group: it counts them", in: func() Input {
			in := base("staging", nil)
			in.Config.CatchAll = "staging"
			in.Caught = caughtGroups(3, 4, v1)
			return in
		}(), state: StateCanary, initial: 12, text: "starting with 12 agents"},
		{name: "a caught group that is in the config, itself, a bad name or twice: not counted", in: func() Input {
			in := base("prod", own)
			one := onVersion([]AgentID{idAt(0.01)}, v1)
			in.Caught = []CaughtGroup{{Group: "staging", Agents: one}, {Group: "prod", Agents: one}, {Group: "Bad.Name", Agents: one},
				{Group: "lab", Agents: onVersion([]AgentID{idAt(0.02)}, v1)}, {Group: "lab", Agents: onVersion([]AgentID{idAt(0.03)}, v1)}}
			return in
		}(), state: StateCanary, initial: 11, text: "starting with 11 agents"},
		{name: "past MaxCaughtGroups groups: the rest not counted", in: func() Input {
			in := base("prod", nil)
			in.Caught = caughtGroups(MaxCaughtGroups+5, 1, v1)
			return in
		}(), state: StateCanary, initial: MaxCaughtGroups, text: fmt.Sprintf("starting with %d agents", MaxCaughtGroups)},
		{name: "caught failures count towards failure_threshold: halt", in: func() Input {
			in := base("prod", own)
			in.Prev = active(20, 0.5)
			failed := caughtGroups(1, 10, v1)[0]
			for i := range failed.Agents[:3] {
				failed.Agents[i].Rollback, failed.Agents[i].RollbackFrom = true, v2
				failed.Agents[i].StartTime = inWindow.Add(-time.Minute)
			}
			in.Caught = []CaughtGroup{failed}
			return in
		}(), state: StateActive, initial: 20, halted: true, failed: 3},
		{name: "not done while a caught host is off target", in: func() Input {
			in := base("prod", onVersion(spreadIDs(10, 0.5), v2))
			in.Prev = active(12, 1)
			in.Caught = []CaughtGroup{{Group: "lab", Agents: append(onVersion([]AgentID{idAt(0.01)}, v2), onVersion([]AgentID{idAt(0.99)}, v1)...)}}
			return in
		}(), state: StateActive, initial: 12},
		{name: "done once the caught hosts are on target too", in: func() Input {
			in := base("prod", onVersion(spreadIDs(10, 0.5), v2))
			in.Prev = active(12, 1)
			in.Caught = []CaughtGroup{{Group: "lab", Agents: onVersion([]AgentID{idAt(0.01), idAt(0.99)}, v2)}}
			return in
		}(), state: StateDone, initial: 12},
		{name: "the in-flight bound is of the initial count with them", in: func() Input {
			in := base("prod", nil)
			in.Prev = active(20, 0)
			in.Caught = caughtGroups(2, 10, v1)
			return in
		}(), state: StateActive, initial: 20, check: func(t *testing.T, st GroupStatus) {
			// 20% of 20: 4 of the 20 (caught) agents may update.
			if want := 4.0 / 20; st.Progress < want || st.Progress > want+0.05 {
				t.Errorf("progress %v, want about %v (4 of 20 in flight)", st.Progress, want)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			callerAgents, callerCounts := slices.Clone(tt.in.Agents), len(tt.in.Counts)
			st, _ := Next(tt.in)
			if st.State != tt.state || st.InitialCount != tt.initial {
				t.Errorf("state %s, initial count %d; want %s, %d (reason %q, waiting %q)", st.State, st.InitialCount, tt.state, tt.initial, st.Reason, st.Waiting)
			}
			if tt.text != "" && !strings.Contains(st.Reason+"|"+st.Waiting, tt.text) {
				t.Errorf("reason %q, waiting %q: want %q", st.Reason, st.Waiting, tt.text)
			}
			if st.Halted != tt.halted || st.FailedCount != tt.failed {
				t.Errorf("halted %v (%s), failed %d; want %v, %d", st.Halted, st.HaltReason, st.FailedCount, tt.halted, tt.failed)
			}
			if st.Follows != "" {
				t.Errorf("the catch-all follows %q", st.Follows)
			}
			if tt.check != nil {
				tt.check(t, st)
			}
			if diff := cmp.Diff(callerAgents, tt.in.Agents); diff != "" || len(tt.in.Counts) != callerCounts {
				t.Errorf("Next changed the caller's agents or counts:\n%s", diff)
			}
		})
	}
}

// Zero caught groups is exactly the step without the field: a fleet with no
// host outside the config's groups sees nothing new.
func TestNextCatchAllNothingCaughtIsUnchanged(t *testing.T) {
	now := mustTime(t, "2024-03-05T03:10:00Z")
	agents := onVersion(spreadIDs(10, 0.5), v1)
	in := Input{Config: testConfig(), Group: "prod", Spec: DefaultSpec(v1, v2), Now: now, Agents: agents, Counts: CountAgents(agents),
		Predecessors: map[string]GroupStatus{"staging": {V: 1, Group: "staging", State: StateDone, TargetVersion: v2}}}
	want, wantEvs := Next(in)
	in.Caught = []CaughtGroup{}
	got, gotEvs := Next(in)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-without +with empty Caught):\n%s", diff)
	}
	if diff := cmp.Diff(wantEvs, gotEvs); diff != "" {
		t.Errorf("events (-without +with empty Caught):\n%s", diff)
	}
}

// What a caught host is told is what the catch-all's own hosts are told, in
// every state: FollowStatus is a copy Decide cannot tell apart.
func TestFollowStatusDecidesAsTheCatchAll(t *testing.T) {
	now := mustTime(t, "2024-03-05T03:10:00Z")
	canary := idAt(0.9)
	spec := DefaultSpec(v1, v2)
	withState := func(state State, edit func(*GroupStatus)) GroupStatus {
		st := startedStatus(state, now, canary)
		st.Group = "prod"
		if edit != nil {
			edit(&st)
		}
		return st
	}
	tests := []struct {
		name string
		st   GroupStatus
		mode Mode
		// a caught host that is not a canary, at fraction 0.1, is told:
		version string
		update  bool
	}{
		{name: "unstarted", st: withState(StateUnstarted, func(st *GroupStatus) { st.Canaries, st.Progress = nil, 0 }), version: v1},
		{name: "canary (a caught host is the canary)", st: withState(StateCanary, nil), version: v1},
		{name: "active", st: withState(StateActive, func(st *GroupStatus) { st.Progress = 0.5 }), version: v2, update: true},
		{name: "active, halted", st: withState(StateActive, func(st *GroupStatus) { st.Progress, st.Halted = 0.5, true }), version: v1},
		{name: "canary, halted", st: withState(StateCanary, func(st *GroupStatus) { st.Halted = true }), version: v1},
		{name: "rolled back", st: withState(StateRolledBack, nil), version: v1, update: true},
		{name: "rolled back after completing an earlier version", st: withState(StateRolledBack, func(st *GroupStatus) { st.HoldVersion = "0.9.0" }), version: "0.9.0", update: true},
		{name: "done", st: withState(StateDone, nil), version: v2, update: true},
		{name: "done, paused", st: withState(StateDone, nil), mode: ModePaused, version: v2},
		{name: "active, paused by the controller", st: withState(StateActive, func(st *GroupStatus) { st.Progress, st.Mode = 0.5, ModePaused }), version: v2},
		{name: "status for another target", st: withState(StateDone, func(st *GroupStatus) { st.TargetVersion = "1.5.0" }), version: "1.5.0"},
	}
	ids := append(spreadIDs(64, 0.3), canary)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mode := tt.mode
			if mode == "" {
				mode = ModeEnabled
			}
			cp := FollowStatus(tt.st, "lab")
			if cp.Group != "lab" || cp.Follows != "prod" {
				t.Fatalf("copy: group %q follows %q, want lab following prod", cp.Group, cp.Follows)
			}
			if err := cp.Validate(); err != nil {
				t.Fatalf("the copy is not a valid status: %v", err)
			}
			for _, id := range ids {
				wv, wu := Decide(id, spec, tt.st, mode)
				gv, gu := Decide(id, spec, cp, mode)
				if wv != gv || wu != gu {
					t.Errorf("agent %s: caught host told (%q, %v), the catch-all's (%q, %v)", id, gv, gu, wv, wu)
				}
			}
			if v, u := Decide(idAt(0.1), spec, cp, mode); v != tt.version || u != tt.update {
				t.Errorf("a caught host is told (%q, %v), want (%q, %v)", v, u, tt.version, tt.update)
			}
			if tt.st.State == StateCanary && !tt.st.Halted {
				if v, u := Decide(canary, spec, cp, mode); v != v2 || !u {
					t.Errorf("a caught canary is told (%q, %v), want (%q, true)", v, u, v2)
				}
			}
			// The copy shares no memory with the catch-all's status.
			if len(cp.Canaries) > 0 {
				cp.Canaries[0].ID = idAt(0.5)
				if tt.st.Canaries[0].ID != canary {
					t.Error("changing the copy's canaries changed the catch-all's")
				}
			}
		})
	}
}

func TestCatchAllFollow(t *testing.T) {
	many := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s%03d", prefix, i))
		}
		return out
	}
	none := testConfig()
	none.CatchAll = CatchAllNone
	tests := []struct {
		name               string
		cfg                Config
		present, following []string
		follow, over       []string
	}{
		{name: "no hosts outside the config", cfg: testConfig(), present: []string{"prod", "staging"}},
		{name: "groups with hosts, sorted", cfg: testConfig(), present: []string{"lab", "edge", "prod", "lab"}, follow: []string{"edge", "lab"}},
		{name: "names that are not group names are never followed", cfg: testConfig(), present: []string{"Lab", "a.b", "", "-", "ok"}, follow: []string{"ok"}},
		{name: "a followed group without hosts is dropped", cfg: testConfig(), present: []string{"lab"}, following: []string{"edge", "lab"}, follow: []string{"lab"}},
		{name: "CatchAllNone follows none", cfg: none, present: []string{"lab", "edge"}, following: []string{"lab"}},
		{name: "no groups: no catch-all", cfg: Config{V: 1}, present: []string{"lab"}},
		{name: "past the bound: over, by name", cfg: testConfig(), present: many("g", MaxCaughtGroups+3),
			follow: many("g", MaxCaughtGroups), over: []string{fmt.Sprintf("g%03d", MaxCaughtGroups), fmt.Sprintf("g%03d", MaxCaughtGroups+1), fmt.Sprintf("g%03d", MaxCaughtGroups+2)}},
		{name: "a followed group keeps its place against newcomers", cfg: testConfig(), present: append(many("a", MaxCaughtGroups), "zz"), following: []string{"zz"},
			follow: append(many("a", MaxCaughtGroups-1), "zz"), over: []string{fmt.Sprintf("a%03d", MaxCaughtGroups-1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			follow, over := tt.cfg.CatchAllFollow(tt.present, tt.following)
			if diff := cmp.Diff(tt.follow, follow); diff != "" {
				t.Errorf("follow (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.over, over); diff != "" {
				t.Errorf("over (-want +got):\n%s", diff)
			}
		})
	}
}

// A group that was caught and is now in the config starts its own rollout,
// keeping what its hosts completed and rejected under the catch-all.
func TestNextFollowedGroupJoinsTheConfig(t *testing.T) {
	now := mustTime(t, "2024-03-05T05:00:00Z")
	ca := startedStatus(StateActive, now.Add(-time.Hour), "")
	ca.Group, ca.HoldVersion, ca.RejectedVersions = "prod", "0.9.0", []string{"0.9.5"}
	cfg := testConfig()
	lab := DefaultGroup("lab")
	lab.StartHour = 3
	cfg.Groups = append(cfg.Groups, lab)
	st, evs := Next(Input{Config: cfg, Group: "lab", Spec: DefaultSpec(v1, v2), Prev: FollowStatus(ca, "lab"), Now: now,
		Predecessors: map[string]GroupStatus{"prod": ca}})
	if st.Follows != "" || st.State != StateUnstarted || st.InitialCount != 0 || st.Canaries != nil || st.Progress != 0 {
		t.Errorf("not its own rollout: %+v", st)
	}
	if st.HoldVersion != "0.9.0" || !slices.Equal(st.RejectedVersions, []string{"0.9.5"}) {
		t.Errorf("history lost: hold %q, rejected %v", st.HoldVersion, st.RejectedVersions)
	}
	if len(evs) == 0 || !strings.Contains(evs[0].Reason, "followed catch-all group prod") {
		t.Errorf("events %+v: want a transition saying it followed prod", evs)
	}
}

func TestGroupStatusFollowsValidated(t *testing.T) {
	ok := GroupStatus{V: 1, Group: "lab", State: StateUnstarted, Follows: "prod"}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid copy refused: %v", err)
	}
	for _, follows := range []string{"lab", "Prod", "a.b", "x\u202e", strings.Repeat("a", 70)} {
		st := ok
		st.Follows = follows
		if err := st.Validate(); err == nil {
			t.Errorf("follows %q accepted", follows)
		}
	}
}
