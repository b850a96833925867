package rollout

import (
	"math"
	"testing"
)

func TestProgress(t *testing.T) {
	base := ProgressInput{Strategy: StrategyBackpressure, MaxInFlight: 20, Initial: 100, Present: 100, LowestWaiting: 0.001}
	tests := []struct {
		name       string
		edit       func(*ProgressInput)
		want       float64
		wantFrozen bool
	}{
		{name: "start: the max_in_flight window", edit: func(*ProgressInput) {}, want: 0.2},
		{name: "window above the updated", edit: func(in *ProgressInput) { in.OnTarget = 30 }, want: 0.5},
		{name: "clamped to 1", edit: func(in *ProgressInput) { in.OnTarget = 95 }, want: 1},
		{name: "uneven window", edit: func(in *ProgressInput) { in.Initial, in.Present, in.OnTarget = 37, 37, 3 }, want: (0.2*37 + 3) / 37},
		{name: "lowest waiting id above the window", edit: func(in *ProgressInput) { in.MaxInFlight, in.LowestWaiting = 1, 0.3 }, want: math.Nextafter(0.3, 2)},
		{name: "lowest waiting id exactly at the window", edit: func(in *ProgressInput) { in.LowestWaiting = 0.2 }, want: math.Nextafter(0.2, 2)},
		{name: "lowest waiting id inside the window", edit: func(in *ProgressInput) { in.LowestWaiting = 0.1 }, want: 0.2},
		{name: "nobody waiting", edit: func(in *ProgressInput) { in.LowestWaiting, in.OnTarget = -1, 50 }, want: 0.7},
		{name: "frozen below initial minus window", edit: func(in *ProgressInput) { in.Present, in.Prev = 79, 0.4 }, want: 0.4, wantFrozen: true},
		{name: "not frozen at the floor", edit: func(in *ProgressInput) { in.Present, in.OnTarget = 80, 10 }, want: 0.3},
		{name: "never backwards", edit: func(in *ProgressInput) { in.Prev, in.OnTarget = 0.6, 10 }, want: 0.6},
		{name: "never backwards when agents vanish", edit: func(in *ProgressInput) { in.Prev, in.Present, in.OnTarget = 0.5, 85, 20 }, want: 0.5},
		{name: "grouped is 1 at once", edit: func(in *ProgressInput) { in.Strategy = StrategyGrouped }, want: 1},
		{name: "grouped ignores vanished agents", edit: func(in *ProgressInput) { in.Strategy, in.Present = StrategyGrouped, 3 }, want: 1},
		{name: "100% in flight never freezes", edit: func(in *ProgressInput) { in.MaxInFlight, in.Present = 100, 0 }, want: 1},
		{name: "no initial count does not divide by zero", edit: func(in *ProgressInput) { in.Initial, in.Present = 0, 3 }, want: 0.2},
		{name: "nobody present is frozen", edit: func(in *ProgressInput) { in.Present, in.Prev = 0, 0.3 }, want: 0.3, wantFrozen: true},
		{name: "previous above 1 clamped", edit: func(in *ProgressInput) { in.Prev = 7 }, want: 1},
		{name: "previous NaN ignored", edit: func(in *ProgressInput) { in.Prev = math.NaN() }, want: 0.2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base
			tt.edit(&in)
			got, frozen := Progress(in)
			if got != tt.want || frozen != tt.wantFrozen {
				t.Errorf("Progress(%+v) = %v, %v; want %v, %v", in, got, frozen, tt.want, tt.wantFrozen)
			}
		})
	}
}

// TestProgressGuardLetsLowestAgentGo: when the window holds no id, exactly
// the lowest waiting agent is told to update, nobody above it.
func TestProgressGuardLetsLowestAgentGo(t *testing.T) {
	lowest, next := idAt(0.5), idAt(0.5+math.Pow(2, -53))
	p, _ := Progress(ProgressInput{Strategy: StrategyBackpressure, MaxInFlight: 1, Initial: 10, Present: 10, LowestWaiting: lowest.Fraction()})
	st := GroupStatus{V: 1, State: StateActive, TargetVersion: "2.0.0", Progress: p}
	spec := DefaultSpec("1.0.0", "2.0.0")
	if _, update := Decide(lowest, spec, st, ModeEnabled); !update {
		t.Errorf("lowest waiting agent (%v) not told to update at progress %v", lowest.Fraction(), p)
	}
	if _, update := Decide(next, spec, st, ModeEnabled); update {
		t.Errorf("agent above the lowest (%v) told to update at progress %v", next.Fraction(), p)
	}
}
