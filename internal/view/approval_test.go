package view

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestApprovalView: a group awaiting approval shows it once (in its state
// cell, one note with the command and how long, not the raw Waiting text
// again), in the JSON with the stage and the seconds waited, and in the
// pending list until someone approves; a stale status shows no wait.
func TestApprovalView(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	since := now.Add(-3 * time.Hour)
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("prod"), rollout.DefaultGroup("edge")}
	status := func(group string, edit func(*rollout.GroupStatus)) kv.Entry[rollout.GroupStatus] {
		st := rollout.GroupStatus{V: 1, Group: group, State: rollout.StateUnstarted, Since: since, TargetVersion: "2.0.0", StartVersion: "1.0.0"}
		edit(&st)
		return kv.Entry[rollout.GroupStatus]{Value: st}
	}
	wait := func(st *rollout.GroupStatus) {
		st.AwaitingApproval = rollout.ApprovalWait{Stage: rollout.ApprovalStart, Since: since}
		st.Waiting = rollout.AwaitingText(st.Group, rollout.ApprovalStart)
	}
	state := &kv.State{Config: kv.Entry[rollout.Config]{Value: cfg}, Spec: kv.Entry[rollout.Spec]{Value: spec}, HasSpec: true,
		Groups: map[string]kv.Entry[rollout.GroupStatus]{
			"prod": status("prod", wait),
			"edge": status("edge", func(st *rollout.GroupStatus) {
				wait(st)
				st.Approvals = []rollout.Approval{{Stage: rollout.ApprovalStart, By: "alice", Reason: "ok", At: now.Add(-time.Minute)}}
			}),
		}}
	rep := BuildRolloutStatus(nil, state, now)
	prod := rep.Groups[0].Rollout
	if diff := cmp.Diff(&ApprovalReport{Stage: rollout.ApprovalStart, Since: since, WaitingSeconds: 3 * 3600}, prod.AwaitingApproval); diff != "" {
		t.Errorf("prod awaiting_approval (-want +got):\n%s", diff)
	}
	rows := Rows(rep, &cfg, now)
	if rows[0].State != "unstarted (awaiting approval)" || rows[0].AwaitingApproval != rollout.ApprovalStart || rows[0].Approved {
		t.Errorf("prod row: %+v", rows[0])
	}
	wantNotes := []string{"awaiting approval to start (waiting 3h): fleetctl approve --group prod --reason TEXT"}
	if diff := cmp.Diff(wantNotes, rows[0].Notes); diff != "" {
		t.Errorf("prod notes (-want +got):\n%s", diff)
	}
	if !rows[1].Approved || !strings.Contains(strings.Join(rows[1].Notes, "\n"), "approved by alice 1m ago (ok); the controller moves it at its next step") {
		t.Errorf("edge row: %+v", rows[1])
	}
	want := []PendingApproval{{Group: "prod", Stage: rollout.ApprovalStart, Since: since, For: "3h"}}
	// alert_on_approval_wait raised the alert of a group awaiting its start.
	alerted := state.Groups["prod"]
	alerted.Value.Alerted = true
	state.Groups["prod"] = alerted
	if notes := Rows(BuildRolloutStatus(nil, state, now), &cfg, now)[0].Notes; !strings.Contains(strings.Join(notes, "\n"), "alert raised: awaiting approval longer than alert_after") {
		t.Errorf("alerted while awaiting approval: notes %q", notes)
	}
	if diff := cmp.Diff(want, PendingApprovals(rows, now)); diff != "" {
		t.Errorf("pending approvals (-want +got):\n%s", diff)
	}

	// A status for another target is stale: its wait is not this target's.
	spec.TargetVersion = "3.0.0"
	state.Spec.Value = spec
	stale := BuildRolloutStatus(nil, state, now)
	if r := stale.Groups[0].Rollout; r.AwaitingApproval != nil {
		t.Errorf("stale status shows a wait: %+v", r.AwaitingApproval)
	}
	if got := PendingApprovals(Rows(stale, &cfg, now), now); len(got) != 0 {
		t.Errorf("stale statuses pending: %+v", got)
	}
}
