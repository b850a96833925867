package fleetctl

import (
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestPlanForecastSmallGroupGolden (issue 28 point 4): the forecast runs
// small_group as the controller does. In UTC, from Mon 2026-11-23 10:00,
// three independent groups with three canaries each, all opening at 10:00:
//   - edge, 3 agents, small_group 3: no canary phase; active at 10:00,
//     every agent told at once (max_in_flight 100%), 2m install + 5m
//     min_healthy_time: done 10:07; the table says why it had no canaries.
//   - lab, 4 agents, small_group 3 (one over): canaries at 10:00, on the
//     target 10:07, healthy for 5m: active 10:12, the last agent done
//     10:19.
//   - pos, 2 agents, small_group 0 (never): two canaries for three, the
//     old warning; active 10:12 with everyone on the target, done.
func TestPlanForecastSmallGroupGolden(t *testing.T) {
	e := newEnv(t)
	group := func(name string, small int) rollout.GroupConfig {
		g := rollout.DefaultGroup(name)
		g.StartHour, g.CanaryCount, g.MaxInFlight, g.SmallGroup, g.DependsOn = 10, 3, 100, small, []string{}
		return g
	}
	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC",
		Groups: []rollout.GroupConfig{group("edge", 3), group("lab", 3), group("pos", 0)}, QuarantineAfter: 3})
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	at := testNow.Add(-5 * time.Second)
	for g, n := range map[string]int{"edge": 3, "lab": 4, "pos": 2} {
		e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: g, At: at, Agents: n, Versions: rollout.Counts{"1.3.2": {Count: n}}})
	}
	out := e.mustRun(forecast(PlanForecastOptions{At: "2026-11-23T10:00:00Z", Output: "table", Local: time.UTC}))
	checkGolden(t, "forecast_smallgroup.golden", out)
	checkWidth(t, out)
}
