package view_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// badNewsState is a plan start → target over groups, each with the status
// given (a zero status: the group has none yet).
func badNewsState(start, target string, groups map[string]rollout.GroupStatus, names ...string) *kv.State {
	cfg := rollout.DefaultConfig()
	cfg.Groups = nil
	for _, n := range names {
		cfg.Groups = append(cfg.Groups, rollout.DefaultGroup(n))
	}
	st := &kv.State{HasSpec: true, Spec: kv.Entry[rollout.Spec]{Value: rollout.DefaultSpec(start, target)},
		Config: kv.Entry[rollout.Config]{Value: cfg}, Groups: map[string]kv.Entry[rollout.GroupStatus]{}}
	for n, s := range groups {
		st.Groups[n] = kv.Entry[rollout.GroupStatus]{Value: s}
	}
	return st
}

// TestHeaderHolds (issue 25 point 6): the Holds line of fleetctl status,
// watch and the dashboard says what the groups yet to finish the target
// hold. After every group finished 1.1.0 it said "Holds 1.0.0 until a
// group's turn", which nothing held any more.
func TestHeaderHolds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	done := func(g string) rollout.GroupStatus {
		return rollout.GroupStatus{V: 1, Group: g, State: rollout.StateDone, TargetVersion: "1.1.0", StartVersion: "1.0.0", HoldVersion: "1.1.0",
			Progress: 1, Since: now, DoneAt: now}
	}
	unstarted := func(g string) rollout.GroupStatus {
		return rollout.GroupStatus{V: 1, Group: g, State: rollout.StateUnstarted, TargetVersion: "1.1.0", StartVersion: "1.0.0", Since: now}
	}
	for _, tc := range []struct {
		name   string
		groups map[string]rollout.GroupStatus
		want   string
	}{
		{"every group finished", map[string]rollout.GroupStatus{"dev": done("dev"), "prod": done("prod")},
			"1.1.0: every group finished it (new hosts install it)"},
		{"one finished, one to go", map[string]rollout.GroupStatus{"dev": done("dev"), "prod": unstarted("prod")},
			"1.0.0 until a group's turn (new hosts install it); 1 group done"},
		{"nothing started", map[string]rollout.GroupStatus{"dev": unstarted("dev"), "prod": unstarted("prod")},
			"1.0.0 until a group's turn (new hosts install it)"},
		{"no status yet", nil, "1.0.0 until a group's turn (new hosts install it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := view.BuildRolloutStatus(nil, badNewsState("1.0.0", "1.1.0", tc.groups, "dev", "prod"), now)
			if got := view.Header(rep).Holds; got != tc.want {
				t.Errorf("Holds %q, want %q", got, tc.want)
			}
			if tc.name == "every group finished" {
				for _, r := range view.Rows(rep, nil, now) {
					for _, n := range r.Notes {
						if strings.Contains(n, "until its turn") {
							t.Errorf("group %s, done: note %q", r.Group, n)
						}
					}
				}
			}
		})
	}
}

// TestUnstartedGroupFailed (issue 25 point 6): a group that has not started
// on the target has told no agent to install it, so its FAILED is 0: an
// agent that rolled back from an earlier target (its heartbeat keeps the
// flag until its next install) waits for its turn, as the rollout counts
// it. A started group still counts its failures.
func TestUnstartedGroupFailed(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var agents []rollout.AgentView
	for i := range 4 {
		a := rollout.AgentView{ID: rollout.AgentID("00000000-0000-4000-8000-00000000000" + string(rune('1'+i))), ActiveVersion: "1.0.0"}
		if i == 0 {
			a.Rollback, a.RollbackFrom, a.Error = true, "1.0.5", "1.0.5 did not become healthy"
		}
		agents = append(agents, a)
	}
	counts := rollout.CountAgents(agents)
	entries := []kv.Stats{{V: 1, ControllerID: "c1", Group: "prod", At: now, Agents: 4, Versions: counts}}
	for _, tc := range []struct {
		name    string
		st      rollout.GroupStatus
		failed  string
		waiting string
	}{
		{"unstarted", rollout.GroupStatus{V: 1, Group: "prod", State: rollout.StateUnstarted, TargetVersion: "2.0.0", StartVersion: "1.0.0", Since: now}, "0", "4"},
		{"stale status of the earlier target", rollout.GroupStatus{V: 1, Group: "prod", State: rollout.StateActive, TargetVersion: "1.0.5", StartVersion: "1.0.0",
			Since: now, Halted: true, HaltReason: "x", HaltedAt: now, FailedCount: 1, InitialCount: 4}, "0", "4"},
		{"no status", rollout.GroupStatus{}, "0", "4"},
		{"active", rollout.GroupStatus{V: 1, Group: "prod", State: rollout.StateActive, TargetVersion: "2.0.0", StartVersion: "1.0.0", Since: now,
			InitialCount: 4, Progress: 0.5}, "1", "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			groups := map[string]rollout.GroupStatus{"prod": tc.st}
			if tc.st.V == 0 {
				groups = nil
			}
			rep := view.BuildRolloutStatus(entries, badNewsState("1.0.0", "2.0.0", groups, "prod"), now)
			r := view.Rows(rep, nil, now)[0]
			if r.Failed != tc.failed || r.Waiting != tc.waiting || r.Split.Failed != rep.Groups[0].Rollout.Agents.Failed {
				t.Errorf("FAILED %q WAITING %q (split %+v), want %s and %s", r.Failed, r.Waiting, r.Split, tc.failed, tc.waiting)
			}
		})
	}
}

// TestTimelineReadable (issue 25 point 6): the timeline's change of an
// approval and a retry reads as text, not as the JSON of the status field.
func TestTimelineReadable(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	before := rollout.GroupStatus{V: 1, Group: "prod", State: rollout.StateActive, TargetVersion: "2.0.0"}
	approved := before
	approved.Approvals = []rollout.Approval{{Stage: rollout.ApprovalStart, By: "alice", Reason: "ship it", At: at}}
	retried := approved
	retried.Retry = rollout.RetryRequest{Token: "2026-01-02T03:04:05.000000001Z", Agents: []rollout.AgentID{"a1", "a2"}, At: at, Note: "disk fixed"}
	record := func(cmd string, b, a rollout.GroupStatus) kv.TimelineEntry {
		bj, _ := json.Marshal(b)
		aj, _ := json.Marshal(a)
		return kv.TimelineEntry{Stream: "FLEET_AUDIT", Seq: 1, Stored: at, Audit: &kv.AuditRecord{V: 1, At: at, Actor: "alice", Command: cmd, Group: "prod",
			Bucket: kv.BucketPlan, Key: kv.GroupKey("prod"), Before: bj, After: aj, Diff: kv.JSONDiff(bj, aj)}}
	}
	for _, tc := range []struct {
		name  string
		e     kv.TimelineEntry
		wants []string
	}{
		{"approve", record("approve", before, approved), []string{"approvals (none) → (", "by alice", "reason ship it", "stage start"}},
		{"retry", record("retry", approved, retried), []string{"retry (none) → (", "note disk fixed", "agents [a1; a2]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := view.TimelineRowOf(tc.e).Change
			if strings.ContainsAny(got, `{}"`) {
				t.Errorf("change %q: JSON, want text", got)
			}
			for _, w := range tc.wants {
				if !strings.Contains(got, w) {
					t.Errorf("change %q: want %q in it", got, w)
				}
			}
		})
	}
}

// TestRolledBackAllowsNothing: a rolled-back group's agents are told to go
// back to what the group holds, so none may update to the target: ALLOWED
// said the progress it had reached (100% after a done group was rolled
// back), as if the whole group could install it.
func TestRolledBackAllowsNothing(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := rollout.GroupStatus{V: 1, Group: "prod", State: rollout.StateRolledBack, TargetVersion: "2.0.0", StartVersion: "1.0.0",
		Since: now, InitialCount: 4, Progress: 1}
	rep := view.BuildRolloutStatus(nil, badNewsState("1.0.0", "2.0.0", map[string]rollout.GroupStatus{"prod": st}, "prod"), now)
	if r := view.Rows(rep, nil, now)[0]; r.Allowed != "0%" || r.AllowedFraction != 0 {
		t.Errorf("rolled back: ALLOWED %q (%v), want 0%%", r.Allowed, r.AllowedFraction)
	}
}
