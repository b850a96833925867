package rollout

import (
	"fmt"
	"time"
)

// AgentView is what the controller knows of one present, established agent
// (seen for at least one heartbeat interval) from its latest heartbeat.
// Agents not yet established must be left out: they are counted by nothing.
type AgentView struct {
	ID AgentID
	// Hostname is the host name the agent's heartbeat gives ("" when not
	// known): halt and quarantine reasons name it beside the id (Name), as
	// an operator knows hosts by name.
	Hostname      string
	ActiveVersion string
	// Rollback and RollbackFrom: the agent's last update was rolled back
	// automatically, from RollbackFrom to ActiveVersion.
	Rollback     bool
	RollbackFrom string
	// Error is the last error the agent's updater hit ("" when none), and
	// ErrorOutput the last lines of its app's output at that failure (a
	// halt's event carries them).
	Error       string
	ErrorOutput string
	// StartTime is when the agent's most recent update attempt began.
	StartTime time.Time
	// UpdatingTo is the version the agent is installing right now, "" when
	// it is not installing.
	UpdatingTo string
	// Unreachable: no heartbeat for longer than UnreachableAfter (see
	// Unreachable); the fields above are from its last one, which may be
	// out of date.
	Unreachable bool
	// ErrorClass is Error's failure class (FailureRelease, FailureArtifact,
	// FailureInfrastructure; "" from an agent that does not classify, which
	// counts as a release failure) and ErrorCause its short cause.
	ErrorClass string
	ErrorCause string
	// Site is where the agent runs, from its heartbeat ("" when it names
	// none): halt reasons name the sites of the failures (see site.go).
	Site string
}

// Failure classes an agent reports with an error (pkg/install's
// FailureClass): only release failures count toward failure_threshold and
// canary judging; an artifact failure halts the group at once; an
// infrastructure failure (the network, the release site's availability, a
// full disk, a held lock) is retried by the agent and is not the
// release's fault.
const (
	FailureRelease        = "release"
	FailureArtifact       = "artifact"
	FailureInfrastructure = "infrastructure"
)

// blocked reports whether a's error is an infrastructure failure it will
// retry: neither failed nor healthy. Rollback does not matter: a host keeps
// rollback (from the version that was bad) through later attempts at other
// versions, and a rollback itself reports the release's class, never
// infrastructure (an interrupted install restores without it).
func blocked(a AgentView) bool {
	return a.ErrorClass == FailureInfrastructure && a.Error != ""
}

// CountAgents tallies agents into Counts the way fleet_stats reports them:
// per active version ("none" when empty), the number of agents, how many of
// them are unreachable, how many of the reachable ones are blocked on
// infrastructure (retrying), failed (rolled back or reporting another
// error) and are installing another version, and the lowest id.
func CountAgents(agents []AgentView) Counts {
	// A group runs a handful of versions: the tallies are kept in a
	// slice searched from the version last seen, and go into the map once
	// (a map lookup and store per agent was a tenth of a controller pass
	// at 250,000 agents).
	type tally struct {
		v  string
		vc VersionCount
	}
	var ts []tally
	last := -1
	for _, a := range agents {
		v := versionKey(a)
		if last < 0 || ts[last].v != v {
			last = -1
			for i := range ts {
				if ts[i].v == v {
					last = i
					break
				}
			}
			if last < 0 {
				ts = append(ts, tally{v: v})
				last = len(ts) - 1
			}
		}
		ts[last].vc.add(a)
	}
	c := make(Counts, len(ts))
	for _, t := range ts {
		c[t.v] = t.vc
	}
	return c
}

// Add counts one agent into c (the rule of CountAgents, for callers that
// tally without building a slice).
func (c Counts) Add(a AgentView) {
	v := versionKey(a)
	vc := c[v]
	vc.add(a)
	c[v] = vc
}

// versionKey is the Counts key a is counted under.
func versionKey(a AgentView) string {
	if a.ActiveVersion == "" {
		return NoVersion
	}
	return a.ActiveVersion
}

// add counts one agent of this version.
func (vc *VersionCount) add(a AgentView) {
	vc.Count++
	switch {
	case a.Unreachable:
		// Its last heartbeat is out of date: it is neither failed nor
		// installing as far as anyone knows.
		vc.Unreachable++
	default:
		switch {
		case blocked(a):
			vc.Blocked++
		case a.Rollback || a.Error != "":
			vc.FailedCount++
		}
		if a.UpdatingTo != "" {
			vc.Updating++
		}
	}
	if vc.LowestID == "" || a.ID < vc.LowestID {
		vc.LowestID = a.ID
	}
}

// The failure rules. An agent has failed the target when either
//
//   - it rolled back from the target (Rollback && RollbackFrom == target):
//     agentd never retries a version it rolled back from, so the agent is
//     settled on its old version for this target; or
//   - it is not on the target and reports an error from an update attempt
//     that began at or after the group started (the only update it can have
//     been told to make since then is to the target). Such an agent may
//     still retry and succeed, after which it no longer counts.
//
// Towards failure_threshold count only failures whose attempt began at or
// after the group's FailuresSince (its start, or the last operator reset), so
// a reset forgives what was before it and a rollback left over from an
// earlier rollout of the same target does not halt this one. A zero
// StartTime counts as recent: an unknown time must not hide a failure.

// rolledBackFrom reports whether a rolled back from target (at any time).
func rolledBackFrom(a AgentView, target string) bool {
	return a.Rollback && a.RollbackFrom == target && a.ActiveVersion != target
}

// failedTarget reports whether a failed target in an attempt that began at
// or after since. An unreachable agent has not failed: what it last said is
// out of date.
func failedTarget(a AgentView, target string, since time.Time) bool {
	if a.Unreachable {
		return false
	}
	recent := a.StartTime.IsZero() || !a.StartTime.Before(since)
	if !recent {
		return false
	}
	if rolledBackFrom(a, target) {
		return true
	}
	return a.Error != "" && a.ActiveVersion != target && !blocked(a)
}

// badArtifact reports whether a, not on target, reports that the release
// site served it a bad artifact (checksum, signature, hostile archive) in
// an attempt that began at or after since: the group halts at once, since
// every host would fetch the same bytes.
func badArtifact(a AgentView, target string, since time.Time) bool {
	return failedTarget(a, target, since) && a.ErrorClass == FailureArtifact && !rolledBackFrom(a, target)
}

// healthyOn reports whether a runs target without a reported problem.
func healthyOn(a AgentView, target string) bool {
	return a.ActiveVersion == target && a.Error == ""
}

// maxNameHost bounds the host name Name quotes.
const maxNameHost = 48

// Name is the agent as a reason names it: its id and, when its heartbeat
// gives one, its host name, as "ID (web-17)".
func (a AgentView) Name() string {
	if a.Hostname == "" || a.Hostname == string(a.ID) {
		return string(a.ID)
	}
	return string(a.ID) + " (" + truncate(a.Hostname, maxNameHost) + ")"
}

func describeFailure(a AgentView, target string) string {
	if rolledBackFrom(a, target) {
		return fmt.Sprintf("rolled back from %s to %s", target, a.ActiveVersion)
	}
	class := ""
	if a.ErrorClass != "" {
		class = " (" + a.ErrorClass
		if a.ErrorCause != "" {
			class += ": " + truncate(a.ErrorCause, 64)
		}
		class += ")"
	}
	return fmt.Sprintf("error on %s%s: %s", versionOrNone(a.ActiveVersion), class, truncate(a.Error, 200))
}

func versionOrNone(v string) string {
	if v == "" {
		return NoVersion
	}
	return v
}
