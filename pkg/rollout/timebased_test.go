package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// tbConfig: staging daily 03:00 for 3h, then prod (depends on staging,
// wait_hours 2) Mondays 22:00 for 4h, across midnight. UTC.
func tbConfig() Config {
	staging, prod := DefaultGroup("staging"), DefaultGroup("prod")
	staging.StartHour, staging.WindowLength, staging.CanaryCount = 3, Duration(3*time.Hour), 1
	prod.Days, prod.StartHour, prod.WindowLength, prod.WaitHours, prod.CanaryCount = []string{"Mon"}, 22, Duration(4*time.Hour), 2, 1
	return Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{staging, prod}}
}

func tbSpec() Spec {
	s := DefaultSpec(v1, v2)
	s.Schedule = ScheduleTimeBased
	return s
}

// tbStatus is prod's status in state, for v1 → v2, with its window
// closing at closes.
func tbStatus(state State, closes time.Time) GroupStatus {
	start := mustTimeNoT("2024-03-04T22:00:00Z")
	st := startedStatus(state, start, idAt(0.05))
	st.Group, st.WindowCloses = "prod", closes
	if state == StateDone {
		st.Progress, st.DoneAt = 1, closes
	}
	return st
}

func mustTimeNoT(s string) time.Time {
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return tm
}

// half is ten agents of prod, the lower half on the target.
func half() []AgentView {
	ids := spreadIDs(10, 0.5)
	return append(onVersion(ids[:5], v2), onVersion(ids[5:], v1)...)
}

// TestTimeBasedNext: the time-based schedule's rules, Teleport's two cases
// (active → done when the window closes, done → active when it reopens)
// among them, each a step of Next.
func TestTimeBasedNext(t *testing.T) {
	t.Parallel()
	monOpen := mustTime(t, "2024-03-04T22:00:00Z")  // prod's window: Mon 22:00 …
	monClose := mustTime(t, "2024-03-05T02:00:00Z") // … to Tue 02:00
	nextOpen := mustTime(t, "2024-03-11T22:00:00Z")
	allV1 := onVersion(spreadIDs(10, 0.5), v1)
	allV2 := onVersion(spreadIDs(10, 0.5), v2)
	rolledBack := half()
	for i := 5; i < 10; i++ {
		rolledBack[i].Rollback, rolledBack[i].RollbackFrom = true, v2
	}
	stagingHalted := startedStatus(StateCanary, monOpen.Add(-48*time.Hour), idAt(0.05))
	stagingHalted.Halted = true
	stagingRolledBack := startedStatus(StateActive, monOpen.Add(-48*time.Hour), idAt(0.05))
	stagingRolledBack.State = StateRolledBack
	haltedActive := tbStatus(StateActive, monClose)
	haltedActive.Halted, haltedActive.HaltReason, haltedActive.HaltedAt = true, "3 agents failed", monOpen.Add(time.Hour)
	rolledBackSt := tbStatus(StateRolledBack, monClose)
	runRequested := newStatus("prod", tbSpec(), monOpen.Add(-time.Hour), "new target_version 2.0.0")
	runRequested.RunRequested = true
	// Done inside its window (everyone was on the target at 23:00) and
	// still in that window: an agent that came back off the target waits
	// for the next one.
	doneInWindow := tbStatus(StateDone, monClose)
	doneInWindow.DoneAt = monOpen.Add(time.Hour)
	markedDone := tbStatus(StateDone, time.Time{})
	markedDone.DoneAt = monOpen.Add(time.Hour) // fleetctl mark-done in the window, after a fleetctl run
	// A group with a window every day for 24h: the next window opens as
	// the last closes.
	allDay := tbConfig()
	allDay.Groups[1].Days, allDay.Groups[1].WindowLength = []string{"*"}, Duration(24*time.Hour)
	allDayActive := tbStatus(StateActive, mustTime(t, "2024-03-05T22:00:00Z"))
	allDayActive.Alerted = true
	critical := tbSpec()
	critical.Critical = true

	tests := []struct {
		name         string
		cfg          func(*Config)
		spec         *Spec
		prev         GroupStatus
		preds        map[string]GroupStatus
		agents       []AgentView
		now          time.Time
		wantState    State
		wantHalted   bool
		wantEvents   []string
		reason       string // in the last transition's reason ("" any)
		waiting      string // in Waiting ("" none)
		waitingUntil time.Time
		closes       time.Time // WindowCloses
	}{
		{
			name: "starts in its window although its predecessor has not started",
			now:  monOpen.Add(time.Minute), agents: allV1,
			wantState: StateCanary, wantEvents: []string{"transition:→unstarted", "transition:unstarted→canary"},
			reason: "schedule time-based, window open until Tue 02:00 UTC: starting with 10 agents, 1 canaries", closes: monClose,
		},
		{
			name: "starts after midnight in Monday's window",
			now:  mustTime(t, "2024-03-05T01:30:00Z"), agents: allV1,
			wantState: StateCanary, wantEvents: []string{"transition:→unstarted", "transition:unstarted→canary"}, closes: monClose,
		},
		{
			name: "starts although its predecessor is halted",
			now:  monOpen, agents: allV1, preds: map[string]GroupStatus{"staging": stagingHalted},
			wantState: StateCanary, wantEvents: []string{"transition:→unstarted", "transition:unstarted→canary"}, closes: monClose,
		},
		{
			name: "starts although its predecessor is rolled back",
			now:  monOpen, agents: allV1, preds: map[string]GroupStatus{"staging": stagingRolledBack},
			wantState: StateCanary, wantEvents: []string{"transition:→unstarted", "transition:unstarted→canary"}, closes: monClose,
		},
		{
			name: "no wait_hours after a predecessor just done",
			now:  monOpen, agents: allV1, preds: map[string]GroupStatus{"staging": {V: 1, Group: "staging", State: StateDone, TargetVersion: v2, DoneAt: monOpen.Add(-time.Minute)}},
			wantState: StateCanary, wantEvents: []string{"transition:→unstarted", "transition:unstarted→canary"}, closes: monClose,
		},
		{
			name: "waits for its window",
			now:  monClose, agents: allV1,
			wantState: StateUnstarted, wantEvents: []string{"transition:→unstarted"},
			waiting: "window: next opens Mon 2024-03-11 22:00 UTC (Mon 22:00-02:00 next day UTC (window_length 4h))", waitingUntil: nextOpen,
		},
		{
			name:      "no agents: waits for them in its window",
			now:       monOpen,
			wantState: StateUnstarted, wantEvents: []string{"transition:→unstarted"},
			waiting: "no agents present",
		},
		{
			name: "critical: starts outside its window, nothing closes it",
			spec: &critical, now: monClose.Add(time.Hour), agents: allV1,
			wantState: StateCanary, wantEvents: []string{"transition:→unstarted", "transition:unstarted→canary"},
			reason: "critical: windows ignored",
		},
		{
			name: "fleetctl run: starts outside its window, nothing closes it",
			prev: runRequested, now: monClose.Add(time.Hour), agents: allV1,
			wantState: StateCanary, wantEvents: []string{"transition:unstarted→canary"}, reason: "run requested by an operator",
		},
		{
			name: "active in its window: rolls out",
			prev: tbStatus(StateActive, monClose), now: monClose.Add(-time.Minute), agents: half(),
			wantState: StateActive, closes: monClose,
		},
		{
			// Teleport: active → done when the window closes.
			name: "active when the window closes: done with half the agents",
			prev: tbStatus(StateActive, monClose), now: monClose, agents: half(),
			wantState: StateDone, wantEvents: []string{"transition:active→done"},
			reason:  "window closed at Tue 02:00 UTC: 5 of 10 present agents on 2.0.0; the other 5 update when the window reopens (schedule time-based)",
			waiting: "5 present agents not on 2.0.0: active again when the window opens Mon 2024-03-11 22:00 UTC", waitingUntil: nextOpen, closes: monClose,
		},
		{
			name: "active, everyone on the target in the window: done as always",
			prev: tbStatus(StateActive, monClose), now: monOpen.Add(time.Hour), agents: allV2,
			wantState: StateDone, wantEvents: []string{"transition:active→done"}, reason: "all 10 present agents on 2.0.0", closes: monClose,
		},
		{
			name: "halted active group stays halted when the window closes",
			prev: haltedActive, now: monClose.Add(time.Hour), agents: half(),
			wantState: StateActive, wantHalted: true, closes: monClose,
		},
		{
			name: "active group halts in its window on failures",
			prev: tbStatus(StateActive, monClose), now: monOpen.Add(time.Hour),
			agents: func() []AgentView {
				a := half()
				for i := 5; i < 8; i++ {
					a[i].Rollback, a[i].RollbackFrom, a[i].StartTime = true, v2, monOpen.Add(time.Minute)
				}
				return a
			}(),
			wantState: StateActive, wantHalted: true, wantEvents: []string{"halt", "alert"}, closes: monClose,
		},
		{
			name: "done, window closed, agents off the target: waits for the window",
			prev: tbStatus(StateDone, monClose), now: monClose.Add(24 * time.Hour), agents: half(),
			wantState: StateDone,
			waiting:   "5 present agents not on 2.0.0: active again when the window opens Mon 2024-03-11 22:00 UTC", waitingUntil: nextOpen, closes: monClose,
		},
		{
			// Teleport: done → active when the window reopens.
			name: "done, window reopens with agents off the target: active",
			prev: tbStatus(StateDone, monClose), now: nextOpen.Add(time.Minute), agents: half(),
			wantState: StateActive, wantEvents: []string{"transition:done→active"},
			reason: "window reopened, open until Tue 02:00 UTC: 5 of 10 present agents not on 2.0.0 (schedule time-based)",
			closes: mustTime(t, "2024-03-12T02:00:00Z"),
		},
		{
			name: "done, window reopens, everyone on the target: stays done",
			prev: tbStatus(StateDone, monClose), now: nextOpen.Add(time.Minute), agents: allV2,
			wantState: StateDone, closes: monClose,
		},
		{
			name: "done, window reopens, the others rolled back from the target: stays done",
			prev: tbStatus(StateDone, monClose), now: nextOpen.Add(time.Minute), agents: rolledBack,
			wantState: StateDone, closes: monClose,
		},
		{
			name: "done with no agents: stays done",
			prev: tbStatus(StateDone, monClose), now: nextOpen.Add(time.Minute),
			wantState: StateDone, closes: monClose,
		},
		{
			name: "done in its window, still the same window: waits for the next",
			prev: doneInWindow, now: monOpen.Add(2 * time.Hour), agents: half(),
			wantState: StateDone, waiting: "active again when the window opens Mon 2024-03-11 22:00 UTC", waitingUntil: nextOpen, closes: monClose,
		},
		{
			name: "marked done in a window, no window of its own: the next window counts",
			prev: markedDone, now: monOpen.Add(2 * time.Hour), agents: half(),
			wantState: StateDone, waiting: "active again when the window opens Mon 2024-03-11 22:00 UTC", waitingUntil: nextOpen,
		},
		{
			name: "marked done, the next window reopens it",
			prev: markedDone, now: nextOpen, agents: half(),
			wantState: StateActive, wantEvents: []string{"transition:done→active"}, closes: mustTime(t, "2024-03-12T02:00:00Z"),
		},
		{
			name: "rolled back group stays rolled back in its window",
			prev: rolledBackSt, now: nextOpen.Add(time.Minute), agents: half(),
			wantState: StateRolledBack, closes: monClose,
		},
		{
			name: "critical: a done group is not reopened (everyone is told to update)",
			spec: &critical, prev: tbStatus(StateDone, monClose), now: nextOpen.Add(time.Minute), agents: half(),
			wantState: StateDone, closes: monClose,
		},
		{
			name: "24h windows every day: closes and reopens in one step",
			cfg:  func(c *Config) { *c = allDay },
			prev: allDayActive, now: allDayActive.WindowCloses, agents: half(),
			wantState: StateActive, wantEvents: []string{"transition:active→done", "transition:done→active"},
			reason: "window reopened", closes: mustTime(t, "2024-03-06T22:00:00Z"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tbConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			spec := tbSpec()
			if tt.spec != nil {
				spec = *tt.spec
			}
			st, evs := Next(Input{Config: cfg, Group: "prod", Spec: spec, Prev: tt.prev, Predecessors: tt.preds,
				Agents: tt.agents, Counts: CountAgents(tt.agents), Now: tt.now})
			if st.State != tt.wantState || st.Halted != tt.wantHalted {
				t.Errorf("state %s halted %v, want %s halted %v (reason %q, waiting %q)", st.State, st.Halted, tt.wantState, tt.wantHalted, st.Reason, st.Waiting)
			}
			if diff := cmp.Diff(tt.wantEvents, kinds(evs)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if tt.reason != "" && !strings.Contains(st.Reason, tt.reason) {
				t.Errorf("reason %q, want it to contain %q", st.Reason, tt.reason)
			}
			if (tt.waiting == "") != (st.Waiting == "") || !strings.Contains(st.Waiting, tt.waiting) {
				t.Errorf("waiting %q, want %q", st.Waiting, tt.waiting)
			}
			if !tt.waitingUntil.IsZero() && !st.WaitingUntil.Equal(tt.waitingUntil) {
				t.Errorf("waiting until %s, want %s", st.WaitingUntil, tt.waitingUntil)
			}
			if !st.WindowCloses.Equal(tt.closes) {
				t.Errorf("window closes %s, want %s", st.WindowCloses, tt.closes)
			}
			if err := st.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestTimeBasedReopenResets: a group active again in its next window
// starts over its count: initial count, progress within max_in_flight,
// failures and alert_after from now, no second canary phase.
func TestTimeBasedReopenResets(t *testing.T) {
	t.Parallel()
	closes := mustTime(t, "2024-03-05T02:00:00Z")
	now := mustTime(t, "2024-03-11T22:05:00Z")
	prev := tbStatus(StateDone, closes)
	prev.InitialCount, prev.FailedCount, prev.Alerted = 40, 2, true
	prev.Canaries = []Canary{{ID: idAt(0.05), HealthySince: closes.Add(-3 * time.Hour)}}
	agents := half() // 10 present, 5 on the target
	st, _ := Next(Input{Config: tbConfig(), Group: "prod", Spec: tbSpec(), Prev: prev, Agents: agents, Counts: CountAgents(agents), Now: now})
	if st.State != StateActive || st.InitialCount != 10 || st.FailedCount != 0 || st.Alerted || !st.StartedAt.Equal(now) || !st.FailuresSince.Equal(now) || !st.DoneAt.IsZero() {
		t.Fatalf("reopened status: %+v", st)
	}
	if len(st.Canaries) != 1 || st.Canaries[0] != prev.Canaries[0] {
		t.Errorf("canaries changed: %+v", st.Canaries)
	}
	// max_in_flight 20% of 10: two of the five off the target may go.
	n := 0
	for _, a := range agents {
		if _, update := Decide(a.ID, tbSpec(), st, ModeEnabled); update && a.ActiveVersion != v2 {
			n++
		}
	}
	if n == 0 || n > 2 {
		t.Errorf("%d agents off the target told to update at progress %v, want 1-2", n, st.Progress)
	}
}

// TestTimeBasedCanaryWindow: a group still in canary when its window
// closes stays in canary; its canaries may not start (UpdateAllowed) until
// the next window opens, which becomes its window.
func TestTimeBasedCanaryWindow(t *testing.T) {
	t.Parallel()
	closes := mustTime(t, "2024-03-05T02:00:00Z")
	prev := tbStatus(StateCanary, closes)
	agents := onVersion(spreadIDs(10, 0.5), v1)
	agents = append(agents, AgentView{ID: prev.Canaries[0].ID, ActiveVersion: v1})
	in := Input{Config: tbConfig(), Group: "prod", Spec: tbSpec(), Prev: prev, Agents: agents, Counts: CountAgents(agents)}

	in.Now = closes.Add(time.Hour)
	st, evs := Next(in)
	if st.State != StateCanary || len(evs) != 0 || !strings.Contains(st.Waiting, "window closed: canaries that have not started wait for it to open Mon 2024-03-11 22:00 UTC") {
		t.Fatalf("after the window: %s %v, waiting %q", st.State, kinds(evs), st.Waiting)
	}
	canary := prev.Canaries[0].ID
	if _, update := Decide(canary, tbSpec(), st, ModeEnabled); !update {
		t.Fatal("Decide does not tell the canary to update")
	}
	if UpdateAllowed(tbSpec(), st, in.Now) {
		t.Error("the canary may start after its window closed")
	}
	if !UpdateAllowed(tbSpec(), st, closes.Add(-time.Second)) {
		t.Error("the canary may not start inside its window")
	}

	in.Prev, in.Now = st, mustTime(t, "2024-03-11T22:00:00Z")
	st, _ = Next(in)
	if st.State != StateCanary || st.Waiting != "" || !st.WindowCloses.Equal(mustTime(t, "2024-03-12T02:00:00Z")) || !UpdateAllowed(tbSpec(), st, in.Now) {
		t.Errorf("next window: %s waiting %q closes %s", st.State, st.Waiting, st.WindowCloses)
	}
}

// TestTimeBasedDecide: what agents are told under time-based: a done
// group tells nobody to update (new installs still get the target), unless
// critical; the regular schedule's done is unchanged. UpdateAllowed stops
// agents of a rolling-out group once its window closed, and nothing else.
func TestTimeBasedDecide(t *testing.T) {
	t.Parallel()
	closes := mustTime(t, "2024-03-05T02:00:00Z")
	id := idAt(0.1)
	regular, tb, critical := DefaultSpec(v1, v2), tbSpec(), tbSpec()
	critical.Critical = true
	done := tbStatus(StateDone, closes)
	active := tbStatus(StateActive, closes)
	active.Progress = 0.5
	for _, tc := range []struct {
		name         string
		spec         Spec
		st           GroupStatus
		now          time.Time
		version      string
		update       bool
		allowed      bool
		installsFrom string // Act for a host running this
	}{
		{"regular done tells everyone", regular, done, closes, v2, true, true, v1},
		{"time-based done tells nobody", tb, done, closes, v2, false, true, ""},
		{"time-based done: a new install gets the target", tb, done, closes, v2, false, true, "new"},
		{"time-based critical done tells everyone", critical, done, closes, v2, true, true, v1},
		{"time-based active in its window", tb, active, closes.Add(-time.Minute), v2, true, true, v1},
		{"time-based active after its window closed", tb, active, closes, v2, true, false, ""},
		{"regular active ignores window_closes", regular, active, closes.Add(time.Hour), v2, true, true, v1},
		{"critical active ignores window_closes", critical, active, closes.Add(time.Hour), v2, true, true, v1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, update := Decide(id, tc.spec, tc.st, ModeEnabled)
			if v != tc.version || update != tc.update {
				t.Errorf("Decide = %q %v, want %q %v", v, update, tc.version, tc.update)
			}
			if got := UpdateAllowed(tc.spec, tc.st, tc.now); got != tc.allowed {
				t.Errorf("UpdateAllowed = %v, want %v", got, tc.allowed)
			}
			switch tc.installsFrom {
			case "new":
				if !Act("", v, update) {
					t.Error("a new host does not install the target")
				}
			case v1:
				if !Act(v1, v, update && UpdateAllowed(tc.spec, tc.st, tc.now)) {
					t.Error("a host on v1 does not update")
				}
			default:
				if Act(v1, v, update && UpdateAllowed(tc.spec, tc.st, tc.now)) {
					t.Error("a host on v1 updates outside the window")
				}
			}
		})
	}
}

// TestTimeBasedWeek drives a week of the time-based schedule: staging's
// Wednesday 3h window and prod's Monday, Thursday and Saturday 22:00 4h window
// (across midnight), 30-minute installs, 10% of prod in flight, and a
// third of prod's agents away during its first window. Every update to the
// target starts inside its group's window; prod does not wait for staging;
// prod is done when a window closes with agents left, active again when
// the next opens, and done with everyone on the target.
func TestTimeBasedWeek(t *testing.T) {
	t.Parallel()
	cfg := tbConfig()
	cfg.Groups[0].Days = []string{"Wed"} // after prod's first window
	cfg.Groups[1].Days = []string{"Mon", "Thu", "Sat"}
	cfg.Groups[0].MaxInFlight, cfg.Groups[1].MaxInFlight = 50, 10
	start := mustTime(t, "2024-03-04T00:00:00Z") // Monday
	s := newSim(t, cfg, tbSpec(), start)
	s.install = 30 * time.Minute
	s.addAgents("staging", spreadIDs(20, 0.3), v1)
	prod := s.addAgents("prod", spreadIDs(60, 0.7), v1)
	away := prod[40:]
	for _, a := range away {
		a.present = false
	}
	for s.now.Before(start.Add(7 * 24 * time.Hour)) {
		if s.now.Equal(mustTime(t, "2024-03-05T12:00:00Z")) {
			for _, a := range away {
				a.present = true
			}
		}
		s.step(10 * time.Minute)
	}
	loc := time.UTC
	for _, u := range s.starts {
		gc, _ := cfg.Group(u.group)
		if u.version == v2 && !gc.InWindow(u.at, loc) {
			t.Errorf("%s %s started %s at %s, outside its window", u.group, u.id, u.version, u.at.Format(time.RFC3339))
		}
	}
	got := s.eventsOf(EventTransition)
	want := []string{
		"staging →unstarted 2024-03-04T00:00:00Z",
		"prod →unstarted 2024-03-04T00:00:00Z",
		// prod starts on its own window, before staging (which it
		// depends on) has started.
		"prod unstarted→canary 2024-03-04T22:00:00Z",
		"prod canary→active 2024-03-04T22:50:00Z",
		// Teleport: active → done when the window closes, twice: 10%
		// in flight does not get through the group in one window.
		"prod active→done 2024-03-05T02:00:00Z",
		"staging unstarted→canary 2024-03-06T03:00:00Z",
		"staging canary→active 2024-03-06T03:50:00Z",
		"staging active→done 2024-03-06T05:10:00Z",
		// Teleport: done → active when the window reopens.
		"prod done→active 2024-03-07T22:00:00Z",
		"prod active→done 2024-03-08T02:00:00Z",
		"prod done→active 2024-03-09T22:00:00Z",
		"prod active→done 2024-03-09T22:40:00Z",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	for _, a := range s.agents {
		if a.ActiveVersion != v2 {
			t.Errorf("%s %s runs %s after a week", a.group, a.ID, a.ActiveVersion)
		}
	}
}
