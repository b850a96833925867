package rollout

import (
	"fmt"
	"time"
)

// Issue 28, adaptive in flight (adaptive_in_flight: true).
//
// The rule. The group's in-flight bound (what max_in_flight alone makes
// W = InFlightWindow(max_in_flight, initial)) becomes B, kept in
// GroupStatus.Adaptive, with 1 ≤ B ≤ W at every step:
//
//   - B starts, when the group enters active, at a tenth of W rounded up,
//     or canary_count when larger (the canaries showed that many
//     at once works), never above W;
//   - B doubles (up to W) each time as many agents as B reached the
//     target since B last moved, with no new failure and no lag: slow
//     start, as TCP's;
//   - B halves (down to 1) when failed_count rose since B last moved, or
//     when the heartbeat lag (Input.HeartbeatLag: how far behind the
//     controller's view of the agents is, the bus's own backlog
//     included) exceeds the heartbeat interval: with a stale view,
//     failures are seen late, so fewer hosts should be exposed. It
//     halves at most once per heartbeat interval (a new observation
//     needs that long to arrive), so one burst of failures is one halving,
//     not one per step.
//
// Progress then keeps at most B agents in flight exactly as it keeps W
// (see Progress). Agents already in flight when B shrinks are not called
// back: nobody new starts until fewer than B are in flight.

// Adaptive causes: why the bound last moved.
const (
	AdaptiveStart    = "start"
	AdaptiveGrew     = "grew"
	AdaptiveFailures = "failures"
	AdaptiveLag      = "lag"
)

// AdaptiveCauses are the values of AdaptiveStatus.Cause.
var AdaptiveCauses = []string{AdaptiveStart, AdaptiveGrew, AdaptiveFailures, AdaptiveLag}

// AdaptiveStatus is where a group's adaptive in-flight bound stands
// (GroupStatus.Adaptive): absent without adaptive_in_flight, and before
// the group is active.
type AdaptiveStatus struct {
	// Bound is the most agents the group lets be in flight now.
	Bound int `json:"bound"`
	// Max is the bound max_in_flight alone gives (W), which Bound never
	// exceeds.
	Max int `json:"max"`
	// Cause (start, grew, failures, lag) and Reason say why Bound last
	// moved, and Since when.
	Cause  string    `json:"cause"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	// FailedMark and DoneMark are failed_count and the agents on the
	// target when Bound last moved.
	FailedMark int `json:"failed_mark"`
	DoneMark   int `json:"done_mark"`
}

// InitialAdaptiveBound is where the adaptive bound starts for a window of
// w agents and canary_count canaries: ⌈w/10⌉ or canaries if larger,
// within 1..w.
func InitialAdaptiveBound(w, canaries int) int {
	return min(max((w+9)/10, canaries, 1), max(w, 1))
}

// adaptiveStep moves the group's adaptive bound (see the rule above)
// before progress moves; onTarget is how many agents are on the target.
// It returns the bound, 0 when the group is not adaptive.
func (m *machine) adaptiveStep(onTarget int) int {
	st, in := &m.st, m.in
	if !m.gc.AdaptiveInFlight {
		st.Adaptive = nil
		return 0
	}
	w := InFlightWindow(m.gc.MaxInFlight, st.InitialCount)
	a := st.Adaptive
	if a == nil {
		b := InitialAdaptiveBound(w, len(st.Canaries))
		st.Adaptive = &AdaptiveStatus{Bound: b, Max: w, Cause: AdaptiveStart, Since: m.now, FailedMark: st.FailedCount, DoneMark: onTarget,
			Reason: fmt.Sprintf("starts at %d of max_in_flight's %d (a tenth, or canary_count if larger)", b, w)}
		return b
	}
	a.Max = w
	a.Bound = min(max(a.Bound, 1), w)
	a.FailedMark = min(a.FailedMark, st.FailedCount) // failed agents retried and succeeded
	a.DoneMark = min(a.DoneMark, onTarget)           // agents on the target vanished
	lagging := in.HeartbeatInterval > 0 && in.HeartbeatLag > in.HeartbeatInterval
	cooled := !m.now.Before(a.Since.Add(in.HeartbeatInterval))
	move := func(b int, cause, reason string) {
		a.Bound, a.Cause, a.Reason, a.Since = b, cause, reason, m.now
		a.FailedMark, a.DoneMark = st.FailedCount, onTarget
	}
	switch {
	case st.FailedCount > a.FailedMark:
		if cooled {
			move(max(a.Bound/2, 1), AdaptiveFailures, fmt.Sprintf("halved from %d: failed_count rose from %d to %d", a.Bound, a.FailedMark, st.FailedCount))
		}
	case lagging:
		if cooled {
			lag := fmt.Sprintf("heartbeats lag %s", in.HeartbeatLag.Round(time.Millisecond))
			if in.HeartbeatBacklog > 0 {
				lag += fmt.Sprintf(" (%d waiting to be read)", in.HeartbeatBacklog)
			}
			move(max(a.Bound/2, 1), AdaptiveLag, fmt.Sprintf("halved from %d: %s, more than the heartbeat interval %s", a.Bound, lag, in.HeartbeatInterval))
		}
	case a.Bound < w && onTarget-a.DoneMark >= a.Bound:
		move(min(2*a.Bound, w), AdaptiveGrew, fmt.Sprintf("doubled from %d: %d agents reached the target since it last moved, no new failure, no lag", a.Bound, onTarget-a.DoneMark))
	}
	return a.Bound
}

func (a *AdaptiveStatus) validate() error {
	switch {
	case a == nil:
		return nil
	case a.Bound < 0 || a.Max < 0 || a.FailedMark < 0 || a.DoneMark < 0:
		return fmt.Errorf("adaptive: bound %d, max %d, failed_mark %d and done_mark %d must not be negative", a.Bound, a.Max, a.FailedMark, a.DoneMark)
	case len(a.Cause) > 16:
		return fmt.Errorf("adaptive: cause longer than 16 bytes")
	}
	if err := ValidatePrintable(a.Cause); err != nil {
		return fmt.Errorf("adaptive: cause: %w", err)
	}
	if err := ValidatePrintable(a.Reason); err != nil {
		return fmt.Errorf("adaptive: reason: %w", err)
	}
	return nil
}
