package rollout

import (
	"math"
	"slices"
)

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
	// Pending are the id fractions, in increasing order, of the present
	// agents that are not canaries of the group and have not finished with
	// the target: neither on it nor rolled back from it (an agent that rolled
	// back never retries, so it is settled). Those below Prev are in flight
	// (Decide tells them to update), the others wait for progress.
	Pending []float64
	// PendingCanaries is the number of present canaries of the group that
	// have not finished with the target either. Decide tells canaries to
	// update whatever the progress, so all of them are in flight.
	PendingCanaries int
	// Released is the number of present agents below Prev that are out of
	// the window without being on the target: unreachable (what they do is
	// not known) or timed out (update_timeout). They count in the formula
	// as if they had finished, or the places they held would stay taken.
	Released int
	// Blocked is how many of the agents in flight at Prev (Pending below
	// Prev, and PendingCanaries) are blocked on infrastructure, retrying
	// by themselves. They keep their places in the window (their next try
	// may work), but they do not move the formula on: when every agent in
	// flight is blocked, the guard lets the next waiting agent go as when
	// nothing is in flight, or one host whose disk stays full would stop
	// the group for good.
	Blocked int
	// Prev is the progress recorded so far for this target.
	Prev float64
	// Bound, when positive, lowers the in-flight bound below
	// InFlightWindow (adaptive_in_flight: adaptive.go); it never raises
	// it.
	Bound int
	// LimitStarts: at most MaxStarts more pending agents may start in this
	// step (the group's rate: rate.go), on top of the in-flight bound.
	LimitStarts bool
	MaxStarts   int
}

// InFlightWindow is the most agents Progress lets be in flight at once:
// max_in_flight × initial, rounded down, and at least 1 so that a small
// group still moves. The 1e-9 absorbs binary rounding of decimal
// percentages (1.4% of 11000 is 154, not 153).
func InFlightWindow(maxInFlight Percent, initial int) int {
	return max(int(math.Floor(maxInFlight.Of(max(initial, 1))+1e-9)), 1)
}

// Progress returns the group's new progress and whether it is frozen.
//
// An agent is in flight at progress p when Decide tells it to update (a
// canary, or id fraction < p) and it has not finished with the target (see
// Pending). Let W = InFlightWindow(max_in_flight, initial). Progress is
//
//	max(Prev, min(formula, cap))
//
// where formula is DESIGN §3.4's
//
//	(max_in_flight × initial + on_target + released) / initial
//
// (released: see Released; DESIGN has no such agents, so 0 there) the
// upper limit: progress never runs further ahead of the agents on the
// target than the window. That alone keeps about W agents in flight, on
// average only: the number of random ids below a fraction varies, and agents
// on the target above progress (canaries, hosts installed with the target)
// count in on_target without using the window. cap makes the bound exact:
// it is the largest progress at which at most W agents are in flight, the
// fraction of the (k+1)-th lowest waiting agent (Pending at or above Prev)
// where k = W − in flight at Prev is how many more may start, so that only
// the k below it do; 1 when k lets every waiting agent go. When W or more
// are in flight already, cap is Prev: progress holds until some of them
// finish. (More than W can be in flight only through agents that came back
// or joined with ids already below progress, which progress cannot take
// back; they are counted, so nobody new starts while they are in flight.)
//
// When nothing is in flight (or all that is in flight is blocked, see
// Blocked) and the lowest waiting agent is at or above that, progress is
// raised just above its fraction (Decide tells an agent to update when its
// fraction is strictly below progress): the next agent can always go even
// if no id falls in the window, so there is no statistical deadlock. The
// guard needs a free place (k ≥ 1, always so when nothing is in flight, as
// W ≥ 1), so it never breaks the bound.
//
// Issue 28: a positive Bound (adaptive_in_flight) takes W's place, in the
// formula and the cap, when it is lower; LimitStarts caps k, the agents
// that may start now, at MaxStarts (what the rate's period has left). Both
// only lower k, so neither ever breaks the other's bound.
//
// When fewer than initial − max_in_flight × initial agents are present, too
// many vanished to tell in-flight from lost, and progress is frozen at Prev.
// Grouped strategy is progress 1 at once, with no backpressure. Progress
// never goes below Prev and stays in [0, 1]. With nothing pending the cap is
// 1 and progress is the formula, so done detection sees what it always did.
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
	pending := in.Pending
	if !slices.IsSorted(pending) {
		pending = slices.Sorted(slices.Values(pending))
	}
	// Pending[:started] are in flight at prev; the rest wait.
	started, _ := slices.BinarySearch(pending, prev)
	inFlight := max(in.PendingCanaries, 0) + started
	w := InFlightWindow(in.MaxInFlight, initial)
	formulaWindow := window
	if in.Bound > 0 && in.Bound < w {
		w, formulaWindow = in.Bound, float64(in.Bound)
	}
	p := (formulaWindow + float64(in.OnTarget) + float64(max(in.Released, 0))) / float64(initial)
	k := w - inFlight
	if in.LimitStarts {
		k = min(k, max(in.MaxStarts, 0))
	}
	switch {
	case k <= 0:
		p = prev // the window is full: hold
	case k < len(pending)-started:
		p = min(p, pending[started+k])
	}
	moving := inFlight - max(in.Blocked, 0) // in flight and not blocked
	if moving <= 0 && k > 0 && started < len(pending) && pending[started] >= p {
		p = math.Nextafter(pending[started], math.Inf(1))
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
