package rollout

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Input is everything one step of a group's state machine depends on. The
// controller fills it from the buckets and its inventory; Next reads nothing
// else, not even the clock.
type Input struct {
	Config Config
	Group  string
	Spec   Spec
	// Prev is the group's current status (zero when it has none yet).
	Prev GroupStatus
	// Predecessors holds the statuses of the groups above this one in the
	// depends_on chain: its dependencies and theirs, transitively
	// (Plan.Predecessors). A missing dependency counts as not done; a
	// group anywhere above that is rolled back or halted on the same
	// target keeps this one from starting, even when its own
	// dependencies are done (RFD 169: groups after a rolled-back group
	// never start).
	Predecessors map[string]GroupStatus
	// Counts are the group's per-version counts of present, established
	// agents: the numbers for initial count, presence and progress. An
	// unreachable agent (VersionCount.Unreachable) is present, for the
	// initial count, the freeze rule (which is about agents that expired)
	// and done (which waits for it), but never on the target for progress.
	Counts Counts
	// Agents are the same agents one by one: canaries are picked and judged,
	// failures counted, and the agents in flight and waiting found from them
	// (progress is capped so that at most the max_in_flight window is in
	// flight, see Progress). Unreachable agents are never picked as
	// canaries, a canary that is unreachable is missing, and they are
	// neither failed nor in flight nor waiting. An agent updating to the
	// target longer than update_timeout is timed out: failed, and out of
	// the window.
	Agents []AgentView
	Now    time.Time
	// Quarantine is fleet_plan/quarantine: a group whose target is
	// quarantined halts (see quarantine).
	Quarantine QuarantineList
	// Measurements are the results of the group's metric analysis checks
	// the controller took since the last step (see analyze); one already
	// judged is ignored.
	Measurements []Measurement

	// Issue 28, adaptive in flight: what the controller measures of its
	// own view of the agents, for adaptive_in_flight (adaptive.go).
	// HeartbeatLag is how far behind that view is: how old the heartbeats
	// it reads are when it reads them, plus the time its backlog of
	// heartbeats received and not yet read (HeartbeatBacklog of them)
	// takes to read; HeartbeatInterval is the agents' heartbeat interval,
	// the yardstick (0: lag is not measured).
	HeartbeatLag      time.Duration
	HeartbeatBacklog  int
	HeartbeatInterval time.Duration
	// Issue 28, catch-all: Caught are the agents of the groups that are
	// not in the config and follow this group, when it is the config's
	// catch-all (Config.CatchAllGroup; CatchAllFollow says which groups):
	// Next counts them in as the group's own (see withCaught). Ignored for
	// any other group.
	Caught []CaughtGroup
}

// maxSteps bounds the transitions one call may cascade through (unstarted →
// canary → active → done with no canaries and everyone already on target).
const maxSteps = 4

// Next returns the group's next status and the events to publish. It is
// pure and deterministic: the same input gives the same output. The
// controller writes the status only if it changed and publishes the events.
//
// Order of rules: a new target_version resets the group to unstarted,
// keeping its history (HoldVersion, RejectedVersions, see holdAfter); an
// invalid config or spec, an unconfigured group, or a mode other than
// enabled holds the group where it is (Waiting says why) with progress
// frozen; otherwise the state's rules run, cascading while states change.
func Next(in Input) (GroupStatus, []Event) {
	st, events, _ := step(in)
	return st, events
}

// step is Next, also saying what kind of wait holds the group (see
// WaitKind; "" when it does not wait): the forecast reads it.
func step(in Input) (GroupStatus, []Event, WaitKind) {
	m := machine{in: in, st: in.Prev.Clone(), now: in.Now}
	m.run()
	return m.st, m.events, m.waitKind
}

type machine struct {
	in     Input
	st     GroupStatus
	now    time.Time
	gc     GroupConfig
	loc    *time.Location
	events []Event
	// failed are the agents countFailures counted, for the sites a halt
	// names.
	failed []AgentView
	// waitKind is what the group waits for (waitFor), for the forecast.
	waitKind WaitKind
}

func (m *machine) emit(kind EventKind, from, to State, reason string) {
	m.events = append(m.events, newEvent(m.in.Group, kind, from, to, reason, m.now))
}

func (m *machine) transition(to State, reason string) {
	from := m.st.State
	m.st.State, m.st.Reason, m.st.Since = to, reason, m.now
	m.emit(EventTransition, from, to, reason)
}

func (m *machine) halt(reason string) { m.haltFor(reason, nil) }

// haltFor is halt because of agents: its halt and alert events name them,
// with why each failed (Event.Agents).
func (m *machine) haltFor(reason string, agents []AgentView) {
	// The halt is its own alert (the events below); Alerted stays
	// alert_after's, so a reset group still gets its alert_after alert
	// and "not done within alert_after" is never said of a halt.
	m.st.Halted, m.st.HaltReason, m.st.HaltedAt = true, reason, m.now
	m.st.AwaitingApproval = ApprovalWait{} // a halted group awaits an operator's reset, not an approval
	m.st.reject(m.st.TargetVersion)
	m.emit(EventHalt, m.st.State, m.st.State, reason)
	m.emit(EventAlert, m.st.State, m.st.State, "halted: "+reason)
	if len(agents) > 0 {
		about := eventAgents(agents)
		for i := len(m.events) - 2; i < len(m.events); i++ {
			m.events[i].Agents = about
		}
	}
}

func (m *machine) wait(why string, until time.Time) {
	m.st.Waiting, m.st.WaitingUntil = why, until
}

// waitFor is wait, recording the kind of wait for the forecast.
func (m *machine) waitFor(kind WaitKind, why string, until time.Time) {
	m.waitKind = kind
	m.wait(why, until)
}

func (m *machine) run() {
	in := m.in
	specErr := in.Spec.Validate()
	if m.st.Group == "" {
		m.st.Group = in.Group
	}
	if specErr == nil && (m.st.V == 0 || m.st.TargetVersion != in.Spec.TargetVersion || m.st.Group != in.Group || m.st.Follows != "") {
		from, old := m.st.State, m.st.TargetVersion
		reason := "new target_version " + in.Spec.TargetVersion
		if old != "" && old != in.Spec.TargetVersion {
			reason += " (was " + old + ")"
		}
		if f := m.st.Follows; f != "" && old == in.Spec.TargetVersion {
			// A status the controller copied from the catch-all group
			// while the group was not in the config: the group starts
			// its own rollout, keeping what its hosts completed.
			reason = "the group has its own rollout now (its hosts followed catch-all group " + f + " until now)"
		}
		m.st = newStatus(in.Group, in.Spec, m.now, reason)
		if in.Prev.V != 0 && in.Prev.Group == in.Group {
			// The group's history outlives the target: it holds what it
			// last completed, and never a version it rejected.
			m.st.HoldVersion = holdAfter(in.Prev)
			m.st.RejectedVersions = slices.Clone(in.Prev.RejectedVersions)
		}
		m.emit(EventTransition, from, StateUnstarted, reason)
	}
	if m.st.V == 0 {
		// No status and no usable spec: start an empty unstarted record so
		// that what the controller writes is still a well-formed status.
		m.st = GroupStatus{V: SchemaVersion, Group: in.Group, State: StateUnstarted, Reason: "waiting for a valid plan spec", Since: m.now}
	}
	m.st.Waiting, m.st.WaitingUntil = "", time.Time{}
	if specErr != nil {
		m.hold(fmt.Sprintf("plan spec is invalid, nothing moves until it is fixed: %v", specErr))
		return
	}
	m.st.StartVersion = in.Spec.StartVersion
	m.st.Mode = EffectiveMode(in.Config.Mode, in.Spec.Mode)
	if err := in.Config.Validate(); err != nil {
		m.hold(fmt.Sprintf("config is invalid, nothing moves until it is fixed: %v", err))
		return
	}
	gc, ok := in.Config.Group(in.Group)
	if !ok {
		m.hold(fmt.Sprintf("group %q is not in the config", in.Group))
		return
	}
	m.gc = gc
	m.withCaught()
	m.loc, _ = in.Config.Location() // valid: Validate checked it
	m.st.JitterSeconds, m.st.HealthTimeout, m.st.MinHealthyTime = gc.JitterSeconds, gc.HealthTimeout, gc.MinHealthyTime
	m.quarantine()
	if m.st.Mode != ModeEnabled {
		m.hold("mode " + string(m.st.Mode) + ": the rollout is frozen where it stands")
		return
	}
	for range maxSteps {
		var moved bool
		switch m.st.State {
		case StateUnstarted:
			moved = m.unstarted()
		case StateCanary:
			moved = m.canary()
		case StateActive:
			moved = m.active()
		case StateDone:
			moved = m.reopen()
		}
		if !moved {
			return
		}
	}
}

// hold keeps the group where it is, saying why unless it is finished.
func (m *machine) hold(why string) {
	if !m.st.State.Terminal() {
		m.waitFor(WaitHold, truncate(why, 300), time.Time{})
	}
}

// quarantine halts a group that has not finished rolling out a quarantined
// target (unstarted, canary or active), whatever the mode: the halt rejects
// the target, so the group never holds it and Decide never offers it to new
// or unstarted hosts. A group that is done or rolled back is left alone.
func (m *machine) quarantine() {
	q, ok := m.in.Quarantine.Lookup(m.st.TargetVersion)
	if !ok || m.st.Halted {
		return
	}
	switch m.st.State {
	case StateUnstarted, StateCanary, StateActive:
		m.halt(q.HaltReason(m.in.Group))
	}
}

func (m *machine) unstarted() bool {
	in, st, gc := m.in, &m.st, m.gc
	if st.Halted {
		// Halted before it started (its target is quarantined): it waits
		// for an operator (fleetctl reset or run) like any halted group.
		return false
	}
	reason := "window open"
	switch {
	case st.RunRequested:
		reason = "run requested by an operator"
	case in.Spec.Schedule == ScheduleImmediate:
		reason = "schedule immediate"
	case m.awaiting(ApprovalStart):
		// Its schedule let it start when the wait began: a window
		// that closed meanwhile does not send it back.
		reason = ""
	case m.timeBased():
		// No depends_on, wait_hours or rolled-back ancestor: only its
		// own window (timebased.go).
		var ok bool
		if reason, ok = m.timeBasedStart(); !ok {
			return false
		}
	default:
		var lastDone time.Time
		for _, dep := range in.Config.Dependencies(in.Group) {
			p, ok := in.Predecessors[dep]
			switch {
			case !ok || p.V == 0:
				m.waitFor(WaitPredecessor, fmt.Sprintf("waiting for group %q to finish (it has no status yet)", dep), time.Time{})
				return false
			case p.TargetVersion != in.Spec.TargetVersion:
				m.waitFor(WaitPredecessor, fmt.Sprintf("waiting for group %q to finish (its status is for %s)", dep, versionOrNone(p.TargetVersion)), time.Time{})
				return false
			case p.State != StateDone:
				what := string(p.State)
				if p.Halted {
					what += ", halted"
				}
				m.waitFor(WaitPredecessor, fmt.Sprintf("waiting for group %q to finish (%s)", dep, what), time.Time{})
				return false
			}
			if p.DoneAt.After(lastDone) {
				lastDone = p.DoneAt
			}
		}
		if why := m.stoppedAbove(); why != "" {
			m.waitFor(WaitPredecessor, why, time.Time{})
			return false
		}
		if gc.WaitHours > 0 && !lastDone.IsZero() {
			until := lastDone.Add(time.Duration(gc.WaitHours) * time.Hour)
			if m.now.Before(until) {
				m.waitFor(WaitHours, fmt.Sprintf("wait_hours: %dh after the last predecessor finished", gc.WaitHours), until)
				return false
			}
		}
		if in.Spec.Critical {
			reason = "critical: windows ignored"
		} else if open := gc.NextWindow(m.now, m.loc); open.After(m.now) || open.IsZero() {
			m.waitWindow(open)
			return false
		}
	}
	total := in.Counts.Total()
	if total == 0 {
		m.waitFor(WaitAgents, "no agents present: the group starts when its agents are (or mark it done to skip it)", time.Time{})
		return false
	}
	approved, ok := m.gate(ApprovalStart)
	if !ok {
		return false
	}
	reason = joinReason(reason, approved)
	if st.SkipCanaries != "" {
		return m.startWithoutCanaries(total, reason)
	}
	skip := m.smallGroup(total)
	var ids []AgentID
	if skip == "" {
		ids = SelectCanaries(in.Agents, gc.CanaryCount, in.Spec.TargetVersion)
	}
	st.Canaries = nil
	hosts := make(map[AgentID]string, len(ids))
	for _, a := range in.Agents {
		if slices.Contains(ids, a.ID) {
			hosts[a.ID] = truncate(a.Hostname, maxNameHost)
		}
	}
	for _, id := range ids {
		st.Canaries = append(st.Canaries, Canary{ID: id, Hostname: hosts[id]})
	}
	m.begin(total)
	st.CanariesSkipped = skip
	if skip != "" {
		m.startSmall(reason, total, skip)
		return true
	}
	m.transition(StateCanary, fmt.Sprintf("%s: starting with %d agents, %d canaries", reason, total, len(ids)))
	return true
}

// begin sets what a group that starts now with total agents present
// starts from, whether with canaries or without (startWithoutCanaries).
func (m *machine) begin(total int) {
	st := &m.st
	st.InitialCount, st.Progress, st.StartedAt, st.FailuresSince = total, 0, m.now, m.now
	st.WindowCloses = m.startWindowCloses(st.RunRequested)
	st.RunRequested, st.Halted, st.HaltReason, st.HaltedAt = false, false, "", time.Time{}
	st.Alerted, st.FailedCount, st.Frozen, st.DoneAt = false, 0, "", time.Time{}
	st.Vanished, st.DoneHeld = 0, ""
	st.Rate, st.Adaptive = nil, nil // begin again when it is active
	st.CanariesSkipped, st.ReplacedCanaries = "", nil
}

// stoppedAbove says why the group may not start although its own
// dependencies are done: a group further up its depends_on chain is rolled
// back or halted on the same target (dev rolled back while staging
// finished must not let prod start). "" when none is. A status for
// another target is the controller's to reset first, and says nothing
// about this one.
func (m *machine) stoppedAbove() string {
	direct := m.in.Config.Dependencies(m.in.Group)
	for _, a := range m.in.Config.Ancestors(m.in.Group) {
		p, ok := m.in.Predecessors[a]
		if !ok || slices.Contains(direct, a) || p.TargetVersion != m.in.Spec.TargetVersion {
			continue
		}
		what := ""
		switch {
		case p.State == StateRolledBack:
			what = "rolled back"
		case p.Halted:
			what = string(p.State) + ", halted"
		default:
			continue
		}
		return fmt.Sprintf("waiting for group %q, above it in depends_on (%s), to be done: it is %s, and no group after a rolled-back or halted group starts (fleetctl run --group %s --force --reason TEXT starts this one anyway)",
			a, m.chain(a), what, m.in.Group)
	}
	return ""
}

// chain is the depends_on path from ancestor down to the group, as
// "dev → staging → prod" (the first one found through Dependencies).
func (m *machine) chain(ancestor string) string {
	cfg := m.in.Config
	var walk func(g string, seen map[string]bool) []string
	walk = func(g string, seen map[string]bool) []string {
		if g == ancestor {
			return []string{g}
		}
		if seen[g] {
			return nil
		}
		seen[g] = true
		for _, d := range cfg.Dependencies(g) {
			if p := walk(d, seen); p != nil {
				return append(p, g)
			}
		}
		return nil
	}
	path := walk(m.in.Group, map[string]bool{})
	if path == nil {
		return ancestor + " → … → " + m.in.Group
	}
	return strings.Join(path, " → ")
}

// countFailures counts the agents failing the target since FailuresSince
// (see failedTarget) and those timed out (see timedOut), records the counts
// and returns the lowest-id one.
func (m *machine) countFailures() AgentView {
	st := &m.st
	n, timedOutN := 0, 0
	var first AgentView
	m.failed = m.failed[:0]
	for _, a := range m.in.Agents {
		failed := failedTarget(a, st.TargetVersion, st.FailuresSince)
		if !failed && m.timedOut(a) {
			failed = true
			timedOutN++
		}
		if failed {
			if n == 0 || a.ID < first.ID {
				first = a
			}
			n++
			m.failed = append(m.failed, a)
		}
	}
	st.FailedCount, st.TimedOutCount = n, timedOutN
	return first
}

// timedOut is timedOut with the group's target, start and update_timeout.
func (m *machine) timedOut(a AgentView) bool {
	return timedOut(a, m.st.TargetVersion, m.st.FailuresSince, m.gc.EffectiveUpdateTimeout(), m.now)
}

// overThreshold halts the group when its failures exceed failure_threshold
// of the initial count, or at once when an agent got a bad artifact.
func (m *machine) overThreshold(first AgentView) bool {
	st := &m.st
	var bad []AgentView
	for _, a := range m.in.Agents {
		if badArtifact(a, st.TargetVersion, st.FailuresSince) {
			bad = append(bad, a)
		}
	}
	if len(bad) > 0 {
		a := bad[0]
		m.haltFor(fmt.Sprintf("the release site served a bad artifact of %s to %s%s: %s; every host would get the same bytes, so the group halts at once (fix the release, then fleetctl reset --group %s --force --reason TEXT)",
			st.TargetVersion, a.Name(), describeSites(bad), describeFailure(a, st.TargetVersion), st.Group), bad)
		return true
	}
	limit := m.gc.FailureThreshold.Of(st.InitialCount)
	if float64(st.FailedCount) <= limit {
		return false
	}
	// The event names the first (lowest id) and the next failures.
	about := []AgentView{first}
	for _, a := range m.failed {
		if a.ID != first.ID && len(about) < MaxEventAgents {
			about = append(about, a)
		}
	}
	m.haltFor(fmt.Sprintf("%d agents failed %s%s, more than failure_threshold %s of %d (%s); first: %s %s",
		st.FailedCount, st.TargetVersion, describeSites(m.failed), m.gc.FailureThreshold, st.InitialCount, trimFloat(limit), first.Name(), m.describeFailure(first)), about)
	return true
}

// describeFailure says why a, which countFailures counted, failed.
func (m *machine) describeFailure(a AgentView) string {
	if !failedTarget(a, m.st.TargetVersion, m.st.FailuresSince) && m.timedOut(a) {
		return describeTimeout(a, m.gc)
	}
	return describeFailure(a, m.st.TargetVersion)
}

func (m *machine) alertAfter() {
	st := &m.st
	if st.Alerted || st.Halted || st.StartedAt.IsZero() {
		return // one alert per cause: a halted group has had its halt's
	}
	if m.windowClosed() {
		return // time-based: waiting for the window is no delay (timebased.go)
	}
	if elapsed, took := m.alertElapsed(); elapsed >= m.gc.AlertAfter.D() {
		st.Alerted = true
		m.emit(EventAlert, st.State, st.State, fmt.Sprintf("%s (alert_after %s); the rollout continues", took, m.gc.AlertAfter))
	}
}

func (m *machine) canary() bool {
	m.canaryWindow()
	m.alertAfter()
	m.countVanished()
	first := m.countFailures()
	st := &m.st
	if st.Halted {
		return false
	}
	// A failed canary is the more useful reason, so judge canaries first.
	all := m.canaryAgents()
	m.noteReported(all)
	notReplaced := m.replaceLostCanaries(all)
	views := reachableCanaries(all)
	v := judgeCanaries(st, views, m.gc, m.now)
	if v.halt != "" {
		if why := notReplaced[v.agent]; why != "" {
			v.halt += "; " + why
		}
		var about []AgentView
		for _, a := range m.in.Agents {
			if a.ID == v.agent {
				v.halt += describeSites([]AgentView{a})
				about = append(about, a)
				break
			}
		}
		m.haltFor(v.halt, about)
		return false
	}
	if m.overThreshold(first) {
		return false
	}
	an := m.analyze()
	if an.halted {
		return false
	}
	inFlight, blockedInFlight := 0, []AgentView(nil)
	for _, a := range views {
		if a.ActiveVersion != st.TargetVersion {
			inFlight++
			if blocked(a) {
				blockedInFlight = append(blockedInFlight, a)
			}
		}
	}
	m.countBlocked()
	if m.infraHold(inFlight, blockedInFlight, len(st.Canaries), "canaries") || !v.healthy || !an.promote {
		return false
	}
	approved, ok := m.gate(ApprovalAfterCanary)
	if !ok {
		return false
	}
	reason := "no canaries"
	if len(st.Canaries) > 0 {
		reason = fmt.Sprintf("all %d canaries healthy on %s for min_healthy_time %s", len(st.Canaries), st.TargetVersion, m.gc.MinHealthyTime)
	}
	reason += analysisPassed(st.Analysis, len(st.Canaries))
	m.transition(StateActive, joinReason(reason, approved))
	return true
}

func (m *machine) active() bool {
	m.alertAfter()
	m.countVanished()
	first := m.countFailures()
	if m.st.Halted || m.overThreshold(first) {
		return false
	}
	an := m.analyze()
	if an.halted {
		return false
	}
	st, in := &m.st, m.in
	target := st.TargetVersion
	settled, pendingCanaries, released := 0, 0, 0
	// Sized for every agent at once: a group of a third of a million
	// hosts would grow it twenty times a pass.
	pending := make([]float64, 0, len(in.Agents))
	// Pending agents told to update, and pending canaries: how many, and
	// those of them blocked on infrastructure (only those are looked at
	// one by one: a window of tens of thousands is not copied every pass).
	inFlight, blockedInFlight := 0, []AgentView(nil)
	for _, a := range in.Agents {
		switch {
		case a.Unreachable:
			// Neither in flight nor waiting: it may be updating through
			// /v1/find while cut off, or gone. It counts again from its
			// next heartbeat.
			if a.ID.Fraction() < st.Progress {
				released++
			}
		case a.ActiveVersion == target:
		case rolledBackFrom(a, target):
			settled++
		case m.timedOut(a):
			// Failed (countFailures), and out of the window: its place
			// goes to the next agent.
			if a.ID.Fraction() < st.Progress || st.IsCanary(a.ID) {
				released++
			}
		case st.IsCanary(a.ID):
			pendingCanaries++
			inFlight++
			if blocked(a) {
				blockedInFlight = append(blockedInFlight, a)
			}
		default:
			f := a.ID.Fraction()
			pending = append(pending, f)
			if f < st.Progress {
				inFlight++
				if blocked(a) {
					blockedInFlight = append(blockedInFlight, a)
				}
			}
		}
	}
	slices.Sort(pending)
	m.countBlocked()
	held := m.infraHold(inFlight, blockedInFlight, InFlightWindow(m.gc.MaxInFlight, st.InitialCount), "agents in flight")
	// Unreachable agents are present (the freeze rule is about agents that
	// expired) but not on the target: what they run now is not known.
	present, onTarget := in.Counts.Total(), in.Counts[target].Count-in.Counts[target].Unreachable
	// Issue 28: the rate's starts left in this period, and the adaptive
	// bound (rate.go, adaptive.go).
	startsLeft, limited := m.rateStep()
	bound := m.adaptiveStep(onTarget)
	p, frozen := Progress(ProgressInput{
		Strategy:        in.Spec.Strategy,
		MaxInFlight:     m.gc.MaxInFlight,
		Initial:         st.InitialCount,
		Present:         present,
		OnTarget:        onTarget,
		Pending:         pending,
		PendingCanaries: pendingCanaries,
		Released:        released,
		Blocked:         len(blockedInFlight),
		Prev:            st.Progress,
		Bound:           bound,
		LimitStarts:     limited,
		MaxStarts:       startsLeft,
	})
	if !held && !an.hold {
		m.rateCount(pending, st.Progress, p)
		st.Progress = p
	}
	switch {
	case frozen && st.Frozen == "":
		floor := float64(st.InitialCount) - m.gc.MaxInFlight.Of(st.InitialCount)
		st.Frozen = fmt.Sprintf("fewer agents present than %s (initial %d minus max_in_flight %s): progress held until they return",
			trimFloat(floor), st.InitialCount, m.gc.MaxInFlight)
		m.emit(EventFrozen, st.State, st.State, st.Frozen)
	case !frozen && st.Frozen != "":
		st.Frozen = ""
		m.emit(EventUnfrozen, st.State, st.State, "enough agents present again: progress moves")
	}
	if frozen || held || an.hold || p < 1 || onTarget == 0 || onTarget+settled < present {
		m.clearDoneHeld()
		return m.closeWindow()
	}
	if m.tooManyVanished() {
		return m.closeWindow()
	}
	st.Progress, st.DoneAt = 1, m.now
	st.accept(target)
	reason := fmt.Sprintf("all %d present agents on %s", present, target)
	if settled > 0 {
		reason = fmt.Sprintf("%d of %d present agents on %s, %d rolled back from it", onTarget, present, target, settled)
	}
	if st.Vanished > 0 {
		reason += fmt.Sprintf("; %d of the %d initial agents vanished (vanished_limit %s)", st.Vanished, st.InitialCount, m.gc.VanishedLimit)
	}
	m.transition(StateDone, reason)
	return true
}

// countVanished records how many of the group's initial agents are gone
// (GroupStatus.Vanished).
func (m *machine) countVanished() {
	m.st.Vanished = max(m.st.InitialCount-m.in.Counts.Total(), 0)
}

// tooManyVanished keeps a group whose present agents all finished from
// being done while more of its initial agents vanished than vanished_limit
// allows: 85 of 100 on the target with 15 gone is not a finished rollout.
// It says so in DoneHeld, and the first step that holds
// emits a vanished event and an alert; the hold ends when enough return
// (or an operator marks the group done).
func (m *machine) tooManyVanished() bool {
	st := &m.st
	limit := m.gc.VanishedLimit.Of(st.InitialCount)
	if float64(st.Vanished) <= limit {
		m.clearDoneHeld()
		return false
	}
	// The smallest whole limit that would let the group be done now.
	enough := int(math.Ceil(float64(st.Vanished)*100/float64(st.InitialCount) - 1e-9))
	text := fmt.Sprintf("%d of the %d initial agents vanished since the group started, more than vanished_limit %s (%s): not done until they return (or fleetctl config set --group %s --vanished-limit %d%%, or fleetctl mark-done --group %s)",
		st.Vanished, st.InitialCount, m.gc.VanishedLimit, trimFloat(limit), st.Group, enough, st.Group)
	if st.DoneHeld == "" {
		m.emit(EventVanished, st.State, st.State, text)
		m.emit(EventAlert, st.State, st.State, "not done: "+text)
	}
	st.DoneHeld = text
	return true
}

// clearDoneHeld ends a wait for vanished agents: they returned, or the
// group has other agents to wait for first.
func (m *machine) clearDoneHeld() {
	m.st.DoneHeld = ""
}

// countBlocked records how many of the group's reachable agents not on
// the target are blocked on infrastructure (retrying by themselves).
func (m *machine) countBlocked() {
	n := 0
	for _, a := range m.in.Agents {
		if !a.Unreachable && a.ActiveVersion != m.st.TargetVersion && blocked(a) {
			n++
		}
	}
	m.st.Blocked = n
}

// infraHold holds the group's progress while more than infrastructure_hold
// of the inFlight agents (the agents told to update that have not got
// there: the agents in flight, or the canaries), counted against at least
// capacity (the max_in_flight window, or the canary count), are blocked on
// infrastructure (blockedInFlight, those of them that are), and
// says so in Held with the count and the causes. Nothing fails and
// nothing halts: the agents retry, and the hold ends by itself when fewer
// are blocked. The first step held and the first step after emit an event.
func (m *machine) infraHold(inFlight int, blockedInFlight []AgentView, capacity int, what string) bool {
	st := &m.st
	n, causes := len(blockedInFlight), map[string]int{}
	for _, a := range blockedInFlight {
		causes[causeOf(a)]++
	}
	// The share is of the window (max_in_flight, or the canaries), not
	// of what is in flight right now: one blocked host left alone in a
	// window whose others finished must not stop the group for good.
	held := n > 0 && float64(n) > m.gc.InfrastructureHold.Of(max(inFlight, capacity))
	switch {
	case held:
		text := fmt.Sprintf("%d of %d %s blocked on infrastructure (%s), more than infrastructure_hold %s: progress held, nothing counted as failed; moves on when they recover",
			n, inFlight, what, describeCauses(causes), m.gc.InfrastructureHold)
		if st.Held == "" {
			m.emit(EventHeld, st.State, st.State, text)
		}
		st.Held = text
	case st.Held != "":
		st.Held = ""
		m.emit(EventResumed, st.State, st.State, "the agents blocked on infrastructure recovered: progress moves again")
	}
	return held
}

// causeOf is a blocked agent's cause for people: its error_cause, or its
// error cut short when it sent none.
func causeOf(a AgentView) string {
	if a.ErrorCause != "" {
		return truncate(a.ErrorCause, 64)
	}
	return truncate(a.Error, 64)
}

// describeCauses lists causes most frequent first (ties by name), at most
// three, as "disk full: 3, download: HTTP 503: 1, 2 more".
func describeCauses(causes map[string]int) string {
	names := make([]string, 0, len(causes))
	for c := range causes {
		names = append(names, c)
	}
	slices.SortFunc(names, func(a, b string) int {
		if causes[a] != causes[b] {
			return causes[b] - causes[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for i, c := range names {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("%d more", len(names)-3))
			break
		}
		parts = append(parts, fmt.Sprintf("%s: %d", c, causes[c]))
	}
	return strings.Join(parts, ", ")
}

func trimFloat(f float64) string {
	if f == math.Trunc(f) {
		return fmt.Sprintf("%d", int64(f))
	}
	return fmt.Sprintf("%.2f", f)
}
