package rollout

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkNext100k is one pass of one group of 100,000 agents (a tenth of
// a million-host fleet), in its canary phase and then active with a fifth
// of the group updated: what a controller's rollout pass does per group.
func BenchmarkNext100k(b *testing.B) {
	now := time.Date(2026, 11, 28, 3, 10, 0, 0, time.UTC)
	cfg := testConfig()
	views := make([]AgentView, 100_000)
	for i := range views {
		views[i] = AgentView{ID: AgentID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i*2654435761%(1<<32), i)), ActiveVersion: v1}
	}
	in := Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Agents: views, Counts: CountAgents(views), Now: now}
	st, _ := Next(in)
	b.Run("canary", func(b *testing.B) {
		in := in
		in.Prev = st
		b.ReportAllocs()
		for b.Loop() {
			Next(in)
		}
	})
	for i := range views {
		if views[i].ID.Fraction() < 0.2 {
			views[i].ActiveVersion = v2
		}
	}
	in.Counts = CountAgents(views)
	for range 50 { // through canary into active
		in.Now = in.Now.Add(10 * time.Minute)
		in.Prev, _ = Next(in)
	}
	b.Run(string(in.Prev.State), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Next(in)
		}
	})
}
