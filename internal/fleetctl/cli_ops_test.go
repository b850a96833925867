package fleetctl

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// These fail before connecting, so no server is needed.
func TestOperatorUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"config"},
		{"config", "show", "-o", "table"},
		{"config", "set"},
		{"config", "set", "--start-hour", "3"},
		{"config", "set", "--group", "Bad.Group", "--start-hour", "3"},
		{"config", "add-group"},
		{"config", "add-group", "--group", "Bad.Group"},
		{"config", "add-group", "--group", "x", "--mode", "paused"},
		{"config", "set", "--group", "prod", "--start-hour", "three"},
		{"config", "set", "--group", "prod", "--max-in-flight", "20"},
		{"config", "set", "--group", "prod", "--alert-after", "4"},
		{"config", "set", "--group", "prod", "--depends-on", "a,Not_Valid"},
		{"config", "apply"},
		{"config", "delete-group"},
		{"plan"},
		{"plan", "show", "-o", "yaml"},
		{"plan", "set"},
		{"plan", "set", "--target", "1.4"},
		{"plan", "set", "--target", "1.4.0", "--start", "vX"},
		{"plan", "set", "--critical=maybe"},
		{"pause", "now"},
		{"run"},
		{"rollback", "--group", "Bad.Group"},
		{"mark-done", "--group", ""},
		{"reset", "--group", "-x"},
		{"status", "--group", "Bad.Group"},
		{"watch", "extra"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			_, stderr, code := execute(t, args...)
			if code != cliutil.ExitUsage {
				t.Errorf("exit code %d, want %d (stderr: %s)", code, cliutil.ExitUsage, stderr)
			}
			if stderr == "" {
				t.Error("no error message on stderr")
			}
		})
	}
}

// Through the real command line: only the flags given change, and the
// -o/--output and env plumbing reach the Run functions.
func TestConfigSetFlagsThroughCLI(t *testing.T) {
	e := newEnv(t)
	out, stderr, code := execute(t, "--nats", e.srv.URL(), "config", "add-group", "--group", "staging", "--start-hour", "3", "--jitter-seconds", "60")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, `group "staging" added`) {
		t.Errorf("output: %s", out)
	}
	_, stderr, code = execute(t, "--nats", e.srv.URL(), "config", "set", "--group", "staging", "--max-in-flight", "50%", "--depends-on", "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := rollout.DefaultGroup("staging")
	want.StartHour, want.JitterSeconds, want.MaxInFlight, want.DependsOn = 3, 60, 50, []string{}
	got, _ := e.config().Value.Group("staging")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("staging (-want +got):\n%s", diff)
	}

	_, stderr, code = execute(t, "--nats", e.srv.URL(), "config", "set", "--group", "staging", "--max-in-flight", "120%")
	if code != cliutil.ExitUsage || !strings.Contains(stderr, `max_in_flight "120%" must be 1%-100%`) {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}

	_, stderr, code = execute(t, "--nats", e.srv.URL(), "plan", "set", "--start", "1.3.2", "--target", "v1.4.0", "--critical")
	if code != 0 {
		t.Fatalf("plan set: exit %d: %s", code, stderr)
	}
	spec := rollout.DefaultSpec("1.3.2", "1.4.0")
	spec.Critical = true
	if diff := cmp.Diff(spec, e.spec().Value); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	_, _, code = execute(t, "--nats", e.srv.URL(), "plan", "set", "--critical=false")
	if code != 0 || e.spec().Value.Critical {
		t.Errorf("--critical=false: exit %d, critical %v", code, e.spec().Value.Critical)
	}
	_, _, code = execute(t, "--nats", e.srv.URL(), "pause")
	if code != 0 || e.spec().Value.Mode != rollout.ModePaused {
		t.Errorf("pause: exit %d, mode %s", code, e.spec().Value.Mode)
	}
}

// A mistyped group is an error that lists the groups and the closest name,
// and writes nothing; adding a group takes its own verb (issue 13, point 2).
func TestConfigSetUnknownGroupWritesNothing(t *testing.T) {
	e := newEnv(t)
	nats := e.srv.URL()

	// No config written yet: the default config has one group, "default".
	_, stderr, code := execute(t, "--nats", nats, "config", "set", "--group", "prdo", "--start-hour", "3")
	if code != cliutil.ExitUsage {
		t.Errorf("set of a group in no config: exit %d, want %d (stderr %q)", code, cliutil.ExitUsage, stderr)
	}
	for _, want := range []string{`"prdo"`, "its groups are: default", "fleetctl config add-group --group prdo", "nothing written"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not contain %q:\n%s", want, stderr)
		}
	}
	if rev := e.configRevision(); rev != 0 {
		t.Fatalf("a config was written (revision %d)", rev)
	}

	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC",
		Groups: []rollout.GroupConfig{rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")}})
	before := e.config()
	for _, args := range [][]string{
		{"config", "set", "--group", "prdo", "--start-hour", "3"},
		{"config", "set", "--group", "prdo", "--mode", "paused"},
		{"config", "add-group", "--group", "prod", "--start-hour", "3"},
	} {
		_, stderr, code := execute(t, append([]string{"--nats", nats}, args...)...)
		// A group that exists is the config's state, not the
		// invocation (issue 25): exit 1. A typo stays a usage error.
		want := cliutil.ExitUsage
		if args[1] == "add-group" {
			want = cliutil.ExitFailure
		}
		if code != want {
			t.Errorf("%q: exit %d, want %d (stderr %q)", args, code, want, stderr)
		}
		if after := e.config(); after.Revision != before.Revision {
			t.Errorf("%q wrote: revision %d → %d", args, before.Revision, after.Revision)
		}
		t.Logf("%q: %s", args, stderr)
	}
	_, stderr, _ = execute(t, "--nats", nats, "config", "set", "--group", "prdo", "--start-hour", "3")
	for _, want := range []string{"its groups are: staging, prod", "did you mean --group prod?", "config add-group --group prdo"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not contain %q:\n%s", want, stderr)
		}
	}
	_, stderr, _ = execute(t, "--nats", nats, "config", "add-group", "--group", "prod")
	if !strings.Contains(stderr, "fleetctl config set --group prod") {
		t.Errorf("add-group of an existing group does not point to config set:\n%s", stderr)
	}

	// An existing group is changed as before (README: set after apply).
	if _, stderr, code := execute(t, "--nats", nats, "config", "set", "--group", "prod", "--start-hour", "3"); code != 0 {
		t.Fatalf("set of an existing group: exit %d: %s", code, stderr)
	}
	if g, _ := e.config().Value.Group("prod"); g.StartHour != 3 {
		t.Errorf("prod start_hour %d, want 3", g.StartHour)
	}
	// And a new one is added on purpose, at the end.
	out, stderr, code := execute(t, "--nats", nats, "config", "add-group", "--group", "prdo", "--canary-count", "0")
	if code != 0 || !strings.Contains(out, `group "prdo" added`) {
		t.Fatalf("add-group: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	want := rollout.DefaultGroup("prdo")
	want.CanaryCount = 0
	groups := e.config().Value.Groups
	if diff := cmp.Diff(want, groups[len(groups)-1]); diff != "" {
		t.Errorf("added group (-want +got):\n%s", diff)
	}
}

// TestEveryGroupFlagNamesTheGroups: a --group the config lacks is named as
// such by every command, with the config's groups and the closest name, and
// the commands that write write nothing (they used to answer "no rollout
// status yet", or for agents ls just "No agents.").
func TestEveryGroupFlagNamesTheGroups(t *testing.T) {
	e := newEnv(t)
	nats := e.srv.URL()
	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC",
		Groups: []rollout.GroupConfig{rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")}})
	e.putSpec(rollout.DefaultSpec("1.0.0", "1.1.0"))
	before := e.config()
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"rollback", "--group", "prdo"}, cliutil.ExitUsage},
		{[]string{"run", "--group", "prdo"}, cliutil.ExitUsage},
		{[]string{"mark-done", "--group", "prdo"}, cliutil.ExitUsage},
		{[]string{"reset", "--group", "prdo"}, cliutil.ExitUsage},
		{[]string{"config", "delete-group", "--group", "prdo"}, cliutil.ExitUsage},
		{[]string{"status", "--group", "prdo"}, cliutil.ExitFailure},
		{[]string{"agents", "ls", "--group", "prdo"}, 0},
	} {
		_, stderr, code := execute(t, append([]string{"--nats", nats}, c.args...)...)
		if code != c.code {
			t.Errorf("%q: exit %d, want %d (stderr %q)", c.args, code, c.code, stderr)
		}
		for _, want := range []string{"prdo", "staging, prod", "did you mean --group prod?"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%q: stderr does not contain %q:\n%s", c.args, want, stderr)
			}
		}
		if after := e.config(); after.Revision != before.Revision {
			t.Errorf("%q wrote the config: revision %d → %d", c.args, before.Revision, after.Revision)
		}
	}
}

func TestRolloutTableFitsWorstCase(t *testing.T) {
	long := strings.Repeat("g", rollout.MaxGroupNameLen)
	full := &GroupRollout{
		InConfig: true, Requires: []string{long, long}, State: rollout.StateCanary, Since: testNow.Add(-999 * 24 * time.Hour),
		Halted: true, HaltedAt: testNow.Add(-time.Hour), HaltReason: strings.Repeat("x", 300),
		Waiting: strings.Repeat("waiting ", 40), Frozen: strings.Repeat("frozen ", 40), Alerted: true,
		Progress: 1, Canaries: 10, TimedOut: ptr(10), Agents: AgentSplit{Updated: 9999, Unchanged: 9999, Failed: 9999},
	}
	rep := StatusReport{
		Plan: &PlanReport{Mode: "disabled", ConfigMode: "disabled", PlanMode: "paused",
			StartVersion: "1.2.3-rc.1+build.5", TargetVersion: "10.20.30-beta.2", Strategy: "backpressure", Schedule: "immediate", Critical: true},
		Groups: []GroupReport{{Name: long, Agents: 9999, Versions: map[string]VersionReport{}, Rollout: full}},
	}
	var out bytes.Buffer
	if err := writeRolloutTable(&out, rep, testNow); err != nil {
		t.Fatal(err)
	}
	checkWidth(t, out.String())

	// The group table fits 80 columns for group names of up to 9
	// characters, whatever the counts.
	full.Agents = AgentSplit{Updated: 9999, Unchanged: 9999, Failed: 9999, Updating: 9999, Waiting: 9999}
	rep.Groups[0].Name = "ggggggggg"
	rows, _ := rolloutRows(rep, testNow)
	for _, r := range rows {
		if n := len([]rune(r)); n > 80 {
			t.Errorf("table row %d columns wide (max 80): %q", n, r)
		}
	}
}
