package view

import (
	"fmt"
	"strings"
	"time"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// ApprovalReport is a group waiting for an operator's approval (fleetctl
// approve): the stage, since when, and for how long at the report's time.
type ApprovalReport struct {
	Stage          rollout.ApprovalStage `json:"stage"`
	Since          time.Time             `json:"since"`
	WaitingSeconds int64                 `json:"waiting_seconds"`
	// Approved is the approval already given for the stage, which the
	// controller's next step consumes; absent until one is.
	Approved *rollout.Approval `json:"approved,omitempty"`
}

// PendingApproval is one group awaiting approval, for the dashboard's
// header.
type PendingApproval struct {
	Group string                `json:"group"`
	Stage rollout.ApprovalStage `json:"stage"`
	Since time.Time             `json:"since"`
	// For is how long it has waited, as Age says it ("3h").
	For string `json:"for"`
}

// approvalRollout fills r's approval fields from s at now.
func approvalRollout(r *GroupRollout, s rollout.GroupStatus, now time.Time) {
	r.Approvals = s.Approvals
	w := s.AwaitingApproval
	if w.Stage == "" {
		return
	}
	rep := &ApprovalReport{Stage: w.Stage, Since: w.Since, WaitingSeconds: max(int64(now.Sub(w.Since)/time.Second), 0)}
	if a, ok := s.ApprovalFor(w.Stage); ok {
		rep.Approved = &a
	}
	r.AwaitingApproval = rep
}

// approvalNotes are the notes on a group's approvals: the wait, and the
// approvals given while the group has not finished.
func approvalNotes(g GroupReport, now time.Time) []string {
	r := g.Rollout
	var out []string
	if w := r.AwaitingApproval; w != nil {
		if a := w.Approved; a != nil {
			out = append(out, fmt.Sprintf("awaiting approval %s (waiting %s): approved by %s %s ago (%s); the controller moves it at its next step",
				w.Stage.Purpose(), Age(now, w.Since), a.By, Age(now, a.At), a.Reason))
		} else {
			out = append(out, fmt.Sprintf("awaiting approval %s (waiting %s): fleetctl approve --group %s --reason TEXT",
				w.Stage.Purpose(), Age(now, w.Since), g.Name))
		}
	}
	if r.Alerted && !r.Halted && r.State == rollout.StateUnstarted && r.AwaitingApproval != nil {
		out = append(out, "alert raised: awaiting approval longer than alert_after (alert_on_approval_wait)")
	}
	if r.State.InProgress() {
		for _, a := range r.Approvals {
			if w := r.AwaitingApproval; w != nil && w.Approved != nil && w.Approved.Stage == a.Stage {
				continue // said above
			}
			out = append(out, fmt.Sprintf("stage %s approved by %s %s ago: %s", a.Stage, a.By, Age(now, a.At), a.Reason))
		}
	}
	return out
}

// awaitingApprovalText reports whether a Waiting text is the approval
// wait's (the approval note says it better).
func awaitingApprovalText(waiting string) bool {
	return strings.HasPrefix(waiting, "awaiting approval")
}

// PendingApprovals are the rows' groups awaiting an approval not given
// yet, in the rows' order.
func PendingApprovals(rows []GroupRow, now time.Time) []PendingApproval {
	out := []PendingApproval{}
	for _, r := range rows {
		if r.AwaitingApproval != "" && !r.Approved {
			out = append(out, PendingApproval{Group: r.Group, Stage: r.AwaitingApproval, Since: r.AwaitingSince, For: Age(now, r.AwaitingSince)})
		}
	}
	return out
}
