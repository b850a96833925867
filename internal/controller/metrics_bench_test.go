package controller

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// benchController is a controller whose inventory holds n agents in 10
// groups, over 3 versions and every agent state, and whose plan mirror holds
// a status for every group (docs/PERFORMANCE.md §6).
func benchController(b *testing.B, n int) (*Controller, time.Time) {
	b.Helper()
	srv := natstest.Start(b)
	fleet, err := kv.Ensure(b.Context(), srv.JetStream("bench"), kv.Options{Memory: true})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	c, err := New(fleet, Options{ID: "bench", Clock: clock.NewManual(now), Log: natstest.Logger(b)})
	if err != nil {
		b.Fatal(err)
	}
	cfg := rollout.DefaultConfig()
	cfg.Groups = nil
	p := httpfind.Plan{Groups: map[string]rollout.GroupStatus{}, HasSpec: true, Spec: rollout.DefaultSpec("1.0.0", "2.0.0")}
	for g := range 10 {
		name := fmt.Sprintf("group-%d", g)
		cfg.Groups = append(cfg.Groups, rollout.DefaultGroup(name))
		p.Groups[name] = rollout.GroupStatus{V: 1, Group: name, State: rollout.StateActive, Since: now.Add(-time.Hour),
			TargetVersion: "2.0.0", StartVersion: "1.0.0", InitialCount: n / 10, Progress: 0.5}
	}
	m := &PlanMirror{Store: &httpfind.Store{}}
	m.Store.Set(p)
	m.config.Store(&cfg)
	c.ServePlanFrom(m)
	versions := []string{"1.0.0", "2.0.0", "1.5.0"}
	for i := range n {
		hb := &heartbeat.Heartbeat{V: 1, AgentID: rollout.AgentID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)),
			Hostname: fmt.Sprintf("Node-%06d.Example.com", i), Group: fmt.Sprintf("group-%d", i%10), ActiveVersion: versions[i%3], At: now}
		seen := now
		switch i % 20 {
		case 0:
			hb.UpdatingTo = "2.0.0"
		case 1:
			hb.Error = "health check failed"
		case 2:
			hb.Rollback, hb.RollbackFrom = true, "2.0.0"
		case 3:
			seen = now.Add(-rollout.UnreachableAfter(DefaultHeartbeatInterval) - time.Second) // unreachable
		}
		c.agg.Observe(hb, seen, true)
	}
	return c, now
}

// BenchmarkMetricsScrape100k is one GET /metrics with 100,000 agents in
// the inventory, through the handler (no network).
func BenchmarkMetricsScrape100k(b *testing.B) {
	c, _ := benchController(b, 100_000)
	h := c.HTTPHandler(http.NotFoundHandler())
	req := httptest.NewRequest(http.MethodGet, PathMetrics, nil)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("GET /metrics: %d", w.Code)
		}
	}
}

// BenchmarkStatsTally100k is the baseline: what every stats write computes
// from the same inventory (the per-group, per-version counts of fleetctl
// status) and encodes as JSON.
func BenchmarkStatsTally100k(b *testing.B) {
	c, now := benchController(b, 100_000)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		counts := c.agg.Counts(now)
		for g, vc := range counts {
			if _, err := json.Marshal(kv.Stats{V: 1, ControllerID: "bench", Group: g, At: now, Agents: vc.Total(), Versions: vc}); err != nil {
				b.Fatal(err)
			}
		}
	}
}
