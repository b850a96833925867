package fleetctl

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestPlanForecastTimeBasedGolden: the forecast of a time-based plan with
// window_length, in Europe/Berlin from Friday 2026-10-23 10:00 CEST; the
// weekend clocks go back (Sun 10-25 03:00 CEST → 02:00 CET). By hand, with
// 20m installs plus 5m min_healthy_time (25m per agent):
//   - dev (daily 09:00, one hour): today's window closed at 10:00: Sat
//     09:00; one canary on 1.4.0 at 09:25, watched to 09:30, then the
//     other four at once: done 09:55, inside its window.
//   - prod (Mon and Wed 22:00 for 4h; depends on dev with wait_hours 24,
//     both ignored under time-based): Mon 10-26 22:00 CET; two canaries to
//     22:30, then 20 (10%) per 25m from 22:30: at the 02:00 close 2 + 8×20
//     = 162 are on 1.4.0 and 20 more are installing (they finish); active
//     again Wed 22:00 with the last 18, done 22:25.
//   - lab (Sat 23:00 for 5h: it closes 5h later, 03:00 CET on the wall
//     after the change): Sat 23:00 CEST, its three agents all canaries,
//     done 23:30.
func TestPlanForecastTimeBasedGolden(t *testing.T) {
	spec := rollout.DefaultSpec("1.3.2", "1.4.0")
	spec.Schedule = rollout.ScheduleTimeBased
	e := forecastWeekEnv(t, spec)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	out := e.mustRun(forecast(PlanForecastOptions{At: "2026-10-23T10:00:00+02:00", Output: "table", Local: berlin, InstallTime: 20 * time.Minute}))
	checkGolden(t, "forecast_timebased.golden", out)
	checkWidth(t, out)
}

// TestPlanForecastScheduleOverride: --schedule forecasts the plan as plan
// set --schedule would make it, before anyone writes it: the same golden as
// a stored time-based spec from a regular one; a schedule that does not
// exist is a usage error.
func TestPlanForecastScheduleOverride(t *testing.T) {
	e := forecastWeekEnv(t, rollout.DefaultSpec("1.3.2", "1.4.0")) // regular
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	o := PlanForecastOptions{At: "2026-10-23T10:00:00+02:00", Output: "table", Local: berlin, InstallTime: 20 * time.Minute}
	regular := e.mustRun(forecast(o))
	o.Schedule = string(rollout.ScheduleTimeBased)
	timeBased := e.mustRun(forecast(o))
	if regular == timeBased {
		t.Fatal("--schedule time-based forecast the same as the stored regular plan")
	}
	checkGolden(t, "forecast_timebased.golden", timeBased)
	o.Schedule = "nightly"
	if _, err := e.run(forecast(o)); err == nil || !strings.Contains(err.Error(), `--schedule "nightly": use regular, immediate or time-based`) {
		t.Errorf("--schedule nightly: %v", err)
	}
}

// forecastWeekEnv is the fleet of the time-based forecasts: dev (daily
// 09:00), prod (Mon and Wed 22:00 for 4h, after dev with wait_hours 24),
// lab (Sat 23:00 for 5h, no dependency), in Europe/Berlin, with 5, 200 and
// 3 agents on 1.3.2, and spec as the plan.
func forecastWeekEnv(t *testing.T, spec rollout.Spec) *env {
	e := newEnv(t)
	dev := rollout.DefaultGroup("dev")
	dev.StartHour, dev.CanaryCount, dev.MaxInFlight = 9, 1, 100
	prod := rollout.DefaultGroup("prod")
	prod.Days, prod.StartHour, prod.WindowLength = []string{"Mon", "Wed"}, 22, rollout.Duration(4*time.Hour)
	prod.WaitHours, prod.MaxInFlight, prod.CanaryCount = 24, 10, 2
	lab := rollout.DefaultGroup("lab")
	lab.Days, lab.StartHour, lab.WindowLength, lab.DependsOn = []string{"Sat"}, 23, rollout.Duration(5*time.Hour), []string{}
	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "Europe/Berlin",
		Groups: []rollout.GroupConfig{dev, prod, lab}, QuarantineAfter: 3})
	e.putSpec(spec)
	statsAt := testNow.Add(-5 * time.Second)
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "dev", At: statsAt, Agents: 5, Versions: rollout.Counts{"1.3.2": {Count: 5}}})
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "prod", At: statsAt, Agents: 200, Versions: rollout.Counts{"1.3.2": {Count: 200}}})
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "lab", At: statsAt, Agents: 3, Versions: rollout.Counts{"1.3.2": {Count: 3}}})
	return e
}
