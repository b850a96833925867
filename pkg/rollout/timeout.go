package rollout

import (
	"fmt"
	"time"
)

// timedOut reports whether a is still updating to target longer than
// timeout after it reported starting (a release failure: see
// GroupConfig.UpdateTimeout). The clock starts at the attempt's StartTime,
// or at since (the group's start or the last operator reset) when the
// attempt began before it: a reset gives a stuck agent a fresh timeout as
// it forgives older failures. An agent that reports no start time cannot
// be timed, and an unreachable one is not judged at all.
func timedOut(a AgentView, target string, since time.Time, timeout time.Duration, now time.Time) bool {
	if a.Unreachable || a.UpdatingTo != target || a.ActiveVersion == target || a.StartTime.IsZero() || timeout <= 0 {
		return false
	}
	start := a.StartTime
	if start.Before(since) {
		start = since
	}
	return now.Sub(start) >= timeout
}

func describeTimeout(a AgentView, gc GroupConfig) string {
	return fmt.Sprintf("timed out: updating to %s since %s, longer than update_timeout %s", a.UpdatingTo,
		a.StartTime.UTC().Format(time.RFC3339), Duration(gc.EffectiveUpdateTimeout()))
}
