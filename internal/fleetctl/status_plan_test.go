package fleetctl

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

const (
	idA = rollout.AgentID("0a000000-0000-4000-8000-000000000000")
	idB = rollout.AgentID("0b000000-0000-4000-8000-000000000000")
)

// rolloutFixture is a fleet in the middle of rolling 1.3.2 → 1.4.0 out to
// dev → staging → prod: dev done, staging halted in canary with a canary
// missing, prod waiting and holding 1.3.1; "old" has a status left from an earlier target and
// no config, "lab" has agents but neither config nor status.
func rolloutFixture(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	prod := rollout.DefaultGroup("prod")
	prod.MaxInFlight, prod.DependsOn = 10, []string{"staging"}
	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC", Groups: []rollout.GroupConfig{
		rollout.DefaultGroup("dev"), rollout.DefaultGroup("staging"), prod,
	}})
	spec := rollout.DefaultSpec("1.3.2", "1.4.0")
	e.putSpec(spec)

	dev := groupStatus(rollout.StateDone)
	dev.Group, dev.Since, dev.DoneAt, dev.Progress, dev.InitialCount = "dev", testNow.Add(-3*time.Hour), testNow.Add(-3*time.Hour), 1, 3
	e.putStatus(dev)

	staging := groupStatus(rollout.StateCanary)
	staging.Group, staging.Since, staging.InitialCount, staging.Progress = "staging", testNow.Add(-20*time.Minute), 10, 0
	staging.Canaries = []rollout.Canary{
		{ID: idA, HealthySince: testNow.Add(-15 * time.Minute)},
		{ID: idB, MissingSince: testNow.Add(-6 * time.Minute)},
	}
	staging.Halted, staging.HaltedAt, staging.Alerted = true, testNow.Add(-time.Minute), true
	staging.RejectedVersions = []string{"1.4.0"}
	staging.HaltReason = "canary " + string(idB) + " missing since 2026-11-23T11:54:00Z (longer than health_timeout 5m)"
	e.putStatus(staging)

	prodSt := groupStatus(rollout.StateUnstarted)
	prodSt.Since, prodSt.Progress, prodSt.InitialCount, prodSt.StartedAt, prodSt.FailuresSince = testNow.Add(-20*time.Minute), 0, 0, time.Time{}, time.Time{}
	prodSt.Waiting = `waiting for group "staging" to finish (canary, halted)`
	prodSt.HoldVersion = "1.3.1" // it never got its turn for 1.3.2
	e.putStatus(prodSt)

	old := groupStatus(rollout.StateDone)
	old.Group, old.TargetVersion, old.StartVersion, old.Progress = "old", "1.3.2", "1.3.1", 1
	e.putStatus(old)

	at := testNow.Add(-5 * time.Second)
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "dev", At: at, Agents: 3, Versions: rollout.Counts{"1.4.0": {Count: 3, LowestID: idA}}})
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "staging", At: at, Agents: 10, Versions: rollout.Counts{
		"1.4.0": {Count: 1, LowestID: idA},
		"1.3.2": {Count: 9, FailedCount: 1, LowestID: idB},
	}})
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "prod", At: at, Agents: 30, Versions: rollout.Counts{"1.3.2": {Count: 30, LowestID: idA}}})
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "lab", At: at, Agents: 2, Versions: rollout.Counts{"1.2.0": {Count: 2, LowestID: idA}}})
	return e
}

func status(o StatusOptions) func(g *Global) error {
	return func(g *Global) error {
		o.Global = g
		return RunStatus(testCtx(), &o)
	}
}

func TestStatusPlanGolden(t *testing.T) {
	e := rolloutFixture(t)
	out := e.mustRun(status(StatusOptions{Output: "table"}))
	checkGolden(t, "status_plan.golden", out)
	checkWidth(t, out)
}

func TestStatusPlanJSON(t *testing.T) {
	e := rolloutFixture(t)
	out := e.mustRun(status(StatusOptions{Output: "json"}))
	var rep StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	wantPlan := &PlanReport{Mode: "enabled", ConfigMode: "enabled", PlanMode: "enabled", StartVersion: "1.3.2", TargetVersion: "1.4.0",
		Strategy: "backpressure", Schedule: "regular"}
	if diff := cmp.Diff(wantPlan, rep.Plan); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	var names []string
	for _, g := range rep.Groups {
		names = append(names, g.Name)
	}
	if diff := cmp.Diff([]string{"dev", "staging", "prod", "old", "lab"}, names); diff != "" {
		t.Errorf("group order: config, then statuses, then counted (-want +got):\n%s", diff)
	}
	staging := rep.Groups[1]
	// The fields that existed before stay as they were.
	if staging.Agents != 10 || staging.Failed != 1 || staging.Controllers != 1 || staging.Versions["1.3.2"].Count != 9 {
		t.Errorf("existing fields changed: %+v", staging)
	}
	wantStaging := &GroupRollout{
		InConfig: true, Requires: []string{"dev"}, Hold: "1.3.2", RejectedVersions: []string{"1.4.0"},
		State: rollout.StateCanary, Reason: "test", Since: testNow.Add(-20 * time.Minute),
		Halted: true, HaltReason: "canary " + string(idB) + " missing since 2026-11-23T11:54:00Z (longer than health_timeout 5m)",
		HaltedAt: testNow.Add(-time.Minute), Alerted: true, InitialCount: 10,
		StartedAt: testNow.Add(-time.Hour), Canaries: 2, TimedOut: ptr(1),
		Agents: AgentSplit{Updated: 1, Unchanged: 8, Failed: 1, Waiting: 8},
	}
	if diff := cmp.Diff(wantStaging, staging.Rollout); diff != "" {
		t.Errorf("staging rollout (-want +got):\n%s", diff)
	}
	if r := rep.Groups[2].Rollout; r.Hold != "1.3.1" {
		t.Errorf("prod holds %q, want 1.3.1", r.Hold)
	}
	if r := rep.Groups[3].Rollout; !r.Stale || r.StatusTarget != "1.3.2" || r.InConfig {
		t.Errorf("old: want a stale status not in the config, got %+v", r)
	}
	if r := rep.Groups[4].Rollout; r.State != "" || r.InConfig || r.Agents.Unchanged != 2 {
		t.Errorf("lab: want no status, not in config, 2 unchanged, got %+v", r)
	}
	// The raw JSON names the new fields as documented.
	for _, key := range []string{`"plan":`, `"rollout":`, `"requires":`, `"timed_out": 1`, `"hold": "1.3.2"`, `"rejected_versions": [`, `"agents": {`, `"updated": 1`, `"unchanged": 8`} {
		if !strings.Contains(out, key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

func TestStatusWithoutPlanIsUnchanged(t *testing.T) {
	e := newEnv(t)
	e.putConfig(rollout.DefaultConfig())
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "prod", At: testNow.Add(-5 * time.Second), Agents: 2,
		Versions: rollout.Counts{"1.3.2": {Count: 2, LowestID: idA}}})
	out := e.mustRun(status(StatusOptions{Output: "json"}))
	want := `{
  "groups": [
    {
      "name": "prod",
      "agents": 2,
      "failed": 0,
      "versions": {
        "1.3.2": {
          "count": 2,
          "failed": 0,
          "lowest_id": "0a000000-0000-4000-8000-000000000000"
        }
      },
      "controllers": 1,
      "at": "2026-11-23T11:59:55Z"
    }
  ]
}
`
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("status -o json without a plan (-want +got):\n%s", diff)
	}
}

func TestStatusGroupFilter(t *testing.T) {
	e := rolloutFixture(t)
	out := e.mustRun(status(StatusOptions{Output: "json", Group: "prod"}))
	var rep StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Groups) != 1 || rep.Groups[0].Name != "prod" || rep.Groups[0].Rollout.Waiting == "" {
		t.Errorf("--group prod: %s", out)
	}
	table := e.mustRun(status(StatusOptions{Output: "table", Group: "prod"}))
	if strings.Contains(table, "\nstaging ") || !strings.Contains(table, "\nprod: waiting for group") {
		t.Errorf("--group prod table:\n%s", table)
	}
	_, err := e.run(status(StatusOptions{Output: "table", Group: "nowhere"}))
	mustContain(t, err, `group "nowhere": not in the config, no rollout status and no agents counted`)
}

func TestStatusWait(t *testing.T) {
	t.Run("halted", func(t *testing.T) {
		e := rolloutFixture(t)
		_, err := e.run(status(StatusOptions{Output: "table", Wait: true, WaitInterval: 10 * time.Millisecond}))
		mustContain(t, err, `group "staging" halted: canary`)
		if code := cliutil.ExitCode(err); code != cliutil.ExitHalted {
			t.Errorf("exit code %d, want %d", code, cliutil.ExitHalted)
		}
	})
	t.Run("no plan", func(t *testing.T) {
		e := newEnv(t)
		_, err := e.run(status(StatusOptions{Output: "table", Wait: true, WaitInterval: 10 * time.Millisecond}))
		mustContain(t, err, "nothing to wait for", "no plan")
	})
	t.Run("becomes done", func(t *testing.T) {
		e := newEnv(t)
		e.putConfig(rollout.DefaultConfig())
		e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
		st := groupStatus(rollout.StateActive)
		st.Group = "default"
		e.putStatus(st)

		g, out, _ := e.global()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var polls atomic.Int32
		now := g.Now
		g.Now = func() time.Time { polls.Add(1); return now() } // once per poll
		done := make(chan error, 1)
		go func() {
			done <- RunStatus(ctx, &StatusOptions{Global: g, Output: "json", Wait: true, WaitInterval: 10 * time.Millisecond})
		}()
		natstest.Eventually(t, 10*time.Second, func() error {
			select {
			case err := <-done:
				t.Fatalf("returned while the group is active: %v\n%s", err, out)
			default:
			}
			if polls.Load() < 3 {
				return errors.New("fewer than 3 polls")
			}
			return nil
		})
		st.State, st.Progress = rollout.StateDone, 1
		e.putStatus(st)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("status --wait did not return after the group was done")
		}
		var rep StatusReport
		if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if rep.Groups[0].Rollout.State != rollout.StateDone {
			t.Errorf("final report: %s", out)
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		e := newEnv(t)
		e.putConfig(rollout.DefaultConfig())
		e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		g, _, _ := e.global()
		var polls atomic.Int32
		now := g.Now
		g.Now = func() time.Time { polls.Add(1); return now() } // once per poll
		done := make(chan error, 1)
		go func() {
			done <- RunStatus(ctx, &StatusOptions{Global: g, Output: "table", Wait: true, WaitInterval: 10 * time.Millisecond})
		}()
		// Cancel only once the wait loop has gone round, so that the cancel
		// lands in the loop and not before it.
		natstest.Eventually(t, 10*time.Second, func() error {
			select {
			case err := <-done:
				t.Fatalf("returned before the cancel: %v", err)
			default:
			}
			if polls.Load() < 2 {
				return errors.New("fewer than 2 polls")
			}
			return nil
		})
		cancel()
		natstest.Eventually(t, 10*time.Second, func() error {
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("err = %v, want %v", err, context.Canceled)
				}
				return nil
			default:
				return errors.New("still waiting")
			}
		})
	})
}

// TestStatusUnreachableAndTimedOut: a group with agents unreachable (no
// heartbeat for three intervals) and an update timed out (longer than
// update_timeout). The unreachable agents are in none of the columns (4 of
// 20: 4 updated, 2 updating, 10 waiting), and notes say both counts; JSON
// carries them in the split and the rollout. The table stays in 80 columns.
func TestStatusUnreachableAndTimedOut(t *testing.T) {
	e := newEnv(t)
	prod := rollout.DefaultGroup("prod")
	prod.DependsOn = []string{}
	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC", Groups: []rollout.GroupConfig{prod}})
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	st := groupStatus(rollout.StateActive)
	st.FailedCount, st.TimedOutCount = 1, 1
	e.putStatus(st)
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "prod", At: testNow.Add(-5 * time.Second), Agents: 20, Versions: rollout.Counts{
		"1.4.0": {Count: 6, Unreachable: 2, LowestID: idA},
		"1.3.2": {Count: 14, Updating: 2, Unreachable: 2, LowestID: idB},
	}})

	out := e.mustRun(status(StatusOptions{Output: "table"}))
	checkGolden(t, "status_unreachable.golden", out)
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 100 || n > 80 && !strings.HasPrefix(line, "prod: ") {
			t.Errorf("line %d columns wide (table 80, notes 100): %q", n, line)
		}
	}

	var rep StatusReport
	if err := json.Unmarshal([]byte(e.mustRun(status(StatusOptions{Output: "json"}))), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Groups) != 1 || rep.Groups[0].Rollout == nil {
		t.Fatalf("groups %+v, want prod with its rollout", rep.Groups)
	}
	g := rep.Groups[0]
	want := AgentSplit{Updated: 4, Unchanged: 12, Failed: 0, Updating: 2, Waiting: 10, Unreachable: 4, TimedOut: 1}
	if diff := cmp.Diff(want, g.Rollout.Agents); diff != "" {
		t.Errorf("split (-want +got):\n%s", diff)
	}
	if g.Unreachable != 4 || g.Rollout.UpdatesTimedOut != 1 || g.Rollout.FailedCount != 1 {
		t.Errorf("unreachable, updates_timed_out, failed_count = %d, %d, %d; want 4, 1, 1", g.Unreachable, g.Rollout.UpdatesTimedOut, g.Rollout.FailedCount)
	}
}
