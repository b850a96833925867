package fleetctl

import (
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestMistypedCommandBinary (issue 25, point 12): a mistyped command
// followed by a flag the parent does not know said "unknown shorthand flag:
// 'f'", pointing at the wrong word. The binary says which word is not a
// command and the closest one, exit 2.
func TestMistypedCommandBinary(t *testing.T) {
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=nats://127.0.0.1:1"} // nothing is read: the command line is wrong
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"config", "aply", "-f", "x"}, []string{`unknown command "aply" for "fleetctl config"`, `did you mean "apply"?`}},
		{[]string{"confg", "apply", "-f", "x"}, []string{`unknown command "confg" for "fleetctl"`, `did you mean "config"?`}},
		{[]string{"plan", "st", "--target", "1.4.0"}, []string{`unknown command "st" for "fleetctl plan"`, `did you mean "set"?`}},
		{[]string{"qurantine", "ls"}, []string{`unknown command "qurantine" for "fleetctl"`, `did you mean "quarantine"?`}},
		{[]string{"xyzzy", "-o", "json"}, []string{`unknown command "xyzzy" for "fleetctl"`, "its commands are: agents, approve"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := runBin(t, bin, env, tc.args...)
			if code != cliutil.ExitUsage {
				t.Errorf("exit %d, want %d", code, cliutil.ExitUsage)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "flag") || stdout != "" {
				t.Errorf("stdout %q, stderr blames a flag:\n%s", stdout, stderr)
			}
		})
	}
	// A real flag error on a real command is still one.
	_, stderr, code := runBin(t, bin, env, "config", "show", "--bogus")
	if code != cliutil.ExitUsage || !strings.Contains(stderr, "unknown flag: --bogus") {
		t.Errorf("config show --bogus: exit %d: %s", code, stderr)
	}
}

// TestStateErrorsExitOneBinary (issue 25, point 12): "not awaiting
// approval" exited 2 with "Run 'fleetctl --help' for usage", though no
// help fixes a group's state. A refusal by the fleet's state is exit 1
// with no usage hint; a wrong invocation stays exit 2 with it.
func TestStateErrorsExitOneBinary(t *testing.T) {
	e := approveEnv(t, groupStatus(rollout.StateActive))
	e.putQuarantine(controllerQuarantine("1.5.0"))
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL()}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"approve", "--group", "prod", "--reason", "ok"}, cliutil.ExitFailure, "not awaiting approval"},
		{[]string{"plan", "set", "--target", "1.5.0"}, cliutil.ExitFailure, "1.5.0 is quarantined"},
		{[]string{"config", "add-group", "--group", "prod"}, cliutil.ExitFailure, `group "prod" is already in the config`},
		{[]string{"approve", "--group", "prod"}, cliutil.ExitUsage, "--reason is required"},
		{[]string{"approve", "--group", "prod", "--reason", "ok", "--stage", "later"}, cliutil.ExitUsage, "--stage"},
		{[]string{"plan", "set", "--target", "latest"}, cliutil.ExitUsage, "invalid version"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, stderr, code := runBin(t, bin, env, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, want %d with %q:\n%s", code, tc.code, tc.want, stderr)
			}
			hint := strings.Contains(stderr, "--help' for usage")
			if hint != (tc.code == cliutil.ExitUsage) {
				t.Errorf("usage hint shown: %v, want it only for usage errors:\n%s", hint, stderr)
			}
		})
	}
}

// TestHistoryFullWhenPipedBinary (issue 25, point 12): history cut CHANGE
// and REASON to 26 and 14 columns even piped and with COLUMNS=250. Piped,
// and with -o wide, every cell is printed in full.
func TestHistoryFullWhenPipedBinary(t *testing.T) {
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL(), "COLUMNS=250"}
	reason := "db maintenance window CHG-8812, approved by the storage team; resume after the replica catches up"
	if _, stderr, code := runBin(t, bin, env, "--actor", "alice", "pause", "--reason", reason); code != 0 {
		t.Fatal(stderr)
	}
	if _, stderr, code := runBin(t, bin, env, "--actor", "alice", "plan", "set", "--target", "1.5.0", "--strategy", "grouped", "--schedule", "immediate"); code != 0 {
		t.Fatal(stderr)
	}
	for _, args := range [][]string{{"history"}, {"history", "-o", "wide"}} {
		stdout, stderr, code := runBin(t, bin, env, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		for _, want := range []string{reason, "schedule regular → immediate, strategy backpressure → grouped, target_version 1.4.0 → 1.5.0"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%v lacks %q:\n%s", args, want, stdout)
			}
		}
		if strings.Contains(stdout, "…") {
			t.Errorf("%v cut a cell:\n%s", args, stdout)
		}
	}
}

// TestConfigApplyNamesAnalysisChangesBinary (issue 25, point 12): config
// apply printed "no setting changed" for changes to the metric analysis
// and Prometheus settings, which it had just written. It names each.
func TestConfigApplyNamesAnalysisChangesBinary(t *testing.T) {
	e := newEnv(t)
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL()}
	first := writeFile(t, "first.yaml", analysisYAML)
	if _, stderr, code := runBin(t, bin, env, "config", "apply", "-f", first); code != 0 {
		t.Fatal(stderr)
	}
	changed := strings.NewReplacer(
		"prometheus_url: http://prometheus:9090", "prometheus_url: https://prom.example.com\nprometheus_ca_file: /etc/fleetwave/prom-ca.pem",
		`success: "< 0.01"`, `success: "< 0.02"`,
		"        inconclusive_limit: 10\n", "        inconclusive_limit: 10\n      - name: saturation\n        query: 'max(node_load1)'\n        success: \"< 4\"\n",
	).Replace(analysisYAML)
	if changed == analysisYAML {
		t.Fatal("the replacements changed nothing")
	}
	stdout, stderr, code := runBin(t, bin, env, "config", "apply", "-f", writeFile(t, "second.yaml", changed))
	if code != 0 {
		t.Fatal(stderr)
	}
	for _, want := range []string{
		"prometheus_url http://prometheus:9090 → https://prom.example.com",
		"prometheus_ca_file none → /etc/fleetwave/prom-ca.pem",
		`analysis check "error-rate": success < 0.01 → < 0.02`,
		`group "prod": analysis check "saturation" added: query max(node_load1), success < 4`,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("config apply output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "no setting changed") {
		t.Errorf("config apply says nothing changed:\n%s", stdout)
	}
}
