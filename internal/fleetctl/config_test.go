package fleetctl

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

func configSet(o ConfigSetOptions) func(g *Global) error {
	return func(g *Global) error {
		o.Global = g
		return RunConfigSet(testCtx(), &o)
	}
}

func configShow(output string) func(g *Global) error {
	return func(g *Global) error { return RunConfigShow(testCtx(), &ConfigShowOptions{Global: g, Output: output}) }
}

func configApply(file string) func(g *Global) error {
	return func(g *Global) error { return RunConfigApply(testCtx(), &ConfigApplyOptions{Global: g, File: file}) }
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigSetShowRoundTrip(t *testing.T) {
	e := newEnv(t)

	// No config yet: show prints the default, and says so.
	out := e.mustRun(configShow("yaml"))
	if !strings.HasPrefix(out, "# fleet_config/config: none written yet") {
		t.Errorf("show of the default does not say it is the default:\n%s", out)
	}

	out = e.mustRun(configSet(ConfigSetOptions{Group: "staging", Add: true, StartHour: ptr(3), JitterSeconds: ptr(60)}))
	if !strings.Contains(out, `group "staging" added`) {
		t.Errorf("set output does not report the new group:\n%s", out)
	}
	e.mustRun(configSet(ConfigSetOptions{
		Group: "prod", Add: true, Days: ptr("Mon,Wed,Fri"), WaitHours: ptr(4), CanaryCount: ptr(2),
		MaxInFlight: ptr("10%"), FailureThreshold: ptr("2.5%"), AlertAfter: ptr("2h"),
		HealthTimeout: ptr("1m"), MinHealthyTime: ptr("30s"), UpdateTimeout: ptr("45m"), DependsOn: ptr("default,staging"),
		InfrastructureHold: ptr("25%"), VanishedLimit: ptr("5%"),
	}))
	out = e.mustRun(configSet(ConfigSetOptions{Group: "default", DependsOn: ptr(""), Mode: ptr("paused"), Timezone: ptr("Europe/Berlin")}))
	for _, want := range []string{"mode enabled → paused", "timezone UTC → Europe/Berlin", `group "default": depends_on null → []`} {
		if !strings.Contains(out, want) {
			t.Errorf("set output lacks %q:\n%s", want, out)
		}
	}

	staging := rollout.DefaultGroup("staging")
	staging.StartHour, staging.JitterSeconds = 3, 60
	prod := rollout.DefaultGroup("prod")
	prod.Days, prod.WaitHours, prod.CanaryCount = []string{"Mon", "Wed", "Fri"}, 4, 2
	prod.MaxInFlight, prod.FailureThreshold = 10, 2.5
	prod.AlertAfter, prod.HealthTimeout, prod.MinHealthyTime = rollout.Duration(2*time.Hour), rollout.Duration(time.Minute), rollout.Duration(30*time.Second)
	prod.UpdateTimeout = rollout.Duration(45 * time.Minute)
	prod.InfrastructureHold, prod.VanishedLimit = 25, 5
	prod.DependsOn = []string{"default", "staging"}
	def := rollout.DefaultGroup("default")
	def.DependsOn = []string{}
	want := rollout.Config{V: 1, Mode: rollout.ModePaused, Timezone: "Europe/Berlin", Groups: []rollout.GroupConfig{def, staging, prod}, QuarantineAfter: rollout.DefaultQuarantineAfter}
	stored := e.config()
	if diff := cmp.Diff(want, stored.Value); diff != "" {
		t.Fatalf("stored config (-want +got):\n%s", diff)
	}

	yamlOut := e.mustRun(configShow("yaml"))
	wantYAML := `# fleet_config/config revision 3
v: 1
mode: paused
timezone: Europe/Berlin
groups:
  - name: default
    days: ['*']
    start_hour: 0
    wait_hours: 0
    jitter_seconds: 5
    canary_count: 5
    max_in_flight: 20%
    alert_after: 4h
    failure_threshold: 5%
    health_timeout: 5m
    min_healthy_time: 5m
    update_timeout: 30m
    infrastructure_hold: 50%
    vanished_limit: 10%
    depends_on: []
  - name: staging
    days: ['*']
    start_hour: 3
    wait_hours: 0
    jitter_seconds: 60
    canary_count: 5
    max_in_flight: 20%
    alert_after: 4h
    failure_threshold: 5%
    health_timeout: 5m
    min_healthy_time: 5m
    update_timeout: 30m
    infrastructure_hold: 50%
    vanished_limit: 10%
    depends_on: null
  - name: prod
    days: [Mon, Wed, Fri]
    start_hour: 0
    wait_hours: 4
    jitter_seconds: 5
    canary_count: 2
    max_in_flight: 10%
    alert_after: 2h
    failure_threshold: 2.5%
    health_timeout: 1m
    min_healthy_time: 30s
    update_timeout: 45m
    infrastructure_hold: 25%
    vanished_limit: 5%
    depends_on: [default, staging]
quarantine_after: 3
`
	if diff := cmp.Diff(wantYAML, yamlOut); diff != "" {
		t.Errorf("config show (-want +got):\n%s", diff)
	}

	// The YAML keys are the JSON keys: both forms decode to the same value.
	jsonOut := e.mustRun(configShow("json"))
	fromYAML, err := yamlToJSON([]byte(yamlOut))
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(fromYAML, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(jsonOut), &b); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b, a); diff != "" {
		t.Errorf("YAML and JSON forms differ (-json +yaml):\n%s", diff)
	}

	// What show prints, apply takes back unchanged (YAML and JSON alike).
	for name, text := range map[string]string{"config.yaml": yamlOut, "config.json": jsonOut} {
		out := e.mustRun(configApply(writeFile(t, name, text)))
		if !strings.Contains(out, "unchanged") {
			t.Errorf("apply of %s: want unchanged, got:\n%s", name, out)
		}
		if got := e.configRevision(); got != stored.Revision {
			t.Errorf("apply of an unchanged %s wrote: revision %d → %d", name, stored.Revision, got)
		}
	}

	// Only the given settings change; "-" restores the default dependency.
	e.mustRun(configSet(ConfigSetOptions{Group: "default", StartHour: ptr(5), DependsOn: ptr("-")}))
	got := e.config().Value
	want.Groups[0].StartHour, want.Groups[0].DependsOn = 5, nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after set --start-hour 5 --depends-on - (-want +got):\n%s", diff)
	}
}

func TestConfigApply(t *testing.T) {
	e := newEnv(t)
	file := writeFile(t, "fleet.yaml", `# two groups; omitted settings take their defaults
mode: enabled
groups:
  - name: staging
    start_hour: 3
  - name: prod
    days: [mon, wed]
    max_in_flight: "10%"
    depends_on: [staging]
`)
	out := e.mustRun(configApply(file))
	for _, want := range []string{"replacing the built-in default", `group "default" removed`, `group "staging" added`, `group "prod" added`} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output lacks %q:\n%s", want, out)
		}
	}
	staging := rollout.DefaultGroup("staging")
	staging.StartHour = 3
	prod := rollout.DefaultGroup("prod")
	prod.Days, prod.MaxInFlight, prod.DependsOn = []string{"mon", "wed"}, 10, []string{"staging"}
	want := rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC", Groups: []rollout.GroupConfig{staging, prod}, QuarantineAfter: rollout.DefaultQuarantineAfter}
	if diff := cmp.Diff(want, e.config().Value); diff != "" {
		t.Errorf("stored config (-want +got):\n%s", diff)
	}

	// JSON from stdin works too.
	out = e.mustRun(func(g *Global) error {
		return RunConfigApply(testCtx(), &ConfigApplyOptions{Global: g, File: "-",
			In: strings.NewReader(`{"groups":[{"name":"solo","canary_count":0}]}`)})
	})
	if !strings.Contains(out, `group "solo" added`) {
		t.Errorf("apply from stdin:\n%s", out)
	}
	solo := rollout.DefaultGroup("solo")
	solo.CanaryCount = 0
	if diff := cmp.Diff([]rollout.GroupConfig{solo}, e.config().Value.Groups); diff != "" {
		t.Errorf("groups after apply from stdin (-want +got):\n%s", diff)
	}
}

func TestConfigReset(t *testing.T) {
	e := newEnv(t)
	e.mustRun(configSet(ConfigSetOptions{Group: "staging", Add: true, StartHour: ptr(3)}))
	before := e.configRevision()
	out := e.mustRun(func(g *Global) error { return RunConfigReset(testCtx(), &ConfigResetOptions{Global: g}) })
	if !strings.Contains(out, `group "staging" removed`) {
		t.Errorf("reset output:\n%s", out)
	}
	got := e.config()
	if diff := cmp.Diff(rollout.DefaultConfig(), got.Value); diff != "" {
		t.Errorf("config after reset (-want +got):\n%s", diff)
	}
	if got.Revision <= before {
		t.Errorf("revision %d after reset, was %d", got.Revision, before)
	}
	out = e.mustRun(func(g *Global) error { return RunConfigReset(testCtx(), &ConfigResetOptions{Global: g}) })
	if !strings.Contains(out, "already the default") || e.configRevision() != got.Revision {
		t.Errorf("second reset wrote or said: %s", out)
	}
}

func TestConfigDeleteGroup(t *testing.T) {
	e := newEnv(t)
	e.mustRun(configSet(ConfigSetOptions{Group: "staging", Add: true}))
	e.mustRun(configSet(ConfigSetOptions{Group: "prod", Add: true, DependsOn: ptr("staging")}))
	rev := e.configRevision()

	_, err := e.run(func(g *Global) error {
		return RunConfigDeleteGroup(testCtx(), &ConfigDeleteGroupOptions{Global: g, Group: "staging"})
	})
	mustContain(t, err, `depends_on "staging": no such group`)
	if got := e.configRevision(); got != rev {
		t.Errorf("a refused delete wrote: revision %d → %d", rev, got)
	}

	e.mustRun(func(g *Global) error {
		return RunConfigDeleteGroup(testCtx(), &ConfigDeleteGroupOptions{Global: g, Group: "prod"})
	})
	var names []string
	for _, g := range e.config().Value.Groups {
		names = append(names, g.Name)
	}
	if diff := cmp.Diff([]string{"default", "staging"}, names); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	_, err = e.run(func(g *Global) error {
		return RunConfigDeleteGroup(testCtx(), &ConfigDeleteGroupOptions{Global: g, Group: "prod"})
	})
	mustContain(t, err, `--group "prod": no such group in the config`, "its groups are: default, staging", "nothing written")
}

func TestConfigInvalidValuesWriteNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cmd   func(t *testing.T) func(g *Global) error
		parts []string
	}{
		{"max_in_flight above 100%", func(*testing.T) func(*Global) error {
			return configSet(ConfigSetOptions{Group: "prod", MaxInFlight: ptr("120%")})
		}, []string{`group "prod": max_in_flight "120%" must be 1%-100%`}},
		{"start_hour 24", func(*testing.T) func(*Global) error {
			return configSet(ConfigSetOptions{Group: "prod", StartHour: ptr(24)})
		}, []string{`group "prod": start_hour 24 must be 0-23`}},
		{"percent without sign", func(*testing.T) func(*Global) error {
			return configSet(ConfigSetOptions{Group: "prod", FailureThreshold: ptr("5")})
		}, []string{"--failure-threshold", "percent sign"}},
		{"bad duration", func(*testing.T) func(*Global) error {
			return configSet(ConfigSetOptions{Group: "prod", AlertAfter: ptr("4 hours")})
		}, []string{"--alert-after", "duration"}},
		{"update_timeout below a minute", func(*testing.T) func(*Global) error {
			return configSet(ConfigSetOptions{Group: "prod", UpdateTimeout: ptr("30s")})
		}, []string{`group "prod": update_timeout "30s" must be 1m-168h`}},
		{"update_timeout within the agent's waits", func(*testing.T) func(*Global) error {
			return configSet(ConfigSetOptions{Group: "prod", UpdateTimeout: ptr("10m")})
		}, []string{`group "prod": update_timeout "10m" must be longer than health_timeout + min_healthy_time (10m)`}},
		{"update_timeout 0", func(*testing.T) func(*Global) error {
			return configSet(ConfigSetOptions{Group: "prod", UpdateTimeout: ptr("0s")})
		}, []string{`group "prod": update_timeout "0s" must be 1m-168h`}},
		{"update_timeout not a duration", func(*testing.T) func(*Global) error {
			return configSet(ConfigSetOptions{Group: "prod", UpdateTimeout: ptr("half an hour")})
		}, []string{"--update-timeout", "duration"}},
		{"health_timeout past update_timeout", func(*testing.T) func(*Global) error {
			return configSet(ConfigSetOptions{Group: "prod", HealthTimeout: ptr("1h")})
		}, []string{`group "prod": update_timeout "30m" must be longer than health_timeout + min_healthy_time (1h5m)`}},
		{"apply: update_timeout above a week", func(t *testing.T) func(*Global) error {
			return configApply(writeFile(t, "c.yaml", "groups:\n  - name: prod\n    update_timeout: 200h\n"))
		}, []string{`group "prod": update_timeout "200h" must be 1m-168h`}},
		{"bad day", func(*testing.T) func(*Global) error {
			return configSet(ConfigSetOptions{Group: "prod", Days: ptr("Mon,Funday")})
		}, []string{`group "prod": days: "Funday" is not a day`}},
		{"dependency cycle", func(*testing.T) func(*Global) error {
			// staging follows prod; prod already follows staging.
			return configSet(ConfigSetOptions{Group: "staging", DependsOn: ptr("prod")})
		}, []string{"depends_on: dependency cycle", "staging → prod → staging"}},
		{"unknown dependency", func(*testing.T) func(*Global) error {
			return configSet(ConfigSetOptions{Group: "prod", DependsOn: ptr("nowhere")})
		}, []string{`group "prod": depends_on "nowhere": no such group`}},
		{"bad mode", func(*testing.T) func(*Global) error {
			return configSet(ConfigSetOptions{Mode: ptr("sideways")})
		}, []string{`mode "sideways" must be enabled, paused or disabled`}},
		{"new group with a bad setting", func(*testing.T) func(*Global) error {
			return configSet(ConfigSetOptions{Group: "lab", Add: true, CanaryCount: ptr(11)})
		}, []string{`group "lab": canary_count 11 must be 0-10`}},
		{"apply: unknown field", func(t *testing.T) func(*Global) error {
			return configApply(writeFile(t, "c.yaml", "groups:\n  - name: prod\n    max_inflight: 10%\n"))
		}, []string{`group "prod": unknown field "max_inflight"`}},
		{"apply: out of range", func(t *testing.T) func(*Global) error {
			return configApply(writeFile(t, "c.yaml", "groups:\n  - name: prod\n    start_hour: 24\n"))
		}, []string{`group "prod": start_hour 24 must be 0-23`}},
		{"apply: cycle", func(t *testing.T) func(*Global) error {
			return configApply(writeFile(t, "c.yaml", "groups:\n  - {name: a, depends_on: [b]}\n  - {name: b}\n"))
		}, []string{"depends_on: dependency cycle"}},
		{"apply: wrong type", func(t *testing.T) func(*Global) error {
			return configApply(writeFile(t, "c.yaml", "groups:\n  - name: prod\n    jitter_seconds: soon\n"))
		}, []string{"jitter_seconds"}},
		{"apply: two documents", func(t *testing.T) func(*Global) error {
			return configApply(writeFile(t, "c.yaml", "mode: enabled\n---\nmode: paused\n"))
		}, []string{"more than one YAML document"}},
		{"apply: duplicate key", func(t *testing.T) func(*Global) error {
			return configApply(writeFile(t, "c.yaml", "mode: enabled\nmode: paused\n"))
		}, []string{`mapping key "mode" already defined`}},
		{"apply: empty file", func(t *testing.T) func(*Global) error {
			return configApply(writeFile(t, "c.yaml", "# nothing\n"))
		}, []string{"empty: want a config document"}},
		{"apply: not a mapping", func(t *testing.T) func(*Global) error {
			return configApply(writeFile(t, "c.yaml", "- name: prod\n"))
		}, []string{"want a config object"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			staging, prod := rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")
			e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC", Groups: []rollout.GroupConfig{staging, prod}})
			before := e.config()

			_, err := e.run(tc.cmd(t))
			mustContain(t, err, tc.parts...)
			if code := cliutil.ExitCode(err); code != cliutil.ExitUsage {
				t.Errorf("exit code %d, want %d", code, cliutil.ExitUsage)
			}
			after := e.config()
			if after.Revision != before.Revision {
				t.Errorf("an invalid change wrote: revision %d → %d", before.Revision, after.Revision)
			}
			if diff := cmp.Diff(before.Value, after.Value); diff != "" {
				t.Errorf("stored config changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestConfigChangeRefusedWhileGroupRollsOut(t *testing.T) {
	e := newEnv(t)
	e.putConfig(rollout.DefaultConfig())
	e.putStatus(rollout.GroupStatus{V: 1, Group: "default", State: rollout.StateActive, TargetVersion: "1.4.0", StartVersion: "1.3.2"})
	rev := e.configRevision()

	_, err := e.run(configSet(ConfigSetOptions{Group: "default", StartHour: ptr(3)}))
	if !errors.Is(err, rollout.ErrConfigChange) {
		t.Fatalf("err = %v, want %v", err, rollout.ErrConfigChange)
	}
	mustContain(t, err, `group "default" is active`, "nothing was written")
	if code := cliutil.ExitCode(err); code != cliutil.ExitFailure {
		t.Errorf("exit code %d, want %d", code, cliutil.ExitFailure)
	}
	if got := e.configRevision(); got != rev {
		t.Errorf("refused change wrote: revision %d → %d", rev, got)
	}
	// The mode may always change.
	e.mustRun(configSet(ConfigSetOptions{Mode: ptr("paused")}))
	if m := e.config().Value.Mode; m != rollout.ModePaused {
		t.Errorf("mode %q, want paused", m)
	}
}

func TestConfigConcurrentEditIsNotLost(t *testing.T) {
	theirs := rollout.DefaultConfig()
	theirs.Groups[0].JitterSeconds = 600

	for _, tc := range []struct {
		name  string
		setup func(e *env)
		write func(e *env) // someone else, between our read and our write
	}{
		{"update", func(e *env) { e.putConfig(rollout.DefaultConfig()) }, func(e *env) {
			cur := e.config()
			if _, err := kv.Update(e.ctx, e.fleet.Config, kv.KeyConfig, theirs, cur.Revision); err != nil {
				e.t.Fatal(err)
			}
		}},
		{"create", func(*env) {}, func(e *env) {
			if _, err := kv.Create(e.ctx, e.fleet.Config, kv.KeyConfig, theirs); err != nil {
				e.t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tc.setup(e)
			g, _, _ := e.global()
			g.beforeWrite = func() { tc.write(e) }
			err := RunConfigSet(testCtx(), &ConfigSetOptions{Global: g, Group: "default", StartHour: ptr(3)})
			if !errors.Is(err, kv.ErrConflict) {
				t.Fatalf("err = %v, want %v", err, kv.ErrConflict)
			}
			mustContain(t, err, "fleet_config/config changed under you (someone else", "nothing was written", "re-read and retry")
			if diff := cmp.Diff(theirs, e.config().Value); diff != "" {
				t.Errorf("the other writer's config was lost (-theirs +stored):\n%s", diff)
			}
		})
	}
}

func TestConfigApplyReplacesUnreadableConfig(t *testing.T) {
	e := newEnv(t)
	// Someone wrote the bucket by hand, with a typo rollout refuses to read.
	if _, err := e.fleet.Config.Put(e.ctx, kv.KeyConfig, []byte(`{"v":1,"groups":[{"name":"prod","max_inflight":"10%"}]}`)); err != nil {
		t.Fatal(err)
	}
	_, err := e.run(configShow("yaml"))
	mustContain(t, err, "fleet_config/config", `unknown field "max_inflight"`)
	_, err = e.run(configSet(ConfigSetOptions{Group: "prod", StartHour: ptr(3)}))
	mustContain(t, err, `unknown field "max_inflight"`)

	// apply and reset are the way out, still compare-and-swap.
	g, _, errOut := e.global()
	if err := RunConfigApply(testCtx(), &ConfigApplyOptions{Global: g, File: writeFile(t, "c.yaml", "groups:\n  - name: prod\n    max_in_flight: 10%\n")}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "replacing a stored config that cannot be read") {
		t.Errorf("no warning: %q", errOut)
	}
	prod := rollout.DefaultGroup("prod")
	prod.MaxInFlight = 10
	if diff := cmp.Diff([]rollout.GroupConfig{prod}, e.config().Value.Groups); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
}

// TestConfigSetVanishedLimit: --vanished-limit is written, reported as a
// change, and a bad value is a usage error that writes nothing.
func TestConfigSetVanishedLimit(t *testing.T) {
	e := newEnv(t)
	e.mustRun(configSet(ConfigSetOptions{Group: "prod", Add: true}))
	out := e.mustRun(configSet(ConfigSetOptions{Group: "prod", VanishedLimit: ptr("25%")}))
	if !strings.Contains(out, `group "prod": vanished_limit 10% → 25%`) {
		t.Errorf("set output does not report the change:\n%s", out)
	}
	if g, _ := e.config().Value.Group("prod"); g.VanishedLimit != 25 {
		t.Errorf("vanished_limit %v, want 25%%", g.VanishedLimit)
	}
	rev := e.configRevision()
	for _, bad := range []string{"25", "101%"} {
		_, err := e.run(configSet(ConfigSetOptions{Group: "prod", VanishedLimit: ptr(bad)}))
		if err == nil || !strings.Contains(err.Error(), "vanished") {
			t.Errorf("--vanished-limit %s: %v, want an error naming it", bad, err)
		}
		if cliutil.ExitCode(err) != cliutil.ExitUsage {
			t.Errorf("--vanished-limit %s: exit %d, want %d", bad, cliutil.ExitCode(err), cliutil.ExitUsage)
		}
	}
	if e.configRevision() != rev {
		t.Errorf("a refused --vanished-limit wrote the config")
	}
}
