package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	v1 = "1.0.0"
	v2 = "2.0.0"
)

// testConfig has staging then prod, daily windows at 03:00 UTC.
func testConfig() Config {
	staging, prod := DefaultGroup("staging"), DefaultGroup("prod")
	staging.StartHour, prod.StartHour = 3, 3
	staging.CanaryCount, prod.CanaryCount = 3, 3
	return Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{staging, prod}}
}

func kinds(evs []Event) []string {
	var out []string
	for _, e := range evs {
		s := string(e.Kind)
		if e.Kind == EventTransition {
			s += ":" + string(e.From) + "→" + string(e.To)
		}
		out = append(out, s)
	}
	return out
}

func TestNextNewStatus(t *testing.T) {
	now := mustTime(t, "2024-03-04T01:00:00Z")
	st, evs := Next(Input{Config: testConfig(), Group: "staging", Spec: DefaultSpec(v1, v2), Counts: Counts{v1: {Count: 1}}, Now: now})
	want := GroupStatus{
		V: 1, Group: "staging", State: StateUnstarted, Reason: "new target_version 2.0.0", Since: now, Mode: ModeEnabled,
		TargetVersion: v2, StartVersion: v1,
		Waiting:       "window: next opens Mon 2024-03-04 03:00 UTC (* 03:00-04:00 UTC)",
		WaitingUntil:  mustTime(t, "2024-03-04T03:00:00Z"),
		JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime,
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	wantEvs := []Event{{V: 1, Group: "staging", Kind: EventTransition, To: StateUnstarted, Reason: "new target_version 2.0.0", At: now}}
	if diff := cmp.Diff(wantEvs, evs); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestNextNewTargetResets(t *testing.T) {
	now := mustTime(t, "2024-03-04T01:00:00Z")
	prev := GroupStatus{V: 1, Group: "prod", State: StateActive, TargetVersion: "1.5.0", StartVersion: v1, Halted: true,
		InitialCount: 10, Progress: 0.7, Canaries: []Canary{{ID: idAt(0.5)}}, Alerted: true, StartedAt: now.Add(-time.Hour)}
	st, evs := Next(Input{Config: testConfig(), Group: "prod", Spec: DefaultSpec(v1, v2), Prev: prev, Now: now})
	if st.State != StateUnstarted || st.TargetVersion != v2 || st.Progress != 0 || st.Halted || st.Alerted ||
		st.InitialCount != 0 || st.Canaries != nil || !st.StartedAt.IsZero() {
		t.Errorf("status not reset: %+v", st)
	}
	if diff := cmp.Diff([]string{"transition:active→unstarted"}, kinds(evs)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if !strings.Contains(evs[0].Reason, "new target_version 2.0.0 (was 1.5.0)") {
		t.Errorf("reason %q", evs[0].Reason)
	}
}

func TestNextStart(t *testing.T) {
	inWindow := mustTime(t, "2024-03-05T03:10:00Z")
	outside := mustTime(t, "2024-03-05T05:00:00Z")
	agents := onVersion(spreadIDs(10, 0.5), v1)
	done := GroupStatus{V: 1, Group: "staging", State: StateDone, TargetVersion: v2, DoneAt: mustTime(t, "2024-03-04T20:00:00Z")}
	tests := []struct {
		name      string
		group     string
		now       time.Time
		edit      func(*Input)
		wantState State
		waiting   string // substring of Waiting, when the group waits
		until     string
		reason    string // substring of Reason, when it starts
	}{
		{name: "window open", group: "staging", now: inWindow, wantState: StateCanary, reason: "window open: starting with 10 agents, 3 canaries"},
		{name: "window closed", group: "staging", now: outside, wantState: StateUnstarted, waiting: "window: next opens Wed 2024-03-06 03:00 UTC", until: "2024-03-06T03:00:00Z"},
		{name: "window on another day", group: "staging", now: inWindow, edit: func(in *Input) { in.Config.Groups[0].Days = []string{"Sat", "Sun"} },
			wantState: StateUnstarted, waiting: "window: next opens Sat 2024-03-09 03:00 UTC (Sat,Sun 03:00-04:00 UTC)", until: "2024-03-09T03:00:00Z"},
		{name: "window in the configured zone", group: "staging", now: mustTime(t, "2024-03-05T02:10:00Z"), edit: func(in *Input) { in.Config.Timezone = "Europe/Berlin" },
			wantState: StateCanary, reason: "window open"},
		{name: "critical ignores the window", group: "staging", now: outside, edit: func(in *Input) { in.Spec.Critical = true }, wantState: StateCanary, reason: "critical: windows ignored"},
		{name: "predecessor missing", group: "prod", now: inWindow, wantState: StateUnstarted, waiting: `waiting for group "staging" to finish (it has no status yet)`},
		{name: "predecessor active", group: "prod", now: inWindow, edit: func(in *Input) {
			in.Predecessors = map[string]GroupStatus{"staging": {V: 1, State: StateActive, TargetVersion: v2}}
		}, wantState: StateUnstarted, waiting: `waiting for group "staging" to finish (active)`},
		{name: "predecessor halted", group: "prod", now: inWindow, edit: func(in *Input) {
			in.Predecessors = map[string]GroupStatus{"staging": {V: 1, State: StateCanary, Halted: true, TargetVersion: v2}}
		}, wantState: StateUnstarted, waiting: `waiting for group "staging" to finish (canary, halted)`},
		{name: "predecessor rolled back", group: "prod", now: inWindow, edit: func(in *Input) {
			in.Predecessors = map[string]GroupStatus{"staging": {V: 1, State: StateRolledBack, TargetVersion: v2}}
		}, wantState: StateUnstarted, waiting: `(rolledback)`},
		{name: "predecessor done for another target", group: "prod", now: inWindow, edit: func(in *Input) {
			in.Predecessors = map[string]GroupStatus{"staging": {V: 1, State: StateDone, TargetVersion: "1.5.0"}}
		}, wantState: StateUnstarted, waiting: "its status is for 1.5.0"},
		{name: "predecessor done", group: "prod", now: inWindow, edit: func(in *Input) {
			in.Predecessors = map[string]GroupStatus{"staging": done}
		}, wantState: StateCanary},
		{name: "wait hours not over", group: "prod", now: inWindow, edit: func(in *Input) {
			in.Config.Groups[1].WaitHours = 24
			in.Predecessors = map[string]GroupStatus{"staging": done}
		}, wantState: StateUnstarted, waiting: "wait_hours: 24h after the last predecessor finished", until: "2024-03-05T20:00:00Z"},
		{name: "wait hours over, then the window", group: "prod", now: mustTime(t, "2024-03-05T20:00:00Z"), edit: func(in *Input) {
			in.Config.Groups[1].WaitHours = 24
			in.Predecessors = map[string]GroupStatus{"staging": done}
		}, wantState: StateUnstarted, waiting: "window: next opens Wed 2024-03-06 03:00", until: "2024-03-06T03:00:00Z"},
		{name: "critical still waits for wait hours", group: "prod", now: inWindow, edit: func(in *Input) {
			in.Config.Groups[1].WaitHours = 24
			in.Spec.Critical = true
			in.Predecessors = map[string]GroupStatus{"staging": done}
		}, wantState: StateUnstarted, waiting: "wait_hours", until: "2024-03-05T20:00:00Z"},
		{name: "immediate ignores order and windows", group: "prod", now: outside, edit: func(in *Input) { in.Spec.Schedule = ScheduleImmediate },
			wantState: StateCanary, reason: "schedule immediate"},
		{name: "run requested ignores order, wait and window", group: "prod", now: outside, edit: func(in *Input) {
			in.Config.Groups[1].WaitHours = 24
			in.Prev = GroupStatus{V: 1, Group: "prod", State: StateUnstarted, TargetVersion: v2, RunRequested: true}
		}, wantState: StateCanary, reason: "run requested by an operator"},
		{name: "no agents", group: "staging", now: inWindow, edit: func(in *Input) { in.Agents, in.Counts = nil, nil },
			wantState: StateUnstarted, waiting: "no agents present"},
		{name: "paused", group: "staging", now: inWindow, edit: func(in *Input) { in.Config.Mode = ModePaused },
			wantState: StateUnstarted, waiting: "mode paused"},
		{name: "plan disabled", group: "staging", now: inWindow, edit: func(in *Input) { in.Spec.Mode = ModeDisabled },
			wantState: StateUnstarted, waiting: "mode disabled"},
		{name: "group not configured", group: "lab", now: inWindow, wantState: StateUnstarted, waiting: `group "lab" is not in the config`},
		{name: "invalid config", group: "staging", now: inWindow, edit: func(in *Input) { in.Config.Groups[0].MaxInFlight = 0 },
			wantState: StateUnstarted, waiting: "config is invalid"},
		{name: "invalid spec", group: "staging", now: inWindow, edit: func(in *Input) { in.Spec.Strategy = "fast" },
			wantState: StateUnstarted, waiting: "plan spec is invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Config: testConfig(), Group: tt.group, Spec: DefaultSpec(v1, v2), Agents: agents, Counts: CountAgents(agents), Now: tt.now}
			in.Prev = GroupStatus{V: 1, Group: tt.group, State: StateUnstarted, TargetVersion: v2, StartVersion: v1}
			if tt.edit != nil {
				tt.edit(&in)
			}
			st, evs := Next(in)
			if st.State != tt.wantState {
				t.Fatalf("state = %s (waiting %q), want %s", st.State, st.Waiting, tt.wantState)
			}
			if tt.wantState == StateUnstarted {
				if !strings.Contains(st.Waiting, tt.waiting) {
					t.Errorf("waiting = %q, want it to contain %q", st.Waiting, tt.waiting)
				}
				var until time.Time
				if tt.until != "" {
					until = mustTime(t, tt.until)
				}
				if !st.WaitingUntil.Equal(until) {
					t.Errorf("waiting_until = %v, want %v", st.WaitingUntil, until)
				}
				if len(evs) != 0 {
					t.Errorf("events while waiting: %v", kinds(evs))
				}
				return
			}
			if st.Waiting != "" || st.RunRequested {
				t.Errorf("started but waiting = %q, run_requested = %v", st.Waiting, st.RunRequested)
			}
			if !strings.Contains(st.Reason, tt.reason) {
				t.Errorf("reason = %q, want it to contain %q", st.Reason, tt.reason)
			}
			if diff := cmp.Diff([]string{"transition:unstarted→canary"}, kinds(evs)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNextStartRecords(t *testing.T) {
	now := mustTime(t, "2024-03-05T03:00:00Z")
	ids := spreadIDs(10, 0.5)
	agents := onVersion(ids, v1)
	agents[0].ActiveVersion = v2 // already on target: counted, never a canary
	prev := GroupStatus{V: 1, Group: "staging", State: StateUnstarted, TargetVersion: v2, StartVersion: v1}
	st, _ := Next(Input{Config: testConfig(), Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents), Now: now})
	want := GroupStatus{
		V: 1, Group: "staging", State: StateCanary, Reason: "window open: starting with 10 agents, 3 canaries", Since: now, Mode: ModeEnabled,
		TargetVersion: v2, StartVersion: v1, InitialCount: 10,
		Canaries:      []Canary{{ID: ids[2]}, {ID: ids[5]}, {ID: ids[8]}},
		FailuresSince: now, StartedAt: now,
		JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime,
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

func TestNextCanary(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	ids := spreadIDs(10, 0.5)
	canaries := []AgentID{ids[2], ids[5], ids[8]}
	prevStatus := func() GroupStatus {
		return GroupStatus{V: 1, Group: "staging", State: StateCanary, Since: start, Mode: ModeEnabled, TargetVersion: v2, StartVersion: v1,
			InitialCount: 10, Canaries: []Canary{{ID: canaries[0]}, {ID: canaries[1]}, {ID: canaries[2]}},
			FailuresSince: start, StartedAt: start, JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime}
	}
	// agentsWith returns the 10 agents on v1 with the canaries as given.
	agentsWith := func(canary ...AgentView) []AgentView {
		out := onVersion(ids, v1)
		for i, a := range canary {
			idx := []int{2, 5, 8}[i]
			a.ID = ids[idx]
			out[idx] = a
		}
		return out
	}
	healthy := AgentView{ActiveVersion: v2, StartTime: start.Add(time.Minute)}
	waiting := AgentView{ActiveVersion: v1}
	tests := []struct {
		name       string
		now        time.Time
		prev       func(*GroupStatus)
		agents     []AgentView
		wantState  State
		wantHalted string // substring of the halt reason
		wantEvents []string
		check      func(t *testing.T, st GroupStatus)
	}{
		{
			name: "canaries not updated yet", now: start.Add(time.Minute), agents: agentsWith(waiting, waiting, waiting),
			wantState: StateCanary,
		},
		{
			name: "first seen healthy", now: start.Add(10 * time.Minute), agents: agentsWith(healthy, healthy, waiting),
			wantState: StateCanary,
			check: func(t *testing.T, st GroupStatus) {
				want := []Canary{{ID: canaries[0], HealthySince: start.Add(10 * time.Minute), ReportedAt: start.Add(10 * time.Minute)},
					{ID: canaries[1], HealthySince: start.Add(10 * time.Minute), ReportedAt: start.Add(10 * time.Minute)}, {ID: canaries[2]}}
				if diff := cmp.Diff(want, st.Canaries); diff != "" {
					t.Errorf("canaries (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "healthy for less than min_healthy_time", now: start.Add(14 * time.Minute),
			prev: func(st *GroupStatus) {
				for i := range st.Canaries {
					st.Canaries[i].HealthySince = start.Add(10 * time.Minute)
				}
			},
			agents: agentsWith(healthy, healthy, healthy), wantState: StateCanary,
		},
		{
			name: "healthy for min_healthy_time", now: start.Add(15 * time.Minute),
			prev: func(st *GroupStatus) {
				for i := range st.Canaries {
					st.Canaries[i].HealthySince = start.Add(10 * time.Minute)
				}
			},
			agents: agentsWith(healthy, healthy, healthy), wantState: StateActive,
			wantEvents: []string{"transition:canary→active"},
			check: func(t *testing.T, st GroupStatus) {
				// The formula, (20% of 10 + 3 on target) / 10 = 0.5, would
				// let the four waiting agents below 0.5 go (0.05, 0.15, 0.35,
				// 0.45; the canaries are 0.25, 0.55 and 0.85): the cap stops
				// at the third so that only 2 are in flight.
				if st.Progress != 0.35 {
					t.Errorf("progress = %v, want 0.35", st.Progress)
				}
				if !strings.Contains(st.Reason, "all 3 canaries healthy on 2.0.0") {
					t.Errorf("reason %q", st.Reason)
				}
			},
		},
		{
			name: "unhealthy again clears the clock", now: start.Add(15 * time.Minute),
			prev: func(st *GroupStatus) {
				for i := range st.Canaries {
					st.Canaries[i].HealthySince = start.Add(10 * time.Minute)
				}
			},
			agents: agentsWith(healthy, waiting, healthy), wantState: StateCanary,
			check: func(t *testing.T, st GroupStatus) {
				if !st.Canaries[1].HealthySince.IsZero() {
					t.Errorf("healthy_since kept: %v", st.Canaries[1])
				}
			},
		},
		{
			name: "canary rolled back", now: start.Add(20 * time.Minute),
			agents:    agentsWith(healthy, AgentView{ActiveVersion: v1, Rollback: true, RollbackFrom: v2, StartTime: start.Add(time.Minute)}, healthy),
			wantState: StateCanary, wantHalted: "failed: rolled back from 2.0.0 to 1.0.0",
			wantEvents: []string{"halt", "alert"},
		},
		{
			name: "canary reports an error", now: start.Add(20 * time.Minute),
			agents:    agentsWith(AgentView{ActiveVersion: v1, Error: "download: 404", StartTime: start.Add(time.Minute)}, healthy, healthy),
			wantState: StateCanary, wantHalted: "error on 1.0.0: download: 404",
			wantEvents: []string{"halt", "alert"},
		},
		{
			name: "old error before the start is not a failure", now: start.Add(20 * time.Minute),
			agents:    agentsWith(AgentView{ActiveVersion: v1, Error: "disk full", StartTime: start.Add(-48 * time.Hour)}, healthy, healthy),
			wantState: StateCanary,
		},
		{
			name: "canary missing for a moment", now: start.Add(20 * time.Minute),
			agents:    agentsWith(healthy, healthy, healthy)[:8], // ids[8] gone
			wantState: StateCanary,
			check: func(t *testing.T, st GroupStatus) {
				if got := st.Canaries[2].MissingSince; !got.Equal(start.Add(20 * time.Minute)) {
					t.Errorf("missing_since = %v", got)
				}
			},
		},
		{
			// It had reported on the target: the halt stands (one that
			// never did is replaced, TestNextLostCanary).
			name: "canary missing for health_timeout", now: start.Add(25 * time.Minute),
			prev: func(st *GroupStatus) {
				st.Canaries[2].MissingSince, st.Canaries[2].ReportedAt = start.Add(20*time.Minute), start.Add(5*time.Minute)
			},
			agents:    agentsWith(healthy, healthy, healthy)[:8],
			wantState: StateCanary, wantHalted: "missing since 2024-03-05T03:20:00Z (longer than health_timeout 5m)",
			wantEvents: []string{"halt", "alert"},
		},
		{
			name: "canary back clears missing", now: start.Add(24 * time.Minute),
			prev:      func(st *GroupStatus) { st.Canaries[2].MissingSince = start.Add(20 * time.Minute) },
			agents:    agentsWith(waiting, waiting, waiting),
			wantState: StateCanary,
			check: func(t *testing.T, st GroupStatus) {
				if !st.Canaries[2].MissingSince.IsZero() {
					t.Errorf("missing_since kept: %v", st.Canaries[2])
				}
			},
		},
		{
			name: "halted stays halted", now: start.Add(time.Hour),
			prev:      func(st *GroupStatus) { st.Halted, st.HaltReason = true, "canary x failed" },
			agents:    agentsWith(healthy, healthy, healthy),
			wantState: StateCanary, wantHalted: "canary x failed",
		},
		{
			name: "no canaries goes active at once", now: start.Add(time.Minute),
			prev:   func(st *GroupStatus) { st.Canaries = nil },
			agents: agentsWith(), wantState: StateActive,
			wantEvents: []string{"transition:canary→active"},
			check: func(t *testing.T, st GroupStatus) {
				if st.Reason != "no canaries" || st.Progress != 0.2 {
					t.Errorf("reason %q progress %v", st.Reason, st.Progress)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := prevStatus()
			if tt.prev != nil {
				tt.prev(&prev)
			}
			st, evs := Next(Input{Config: testConfig(), Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev,
				Agents: tt.agents, Counts: CountAgents(tt.agents), Now: tt.now})
			if st.State != tt.wantState {
				t.Errorf("state = %s, want %s", st.State, tt.wantState)
			}
			if st.Halted != (tt.wantHalted != "") || !strings.Contains(st.HaltReason, tt.wantHalted) {
				t.Errorf("halted = %v %q, want %q", st.Halted, st.HaltReason, tt.wantHalted)
			}
			if diff := cmp.Diff(tt.wantEvents, kinds(evs)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if tt.check != nil {
				tt.check(t, st)
			}
		})
	}
}

func TestNextActive(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	now := start.Add(time.Hour)
	ids := spreadIDs(100, 0.5)
	prevStatus := func() GroupStatus {
		return GroupStatus{V: 1, Group: "staging", State: StateActive, Since: start, Mode: ModeEnabled, TargetVersion: v2, StartVersion: v1,
			InitialCount: 100, Progress: 0.2, FailuresSince: start, StartedAt: start,
			JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime}
	}
	// fleet returns the 100 agents: the first onTarget on v2, the next
	// failed rolled back from v2 at failedAt, the rest on v1.
	fleet := func(onTarget, failed int, failedAt time.Time) []AgentView {
		out := onVersion(ids, v1)
		for i := range onTarget {
			out[i].ActiveVersion = v2
		}
		for i := onTarget; i < onTarget+failed; i++ {
			out[i].Rollback, out[i].RollbackFrom, out[i].StartTime = true, v2, failedAt
		}
		return out
	}
	tests := []struct {
		name         string
		prev         func(*GroupStatus)
		agents       []AgentView
		edit         func(*Input)
		wantState    State
		wantProgress float64
		wantHalted   string
		wantFrozen   bool
		wantFailed   int
		wantEvents   []string
	}{
		{name: "progress follows the updated", agents: fleet(30, 0, time.Time{}), wantState: StateActive, wantProgress: 0.5},
		{name: "progress never goes back", prev: func(st *GroupStatus) { st.Progress = 0.6 }, agents: fleet(30, 0, time.Time{}), wantState: StateActive, wantProgress: 0.6},
		{
			name: "failures at the threshold continue", agents: fleet(30, 5, start.Add(time.Minute)),
			wantState: StateActive, wantProgress: 0.5, wantFailed: 5,
		},
		{
			name: "failures above the threshold halt", agents: fleet(30, 6, start.Add(time.Minute)),
			wantState: StateActive, wantProgress: 0.2, wantFailed: 6,
			wantHalted: "6 agents failed 2.0.0, more than failure_threshold 5% of 100 (5)",
			wantEvents: []string{"halt", "alert"},
		},
		{
			name: "failures before the last reset are forgiven", prev: func(st *GroupStatus) { st.FailuresSince = start.Add(30 * time.Minute) },
			agents: fleet(30, 6, start.Add(time.Minute)), wantState: StateActive, wantProgress: 0.5,
		},
		{
			name: "errors count as failures", agents: func() []AgentView {
				a := fleet(30, 0, time.Time{})
				for i := 90; i < 96; i++ {
					a[i].Error, a[i].StartTime = "health check failed", start.Add(time.Minute)
				}
				return a
			}(),
			wantState: StateActive, wantProgress: 0.2, wantFailed: 6, wantHalted: "error on 1.0.0: health check failed", wantEvents: []string{"halt", "alert"},
		},
		{
			name: "halted holds progress", prev: func(st *GroupStatus) { st.Halted, st.HaltReason = true, "earlier" },
			agents: fleet(60, 0, time.Time{}), wantState: StateActive, wantProgress: 0.2, wantHalted: "earlier",
		},
		{
			name: "too many vanished freezes", prev: func(st *GroupStatus) { st.Progress = 0.3 },
			agents: fleet(30, 0, time.Time{})[:79], wantState: StateActive, wantProgress: 0.3, wantFrozen: true,
			wantEvents: []string{"frozen"},
		},
		{
			name: "back at the floor unfreezes", prev: func(st *GroupStatus) { st.Progress, st.Frozen = 0.3, "earlier" },
			agents: fleet(30, 0, time.Time{})[:80], wantState: StateActive, wantProgress: 0.5,
			wantEvents: []string{"unfrozen"},
		},
		{
			name: "done when everyone is on target", prev: func(st *GroupStatus) { st.Progress = 0.95 },
			agents: fleet(100, 0, time.Time{}), wantState: StateDone, wantProgress: 1,
			wantEvents: []string{"transition:active→done"},
		},
		{
			name: "done with a few rolled back", prev: func(st *GroupStatus) { st.Progress = 0.95 },
			agents: fleet(97, 3, start.Add(time.Minute)), wantState: StateDone, wantProgress: 1, wantFailed: 3,
			wantEvents: []string{"transition:active→done"},
		},
		{
			name: "not done while one agent still has to update", prev: func(st *GroupStatus) { st.Progress = 1 },
			agents: fleet(99, 0, time.Time{}), wantState: StateActive, wantProgress: 1,
		},
		{
			name: "not done while frozen", prev: func(st *GroupStatus) { st.Progress = 1 },
			agents: fleet(70, 0, time.Time{})[:70], wantState: StateActive, wantProgress: 1, wantFrozen: true,
			wantEvents: []string{"frozen"},
		},
		{
			name: "grouped is progress 1 at once", agents: fleet(3, 0, time.Time{}), edit: func(in *Input) { in.Spec.Strategy = StrategyGrouped },
			wantState: StateActive, wantProgress: 1,
		},
		{
			name: "late joiners count as present", prev: func(st *GroupStatus) { st.Progress = 1 },
			agents: append(fleet(100, 0, time.Time{}), AgentView{ID: idAt(0.123456), ActiveVersion: v1}), wantState: StateActive, wantProgress: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := prevStatus()
			if tt.prev != nil {
				tt.prev(&prev)
			}
			in := Input{Config: testConfig(), Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: tt.agents, Counts: CountAgents(tt.agents), Now: now}
			if tt.edit != nil {
				tt.edit(&in)
			}
			st, evs := Next(in)
			if st.State != tt.wantState || st.Progress != tt.wantProgress {
				t.Errorf("state, progress = %s, %v; want %s, %v", st.State, st.Progress, tt.wantState, tt.wantProgress)
			}
			if st.Halted != (tt.wantHalted != "") || !strings.Contains(st.HaltReason, tt.wantHalted) {
				t.Errorf("halted = %v %q, want %q", st.Halted, st.HaltReason, tt.wantHalted)
			}
			if (st.Frozen != "") != tt.wantFrozen {
				t.Errorf("frozen = %q, want %v", st.Frozen, tt.wantFrozen)
			}
			if st.FailedCount != tt.wantFailed {
				t.Errorf("failed_count = %d, want %d", st.FailedCount, tt.wantFailed)
			}
			if diff := cmp.Diff(tt.wantEvents, kinds(evs)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if st.State == StateDone && !st.DoneAt.Equal(now) {
				t.Errorf("done_at = %v, want %v", st.DoneAt, now)
			}
		})
	}
}

func TestNextAlertAfter(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	agents := onVersion(spreadIDs(10, 0.5), v1)
	prev := GroupStatus{V: 1, Group: "staging", State: StateActive, TargetVersion: v2, StartVersion: v1,
		InitialCount: 10, Progress: 0.2, FailuresSince: start, StartedAt: start}
	in := Input{Config: testConfig(), Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents)}

	in.Now = start.Add(4*time.Hour - time.Second)
	st, evs := Next(in)
	if st.Alerted || len(evs) != 0 {
		t.Fatalf("alerted early: %v %v", st.Alerted, kinds(evs))
	}
	in.Now = start.Add(4 * time.Hour)
	st, evs = Next(in)
	if !st.Alerted || st.State != StateActive || st.Halted {
		t.Fatalf("after alert_after: alerted %v state %s halted %v", st.Alerted, st.State, st.Halted)
	}
	want := []Event{{V: 1, Group: "staging", Kind: EventAlert, From: StateActive, To: StateActive,
		Reason: "not done 4h after it started (alert_after 4h); the rollout continues", At: in.Now}}
	if diff := cmp.Diff(want, evs); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// Once only; the rollout continues.
	in.Prev, in.Now = st, in.Now.Add(time.Hour)
	agents[0].ActiveVersion = v2
	in.Agents, in.Counts = agents, CountAgents(agents)
	st, evs = Next(in)
	if len(evs) != 0 || st.Progress != 0.3 {
		t.Errorf("second step: events %v progress %v, want none and 0.3", kinds(evs), st.Progress)
	}
}

// TestNextCascade: a group with no canaries whose agents are all on the
// target already goes from unstarted to done in one step.
func TestNextCascade(t *testing.T) {
	cfg := testConfig()
	cfg.Groups[0].CanaryCount = 0
	agents := onVersion(spreadIDs(4, 0.5), v2)
	st, evs := Next(Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Agents: agents, Counts: CountAgents(agents),
		Now: mustTime(t, "2024-03-05T03:00:00Z")})
	want := []string{"transition:→unstarted", "transition:unstarted→canary", "transition:canary→active", "transition:active→done"}
	if diff := cmp.Diff(want, kinds(evs)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if st.State != StateDone || st.Progress != 1 {
		t.Errorf("state %s progress %v", st.State, st.Progress)
	}
}

// TestNextPure: Next is deterministic and leaves its input alone.
func TestNextPure(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	ids := spreadIDs(10, 0.5)
	agents := onVersion(ids, v2)
	prev := GroupStatus{V: 1, Group: "staging", State: StateCanary, TargetVersion: v2, StartVersion: v1, InitialCount: 10,
		Canaries: []Canary{{ID: ids[2]}, {ID: ids[5]}}, FailuresSince: start, StartedAt: start}
	in := Input{Config: testConfig(), Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents), Now: start.Add(time.Minute)}
	keep := prev.Clone()
	st1, ev1 := Next(in)
	st2, ev2 := Next(in)
	if diff := cmp.Diff(st1, st2); diff != "" {
		t.Errorf("status differs between calls (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(ev1, ev2); diff != "" {
		t.Errorf("events differ between calls (-first +second):\n%s", diff)
	}
	if diff := cmp.Diff(keep, in.Prev); diff != "" {
		t.Errorf("Next changed its input (-before +after):\n%s", diff)
	}
	if st1.Canaries[0].HealthySince.IsZero() {
		t.Errorf("canary observation not recorded in the result")
	}
}
