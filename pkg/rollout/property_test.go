package rollout

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestPropertyBackpressure drives one group through many random histories:
// installs land or roll back at random, agents vanish and come back. After
// every step it checks that progress never decreases and stays in [0, 1],
// and that the agents Decide tells to update that are not on the target yet
// (leaving out those that rolled back from it, which never will be) are at
// most max_in_flight × initial_count, plus the one lowest-id agent the
// deadlock guard lets through, in the active state; at most the canaries in
// the canary state.
//
// Two things the §3.4 formula counts are outside that window and are added
// to the bound: canaries already on the target whose id is above progress
// (the formula counts every agent on the target, wherever its id is), none
// when canary_count is 0. And ids are spread evenly over the id space, as
// in a large fleet: with n random ids the number below progress p is
// binomial, so a real fleet's in-flight count is max_in_flight × n only on
// average (±√(p·n) or so).
func TestPropertyBackpressure(t *testing.T) {
	histories := 200
	if testing.Short() {
		histories = 50
	}
	var done, halted, frozen, steps int
	for seed := range uint64(histories) {
		r := rand.New(rand.NewPCG(seed, 0x5eed))
		g := DefaultGroup("g")
		g.MaxInFlight = []Percent{1, 5, 10, 20, 33, 50, 100}[r.IntN(7)]
		g.CanaryCount = r.IntN(6)
		g.FailureThreshold = Percent(r.IntN(30))
		g.MinHealthyTime = Duration(time.Duration(r.IntN(3)) * 5 * time.Minute)
		cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{g}}
		spec := DefaultSpec(v1, v2)
		spec.Schedule = ScheduleImmediate
		if r.IntN(8) == 0 {
			spec.Strategy = StrategyGrouped
		}
		n := 5 + r.IntN(250)
		type agent struct {
			AgentView
			present, updating, fails bool
		}
		agents := make([]*agent, n)
		for i, id := range spreadIDs(n, r.Float64()) {
			agents[i] = &agent{AgentView: AgentView{ID: id, ActiveVersion: v1}, present: true}
		}
		pLand := 0.1 + 0.9*r.Float64()
		pFail := 0.1 * r.Float64()
		pVanish := 0.05 * r.Float64()
		pReturn := r.Float64()

		now := time.Date(2024, 3, 4, 10, 0, 0, 0, time.UTC)
		var st GroupStatus
		sawFrozen := false
		for step := range 400 {
			var views []AgentView
			for _, a := range agents {
				if a.present {
					views = append(views, a.AgentView)
				}
			}
			next, _ := Next(Input{Config: cfg, Group: "g", Spec: spec, Prev: st, Agents: views, Counts: CountAgents(views), Now: now})
			if next.Progress < st.Progress || next.Progress < 0 || next.Progress > 1 {
				t.Fatalf("seed %d step %d: progress %v after %v", seed, step, next.Progress, st.Progress)
			}
			st = next
			steps++
			sawFrozen = sawFrozen || st.Frozen != ""

			inFlight, canariesAbove := 0, 0
			for _, a := range agents {
				if !a.present || a.ActiveVersion == v2 || rolledBackFrom(a.AgentView, v2) {
					continue
				}
				if v, update := Decide(a.ID, spec, st, ModeEnabled); update && v == v2 {
					inFlight++
				}
			}
			for _, c := range st.Canaries {
				if c.ID.Fraction() >= st.Progress {
					canariesAbove++
				}
			}
			switch {
			case st.State == StateCanary && inFlight > len(st.Canaries):
				t.Fatalf("seed %d step %d: %d in flight in the canary state with %d canaries", seed, step, inFlight, len(st.Canaries))
			case st.State == StateActive && spec.Strategy == StrategyBackpressure:
				bound := g.MaxInFlight.Of(st.InitialCount) + 1 + float64(canariesAbove)
				if float64(inFlight) > bound {
					t.Fatalf("seed %d step %d: %d agents in flight, more than %v × %d + 1 + %d canaries above progress %v",
						seed, step, inFlight, g.MaxInFlight, st.InitialCount, canariesAbove, st.Progress)
				}
			}
			if st.State == StateDone || st.Halted {
				break
			}

			for _, a := range agents {
				switch {
				case !a.present:
					a.present = r.Float64() < pReturn
				case r.Float64() < pVanish:
					a.present = false
				case a.updating:
					if r.Float64() < pLand {
						a.updating = false
						if a.fails {
							a.Rollback, a.RollbackFrom = true, v2
						} else {
							a.ActiveVersion = v2
						}
					}
				default:
					if v, update := Decide(a.ID, spec, st, ModeEnabled); update && v != a.ActiveVersion && !a.Rollback {
						a.updating, a.fails, a.StartTime = true, r.Float64() < pFail, now
					}
				}
			}
			now = now.Add(5 * time.Minute)
		}
		switch {
		case st.State == StateDone:
			done++
		case st.Halted:
			halted++
		}
		if sawFrozen {
			frozen++
		}
	}
	// The histories must have covered the interesting outcomes.
	if done == 0 || halted == 0 || frozen == 0 {
		t.Errorf("coverage: %d done, %d halted, %d saw a freeze; want some of each", done, halted, frozen)
	}
	t.Logf("%d histories, %d steps: %d done, %d halted, %d saw a freeze", histories, steps, done, halted, frozen)
}
