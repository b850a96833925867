package fleetctl

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestPlanSetSaysWhatCarriedOverBinary (issue 25, point 10): after
// "plan set … --critical", "plan set --target 1.1.0" kept critical, so the
// real rollout ignored every window, and its output did not say so; and a
// plan without critical did not say that groups without days/start_hour
// start only 00:00-01:00. Through the binary: plan set names every setting
// it kept, critical loudly with the command that undoes it, and says when
// each group starts.
func TestPlanSetSaysWhatCarriedOverBinary(t *testing.T) {
	e := newEnv(t)
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("dev"), rollout.DefaultGroup("prod")}
	e.putConfig(cfg)
	at := time.Now().UTC()
	for _, g := range []string{"dev", "prod"} {
		e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: g, At: at, Agents: 10, Versions: rollout.Counts{"1.0.0": {Count: 10, LowestID: idA}}})
	}
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL()}
	if _, stderr, code := runBin(t, bin, env, "plan", "set", "--start", "1.0.0", "--target", "1.0.1", "--critical"); code != 0 {
		t.Fatal(stderr)
	}

	stdout, stderr, code := runBin(t, bin, env, "plan", "set", "--target", "1.1.0")
	if code != 0 {
		t.Fatal(stderr)
	}
	for _, want := range []string{
		"target_version 1.0.1 → 1.1.0",
		"Carried over from the previous plan (no flag given): start_version 1.0.0, schedule regular, strategy backpressure, critical true, mode enabled",
		"WARNING: critical is still true (carried over): groups start outside their windows",
		"fleetctl plan set --critical=false",
		"When each group starts",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("plan set --target output lacks %q:\n%s", want, stdout)
		}
	}
	if !e.spec().Value.Critical {
		t.Fatal("critical was not carried over: the test's premise is gone")
	}
	startLine := func(out, group string) string { // the last section names the group last
		_, starts, _ := strings.Cut(out, "When each group starts")
		for _, l := range strings.Split(starts, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == group {
				return l
			}
		}
		return ""
	}
	if l := startLine(stdout, "dev"); !strings.Contains(l, "now") {
		t.Errorf("critical: dev does not start now: %q\n%s", l, stdout)
	}

	// Without critical, the groups wait for their window: 00:00-01:00
	// in the config's zone (UTC) by default, and plan set says when.
	stdout, stderr, code = runBin(t, bin, env, "plan", "set", "--critical=false")
	if code != 0 {
		t.Fatal(stderr)
	}
	if strings.Contains(stdout, "WARNING: critical") || !strings.Contains(stdout, "critical true → false") {
		t.Errorf("plan set --critical=false output:\n%s", stdout)
	}
	l := startLine(stdout, "dev")
	if now := time.Now().UTC(); now.Hour() != 0 && (!strings.Contains(l, " 00:00 UTC, in ") || !strings.Contains(l, "window")) {
		t.Errorf("dev's start line does not say it waits for 00:00 UTC: %q\n%s", l, stdout)
	}
	if l := startLine(stdout, "prod"); !strings.Contains(l, "predecessor") {
		t.Errorf("prod's start line does not say it waits for dev: %q\n%s", l, stdout)
	}
}
