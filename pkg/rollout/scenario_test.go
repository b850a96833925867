package rollout

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The scenario tests drive whole rollouts: a simulated controller calls Next
// for every group in dependency order, then simulated agents ask Decide and
// install (taking s.install; an agent marked fails rolls back and never
// retries that version), then the clock moves on. Nothing sleeps.

type simAgent struct {
	AgentView
	group    string
	present  bool
	fails    bool
	bad      map[string]bool
	updating string
	doneAt   time.Time
}

type updateStart struct {
	id      AgentID
	group   string
	version string
	at      time.Time
}

type sim struct {
	t       *testing.T
	cfg     Config
	spec    Spec
	now     time.Time
	install time.Duration
	status  map[string]GroupStatus
	agents  []*simAgent
	events  []Event
	starts  []updateStart
	waiting map[string][]string // distinct Waiting texts seen per group
}

func newSim(t *testing.T, cfg Config, spec Spec, now time.Time) *sim {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &sim{t: t, cfg: cfg, spec: spec, now: now, install: 10 * time.Minute,
		status: map[string]GroupStatus{}, waiting: map[string][]string{}}
}

func (s *sim) addAgents(group string, ids []AgentID, version string) []*simAgent {
	var out []*simAgent
	for _, id := range ids {
		a := &simAgent{AgentView: AgentView{ID: id, ActiveVersion: version}, group: group, present: true, bad: map[string]bool{}}
		s.agents = append(s.agents, a)
		out = append(out, a)
	}
	return out
}

func (s *sim) views(group string) []AgentView {
	var out []AgentView
	for _, a := range s.agents {
		if a.group == group && a.present {
			out = append(out, a.AgentView)
		}
	}
	return out
}

// controller runs one step of every group's state machine.
func (s *sim) controller() {
	s.t.Helper()
	order, err := s.cfg.Order()
	if err != nil {
		s.t.Fatal(err)
	}
	for _, g := range order {
		views := s.views(g)
		prev := s.status[g]
		st, evs := Next(Input{Config: s.cfg, Group: g, Spec: s.spec, Prev: prev,
			Predecessors: Plan{Spec: s.spec, Groups: s.status}.Predecessors(s.cfg, g),
			Counts:       CountAgents(views), Agents: views, Now: s.now})
		if prev.TargetVersion == st.TargetVersion && st.Progress < prev.Progress {
			s.t.Errorf("%s %s: progress went back from %v to %v", s.now.Format(time.RFC3339), g, prev.Progress, st.Progress)
		}
		if st.Waiting != "" && !slices.Contains(s.waiting[g], st.Waiting) {
			s.waiting[g] = append(s.waiting[g], st.Waiting)
		}
		s.status[g] = st
		s.events = append(s.events, evs...)
		s.checkInFlight(g, views)
	}
}

// checkInFlight checks the backpressure bound after a step of group g: in
// the active state, the agents Decide tells to update that have not
// finished with the target (on it, or rolled back from it) are at most
// max_in_flight × initial_count, rounded down and at least 1. (No agent of
// the scenarios vanishes or joins late, which could add to that.)
func (s *sim) checkInFlight(g string, views []AgentView) {
	s.t.Helper()
	st := s.status[g]
	gc, ok := s.cfg.Group(g)
	if !ok || st.State != StateActive || s.spec.Strategy == StrategyGrouped {
		return
	}
	n := 0
	for _, a := range views {
		if a.ActiveVersion == st.TargetVersion || rolledBackFrom(a, st.TargetVersion) {
			continue
		}
		if _, update := Decide(a.ID, s.spec, st, s.cfg.Mode); update {
			n++
		}
	}
	if w := InFlightWindow(gc.MaxInFlight, st.InitialCount); n > w {
		s.t.Errorf("%s %s: %d agents in flight at progress %v, more than the window %d", s.now.Format(time.RFC3339), g, n, st.Progress, w)
	}
}

// agentsAct lets every present agent finish a due install and ask Decide.
func (s *sim) agentsAct() {
	for _, a := range s.agents {
		if !a.present {
			continue
		}
		if a.updating != "" {
			if s.now.Before(a.doneAt) {
				continue
			}
			if a.fails && a.updating == s.spec.TargetVersion {
				a.Rollback, a.RollbackFrom = true, a.updating
				a.bad[a.updating] = true
			} else {
				a.ActiveVersion, a.Rollback, a.RollbackFrom = a.updating, false, ""
			}
			a.updating = ""
			continue
		}
		v, update := Decide(a.ID, s.spec, s.status[a.group], s.cfg.Mode)
		if update && v != "" && v != a.ActiveVersion && !a.bad[v] {
			a.updating, a.doneAt, a.StartTime, a.Error = v, s.now.Add(s.install), s.now, ""
			s.starts = append(s.starts, updateStart{a.ID, a.group, v, s.now})
		}
	}
}

func (s *sim) step(d time.Duration) {
	s.t.Helper()
	s.controller()
	s.agentsAct()
	s.now = s.now.Add(d)
}

// runUntil steps every 10 minutes until done() or the deadline; it reports
// whether done() became true.
func (s *sim) runUntil(deadline time.Time, done func() bool) bool {
	s.t.Helper()
	for s.now.Before(deadline) {
		s.step(10 * time.Minute)
		if done() {
			return true
		}
	}
	return false
}

func (s *sim) allDone() bool {
	for _, g := range s.cfg.Groups {
		if st := s.status[g.Name]; st.State != StateDone || st.TargetVersion != s.spec.TargetVersion {
			return false
		}
	}
	return true
}

func (s *sim) eventsOf(kind EventKind) []string {
	var out []string
	for _, e := range s.events {
		if e.Kind == kind {
			out = append(out, fmt.Sprintf("%s %s→%s %s", e.Group, e.From, e.To, e.At.UTC().Format(time.RFC3339)))
		}
	}
	return out
}

func randomIDs(r *rand.Rand, n int) []AgentID {
	ids := make([]AgentID, n)
	for i := range ids {
		ids[i] = idAt(r.Float64())
	}
	return ids
}

// chainConfig: staging daily at 02:00, prod on weekdays at 01:00 a day after
// staging, edge daily at 22:00 two hours after prod; Berlin time.
func chainConfig() Config {
	staging, prod, edge := DefaultGroup("staging"), DefaultGroup("prod"), DefaultGroup("edge")
	staging.StartHour, staging.CanaryCount, staging.MaxInFlight = 2, 2, 50
	prod.StartHour, prod.WaitHours, prod.Days = 1, 24, []string{"Mon", "Tue", "Wed", "Thu", "Fri"}
	edge.StartHour, edge.WaitHours = 22, 2
	return Config{V: 1, Mode: ModeEnabled, Timezone: "Europe/Berlin", Groups: []GroupConfig{staging, prod, edge}}
}

func chainSim(t *testing.T) *sim {
	// Saturday 2024-03-02 23:00 in Berlin.
	s := newSim(t, chainConfig(), DefaultSpec(v1, v2), mustTime(t, "2024-03-02T22:00:00Z"))
	r := rand.New(rand.NewPCG(169, 1))
	s.addAgents("staging", randomIDs(r, 20), v1)
	s.addAgents("prod", randomIDs(r, 100), v1)
	s.addAgents("edge", randomIDs(r, 50), v1)
	return s
}

func TestScenarioThreeGroupChain(t *testing.T) {
	s := chainSim(t)
	if !s.runUntil(mustTime(t, "2024-03-09T00:00:00Z"), s.allDone) {
		t.Fatalf("not all done by the deadline: %v", s.status)
	}
	// Each group starts at the first window after its predecessor finished
	// and waited its wait_hours (Berlin is UTC+1): staging Sunday 02:00;
	// prod, a day after staging finished (Sunday about 03:10), misses
	// Monday's 01:00 window and starts Tuesday 01:00; edge two hours after
	// prod finished, at 22:00 the same day.
	// Canaries install in 10 minutes, are seen healthy at the next step and
	// judged after min_healthy_time (5m) at the one after. Ids are random:
	// where they cluster, the in-flight cap holds a group back a little
	// (edge was done at 22:50 with the §3.4 formula alone, with 13 agents
	// in flight against a window of 10).
	want := []string{
		"staging →unstarted 2024-03-02T22:00:00Z",
		"prod →unstarted 2024-03-02T22:00:00Z",
		"edge →unstarted 2024-03-02T22:00:00Z",
		"staging unstarted→canary 2024-03-03T01:00:00Z",
		"staging canary→active 2024-03-03T01:30:00Z",
		"staging active→done 2024-03-03T02:10:00Z",
		"prod unstarted→canary 2024-03-05T00:00:00Z",
		"prod canary→active 2024-03-05T00:30:00Z",
		"prod active→done 2024-03-05T02:10:00Z",
		"edge unstarted→canary 2024-03-05T21:00:00Z",
		"edge canary→active 2024-03-05T21:30:00Z",
		"edge active→done 2024-03-05T23:10:00Z",
	}
	if diff := cmp.Diff(want, s.eventsOf(EventTransition)); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	for _, kind := range []EventKind{EventHalt, EventAlert, EventFrozen} {
		if evs := s.eventsOf(kind); len(evs) != 0 {
			t.Errorf("%s events in a healthy rollout: %v", kind, evs)
		}
	}
	// Waiting was visible and named its cause.
	for group, want := range map[string][]string{
		"staging": {"window: next opens Sun 2024-03-03 02:00 CET"},
		"prod":    {`waiting for group "staging" to finish (active)`, "wait_hours: 24h", "window: next opens Tue 2024-03-05 01:00 CET"},
		"edge":    {`waiting for group "prod" to finish (unstarted)`, "wait_hours: 2h", "window: next opens Tue 2024-03-05 22:00 CET"},
	} {
		for _, w := range want {
			found := false
			for _, seen := range s.waiting[group] {
				found = found || strings.Contains(seen, w)
			}
			if !found {
				t.Errorf("%s never showed waiting %q; saw %q", group, w, s.waiting[group])
			}
		}
	}
	// Nobody updated before their group started; everyone ends on v2.
	for _, u := range s.starts {
		if st := s.status[u.group]; u.at.Before(st.StartedAt) || u.version != v2 {
			t.Errorf("agent %s of %s started %s at %s; group started %s", u.id, u.group, u.version, u.at, st.StartedAt)
		}
	}
	for _, a := range s.agents {
		if a.ActiveVersion != v2 {
			t.Errorf("agent %s of %s on %s", a.ID, a.group, a.ActiveVersion)
		}
	}
}

func TestScenarioCanaryFailureHaltsChain(t *testing.T) {
	s := chainSim(t)
	staging := s.views("staging")
	canaries := SelectCanaries(staging, 2, v2)
	for _, a := range s.agents {
		if a.ID == canaries[0] {
			a.fails = true
		}
	}
	s.runUntil(mustTime(t, "2024-03-09T00:00:00Z"), func() bool { return false })

	st := s.status["staging"]
	if st.State != StateCanary || !st.Halted || !strings.Contains(st.HaltReason, "canary "+string(canaries[0])+" failed: rolled back from 2.0.0") {
		t.Errorf("staging: state %s halted %v %q", st.State, st.Halted, st.HaltReason)
	}
	if diff := cmp.Diff([]string{"staging canary→canary 2024-03-03T01:20:00Z"}, s.eventsOf(EventHalt)); diff != "" {
		t.Errorf("halt events (-want +got):\n%s", diff)
	}
	if got := s.eventsOf(EventAlert); len(got) != 1 || !strings.HasPrefix(got[0], "staging") {
		t.Errorf("alert events %v, want one for staging", got)
	}
	for _, g := range []string{"prod", "edge"} {
		if st := s.status[g]; st.State != StateUnstarted || st.Halted {
			t.Errorf("%s: state %s halted %v, want unstarted", g, st.State, st.Halted)
		}
	}
	if w := s.status["prod"].Waiting; w != `waiting for group "staging" to finish (canary, halted)` {
		t.Errorf("prod waiting %q", w)
	}
	// Only the canaries ever tried the target.
	for _, u := range s.starts {
		if !slices.Contains(canaries, u.id) {
			t.Errorf("non-canary %s of %s started an update at %s", u.id, u.group, u.at)
		}
	}
}

func TestScenarioTenPercentFailingHalts(t *testing.T) {
	g := DefaultGroup("fleet")
	cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{g}}
	spec := DefaultSpec(v1, v2)
	spec.Schedule = ScheduleImmediate
	s := newSim(t, cfg, spec, mustTime(t, "2024-03-04T10:00:00Z"))
	const n = 1000
	agents := s.addAgents("fleet", spreadIDs(n, 0.5), v1)
	canaries := SelectCanaries(s.views("fleet"), g.CanaryCount, v2)
	failing := 0
	for i, a := range agents {
		if i%10 == 7 && !slices.Contains(canaries, a.ID) {
			a.fails = true
			failing++
		}
	}
	if failing != 100 {
		t.Fatalf("%d failing agents, want 100", failing)
	}
	if !s.runUntil(mustTime(t, "2024-03-05T10:00:00Z"), func() bool { return s.status["fleet"].Halted }) {
		t.Fatalf("never halted: %+v", s.status["fleet"])
	}
	halted := s.status["fleet"]
	if halted.State != StateActive || halted.FailedCount <= 50 {
		t.Errorf("halted in %s with %d failed, want active with more than 50", halted.State, halted.FailedCount)
	}
	// Let everything in flight land, then count.
	s.runUntil(s.now.Add(6*time.Hour), func() bool { return false })
	failed := 0
	for _, a := range agents {
		if a.Rollback {
			failed++
		}
	}
	limit := g.FailureThreshold.Of(n) + g.MaxInFlight.Of(n)
	if float64(failed) > limit {
		t.Errorf("%d agents failed, more than failure_threshold + max_in_flight = %v", failed, limit)
	}
	for _, u := range s.starts {
		if u.at.After(halted.HaltedAt) {
			t.Errorf("agent %s started an update at %s, after the halt at %s", u.id, u.at, halted.HaltedAt)
		}
	}
	if st := s.status["fleet"]; st.Progress != halted.Progress || !st.Halted {
		t.Errorf("after the halt: progress %v (was %v), halted %v", st.Progress, halted.Progress, st.Halted)
	}
	t.Logf("halted at %s with %d failed, progress %.3f; %d failed in the end (limit %v)", halted.HaltedAt.Format(time.Kitchen), halted.FailedCount, halted.Progress, failed, limit)
}

func TestScenarioNewTargetResetsAllGroups(t *testing.T) {
	s := chainSim(t)
	if !s.runUntil(mustTime(t, "2024-03-09T00:00:00Z"), func() bool { return s.status["prod"].State == StateActive }) {
		t.Fatalf("prod never active: %+v", s.status["prod"])
	}
	s.spec = DefaultSpec(v1, "2.0.1")
	s.events = nil
	s.step(10 * time.Minute)
	for _, g := range []string{"staging", "prod", "edge"} {
		st := s.status[g]
		if st.State != StateUnstarted || st.TargetVersion != "2.0.1" || st.Progress != 0 || st.InitialCount != 0 || st.Canaries != nil {
			t.Errorf("%s not reset: %+v", g, st)
		}
	}
	var resets []string
	for _, e := range s.events {
		resets = append(resets, e.Group+" "+string(e.From)+"→"+string(e.To)+": "+e.Reason)
	}
	want := []string{
		"staging done→unstarted: new target_version 2.0.1 (was 2.0.0)",
		"prod active→unstarted: new target_version 2.0.1 (was 2.0.0)",
		"edge unstarted→unstarted: new target_version 2.0.1 (was 2.0.0)",
	}
	if diff := cmp.Diff(want, resets); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// Each group holds what it last completed: staging was done on 2.0.0,
	// prod (active) and edge never finished it and keep the start version.
	hold := map[string]string{"staging": v2, "prod": v1, "edge": v1}
	for _, a := range s.agents {
		if v, update := Decide(a.ID, s.spec, s.status[a.group], ModeEnabled); v != hold[a.group] || update {
			t.Errorf("agent %s of %s told (%s, %v) right after the reset, want (%s, false)", a.ID, a.group, v, update, hold[a.group])
		}
	}
	// The new target waits for staging's next window, then rolls out.
	if !s.runUntil(mustTime(t, "2024-03-16T00:00:00Z"), s.allDone) {
		t.Fatalf("new target never done: %v", s.status)
	}
	if st := s.status["staging"]; st.StartedAt.In(mustLoc(t, "Europe/Berlin")).Hour() != 2 {
		t.Errorf("staging restarted at %s, not in its 02:00 window", st.StartedAt)
	}
	for _, a := range s.agents {
		if a.ActiveVersion != "2.0.1" {
			t.Errorf("agent %s on %s", a.ID, a.ActiveVersion)
		}
	}
}

func TestScenarioPauseResume(t *testing.T) {
	s := chainSim(t)
	mid := func() bool {
		st := s.status["prod"]
		return st.State == StateActive && st.Progress > 0.3 && st.Progress < 1
	}
	if !s.runUntil(mustTime(t, "2024-03-09T00:00:00Z"), mid) {
		t.Fatalf("prod never half way: %+v", s.status["prod"])
	}
	paused := map[string]GroupStatus{}
	for k, v := range s.status {
		paused[k] = v.Clone()
	}
	told := func() map[AgentID]bool {
		out := map[AgentID]bool{}
		for _, a := range s.agents {
			if _, u := Decide(a.ID, s.spec, s.status[a.group], s.cfg.Mode); u {
				out[a.ID] = true
			}
		}
		return out
	}
	toldBefore := told()

	s.cfg.Mode = ModePaused
	s.events, s.starts = nil, nil
	pauseEnd := s.now.Add(3 * time.Hour)
	s.runUntil(pauseEnd, func() bool { return false })
	for g, want := range paused {
		got := s.status[g]
		if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(GroupStatus{}, "Mode", "Waiting", "WaitingUntil")); diff != "" {
			t.Errorf("%s changed while paused (-before +after):\n%s", g, diff)
		}
		if got.Mode != ModePaused || !got.State.Terminal() && !strings.Contains(got.Waiting, "mode paused") {
			t.Errorf("%s: mode %q waiting %q, want the pause visible", g, got.Mode, got.Waiting)
		}
	}
	if len(s.events) != 0 || len(s.starts) != 0 {
		t.Errorf("while paused: events %v, update starts %d", s.events, len(s.starts))
	}

	s.cfg.Mode = ModeEnabled
	s.controller()
	if st := s.status["prod"]; st.State != StateActive || st.Progress < paused["prod"].Progress || st.Waiting != "" {
		t.Errorf("after resume prod: state %s progress %v (paused at %v) waiting %q", st.State, st.Progress, paused["prod"].Progress, st.Waiting)
	}
	toldAfter := told()
	for id := range toldBefore {
		if !toldAfter[id] {
			t.Errorf("agent %s was told to update before the pause, not after the resume", id)
		}
	}
	s.agentsAct()
	if !s.runUntil(mustTime(t, "2024-03-09T00:00:00Z"), s.allDone) {
		t.Fatalf("not done after resume: %v", s.status)
	}
}
