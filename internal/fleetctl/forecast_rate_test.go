package fleetctl

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Issue 28, points 6-7: plan forecast runs a group's rate and adaptive
// in-flight bound through Next, as the controller does. Three independent
// groups of 1,000 agents, immediate schedule, 2m installs, max_in_flight
// 50% (500):
//
//   - fixed: no rate: 500 at a time, two rounds of installs (2m + the 5m
//     min_healthy_time each) after its canaries: done 10:26;
//   - ramp: rate 10/min ×2 up to 160/min: 10, 20, 40, 80, 160, 160, …
//     starts per minute, about ten minutes of starts for the 1,000, the
//     last done 7m later: 10:32, the ramp stretches the forecast;
//   - adaptive: the bound starts at 50 (a tenth of 500) and doubles each
//     time as many succeed: rounds of 50, 100, 200, 400, 500 of 7m each,
//     done 10:47.
func TestPlanForecastRateGolden(t *testing.T) {
	e := newEnv(t)
	var groups []rollout.GroupConfig
	for _, name := range []string{"fixed", "ramp", "adaptive"} {
		g := rollout.DefaultGroup(name)
		g.MaxInFlight, g.CanaryCount, g.DependsOn = 50, 2, []string{}
		switch name {
		case "ramp":
			g.Rate = &rollout.RateConfig{Start: rollout.RatePer{N: 10, Per: time.Minute}, Factor: 2, Max: rollout.RatePer{N: 160, Per: time.Minute}}
		case "adaptive":
			g.AdaptiveInFlight = true
		}
		groups = append(groups, g)
	}
	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC", Groups: groups})
	spec := rollout.DefaultSpec("1.3.2", "1.4.0")
	spec.Schedule = rollout.ScheduleImmediate
	e.putSpec(spec)
	for _, g := range groups {
		e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: g.Name, At: testNow.Add(-5 * time.Second), Agents: 1000,
			Versions: rollout.Counts{"1.3.2": {Count: 1000}}})
	}
	out := e.mustRun(forecast(PlanForecastOptions{At: "2026-11-27T10:00:00Z", Output: "table", Local: time.UTC}))
	checkGolden(t, "forecast_rate.golden", out)
	checkWidth(t, out)
	done := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 10 && (f[0] == "fixed" || f[0] == "ramp" || f[0] == "adaptive") {
			done[f[0]] = f[8] // the DONE column's time of day
		}
	}
	if !(done["fixed"] < done["ramp"] && done["fixed"] < done["adaptive"]) {
		t.Errorf("done at %v: want fixed before ramp and adaptive (the ramp and the adaptive bound stretch the forecast)", done)
	}
}
