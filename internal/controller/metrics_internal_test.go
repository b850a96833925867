package controller

import (
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestAlertAfterLive: fleetwave_group_alerted is 1 only for alert_after's
// own alert, counted as the engine counts it.
func TestAlertAfterLive(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	gc := rollout.DefaultGroup("prod")
	gc.AlertAfter = rollout.Duration(time.Hour)
	onWait := gc
	onWait.AlertOnApprovalWait = true
	active := func(edit func(*rollout.GroupStatus)) rollout.GroupStatus {
		st := rollout.GroupStatus{Group: "prod", State: rollout.StateActive, StartedAt: t0, Alerted: true}
		if edit != nil {
			edit(&st)
		}
		return st
	}
	for _, tc := range []struct {
		name string
		st   rollout.GroupStatus
		gc   *rollout.GroupConfig
		now  time.Time
		want bool
	}{
		{"active past alert_after", active(nil), &gc, t0.Add(2 * time.Hour), true},
		{"canary past alert_after", active(func(s *rollout.GroupStatus) { s.State = rollout.StateCanary }), &gc, t0.Add(2 * time.Hour), true},
		{"not raised by the engine", active(func(s *rollout.GroupStatus) { s.Alerted = false }), &gc, t0.Add(2 * time.Hour), false},
		{"halted", active(func(s *rollout.GroupStatus) { s.Halted = true }), &gc, t0.Add(2 * time.Hour), false},
		{"done", active(func(s *rollout.GroupStatus) { s.State = rollout.StateDone }), &gc, t0.Add(2 * time.Hour), false},
		{"rolled back", active(func(s *rollout.GroupStatus) { s.State = rollout.StateRolledBack }), &gc, t0.Add(2 * time.Hour), false},
		{"flag left by a halt, reset within alert_after", active(nil), &gc, t0.Add(30 * time.Minute), false},
		{"at alert_after", active(nil), &gc, t0.Add(time.Hour), true},
		{"after_canary wait not counted", active(func(s *rollout.GroupStatus) {
			s.ApprovalWaited = rollout.Duration(50 * time.Minute)
		}), &gc, t0.Add(90 * time.Minute), false},
		{"after_canary wait going on not counted", active(func(s *rollout.GroupStatus) {
			s.State = rollout.StateCanary
			s.AwaitingApproval = rollout.ApprovalWait{Stage: rollout.ApprovalAfterCanary, Since: t0.Add(10 * time.Minute)}
		}), &gc, t0.Add(90 * time.Minute), false},
		{"after_canary wait counted with alert_on_approval_wait", active(func(s *rollout.GroupStatus) {
			s.ApprovalWaited = rollout.Duration(50 * time.Minute)
		}), &onWait, t0.Add(90 * time.Minute), true},
		{"start approval awaited, alert_on_approval_wait", rollout.GroupStatus{State: rollout.StateUnstarted, Alerted: true,
			AwaitingApproval: rollout.ApprovalWait{Stage: rollout.ApprovalStart, Since: t0}}, &onWait, t0.Add(2 * time.Hour), true},
		{"start approval awaited, not long enough", rollout.GroupStatus{State: rollout.StateUnstarted, Alerted: true,
			AwaitingApproval: rollout.ApprovalWait{Stage: rollout.ApprovalStart, Since: t0}}, &onWait, t0.Add(30 * time.Minute), false},
		{"unstarted, nothing awaited", rollout.GroupStatus{State: rollout.StateUnstarted, Alerted: true}, &gc, t0.Add(2 * time.Hour), false},
		{"no config: the flag and the state", active(nil), nil, t0.Add(time.Minute), true},
		{"no config, halted", active(func(s *rollout.GroupStatus) { s.Halted = true }), nil, t0.Add(time.Minute), false},
	} {
		if got := alertAfterLive(tc.st, tc.gc, tc.now); got != tc.want {
			t.Errorf("%s: alertAfterLive = %v, want %v", tc.name, got, tc.want)
		}
	}
}
