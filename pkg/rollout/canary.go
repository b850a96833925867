package rollout

import (
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
