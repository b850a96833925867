package fleetctl

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// execute runs fleetctl with args and returns stdout, stderr and exit code.
func execute(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	root := NewCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	cliutil.Prepare(root)
	err := root.ExecuteContext(context.Background())
	if err != nil {
		errOut.WriteString(err.Error())
	}
	return out.String(), errOut.String(), cliutil.ExitCode(err)
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"status", "-o", "yaml"},
		{"status", "extra-arg"},
		{"status", "--no-such-flag"},
		{"agents", "ls", "--group", "Bad.Group"},
		{"agents", "ls", "--version", "v1.2.3"},
		{"agents"},
		{"no-such-command"},
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

func TestNoControllerIsAClearFailure(t *testing.T) {
	srv := natstest.Start(t) // a bare server: no stream, no buckets
	_, stderr, code := execute(t, "--nats", srv.URL(), "--timeout", "5s", "status")
	if code != cliutil.ExitFailure {
		t.Errorf("exit code %d, want %d", code, cliutil.ExitFailure)
	}
	if !strings.Contains(stderr, "controller running") {
		t.Errorf("error does not tell the operator what is missing: %s", stderr)
	}
}

func TestEveryCommandHasAnExample(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Example == "" {
			t.Errorf("%q has no example in --help", c.CommandPath())
		}
		for _, s := range c.Commands() {
			if s.Name() != "help" && s.Name() != "completion" {
				walk(s)
			}
		}
	}
	walk(NewCommand())
}

func TestStatusTableGolden(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	entries := []kv.Stats{
		{V: 1, ControllerID: "c1", Group: "prod", At: now.Add(-5 * time.Second), Agents: 30, Versions: rollout.Counts{
			"1.0.0": {Count: 28, FailedCount: 0, LowestID: "0a000000-0000-4000-8000-000000000000"},
			"1.1.0": {Count: 2, FailedCount: 1, LowestID: "0b000000-0000-4000-8000-000000000000"},
		}},
		{V: 1, ControllerID: "c2", Group: "prod", At: now.Add(-7 * time.Second), Agents: 30, Versions: rollout.Counts{"1.0.0": {Count: 30}}},
		{V: 1, ControllerID: "c1", Group: "canary", At: now.Add(-5 * time.Second), Agents: 3, Versions: rollout.Counts{
			"1.1.0": {Count: 2}, rollout.NoVersion: {Count: 1},
		}},
		{V: 1, ControllerID: "old", Group: "gone", At: now.Add(-2 * time.Minute), Agents: 9, Versions: rollout.Counts{"0.9.0": {Count: 9}}},
	}
	var out bytes.Buffer
	if err := writeStatusTable(&out, BuildStatus(entries, now), now); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "status.golden", out.String())
	checkWidth(t, out.String())
}
