package rollout

import (
	"fmt"
	"slices"
	"time"
)

// Operator actions (fleetctl rollback|reset|run|mark-done) are pure functions
// on a group status: fleetctl reads the status with its revision, applies
// one, and writes it back with that revision, publishing the event. Each
// records state, reason and since like any transition; note is the
// operator's own words ("" for none). Pause and resume are not actions on a
// group: they are the config or plan mode, and Next freezes every group while
// the effective mode is not enabled and carries on from the same progress
// when it is again.

func operatorReason(action, note string) string {
	if note == "" {
		return "operator " + action
	}
	return "operator " + action + ": " + truncate(note, 200)
}

func (st *GroupStatus) set(to State, reason string, now time.Time) Event {
	from := st.State
	st.State, st.Reason, st.Since = to, reason, now
	return newEvent(st.Group, EventTransition, from, to, reason, now)
}

func (st *GroupStatus) clearHalt() {
	st.Halted, st.HaltReason, st.HaltedAt = false, "", time.Time{}
}

// settle clears a halt and everything a running group may be waiting on:
// the operator has decided where the group ends up.
func (st *GroupStatus) settle() {
	st.clearHalt()
	st.RunRequested, st.Waiting, st.WaitingUntil, st.Frozen, st.DoneHeld = false, "", time.Time{}, "", ""
	st.AwaitingApproval = ApprovalWait{}
	if st.State == StateUnstarted {
		st.SkipCanaries = "" // a request to start without canaries, dropped
	}
}

// restart is st back in unstarted with a run requested, as new for the
// same versions (fresh canaries and initial count at the next step) but
// with its mode and health settings kept.
func restart(st GroupStatus, reason string, now time.Time) (GroupStatus, Event) {
	restarted := newStatus(st.Group, Spec{StartVersion: st.StartVersion, TargetVersion: st.TargetVersion}, now, "")
	restarted.Mode, restarted.JitterSeconds = st.Mode, st.JitterSeconds
	restarted.HealthTimeout, restarted.MinHealthyTime = st.HealthTimeout, st.MinHealthyTime
	restarted.RunRequested = true
	restarted.HoldVersion, restarted.RejectedVersions = st.HoldVersion, slices.Clone(st.RejectedVersions)
	ev := restarted.set(StateUnstarted, reason, now)
	ev.From = st.State
	return restarted, ev
}

func badAction(action string, st GroupStatus, fix string) error {
	return fmt.Errorf("%w: %s group %q: it is %s; %s", ErrBadAction, action, st.Group, st.State, fix)
}

// Rollback sends a group that started (canary, active or done) to
// rolledback: every agent of the group is told to go back to the version
// the group holds (GroupStatus.Hold). A halt is cleared: the operator has
// decided. The target joins the group's RejectedVersions.
func Rollback(st GroupStatus, note string, now time.Time) (GroupStatus, Event, error) {
	switch st.State {
	case StateCanary, StateActive, StateDone:
	default:
		return st, Event{}, badAction("rollback", st, "only a group in canary, active or done can be rolled back")
	}
	st = st.Clone()
	st.settle()
	st.reject(st.TargetVersion)
	return st, st.set(StateRolledBack, operatorReason("rollback", note), now), nil
}

// Reset clears a group's halt and forgives the failures seen so far, so that
// only failures of update attempts that begin after now count towards
// failure_threshold. An active group keeps its progress. A group in canary
// restarts its canary phase: it goes back to unstarted with a run requested,
// so the next step starts it at once with canaries picked afresh (those that
// rolled back are no longer candidates) and a new initial count. An
// unstarted group halted before it started (its target was quarantined)
// loses the halt and starts when its turn comes. A reset drops the
// approvals given (fleetctl approve): a group that asks for them asks
// again.
func Reset(st GroupStatus, note string, now time.Time) (GroupStatus, Event, error) {
	reason := operatorReason("reset", note)
	st = st.Clone()
	switch st.State {
	case StateCanary:
		restarted, ev := restart(st, reason+" (canary phase restarts)", now)
		return restarted, ev, nil
	case StateActive:
		st.clearHalt()
		st.clearApprovals()
		st.FailuresSince, st.FailedCount, st.TimedOutCount = now, 0, 0
		st.Reason, st.Since = reason, now
		return st, newEvent(st.Group, EventOperator, st.State, st.State, reason, now), nil
	case StateUnstarted:
		if st.Halted {
			// Halted before it started (a quarantined target): the
			// group starts when its turn comes, as if never halted.
			st.clearHalt()
			st.clearApprovals()
			return st, newEvent(st.Group, EventOperator, st.State, st.State, reason, now), nil
		}
	}
	return st, Event{}, badAction("reset", st, "only a group in canary or active, or a halted unstarted one, can be reset")
}

// Run starts a group now. An unstarted group starts at the next step
// regardless of window, wait_hours and predecessors; a rolled back group
// goes back to unstarted and starts again the same way (fresh canaries and
// initial count); a halted group is reset (see Reset). A group that is
// running or done is refused.
func Run(st GroupStatus, note string, now time.Time) (GroupStatus, Event, error) {
	reason := operatorReason("run", note)
	switch {
	case st.State == StateUnstarted:
		st = st.Clone()
		st.clearHalt() // halted before it started: the operator decided
		st.RunRequested = true
		return st, newEvent(st.Group, EventOperator, st.State, st.State, reason+" (starts at once)", now), nil
	case st.State == StateRolledBack:
		restarted, ev := restart(st, reason+" (starts again at once)", now)
		return restarted, ev, nil
	case st.State.InProgress() && st.Halted:
		return Reset(st, note, now)
	case st.State.InProgress():
		return st, Event{}, badAction("run", st, "it is already running")
	}
	return st, Event{}, badAction("run", st, "change target_version to roll out again")
}

// MarkDone forces a group to done: every agent of it is told to update to
// the target at once, and groups that depend on it may start. RFD 169 allows
// it from canary and active; fleetwave also allows it from unstarted, to skip
// a group (an empty one holds its dependants otherwise).
func MarkDone(st GroupStatus, note string, now time.Time) (GroupStatus, Event, error) {
	switch st.State {
	case StateUnstarted, StateCanary, StateActive:
	default:
		fix := "only a group in unstarted, canary or active can be marked done"
		if st.State == StateRolledBack {
			fix += "; a rolled back group only when forced, with a reason (MarkDoneForced: fleetctl mark-done --group " + st.Group + " --force --reason TEXT)"
		}
		return st, Event{}, badAction("mark-done", st, fix)
	}
	st = st.Clone()
	st.settle()
	st.Progress, st.DoneAt = 1, now
	st.accept(st.TargetVersion)
	return st, st.set(StateDone, operatorReason("mark-done", note), now), nil
}
