package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestUnreachable(t *testing.T) {
	seen := mustTime(t, "2024-03-05T03:00:00Z")
	tests := []struct {
		name     string
		interval time.Duration
		since    time.Duration // now - last seen
		want     bool
	}{
		{"just heard from", 10 * time.Second, 0, false},
		{"two intervals late", 10 * time.Second, 20 * time.Second, false},
		{"exactly three intervals", 10 * time.Second, 30 * time.Second, false},
		{"past three intervals", 10 * time.Second, 30*time.Second + time.Nanosecond, true},
		{"an hour", 10 * time.Second, time.Hour, true},
		{"no interval: never", 0, time.Hour, false},
		{"negative interval: never", -time.Second, time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Unreachable(seen, seen.Add(tt.since), tt.interval); got != tt.want {
				t.Errorf("Unreachable(%v late, interval %v) = %v, want %v", tt.since, tt.interval, got, tt.want)
			}
		})
	}
	if got := UnreachableAfter(15 * time.Second); got != 45*time.Second {
		t.Errorf("UnreachableAfter(15s) = %v, want 45s", got)
	}
}

func TestCountAgentsUnreachable(t *testing.T) {
	ids := spreadIDs(5, 0.5)
	agents := []AgentView{
		{ID: ids[0], ActiveVersion: v1},
		{ID: ids[1], ActiveVersion: v1, Unreachable: true, Error: "boom", UpdatingTo: v2},
		{ID: ids[2], ActiveVersion: v1, Error: "boom"},
		{ID: ids[3], ActiveVersion: v2, Unreachable: true},
		{ID: ids[4], ActiveVersion: v1, UpdatingTo: v2},
	}
	got := CountAgents(agents)
	want := Counts{
		// The unreachable agent's error and install are out of date: it is
		// neither failed nor updating, only unreachable (and counted).
		v1: {Count: 4, FailedCount: 1, Updating: 1, Unreachable: 1, LowestID: ids[0]},
		v2: {Count: 1, Unreachable: 1, LowestID: ids[3]},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CountAgents (-want +got):\n%s", diff)
	}
	if got.Total() != 5 {
		t.Errorf("Total = %d, want 5 (unreachable agents are present)", got.Total())
	}
}

// TestNextUnreachableAndTimeout: the rules for unreachable agents (no
// heartbeat for UnreachableIntervals) and timed out updates (updating to
// the target for update_timeout) in a group of 10 agents whose window is 2
// (max_in_flight 20%) and whose failure_threshold tolerates 5 failures
// (unless a case lowers it).
func TestNextUnreachableAndTimeout(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	now := start.Add(2 * time.Hour)
	ids := spreadIDs(10, 0.5) // fractions 0.05, 0.15, …, 0.95
	config := func(threshold Percent) Config {
		c := testConfig()
		c.Groups[0].FailureThreshold = threshold
		return c
	}
	prevStatus := func() GroupStatus {
		return GroupStatus{V: 1, Group: "staging", State: StateActive, Since: start, Mode: ModeEnabled, TargetVersion: v2, StartVersion: v1,
			InitialCount: 10, Progress: 0.2, FailuresSince: start, StartedAt: start,
			JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime}
	}
	// fleet returns the 10 agents on v1, edited by the edits (by index).
	fleet := func(edits map[int]func(*AgentView)) []AgentView {
		out := onVersion(ids, v1)
		for i, f := range edits {
			f(&out[i])
		}
		return out
	}
	cut := func(a *AgentView) { a.Unreachable = true }
	updating := func(since time.Duration) func(*AgentView) {
		return func(a *AgentView) { a.UpdatingTo, a.StartTime = v2, now.Add(-since) }
	}
	on := func(v string) func(*AgentView) { return func(a *AgentView) { a.ActiveVersion = v } }
	both := func(fs ...func(*AgentView)) func(*AgentView) {
		return func(a *AgentView) {
			for _, f := range fs {
				f(a)
			}
		}
	}
	tests := []struct {
		name         string
		threshold    Percent // 0: 50%
		prev         func(*GroupStatus)
		agents       []AgentView
		wantState    State
		wantProgress float64 // compared to 1e-12
		wantFailed   int
		wantTimedOut int
		wantHalted   string
		wantFrozen   bool
	}{
		// Point 3: unreachable is its own state.
		{
			name:   "reachable agents in flight fill the window",
			agents: fleet(map[int]func(*AgentView){0: updating(time.Minute), 1: updating(time.Minute)}),
			// Both below progress 0.2 are installing: hold.
			wantState: StateActive, wantProgress: 0.2,
		},
		{
			name: "unreachable agents below progress are not in flight",
			// The two agents let go are cut off (they may be updating
			// through /v1/find): their places go to the next agent.
			agents:    fleet(map[int]func(*AgentView){0: both(cut, updating(time.Minute)), 1: cut}),
			wantState: StateActive, wantProgress: 0.4,
		},
		{
			name: "four of ten unreachable: the connected agents still move, nothing frozen",
			agents: fleet(map[int]func(*AgentView){0: cut, 1: cut, 2: both(cut, on(v2)), 3: both(cut, on(v2)),
				4: on(v2), 5: on(v2)}),
			// On the target: 4 and 5 only (2 and 3 are unreachable), and
			// nothing reachable in flight: the window (2) goes to 6 and 7.
			prev:      func(st *GroupStatus) { st.Progress = 0.6 },
			wantState: StateActive, wantProgress: 0.8,
		},
		{
			name:   "unreachable agents with errors are not failed",
			agents: fleet(map[int]func(*AgentView){0: both(cut, func(a *AgentView) { a.Error, a.StartTime = "boom", start.Add(time.Minute) }), 1: cut}),
			// threshold 5% of 10: one failure would halt.
			threshold: 5, wantState: StateActive, wantProgress: 0.4,
		},
		{
			name: "unreachable agents rolled back from the target are not failed",
			agents: fleet(map[int]func(*AgentView){0: both(cut, func(a *AgentView) {
				a.Rollback, a.RollbackFrom, a.StartTime = true, v2, start.Add(time.Minute)
			})}),
			// 1 is in flight, 0 is not: one more place, for 2.
			threshold: 5, wantState: StateActive, wantProgress: 0.3,
		},
		{
			name: "unreachable on the target is not on the target: not done",
			prev: func(st *GroupStatus) { st.Progress = 1 },
			agents: fleet(map[int]func(*AgentView){0: on(v2), 1: on(v2), 2: on(v2), 3: on(v2), 4: on(v2), 5: on(v2), 6: on(v2),
				7: on(v2), 8: on(v2), 9: both(cut, on(v2))}),
			wantState: StateActive, wantProgress: 1,
		},
		{
			name: "back with a heartbeat it counts again: done",
			prev: func(st *GroupStatus) { st.Progress = 1 },
			agents: fleet(map[int]func(*AgentView){0: on(v2), 1: on(v2), 2: on(v2), 3: on(v2), 4: on(v2), 5: on(v2), 6: on(v2),
				7: on(v2), 8: on(v2), 9: on(v2)}),
			wantState: StateDone, wantProgress: 1,
		},
		{
			name: "agents that expired still freeze",
			prev: func(st *GroupStatus) { st.Progress = 0.3 },
			// 7 of 10 present: below the floor of 10 - 2.
			agents:    fleet(nil)[:7],
			wantState: StateActive, wantProgress: 0.3, wantFrozen: true,
		},

		// Point 4: update_timeout.
		{
			name:      "an update within update_timeout holds its slot",
			agents:    fleet(map[int]func(*AgentView){0: updating(30*time.Minute - time.Second), 1: updating(time.Minute)}),
			wantState: StateActive, wantProgress: 0.2,
		},
		{
			name:   "an update at update_timeout is timed out: failed, and its slot is free",
			agents: fleet(map[int]func(*AgentView){0: updating(30 * time.Minute), 1: updating(time.Minute)}),
			// 1 is still in flight, 0 no longer: one more may go, 2.
			wantState: StateActive, wantProgress: 0.3, wantFailed: 1, wantTimedOut: 1,
		},
		{
			name:      "timed out updates count towards failure_threshold",
			agents:    fleet(map[int]func(*AgentView){0: updating(2 * time.Hour), 1: updating(time.Minute)}),
			threshold: 5, wantState: StateActive, wantProgress: 0.2, wantFailed: 1, wantTimedOut: 1,
			wantHalted: "1 agents failed 2.0.0, more than failure_threshold 5% of 10 (0.50); first: " + string(ids[0]) +
				" timed out: updating to 2.0.0 since 2024-03-05T03:00:00Z, longer than update_timeout 30m",
		},
		{
			name:   "update_timeout is the group's",
			prev:   func(st *GroupStatus) {},
			agents: fleet(map[int]func(*AgentView){0: updating(50 * time.Minute), 1: updating(time.Minute)}),
			// config edited below to 1h: 50m is not timed out.
			wantState: StateActive, wantProgress: 0.2,
		},
		{
			name:   "an update to another version is not timed",
			agents: fleet(map[int]func(*AgentView){0: func(a *AgentView) { a.UpdatingTo, a.StartTime = "1.5.0", now.Add(-time.Hour) }, 1: updating(time.Minute)}),
			// 0 is not on the target nor settled: still in flight.
			wantState: StateActive, wantProgress: 0.2,
		},
		{
			name:      "an update without a start time is not timed",
			agents:    fleet(map[int]func(*AgentView){0: func(a *AgentView) { a.UpdatingTo = v2 }, 1: updating(time.Minute)}),
			wantState: StateActive, wantProgress: 0.2,
		},
		{
			name:      "an unreachable agent is not timed out, and not in flight either",
			agents:    fleet(map[int]func(*AgentView){0: both(cut, updating(2*time.Hour)), 1: updating(time.Minute)}),
			wantState: StateActive, wantProgress: 0.3,
		},
		{
			name: "a reset starts the clock again",
			prev: func(st *GroupStatus) { st.FailuresSince = now.Add(-10 * time.Minute) },
			// Started 2h ago, but the operator reset 10m ago.
			agents:    fleet(map[int]func(*AgentView){0: updating(2 * time.Hour), 1: updating(time.Minute)}),
			wantState: StateActive, wantProgress: 0.2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := prevStatus()
			if tt.prev != nil {
				tt.prev(&prev)
			}
			threshold := tt.threshold
			if threshold == 0 {
				threshold = 50
			}
			cfg := config(threshold)
			if tt.name == "update_timeout is the group's" {
				cfg.Groups[0].UpdateTimeout = Duration(time.Hour)
			}
			in := Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: tt.agents, Counts: CountAgents(tt.agents), Now: now}
			st, _ := Next(in)
			if st.State != tt.wantState || !near(st.Progress, tt.wantProgress) {
				t.Errorf("state, progress = %s, %v; want %s, %v", st.State, st.Progress, tt.wantState, tt.wantProgress)
			}
			if st.FailedCount != tt.wantFailed || st.TimedOutCount != tt.wantTimedOut {
				t.Errorf("failed_count, timed_out_count = %d, %d; want %d, %d", st.FailedCount, st.TimedOutCount, tt.wantFailed, tt.wantTimedOut)
			}
			if st.Halted != (tt.wantHalted != "") || !strings.Contains(st.HaltReason, tt.wantHalted) {
				t.Errorf("halted = %v %q, want %q", st.Halted, st.HaltReason, tt.wantHalted)
			}
			if (st.Frozen != "") != tt.wantFrozen {
				t.Errorf("frozen = %q, want %v", st.Frozen, tt.wantFrozen)
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }

// TestNextCanaryUnreachableAndTimeout: a canary that is unreachable is
// missing (and halts the group after health_timeout, as one that expired);
// one stuck in its update past update_timeout halts the group; unreachable
// agents are never picked as canaries.
func TestNextCanaryUnreachableAndTimeout(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	ids := spreadIDs(10, 0.5)
	canary := ids[5]
	prevStatus := func() GroupStatus {
		return GroupStatus{V: 1, Group: "staging", State: StateCanary, Since: start, Mode: ModeEnabled, TargetVersion: v2, StartVersion: v1,
			InitialCount: 10, Canaries: []Canary{{ID: canary}}, FailuresSince: start, StartedAt: start,
			JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime}
	}
	withCanary := func(c AgentView) []AgentView {
		out := onVersion(ids, v1)
		c.ID = canary
		out[5] = c
		return out
	}
	tests := []struct {
		name        string
		now         time.Time
		prev        func(*GroupStatus)
		agents      []AgentView
		wantHalted  string
		wantMissing time.Time
		wantHealthy time.Time
	}{
		{
			name: "healthy canary goes unreachable: missing from now", now: start.Add(20 * time.Minute),
			prev:        func(st *GroupStatus) { st.Canaries[0].HealthySince = start.Add(10 * time.Minute) },
			agents:      withCanary(AgentView{ActiveVersion: v2, Unreachable: true}),
			wantMissing: start.Add(20 * time.Minute),
		},
		{
			name: "unreachable for health_timeout halts", now: start.Add(25 * time.Minute),
			prev:       func(st *GroupStatus) { st.Canaries[0].MissingSince = start.Add(20 * time.Minute) },
			agents:     withCanary(AgentView{ActiveVersion: v2, Unreachable: true}),
			wantHalted: "canary " + string(canary) + " missing since 2024-03-05T03:20:00Z (longer than health_timeout 5m)",
		},
		{
			name: "back with a heartbeat: no longer missing", now: start.Add(24 * time.Minute),
			prev:        func(st *GroupStatus) { st.Canaries[0].MissingSince = start.Add(20 * time.Minute) },
			agents:      withCanary(AgentView{ActiveVersion: v2, StartTime: start.Add(time.Minute)}),
			wantHealthy: start.Add(24 * time.Minute),
		},
		{
			name: "stuck in its health wait within update_timeout", now: start.Add(29 * time.Minute),
			agents: withCanary(AgentView{ActiveVersion: v1, UpdatingTo: v2, StartTime: start}),
		},
		{
			name: "stuck in its health wait past update_timeout halts", now: start.Add(30 * time.Minute),
			agents:     withCanary(AgentView{ActiveVersion: v1, UpdatingTo: v2, StartTime: start}),
			wantHalted: "canary " + string(canary) + " timed out: updating to 2.0.0 since 2024-03-05T03:00:00Z, longer than update_timeout 30m",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := prevStatus()
			if tt.prev != nil {
				tt.prev(&prev)
			}
			cfg := testConfig()
			cfg.Groups[0].FailureThreshold = 50 // canaries decide, not the threshold
			st, _ := Next(Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: tt.agents, Counts: CountAgents(tt.agents), Now: tt.now})
			if st.Halted != (tt.wantHalted != "") || !strings.Contains(st.HaltReason, tt.wantHalted) {
				t.Errorf("halted = %v %q, want %q", st.Halted, st.HaltReason, tt.wantHalted)
			}
			if tt.wantHalted != "" {
				return
			}
			if st.State != StateCanary {
				t.Errorf("state = %s, want canary", st.State)
			}
			c := st.Canaries[0]
			if !c.MissingSince.Equal(tt.wantMissing) || !c.HealthySince.Equal(tt.wantHealthy) {
				t.Errorf("missing since, healthy since = %v, %v; want %v, %v", c.MissingSince, c.HealthySince, tt.wantMissing, tt.wantHealthy)
			}
		})
	}

	t.Run("unreachable agents are not picked", func(t *testing.T) {
		agents := onVersion(ids, v1)
		for i := range 8 {
			agents[i].Unreachable = true
		}
		got := SelectCanaries(agents, 3, v2)
		if diff := cmp.Diff([]AgentID{ids[8], ids[9]}, got); diff != "" {
			t.Errorf("SelectCanaries (-want +got):\n%s", diff)
		}
	})
}
