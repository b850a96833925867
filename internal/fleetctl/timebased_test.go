package fleetctl

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestConfigSetWindowLength: config set --window-length sets a group's
// window_length and says so; a bad value is refused with the flag or the
// field named, and writes nothing.
func TestConfigSetWindowLength(t *testing.T) {
	e := newEnv(t)
	staging, prod := rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")
	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC", Groups: []rollout.GroupConfig{staging, prod}})

	out := e.mustRun(configSet(ConfigSetOptions{Group: "prod", WindowLength: ptr("4h"), StartHour: ptr(22)}))
	if !strings.Contains(out, `group "prod": start_hour 0 → 22, window_length 1h (default) → 4h`) {
		t.Errorf("config set output does not name the change:\n%s", out)
	}
	if g, _ := e.config().Value.Group("prod"); g.WindowLength != rollout.Duration(4*time.Hour) || g.StartHour != 22 {
		t.Errorf("prod: window_length %s start_hour %d", g.WindowLength, g.StartHour)
	}
	for _, tc := range []struct{ value, want string }{
		{"5m", `group "prod": window_length "5m" must be 15m-24h`},
		{"25h", `group "prod": window_length "25h" must be 15m-24h`},
		{"four hours", `--window-length "four hours": write a duration`},
		{"-1h", `group "prod": window_length "-1h0m0s" must be 15m-24h`},
	} {
		before := e.config()
		_, err := e.run(configSet(ConfigSetOptions{Group: "prod", WindowLength: ptr(tc.value)}))
		mustContain(t, err, tc.want)
		if code := cliutil.ExitCode(err); code != cliutil.ExitUsage {
			t.Errorf("%s: exit %d, want %d", tc.value, code, cliutil.ExitUsage)
		}
		if after := e.config(); after.Revision != before.Revision || cmp.Diff(before.Value, after.Value) != "" {
			t.Errorf("%s: an invalid window_length wrote", tc.value)
		}
	}
	// "0s" goes back to the default hour, and the field is left out.
	e.mustRun(configSet(ConfigSetOptions{Group: "prod", WindowLength: ptr("0s")}))
	if g, _ := e.config().Value.Group("prod"); g.WindowLength != 0 || g.EffectiveWindowLength() != rollout.DefaultWindowLength {
		t.Errorf("after 0s: window_length %s", g.WindowLength)
	}
}

// TestPlanSetScheduleTimeBased: plan set --schedule time-based is
// accepted and stored, and its help names it.
func TestPlanSetScheduleTimeBased(t *testing.T) {
	e := newEnv(t)
	e.putConfig(rollout.DefaultConfig())
	e.mustRun(func(g *Global) error {
		return RunPlanSet(testCtx(), &PlanSetOptions{Global: g, Start: ptr("1.0.0"), Target: ptr("1.1.0"), Schedule: ptr("time-based")})
	})
	if s := e.spec().Value; s.Schedule != rollout.ScheduleTimeBased {
		t.Errorf("stored schedule %q", s.Schedule)
	}
	// A mistyped schedule is a usage error, and nothing is written.
	before := e.spec()
	_, err := e.run(func(g *Global) error {
		return RunPlanSet(testCtx(), &PlanSetOptions{Global: g, Schedule: ptr("timebased")})
	})
	mustContain(t, err, `--schedule: schedule "timebased" must be regular, immediate or time-based`)
	if code := cliutil.ExitCode(err); code != cliutil.ExitUsage || e.spec().Revision != before.Revision {
		t.Errorf("bad schedule: exit %d, revision %d → %d", code, before.Revision, e.spec().Revision)
	}
	cmd := newPlanSetCmd(&Global{})
	if u := cmd.Flags().Lookup("schedule").Usage; !strings.Contains(u, "time-based") {
		t.Errorf("--schedule help: %q", u)
	}
	if !strings.Contains(cmd.Long, "time-based lets every group update during its\nown windows") {
		t.Errorf("plan set help does not explain time-based:\n%s", cmd.Long)
	}
}
