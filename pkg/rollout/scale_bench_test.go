package rollout

import (
	"math/rand/v2"
	"testing"
	"time"
)

// scaleGroup is one group of n agents in the middle of its active phase
// for 1.0.0 → 2.0.0 at 20% max_in_flight: the ids below progress 0.5
// minus 20% are on the target, the next 20% are updating, the rest wait.
func scaleGroup(n int) Input {
	cfg := DefaultConfig()
	g := DefaultGroup("g1")
	g.MaxInFlight, g.CanaryCount = 20, 5
	cfg.Groups = []GroupConfig{g}
	spec := DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	start := now.Add(-time.Minute)
	src := rand.NewChaCha8([32]byte{1})
	agents := make([]AgentView, n)
	for i := range agents {
		id, _ := NewAgentID(src)
		a := AgentView{ID: id, ActiveVersion: "1.0.0"}
		switch f := id.Fraction(); {
		case f < 0.3:
			a.ActiveVersion = "2.0.0"
		case f < 0.5:
			a.UpdatingTo, a.StartTime = "2.0.0", now.Add(-10*time.Second)
		}
		agents[i] = a
	}
	st := GroupStatus{V: SchemaVersion, Group: "g1", State: StateActive, Since: start, Mode: ModeEnabled,
		TargetVersion: "2.0.0", StartVersion: "1.0.0", InitialCount: n, Progress: 0.5,
		FailuresSince: start, StartedAt: start, HealthTimeout: g.HealthTimeout, MinHealthyTime: g.MinHealthyTime}
	for _, id := range SelectCanaries(agents, 5, "2.0.0") {
		st.Canaries = append(st.Canaries, Canary{ID: id})
	}
	return Input{Config: cfg, Group: "g1", Spec: spec, Prev: st, Counts: CountAgents(agents), Agents: agents, Now: now}
}

// BenchmarkNextActive333k is one rollout step of a group of 333,334
// agents (a third of a million-host fleet) in its active phase: the work
// a controller's pass does per group.
func BenchmarkNextActive333k(b *testing.B) {
	in := scaleGroup(333334)
	b.ResetTimer()
	for b.Loop() {
		Next(in)
	}
}

// BenchmarkCountAgents333k is the per-group tally the pass makes before
// Next.
func BenchmarkCountAgents333k(b *testing.B) {
	in := scaleGroup(333334)
	b.ResetTimer()
	for b.Loop() {
		CountAgents(in.Agents)
	}
}

// BenchmarkDecideActive is one agent's decision in an active group: what
// every agent of a group runs on each new status.
func BenchmarkDecideActive(b *testing.B) {
	in := scaleGroup(1000)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		Decide(in.Agents[i%len(in.Agents)].ID, in.Spec, in.Prev, ModeEnabled)
	}
}

// BenchmarkQuarantineFrom1M is the fleet-wide quarantine rule over a
// million agents, none rolled back.
func BenchmarkQuarantineFrom1M(b *testing.B) {
	var all []AgentView
	for range 3 {
		all = append(all, scaleGroup(333334).Agents...)
	}
	now := time.Now()
	b.ResetTimer()
	for b.Loop() {
		QuarantineFrom(all, 3, QuarantineList{}, now)
	}
}

// BenchmarkDeciderActive is the same decision with a Decider built once
// per status, as a simulated fleet makes it for every agent of a group.
func BenchmarkDeciderActive(b *testing.B) {
	in := scaleGroup(1000)
	d := NewDecider(in.Spec, in.Prev, ModeEnabled)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		d.Decide(in.Agents[i%len(in.Agents)].ID)
	}
}
