package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// nChain is n groups g0 → g1 → … (each depending on the one before,
// as a plain list does); the tests' plans are critical, so that only the
// order holds a group back, not a window.
func nChain(n int) Config {
	cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC"}
	for i := range n {
		g := DefaultGroup(fmt.Sprintf("g%d", i))
		g.CanaryCount = 1
		cfg.Groups = append(cfg.Groups, g)
	}
	return cfg
}

// stoppedStatus is group g stopped on v2 the way kind says: "rolledback"
// (an operator rolled it back after it was done), "halted-canary" or
// "halted-active" (it halted itself).
func stoppedStatus(t *testing.T, g, kind string, at time.Time) GroupStatus {
	t.Helper()
	st := GroupStatus{V: 1, Group: g, State: StateDone, TargetVersion: v2, StartVersion: v1, InitialCount: 10, Progress: 1,
		StartedAt: at.Add(-2 * time.Hour), DoneAt: at.Add(-time.Hour), Mode: ModeEnabled}
	switch kind {
	case "rolledback":
		rb, _, err := Rollback(st, "bad release", at)
		if err != nil {
			t.Fatal(err)
		}
		return rb
	case "halted-canary", "halted-active":
		st.State, st.DoneAt, st.Progress = StateCanary, time.Time{}, 0
		if kind == "halted-active" {
			st.State, st.Progress = StateActive, 0.4
		}
		st.Halted, st.HaltReason, st.HaltedAt = true, "canary x failed", at
		return st
	}
	t.Fatalf("unknown kind %q", kind)
	return GroupStatus{}
}

// criticalSpec is v1 → v2, starting outside windows.
func criticalSpec() Spec {
	spec := DefaultSpec(v1, v2)
	spec.Critical = true
	return spec
}

// doneStatus is group g done on v2 at at.
func doneStatus(g string, at time.Time) GroupStatus {
	return GroupStatus{V: 1, Group: g, State: StateDone, TargetVersion: v2, StartVersion: v1, InitialCount: 10, Progress: 1,
		StartedAt: at.Add(-time.Hour), DoneAt: at, Mode: ModeEnabled}
}

// TestChainStoppedAbove is issue 25 point 1 (RFD 169: groups after a
// rolled-back group never start): in chains of 3 and 4 groups, with the
// group at each level rolled back or halted and every group between it and
// the group looked at done (finished before the rollback, or run or marked
// done by an operator past a halt), no later group starts, says which group
// above holds it, and none of its agents is told to update to the target.
func TestChainStoppedAbove(t *testing.T) {
	now := mustTime(t, "2024-03-05T03:10:00Z")
	ids := spreadIDs(10, 0.5)
	agents := onVersion(ids, v1)
	for _, n := range []int{3, 4} {
		for _, kind := range []string{"rolledback", "halted-canary", "halted-active"} {
			for level := 0; level < n-1; level++ {
				for group := level + 1; group < n; group++ {
					name := fmt.Sprintf("chain%d/g%d-%s/g%d", n, level, kind, group)
					t.Run(name, func(t *testing.T) {
						cfg := nChain(n)
						plan := Plan{Spec: criticalSpec(), Groups: map[string]GroupStatus{}}
						for i := range level {
							plan.Groups[fmt.Sprintf("g%d", i)] = doneStatus(fmt.Sprintf("g%d", i), now.Add(-3*time.Hour))
						}
						stopped := fmt.Sprintf("g%d", level)
						plan.Groups[stopped] = stoppedStatus(t, stopped, kind, now.Add(-30*time.Minute))
						for i := level + 1; i < group; i++ {
							plan.Groups[fmt.Sprintf("g%d", i)] = doneStatus(fmt.Sprintf("g%d", i), now.Add(-10*time.Minute))
						}
						g := fmt.Sprintf("g%d", group)
						prev := newStatus(g, plan.Spec, now.Add(-time.Hour), "new target_version 2.0.0")
						st, evs := Next(Input{Config: cfg, Group: g, Spec: plan.Spec, Prev: prev,
							Predecessors: plan.Predecessors(cfg, g), Agents: agents, Counts: CountAgents(agents), Now: now})
						if st.State != StateUnstarted {
							t.Fatalf("%s is %s (reason %q) with %s %s above it: want unstarted", g, st.State, st.Reason, stopped, kind)
						}
						if len(evs) != 0 {
							t.Errorf("events: %v", kinds(evs))
						}
						if !strings.Contains(st.Waiting, fmt.Sprintf("%q", stopped)) {
							t.Errorf("waiting = %q, want it to name group %q", st.Waiting, stopped)
						}
						for _, id := range ids {
							if v, update := Decide(id, plan.Spec, st, ModeEnabled); update || v == v2 {
								t.Fatalf("agent %s of %s told (%s, update=%v), want %s and no update", id, g, v, update, v1)
							}
						}
					})
				}
			}
		}
	}
}

// TestChainStoppedAboveNot: what does not stop a group: every group above
// done, a halt since cleared (reset), an ancestor's status for another
// target (the controller resets it first), and an operator's run of the
// group itself.
func TestChainStoppedAboveNot(t *testing.T) {
	now := mustTime(t, "2024-03-05T03:10:00Z")
	agents := onVersion(spreadIDs(10, 0.5), v1)
	cfg := nChain(3)
	spec := criticalSpec()
	tests := []struct {
		name string
		g0   GroupStatus
		prev func(GroupStatus) GroupStatus
	}{
		{name: "all done", g0: doneStatus("g0", now.Add(-time.Hour))},
		{name: "halt reset, then marked done", g0: func() GroupStatus {
			st := stoppedStatus(t, "g0", "halted-active", now.Add(-time.Hour))
			st, _, err := MarkDone(st, "", now.Add(-time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			return st
		}()},
		{name: "rolled back for another target", g0: func() GroupStatus {
			st := stoppedStatus(t, "g0", "rolledback", now.Add(-time.Hour))
			st.TargetVersion = "1.5.0"
			return st
		}()},
		{name: "run requested", g0: stoppedStatus(t, "g0", "rolledback", now.Add(-time.Hour)), prev: func(st GroupStatus) GroupStatus {
			st, _, err := Run(st, "ship it", now.Add(-time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := Plan{Spec: spec, Groups: map[string]GroupStatus{"g0": tt.g0, "g1": doneStatus("g1", now.Add(-time.Minute))}}
			prev := newStatus("g2", spec, now.Add(-time.Hour), "new target_version 2.0.0")
			if tt.prev != nil {
				prev = tt.prev(prev)
			}
			st, _ := Next(Input{Config: cfg, Group: "g2", Spec: spec, Prev: prev, Predecessors: plan.Predecessors(cfg, "g2"),
				Agents: agents, Counts: CountAgents(agents), Now: now})
			if st.State != StateCanary {
				t.Errorf("g2 is %s (waiting %q), want canary", st.State, st.Waiting)
			}
		})
	}
}

// TestChainIssueScenario replays issue 25 point 1 as the controller's pass
// does it (groups in order, each deciding on the statuses the pass wrote
// before it): dev done, staging active; the operator rolls dev back; when
// staging finishes, prod does not start in the same pass, and its agents
// are not told 2.0.0 update=true.
func TestChainIssueScenario(t *testing.T) {
	t0 := mustTime(t, "2024-03-05T03:10:00Z")
	cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC"}
	for _, name := range []string{"dev", "staging", "prod"} {
		g := DefaultGroup(name)
		g.CanaryCount = 0
		cfg.Groups = append(cfg.Groups, g)
	}
	spec := DefaultSpec(v1, v2)
	spec.Critical = true
	agents := map[string][]AgentView{
		"dev":     onVersion(spreadIDs(2, 0.1), v1),
		"staging": onVersion(spreadIDs(2, 0.3), v1),
		"prod":    onVersion(spreadIDs(3, 0.6), v1),
	}
	plan := Plan{Spec: spec, Groups: map[string]GroupStatus{}}
	pass := func(now time.Time) {
		for _, g := range cfg.EvalOrder() {
			st, _ := Next(Input{Config: cfg, Group: g, Spec: spec, Prev: plan.Groups[g], Predecessors: plan.Predecessors(cfg, g),
				Agents: agents[g], Counts: CountAgents(agents[g]), Now: now})
			plan.Groups[g] = st
		}
	}
	// dev rolls out and is done; staging starts.
	agents["dev"] = onVersion(spreadIDs(2, 0.1), v2)
	pass(t0)
	pass(t0.Add(time.Minute))
	if dev, staging := plan.Groups["dev"], plan.Groups["staging"]; dev.State != StateDone || staging.State != StateActive {
		t.Fatalf("dev %s, staging %s (%s): want done and active", dev.State, staging.State, staging.Waiting)
	}
	// The operator rolls dev back.
	rb, _, err := Rollback(plan.Groups["dev"], "bad release", t0.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	plan.Groups["dev"] = rb
	agents["dev"] = onVersion(spreadIDs(2, 0.1), v1)
	// Staging finishes.
	agents["staging"] = onVersion(spreadIDs(2, 0.3), v2)
	pass(t0.Add(3 * time.Minute))
	pass(t0.Add(4 * time.Minute))
	if st := plan.Groups["staging"]; st.State != StateDone {
		t.Fatalf("staging is %s, want done", st.State)
	}
	prod := plan.Groups["prod"]
	if prod.State != StateUnstarted || !strings.Contains(prod.Waiting, `"dev"`) || !strings.Contains(prod.Waiting, "dev → staging → prod") {
		t.Fatalf("prod is %s, waiting %q: want unstarted, waiting for dev", prod.State, prod.Waiting)
	}
	for _, a := range agents["prod"] {
		if v, update := Decide(a.ID, spec, prod, ModeEnabled); v != v1 || update {
			t.Errorf("prod agent %s told %s update=%v, want %s update=false", a.ID, v, update, v1)
		}
	}
}

// TestAncestors: nearest first, each once, through explicit and implicit
// depends_on, and a cycle (refused by Validate) does not loop.
func TestAncestors(t *testing.T) {
	cfg := nChain(4)
	if got, want := strings.Join(cfg.Ancestors("g3"), ","), "g2,g1,g0"; got != want {
		t.Errorf("Ancestors(g3) = %s, want %s", got, want)
	}
	if got := cfg.Ancestors("g0"); len(got) != 0 {
		t.Errorf("Ancestors(g0) = %v, want none", got)
	}
	// Diamond: g3 depends on g1 and g2, both on g0.
	cfg.Groups[2].DependsOn = []string{"g0"}
	cfg.Groups[3].DependsOn = []string{"g1", "g2"}
	if got, want := strings.Join(cfg.Ancestors("g3"), ","), "g1,g2,g0"; got != want {
		t.Errorf("diamond: Ancestors(g3) = %s, want %s", got, want)
	}
	cfg.Groups[0].DependsOn = []string{"g3"}
	if got := cfg.Ancestors("g3"); len(got) != 3 {
		t.Errorf("cycle: Ancestors(g3) = %v, want the three others once", got)
	}
}
