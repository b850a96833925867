package view

import (
	"sort"
	"strings"
	"time"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Agent classes: what an agent is doing, in one word, for counts, filters
// and metric labels.
const (
	AgentOK          = "ok"
	AgentUpdating    = "updating"
	AgentFailed      = "failed"
	AgentBlocked     = "blocked"
	AgentRolledBack  = "rolled_back"
	AgentUnreachable = "unreachable"
)

// AgentClasses are the classes, in the order a filter lists them.
var AgentClasses = []string{AgentOK, AgentUpdating, AgentBlocked, AgentFailed, AgentRolledBack, AgentUnreachable}

// AgentClass is the agent's class at now, for agents that heartbeat every
// interval: unreachable by the rollout's rule (rollout.Unreachable: no
// heartbeat for longer than three intervals; interval 0: never), else what
// its last heartbeat says: blocked is an infrastructure failure the agent
// retries (not a failure of the release).
func AgentClass(h *heartbeat.Heartbeat, lastSeen, now time.Time, interval time.Duration) string {
	switch {
	case rollout.Unreachable(lastSeen, now, interval):
		return AgentUnreachable
	case h.Rollback:
		return AgentRolledBack
	case h.Error != "" && h.ErrorClass == heartbeat.ClassInfrastructure:
		// Retrying by itself: the rollout counts it neither failed nor
		// healthy (rollout's blocked).
		return AgentBlocked
	case h.Error != "":
		return AgentFailed
	case h.UpdatingTo != "":
		return AgentUpdating
	}
	return AgentOK
}

// AgentState is the STATE cell of an agent: what its update is doing or
// last did. now dates an install in progress.
func AgentState(h *heartbeat.Heartbeat, now time.Time) string {
	switch {
	case h.UpdatingTo != "":
		s := "updating → " + h.UpdatingTo
		if !h.StartTime.IsZero() {
			s += " (" + Age(now, h.StartTime) + ")"
		}
		return s
	case h.ErrorClass == heartbeat.ClassInfrastructure || h.ErrorClass == heartbeat.ClassArtifact:
		return failureState(h)
	case h.Rollback:
		return "rolled back from " + h.RollbackFrom
	case h.Error != "":
		return "error"
	default:
		return "ok"
	}
}

// failureState is the STATE of an agent whose last install failed for a
// reason other than the release: "blocked: disk full" while it waits to
// retry (infrastructure), "artifact: checksum mismatch" while it refuses
// what the release site served. It outranks an older rollback: it is what
// the agent is doing now.
func failureState(h *heartbeat.Heartbeat) string {
	prefix := "blocked"
	if h.ErrorClass == heartbeat.ClassArtifact {
		prefix = "artifact"
	}
	cause := h.ErrorCause
	if cause == "" {
		cause = h.ErrorClass
	}
	return prefix + ": " + cause
}

// AgentReason is why the agent's last update failed, in its own words:
// its error, less the "rolled back from V: " its state already says; ""
// when it reports none. Free text from the host: escape it to show it.
func AgentReason(h *heartbeat.Heartbeat) string {
	if h.Error == "" {
		return ""
	}
	if h.Rollback {
		if r, ok := strings.CutPrefix(h.Error, "rolled back from "+h.RollbackFrom+": "); ok {
			return r
		}
	}
	return h.Error
}

// AgentFailure is one failed agent of a group as status lists it: who
// (id and host name), what it runs and its state, why (AgentReason) and
// the last lines of its app's output at the failure.
type AgentFailure struct {
	ID       rollout.AgentID `json:"id"`
	Hostname string          `json:"hostname"`
	Version  string          `json:"version"`
	State    string          `json:"state"`
	Reason   string          `json:"reason"`
	Output   string          `json:"output,omitempty"`
}

// MaxGroupFailures is how many failed agents status lists per group; the
// rest are counted (fleetctl agents ls --group G lists them all).
const MaxGroupFailures = 5

// GroupFailures are the failed agents (class failed or rolled_back: not
// blocked on infrastructure, not unreachable) among hbs, the last
// heartbeats of one group's agents with when each was stored, at most
// MaxGroupFailures by id, and how many there are in all.
func GroupFailures(hbs []heartbeat.Heartbeat, lastSeen []time.Time, now time.Time, interval time.Duration) ([]AgentFailure, int) {
	var out []AgentFailure
	for i := range hbs {
		h := &hbs[i]
		switch AgentClass(h, lastSeen[i], now, interval) {
		case AgentFailed, AgentRolledBack:
			out = append(out, AgentFailure{ID: h.AgentID, Hostname: h.Hostname, Version: h.Version(), State: AgentState(h, now),
				Reason: AgentReason(h), Output: h.ErrorOutput})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out[:min(len(out), MaxGroupFailures)], len(out)
}
