package rollout

import "time"

// UnreachableIntervals is how many heartbeat intervals an agent may go
// without a heartbeat before it is unreachable. Three, not one: a
// heartbeat late by jitter or a lost message must not take an agent out of
// the rollout's counts.
const UnreachableIntervals = 3

// UnreachableAfter is how long without a heartbeat makes an agent
// unreachable when agents heartbeat every interval (0: never).
func UnreachableAfter(interval time.Duration) time.Duration {
	return max(interval, 0) * UnreachableIntervals
}

// Unreachable reports whether an agent last heard from at lastSeen is
// unreachable at now: no heartbeat for longer than UnreachableAfter(interval).
// It is the one rule behind the engine's counts (AgentView.Unreachable), the
// controller's metrics and what fleetctl and the dashboard show.
//
// An unreachable agent is present (it is not expired) but the rollout cannot
// tell what it does: it may be cut off while it installs through /v1/find.
// So the engine counts it neither in flight, nor failed, nor on the target;
// it is still present (only expiry takes an agent out of the count the
// freeze rule reads), and a canary that is unreachable is missing (see
// Next). It counts again from its next heartbeat.
func Unreachable(lastSeen, now time.Time, interval time.Duration) bool {
	after := UnreachableAfter(interval)
	return after > 0 && now.Sub(lastSeen) > after
}
