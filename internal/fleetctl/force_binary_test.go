package fleetctl

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestForceToPushPastHaltBinary (issue 25, point 9): "mark-done" on a
// halted group told all its hosts to install the crashing release, with no
// warning, confirmation or reason. Through the binary: every verb that
// pushes a halted group or a quarantined target onward is refused (exit 1,
// nothing written) with what it would do and how to force it; --force
// needs --reason (exit 2); the forced action is written, says FORCED, and
// history shows it as "<verb> --force" with the reason in full. rollback,
// the safe direction, needs nothing.
func TestForceToPushPastHaltBinary(t *testing.T) {
	e := newEnv(t)
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("prod"), rollout.DefaultGroup("staging"), rollout.DefaultGroup("lab")}
	e.putConfig(cfg)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	halted := groupStatus(rollout.StateCanary)
	halted.Halted, halted.HaltReason, halted.HaltedAt = true, "canary 0b000000-0000-4000-8000-000000000000 crashed: exit status 2", testNow.Add(-20*time.Second)
	e.putStatus(halted)
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL(), "FLEETCTL_ACTOR=alice"}

	for _, verb := range []string{"mark-done", "run", "reset"} {
		rev := e.status("prod").Revision
		_, stderr, code := runBin(t, bin, env, verb, "--group", "prod")
		for _, want := range []string{verb + " --group prod refused: the group is halted", "crashed: exit status 2",
			"fleetctl " + verb + " --group prod --force --reason", "nothing written"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", verb, want, stderr)
			}
		}
		if code != cliutil.ExitFailure || strings.Contains(stderr, "--help' for usage") {
			t.Errorf("%s: exit %d, want 1 without a usage hint: %s", verb, code, stderr)
		}
		if got := e.status("prod").Revision; got != rev {
			t.Fatalf("%s refused but wrote the status (revision %d → %d)", verb, rev, got)
		}
	}
	_, stderr, _ := runBin(t, bin, env, "mark-done", "--group", "prod")
	if !strings.Contains(stderr, "every agent of the group to install 1.4.0 at once") {
		t.Errorf("mark-done's refusal does not say what it would do:\n%s", stderr)
	}
	_, stderr, _ = runBin(t, bin, env, "reset", "--group", "prod")
	if !strings.Contains(stderr, "restarts the canary phase: fresh canaries install 1.4.0") {
		t.Errorf("reset's refusal does not say what it would do:\n%s", stderr)
	}

	_, stderr, code := runBin(t, bin, env, "mark-done", "--group", "prod", "--force")
	if code != cliutil.ExitUsage || !strings.Contains(stderr, "--reason is required with --force") {
		t.Errorf("--force without --reason: exit %d: %s", code, stderr)
	}

	reason := "INC-4242: the crash was the probe's config, not the app; on-call agreed with the release owner"
	stdout, stderr, code := runBin(t, bin, env, "mark-done", "--group", "prod", "--force", "--reason", reason)
	if code != 0 {
		t.Fatalf("forced mark-done: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "FORCED past the group is halted") || !strings.Contains(stdout, "canary → done") {
		t.Errorf("forced mark-done output:\n%s", stdout)
	}
	st := e.status("prod").Value
	if st.State != rollout.StateDone || !strings.Contains(st.Reason, "forced past a halt (canary 0b000000") || !strings.Contains(st.Reason, "INC-4242") {
		t.Errorf("status after forced mark-done: %s %q", st.State, st.Reason)
	}

	// The trail, piped: the forced verb, the reason, in full.
	stdout, stderr, code = runBin(t, bin, env, "history", "--group", "prod")
	if code != 0 {
		t.Fatal(stderr)
	}
	var line string
	for _, l := range strings.Split(stdout, "\n") {
		if strings.Contains(l, "mark-done --force") {
			line = l
		}
	}
	if !strings.Contains(line, "alice") || !strings.Contains(line, reason) || !strings.Contains(line, "state canary → done") {
		t.Errorf("history has no full line for the forced mark-done:\n%s", stdout)
	}
	rep := historyOf(t, bin, env, "--group", "prod")
	var forced int
	for _, r := range rep.Records {
		if r.Audit != nil && r.Audit.Command == "mark-done --force" && r.Audit.Reason == reason && r.Audit.Actor == "alice" {
			forced++
		}
	}
	if forced != 1 {
		t.Errorf("%d audit records of the forced mark-done with its reason, want 1: %+v", forced, rep.Records)
	}

	// A quarantined target: the same for a group that is not halted.
	e.putQuarantine(controllerQuarantine("1.4.0"))
	staging := groupStatus(rollout.StateUnstarted)
	staging.Group = "staging"
	e.putStatus(staging)
	for _, verb := range []string{"run", "mark-done"} {
		_, stderr, code := runBin(t, bin, env, verb, "--group", "staging")
		if code != cliutil.ExitFailure || !strings.Contains(stderr, "its target 1.4.0 is quarantined (by controller") {
			t.Errorf("%s of a quarantined target: exit %d: %s", verb, code, stderr)
		}
	}
	if e.status("staging").Value.State != rollout.StateUnstarted || e.status("staging").Value.RunRequested {
		t.Errorf("a refused action moved staging: %+v", e.status("staging").Value)
	}
	// A done group is not halted by a quarantine; retry would send the
	// quarantined target to the agents that rolled back from it.
	e.putStatus(func() rollout.GroupStatus { st := groupStatus(rollout.StateDone); st.Group = "staging"; return st }())
	_, stderr, code = runBin(t, bin, env, "retry", "--group", "staging")
	if code != cliutil.ExitFailure || !strings.Contains(stderr, "retry tells the group's agents that rolled back from 1.4.0 to install it once more") ||
		!strings.Contains(stderr, "fleetctl retry --group staging --force --reason") {
		t.Errorf("retry of a quarantined target: exit %d: %s", code, stderr)
	}

	// Rollback is the safe direction; a deprecated --note still works.
	lab := groupStatus(rollout.StateActive)
	lab.Group, lab.Halted, lab.HaltReason = "lab", true, "3 of 20 failed"
	e.putStatus(lab)
	stdout, stderr, code = runBin(t, bin, env, "rollback", "--group", "lab", "--note", "500s")
	if code != 0 || !strings.Contains(stdout, "active → rolledback: operator rollback: 500s") || !strings.Contains(stderr, "--note is deprecated: use --reason") {
		t.Errorf("rollback of a halted group: exit %d\n%s\n%s", code, stdout, stderr)
	}
	stdout, _, _ = runBin(t, bin, env, "rollback", "--help")
	if strings.Contains(stdout, "--note") || !strings.Contains(stdout, "--reason") {
		t.Errorf("rollback --help still offers --note, or not --reason:\n%s", stdout)
	}
}

// TestForceRunBelowAStopBinary: the controller keeps a group from starting
// while a group above it in depends_on halted on or was rolled back from
// the target (issue 25 point 1); run and mark-done of it would push the
// target past that stop, so they too need --force and a reason (point 9).
func TestForceRunBelowAStopBinary(t *testing.T) {
	e := newEnv(t)
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("dev"), rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")}
	e.putConfig(cfg)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	dev := groupStatus(rollout.StateRolledBack)
	dev.Group = "dev"
	e.putStatus(dev)
	staging := groupStatus(rollout.StateDone)
	staging.Group = "staging"
	e.putStatus(staging)
	prod := groupStatus(rollout.StateUnstarted)
	e.putStatus(prod)
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL(), "FLEETCTL_ACTOR=alice"}

	for _, verb := range []string{"run", "mark-done"} {
		rev := e.status("prod").Revision
		_, stderr, code := runBin(t, bin, env, verb, "--group", "prod")
		if code != cliutil.ExitFailure || !strings.Contains(stderr, `group "dev", above it in depends_on, was rolled back from 1.4.0`) ||
			!strings.Contains(stderr, "fleetctl "+verb+" --group prod --force --reason") {
			t.Errorf("%s below a rolled-back group: exit %d: %s", verb, code, stderr)
		}
		if got := e.status("prod").Revision; got != rev {
			t.Fatalf("%s refused but wrote the status (revision %d → %d)", verb, rev, got)
		}
	}
	// Halted above, not rolled back: the same.
	dev.State, dev.Halted, dev.HaltReason = rollout.StateActive, true, "3 of 20 failed"
	e.putStatus(dev)
	_, stderr, code := runBin(t, bin, env, "run", "--group", "prod")
	if code != cliutil.ExitFailure || !strings.Contains(stderr, `group "dev", above it in depends_on, halted on 1.4.0: 3 of 20 failed`) {
		t.Errorf("run below a halted group: exit %d: %s", code, stderr)
	}
	stdout, stderr, code := runBin(t, bin, env, "run", "--group", "prod", "--force", "--reason", "INC-7: prod needs the fix now")
	if code != 0 || !strings.Contains(stdout, "FORCED past group \"dev\"") {
		t.Fatalf("forced run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if st := e.status("prod").Value; !st.RunRequested {
		t.Errorf("forced run did not ask the group to start: %+v", st)
	}
	stdout, _, _ = runBin(t, bin, env, "history", "--group", "prod")
	if !strings.Contains(stdout, "run --force") || !strings.Contains(stdout, "INC-7: prod needs the fix now") {
		t.Errorf("history lacks the forced run and its reason:\n%s", stdout)
	}
}
