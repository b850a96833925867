package rollout

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Approval gates: a group whose config lists a stage in approval stops
// there, in a visible wait (GroupStatus.AwaitingApproval, Waiting), until an
// operator approves it (fleetctl approve, which records an Approval in the
// group's status); the controller's next step consumes the approval and
// moves the group on. A wait is never a failure and never a halt. An
// approval is for one stage of one target: a new target, a reset and a
// restart of the group (reset in canary, run of a rolled back group) drop
// the approvals given so far.

// ApprovalStage is a point in a group's rollout where it may wait for an
// operator's approval.
type ApprovalStage string

// Approval stages.
const (
	// ApprovalStart: before the group starts (unstarted → canary), once
	// its schedule lets it start.
	ApprovalStart ApprovalStage = "start"
	// ApprovalAfterCanary: after its canaries are healthy, before it goes
	// active (canary → active).
	ApprovalAfterCanary ApprovalStage = "after_canary"
)

// ApprovalStages are the stages in rollout order.
var ApprovalStages = []ApprovalStage{ApprovalStart, ApprovalAfterCanary}

// approvalHelp lists what a config's approval may be.
const approvalHelp = `start, after_canary (a list, or "manual" for start, "none" for no approval)`

// Valid reports whether s is one of ApprovalStages.
func (s ApprovalStage) Valid() bool { return slices.Contains(ApprovalStages, s) }

// Purpose says what the approval lets the group do, for people: "to start".
func (s ApprovalStage) Purpose() string {
	switch s {
	case ApprovalStart:
		return "to start"
	case ApprovalAfterCanary:
		return "to go active after its canaries"
	}
	return "at " + string(s)
}

// ParseApprovalStage checks a stage name as an operator types it.
func ParseApprovalStage(s string) (ApprovalStage, error) {
	st := ApprovalStage(strings.TrimSpace(s))
	if !st.Valid() {
		return "", fmt.Errorf("stage %q: must be start or after_canary", truncate(s, 40))
	}
	return st, nil
}

// ApprovalGates is a group's approval config: the stages at which it waits for an
// operator's approval, in rollout order; empty for none. Validate refuses
// an unknown or repeated stage.
type ApprovalGates []ApprovalStage

// Has reports whether the group waits for an approval at stage.
func (g ApprovalGates) Has(stage ApprovalStage) bool { return slices.Contains(g, stage) }

// ParseApprovalGates reads the approval config as people write it, on the command
// line or as a JSON/YAML string: stages separated by commas, "manual" for
// start, "none" or "" for no approval. Stages come out in rollout order;
// unknown names are kept for Validate to name.
func ParseApprovalGates(s string) ApprovalGates {
	var out ApprovalGates
	for _, p := range strings.Split(s, ",") {
		switch p = strings.TrimSpace(p); p {
		case "", "none":
		case "manual":
			out = append(out, ApprovalStart)
		default:
			out = append(out, ApprovalStage(p))
		}
	}
	return out.canonical()
}

// canonical orders g as ApprovalStages (unknown names last, as given);
// nil for none, so that an empty list and an absent one are equal.
func (g ApprovalGates) canonical() ApprovalGates {
	if len(g) == 0 {
		return nil
	}
	rank := func(s ApprovalStage) int {
		if i := slices.Index(ApprovalStages, s); i >= 0 {
			return i
		}
		return len(ApprovalStages)
	}
	out := slices.Clone(g)
	slices.SortStableFunc(out, func(a, b ApprovalStage) int { return rank(a) - rank(b) })
	return out
}

// UnmarshalJSON reads a list of stages, or one string as ParseApprovalGates reads
// it ("manual", "none", "start,after_canary").
func (g *ApprovalGates) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*g = ParseApprovalGates(one)
		return nil
	}
	var list []ApprovalStage
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("%s: want a list of stages: %s", truncate(string(b), 40), approvalHelp)
	}
	*g = ApprovalGates(list).canonical()
	return nil
}

// validate names an unknown or repeated stage.
func (g ApprovalGates) validate() error {
	for i, s := range g {
		if !s.Valid() {
			return fmt.Errorf("approval %q is not a stage: use %s", truncate(string(s), 40), approvalHelp)
		}
		if slices.Index(g, s) < i {
			return fmt.Errorf("approval lists %s twice", s)
		}
	}
	return nil
}

// ApprovalWait is a group waiting for an operator's approval: at which
// stage, and since when.
type ApprovalWait struct {
	Stage ApprovalStage `json:"stage"`
	Since time.Time     `json:"since"`
}

// Approval is an operator's approval of one stage of the group's rollout
// of its target (fleetctl approve): who, why and when.
type Approval struct {
	Stage  ApprovalStage `json:"stage"`
	By     string        `json:"by"`
	Reason string        `json:"reason"`
	At     time.Time     `json:"at"`
}

// MaxApprovals bounds GroupStatus.Approvals: one per stage is all a
// rollout of one target can collect, a reset starts over.
const MaxApprovals = 10

// ApprovalFor returns the approval recorded for stage, if any.
func (st GroupStatus) ApprovalFor(stage ApprovalStage) (Approval, bool) {
	for _, a := range st.Approvals {
		if a.Stage == stage {
			return a, true
		}
	}
	return Approval{}, false
}

// clearApprovals forgets the approvals given and any wait for one.
func (st *GroupStatus) clearApprovals() {
	st.Approvals, st.AwaitingApproval = nil, ApprovalWait{}
}

// validateApprovals checks the approval fields of a stored status.
func (st GroupStatus) validateApprovals() error {
	var errs []error
	if w := st.AwaitingApproval; w != (ApprovalWait{}) {
		if !w.Stage.Valid() {
			errs = append(errs, fmt.Errorf("awaiting_approval: stage %q must be start or after_canary", truncate(string(w.Stage), 40)))
		}
		if w.Since.IsZero() {
			errs = append(errs, errors.New("awaiting_approval: since missing"))
		}
	}
	if len(st.Approvals) > MaxApprovals {
		errs = append(errs, fmt.Errorf("approvals has %d entries, at most %d", len(st.Approvals), MaxApprovals))
	}
	for i, a := range st.Approvals {
		switch {
		case !a.Stage.Valid():
			errs = append(errs, fmt.Errorf("approvals[%d]: stage %q must be start or after_canary", i, truncate(string(a.Stage), 40)))
		case a.By == "":
			errs = append(errs, fmt.Errorf("approvals[%d]: by missing", i))
		}
	}
	if st.ApprovalWaited < 0 {
		errs = append(errs, fmt.Errorf("approval_waited %v must not be negative", st.ApprovalWaited))
	}
	return errors.Join(errs...)
}

// AwaitingText is the Waiting text of a group awaiting its approval at
// stage: what it waits for and the command that ends the wait.
func AwaitingText(group string, stage ApprovalStage) string {
	return fmt.Sprintf("awaiting approval %s (fleetctl approve --group %s --reason TEXT)", stage.Purpose(), group)
}

// awaiting reports whether the group is waiting for its approval at stage
// (and the config still asks for one there).
func (m *machine) awaiting(stage ApprovalStage) bool {
	return m.gc.Approval.Has(stage) && m.st.AwaitingApproval.Stage == stage
}

// gate decides whether the group may pass stage: at once when its config
// asks no approval there, when an approval for it is recorded (the wait
// ends; approved describes it for the transition's reason), and otherwise
// not: the wait begins (with an approval_needed event) or goes on, and
// Waiting says how to end it.
func (m *machine) gate(stage ApprovalStage) (approved string, pass bool) {
	st := &m.st
	waiting := st.AwaitingApproval.Stage == stage
	if !m.gc.Approval.Has(stage) {
		if waiting {
			m.endApprovalWait()
			return "no approval needed any more (the config changed)", true
		}
		return "", true
	}
	if a, ok := st.ApprovalFor(stage); ok {
		if waiting {
			// Only this stage's wait ends: a group started without
			// canaries passes its start approval again while it
			// awaits its after_canary one (startWithoutCanaries).
			m.endApprovalWait()
		}
		return fmt.Sprintf("approved by %s: %s", a.By, a.Reason), true
	}
	if !waiting {
		st.AwaitingApproval = ApprovalWait{Stage: stage, Since: m.now}
		m.emit(EventApprovalNeeded, st.State, st.State, AwaitingText(st.Group, stage))
	}
	m.waitFor(WaitApproval, AwaitingText(st.Group, stage), time.Time{})
	m.alertOnApprovalWait()
	return "", false
}

// endApprovalWait ends the group's wait, adding a wait after the canaries
// to ApprovalWaited (the time alert_after does not count).
func (m *machine) endApprovalWait() {
	w := m.st.AwaitingApproval
	if w.Stage == ApprovalAfterCanary && m.now.After(w.Since) {
		m.st.ApprovalWaited += Duration(m.now.Sub(w.Since))
	}
	m.st.AwaitingApproval = ApprovalWait{}
}

// alertOnApprovalWait raises the alert_after alert of a group awaiting its
// start approval for alert_after, when the config says
// alert_on_approval_wait. (A group awaiting its after_canary approval has
// started: alertAfter counts the wait by the same setting.)
func (m *machine) alertOnApprovalWait() {
	st := &m.st
	w := st.AwaitingApproval
	if !m.gc.AlertOnApprovalWait || st.Alerted || w.Stage != ApprovalStart {
		return
	}
	if waited := m.now.Sub(w.Since); waited >= m.gc.AlertAfter.D() {
		st.Alerted = true
		m.emit(EventAlert, st.State, st.State, fmt.Sprintf("awaiting approval to start for %s (alert_after %s, alert_on_approval_wait): fleetctl approve --group %s --reason TEXT",
			Duration(waited.Truncate(time.Second)), m.gc.AlertAfter, st.Group))
	}
}

// alertElapsed is how long alert_after says the group has taken since it
// started, and how to say it: by default the time it spent awaiting an
// approval after its canaries (ApprovalWaited, and the wait going on) is
// not counted; with alert_on_approval_wait it is.
func (m *machine) alertElapsed() (time.Duration, string) {
	st := &m.st
	elapsed := m.now.Sub(st.StartedAt)
	round := func(d time.Duration) Duration { return Duration(d.Truncate(time.Second)) }
	waited := st.ApprovalWaited.D()
	if w := st.AwaitingApproval; w.Stage == ApprovalAfterCanary && m.now.After(w.Since) {
		waited += m.now.Sub(w.Since)
	}
	if m.gc.AlertOnApprovalWait || waited <= 0 {
		return elapsed, fmt.Sprintf("not done %s after it started", round(elapsed))
	}
	return elapsed - waited, fmt.Sprintf("not done %s after it started (%s not counting %s awaiting approval)", round(elapsed), round(elapsed-waited), round(waited))
}

// joinReason joins a transition's reason and the approval that let it
// happen.
func joinReason(reason, approved string) string {
	switch {
	case approved == "":
		return reason
	case reason == "":
		return approved
	}
	return reason + "; " + approved
}

// Approve records an operator's approval (fleetctl approve) of the stage
// the group awaits; stage "" is whichever that is, another stage than the
// awaited one is refused. by (the actor) and reason are required. The
// group does not move here: the controller's next step consumes the
// approval (see gate) and moves it on, naming the approver in the
// transition. Refused, changing nothing, for a group not awaiting an
// approval (a halted one never is), and for one whose awaited stage is
// already approved.
func Approve(st GroupStatus, stage ApprovalStage, by, reason string, now time.Time) (GroupStatus, Event, error) {
	by, reason = strings.TrimSpace(by), strings.TrimSpace(reason)
	w := st.AwaitingApproval
	switch {
	case reason == "":
		return st, Event{}, fmt.Errorf("%w: approve group %q: a reason is required (it goes into the status, the event and the audit trail)", ErrBadAction, st.Group)
	case by == "":
		return st, Event{}, fmt.Errorf("%w: approve group %q: who approves is not known", ErrBadAction, st.Group)
	case stage != "" && !stage.Valid():
		return st, Event{}, fmt.Errorf("%w: approve group %q: stage %q must be start or after_canary", ErrBadAction, st.Group, truncate(string(stage), 40))
	case st.Halted:
		return st, Event{}, fmt.Errorf("%w: approve group %q: it is halted (%s), not awaiting approval: fleetctl reset --group %s --force --reason TEXT clears the halt",
			ErrBadAction, st.Group, truncate(st.HaltReason, 160), st.Group)
	case w.Stage == "":
		return st, Event{}, fmt.Errorf("%w: approve group %q: it is not awaiting approval (it is %s); a group awaits one only where its config's approval asks for it, once it gets there (fleetctl status shows it)",
			ErrBadAction, st.Group, describeStanding(st))
	case stage != "" && stage != w.Stage:
		return st, Event{}, fmt.Errorf("%w: approve group %q: --stage %s, but it awaits approval %s (stage %s)", ErrBadAction, st.Group, stage, w.Stage.Purpose(), w.Stage)
	}
	if a, ok := st.ApprovalFor(w.Stage); ok {
		return st, Event{}, fmt.Errorf("%w: approve group %q: stage %s is already approved (by %s at %s: %s); the controller moves the group at its next step",
			ErrBadAction, st.Group, w.Stage, a.By, a.At.UTC().Format(time.RFC3339), truncate(a.Reason, 80))
	}
	st = st.Clone()
	a := Approval{Stage: w.Stage, By: truncate(by, 200), Reason: truncate(reason, 300), At: now.UTC()}
	st.Approvals = append(st.Approvals, a)
	text := fmt.Sprintf("operator approve: %s (approval %s given by %s; the group moves at the controller's next step)", a.Reason, w.Stage.Purpose(), a.By)
	return st, newEvent(st.Group, EventOperator, st.State, st.State, text, now), nil
}

// describeStanding says where a group stands, for an error about it.
func describeStanding(st GroupStatus) string {
	s := string(st.State)
	if s == "" {
		s = "without a state"
	}
	if st.Waiting != "" {
		s += ", " + truncate(st.Waiting, 160)
	}
	return s
}
