package fleetctl

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// groupStatus is a status of group "prod" for 1.3.2 → 1.4.0 in state.
func groupStatus(state rollout.State) rollout.GroupStatus {
	started := testNow.Add(-time.Hour)
	return rollout.GroupStatus{
		V: 1, Group: "prod", State: state, Reason: "test", Since: started, Mode: rollout.ModeEnabled,
		TargetVersion: "1.4.0", StartVersion: "1.3.2", InitialCount: 20, Progress: 0.4,
		FailuresSince: started, StartedAt: started,
		JitterSeconds: 5, HealthTimeout: rollout.DefaultHealthTimeout, MinHealthyTime: rollout.DefaultMinHealthyTime,
	}
}

func TestGroupActions(t *testing.T) {
	halted := groupStatus(rollout.StateActive)
	halted.Halted, halted.HaltReason, halted.HaltedAt, halted.FailedCount = true, "2 of 20 failed", testNow.Add(-time.Minute), 2

	for _, tc := range []struct {
		name      string
		run       func(*GroupActionOptions) error
		action    groupAction
		from      rollout.GroupStatus
		wantState rollout.State
		wantOut   string
	}{
		{"rollback active", func(o *GroupActionOptions) error { return RunRollback(testCtx(), o) }, rollout.Rollback,
			groupStatus(rollout.StateActive), rollout.StateRolledBack, `group "prod": active → rolledback: operator rollback: because`},
		{"run unstarted", func(o *GroupActionOptions) error { return RunRun(testCtx(), o) }, rollout.Run,
			groupStatus(rollout.StateUnstarted), rollout.StateUnstarted, `group "prod" (still unstarted): operator run: because (starts at once)`},
		{"mark-done canary", func(o *GroupActionOptions) error { return RunMarkDone(testCtx(), o) }, rollout.MarkDone,
			groupStatus(rollout.StateCanary), rollout.StateDone, `group "prod": canary → done: operator mark-done: because`},
		{"reset halted active", func(o *GroupActionOptions) error { return RunReset(testCtx(), o) }, rollout.Reset,
			halted, rollout.StateActive, `group "prod" (still active): operator reset: forced past a halt (2 of 20 failed): because`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
			e.putStatus(tc.from)
			nc := e.srv.Conn("events")
			sub, err := nc.SubscribeSync(kv.EventSubject("prod"))
			if err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			note := "because"
			if tc.from.Halted {
				note = "forced past a halt (2 of 20 failed): because"
			}
			wantStatus, wantEvent, err := tc.action(tc.from, note, testNow)
			if err != nil {
				t.Fatal(err)
			}
			// fleetctl's events name their app, the default app's too
			// (issue 26: Event.App is the app's name always).
			wantEvent.App = rollout.DefaultAppName

			// A halted group moves on only when forced (issue 25).
			out := e.mustRun(func(g *Global) error {
				return tc.run(&GroupActionOptions{Global: g, Group: "prod", Note: "because", Force: tc.from.Halted})
			})
			if !strings.Contains(out, tc.wantOut) {
				t.Errorf("output lacks %q:\n%s", tc.wantOut, out)
			}
			got := e.status("prod").Value
			if got.State != tc.wantState {
				t.Errorf("state %s, want %s", got.State, tc.wantState)
			}
			if diff := cmp.Diff(wantStatus, got); diff != "" {
				t.Errorf("stored status (-want +got):\n%s", diff)
			}
			msg, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("no event on %s: %v", kv.EventSubject("prod"), err)
			}
			var ev rollout.Event
			if err := json.Unmarshal(msg.Data, &ev); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantEvent, ev); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGroupActionRefusals(t *testing.T) {
	stale := groupStatus(rollout.StateActive)
	stale.TargetVersion = "1.3.9"
	for _, tc := range []struct {
		name     string
		status   *rollout.GroupStatus
		run      func(*GroupActionOptions) error
		wantIs   error
		parts    []string
		wantCode int
	}{
		{"not allowed", ptr(groupStatus(rollout.StateUnstarted)), func(o *GroupActionOptions) error { return RunRollback(testCtx(), o) },
			rollout.ErrBadAction, []string{`rollback group "prod": it is unstarted`}, cliutil.ExitFailure},
		{"done cannot run", ptr(groupStatus(rollout.StateDone)), func(o *GroupActionOptions) error { return RunRun(testCtx(), o) },
			rollout.ErrBadAction, []string{`run group "prod": it is done`, "change target_version"}, cliutil.ExitFailure},
		{"no status", nil, func(o *GroupActionOptions) error { return RunMarkDone(testCtx(), o) },
			nil, []string{`--group "prod": no such group in the config`, "its groups are: default", "nothing written"}, cliutil.ExitUsage},
		{"stale status", &stale, func(o *GroupActionOptions) error { return RunReset(testCtx(), o) },
			nil, []string{"status is for target 1.3.9 but the plan targets 1.4.0", "retry in a moment"}, cliutil.ExitFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
			var rev uint64
			if tc.status != nil {
				e.putStatus(*tc.status)
				rev = e.status("prod").Revision
			}
			_, err := e.run(func(g *Global) error { return tc.run(&GroupActionOptions{Global: g, Group: "prod"}) })
			mustContain(t, err, tc.parts...)
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("err = %v, want %v", err, tc.wantIs)
			}
			if code := cliutil.ExitCode(err); code != tc.wantCode {
				t.Errorf("exit code %d, want %d", code, tc.wantCode)
			}
			if tc.status != nil {
				if got := e.status("prod").Revision; got != rev {
					t.Errorf("a refused action wrote: revision %d → %d", rev, got)
				}
			}
		})
	}
}

func TestGroupActionConcurrentEditIsNotLost(t *testing.T) {
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	e.putStatus(groupStatus(rollout.StateActive))
	// The controller moves progress on between our read and our write.
	theirs := groupStatus(rollout.StateActive)
	theirs.Progress = 0.6
	g, _, _ := e.global()
	g.beforeWrite = func() { e.putStatus(theirs) }
	err := RunRollback(testCtx(), &GroupActionOptions{Global: g, Group: "prod"})
	if !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("err = %v, want %v", err, kv.ErrConflict)
	}
	mustContain(t, err, "fleet_plan/group.prod changed under you", "re-read and retry")
	if diff := cmp.Diff(theirs, e.status("prod").Value); diff != "" {
		t.Errorf("the controller's status was lost (-theirs +stored):\n%s", diff)
	}
}
