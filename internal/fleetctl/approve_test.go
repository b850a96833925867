package fleetctl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// awaitingStatus is prod's status awaiting its approval at stage.
func awaitingStatus(stage rollout.ApprovalStage) rollout.GroupStatus {
	st := groupStatus(rollout.StateCanary)
	if stage == rollout.ApprovalStart {
		st = groupStatus(rollout.StateUnstarted)
		st.InitialCount, st.Progress, st.StartedAt, st.FailuresSince = 0, 0, time.Time{}, time.Time{}
	}
	st.AwaitingApproval = rollout.ApprovalWait{Stage: stage, Since: testNow.Add(-2 * time.Hour)}
	st.Waiting = rollout.AwaitingText("prod", stage)
	return st
}

func approveEnv(t *testing.T, st rollout.GroupStatus) *env {
	e := newEnv(t)
	cfg := rollout.DefaultConfig()
	prod := rollout.DefaultGroup("prod")
	prod.Approval = rollout.ApprovalGates{rollout.ApprovalStart, rollout.ApprovalAfterCanary}
	cfg.Groups = []rollout.GroupConfig{prod}
	e.putConfig(cfg)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	e.putStatus(st)
	return e
}

// TestApproveWrites: fleetctl approve records the actor's approval of the
// awaited stage in the group's status (compare-and-swap), publishes an
// event, and the audit trail and fleetctl status show who approved.
func TestApproveWrites(t *testing.T) {
	for _, stage := range []rollout.ApprovalStage{rollout.ApprovalStart, rollout.ApprovalAfterCanary} {
		t.Run(string(stage), func(t *testing.T) {
			e := approveEnv(t, awaitingStatus(stage))
			before := e.status("prod")
			nc := e.srv.Conn("events")
			sub, err := nc.SubscribeSync(kv.EventSubject("prod"))
			if err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			out := e.mustRun(func(g *Global) error {
				g.Actor, g.Reason = "alice", "CHG-1234"
				return RunApprove(testCtx(), &ApproveOptions{GroupActionOptions: GroupActionOptions{Global: g, Group: "prod"}})
			})
			for _, want := range []string{
				"operator approve: CHG-1234 (approval " + stage.Purpose() + " given by alice; the group moves at the controller's next step)",
				"written to fleet_plan/group.prod",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			got := e.status("prod")
			want := before.Value.Clone()
			want.Approvals = []rollout.Approval{{Stage: stage, By: "alice", Reason: "CHG-1234", At: testNow}}
			if diff := cmp.Diff(want, got.Value); diff != "" {
				t.Errorf("stored status (-want +got):\n%s", diff)
			}
			if got.Revision != before.Revision+1 {
				t.Errorf("revision %d, want %d", got.Revision, before.Revision+1)
			}
			msg, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("no event: %v", err)
			}
			var ev rollout.Event
			if err := json.Unmarshal(msg.Data, &ev); err != nil || ev.Kind != rollout.EventOperator || !strings.Contains(ev.Reason, "given by alice") {
				t.Errorf("event %s (%v)", msg.Data, err)
			}
			hist := e.mustRun(func(g *Global) error {
				g.Now = time.Now
				return RunHistory(testCtx(), &HistoryOptions{Global: g, Output: "json"})
			})
			var rep HistoryReport
			oneObject(t, hist, &rep)
			if got := strings.Join(auditLines(rep), "|"); got != "alice approve prod" {
				t.Errorf("history audit records %q, want the approval by alice", got)
			}
			st := e.mustRun(func(g *Global) error { return RunStatus(testCtx(), &StatusOptions{Global: g, Output: "table"}) })
			flat := strings.Join(strings.Fields(st), " ") // notes wrap at 100 columns
			if want := "prod: awaiting approval " + stage.Purpose() + " (waiting 2h): approved by alice 0s ago (CHG-1234); the controller moves it at its next step"; !strings.Contains(flat, want) {
				t.Errorf("status lacks %q:\n%s", want, st)
			}
			checkWidth(t, st)
		})
	}
}

// TestApproveRefused: approve without a reason, with a bad --stage, of a
// group that is not waiting (or waiting at another stage, or halted, or
// already approved) and of a group that is not in the config: a usage
// error (exit 2) that says why, and nothing written.
func TestApproveRefused(t *testing.T) {
	halted := groupStatus(rollout.StateCanary)
	halted.Halted, halted.HaltReason, halted.HaltedAt = true, "canary failed", testNow
	approved := awaitingStatus(rollout.ApprovalStart)
	approved.Approvals = []rollout.Approval{{Stage: rollout.ApprovalStart, By: "bob", Reason: "ok", At: testNow.Add(-time.Minute)}}
	for _, tc := range []struct {
		name   string
		status rollout.GroupStatus
		group  string
		stage  string
		reason string
		want   []string
		// code: 2 for the invocation (a missing reason, a bad stage or
		// group), 1 for the group's state (issue 25: a state is not a
		// usage error, and --help does not fix it).
		code int
	}{
		{name: "no reason", status: awaitingStatus(rollout.ApprovalStart), reason: " ",
			want: []string{"approve --group prod: --reason is required", "nothing written"}},
		{name: "bad stage", status: awaitingStatus(rollout.ApprovalStart), stage: "after-canary",
			want: []string{`--stage: stage "after-canary": must be start or after_canary; nothing written`}},
		{name: "not waiting", status: groupStatus(rollout.StateActive),
			want: []string{`approve group "prod": it is not awaiting approval (it is active)`, "nothing written"}, code: cliutil.ExitFailure},
		{name: "waiting at another stage", status: awaitingStatus(rollout.ApprovalAfterCanary), stage: "start",
			want: []string{"--stage start, but it awaits approval to go active after its canaries (stage after_canary)", "nothing written"}, code: cliutil.ExitFailure},
		{name: "halted", status: halted,
			want: []string{"it is halted (canary failed), not awaiting approval: fleetctl reset --group prod --force --reason TEXT clears the halt; nothing written"}, code: cliutil.ExitFailure},
		{name: "already approved", status: approved,
			want: []string{"stage start is already approved (by bob at 2026-11-23T11:59:00Z: ok)", "nothing written"}, code: cliutil.ExitFailure},
		{name: "unknown group", status: awaitingStatus(rollout.ApprovalStart), group: "prdo",
			want: []string{`--group "prdo": no such group in the config; its groups are: prod`, "did you mean --group prod?", "nothing written"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := approveEnv(t, tc.status)
			before := e.status("prod")
			group, reason := tc.group, tc.reason
			if group == "" {
				group = "prod"
			}
			if reason == "" {
				reason = "why"
			}
			_, err := e.run(func(g *Global) error {
				g.Actor, g.Reason = "alice", reason
				return RunApprove(testCtx(), &ApproveOptions{GroupActionOptions: GroupActionOptions{Global: g, Group: group}, Stage: tc.stage})
			})
			mustContain(t, err, tc.want...)
			want := tc.code
			if want == 0 {
				want = cliutil.ExitUsage
			}
			if code := cliutil.ExitCode(err); code != want {
				t.Errorf("exit code %d, want %d", code, want)
			}
			if got := e.status("prod"); got.Revision != before.Revision {
				t.Errorf("status written (revision %d, was %d)", got.Revision, before.Revision)
			}
		})
	}
}

// TestApproveConflict: an approval written while someone else wrote the
// status (the controller's pass) fails instead of overwriting it.
func TestApproveConflict(t *testing.T) {
	e := approveEnv(t, awaitingStatus(rollout.ApprovalStart))
	_, err := e.run(func(g *Global) error {
		g.Actor, g.Reason = "alice", "ok"
		g.beforeWrite = func() {
			st := awaitingStatus(rollout.ApprovalStart)
			st.Reason = "the controller wrote meanwhile"
			e.putStatus(st)
		}
		return RunApprove(testCtx(), &ApproveOptions{GroupActionOptions: GroupActionOptions{Global: g, Group: "prod"}})
	})
	mustContain(t, err, "fleet_plan/group.prod changed under you", "nothing was written")
	if got := e.status("prod").Value; len(got.Approvals) != 0 || got.Reason != "the controller wrote meanwhile" {
		t.Errorf("the other write was lost or the approval written: %+v", got)
	}
}

// TestConfigApproval: config set --approval and --alert-on-approval-wait
// change a group's approval settings (an unknown stage is a usage error
// naming the allowed ones, nothing written), and config apply reads
// "approval: manual" from YAML; config show writes the list back.
func TestConfigApproval(t *testing.T) {
	e := newEnv(t)
	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC", Groups: []rollout.GroupConfig{rollout.DefaultGroup("prod")}})
	out := e.mustRun(func(g *Global) error {
		return RunConfigSet(testCtx(), &ConfigSetOptions{Global: g, Group: "prod", Approval: ptr("after_canary,start"), AlertOnApprovalWait: ptr(true)})
	})
	if want := `group "prod": approval none → ["start","after_canary"], alert_on_approval_wait none → true`; !strings.Contains(out, want) {
		t.Errorf("config set output lacks %q:\n%s", want, out)
	}
	g, _ := e.config().Value.Group("prod")
	if diff := cmp.Diff(rollout.ApprovalGates{rollout.ApprovalStart, rollout.ApprovalAfterCanary}, g.Approval); diff != "" || !g.AlertOnApprovalWait {
		t.Errorf("stored approval (-want +got):\n%s, alert_on_approval_wait %v", diff, g.AlertOnApprovalWait)
	}
	rev := e.configRevision()
	_, err := e.run(func(g *Global) error {
		return RunConfigSet(testCtx(), &ConfigSetOptions{Global: g, Group: "prod", Approval: ptr("later")})
	})
	mustContain(t, err, `group "prod": approval "later" is not a stage: use start, after_canary`)
	if cliutil.ExitCode(err) != cliutil.ExitUsage || e.configRevision() != rev {
		t.Errorf("bad approval: exit %d, revision %d (was %d); want 2, nothing written", cliutil.ExitCode(err), e.configRevision(), rev)
	}
	e.mustRun(func(g *Global) error {
		return RunConfigSet(testCtx(), &ConfigSetOptions{Global: g, Group: "prod", Approval: ptr("none"), AlertOnApprovalWait: ptr(false)})
	})
	if g, _ := e.config().Value.Group("prod"); g.Approval != nil || g.AlertOnApprovalWait {
		t.Errorf("approval none: stored %v %v", g.Approval, g.AlertOnApprovalWait)
	}

	file := filepath.Join(t.TempDir(), "fleet.yaml")
	yaml := "mode: enabled\ngroups:\n  - name: prod\n    approval: manual\n"
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	e.mustRun(func(g *Global) error { return RunConfigApply(testCtx(), &ConfigApplyOptions{Global: g, File: file}) })
	if g, _ := e.config().Value.Group("prod"); !g.Approval.Has(rollout.ApprovalStart) || len(g.Approval) != 1 {
		t.Errorf("approval: manual stored as %v, want [start]", g.Approval)
	}
	shown := e.mustRun(func(g *Global) error { return RunConfigShow(testCtx(), &ConfigShowOptions{Global: g}) })
	if !strings.Contains(shown, "approval: [start]") {
		t.Errorf("config show lacks the approval list:\n%s", shown)
	}
	// What config show prints applies back unchanged.
	if err := os.WriteFile(file, []byte(shown), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := e.mustRun(func(g *Global) error { return RunConfigApply(testCtx(), &ConfigApplyOptions{Global: g, File: file}) }); !strings.Contains(out, "unchanged") {
		t.Errorf("config show → apply changed the config:\n%s", out)
	}
}
