package rollout

import (
	"fmt"
	"strings"
	"time"
)

// Issue 28, operator verbs: start a group without canaries, and mark a
// rolled back group done. (Rolling back every started group at once is
// Rollback applied to each: fleetctl rollback --all.)

// MaxSkipReason bounds GroupStatus.SkipCanaries: the operator's reason is
// cut to it.
const MaxSkipReason = 200

// RunSkipCanaries is Run for a group that is to start straight in active,
// without its canary phase: no canaries are picked, no canary is judged and
// the group's canary analysis does not run; its agents update as
// max_in_flight and the strategy allow from the first step, and
// failure_threshold, the active phase's analysis and every other rule of
// active still hold. note, the operator's reason, is required: it is kept
// in the status (SkipCanaries) and named by the transition that starts the
// group.
//
// Allowed from unstarted (a halt before the start is cleared, as Run
// does), rolledback (back to unstarted and started again at once, as Run
// does) and a halted canary group (restarted as Reset does, then started
// without canaries). Refused for a group in active (it is past its
// canaries), a canary group that is not halted (it is running: it goes
// active when its canaries are healthy) and done.
//
// A group whose config asks for an approval after its canaries still gets
// it: skipping the canaries does not skip the approval. It waits for it in
// unstarted, once its start approval (if any) is given (see
// startWithoutCanaries).
func RunSkipCanaries(st GroupStatus, note string, now time.Time) (GroupStatus, Event, error) {
	note = strings.TrimSpace(note)
	if note == "" {
		return st, Event{}, fmt.Errorf("%w: run group %q without canaries: a reason is required (it goes into the status, the transition and the audit trail)", ErrBadAction, st.Group)
	}
	reason := operatorReason("run --skip-canaries", note)
	switch {
	case st.State == StateUnstarted:
		st = st.Clone()
		st.clearHalt()
		st.RunRequested, st.SkipCanaries = true, truncate(note, MaxSkipReason)
		return st, newEvent(st.Group, EventOperator, st.State, st.State, reason+" (starts at once in active, without canaries)", now), nil
	case st.State == StateRolledBack:
		restarted, ev := restart(st, reason+" (starts again at once in active, without canaries)", now)
		restarted.SkipCanaries = truncate(note, MaxSkipReason)
		return restarted, ev, nil
	case st.State == StateCanary && st.Halted:
		restarted, ev := restart(st.Clone(), reason+" (the halted canary phase ends; starts again at once in active, without canaries)", now)
		restarted.SkipCanaries = truncate(note, MaxSkipReason)
		return restarted, ev, nil
	case st.State == StateCanary:
		return st, Event{}, badAction("run --skip-canaries", st, "it is already running: it goes active when its canaries are healthy (mark-done sends every agent the target at once)")
	case st.State == StateActive && st.Halted:
		return st, Event{}, badAction("run --skip-canaries", st, "it is past its canaries, there are none to skip: run without --skip-canaries (with --force) resets it")
	case st.State == StateActive:
		return st, Event{}, badAction("run --skip-canaries", st, "it is past its canaries and already running")
	}
	return st, Event{}, badAction("run --skip-canaries", st, "change target_version to roll out again")
}

// MarkDoneForced is MarkDone also from rolledback: what fleetctl mark-done
// --force --reason does to a rolled back group. Every agent of the group
// is told to install the target it was rolled back from, at once, and the
// target leaves the group's RejectedVersions (it completed it after all).
// note, the operator's reason, is required. From unstarted, canary and
// active it is MarkDone.
func MarkDoneForced(st GroupStatus, note string, now time.Time) (GroupStatus, Event, error) {
	if strings.TrimSpace(note) == "" {
		return st, Event{}, fmt.Errorf("%w: mark-done group %q forced: a reason is required (it goes into the status, the event and the audit trail)", ErrBadAction, st.Group)
	}
	if st.State != StateRolledBack {
		return MarkDone(st, note, now)
	}
	st = st.Clone()
	st.settle()
	st.Progress, st.DoneAt = 1, now
	st.accept(st.TargetVersion)
	return st, st.set(StateDone, operatorReason("mark-done", note), now), nil
}

// startWithoutCanaries starts a group whose operator asked to skip its
// canaries (GroupStatus.SkipCanaries): unstarted → active, with total agents
// present, once its after_canary approval (if the config asks for one) is
// given: skipping the canaries does not skip that approval, so the group
// waits for it in unstarted. reason says what let it start (the run request
// and its start approval).
func (m *machine) startWithoutCanaries(total int, reason string) bool {
	st := &m.st
	approved, ok := m.gate(ApprovalAfterCanary)
	if !ok {
		return false
	}
	st.Canaries = nil
	m.begin(total)
	// A wait for the after_canary approval before the start is not time
	// alert_after should leave out of the rollout's.
	st.ApprovalWaited = 0
	m.transition(StateActive, joinReason(fmt.Sprintf("%s: canaries skipped by an operator (%s): starting with %d agents in active, no canaries",
		reason, st.SkipCanaries, total), approved))
	return true
}
