package rollout

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"time"
)

// The forecast answers "when would each group start and finish?" by running
// the controller's own state machine over simulated time: each step calls
// step (Next) for every group in evaluation order, exactly as the
// controller's Reconcile does, and then lets synthetic agents act on
// Decide's answer, as agentd does. No rule is written twice: windows,
// wait_hours, predecessors, canaries, min_healthy_time, backpressure,
// halts and alerts all come from Next and Decide.
//
// Its assumptions: every counted agent stays present and reachable, and
// every install succeeds, taking InstallTime from being told to update
// until the app runs the new version, then the group's min_healthy_time
// (agentd's own wait) before the agent reports it; no operator acts, except
// that a wait only a human ends (an approval) is assumed granted the moment
// it is asked (AssumeApproval); metric analysis checks pass whenever they
// are due (GroupStatus.PassingMeasurements); a paused or disabled rollout is assumed
// resumed now.

// WaitKind says what kind of wait holds an unstarted group (or, WaitHold,
// any group): the forecast reports it beside the group's waiting text.
type WaitKind string

// Wait kinds.
const (
	// WaitPredecessor: a group it depends on is not done.
	WaitPredecessor WaitKind = "predecessor"
	// WaitHours: wait_hours after the last predecessor finished.
	WaitHours WaitKind = "wait_hours"
	// WaitWindow: its start window is not open.
	WaitWindow WaitKind = "window"
	// WaitAgents: no agents are present.
	WaitAgents WaitKind = "agents"
	// WaitApproval: an approval only a human gives (see AssumeApproval).
	WaitApproval WaitKind = "approval"
	// WaitHold: nothing moves (a mode other than enabled, a config or spec
	// that is not valid, a group not in the config).
	WaitHold WaitKind = "hold"
	// WaitOther: a wait the forecast has no kind for.
	WaitOther WaitKind = "other"
)

// ForecastHorizon bounds a forecast's simulated time: twice the one-week
// chain limit (MaxChain), room for a first window up to a week away and a
// chain of up to a week after it. A rollout that is not done by then is
// reported as such, never simulated further.
const ForecastHorizon = 2 * MaxChain

// DefaultInstallTime is the install time a forecast assumes when given none.
const DefaultInstallTime = 2 * time.Minute

// maxForecastSteps is a safety net: steps jump from one instant where
// something happens to the next, so a two-week forecast of 100 groups takes
// a few thousand at most.
const maxForecastSteps = 100_000

// ApprovalHook is how the forecast meets a wait that only a human ends: it
// gets a group's config and its status after a step at now, and returns the
// status with the approval granted and true when the group waits for one
// (false, and st unchanged, otherwise).
type ApprovalHook func(gc GroupConfig, st GroupStatus, now time.Time) (GroupStatus, bool)

// AssumeApproval is the forecast's one place for manual approval gates: a
// group awaiting an approval its config asks for gets it at now, through
// the same Approve an operator's fleetctl approve uses, as if an operator
// approved at once; the next step's gate consumes it. Any other status is
// returned unchanged, with false.
func AssumeApproval(gc GroupConfig, st GroupStatus, now time.Time) (GroupStatus, bool) {
	if w := st.AwaitingApproval.Stage; w == "" || !gc.Approval.Has(w) {
		return st, false
	}
	approved, _, err := Approve(st, "", "forecast", "assumed at once by the forecast", now)
	if err != nil {
		return st, false
	}
	return approved, true
}

// ForecastInput is what a forecast starts from: the controller's inputs at
// Now (config, spec, every group's status, quarantine), the counts of each
// group's agents (fleet_stats), and how long one agent's install takes.
type ForecastInput struct {
	Config Config
	// Spec is the plan spec to forecast (its target may differ from the
	// one the statuses are for: they are reset as the controller would).
	Spec Spec
	// Groups are the current group statuses by name (Plan.Groups).
	Groups map[string]GroupStatus
	// Counts are each group's per-version counts of present agents.
	Counts     map[string]Counts
	Quarantine QuarantineList
	// Now is when the simulation starts.
	Now time.Time
	// InstallTime is how long an agent takes from being told to update
	// until the app runs the new version (DefaultInstallTime when not
	// positive); min_healthy_time comes on top.
	InstallTime time.Duration
	// Approve grants approvals (nil: AssumeApproval).
	Approve ApprovalHook
}

// Outcome is how a group ends in a forecast.
type Outcome string

// Outcomes.
const (
	// OutcomeDone: already done for the target when the forecast starts.
	OutcomeDone Outcome = "done"
	// OutcomeFinishes: becomes done within the forecast.
	OutcomeFinishes Outcome = "finishes"
	// OutcomeHalted: halted (already, or during the forecast); it waits
	// for an operator, and so do the groups after it.
	OutcomeHalted Outcome = "halted"
	// OutcomeRolledBack: rolled back by an operator; it stays so.
	OutcomeRolledBack Outcome = "rolledback"
	// OutcomeWaits: not done when the forecast ends; Reason says what it
	// waits for.
	OutcomeWaits Outcome = "waits"
)

// Forecast is the simulated schedule of a rollout. Times are UTC.
type Forecast struct {
	From          time.Time `json:"from"`
	Until         time.Time `json:"until"`
	StartVersion  string    `json:"start_version"`
	TargetVersion string    `json:"target_version"`
	InstallTime   Duration  `json:"install_time"`
	// Timezone is the config's zone, the one windows are read in.
	Timezone string `json:"timezone"`
	// FirstStart is when the first group started (or starts) for the
	// target; Done when the last one is done, zero when one never is
	// within the forecast; Span the time between the two.
	FirstStart time.Time `json:"first_start,omitzero"`
	Done       time.Time `json:"done,omitzero"`
	Span       Duration  `json:"span,omitempty"`
	// Groups in evaluation (dependency) order.
	Groups   []GroupForecast `json:"groups"`
	Warnings []string        `json:"warnings"`
	// Steps is how many instants were simulated.
	Steps int `json:"-"`
}

// GroupForecast is one group's simulated schedule.
type GroupForecast struct {
	Group    string  `json:"group"`
	Agents   int     `json:"agents"`
	Canaries int     `json:"canaries"`
	Outcome  Outcome `json:"outcome"`
	// Start is when it leaves unstarted, Active when its canaries are
	// healthy, Done when it is done (the stored times for a group that
	// did so before the forecast).
	Start    time.Time `json:"start,omitzero"`
	Active   time.Time `json:"active,omitzero"`
	Done     time.Time `json:"done,omitzero"`
	HaltedAt time.Time `json:"halted_at,omitzero"`
	// Reason is why it halted, or what it still waits for.
	Reason string `json:"reason,omitempty"`
	// Waits are what it waited for before it started, in order.
	Waits    []ForecastWait `json:"waits"`
	Warnings []string       `json:"warnings"`
	// Notes say how the forecast treats the group's rate and adaptive
	// in-flight bound (issue 28; absent without them).
	Notes []string `json:"notes,omitempty"`
	// SkipsCanaries, when set, says why the group starts with no canary
	// phase (small_group: GroupStatus.CanariesSkipped).
	SkipsCanaries string `json:"skips_canaries,omitempty"`

	// Issue 28, catch-all: on the config's catch-all group, Caught is how
	// many of Agents are hosts of groups not in the config that it rolls
	// out with its own (CaughtGroups, by name; CatchAllFollow picks them
	// as the controller does). Absent when none.
	Caught       int      `json:"caught,omitempty"`
	CaughtGroups []string `json:"caught_groups,omitempty"`
	// Windows are, under the time-based schedule, the windows the group
	// updated in, in order (a group done when a window closed with
	// agents off the target is active again in its next window).
	Windows []ForecastWindow `json:"windows,omitempty"`
}

// ForecastWindow is one window a group updated in under the time-based
// schedule: from when it started (or was active again) until the window
// closes (Closes; zero when nothing closes it: critical, fleetctl run),
// when it was done in it (Done, zero if never within the forecast), and
// how many of its agents were on the target then (OnTarget).
type ForecastWindow struct {
	From     time.Time `json:"from"`
	Closes   time.Time `json:"closes,omitzero"`
	Done     time.Time `json:"done,omitzero"`
	OnTarget int       `json:"on_target"`
}

// ForecastWait is one thing a group waited for: from From until Until
// (zero: it never ended within the forecast). Reason is the group's
// waiting text, or "approval assumed at …".
type ForecastWait struct {
	Kind   WaitKind  `json:"kind"`
	Reason string    `json:"reason"`
	From   time.Time `json:"from"`
	Until  time.Time `json:"until,omitzero"`
}

// fleet is one group's synthetic agents: views[i] is what the controller
// sees of agent i (handed to Next as is, which only reads it), ready[i]
// when the install it is making (views[i].UpdatingTo) completes, idle[i]
// that the install completed at this step, so the agent asks Decide again
// even if its group's status did not change.
type fleet struct {
	views []AgentView
	ready []time.Time
	idle  []bool
}

type forecaster struct {
	in       ForecastInput
	cfg      Config
	spec     Spec
	mode     Mode
	loc      *time.Location
	order    []string
	plan     Plan
	agents   map[string]*fleet
	results  map[string]*GroupForecast
	stepped  map[string]bool // the group has had a step
	approve  ApprovalHook
	fc       Forecast
	beyond   bool // stopped at the horizon with something still to happen
	capped   bool // stopped at maxForecastSteps
	lastStep time.Time
	// caught are the groups not in the config the catch-all follows.
	caught []string
}

// Simulate forecasts the rollout of in.Spec from in.Now (see ForecastInput
// and the assumptions at the top of this file). It is pure and
// deterministic.
func Simulate(in ForecastInput) Forecast {
	f := newForecaster(in)
	f.run()
	return f.result()
}

func newForecaster(in ForecastInput) *forecaster {
	in.Now = in.Now.UTC()
	if in.InstallTime <= 0 {
		in.InstallTime = DefaultInstallTime
	}
	f := &forecaster{in: in, cfg: in.Config, spec: in.Spec, approve: in.Approve,
		agents: map[string]*fleet{}, results: map[string]*GroupForecast{}, stepped: map[string]bool{}}
	if f.approve == nil {
		f.approve = AssumeApproval
	}
	f.fc = Forecast{From: in.Now, Until: in.Now.Add(ForecastHorizon), StartVersion: in.Spec.StartVersion,
		TargetVersion: in.Spec.TargetVersion, InstallTime: Duration(in.InstallTime), Timezone: in.Config.Timezone,
		Groups: []GroupForecast{}, Warnings: []string{}}
	if f.fc.Timezone == "" {
		f.fc.Timezone = DefaultTimezone
	}
	if err := f.cfg.Validate(); err != nil {
		f.warn("the config is not valid, so no group moves until it is fixed: %v", err)
	}
	if err := f.spec.Validate(); err != nil {
		f.warn("the plan spec is not valid, so no group moves until it is fixed: %v", err)
	}
	if m := EffectiveMode(f.cfg.Mode, f.spec.Mode); m != ModeEnabled {
		f.warn("the rollout is %s (config %s, plan %s): the forecast assumes it is resumed now", m, orEnabled(f.cfg.Mode), orEnabled(f.spec.Mode))
		f.cfg.Mode, f.spec.Mode = ModeEnabled, ModeEnabled
	}
	f.mode = EffectiveMode(f.cfg.Mode, f.spec.Mode)
	if q, ok := in.Quarantine.Lookup(f.spec.TargetVersion); ok {
		f.warn("target %s is quarantined (%s): every group that has not finished it halts", q.Version, q.Reason)
	}
	f.loc = time.UTC
	if loc, err := f.cfg.Location(); err == nil {
		f.loc = loc
	}
	f.order = f.cfg.EvalOrder()
	f.plan = Plan{Spec: f.spec, Groups: make(map[string]GroupStatus, len(in.Groups))}
	for g, st := range in.Groups {
		f.plan.Groups[g] = st.Clone()
	}
	f.catchAll()
	for _, g := range f.order {
		f.initGroup(g)
	}
	return f
}

// catchAll counts the agents of the groups not in the config that the
// catch-all group follows into its counts, as the controller's Next does
// (Input.Caught), and warns of those left out past MaxCaughtGroups.
func (f *forecaster) catchAll() {
	ca, ok := f.cfg.CatchAllGroup()
	if !ok {
		return
	}
	var present, following []string
	for g, c := range f.in.Counts {
		if c.Total() > 0 {
			present = append(present, g)
		}
	}
	for g, st := range f.in.Groups {
		if st.Follows != "" {
			following = append(following, g)
		}
	}
	follow, over := f.cfg.CatchAllFollow(present, following)
	if len(follow) > 0 {
		counts := maps.Clone(f.in.Counts[ca])
		if counts == nil {
			counts = Counts{}
		}
		for _, g := range follow {
			for v, c := range f.in.Counts[g] {
				vc := counts[v]
				vc.Count += c.Count
				vc.FailedCount += c.FailedCount
				vc.Updating += c.Updating
				vc.Unreachable += c.Unreachable
				vc.Blocked += c.Blocked
				if vc.LowestID == "" || c.LowestID != "" && c.LowestID < vc.LowestID {
					vc.LowestID = c.LowestID
				}
				counts[v] = vc
			}
		}
		in := maps.Clone(f.in.Counts)
		in[ca] = counts
		f.in.Counts = in
		f.caught = follow
	}
	if len(over) > 0 {
		f.warn("%d groups not in the config have agents that no group follows (catch-all group %s follows at most %d groups): they wait",
			len(over), ca, MaxCaughtGroups)
	}
}

func orEnabled(m Mode) Mode {
	if m == "" {
		return ModeEnabled
	}
	return m
}

func (f *forecaster) warn(format string, args ...any) {
	f.fc.Warnings = append(f.fc.Warnings, fmt.Sprintf(format, args...))
}

// initGroup makes the group's agents and its result as the stored status
// stands, with the warnings that do not need the simulation.
func (f *forecaster) initGroup(g string) {
	gc, _ := f.cfg.Group(g)
	st, has := f.plan.Groups[g]
	counts := f.in.Counts[g]
	target := f.spec.TargetVersion
	f.agents[g] = forecastAgents(counts, st, target)
	r := &GroupForecast{Group: g, Agents: counts.Total(), Waits: []ForecastWait{}, Warnings: []string{}}
	if ca, _ := f.cfg.CatchAllGroup(); g == ca && len(f.caught) > 0 {
		r.CaughtGroups = slices.Clone(f.caught)
		for _, cg := range f.caught {
			r.Caught += f.in.Counts[cg].Total()
		}
	}
	f.results[g] = r
	current := has && st.V != 0 && st.TargetVersion == target
	if current {
		r.Start, r.Canaries, r.SkipsCanaries = st.StartedAt, len(st.Canaries), st.CanariesSkipped
		switch {
		case st.State == StateDone:
			r.Outcome, r.Done = OutcomeDone, st.DoneAt
		case st.State == StateRolledBack:
			r.Outcome, r.Reason = OutcomeRolledBack, st.Reason
		case st.Halted:
			r.Outcome, r.HaltedAt, r.Reason = OutcomeHalted, st.HaltedAt, st.HaltReason
		}
		if st.State != StateUnstarted {
			return
		}
	}
	r.Notes = forecastNotes(gc)
	total := counts.Total()
	// Under time-based no group waits for another (timebased.go).
	after := ", and the groups after it wait for it"
	never := ", nor do the groups after it"
	if f.spec.Schedule == ScheduleTimeBased {
		after, never = "", ""
	}
	switch {
	case total == 0:
		r.Warnings = append(r.Warnings, "no agents counted: it does not start until some are present (fleetctl mark-done skips it)"+after)
	case total <= gc.SmallGroup:
		// It skips its canaries (SkipsCanaries says so when it starts).
	case total < gc.CanaryCount:
		r.Warnings = append(r.Warnings, fmt.Sprintf("%d agents, fewer than canary_count %d: they all update as canaries", total, gc.CanaryCount))
	}
	if f.spec.Schedule != ScheduleImmediate && !f.spec.Critical && gc.NextWindow(f.in.Now, f.loc).IsZero() {
		r.Warnings = append(r.Warnings, fmt.Sprintf("its window never opens (days %q, start_hour %d): it never starts%s", gc.Days, gc.StartHour, never))
	}
}

// forecastAgents makes a group's synthetic agents from its counts: the
// stored canaries of a group rolling out this target keep their ids (on
// the target when seen healthy), the others get ids spread evenly over
// the id space, those on the target lowest (the first a rollout reaches),
// then the other versions newest first, agents with no version last.
func forecastAgents(counts Counts, st GroupStatus, target string) *fleet {
	left := make(map[string]int, len(counts))
	for v, c := range counts {
		if c.Count > 0 {
			left[v] = c.Count
		}
	}
	versions := slices.SortedFunc(maps.Keys(left), func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == target || b == NoVersion:
			return -1
		case b == target || a == NoVersion:
			return 1
		}
		return CompareVersions(b, a)
	})
	take := func(onTarget bool) (string, bool) {
		for _, v := range versions {
			if left[v] > 0 && (v == target) == onTarget {
				left[v]--
				return v, true
			}
		}
		for _, v := range versions { // none of that kind: any agent
			if left[v] > 0 {
				left[v]--
				return v, true
			}
		}
		return "", false
	}
	var out []AgentView
	if st.TargetVersion == target && st.State.InProgress() {
		for _, c := range st.Canaries {
			v, ok := take(!c.HealthySince.IsZero())
			if !ok {
				break // more canaries than agents: the rest are missing
			}
			out = append(out, AgentView{ID: c.ID, ActiveVersion: agentVersion(v)})
		}
	}
	n := 0
	for _, v := range versions {
		n += left[v]
	}
	i := 0
	for _, v := range versions {
		for range left[v] {
			out = append(out, AgentView{ID: spreadID(i, n), ActiveVersion: agentVersion(v)})
			i++
		}
	}
	return &fleet{views: out, ready: make([]time.Time, len(out)), idle: make([]bool, len(out))}
}

func agentVersion(v string) string {
	if v == NoVersion {
		return ""
	}
	return v
}

// spreadID is the i-th of n ids spread evenly over the id space: its
// fraction is (2i+1)/2n, the middle of the i-th n-th.
func spreadID(i, n int) AgentID {
	var b [16]byte
	frac := float64(2*i+1) / float64(2*n)
	binary.BigEndian.PutUint64(b[0:8], uint64(frac*(1<<53))<<11)
	binary.BigEndian.PutUint64(b[8:16], uint64(i)) // unique whatever rounding does
	id, _ := NewAgentID(bytes.NewReader(b[:]))     // a 16-byte reader does not fail
	return id
}

func (f *forecaster) run() {
	t := f.in.Now
	for {
		f.pass(t)
		f.fc.Steps++
		f.lastStep = t
		if f.settled() {
			return
		}
		next, ok := f.nextInstant(t)
		switch {
		case !ok:
			return // nothing more happens by itself
		case next.After(f.fc.Until):
			f.beyond = true
			return
		case f.fc.Steps >= maxForecastSteps:
			f.capped = true
			return
		}
		t = next
	}
}

// pass is one controller pass at t: every group steps in evaluation order
// and its agents act. An approval granted runs the pass again at t, so the
// approved group moves at once.
func (f *forecaster) pass(t time.Time) {
	for range 2*len(f.order) + 1 {
		granted := false
		for _, g := range f.order {
			if f.stepGroup(g, t) {
				granted = true
			}
		}
		if !granted {
			return
		}
	}
}

// stepGroup is one step of group g at t, as the controller makes it, then
// its agents' turn. It reports whether an approval was granted.
func (f *forecaster) stepGroup(g string, t time.Time) bool {
	gc, _ := f.cfg.Group(g)
	ags := f.agents[g]
	views := ags.views
	for i := range views {
		if a := &views[i]; a.UpdatingTo != "" && !ags.ready[i].After(t) {
			a.ActiveVersion, a.UpdatingTo, ags.idle[i] = a.UpdatingTo, "", true
		}
	}
	next, events, kind := step(Input{
		Config:       f.cfg,
		Group:        g,
		Spec:         f.spec,
		Prev:         f.plan.Groups[g],
		Predecessors: f.plan.Predecessors(f.cfg, g),
		Counts:       CountAgents(views),
		Agents:       views,
		Now:          t,
		Quarantine:   f.in.Quarantine,
		// Metric analysis checks are assumed to pass whenever they are
		// due: the forecast is of a release whose metrics stay good.
		Measurements: f.plan.Groups[g].PassingMeasurements(t),
	})
	r := f.results[g]
	f.record(r, next, events, t)
	approved, granted := f.approve(gc, next, t)
	if granted {
		f.noteWait(r, WaitApproval, "approval assumed at "+t.In(f.loc).Format(forecastTimeLayout), t)
		f.closeWait(r, t)
		next = approved
	} else if next.State == StateUnstarted && !next.Halted && next.Waiting != "" {
		if kind == "" {
			kind = WaitOther
		}
		f.noteWait(r, kind, next.Waiting, t)
	}
	prev := f.plan.Groups[g]
	f.plan.Groups[g] = next
	f.act(g, gc, next, t, !f.stepped[g] || !reflect.DeepEqual(prev, next))
	f.stepped[g] = true
	return granted
}

const forecastTimeLayout = "Mon 2006-01-02 15:04 MST"

// record notes the group's transitions, halts and alerts.
func (f *forecaster) record(r *GroupForecast, st GroupStatus, events []Event, t time.Time) {
	halted := false
	for _, ev := range events {
		switch ev.Kind {
		case EventTransition:
			switch ev.To {
			case StateCanary:
				r.Start, r.Canaries, r.SkipsCanaries = ev.At, len(st.Canaries), st.CanariesSkipped
				f.closeWait(r, t)
				f.openWindow(r, st, ev.At)
			case StateActive:
				if ev.From == StateDone {
					// Time-based: its window reopened, it is not
					// done until it is done again.
					r.Outcome, r.Done = "", time.Time{}
					f.openWindow(r, st, ev.At)
					break
				}
				if ev.From == StateUnstarted { // a small group: no canary phase
					r.Start, r.Canaries, r.SkipsCanaries = ev.At, 0, st.CanariesSkipped
					f.closeWait(r, t)
					f.openWindow(r, st, ev.At)
				}
				r.Active = ev.At
			case StateDone:
				r.Done, r.Outcome = ev.At, OutcomeFinishes
				if n := len(r.Windows); n > 0 {
					r.Windows[n-1].Done, r.Windows[n-1].OnTarget = ev.At, f.onTarget(r.Group)
				}
			}
		case EventHalt:
			halted = true
			r.Outcome, r.HaltedAt, r.Reason = OutcomeHalted, ev.At, ev.Reason
		case EventAlert:
			if !halted {
				gc, _ := f.cfg.Group(r.Group)
				r.Warnings = append(r.Warnings, fmt.Sprintf("not done within alert_after %s: an alert is raised at %s (the rollout continues)",
					gc.AlertAfter, ev.At.In(f.loc).Format(forecastTimeLayout)))
			}
		}
	}
}

// openWindow records a window the group starts updating in at t under the
// time-based schedule.
func (f *forecaster) openWindow(r *GroupForecast, st GroupStatus, t time.Time) {
	if f.spec.Schedule == ScheduleTimeBased {
		r.Windows = append(r.Windows, ForecastWindow{From: t, Closes: st.WindowCloses})
	}
}

// onTarget counts the group's synthetic agents on the target.
func (f *forecaster) onTarget(g string) int {
	n := 0
	for _, a := range f.agents[g].views {
		if a.ActiveVersion == f.spec.TargetVersion {
			n++
		}
	}
	return n
}

// noteWait records that the group waits for kind at t: the wait it was
// already in goes on (with the latest text), or a new one begins.
func (f *forecaster) noteWait(r *GroupForecast, kind WaitKind, reason string, t time.Time) {
	if n := len(r.Waits); n > 0 && r.Waits[n-1].Until.IsZero() {
		if r.Waits[n-1].Kind == kind {
			r.Waits[n-1].Reason = reason
			return
		}
		r.Waits[n-1].Until = t
	}
	r.Waits = append(r.Waits, ForecastWait{Kind: kind, Reason: reason, From: t})
}

// closeWait ends the group's open wait at t.
func (f *forecaster) closeWait(r *GroupForecast, t time.Time) {
	if n := len(r.Waits); n > 0 && r.Waits[n-1].Until.IsZero() {
		r.Waits[n-1].Until = t
	}
}

// act lets each of the group's agents that is not installing do what
// Decide and Act tell it: an install started at t is ready install time
// plus min_healthy_time later. Decide's answer depends on the agent's id
// and the status only, so when the status did not change (changed false)
// only the agents that just completed an install can act differently:
// the others are not asked again (this keeps a long forecast fast).
func (f *forecaster) act(g string, gc GroupConfig, st GroupStatus, t time.Time, changed bool) {
	ready := t.Add(f.in.InstallTime + gc.MinHealthyTime.D())
	ags := f.agents[g]
	for i := range ags.views {
		a, idle := &ags.views[i], ags.idle[i]
		ags.idle[i] = false
		if a.UpdatingTo != "" || !changed && !idle {
			continue
		}
		v, update := Decide(a.ID, f.spec, st, f.mode)
		if Act(a.ActiveVersion, v, update) {
			a.UpdatingTo, a.StartTime, ags.ready[i] = v, t, ready
		}
	}
}

// settled reports whether no group will move again by itself.
func (f *forecaster) settled() bool {
	for _, g := range f.order {
		st := f.plan.Groups[g]
		if !st.State.Terminal() && !st.Halted {
			return false
		}
		if st.State == StateDone && st.Waiting != "" {
			return false // time-based: active again when its window reopens
		}
	}
	return true
}

// nextInstant is the first instant after t at which something can change:
// a wait ends (a window opens, wait_hours pass), an install completes or
// times out, a canary has been healthy for min_healthy_time (or missing
// for health_timeout), alert_after passes.
func (f *forecaster) nextInstant(t time.Time) (time.Time, bool) {
	var best time.Time
	consider := func(c time.Time) {
		if c.After(t) && (best.IsZero() || c.Before(best)) {
			best = c
		}
	}
	for _, g := range f.order {
		gc, _ := f.cfg.Group(g)
		st := f.plan.Groups[g]
		consider(st.WaitingUntil)
		if st.State.InProgress() && !st.Halted {
			consider(st.WindowCloses) // time-based: done when it closes
			for _, c := range st.Analysis {
				if !c.At.IsZero() {
					consider(c.At.Add(c.Interval.D())) // the check's next measurement
				}
			}
			if !st.Alerted && !st.StartedAt.IsZero() {
				consider(st.StartedAt.Add(gc.AlertAfter.D()))
			}
			if st.State == StateCanary {
				for _, c := range st.Canaries {
					if !c.HealthySince.IsZero() {
						consider(c.HealthySince.Add(gc.MinHealthyTime.D()))
					}
					if !c.MissingSince.IsZero() {
						consider(c.MissingSince.Add(gc.HealthTimeout.D()))
					}
				}
			}
		}
		if r := st.Rate; r != nil && gc.Rate != nil && st.State == StateActive && !st.Halted {
			consider(r.PeriodStart.Add(gc.Rate.Start.Per)) // the rate's next period
		}
		ags := f.agents[g]
		for i, a := range ags.views {
			if a.UpdatingTo == "" {
				continue
			}
			consider(ags.ready[i])
			if a.UpdatingTo == st.TargetVersion {
				start := a.StartTime
				if start.Before(st.FailuresSince) {
					start = st.FailuresSince
				}
				consider(start.Add(gc.EffectiveUpdateTimeout()))
			}
		}
	}
	return best, !best.IsZero()
}

// result fills in the groups that did not finish and the rollout's span.
func (f *forecaster) result() Forecast {
	fc := f.fc
	end := f.lastStep.In(f.loc).Format(forecastTimeLayout)
	allDone := true
	for _, g := range f.order {
		r := f.results[g]
		st := f.plan.Groups[g]
		if r.Outcome == "" {
			r.Outcome = OutcomeWaits
			switch {
			case st.State == StateUnstarted && st.Waiting != "":
				r.Reason = st.Waiting
			case st.Waiting != "":
				r.Reason = fmt.Sprintf("%s, not done: %s", st.State, st.Waiting)
			default:
				r.Reason = fmt.Sprintf("%s, not done", st.State)
			}
			switch {
			case f.beyond:
				r.Reason += fmt.Sprintf(" (when the forecast ends, %s after its start)", Duration(ForecastHorizon))
			case f.capped:
				r.Reason += fmt.Sprintf(" (when the forecast stopped after %d steps, at %s)", fc.Steps, end)
			}
		}
		if r.Outcome != OutcomeDone && r.Outcome != OutcomeFinishes {
			allDone = false
		}
		if !r.Start.IsZero() && (fc.FirstStart.IsZero() || r.Start.Before(fc.FirstStart)) {
			fc.FirstStart = r.Start
		}
		if !r.Done.IsZero() && r.Done.After(fc.Done) {
			fc.Done = r.Done
		}
	}
	if !fc.FirstStart.IsZero() {
		for _, g := range f.order {
			r := f.results[g]
			if r.Outcome == OutcomeFinishes && r.Done.Sub(fc.FirstStart) > MaxChain {
				r.Warnings = append(r.Warnings, fmt.Sprintf("done %s after the first group started, over the one-week limit (%s)",
					Duration(r.Done.Sub(fc.FirstStart).Truncate(time.Minute)), Duration(MaxChain)))
			}
		}
	}
	switch {
	case !allDone:
		fc.Done = time.Time{}
		if f.beyond {
			f.warnInto(&fc, "the rollout is not done %s after the forecast's start, over the one-week limit (%s): see the groups that wait", Duration(ForecastHorizon), Duration(MaxChain))
		}
		if f.capped {
			f.warnInto(&fc, "the forecast stopped after %d steps at %s: see the groups that wait", fc.Steps, end)
		}
	case !fc.FirstStart.IsZero():
		fc.Span = Duration(fc.Done.Sub(fc.FirstStart))
		if fc.Done.Sub(fc.FirstStart) > MaxChain {
			f.warnInto(&fc, "the rollout takes %s from its first group's start to its last group's done, longer than the one-week limit (%s)",
				Duration(fc.Span.D().Truncate(time.Minute)), Duration(MaxChain))
		}
	}
	for _, g := range f.order {
		fc.Groups = append(fc.Groups, *f.results[g])
	}
	return fc
}

func (f *forecaster) warnInto(fc *Forecast, format string, args ...any) {
	fc.Warnings = append(fc.Warnings, fmt.Sprintf(format, args...))
}

// forecastNotes say how the forecast treats gc's rate and adaptive
// in-flight bound: Next runs them as the controller does, on the
// forecast's assumptions (every install succeeds, heartbeats never lag).
func forecastNotes(gc GroupConfig) []string {
	var notes []string
	if rc := gc.Rate; rc != nil && rc.Start.N > 0 {
		n := fmt.Sprintf("rate %s: at most %d agents start per %s", rc, rc.Start.N, Duration(rc.Start.Per))
		if rc.Factor > 1 && rc.MaxAllowance() > rc.Start.N {
			n += fmt.Sprintf(", ×%s after each period with starts and no failure, up to %d: the forecast assumes no failure, so the ramp never resets",
				strconv.FormatFloat(rc.Factor, 'g', -1, 64), rc.MaxAllowance())
		}
		notes = append(notes, n+"; with max_in_flight, whichever is lower holds the group back")
	}
	if gc.AdaptiveInFlight {
		notes = append(notes, fmt.Sprintf("adaptive_in_flight: the bound starts at a tenth of max_in_flight %s (or canary_count %d if larger) and doubles as agents succeed; the forecast assumes none fails and heartbeats never lag, so it never shrinks: failures or lag would make the rollout slower than forecast",
			gc.MaxInFlight, gc.CanaryCount))
	}
	return notes
}
