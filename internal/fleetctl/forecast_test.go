package fleetctl

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// forecastAt is the golden forecast's start: Friday 2026-11-27 10:00 CET.
const forecastAt = "2026-11-27T10:00:00+01:00"

// forecastFixture is a fleet in Europe/Berlin rolling 1.3.2 → 1.4.0 out to
// dev (daily 09:00, done Thursday 18:00 CET) → staging (Mon–Fri 14:00,
// wait_hours 24) → prod (Mon–Fri 10:00, 20% in flight), and lab (daily
// 09:00, no dependency, three agents for five canaries). Counts are
// written at statsAt.
func forecastFixture(t *testing.T, statsAt time.Time) *env {
	t.Helper()
	e := newEnv(t)
	dev := rollout.DefaultGroup("dev")
	dev.StartHour, dev.CanaryCount, dev.MaxInFlight = 9, 1, 100
	staging := rollout.DefaultGroup("staging")
	staging.Days, staging.StartHour, staging.WaitHours, staging.CanaryCount, staging.MaxInFlight = []string{"Mon", "Tue", "Wed", "Thu", "Fri"}, 14, 24, 2, 50
	prod := rollout.DefaultGroup("prod")
	prod.Days, prod.StartHour = []string{"Mon", "Tue", "Wed", "Thu", "Fri"}, 10
	lab := rollout.DefaultGroup("lab")
	lab.StartHour, lab.DependsOn = 9, []string{}
	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "Europe/Berlin",
		Groups: []rollout.GroupConfig{dev, staging, prod, lab}, QuarantineAfter: 3})
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))

	devSt := groupStatus(rollout.StateDone)
	devSt.Group, devSt.Progress, devSt.InitialCount = "dev", 1, 5
	devSt.StartedAt, devSt.DoneAt = time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC), time.Date(2026, 11, 26, 17, 0, 0, 0, time.UTC)
	e.putStatus(devSt)

	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "dev", At: statsAt, Agents: 5, Versions: rollout.Counts{"1.4.0": {Count: 5}}})
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "staging", At: statsAt, Agents: 20, Versions: rollout.Counts{"1.3.2": {Count: 20}}})
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "prod", At: statsAt, Agents: 100, Versions: rollout.Counts{
		"1.3.2": {Count: 95}, rollout.NoVersion: {Count: 5}}})
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "lab", At: statsAt, Agents: 3, Versions: rollout.Counts{"1.3.2": {Count: 3}}})
	return e
}

func forecast(o PlanForecastOptions) func(g *Global) error {
	return func(g *Global) error {
		o.Global = g
		if o.InstallTime == 0 {
			o.InstallTime = rollout.DefaultInstallTime
		}
		return RunPlanForecast(testCtx(), &o)
	}
}

func newYork(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// The golden schedule, by hand (CET = UTC+1, New York = UTC-5):
//   - dev: done Thu 18:00 CET, before the forecast.
//   - staging: wait_hours 24 → Fri 18:00 CET, after Friday's 14:00
//     window: Mon 11-30 14:00. Two canaries told at 14:00, on 1.4.0 at
//     14:07 (2m install + 5m min_healthy_time), healthy 5m → active
//     14:12, 50% in flight: ten at 14:12 (done 14:19), the last eight at
//     14:19, done 14:26.
//   - prod: staging done Mon 14:26, after Monday's 10:00 window: Tue 10:00,
//     done after its canaries and five batches of 20% in 7m each.
//   - lab: Friday's 09:00 window has closed at 10:00: Sat 09:00, its three
//     agents are all canaries, done 09:12.
func TestPlanForecastGolden(t *testing.T) {
	e := forecastFixture(t, testNow.Add(-5*time.Second))
	out := e.mustRun(forecast(PlanForecastOptions{At: forecastAt, Output: "table", Local: newYork(t)}))
	checkGolden(t, "forecast.golden", out)
	checkWidth(t, out)
}

// A halted group stays halted in the forecast, and the groups after it are
// never done; in one zone, times have one line.
func TestPlanForecastHaltedGolden(t *testing.T) {
	e := forecastFixture(t, testNow.Add(-5*time.Second))
	st := groupStatus(rollout.StateCanary)
	st.Group, st.Halted, st.Alerted, st.HaltedAt = "staging", true, true, time.Date(2026, 11, 27, 8, 30, 0, 0, time.UTC)
	st.HaltReason = "canary 0b000000-0000-4000-8000-000000000000 failed: rolled back from 1.4.0 to 1.3.2"
	e.putStatus(st)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	out := e.mustRun(forecast(PlanForecastOptions{At: forecastAt, Output: "table", Local: berlin, InstallTime: 5 * time.Minute}))
	checkGolden(t, "forecast_halted.golden", out)
	checkWidth(t, out)
}

// TestPlanForecastHonoursTZ runs the binary as an operator would, with TZ
// set: its output is the golden one, local times in New York.
func TestPlanForecastHonoursTZ(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	e := forecastFixture(t, time.Now()) // the binary reads the real clock
	bin := fleetctlBin(t)
	out, stderr, code := runBin(t, bin, []string{"TZ=America/New_York"}, "--nats", e.srv.URL(), "plan", "forecast", "--at", forecastAt)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	checkGolden(t, "forecast.golden", out)
}

func TestPlanForecastJSON(t *testing.T) {
	e := forecastFixture(t, testNow.Add(-5*time.Second))
	out := e.mustRun(forecast(PlanForecastOptions{At: forecastAt, Output: "json"}))
	var fc rollout.Forecast
	oneObject(t, out, &fc)
	var got []string
	for _, g := range fc.Groups {
		got = append(got, g.Group+" "+string(g.Outcome)+" "+g.Start.UTC().Format(time.RFC3339)+" "+g.Done.UTC().Format(time.RFC3339))
	}
	want := []string{
		"dev done 2026-11-26T08:00:00Z 2026-11-26T17:00:00Z",
		"staging finishes 2026-11-30T13:00:00Z 2026-11-30T13:26:00Z",
		"prod finishes 2026-12-01T09:00:00Z 2026-12-01T09:47:00Z",
		"lab finishes 2026-11-28T08:00:00Z 2026-11-28T08:12:00Z",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	if fc.Timezone != "Europe/Berlin" || fc.InstallTime != rollout.Duration(2*time.Minute) || !fc.From.Equal(time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("header: timezone %q, install %s, from %v", fc.Timezone, fc.InstallTime, fc.From)
	}
}

func TestPlanForecastOtherTarget(t *testing.T) {
	e := forecastFixture(t, testNow.Add(-5*time.Second))
	e.putQuarantine(rollout.QuarantineList{V: 1, Versions: []rollout.Quarantine{{Version: "1.5.0", Reason: "crashes on start", At: testNow, By: "alice"}}})
	out := e.mustRun(forecast(PlanForecastOptions{Target: "v1.5.0", At: forecastAt, Output: "json"}))
	var fc rollout.Forecast
	oneObject(t, out, &fc)
	// dev completed 1.4.0, so a new target starts from it, as plan set
	// --target would.
	if fc.StartVersion != "1.4.0" || fc.TargetVersion != "1.5.0" {
		t.Errorf("versions %s → %s, want 1.4.0 → 1.5.0", fc.StartVersion, fc.TargetVersion)
	}
	if !slices.ContainsFunc(fc.Warnings, func(w string) bool { return strings.Contains(w, "target 1.5.0 is quarantined (crashes on start)") }) {
		t.Errorf("no quarantine warning: %q", fc.Warnings)
	}
	for _, g := range fc.Groups {
		if g.Outcome != rollout.OutcomeHalted {
			t.Errorf("group %s: %s, want halted on the quarantined target", g.Group, g.Outcome)
		}
	}
}

// TestPlanForecastWritesNothing watches every subject of the server while
// forecasts run: only reads go out (stream info and direct gets, with
// their replies), and no stream gets a message.
func TestPlanForecastWritesNothing(t *testing.T) {
	e := forecastFixture(t, testNow.Add(-5*time.Second))
	js := e.srv.JetStream("watcher")
	lastSeqs := func() map[string]uint64 {
		t.Helper()
		out := map[string]uint64{}
		names := js.StreamNames(e.ctx)
		for n := range names.Name() {
			s, err := js.Stream(e.ctx, n)
			if err != nil {
				t.Fatal(err)
			}
			out[n] = s.CachedInfo().State.LastSeq
		}
		if err := names.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := lastSeqs()
	nc := e.srv.Conn("spy")
	var mu sync.Mutex
	var subjects []string
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		subjects = append(subjects, m.Subject)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"table", "json"} {
		e.mustRun(forecast(PlanForecastOptions{At: forecastAt, Output: o, Target: "1.4.1"}))
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = sub.Unsubscribe()
	mu.Lock()
	defer mu.Unlock()
	reads := 0
	for _, s := range subjects {
		switch {
		case strings.HasPrefix(s, "$JS.API.STREAM.INFO."), strings.HasPrefix(s, "$JS.API.DIRECT.GET."), s == "$JS.API.INFO":
			reads++
		case strings.HasPrefix(s, "_INBOX."), strings.HasPrefix(s, "$JS.EVENT.ADVISORY.API"):
		default:
			t.Errorf("the forecast sent a message on %s", s)
		}
	}
	if reads == 0 {
		t.Errorf("no reads seen (the spy sees nothing?): %q", subjects)
	}
	if diff := cmp.Diff(before, lastSeqs()); diff != "" {
		t.Errorf("streams changed (-before +after):\n%s", diff)
	}
}

func TestPlanForecastNoPlan(t *testing.T) {
	e := newEnv(t)
	_, err := e.run(forecast(PlanForecastOptions{Output: "table"}))
	mustContain(t, err, "no plan", "--target VERSION")
	if cliutil.ExitCode(err) != cliutil.ExitFailure {
		t.Errorf("exit code %d, want %d", cliutil.ExitCode(err), cliutil.ExitFailure)
	}
	// With --target, a fleet without a plan is forecast: the default
	// config's one group, no agents counted.
	out := e.mustRun(forecast(PlanForecastOptions{Target: "1.0.0", At: forecastAt, Output: "json"}))
	var fc rollout.Forecast
	oneObject(t, out, &fc)
	if len(fc.Groups) != 1 || fc.Groups[0].Outcome != rollout.OutcomeWaits || !strings.Contains(fc.Groups[0].Reason, "no agents present") {
		t.Errorf("groups: %+v", fc.Groups)
	}
	if !slices.ContainsFunc(fc.Warnings, func(w string) bool { return strings.Contains(w, "is a controller running?") }) {
		t.Errorf("no warning about missing counts: %q", fc.Warnings)
	}
}

func TestPlanForecastBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--install-time", "0s"}, "--install-time 0s: must be positive"},
		{[]string{"--install-time", "-1m"}, "--install-time -1m0s: must be positive"},
		{[]string{"--install-time", "soon"}, "invalid argument"},
		{[]string{"--at", "tomorrow"}, `--at "tomorrow": want an RFC 3339 time`},
		{[]string{"--at", "2026-11-27 10:00"}, "want an RFC 3339 time"},
		{[]string{"--target", "1.x"}, "--target:"},
		{[]string{"-o", "yaml"}, `--output "yaml"`},
		{[]string{"extra"}, "unknown command"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// Flags are checked before connecting: no server is needed.
			args := append([]string{"--nats", "nats://127.0.0.1:1", "plan", "forecast"}, tc.args...)
			_, stderr, code := execute(t, args...)
			if code != cliutil.ExitUsage {
				t.Errorf("exit code %d, want %d (stderr: %s)", code, cliutil.ExitUsage, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tc.want)
			}
		})
	}
}

func TestPlanForecastBadConfig(t *testing.T) {
	e := forecastFixture(t, testNow.Add(-5*time.Second))
	e.putRaw(kv.BucketConfig, kv.KeyConfig, `{"v":1,"groups":[]}`)
	_, err := e.run(forecast(PlanForecastOptions{Output: "table"}))
	mustContain(t, err, "cannot forecast", "fleet_config/config", "config apply")
}

func TestPlanForecastJSONIsStable(t *testing.T) {
	// The documented fields (docs/cli.md), so a rename is a visible change.
	e := forecastFixture(t, testNow.Add(-5*time.Second))
	out := e.mustRun(forecast(PlanForecastOptions{At: forecastAt, Output: "json"}))
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"done", "first_start", "from", "groups", "install_time", "span", "start_version", "target_version", "timezone", "until", "warnings"}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("top-level fields (-want +got):\n%s", diff)
	}
}

// A local zone by another name that keeps the config's clock (TZ unset
// on a host in the config's zone is "Local"; here Europe/Rome against the
// config's Europe/Berlin) prints each time once.
func TestPlanForecastSameClockOnce(t *testing.T) {
	e := forecastFixture(t, testNow.Add(-5*time.Second))
	rome, err := time.LoadLocation("Europe/Rome")
	if err != nil {
		t.Fatal(err)
	}
	out := e.mustRun(forecast(PlanForecastOptions{At: forecastAt, Output: "table", Local: rome}))
	if !strings.Contains(out, "Zones:     Europe/Berlin (the config's, and local)") {
		t.Errorf("zones line does not say the config's zone is also local:\n%s", out)
	}
	if strings.Contains(out, "(local: second lines") || secondTimeLine.MatchString(out) {
		t.Errorf("times printed twice although both zones keep the same clock:\n%s", out)
	}
}

// secondTimeLine matches a table row's second line: the times again, in the
// local zone.
var secondTimeLine = regexp.MustCompile(`(?m)^ +(Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d\d-\d\d \d\d:\d\d`)
