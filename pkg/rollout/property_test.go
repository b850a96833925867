package rollout

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
)

// propAgent is one simulated agent of TestPropertyBackpressure.
type propAgent struct {
	AgentView
	present bool
	// seen: present at the previous Next.
	seen bool
	// updating: started an update to the target that has not landed yet;
	// fails: it will not succeed.
	updating, fails bool
	// late: it (re)appeared already told to update (its id below progress,
	// or a canary), so no step of the controller could count it before it
	// was told. Cleared when it is no longer in flight.
	late bool
}

// TestPropertyBackpressure drives one group through many random histories
// with random ids (NewAgentID from a seeded source), 1 to 500 agents,
// canary_count 0 to 10 and max_in_flight 1% to 100%, and checks the
// backpressure property after every Next:
//
//   - progress never decreases and stays in [0, 1];
//   - in the canary state only canaries are in flight;
//   - in the active state (backpressure strategy), the agents Decide tells
//     to update that have not finished with the target (neither on it nor
//     rolled back from it) are at most W = max_in_flight × initial_count
//     (rounded down, at least 1) + 1 for the lowest-id guard. The rule does
//     better: the guard only lets an agent go when none is in flight, so
//     the bound checked is W itself.
//
// Agents vanish and come back and new ones join. One of those that
// (re)appears with its id already below progress is told to update at once,
// and progress never goes back, so no rule can keep it out of the window;
// those "late" agents are left out of the bound above. The rule counts them,
// though: the second check is that whenever a Next tells an agent to update
// that it did not tell before, everyone in flight, late agents included, is
// within W.
//
// One history in three is clean: every agent told to update succeeds at the
// next step, nobody vanishes or joins. Those must reach done within 2 steps
// per agent (the guard lets at least one agent go every two steps, so there
// is no deadlock) plus the canary phase.
func TestPropertyBackpressure(t *testing.T) {
	histories := 600
	if testing.Short() {
		histories = 150
	}
	var (
		done, halted, frozen, lateSeen, steps, checked int
		worstOver, worstOverAll, worstClean            = -1 << 30, -1 << 30, 0.0
	)
	for seed := range uint64(histories) {
		var key [32]byte
		binary.LittleEndian.PutUint64(key[:], seed)
		src := rand.NewChaCha8(key)
		r := rand.New(src)
		newAgent := func() *propAgent {
			id, err := NewAgentID(src)
			if err != nil {
				t.Fatal(err)
			}
			return &propAgent{AgentView: AgentView{ID: id, ActiveVersion: v1}, present: true}
		}

		clean := seed%3 == 0
		g := DefaultGroup("g")
		if r.IntN(2) == 0 {
			g.MaxInFlight = Percent(1 + r.IntN(100))
		} else {
			g.MaxInFlight = Percent(1 + 99*r.Float64())
		}
		g.CanaryCount = r.IntN(11)
		g.FailureThreshold = Percent(r.IntN(30))
		if r.IntN(4) == 0 {
			g.FailureThreshold = 100
		}
		g.MinHealthyTime = Duration(time.Duration(r.IntN(3)) * 5 * time.Minute)
		cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{g}}
		spec := DefaultSpec(v1, v2)
		spec.Schedule = ScheduleImmediate
		if !clean && r.IntN(8) == 0 {
			spec.Strategy = StrategyGrouped
		}
		n := 1 + r.IntN(500)
		agents := make([]*propAgent, n)
		for i := range agents {
			agents[i] = newAgent()
		}
		pLand := 0.1 + 0.9*r.Float64()
		pFail := 0.1 * r.Float64()
		pVanish := 0.05 * r.Float64()
		pReturn := r.Float64()
		pJoin := 0.3 * r.Float64()
		if clean {
			pLand, pFail, pVanish, pJoin = 1, 0, 0, 0
		}

		now := time.Date(2024, 3, 4, 10, 0, 0, 0, time.UTC)
		var st GroupStatus
		sawFrozen := false
		limit := 400
		if clean {
			limit = 2*n + 12
		}
		step := 0
		for ; step < limit; step++ {
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
			prevSt := st
			st = next
			steps++
			sawFrozen = sawFrozen || st.Frozen != ""

			inFlight, late, admitted := 0, 0, 0
			for _, a := range agents {
				pending := a.present && a.ActiveVersion != v2 && !rolledBackFrom(a.AgentView, v2)
				_, before := Decide(a.ID, spec, prevSt, ModeEnabled)
				_, told := Decide(a.ID, spec, st, ModeEnabled)
				if !pending || !told {
					a.late = false
				} else {
					if !a.seen && before {
						a.late = true
					}
					inFlight++
					if a.late {
						late++
					}
					if !before {
						admitted++
					}
				}
				a.seen = a.present
			}
			if late > 0 {
				lateSeen++
			}
			w := InFlightWindow(g.MaxInFlight, st.InitialCount)
			switch {
			case st.State == StateCanary && inFlight > len(st.Canaries):
				t.Fatalf("seed %d step %d: %d in flight in the canary state with %d canaries", seed, step, inFlight, len(st.Canaries))
			case st.State == StateActive && spec.Strategy == StrategyBackpressure:
				checked++
				worstOver = max(worstOver, inFlight-late-w)
				worstOverAll = max(worstOverAll, inFlight-w)
				if inFlight-late > w {
					t.Fatalf("seed %d step %d: %d agents in flight (%d more that came back late), more than the window %d: the guard went beyond it",
						seed, step, inFlight-late, late, w)
				}
				if admitted > 0 && inFlight > w {
					t.Fatalf("seed %d step %d: %d agents newly told to update with %d in flight (%d late), more than the window %d",
						seed, step, admitted, inFlight, late, w)
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
					if r.Float64() >= pLand {
						break
					}
					a.updating = false
					switch {
					case !a.fails:
						a.ActiveVersion, a.Error = v2, ""
					case r.IntN(2) == 0:
						a.Rollback, a.RollbackFrom = true, v2 // settled: never retries
					default:
						a.Error = "health check failed" // retries when told again
					}
				default:
					if v, update := Decide(a.ID, spec, st, ModeEnabled); update && v == v2 && a.ActiveVersion != v2 && !a.Rollback {
						a.updating, a.fails, a.StartTime, a.Error = true, r.Float64() < pFail, now, ""
					}
				}
			}
			for r.Float64() < pJoin {
				agents = append(agents, newAgent())
			}
			now = now.Add(5 * time.Minute)
		}
		if clean {
			if st.State != StateDone {
				t.Fatalf("seed %d: clean history of %d agents (max_in_flight %v, %d canaries) not done after %d steps: %s, progress %v",
					seed, n, g.MaxInFlight, g.CanaryCount, limit, st.State, st.Progress)
			}
			for _, a := range agents {
				if a.ActiveVersion != v2 {
					t.Fatalf("seed %d: done with agent %s on %s", seed, a.ID, a.ActiveVersion)
				}
			}
			worstClean = max(worstClean, float64(step)/float64(limit))
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
	if done == 0 || halted == 0 || frozen == 0 || lateSeen == 0 {
		t.Errorf("coverage: %d done, %d halted, %d saw a freeze, %d steps with late agents; want some of each", done, halted, frozen, lateSeen)
	}
	t.Logf("%d histories, %d steps (%d checked active): %d done, %d halted, %d saw a freeze, %d steps with late agents",
		histories, steps, checked, done, halted, frozen, lateSeen)
	t.Logf("worst in flight minus the window: %d without late agents, %d with them; clean histories used at most %.0f%% of their step limit",
		worstOver, worstOverAll, 100*worstClean)
}
