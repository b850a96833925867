package rollout

import "math"

// ProgressInput is what backpressure progress depends on (DESIGN §3.4).
// Counts are of present, established agents of the group.
type ProgressInput struct {
	Strategy    Strategy
	MaxInFlight Percent
	// Initial is the number of agents present when the group started.
	Initial int
	// Present is the number of agents present now; OnTarget of them run the
	// target version.
	Present  int
	OnTarget int
	// LowestWaiting is the id fraction of the lowest present agent that is
	// neither on the target nor rolled back from it; negative when none.
	LowestWaiting float64
	// Prev is the progress recorded so far for this target.
	Prev float64
}

// Progress returns the group's new progress and whether it is frozen:
//
//	progress = (max_in_flight × initial + on_target) / initial
//
// so that about max_in_flight × initial agents are told to update and are
// not yet on the target. When the lowest waiting agent's id fraction is at or
// above that, progress is raised just above it (Decide tells an agent to
// update when its fraction is strictly below progress), so the next agent can
// always go even if no id falls in the window: no statistical deadlock.
// Agents that rolled back from the target never retry it and are not waiting.
// When fewer than initial − max_in_flight × initial agents are present, too
// many vanished to tell in-flight from lost, and progress is frozen at Prev.
// Grouped strategy is progress 1 at once. Progress never goes below Prev and
// stays in [0, 1].
func Progress(in ProgressInput) (progress float64, frozen bool) {
	prev := clamp01(in.Prev)
	if in.Strategy == StrategyGrouped {
		return 1, false
	}
	initial := max(in.Initial, 1) // Next never starts a group without agents
	window := in.MaxInFlight.Of(initial)
	if float64(in.Present) < float64(initial)-window {
		return prev, true
	}
	p := (window + float64(in.OnTarget)) / float64(initial)
	if in.LowestWaiting >= 0 && in.LowestWaiting >= p {
		p = math.Nextafter(in.LowestWaiting, math.Inf(1))
	}
	return max(clamp01(p), prev), false
}

func clamp01(f float64) float64 {
	switch {
	case math.IsNaN(f) || f < 0:
		return 0
	case f > 1:
		return 1
	}
	return f
}
