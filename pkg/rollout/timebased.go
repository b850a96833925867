package rollout

import (
	"fmt"
	"time"
)

// The time-based schedule (plan spec schedule "time-based", Teleport's
// time-based strategy): every group updates during its own windows,
// independently of every other. Its rules, beside the regular schedule's:
//
//   - unstarted: a group starts when its window is open; depends_on,
//     wait_hours and the rule that nothing starts after a rolled-back or
//     halted group do not apply. Canaries, approvals and the "no agents"
//     wait do, as does fleetctl run (which starts it at once, with no
//     window to close it).
//   - canary and active: the group rolls out as under the regular
//     schedule (canaries, failure_threshold and halts, backpressure),
//     but only until its window closes (GroupStatus.WindowCloses): then
//     an active group is done ("active → done when the window closes")
//     whatever share of its agents reached the target, and no agent of a
//     group in canary or active starts a new update (UpdateAllowed; those
//     already updating finish). A group still in canary when its window
//     closes stays there, its canaries waiting for the next window.
//     alert_after does not fire while the window is closed (waiting for a
//     window is no delay).
//   - done: Decide tells no agent to update (a new install still gets the
//     target); when the group's window opens again after the one it was
//     done in and agents present are off the target, it is active again
//     ("done → active when the window reopens"), with a fresh initial
//     count, progress and failure count, and no second canary phase.
//   - halted and rolled-back groups do not move with windows: a halted
//     group waits for an operator, a rolled-back group stays so.
//   - critical: windows are ignored: groups start at once, nothing closes
//     them, and a done group tells everyone to update, as under the
//     regular schedule.

// timeBased reports whether the plan's schedule is time-based.
func (m *machine) timeBased() bool { return m.in.Spec.Schedule == ScheduleTimeBased }

// waitWindow waits for the group's window that opens at open.
func (m *machine) waitWindow(open time.Time) {
	m.waitFor(WaitWindow, "window: next opens "+open.In(m.loc).Format("Mon 2006-01-02 15:04 MST")+" ("+describeWindow(m.gc, m.loc)+")", open)
}

// timeBasedStart is unstarted's schedule rule under time-based: the
// reason to start now, or false (waiting for the window).
func (m *machine) timeBasedStart() (string, bool) {
	if m.in.Spec.Critical {
		return "critical: windows ignored", true
	}
	open := m.gc.NextWindow(m.now, m.loc)
	if open.IsZero() || open.After(m.now) {
		m.waitWindow(open)
		return "", false
	}
	return "schedule time-based, window open until " + m.gc.WindowEnd(open).In(m.loc).Format("Mon 15:04 MST"), true
}

// startWindowCloses is WindowCloses for a group starting now: the end of
// the window open now under time-based (now itself when none is, as for a
// start approved after the window closed: it updates in the next one);
// zero for a run requested by an operator, a critical plan or another
// schedule.
func (m *machine) startWindowCloses(runRequested bool) time.Time {
	if !m.timeBased() || m.in.Spec.Critical || runRequested {
		return time.Time{}
	}
	open := m.gc.NextWindow(m.now, m.loc)
	if open.IsZero() || open.After(m.now) {
		return m.now
	}
	return m.gc.WindowEnd(open)
}

// windowClosed reports whether the group's time-based window has closed.
func (m *machine) windowClosed() bool {
	return m.timeBased() && !m.in.Spec.Critical && !m.st.WindowCloses.IsZero() && !m.now.Before(m.st.WindowCloses)
}

// canaryWindow: a group in canary whose window closed keeps its canaries
// waiting (UpdateAllowed) until the next window opens, which it then
// takes as its own.
func (m *machine) canaryWindow() {
	if !m.windowClosed() {
		return
	}
	open := m.gc.NextWindow(m.now, m.loc)
	if !open.IsZero() && !open.After(m.now) {
		m.st.WindowCloses = m.gc.WindowEnd(open)
		return
	}
	m.waitFor(WaitWindow, "window closed: canaries that have not started wait for it to open "+open.In(m.loc).Format("Mon 2006-01-02 15:04 MST")+" ("+describeWindow(m.gc, m.loc)+")", open)
}

// closeWindow moves an active group whose time-based window closed to
// done (Teleport: active → done when the window closes). A halted group
// is not moved: it waits for an operator.
func (m *machine) closeWindow() bool {
	st := &m.st
	if !m.windowClosed() || st.Halted || st.State != StateActive {
		return false
	}
	target := st.TargetVersion
	present := m.in.Counts.Total()
	onTarget := m.in.Counts[target].Count - m.in.Counts[target].Unreachable
	st.DoneAt = m.now
	st.Frozen, st.Held, st.DoneHeld = "", "", ""
	st.Waiting, st.WaitingUntil = "", time.Time{} // a canary's wait for the window, if it just went active
	st.accept(target)
	reason := fmt.Sprintf("window closed at %s: %d of %d present agents on %s", st.WindowCloses.In(m.loc).Format("Mon 15:04 MST"), onTarget, present, target)
	if off := m.offTarget(); off > 0 {
		reason += fmt.Sprintf("; the other %d update when the window reopens (schedule time-based)", off)
	}
	m.transition(StateDone, reason)
	return true
}

// offTarget counts the group's reachable agents that are neither on the
// target nor rolled back from it: those a reopened window would update.
func (m *machine) offTarget() int {
	n := 0
	target := m.st.TargetVersion
	for _, a := range m.in.Agents {
		if !a.Unreachable && a.ActiveVersion != target && !rolledBackFrom(a, target) {
			n++
		}
	}
	return n
}

// reopen is done's rule under time-based (Teleport: done → active when the
// window reopens): while agents are off the target, a done group is active
// again once a window opens after the one it was done in, and says so
// while it waits for that window.
func (m *machine) reopen() bool {
	st := &m.st
	if !m.timeBased() || m.in.Spec.Critical {
		return false
	}
	off := m.offTarget()
	if off == 0 {
		return false
	}
	after := st.WindowCloses
	if after.IsZero() {
		// Done without a window of its own (fleetctl run or mark-done):
		// the window open when it was done does not count.
		after = st.DoneAt
		if after.IsZero() {
			after = st.Since
		}
		if o := m.gc.NextWindow(after, m.loc); !o.IsZero() && !o.After(after) {
			after = m.gc.WindowEnd(o)
		}
	}
	open := m.gc.NextWindow(later(m.now, after), m.loc)
	if open.IsZero() {
		return false
	}
	target := st.TargetVersion
	if open.After(m.now) {
		m.waitFor(WaitWindow, fmt.Sprintf("%d present agents not on %s: active again when the window opens %s (%s)",
			off, target, open.In(m.loc).Format("Mon 2006-01-02 15:04 MST"), describeWindow(m.gc, m.loc)), open)
		return false
	}
	total := m.in.Counts.Total()
	st.InitialCount, st.Progress, st.StartedAt, st.FailuresSince = total, 0, m.now, m.now
	st.Alerted, st.FailedCount, st.TimedOutCount, st.Frozen, st.DoneAt = false, 0, 0, "", time.Time{}
	st.Vanished, st.DoneHeld, st.Held = 0, "", ""
	st.WindowCloses = m.gc.WindowEnd(open)
	m.transition(StateActive, fmt.Sprintf("window reopened, open until %s: %d of %d present agents not on %s (schedule time-based)",
		st.WindowCloses.In(m.loc).Format("Mon 15:04 MST"), off, total, target))
	return true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// UpdateAllowed reports whether an agent that Decide told to update may
// start the update at now (its own clock). It is false only under the
// time-based schedule, for a group rolling out (canary or active) whose
// window has closed (GroupStatus.WindowCloses): the controller moves the
// group to done at its next step, and until then no agent starts an
// update outside the window. An update already under way is not stopped.
func UpdateAllowed(spec Spec, st GroupStatus, now time.Time) bool {
	if spec.Schedule != ScheduleTimeBased || spec.Critical || st.WindowCloses.IsZero() ||
		st.TargetVersion != spec.TargetVersion || !st.State.InProgress() {
		return true
	}
	return now.Before(st.WindowCloses)
}
