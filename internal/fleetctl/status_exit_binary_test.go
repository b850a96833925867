package fleetctl

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// doneFleet writes, on e's bus, a plan 1.0.0 → 2.0.0 with staging and prod
// both done, prod with 3 agents: on 2.0.0 all of them, or (withFailure) 2,
// the third rolled back to 1.0.0 (issue 25 point 8: prod done at 2/3 after
// reset and approve). The stats are stamped with the real clock: the
// binary reads them with it.
func doneFleet(t *testing.T, e *env, withFailure bool) {
	t.Helper()
	now := time.Now().UTC()
	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC", Groups: []rollout.GroupConfig{
		rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")}})
	e.putSpec(rollout.DefaultSpec("1.0.0", "2.0.0"))
	for _, g := range []string{"staging", "prod"} {
		st := rollout.GroupStatus{V: 1, Group: g, State: rollout.StateDone, Reason: "all 3 present agents on 2.0.0", Since: now.Add(-time.Minute),
			Mode: rollout.ModeEnabled, TargetVersion: "2.0.0", StartVersion: "1.0.0", InitialCount: 3, Progress: 1,
			StartedAt: now.Add(-time.Hour), DoneAt: now.Add(-time.Minute), FailuresSince: now.Add(-10 * time.Minute)}
		versions := rollout.Counts{"2.0.0": {Count: 3, LowestID: idA}}
		if g == "prod" && withFailure {
			st.Reason = "2 of 3 present agents on 2.0.0, 1 rolled back from it"
			versions = rollout.Counts{"2.0.0": {Count: 2, LowestID: idA}, "1.0.0": {Count: 1, FailedCount: 1, LowestID: idB}}
		}
		e.putStatus(st)
		e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: g, At: now, Agents: 3, Versions: versions})
	}
}

// TestStatusWaitDoneWithFailuresBinary is issue 25 point 8 through the
// real fleetctl binary: status --wait exits 4, not 0, when every group is
// done but an agent of one rolled back from the target, and says so; the
// table shows "done (1 failed)" with a note, -o json has done_failed; a
// clean done fleet still exits 0; --help documents exit 4.
func TestStatusWaitDoneWithFailuresBinary(t *testing.T) {
	bin := fleetctlBin(t)

	t.Run("done with a rolled-back host", func(t *testing.T) {
		e := newEnv(t)
		doneFleet(t, e, true)
		env := []string{"NATS_URL=" + e.srv.URL()}
		stdout, stderr, code := runBin(t, bin, env, "status", "--wait")
		if code != cliutil.ExitDoneWithFailures {
			t.Errorf("status --wait: exit %d, want %d (done with failures)\nstdout:\n%s\nstderr:\n%s", code, cliutil.ExitDoneWithFailures, stdout, stderr)
		}
		for _, want := range []string{`done with failures: group "prod": 1 of 3 agents failed 2.0.0`} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
		for _, want := range []string{"done (1 failed)", "prod: done with failures: 1 agent failed the target", "fleetctl agents ls --group prod"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
		if strings.Contains(stdout, "staging  done (") {
			t.Errorf("staging, clean, shown with failures:\n%s", stdout)
		}

		stdout, stderr, code = runBin(t, bin, env, "status", "--wait", "-o", "json")
		if code != cliutil.ExitDoneWithFailures {
			t.Errorf("status --wait -o json: exit %d, want %d\n%s", code, cliutil.ExitDoneWithFailures, stderr)
		}
		var rep view.StatusReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("-o json: %v\n%s", err, stdout)
		}
		got := map[string]int{}
		for _, g := range rep.Groups {
			got[g.Name] = g.Rollout.DoneFailed
		}
		if got["prod"] != 1 || got["staging"] != 0 {
			t.Errorf("-o json done_failed = %v, want prod 1, staging 0\n%s", got, stdout)
		}
		for _, r := range view.Rows(rep, nil, time.Now()) {
			if want := map[string]int{"prod": 1}[r.Group]; r.DoneFailed != want {
				t.Errorf("row %s (the dashboard's): done_failed %d, want %d", r.Group, r.DoneFailed, want)
			}
		}

		// Without --wait: the same table, exit 0 (status only reports).
		stdout, _, code = runBin(t, bin, env, "status")
		if code != 0 || !strings.Contains(stdout, "done (1 failed)") {
			t.Errorf("status: exit %d, want 0 and done (1 failed):\n%s", code, stdout)
		}
	})

	t.Run("clean done", func(t *testing.T) {
		e := newEnv(t)
		doneFleet(t, e, false)
		stdout, stderr, code := runBin(t, bin, []string{"NATS_URL=" + e.srv.URL()}, "status", "--wait")
		if code != 0 || strings.Contains(stdout, "failed)") {
			t.Errorf("status --wait on a clean rollout: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	})

	t.Run("help", func(t *testing.T) {
		stdout, _, code := runBin(t, bin, nil, "status", "--help")
		if code != 0 || !strings.Contains(stdout, "4  every group done, but agents of a done group failed the target") {
			t.Errorf("status --help (exit %d) does not document exit 4:\n%s", code, stdout)
		}
		stdout, _, _ = runBin(t, bin, nil, "--help")
		if !strings.Contains(stdout, "4  rollout done, with failed agents") {
			t.Errorf("fleetctl --help does not list exit 4:\n%s", stdout)
		}
	})
}

// TestStatusVanishedBinary is issue 25 point 2 as the operator sees it:
// a group held from done because too many of its initial agents vanished
// says so in status (table and -o json), and a group done with some
// vanished says how many.
func TestStatusVanishedBinary(t *testing.T) {
	bin := fleetctlBin(t)
	e := newEnv(t)
	doneFleet(t, e, false)
	now := time.Now().UTC()
	st := e.status("staging").Value
	st.Vanished, st.Reason = 1, "all 2 present agents on 2.0.0; 1 of the 3 initial agents vanished (vanished_limit 50%)"
	e.putStatus(st)
	held := rollout.GroupStatus{V: 1, Group: "prod", State: rollout.StateActive, Reason: "all canaries healthy", Since: now.Add(-time.Hour),
		Mode: rollout.ModeEnabled, TargetVersion: "2.0.0", StartVersion: "1.0.0", InitialCount: 100, Progress: 1, Vanished: 15,
		DoneHeld:  "15 of the 100 initial agents vanished since the group started, more than vanished_limit 10% (10): not done until they return (or fleetctl mark-done --group prod)",
		StartedAt: now.Add(-2 * time.Hour), FailuresSince: now.Add(-2 * time.Hour)}
	e.putStatus(held)
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "prod", At: now, Agents: 85, Versions: rollout.Counts{"2.0.0": {Count: 85, LowestID: idA}}})

	env := []string{"NATS_URL=" + e.srv.URL()}
	stdout, stderr, code := runBin(t, bin, env, "status")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"prod: not done: 15 of the 100 initial agents vanished", "staging: 1 of the 3 initial agents vanished since the group started"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, stdout)
		}
	}
	stdout, _, _ = runBin(t, bin, env, "status", "-o", "json")
	var rep view.StatusReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	for _, g := range rep.Groups {
		want := map[string]int{"prod": 15, "staging": 1}[g.Name]
		if g.Rollout.Vanished != want {
			t.Errorf("-o json: %s vanished %d, want %d", g.Name, g.Rollout.Vanished, want)
		}
		if g.Name == "prod" && !strings.Contains(g.Rollout.DoneHeld, "more than vanished_limit 10%") {
			t.Errorf("-o json: prod done_held %q", g.Rollout.DoneHeld)
		}
	}
	// The rows the dashboard draws carry the same.
	rows := view.Rows(rep, nil, now)
	for _, r := range rows {
		want := map[string]int{"prod": 15, "staging": 1}[r.Group]
		if r.Vanished != want {
			t.Errorf("row %s: vanished %d, want %d", r.Group, r.Vanished, want)
		}
	}
}
