package fleetctl

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestCompletion: the binary's shell completion offers the configured
// group names for --group, the plan's versions for --target, and the
// formats for -o.
func TestCompletion(t *testing.T) {
	bin := fleetctlBin(t)
	e := newEnv(t)
	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC",
		Groups: []rollout.GroupConfig{rollout.DefaultGroup("canary"), rollout.DefaultGroup("prod-eu"), rollout.DefaultGroup("prod-us")}})
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	e.putBeats("prod-eu", rolledBackBeat(agentA), heartbeat.Heartbeat{AgentID: agentC, ActiveVersion: "1.4.0"})
	env := []string{"NATS_URL=" + e.srv.URL()}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "--group", ""}, []string{"canary", "prod-eu", "prod-us"}},
		{[]string{"config", "set", "--group", "prod"}, []string{"prod-eu", "prod-us"}},
		{[]string{"status", "--group", ""}, []string{"canary", "prod-eu", "prod-us"}},
		{[]string{"plan", "set", "--target", ""}, []string{"1.4.0\tthe plan's target", "1.3.2\tthe plan's start"}},
		{[]string{"plan", "set", "--start", "1.3"}, []string{"1.3.2\tthe plan's start"}},
		{[]string{"pause", "-o", ""}, []string{"text", "json"}},
		{[]string{"agents", "ls", "-o", ""}, []string{"table", "json"}},
		{[]string{"config", "show", "-o", ""}, []string{"yaml", "json"}},
		{[]string{"retry", "--group", ""}, []string{"canary", "prod-eu", "prod-us"}},
		{[]string{"retry", "--group", "prod-eu", "--agent", ""}, []string{string(agentA) + "\trolled back from 1.4.0"}},
	} {
		stdout, stderr, code := runBin(t, bin, env, append([]string{"__complete"}, tc.args...)...)
		if code != 0 {
			t.Fatalf("__complete %q: exit %d: %s", tc.args, code, stderr)
		}
		got := completions(stdout)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("__complete %q (-want +got):\n%s", tc.args, diff)
		}
	}
	// With a release repository: the app's releases after the plan's
	// versions, newest first, flagged.
	e.putCatalog(kv.ReleaseCatalog{URL: "https://r.example", Checked: testNow, At: testNow, Releases: []rollout.Release{
		{App: "default", Version: "1.3.2"}, {App: "default", Version: "1.4.0"},
		{App: "default", Version: "1.4.1", Security: true}, {App: "default", Version: "1.2.0", EndOfLife: true},
		{App: "other", Version: "9.0.0"},
	}})
	stdout, stderr, code := runBin(t, bin, env, "__complete", "plan", "set", "--target", "")
	want := []string{"1.4.0\tthe plan's target", "1.3.2\tthe plan's start", "1.4.1\treleased, security", "1.2.0\treleased, end of life"}
	if diff := cmp.Diff(want, completions(stdout)); code != 0 || diff != "" {
		t.Errorf("__complete plan set --target with a catalog: exit %d %s(-want +got):\n%s", code, stderr, diff)
	}

	// Nothing to offer from a bus that does not answer, quickly and quietly.
	start := time.Now()
	stdout, _, code = runBin(t, bin, []string{"NATS_URL=nats://127.0.0.1:1"}, "__complete", "run", "--group", "")
	if got := completions(stdout); code != 0 || len(got) != 0 {
		t.Errorf("no bus: exit %d, completions %q", code, got)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("completion without a bus took %v", d)
	}
}

// completions are cobra's __complete lines before the ":directive" line.
func completions(out string) []string {
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, ":") || l == "" {
			continue
		}
		got = append(got, l)
	}
	return got
}
