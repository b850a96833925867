package controller

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/kv"
)

// BenchmarkDashboard100k is the dashboard's server side with 100,000 agents
// in the inventory (benchController: 10 groups, 3 versions, every agent
// state), through the controller's HTTP handler (no network), each figure
// also as a ratio to the baseline measured in the same run: the stats
// tally every stats write already does (BenchmarkStatsTally100k), run
// after each operation so that both see the same load. See
// docs/PERFORMANCE.md §7.
//
//	first_paint: GET /, /api/v1/status and /api/v1/agents (page 1): what
//	  opening the page costs the controller
//	filtered:    /api/v1/agents?state=failed&q=… (a search over every agent)
//	late_page:   /api/v1/agents?page=1000 (of 2,000)
//	sse_push:    one push of the live stream (the numbers, as JSON), which
//	  the loop does once per refresh for every open page together
func BenchmarkDashboard100k(b *testing.B) {
	c, now := benchController(b, 100_000)
	d := &Dashboard{C: c, Mirror: c.mirror.Load()}
	storePlan(b, c)
	h := c.HTTPHandler(http.NotFoundHandler(), d)
	tally := func(b *testing.B) {
		for g, vc := range c.agg.Counts(now) {
			if _, err := json.Marshal(kv.Stats{V: 1, ControllerID: "bench", Group: g, At: now, Agents: vc.Total(), Versions: vc}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("baseline_stats_tally", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tally(b)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
	})
	// measure runs op b.N times, each followed by an untimed stats tally,
	// so that the ratio compares two things done under the same load
	// (other processes share the cores).
	measure := func(b *testing.B, op func()) {
		b.ReportAllocs()
		var baseline time.Duration
		for b.Loop() {
			op()
			b.StopTimer()
			start := time.Now()
			tally(b)
			baseline += time.Since(start)
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
		b.ReportMetric(float64(b.Elapsed())/float64(baseline), "x_baseline")
	}
	get := func(b *testing.B, paths ...string) {
		for _, p := range paths {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, p, nil))
			if w.Code != http.StatusOK {
				b.Fatalf("GET %s: %d %s", p, w.Code, w.Body)
			}
		}
	}
	for _, bc := range []struct {
		name  string
		paths []string
	}{
		{"first_paint", []string{PathUI, PathAPIStatus, PathAPIAgents}},
		{"filtered", []string{PathAPIAgents + "?state=failed&q=e-00004"}},
		{"late_page", []string{PathAPIAgents + "?page=1000"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			measure(b, func() { get(b, bc.paths...) })
		})
	}
	b.Run("sse_push", func(b *testing.B) {
		measure(b, func() {
			if _, err := json.Marshal(d.Overview(now)); err != nil {
				b.Fatal(err)
			}
		})
		b.ReportMetric(float64(time.Second)/(float64(b.Elapsed())/float64(b.N)), "pushes/s")
	})
}

// storePlan writes the plan benchController gave c's mirror (config, spec,
// group statuses) to the bus, where the dashboard reads every app's plan.
func storePlan(b *testing.B, c *Controller) {
	b.Helper()
	m := c.mirror.Load()
	ctx := b.Context()
	if _, err := kv.Save(ctx, c.fleet.Config, kv.KeyConfig, *m.config.Load(), 0); err != nil {
		b.Fatal(err)
	}
	p := m.Store.Get()
	if _, err := kv.Save(ctx, c.fleet.Plan, kv.KeySpec, p.Spec, 0); err != nil {
		b.Fatal(err)
	}
	for g, st := range p.Groups {
		if _, err := kv.Save(ctx, c.fleet.Plan, kv.GroupKey(g), st, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchController is benchController for the external test package (the
// browser benchmark).
func BenchController(b *testing.B, n int) (*Controller, time.Time) { return benchController(b, n) }
