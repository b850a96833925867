package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestNextInfrastructureHold (issue 15 point 2): while more than
// infrastructure_hold of the agents in flight (or of the canaries) are
// blocked on infrastructure, the group's progress is held with the count
// and the causes in Held; nothing is failed, nothing halts, alert_after
// still alerts, and the hold ends by itself when they recover.
func TestNextInfrastructureHold(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	now := start.Add(time.Hour)
	ids := spreadIDs(10, 0.5) // fractions 0.05, 0.15, …, 0.95
	blockedOn := func(cause string) AgentView {
		return AgentView{ActiveVersion: v1, Error: "install " + v2 + ": " + cause, ErrorClass: FailureInfrastructure, ErrorCause: cause,
			StartTime: start.Add(time.Minute)}
	}
	updated := AgentView{ActiveVersion: v2, StartTime: start.Add(time.Minute)}
	tests := []struct {
		name       string
		state      State
		hold       Percent
		prevHeld   string
		progress   float64 // of the status before; 0 is 0.2
		alertAfter Duration
		agents     map[int]AgentView // by index into ids; the rest run v1
		// Want:
		held         string // a substring of Held; "" for not held
		blocked      int
		progressMove bool // progress moved past 0.2
		events       []string
		alerted      bool
	}{
		{name: "every agent in flight blocked: held with the count and causes", state: StateActive, hold: 50,
			agents:  map[int]AgentView{0: blockedOn("disk full"), 1: blockedOn("download: HTTP 503")},
			held:    "2 of 2 agents in flight blocked on infrastructure (disk full: 1, download: HTTP 503: 1), more than infrastructure_hold 50%",
			blocked: 2, events: []string{"held"}},
		{name: "blocked hosts that once rolled back from another version: held, not failed", state: StateActive, hold: 50,
			agents: map[int]AgentView{0: func() AgentView {
				a := blockedOn("release repository: wrong file")
				a.Rollback, a.RollbackFrom = true, "1.1.5" // kept from an earlier, bad release
				return a
			}(), 1: blockedOn("disk full")},
			held:    "2 of 2 agents in flight blocked on infrastructure",
			blocked: 2, events: []string{"held"}},
		{name: "one blocked agent left alone in the window of 2: not held, progress moves", state: StateActive, hold: 50,
			agents: map[int]AgentView{0: blockedOn("disk full"), 1: updated}, blocked: 1, progressMove: true},
		{name: "the same at infrastructure_hold 100%: never held, progress moves", state: StateActive, hold: 100,
			agents: map[int]AgentView{0: blockedOn("disk full"), 1: updated}, blocked: 1, progressMove: true},
		{name: "half blocked is not more than 50%: not held", state: StateActive, hold: 50,
			agents:  map[int]AgentView{0: blockedOn("disk full"), 1: {ActiveVersion: v1, UpdatingTo: v2, StartTime: now.Add(-time.Minute)}},
			blocked: 1},
		{name: "0% holds on the first blocked agent", state: StateActive, hold: 0,
			agents: map[int]AgentView{0: blockedOn("disk full"), 1: {ActiveVersion: v1, UpdatingTo: v2, StartTime: now.Add(-time.Minute)}},
			held:   "1 of 2 agents in flight", blocked: 1, events: []string{"held"}},
		{name: "blocked agents outside the window do not hold it", state: StateActive, hold: 50,
			agents:  map[int]AgentView{0: updated, 1: updated, 5: blockedOn("disk full"), 6: blockedOn("disk full")},
			blocked: 2, progressMove: true},
		{name: "an unreachable blocked agent is not in flight", state: StateActive, hold: 50,
			agents: map[int]AgentView{0: updated, 1: func() AgentView {
				a := blockedOn("disk full")
				a.Unreachable = true
				return a
			}()},
			progressMove: true},
		{name: "still held: the text follows the count, no second event", state: StateActive, hold: 50, progress: 0.3,
			prevHeld: "3 of 3 agents in flight blocked on infrastructure (disk full: 3), …",
			agents:   map[int]AgentView{0: blockedOn("disk full"), 1: blockedOn("disk full"), 2: updated},
			held:     "2 of 2 agents in flight blocked on infrastructure (disk full: 2)", blocked: 2},
		{name: "recovered: the hold ends by itself and progress moves", state: StateActive, hold: 50,
			prevHeld: "2 of 2 agents in flight blocked on infrastructure (disk full: 2), …",
			agents:   map[int]AgentView{0: updated, 1: updated}, progressMove: true, events: []string{"resumed"}},
		{name: "held past alert_after: alerted, never halted", state: StateActive, hold: 50, alertAfter: Duration(30 * time.Minute),
			agents: map[int]AgentView{0: blockedOn("disk full"), 1: blockedOn("disk full")},
			held:   "2 of 2 agents in flight blocked on infrastructure (disk full: 2)", blocked: 2, events: []string{"alert", "held"}, alerted: true},
		{name: "canary blocked: held in canary, not halted", state: StateCanary, hold: 50,
			agents: map[int]AgentView{0: blockedOn("lock held by another updater")},
			held:   "1 of 1 canaries blocked on infrastructure (lock held by another updater: 1)", blocked: 1, events: []string{"held"}},
		{name: "many causes: the three most frequent, then how many more", state: StateActive, hold: 50, progress: 0.5,
			agents: map[int]AgentView{0: blockedOn("a"), 1: blockedOn("b"), 2: blockedOn("c"), 3: blockedOn("d"), 4: blockedOn("d")},
			held:   "(d: 2, a: 1, b: 1, 1 more)", blocked: 5, events: []string{"held"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := startedStatus(tt.state, start, ids[0])
			prev.Held = tt.prevHeld
			if tt.progress > 0 && tt.state == StateActive {
				prev.Progress = tt.progress
			}
			agents := onVersion(ids, v1)
			for i, a := range tt.agents {
				a.ID = ids[i]
				agents[i] = a
			}
			cfg := testConfig()
			cfg.Groups[0].InfrastructureHold = tt.hold
			if tt.alertAfter > 0 {
				cfg.Groups[0].AlertAfter = tt.alertAfter
			}
			in := Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents), Now: now}
			st, evs := Next(in)
			if (st.Held != "") != (tt.held != "") || !strings.Contains(st.Held, tt.held) {
				t.Errorf("held = %q, want %q", st.Held, tt.held)
			}
			if st.Blocked != tt.blocked {
				t.Errorf("blocked = %d, want %d", st.Blocked, tt.blocked)
			}
			if st.Halted || st.FailedCount != 0 {
				t.Errorf("halted %v (%s), failed_count %d: blocked agents are neither", st.Halted, st.HaltReason, st.FailedCount)
			}
			if st.State != tt.state {
				t.Errorf("state %s, want %s", st.State, tt.state)
			}
			if moved := st.Progress > prev.Progress; moved != tt.progressMove {
				t.Errorf("progress %v → %v, want moved = %v", prev.Progress, st.Progress, tt.progressMove)
			}
			if got := kinds(evs); !slices.Equal(got, tt.events) {
				t.Errorf("events %v, want %v", got, tt.events)
			}
			if st.Alerted != tt.alerted {
				t.Errorf("alerted = %v, want %v", st.Alerted, tt.alerted)
			}
		})
	}
}

// TestNextInfrastructureHoldThenCompletes runs a group through a release
// site outage: every agent it tells to update is blocked; the group holds
// with nothing failed; the site comes back, the agents update, and the
// group is done by itself.
func TestNextInfrastructureHoldThenCompletes(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	ids := spreadIDs(20, 0.5)
	cfg := testConfig()
	cfg.Groups[0].CanaryCount = 0
	spec := DefaultSpec(v1, v2)
	spec.Schedule = ScheduleImmediate
	agents := onVersion(ids, v1)
	st := GroupStatus{}
	now := start
	step := func() {
		t.Helper()
		var evs []Event
		st, evs = Next(Input{Config: cfg, Group: "staging", Spec: spec, Prev: st, Agents: agents, Counts: CountAgents(agents), Now: now})
		for _, e := range evs {
			t.Logf("%s %s: %s", now.Format(time.TimeOnly), e.Kind, e.Reason)
		}
		now = now.Add(time.Minute)
	}
	step()
	siteDown := true
	var heldSteps int
	for range 200 {
		if st.State == StateDone {
			break
		}
		// Every agent told to update tries: blocked while the site is
		// down, on the target once it is back.
		for i, a := range agents {
			if a.ActiveVersion == v2 {
				continue
			}
			if _, update := Decide(a.ID, spec, st, ModeEnabled); !update {
				continue
			}
			if siteDown {
				agents[i] = AgentView{ID: a.ID, ActiveVersion: v1, Error: "download: HTTP 503", ErrorClass: FailureInfrastructure,
					ErrorCause: "release site: HTTP 503", StartTime: now}
			} else {
				agents[i] = AgentView{ID: a.ID, ActiveVersion: v2, StartTime: now}
			}
		}
		step()
		if st.Held != "" {
			heldSteps++
			if heldSteps == 10 {
				siteDown = false
			}
		}
		if st.Halted || st.FailedCount != 0 {
			t.Fatalf("halted %v (%s), failed %d during an outage", st.Halted, st.HaltReason, st.FailedCount)
		}
		if siteDown && st.Progress > 0.2+1e-9 {
			t.Fatalf("progress %v grew past the first window while every agent in flight was blocked", st.Progress)
		}
	}
	if heldSteps < 10 || st.State != StateDone || st.Held != "" {
		t.Fatalf("held %d steps, state %s, held %q: want held 10+ steps, then done with no hold", heldSteps, st.State, st.Held)
	}
}

// TestNextBlockedHostNeverStopsGroup: one host in ten is blocked for good
// (a full disk) with the lowest id, so it is in flight from the first
// step; the nine others have ids above the formula's first window. They
// must all be told to update, one at least whenever nothing else is in
// flight, with never more than the window in flight, no hold (one blocked
// host of a window of three is under infrastructure_hold), no halt and
// nothing counted failed. The group stays active: the blocked host is not
// on the target.
func TestNextBlockedHostNeverStopsGroup(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	cfg := testConfig()
	cfg.Groups[0].CanaryCount, cfg.Groups[0].MaxInFlight = 0, 30
	spec := DefaultSpec(v1, v2)
	spec.Schedule = ScheduleImmediate
	ids := append([]AgentID{idAt(0.05)}, spreadIDs(20, 0.5)[11:]...)
	agents := onVersion(ids, v1)
	st := GroupStatus{}
	now := start
	for range 40 {
		st, _ = Next(Input{Config: cfg, Group: "staging", Spec: spec, Prev: st, Agents: agents, Counts: CountAgents(agents), Now: now})
		now = now.Add(time.Minute)
		inFlight := 0
		for i, a := range agents {
			if a.ActiveVersion == v2 {
				continue
			}
			if _, update := Decide(a.ID, spec, st, ModeEnabled); !update {
				continue
			}
			inFlight++
			if i == 0 {
				agents[i] = AgentView{ID: a.ID, ActiveVersion: v1, Error: "fetch: not enough free space", ErrorClass: FailureInfrastructure,
					ErrorCause: "disk full", StartTime: now}
			} else {
				agents[i] = AgentView{ID: a.ID, ActiveVersion: v2, StartTime: now}
			}
		}
		if w := InFlightWindow(cfg.Groups[0].MaxInFlight, len(ids)); inFlight > w {
			t.Fatalf("%d agents told to update at progress %v, more than the window %d", inFlight, st.Progress, w)
		}
		if st.Halted || st.FailedCount != 0 || st.Held != "" {
			t.Fatalf("halted %v (%s), failed %d, held %q with one blocked host", st.Halted, st.HaltReason, st.FailedCount, st.Held)
		}
	}
	for _, a := range agents[1:] {
		if a.ActiveVersion != v2 {
			t.Errorf("agent %s (%.3f) still on %s at progress %v: one blocked host stopped the group", a.ID, a.ID.Fraction(), a.ActiveVersion, st.Progress)
		}
	}
	if st.State != StateActive || st.Blocked != 1 {
		t.Errorf("state %s, blocked %d; want active with the 1 blocked host", st.State, st.Blocked)
	}
}
