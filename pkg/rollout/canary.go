package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// SelectCanaries picks up to n canaries among agents for a rollout to target.
// Candidates are reachable agents not yet on the target that have not rolled
// back from it (an agent already on the target proves nothing new, one that
// rolled back will not try again, an unreachable one might never report). The pick is deterministic and spread over the id
// space: candidates are ordered by id and the i-th of n canaries is the
// candidate at rank ⌊(2i+1)·len/(2n)⌋, the middle of the i-th n-th of the
// ranking. Ids are uniform, so ranks are spread like ids are.
func SelectCanaries(agents []AgentView, n int, target string) []AgentID {
	if n <= 0 {
		return nil
	}
	var cand []AgentID
	for _, a := range agents {
		if a.Unreachable || a.ActiveVersion == target || rolledBackFrom(a, target) {
			continue
		}
		cand = append(cand, a.ID)
	}
	slices.SortFunc(cand, func(a, b AgentID) int { return strings.Compare(string(a), string(b)) })
	cand = slices.Compact(cand)
	if n > len(cand) {
		n = len(cand)
	}
	out := make([]AgentID, 0, n)
	for i := range n {
		out = append(out, cand[(2*i+1)*len(cand)/(2*n)])
	}
	return out
}

// canaryVerdict is the outcome of judging the canaries once.
type canaryVerdict struct {
	halt    string  // non-empty: halt with this reason
	agent   AgentID // the canary that halts the group
	healthy bool    // every canary healthy for min_healthy_time
}

// judgeCanaries updates each canary's observations in st from the present
// agents and returns the verdict. A canary fails when it fails the target
// (see failedTarget), times out (see timedOut) or has been missing (or
// unreachable, see canaryViews) for health_timeout; the group may
// go on when every canary has been seen healthy on the target for
// min_healthy_time by the controller (on top of the agent's own wait).
func judgeCanaries(st *GroupStatus, agents map[AgentID]AgentView, gc GroupConfig, now time.Time) canaryVerdict {
	v := canaryVerdict{healthy: true}
	for i := range st.Canaries {
		c := &st.Canaries[i]
		a, present := agents[c.ID]
		switch {
		case !present:
			c.HealthySince = time.Time{}
			if c.MissingSince.IsZero() {
				c.MissingSince = now
			}
			v.healthy = false
			if now.Sub(c.MissingSince) >= gc.HealthTimeout.D() {
				return canaryVerdict{agent: c.ID, halt: "canary " + (AgentView{ID: c.ID, Hostname: c.Hostname}).Name() + " missing since " + c.MissingSince.UTC().Format(time.RFC3339) +
					" (longer than health_timeout " + gc.HealthTimeout.String() + ")"}
			}
		case failedTarget(a, st.TargetVersion, st.FailuresSince):
			return canaryVerdict{agent: c.ID, halt: "canary " + a.Name() + " failed: " + describeFailure(a, st.TargetVersion)}
		case timedOut(a, st.TargetVersion, st.FailuresSince, gc.EffectiveUpdateTimeout(), now):
			return canaryVerdict{agent: c.ID, halt: "canary " + a.Name() + " " + describeTimeout(a, gc)}
		default:
			c.MissingSince = time.Time{}
			if !healthyOn(a, st.TargetVersion) {
				c.HealthySince = time.Time{}
				v.healthy = false
				continue
			}
			if c.HealthySince.IsZero() {
				c.HealthySince = now
			}
			if now.Sub(c.HealthySince) < gc.MinHealthyTime.D() {
				v.healthy = false
			}
		}
	}
	return v
}

// Issue 28: canaries for small groups, and lost canaries.
//
// A group with at most small_group agents present when it starts skips
// its canary phase: it goes from unstarted to active directly (with five
// canaries, a group of five would be nothing but canaries, and a group of
// two would halt for good on one host that is switched off). When its
// config asks for an after_canary approval it still stops in canary, with
// no canaries, to ask for it: an approval is a human's gate, not a canary.
//
// A canary that vanishes (expires from the inventory, or turns
// unreachable) before it reported on the target never ran the release,
// so its absence says nothing about the release: once it has been
// missing for health_timeout, the point at which it would halt the group,
// it is replaced by another present candidate instead (see
// replaceLostCanaries). Reported on the target means the controller saw it
// act on it (reportedOn): installing it, running it, rolled back from it,
// or an update attempt begun since the group started. A canary that
// vanished after that halts the group as before: it may have died of the
// release. The replacement is bounded: at most canary_count replacements
// per start of the group, and only from candidates that SelectCanaries
// would pick and that were never canaries of this start; past the bound,
// or with no candidate left, the lost canary halts the group as before,
// the halt saying why it was not replaced. A group whose hosts keep
// vanishing still halts.

// smallGroup says why the group skips its canary phase when it starts with
// total agents present ("" when it does not): small_group is set and
// total is at most that.
func (m *machine) smallGroup(total int) string {
	if n := m.gc.SmallGroup; n > 0 && total <= n {
		agents := "agents"
		if total == 1 {
			agents = "agent"
		}
		return fmt.Sprintf("small group: %d %s ≤ small_group %d", total, agents, n)
	}
	return ""
}

// reportedOn reports whether a's heartbeat (its last one, even if it is
// unreachable now) shows it acting on target in the rollout whose
// failures count from since: installing it, running it, rolled back from
// it, or an update attempt begun at or after since (the only update a
// canary is told to make is to the target; a zero start time says
// nothing).
func reportedOn(a AgentView, target string, since time.Time) bool {
	switch {
	case a.UpdatingTo == target, a.ActiveVersion == target, a.Rollback && a.RollbackFrom == target:
		return true
	}
	return !a.StartTime.IsZero() && !a.StartTime.Before(since)
}

// canaryAgents are the views of the group's canaries that are present,
// reachable or not, by id (judgeCanaries looks up at most canary_count
// agents).
func (m *machine) canaryAgents() map[AgentID]AgentView {
	canary := make(map[AgentID]bool, len(m.st.Canaries))
	for _, c := range m.st.Canaries {
		canary[c.ID] = true
	}
	out := make(map[AgentID]AgentView, len(canary))
	for _, a := range m.in.Agents {
		if canary[a.ID] {
			out[a.ID] = a
		}
	}
	return out
}

// noteReported records when each canary is first seen acting on the
// target (Canary.ReportedAt). A canary seen healthy by a controller that
// did not record reports counts as reported from then.
func (m *machine) noteReported(all map[AgentID]AgentView) {
	st := &m.st
	for i := range st.Canaries {
		c := &st.Canaries[i]
		if !c.ReportedAt.IsZero() {
			continue
		}
		if a, ok := all[c.ID]; ok && reportedOn(a, st.TargetVersion, st.FailuresSince) {
			c.ReportedAt = m.now
		} else if !c.HealthySince.IsZero() {
			c.ReportedAt = c.HealthySince
		}
	}
}

// replaceLostCanaries replaces each canary missing (gone, or unreachable)
// for health_timeout that never reported on the target, within the bound
// (see the comment above), and emits a canary_replaced event for each.
// It returns, for the lost canaries it did not replace, why not: the
// halt that follows says so.
func (m *machine) replaceLostCanaries(all map[AgentID]AgentView) map[AgentID]string {
	st, gc := &m.st, m.gc
	var why map[AgentID]string
	note := func(id AgentID, text string) {
		if why == nil {
			why = map[AgentID]string{}
		}
		why[id] = text
	}
	for i := range st.Canaries {
		c := st.Canaries[i]
		if a, ok := all[c.ID]; ok && !a.Unreachable {
			continue
		}
		if c.MissingSince.IsZero() || m.now.Sub(c.MissingSince) < gc.HealthTimeout.D() {
			continue
		}
		if !c.ReportedAt.IsZero() {
			note(c.ID, fmt.Sprintf("not replaced: it had reported on %s (first seen acting on it at %s)", st.TargetVersion, c.ReportedAt.UTC().Format(time.RFC3339)))
			continue
		}
		if len(st.ReplacedCanaries) >= gc.CanaryCount {
			note(c.ID, fmt.Sprintf("not replaced: %d lost canaries already replaced since the group started, the most canary_count %d allows", len(st.ReplacedCanaries), gc.CanaryCount))
			continue
		}
		next, ok := m.replacementFor()
		if !ok {
			note(c.ID, "not replaced: no candidate left (present, reachable, not on the target, not rolled back from it, never a canary of this start)")
			continue
		}
		lost := AgentView{ID: c.ID, Hostname: c.Hostname}
		st.Canaries[i] = Canary{ID: next.ID, Hostname: truncate(next.Hostname, maxNameHost)}
		st.ReplacedCanaries = append(st.ReplacedCanaries, ReplacedCanary{ID: c.ID, Hostname: c.Hostname, MissingSince: c.MissingSince, By: next.ID, At: m.now})
		m.emit(EventCanaryReplaced, st.State, st.State, fmt.Sprintf("canary %s missing since %s (longer than health_timeout %s) before it reported on %s: replaced by %s (replacement %d of at most canary_count %d)",
			lost.Name(), c.MissingSince.UTC().Format(time.RFC3339), gc.HealthTimeout, st.TargetVersion, next.Name(), len(st.ReplacedCanaries), gc.CanaryCount))
		m.events[len(m.events)-1].Agents = eventAgents([]AgentView{lost})
		delete(all, c.ID)
		all[next.ID] = next
	}
	return why
}

// replacementFor picks a new canary as SelectCanaries would, among the
// agents that are neither canaries now nor were replaced since the group
// started.
func (m *machine) replacementFor() (AgentView, bool) {
	st := &m.st
	taken := make(map[AgentID]bool, len(st.Canaries)+len(st.ReplacedCanaries))
	for _, c := range st.Canaries {
		taken[c.ID] = true
	}
	for _, r := range st.ReplacedCanaries {
		taken[r.ID] = true
	}
	var cand []AgentView
	for _, a := range m.in.Agents {
		if !taken[a.ID] {
			cand = append(cand, a)
		}
	}
	ids := SelectCanaries(cand, 1, st.TargetVersion)
	if len(ids) == 0 {
		return AgentView{}, false
	}
	for _, a := range cand {
		if a.ID == ids[0] {
			return a, true
		}
	}
	return AgentView{}, false // not reached: SelectCanaries picks among cand
}

// ReplacedCanary is a canary that vanished before it reported on the
// target, and the agent that took its place.
type ReplacedCanary struct {
	ID AgentID `json:"id"`
	// Hostname is the lost canary's host name when it was chosen.
	Hostname     string    `json:"hostname,omitempty"`
	MissingSince time.Time `json:"missing_since,omitzero"`
	// By is the canary that replaced it, At when.
	By AgentID   `json:"by"`
	At time.Time `json:"at"`
}

// validateReplaced checks ReplacedCanaries as Validate checks canaries.
func (st GroupStatus) validateReplaced() []error {
	var errs []error
	if len(st.ReplacedCanaries) > MaxCanaryCount {
		errs = append(errs, fmt.Errorf("replaced_canaries has %d entries, at most %d", len(st.ReplacedCanaries), MaxCanaryCount))
	}
	for i, r := range st.ReplacedCanaries {
		for _, id := range []AgentID{r.ID, r.By} {
			if _, err := ParseAgentID(string(id)); err != nil {
				errs = append(errs, fmt.Errorf("replaced_canaries[%d]: %v", i, err))
			}
		}
		if len(r.Hostname) > maxNameHost+len("…") {
			errs = append(errs, fmt.Errorf("replaced_canaries[%d]: hostname longer than %d bytes", i, maxNameHost))
		} else if err := ValidatePrintable(r.Hostname); err != nil {
			errs = append(errs, fmt.Errorf("replaced_canaries[%d]: hostname: %v", i, err))
		}
	}
	return errs
}

// startSmall starts a small group (see smallGroup) without canaries:
// active at once, or, when its config asks for an after_canary approval,
// in canary with no canaries, where the approval is asked.
func (m *machine) startSmall(reason string, total int, skip string) {
	if m.gc.Approval.Has(ApprovalAfterCanary) {
		m.transition(StateCanary, fmt.Sprintf("%s: starting with %d agents, no canaries (%s); after_canary approval still asked", reason, total, skip))
		return
	}
	m.transition(StateActive, fmt.Sprintf("%s: starting with %d agents, canaries skipped (%s)", reason, total, skip))
}

// reachableCanaries are the canaries of all that are reachable: an
// unreachable canary is missing, as one that expired.
func reachableCanaries(all map[AgentID]AgentView) map[AgentID]AgentView {
	out := make(map[AgentID]AgentView, len(all))
	for id, a := range all {
		if !a.Unreachable {
			out[id] = a
		}
	}
	return out
}
