package rollout

import (
	"math"
	"slices"
	"testing"
)

// spread returns the id fractions (i+0.5)/n for i in [from, to): the agents
// from to to-1 of n evenly spread agents, in increasing order.
func spread(from, to, n int) []float64 {
	var out []float64
	for i := from; i < to; i++ {
		out = append(out, (float64(i)+0.5)/float64(n))
	}
	return out
}

// without returns fs without the elements at the given indexes.
func without(fs []float64, idx ...int) []float64 {
	var out []float64
	for i, f := range fs {
		if !slices.Contains(idx, i) {
			out = append(out, f)
		}
	}
	return out
}

func TestProgress(t *testing.T) {
	// 100 agents, none on the target yet, ids evenly spread: W = 20.
	base := ProgressInput{Strategy: StrategyBackpressure, MaxInFlight: 20, Initial: 100, Present: 100, Pending: spread(0, 100, 100)}
	// cluster: 40 ids just above 0.3, then 30 spread up to 1.
	cluster := append(spread(0, 40, 4000), spread(70, 100, 100)...)
	for i := range 40 {
		cluster[i] += 0.3
	}
	tests := []struct {
		name       string
		edit       func(*ProgressInput)
		want       float64
		wantFrozen bool
	}{
		{name: "start: the max_in_flight window", edit: func(*ProgressInput) {}, want: 0.2},
		{name: "window above the updated", edit: func(in *ProgressInput) { in.OnTarget, in.Pending = 30, spread(30, 100, 100) }, want: 0.5},
		{name: "clamped to 1", edit: func(in *ProgressInput) { in.OnTarget, in.Pending = 95, spread(95, 100, 100) }, want: 1},
		{name: "uneven window", edit: func(in *ProgressInput) {
			in.Initial, in.Present, in.OnTarget, in.Pending = 37, 37, 3, spread(3, 37, 37)
		}, want: (0.2*37 + 3) / 37},
		{name: "lowest waiting id above the window", edit: func(in *ProgressInput) { in.MaxInFlight, in.Pending = 1, []float64{0.3, 0.4} }, want: math.Nextafter(0.3, 2)},
		{name: "lowest waiting id exactly at the window", edit: func(in *ProgressInput) { in.Pending = []float64{0.2, 0.25} }, want: math.Nextafter(0.2, 2)},
		{name: "lowest waiting id inside the window", edit: func(in *ProgressInput) { in.Pending = []float64{0.1, 0.5} }, want: 0.2},
		{name: "nobody waiting", edit: func(in *ProgressInput) { in.Pending, in.OnTarget = nil, 50 }, want: 0.7},
		{name: "frozen below initial minus window", edit: func(in *ProgressInput) { in.Present, in.Prev = 79, 0.4 }, want: 0.4, wantFrozen: true},
		{name: "not frozen at the floor", edit: func(in *ProgressInput) { in.Present, in.OnTarget, in.Pending = 80, 10, spread(10, 80, 100) }, want: 0.3},
		{name: "never backwards", edit: func(in *ProgressInput) { in.Prev, in.OnTarget, in.Pending = 0.6, 10, spread(10, 100, 100) }, want: 0.6},
		{name: "never backwards when agents vanish", edit: func(in *ProgressInput) {
			in.Prev, in.Present, in.OnTarget, in.Pending = 0.5, 85, 20, spread(35, 100, 100)
		}, want: 0.5},
		{name: "grouped is 1 at once", edit: func(in *ProgressInput) { in.Strategy = StrategyGrouped }, want: 1},
		// 30 on the target, 10 below progress 0.4 unreachable or timed out,
		// none in flight: the window goes above them to 0.6.
		{name: "released agents do not keep the window shut", edit: func(in *ProgressInput) {
			in.Prev, in.OnTarget, in.Released, in.Pending = 0.4, 30, 10, spread(40, 100, 100)
		}, want: 0.6},
		{name: "without them counted, the window stays shut by them", edit: func(in *ProgressInput) {
			in.Prev, in.OnTarget, in.Pending = 0.4, 30, spread(40, 100, 100)
		}, want: 0.5},
		{name: "released agents never let more than the window in flight", edit: func(in *ProgressInput) {
			in.Prev, in.OnTarget, in.Released, in.Pending = 0.4, 30, 60, spread(40, 100, 100)
		}, want: spread(40, 100, 100)[20]}, // the cap: the 21st waiting agent
		{name: "grouped ignores vanished agents", edit: func(in *ProgressInput) { in.Strategy, in.Present = StrategyGrouped, 3 }, want: 1},
		{name: "grouped ignores the in-flight cap", edit: func(in *ProgressInput) { in.Strategy, in.Prev = StrategyGrouped, 0.5 }, want: 1},
		{name: "100% in flight never freezes", edit: func(in *ProgressInput) { in.MaxInFlight, in.Present, in.Pending = 100, 0, nil }, want: 1},
		{name: "no initial count does not divide by zero", edit: func(in *ProgressInput) { in.Initial, in.Present, in.Pending = 0, 3, []float64{0.1, 0.5, 0.9} }, want: 0.2},
		{name: "nobody present is frozen", edit: func(in *ProgressInput) { in.Present, in.Prev = 0, 0.3 }, want: 0.3, wantFrozen: true},
		{name: "previous above 1 clamped", edit: func(in *ProgressInput) { in.Prev = 7 }, want: 1},
		{name: "previous NaN ignored", edit: func(in *ProgressInput) { in.Prev = math.NaN() }, want: 0.2},

		// The in-flight cap: at most W = 20 pending agents below progress.
		{
			// The formula (0.5) would let all 40 clustered agents go.
			name: "cap: ids clustered just above progress", edit: func(in *ProgressInput) { in.Prev, in.OnTarget, in.Pending = 0.3, 30, cluster },
			want: cluster[20],
		},
		{
			// 5 canaries on the target at 0.505, 0.605, …: the formula (0.25)
			// counts them and would let 25 agents go.
			name: "cap: canaries on target above progress", edit: func(in *ProgressInput) { in.OnTarget, in.Pending = 5, without(spread(0, 100, 100), 50, 60, 70, 80, 90) },
			want: 0.205,
		},
		{
			name: "cap: canaries still updating use the window", edit: func(in *ProgressInput) {
				in.PendingCanaries, in.Pending = 5, without(spread(0, 100, 100), 50, 60, 70, 80, 90)
			},
			want: 0.155,
		},
		{
			// 20 in flight below 0.2; 30 hosts installed with the target at
			// the top of the id space lift the formula to 0.5.
			name: "cap: all in flight holds progress", edit: func(in *ProgressInput) { in.Prev, in.OnTarget, in.Pending = 0.2, 30, spread(0, 70, 100) },
			want: 0.2,
		},
		{
			// 30 came back below progress 0.3: more than the window.
			name: "cap: over the window holds progress", edit: func(in *ProgressInput) { in.Prev, in.OnTarget = 0.3, 30 },
			want: 0.3,
		},
		{
			// 19 in flight below 0.2: the one at 0.205 may go, not the one
			// at 0.215.
			name: "cap: one slot left lets one more go", edit: func(in *ProgressInput) { in.Prev, in.OnTarget, in.Pending = 0.2, 30, spread(1, 70, 100) },
			want: 0.215,
		},
		{
			// W = 50 ≥ the 30 pending: the cap is 1, progress the formula.
			name: "cap: everyone allowed", edit: func(in *ProgressInput) { in.MaxInFlight, in.OnTarget, in.Pending = 50, 40, spread(40, 70, 100) },
			want: 0.9,
		},
		{
			name: "cap: everyone allowed reaches 1", edit: func(in *ProgressInput) { in.MaxInFlight, in.OnTarget, in.Pending = 50, 70, spread(70, 100, 100) },
			want: 1,
		},
		{
			// 1% of 250 is 2.5: W = 2; the formula (0.01) would let the
			// three at 0.4/250, 1.4/250 and 2.4/250 go.
			name: "cap: the window is rounded down", edit: func(in *ProgressInput) {
				in.MaxInFlight, in.Initial, in.Present, in.Pending = 1, 250, 250, nil
				for i := range 250 {
					in.Pending = append(in.Pending, (float64(i)+0.4)/250)
				}
			},
			want: 2.4 / 250,
		},
		{
			// The guard only lets the lowest go when nothing is in flight.
			name: "cap: guard waits for an updating canary", edit: func(in *ProgressInput) { in.MaxInFlight, in.PendingCanaries, in.Pending = 1, 1, []float64{0.3, 0.4} },
			want: 0,
		},
		// One host in ten blocked for good (its disk is full) at 0.05, in
		// flight below progress 0.3; the nine others wait above the
		// formula's 0.3. The guard must not wait for the blocked host.
		{
			name: "guard: only blocked agents in flight lets the next go", edit: func(in *ProgressInput) {
				in.MaxInFlight, in.Initial, in.Present, in.Prev, in.Blocked = 30, 10, 10, 0.3, 1
				in.Pending = append([]float64{0.05}, spread(11, 20, 20)...)
			},
			want: math.Nextafter(spread(11, 20, 20)[0], 2),
		},
		{
			// The same with the blocked host not known as blocked: it
			// would finish, so progress waits (what the group did before).
			name: "guard: an agent in flight that may finish is waited for", edit: func(in *ProgressInput) {
				in.MaxInFlight, in.Initial, in.Present, in.Prev = 30, 10, 10, 0.3
				in.Pending = append([]float64{0.05}, spread(11, 20, 20)...)
			},
			want: 0.3,
		},
		{
			// A blocked host and one installing: the installing one moves
			// the formula on when it finishes.
			name: "guard: a blocked agent beside a moving one waits", edit: func(in *ProgressInput) {
				in.MaxInFlight, in.Initial, in.Present, in.Prev, in.Blocked = 30, 10, 10, 0.3, 1
				in.Pending = append([]float64{0.05, 0.1}, spread(11, 20, 20)...)
			},
			want: 0.3,
		},
		{
			// Three blocked fill the window of 3: nobody more may go.
			name: "guard: a window full of blocked agents holds", edit: func(in *ProgressInput) {
				in.MaxInFlight, in.Initial, in.Present, in.Prev, in.Blocked = 30, 10, 10, 0.3, 3
				in.Pending = append([]float64{0.05, 0.1, 0.2}, spread(11, 20, 20)...)
			},
			want: 0.3,
		},
		{
			name: "cap: pending in any order", edit: func(in *ProgressInput) {
				in.Prev, in.OnTarget, in.Pending = 0.3, 30, slices.Clone(cluster)
				slices.Reverse(in.Pending)
			},
			want: cluster[20],
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base
			tt.edit(&in)
			got, frozen := Progress(in)
			if got != tt.want || frozen != tt.wantFrozen {
				t.Errorf("Progress(%+v) = %v, %v; want %v, %v", in, got, frozen, tt.want, tt.wantFrozen)
			}
			if n := countBelow(in.Pending, got) + in.PendingCanaries; !frozen && got > in.Prev && n > InFlightWindow(in.MaxInFlight, in.Initial) && in.Strategy != StrategyGrouped {
				t.Errorf("progress %v moved and leaves %d in flight, more than the window", got, n)
			}
		})
	}
}

func countBelow(fs []float64, p float64) int {
	n := 0
	for _, f := range fs {
		if f < p {
			n++
		}
	}
	return n
}

func TestInFlightWindow(t *testing.T) {
	tests := []struct {
		pct     Percent
		initial int
		want    int
	}{
		{20, 100, 20},
		{1, 250, 2},
		{1, 50, 1},  // at least 1
		{20, 0, 1},  // no initial count
		{100, 7, 7}, // everyone
		{1.4, 11000, 154},
		{0.7 * 10, 11000, 770},
		{33.3, 1000, 333},
	}
	for _, tt := range tests {
		if got := InFlightWindow(tt.pct, tt.initial); got != tt.want {
			t.Errorf("InFlightWindow(%v, %d) = %d, want %d", tt.pct, tt.initial, got, tt.want)
		}
	}
}

// TestProgressGuardLetsLowestAgentGo: when the window holds no id, exactly
// the lowest waiting agent is told to update, nobody above it.
func TestProgressGuardLetsLowestAgentGo(t *testing.T) {
	lowest, next := idAt(0.5), idAt(0.5+math.Pow(2, -53))
	p, _ := Progress(ProgressInput{Strategy: StrategyBackpressure, MaxInFlight: 1, Initial: 10, Present: 10,
		Pending: []float64{lowest.Fraction(), next.Fraction()}})
	st := GroupStatus{V: 1, State: StateActive, TargetVersion: "2.0.0", Progress: p}
	spec := DefaultSpec("1.0.0", "2.0.0")
	if _, update := Decide(lowest, spec, st, ModeEnabled); !update {
		t.Errorf("lowest waiting agent (%v) not told to update at progress %v", lowest.Fraction(), p)
	}
	if _, update := Decide(next, spec, st, ModeEnabled); update {
		t.Errorf("agent above the lowest (%v) told to update at progress %v", next.Fraction(), p)
	}
}
