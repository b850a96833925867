package fleetctl

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

func planSet(o PlanSetOptions) func(g *Global) error {
	return func(g *Global) error {
		o.Global = g
		return RunPlanSet(testCtx(), &o)
	}
}

func TestPlanSetShow(t *testing.T) {
	e := newEnv(t)

	_, err := e.run(func(g *Global) error { return RunPlanShow(testCtx(), &PlanShowOptions{Global: g, Output: "table"}) })
	mustContain(t, err, "no plan", "fleetctl plan set")

	_, err = e.run(planSet(PlanSetOptions{Target: ptr("1.4.0")}))
	mustContain(t, err, "--start is required")
	if code := cliutil.ExitCode(err); code != cliutil.ExitUsage {
		t.Errorf("missing --start: exit code %d, want %d", code, cliutil.ExitUsage)
	}

	// A leading "v" is what people type; it is dropped.
	out := e.mustRun(planSet(PlanSetOptions{Start: ptr("v1.3.2"), Target: ptr("v1.4.0")}))
	if !strings.Contains(out, "fleet_plan/spec created (revision 1): 1.3.2 → 1.4.0, regular, backpressure") ||
		!strings.Contains(out, "groups restart from unstarted") {
		t.Errorf("plan set output:\n%s", out)
	}
	want := rollout.DefaultSpec("1.3.2", "1.4.0")
	if diff := cmp.Diff(want, e.spec().Value); diff != "" {
		t.Fatalf("stored spec (-want +got):\n%s", diff)
	}

	out = e.mustRun(func(g *Global) error { return RunPlanShow(testCtx(), &PlanShowOptions{Global: g, Output: "table"}) })
	wantTable := `start_version   1.3.2
target_version  1.4.0
schedule        regular
strategy        backpressure
critical        false
mode            enabled
effective mode  enabled (config enabled, plan enabled)
revision        1

Until their turn, groups hold (their unstarted and new hosts get):
  default       1.3.2
  (new groups)  1.3.2
`
	if diff := cmp.Diff(wantTable, out); diff != "" {
		t.Errorf("plan show (-want +got):\n%s", diff)
	}
	out = e.mustRun(func(g *Global) error { return RunPlanShow(testCtx(), &PlanShowOptions{Global: g, Output: "json"}) })
	var got rollout.Spec
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plan show -o json (-want +got):\n%s", diff)
	}

	// Settings change alone; the same values again write nothing.
	out = e.mustRun(planSet(PlanSetOptions{Strategy: ptr("grouped"), Schedule: ptr("immediate"), Critical: ptr(true)}))
	if strings.Contains(out, "unstarted") {
		t.Errorf("a settings change must not announce a restart:\n%s", out)
	}
	want.Strategy, want.Schedule, want.Critical = rollout.StrategyGrouped, rollout.ScheduleImmediate, true
	if diff := cmp.Diff(want, e.spec().Value); diff != "" {
		t.Errorf("stored spec (-want +got):\n%s", diff)
	}
	rev := e.spec().Revision
	out = e.mustRun(planSet(PlanSetOptions{Target: ptr("1.4.0"), Critical: ptr(true)}))
	if !strings.Contains(out, "unchanged") || e.spec().Revision != rev {
		t.Errorf("same values: want unchanged and no write, got revision %d → %d:\n%s", rev, e.spec().Revision, out)
	}
}

// TestPlanSetDefaultStart: a new --target without --start starts from the
// previous target only when a group completed it and none halted on it or
// was rolled back from it (issue 13: a halted release must not become what
// new hosts install).
func TestPlanSetDefaultStart(t *testing.T) {
	status := func(group string, state rollout.State, edit func(*rollout.GroupStatus)) rollout.GroupStatus {
		st := rollout.GroupStatus{V: 1, Group: group, State: state, TargetVersion: "1.4.0", StartVersion: "1.3.2"}
		if edit != nil {
			edit(&st)
		}
		return st
	}
	halted := func(st *rollout.GroupStatus) { st.Halted, st.RejectedVersions = true, []string{"1.4.0"} }
	tests := []struct {
		name      string
		statuses  []rollout.GroupStatus
		wantStart string
		wantHolds []string // lines of the holds block
	}{
		{
			name:      "halted in canary, nothing done",
			statuses:  []rollout.GroupStatus{status("staging", rollout.StateCanary, halted), status("prod", rollout.StateUnstarted, nil)},
			wantStart: "1.3.2",
			wantHolds: []string{"staging       1.3.2 (rejected 1.4.0)", "prod          1.3.2", "(new groups)  1.3.2"},
		},
		{
			name: "halted by a controller that did not record rejections",
			statuses: []rollout.GroupStatus{status("staging", rollout.StateActive, func(st *rollout.GroupStatus) { st.Halted = true }),
				status("prod", rollout.StateUnstarted, nil)},
			wantStart: "1.3.2",
		},
		{
			name: "rolled back after another group finished",
			statuses: []rollout.GroupStatus{status("staging", rollout.StateDone, nil),
				status("prod", rollout.StateRolledBack, func(st *rollout.GroupStatus) { st.RejectedVersions = []string{"1.4.0"} })},
			wantStart: "1.3.2",
			wantHolds: []string{"staging       1.4.0", "prod          1.3.2 (rejected 1.4.0)", "(new groups)  1.3.2"},
		},
		{
			name:      "still active, nothing done",
			statuses:  []rollout.GroupStatus{status("staging", rollout.StateActive, nil), status("prod", rollout.StateUnstarted, nil)},
			wantStart: "1.3.2",
		},
		{
			name:      "partly done fleet",
			statuses:  []rollout.GroupStatus{status("staging", rollout.StateDone, nil), status("prod", rollout.StateActive, nil)},
			wantStart: "1.4.0",
			wantHolds: []string{"staging       1.4.0", "prod          1.3.2", "(new groups)  1.4.0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			cfg := rollout.DefaultConfig()
			cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")}
			e.putConfig(cfg)
			e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
			for _, st := range tt.statuses {
				e.putStatus(st)
			}
			g, out, errOut := e.global()
			if err := RunPlanSet(testCtx(), &PlanSetOptions{Global: g, Target: ptr("1.5.0")}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(rollout.DefaultSpec(tt.wantStart, "1.5.0"), e.spec().Value); diff != "" {
				t.Errorf("stored spec (-want +got):\n%s", diff)
			}
			if errOut.String() != "" {
				t.Errorf("stderr: %q", errOut)
			}
			for _, w := range append([]string{"target_version 1.4.0 → 1.5.0", "groups restart from unstarted", "Until their turn, groups hold"}, tt.wantHolds...) {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestPlanSetRejectedStart: an explicit --start that a group halted on is
// refused (usage error, nothing written) unless --force.
func TestPlanSetRejectedStart(t *testing.T) {
	e := newEnv(t)
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")}
	e.putConfig(cfg)
	e.putSpec(rollout.DefaultSpec("1.1.0", "1.2.0"))
	e.putStatus(rollout.GroupStatus{V: 1, Group: "staging", State: rollout.StateCanary, TargetVersion: "1.2.0", StartVersion: "1.1.0",
		Halted: true, RejectedVersions: []string{"1.2.0"}})
	e.putStatus(rollout.GroupStatus{V: 1, Group: "prod", State: rollout.StateUnstarted, TargetVersion: "1.2.0", StartVersion: "1.1.0"})
	before := e.spec()

	for _, o := range []PlanSetOptions{
		{Target: ptr("1.5.0"), Start: ptr("1.2.0")},
		{Start: ptr("v1.2.0")},
	} {
		_, err := e.run(planSet(o))
		mustContain(t, err, `--start 1.2.0: group "staging" halted on 1.2.0 or was rolled back from it`, "--force", "nothing written")
		// The fleet's state refuses it, not the invocation: exit 1.
		if code := cliutil.ExitCode(err); code != cliutil.ExitFailure {
			t.Errorf("exit code %d, want %d", code, cliutil.ExitFailure)
		}
		if after := e.spec(); after.Revision != before.Revision {
			t.Errorf("refused plan set wrote the spec: revision %d → %d", before.Revision, after.Revision)
		}
	}

	_, err := e.run(planSet(PlanSetOptions{Schedule: ptr("immediate"), Force: true}))
	mustContain(t, err, "--force only goes with --start or --target")
	if after := e.spec(); after.Revision != before.Revision {
		t.Errorf("--force without --start or --target wrote the spec")
	}

	out := e.mustRun(planSet(PlanSetOptions{Target: ptr("1.5.0"), Start: ptr("1.2.0"), Force: true}))
	if diff := cmp.Diff(rollout.DefaultSpec("1.2.0", "1.5.0"), e.spec().Value); diff != "" {
		t.Errorf("forced: stored spec (-want +got):\n%s", diff)
	}
	for _, w := range []string{"staging       1.1.0 (rejected 1.2.0)", "prod          1.1.0", "(new groups)  1.2.0"} {
		if !strings.Contains(out, w) {
			t.Errorf("forced: output lacks %q:\n%s", w, out)
		}
	}

	// An explicit --start that no group rejected wins; a downgrade is
	// pointed out.
	out = e.mustRun(planSet(PlanSetOptions{Start: ptr("1.5.0"), Target: ptr("1.4.1")}))
	if !strings.Contains(out, "downgrade") {
		t.Errorf("no downgrade note:\n%s", out)
	}
	if diff := cmp.Diff(rollout.DefaultSpec("1.5.0", "1.4.1"), e.spec().Value); diff != "" {
		t.Errorf("stored spec (-want +got):\n%s", diff)
	}
}

func TestPlanSetRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     PlanSetOptions
		parts []string
	}{
		{"short version", PlanSetOptions{Target: ptr("1.4")}, []string{"--target", `invalid version "1.4"`, "MAJOR.MINOR.PATCH"}},
		{"not a version", PlanSetOptions{Target: ptr("latest")}, []string{"--target", "invalid version"}},
		{"bad start", PlanSetOptions{Start: ptr("1.3.x")}, []string{"--start", "invalid version"}},
		{"bad strategy", PlanSetOptions{Strategy: ptr("fast")}, []string{`strategy "fast" must be backpressure or grouped`}},
		{"bad schedule", PlanSetOptions{Schedule: ptr("nightly")}, []string{`schedule "nightly" must be regular, immediate or time-based`}},
		{"nothing", PlanSetOptions{}, []string{"nothing to set"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
			before := e.spec()
			_, err := e.run(planSet(tc.o))
			mustContain(t, err, tc.parts...)
			if code := cliutil.ExitCode(err); code != cliutil.ExitUsage {
				t.Errorf("exit code %d, want %d", code, cliutil.ExitUsage)
			}
			after := e.spec()
			if after.Revision != before.Revision || after.Value != before.Value {
				t.Errorf("an invalid plan set wrote: revision %d → %d", before.Revision, after.Revision)
			}
		})
	}
}

func TestPlanSetConcurrentEditIsNotLost(t *testing.T) {
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	theirs := rollout.DefaultSpec("1.3.2", "1.4.5")
	g, _, _ := e.global()
	g.beforeWrite = func() { e.putSpec(theirs) }
	err := RunPlanSet(testCtx(), &PlanSetOptions{Global: g, Target: ptr("1.5.0")})
	if !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("err = %v, want %v", err, kv.ErrConflict)
	}
	mustContain(t, err, "fleet_plan/spec changed under you", "re-read and retry")
	if diff := cmp.Diff(theirs, e.spec().Value); diff != "" {
		t.Errorf("the other writer's spec was lost (-theirs +stored):\n%s", diff)
	}
}

func TestPauseResume(t *testing.T) {
	e := newEnv(t)
	pause := func(g *Global) error { return RunPause(testCtx(), &PauseOptions{Global: g}) }

	_, err := e.run(pause)
	mustContain(t, err, "no plan to pause")
	if code := cliutil.ExitCode(err); code != cliutil.ExitFailure {
		t.Errorf("exit code %d, want %d", code, cliutil.ExitFailure)
	}

	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	out := e.mustRun(pause)
	if !strings.Contains(out, "plan paused") {
		t.Errorf("pause output: %s", out)
	}
	if m := e.spec().Value.Mode; m != rollout.ModePaused {
		t.Fatalf("spec mode %q after pause, want paused", m)
	}
	rev := e.spec().Revision
	if out := e.mustRun(pause); !strings.Contains(out, "already paused") || e.spec().Revision != rev {
		t.Errorf("second pause wrote or said: %s", out)
	}

	// Resuming the plan while the config is paused says why nothing moves.
	cfg := rollout.DefaultConfig()
	cfg.Mode = rollout.ModePaused
	e.putConfig(cfg)
	g, out2, errOut := e.global()
	if err := RunResume(testCtx(), &PauseOptions{Global: g}); err != nil {
		t.Fatal(err)
	}
	if m := e.spec().Value.Mode; m != rollout.ModeEnabled {
		t.Errorf("spec mode %q after resume, want enabled", m)
	}
	if !strings.Contains(out2.String(), "plan resumed") || !strings.Contains(errOut.String(), "the config's mode is paused") {
		t.Errorf("resume: stdout %q stderr %q", out2, errOut)
	}
}

func TestPauseConcurrentEditIsNotLost(t *testing.T) {
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	theirs := rollout.DefaultSpec("1.4.0", "1.5.0")
	g, _, _ := e.global()
	g.beforeWrite = func() { e.putSpec(theirs) }
	err := RunPause(testCtx(), &PauseOptions{Global: g})
	if !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("err = %v, want %v", err, kv.ErrConflict)
	}
	if diff := cmp.Diff(theirs, e.spec().Value); diff != "" {
		t.Errorf("the other writer's spec was lost (-theirs +stored):\n%s", diff)
	}
}
