package rollout

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// State is where a group stands in the rollout of one target version
// (DESIGN §3.3, RFD 169 "Group states").
type State string

// Group states.
const (
	// StateUnstarted: the group has not started; agents keep the start
	// version.
	StateUnstarted State = "unstarted"
	// StateCanary: the group's canaries update; everyone else waits.
	StateCanary State = "canary"
	// StateActive: agents update as progress allows.
	StateActive State = "active"
	// StateDone: the group is on the target; every agent is told to update.
	StateDone State = "done"
	// StateRolledBack: an operator rolled the group back; every agent is
	// told to go to the start version.
	StateRolledBack State = "rolledback"
)

// Valid reports whether s is one of the five states.
func (s State) Valid() bool {
	switch s {
	case StateUnstarted, StateCanary, StateActive, StateDone, StateRolledBack:
		return true
	}
	return false
}

// Terminal reports whether the state no longer changes by itself for this
// target: only an operator or a new target moves the group on.
func (s State) Terminal() bool {
	switch s {
	case StateDone, StateRolledBack:
		return true
	}
	return false
}

// InProgress reports whether the group is rolling out (canary or active):
// its config may not change (CheckConfigChange) and alert_after runs.
func (s State) InProgress() bool {
	switch s {
	case StateCanary, StateActive:
		return true
	}
	return false
}

// GroupStatus is the controller's record of one group's rollout, the value
// of fleet_plan key group.<name>. Agents read it (with the spec) to decide
// whether to update, through Decide.
type GroupStatus struct {
	V     int    `json:"v"`
	Group string `json:"group"`
	// State, Reason and Since describe the last transition.
	State  State     `json:"state"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since,omitzero"`
	// Mode is the effective mode when the controller wrote the status; agents
	// cannot read fleet_config, so this is how a paused config reaches them.
	Mode Mode `json:"mode,omitempty"`
	// TargetVersion and StartVersion are the spec versions this status is
	// about; a status for another target is stale and Decide ignores it.
	TargetVersion string `json:"target_version"`
	StartVersion  string `json:"start_version"`
	// HoldVersion is what the group runs before its turn and after a
	// rollback: the last version it completed (or held) before this target.
	// Empty for a group with no history, which follows StartVersion. Next
	// sets it when a new target resets the group; see Hold.
	HoldVersion string `json:"hold_version,omitempty"`
	// RejectedVersions are the versions the group halted on or was rolled
	// back from, oldest first, at most MaxRejected, kept across targets:
	// the group never holds one, and fleetctl refuses one as a start
	// version unless forced. Completing a version (done) removes it.
	RejectedVersions []string `json:"rejected_versions,omitempty"`

	// Halted: the group stopped itself (a canary failed or too many agents
	// failed) and stays in its state until an operator acts.
	Halted     bool      `json:"halted"`
	HaltReason string    `json:"halt_reason,omitempty"`
	HaltedAt   time.Time `json:"halted_at,omitzero"`
	// Waiting, when set, says why the group is not moving although nothing
	// is wrong: a window, wait_hours, a predecessor, no agents, a paused
	// mode. WaitingUntil is when that wait ends, when known.
	Waiting      string    `json:"waiting,omitempty"`
	WaitingUntil time.Time `json:"waiting_until,omitzero"`
	// Frozen, when set, says why progress is held: too many agents vanished.
	Frozen string `json:"frozen,omitempty"`
	// Held, when set, says why progress is held: more than
	// infrastructure_hold of the agents in flight (or the canaries) are
	// blocked on infrastructure (a release site down, a full disk). Nothing
	// is failed or halted; the group moves on by itself when they
	// recover. Blocked is how many agents of the group are blocked, held
	// or not.
	Held    string `json:"held,omitempty"`
	Blocked int    `json:"blocked,omitempty"`
	// Vanished is how many of the InitialCount agents are gone: the
	// initial count minus the agents present now (unreachable ones are
	// present), never below 0. It is net of agents that joined since the
	// group started: a new host hides one that vanished. Counted at every
	// step in canary and active, and kept as it was when the group was
	// done.
	Vanished int `json:"vanished,omitempty"`
	// DoneHeld, when set, says why the group is not done although every
	// present agent finished with the target: more of its initial agents
	// vanished than vanished_limit allows. It waits for them to return
	// (or an operator's mark-done); a vanished event and an alert event
	// mark the start of the wait.
	DoneHeld string `json:"done_held,omitempty"`
	// RunRequested: an operator asked to start the group now (fleetctl run),
	// regardless of window, wait_hours and predecessors.
	RunRequested bool `json:"run_requested,omitempty"`
	// Retry, when set, asks agents that rolled back from the target to try
	// it once more (fleetctl retry; see RetryRequest).
	Retry RetryRequest `json:"retry,omitzero"`
	// AwaitingApproval, when set, is the stage at which the group waits
	// for an operator's approval, and since when (see approval.go);
	// Approvals are the approvals given for this target (fleetctl
	// approve), which the next step consumes; ApprovalWaited is how long
	// the group waited for its after_canary approval, which alert_after
	// does not count unless alert_on_approval_wait.
	AwaitingApproval ApprovalWait `json:"awaiting_approval,omitzero"`
	Approvals        []Approval   `json:"approvals,omitempty"`
	ApprovalWaited   Duration     `json:"approval_waited,omitempty"`

	// InitialCount is the number of agents present when the group started.
	InitialCount int `json:"initial_count"`
	// Canaries are the agents that updated first, with what the controller
	// saw of them.
	Canaries []Canary `json:"canaries,omitempty"`
	// Progress in [0,1]: agents whose id fraction is below it may update.
	Progress float64 `json:"progress"`
	// FailedCount is the number of agents failing the target that count
	// towards failure_threshold (those whose attempt began at or after
	// FailuresSince).
	FailedCount   int       `json:"failed_count"`
	FailuresSince time.Time `json:"failures_since,omitzero"`
	// TimedOutCount is how many of FailedCount are agents still updating
	// to the target longer than update_timeout (timed out: failed, and out
	// of the max_in_flight window).
	TimedOutCount int `json:"timed_out_count,omitempty"`
	// Alerted: the alert_after alert has been raised for this rollout of
	// the group (or, with alert_on_approval_wait, its wait for a start
	// approval). A halt raises its own alert and does not set it.
	Alerted   bool      `json:"alerted"`
	StartedAt time.Time `json:"started_at,omitzero"`
	DoneAt    time.Time `json:"done_at,omitzero"`

	// Analysis is where each of the group's metric analysis checks stands
	// in this rollout (see CheckStatus); absent without checks.
	Analysis []CheckStatus `json:"analysis,omitempty"`

	// Settings agents need and cannot read from fleet_config.
	JitterSeconds  int      `json:"jitter_seconds"`
	HealthTimeout  Duration `json:"health_timeout"`
	MinHealthyTime Duration `json:"min_healthy_time"`

	// Issue 28, operator verbs: SkipCanaries is the operator's reason
	// for starting the group without canaries (fleetctl run
	// --skip-canaries --reason R, RunSkipCanaries). In unstarted it is a
	// request, with RunRequested: the next step starts the group
	// straight in active (startWithoutCanaries). Once the group started
	// it stays as the record of why it had no canaries, until a new
	// target or a restart drops it. At most MaxSkipReason bytes.
	SkipCanaries string `json:"skip_canaries,omitempty"`
	// Issue 28, rate: the group's starts per period and its ramp (rate.go);
	// absent without a rate, and before the group is active.
	Rate *RateStatus `json:"rate,omitempty"`
	// Issue 28, adaptive in flight: the group's current in-flight bound and
	// why it last moved (adaptive.go); absent without adaptive_in_flight,
	// and before the group is active.
	Adaptive *AdaptiveStatus `json:"adaptive,omitempty"`
	// Issue 28, canaries: small groups and lost canaries (canary.go).
	// CanariesSkipped, when set, says why the group started with no canary
	// phase: it had at most small_group agents present when it started.
	CanariesSkipped string `json:"canaries_skipped,omitempty"`
	// ReplacedCanaries are the canaries that vanished before they reported
	// on the target and were replaced, oldest first: at most canary_count
	// per start of the group, after which a lost canary halts it as before.
	ReplacedCanaries []ReplacedCanary `json:"replaced_canaries,omitempty"`
	// Issue 28, catch-all: Follows, when set, marks the status of a group
	// that is not in the config as a copy of the catch-all group's status
	// (Config.CatchAllGroup), which the controller writes under the
	// group's key (FollowStatus) so that its hosts, whose credentials read
	// their own group's key only, follow the catch-all's rollout: Decide
	// answers them exactly as it answers the catch-all's own hosts.
	Follows string `json:"follows,omitempty"`
	// Issue 28, time-based: under the time-based schedule, WindowCloses is
	// when the window the group last started (or restarted) in closes.
	// From then on no agent of the group starts a new update
	// (UpdateAllowed): the controller moves an active group to done at
	// its next step, and a done group is active again in a window that
	// opens at or after this instant while agents are off the target.
	// Zero when the group did not start in a window (fleetctl run, a
	// critical plan, or another schedule): nothing closes it.
	WindowCloses time.Time `json:"window_closes,omitzero"`
}

// Canary is one canary agent and what the controller has seen of it.
type Canary struct {
	ID AgentID `json:"id"`
	// Hostname is the canary's host name when it was chosen (cut to 48
	// bytes; "" when its heartbeat gave none): a halt on a canary that
	// went missing names the host, whose heartbeat is gone by then.
	Hostname string `json:"hostname,omitempty"`
	// HealthySince is when the controller first saw the canary healthy on
	// the target (cleared if it stops being so).
	HealthySince time.Time `json:"healthy_since,omitzero"`
	// MissingSince is when the controller first missed the canary (cleared
	// when it is back).
	MissingSince time.Time `json:"missing_since,omitzero"`
	// ReportedAt is when the controller first saw the canary act on the
	// target (see reportedOn): a canary that vanishes after that halts the
	// group, one that vanishes before it may be replaced (canary.go).
	ReportedAt time.Time `json:"reported_at,omitzero"`
}

// IsCanary reports whether id is one of the group's canaries.
func (st GroupStatus) IsCanary(id AgentID) bool {
	for _, c := range st.Canaries {
		if c.ID == id {
			return true
		}
	}
	return false
}

// Clone returns a copy of st that shares no memory with it.
func (st GroupStatus) Clone() GroupStatus {
	st.Canaries = slices.Clone(st.Canaries)
	st.RejectedVersions = slices.Clone(st.RejectedVersions)
	st.Retry.Agents = slices.Clone(st.Retry.Agents)
	st.Approvals = slices.Clone(st.Approvals)
	st.Analysis = slices.Clone(st.Analysis)
	if st.Rate != nil {
		r := *st.Rate
		st.Rate = &r
	}
	if st.Adaptive != nil {
		a := *st.Adaptive
		st.Adaptive = &a
	}
	st.ReplacedCanaries = slices.Clone(st.ReplacedCanaries)
	return st
}

// newStatus is the unstarted status of group for spec.
func newStatus(group string, spec Spec, now time.Time, reason string) GroupStatus {
	return GroupStatus{
		V:             SchemaVersion,
		Group:         group,
		State:         StateUnstarted,
		Reason:        reason,
		Since:         now,
		TargetVersion: spec.TargetVersion,
		StartVersion:  spec.StartVersion,
	}
}

// Validate checks that st is a group status a controller could have written
// and an agent can act on: this schema version, a valid group name, one of
// the five states, versions that are semantic versions (empty only before
// the first valid spec, or for a group with no hold version), at most
// MaxRejected distinct rejected versions, a known mode, progress in [0,1], no negative count
// or duration, and canonical canary ids. Every violation wraps ErrBadStatus.
//
// It cannot tell whether st belongs under the key it was read from; readers
// check that its group is the key's (kv.DecodeGroupStatus).
func (st GroupStatus) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadStatus}, args...)...))
	}
	if st.V != SchemaVersion {
		bad("v %d: this fleetwave reads version %d", st.V, SchemaVersion)
	}
	if err := ValidateGroupName(st.Group); err != nil {
		bad("group: %v", err)
	}
	if !st.State.Valid() {
		bad("state %q must be unstarted, canary, active, done or rolledback", truncate(string(st.State), 40))
	}
	for _, v := range []struct{ field, v string }{{"target_version", st.TargetVersion}, {"start_version", st.StartVersion}, {"hold_version", st.HoldVersion}} {
		if v.v == "" {
			continue
		}
		if err := ValidateVersion(v.v); err != nil {
			bad("%s: %v", v.field, err)
		}
	}
	if len(st.RejectedVersions) > MaxRejected {
		bad("rejected_versions has %d entries, at most %d", len(st.RejectedVersions), MaxRejected)
	}
	for i, v := range st.RejectedVersions {
		if err := ValidateVersion(v); err != nil {
			bad("rejected_versions[%d]: %v", i, err)
		} else if slices.Index(st.RejectedVersions, v) < i {
			bad("rejected_versions[%d]: %s is listed twice", i, v)
		}
	}
	if st.Mode != "" {
		if err := st.Mode.validate("mode"); err != nil {
			bad("%v", err)
		}
	}
	if !(st.Progress >= 0 && st.Progress <= 1) {
		bad("progress %v must be 0-1", st.Progress)
	}
	for _, n := range []struct {
		field string
		n     int
	}{{"initial_count", st.InitialCount}, {"vanished", st.Vanished}, {"failed_count", st.FailedCount}, {"timed_out_count", st.TimedOutCount}, {"jitter_seconds", st.JitterSeconds}} {
		if n.n < 0 {
			bad("%s %d must not be negative", n.field, n.n)
		}
	}
	if st.HealthTimeout < 0 || st.MinHealthyTime < 0 {
		bad("health_timeout %v and min_healthy_time %v must not be negative", st.HealthTimeout, st.MinHealthyTime)
	}
	for i, c := range st.Canaries {
		if _, err := ParseAgentID(string(c.ID)); err != nil {
			bad("canaries[%d]: %v", i, err)
		}
		if len(c.Hostname) > maxNameHost+len("…") {
			bad("canaries[%d]: hostname longer than %d bytes", i, maxNameHost)
		} else if err := ValidatePrintable(c.Hostname); err != nil {
			bad("canaries[%d]: hostname: %v", i, err)
		}
	}
	for _, err := range st.validateReplaced() {
		bad("%v", err)
	}
	if err := st.Retry.validate(); err != nil {
		bad("retry: %v", err)
	}
	if err := st.validateApprovals(); err != nil {
		bad("%v", err)
	}
	for _, err := range st.validateAnalysis() {
		bad("%v", err)
	}
	if len(st.SkipCanaries) > MaxSkipReason+len("…") {
		bad("skip_canaries longer than %d bytes", MaxSkipReason)
	}
	if err := st.Rate.validate(); err != nil {
		bad("%v", err)
	}
	if err := st.Adaptive.validate(); err != nil {
		bad("%v", err)
	}
	if err := st.validateFollows(); err != nil {
		bad("%v", err)
	}
	return errors.Join(errs...)
}
