package rollout

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// RetryRequest is an operator's request (fleetctl retry) that agents which
// rolled back from the group's target try it once more, without resetting
// the group. agentd honours a token at most once (it records it in its
// update.yaml), and only when it first sees the token already rolled back
// from the target: an agent that fails the target after the request was
// made stays rolled back. Next keeps the request; a new target (or a
// restart of the group: reset in canary, run of a rolled back group) drops
// it with the rest of the status.
type RetryRequest struct {
	// Token identifies the request: unique per group (a UTC time with
	// nanoseconds, after the previous request's), never reused.
	Token string `json:"token"`
	// Agents are the agents asked to retry; empty: every agent of the
	// group that rolled back from the target.
	Agents []AgentID `json:"agents,omitempty"`
	At     time.Time `json:"at"`
	Note   string    `json:"note,omitempty"`
}

// MaxRetryAgents bounds the agents one retry names: every agent of the
// group reads the status on every change.
const MaxRetryAgents = 100

// retryTokenLayout formats a token: sortable, readable, no spaces.
const retryTokenLayout = "20060102T150405.000000000Z"

// Includes reports whether the request asks agent id to retry.
func (r RetryRequest) Includes(id AgentID) bool {
	return r.Token != "" && (len(r.Agents) == 0 || slices.Contains(r.Agents, id))
}

// validate checks a stored request: a token when anything is set, canonical
// distinct agent ids, at most MaxRetryAgents of them.
func (r RetryRequest) validate() error {
	if r.Token == "" {
		if len(r.Agents) > 0 || !r.At.IsZero() || r.Note != "" {
			return errors.New("token missing")
		}
		return nil
	}
	if len(r.Token) > 64 {
		return fmt.Errorf("token %q longer than 64 bytes", truncate(r.Token, 40))
	}
	if len(r.Agents) > MaxRetryAgents {
		return fmt.Errorf("%d agents, at most %d", len(r.Agents), MaxRetryAgents)
	}
	for i, id := range r.Agents {
		if _, err := ParseAgentID(string(id)); err != nil {
			return fmt.Errorf("agents[%d]: %w", i, err)
		}
		if slices.Index(r.Agents, id) < i {
			return fmt.Errorf("agents[%d]: %s is listed twice", i, id)
		}
	}
	return nil
}

// Retry asks agents of a group that rolled back from its target to try it
// once more (agents: those named; none: every such agent of the group). The
// group keeps its state, progress and failure count: a retried agent counts
// as failed again only if it fails again. Allowed in canary, active and
// done; refused for a halted group (nobody is told to update while it is
// halted: reset it first), for unstarted (nobody tried the target yet) and
// rolledback (run it again). A retry replaces the previous one: an agent
// that did not honour that one yet follows this one instead.
func Retry(st GroupStatus, agents []AgentID, note string, now time.Time) (GroupStatus, Event, error) {
	switch {
	case st.State.InProgress() && st.Halted:
		return st, Event{}, fmt.Errorf("%w: retry group %q: it is halted (%s): a halted group tells no agent to update, so a retry would change nothing; fleetctl reset --group %s --force --reason TEXT clears the halt (and forgives the failures so far), then retry",
			ErrBadAction, st.Group, st.State, st.Group)
	case st.State == StateUnstarted:
		return st, Event{}, badAction("retry", st, "no agent has tried the target yet; only a group in canary, active or done can retry its failed agents")
	case st.State == StateRolledBack:
		return st, Event{}, badAction("retry", st, "its agents are told to go back, not to retry; fleetctl run starts it again")
	case st.State != StateCanary && st.State != StateActive && st.State != StateDone:
		return st, Event{}, badAction("retry", st, "only a group in canary, active or done can retry its failed agents")
	}
	if len(agents) > MaxRetryAgents {
		return st, Event{}, fmt.Errorf("%w: retry group %q: %d agents named, at most %d (name none to retry every agent that rolled back)",
			ErrBadAction, st.Group, len(agents), MaxRetryAgents)
	}
	var ids []AgentID
	for _, id := range agents {
		canon, err := ParseAgentID(string(id))
		if err != nil {
			return st, Event{}, fmt.Errorf("retry group %q: %w", st.Group, err)
		}
		if !slices.Contains(ids, canon) {
			ids = append(ids, canon)
		}
	}
	at := now.UTC()
	tokenAt := at
	if st.Retry.Token != "" {
		if prev, err := time.Parse(retryTokenLayout, st.Retry.Token); err == nil && !tokenAt.After(prev) {
			tokenAt = prev.Add(time.Nanosecond) // unique even if the clock went back
		}
	}
	st = st.Clone()
	st.Retry = RetryRequest{Token: tokenAt.Format(retryTokenLayout), Agents: ids, At: at, Note: truncate(note, 200)}
	who := fmt.Sprintf("every agent that rolled back from %s tries it once more", st.TargetVersion)
	if len(ids) == 1 {
		who = fmt.Sprintf("agent %s tries %s once more if it rolled back from it", ids[0], st.TargetVersion)
	} else if len(ids) > 1 {
		who = fmt.Sprintf("%d named agents try %s once more if they rolled back from it", len(ids), st.TargetVersion)
	}
	return st, newEvent(st.Group, EventOperator, st.State, st.State, operatorReason("retry", note)+" ("+who+")", now), nil
}

// RetryEligible lists, by id, the agents a retry of st with the named agents
// (none: every agent) would make try the target once more: those that
// rolled back from st's target. fleetctl uses it to say how many will.
func RetryEligible(st GroupStatus, agents []AgentView, named []AgentID) []AgentID {
	var out []AgentID
	for _, a := range agents {
		if rolledBackFrom(a, st.TargetVersion) && (len(named) == 0 || slices.Contains(named, a.ID)) {
			out = append(out, a.ID)
		}
	}
	slices.Sort(out)
	return out
}
