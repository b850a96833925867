package rollout

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestActions(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	now := start.Add(2 * time.Hour)
	base := func(s State, halted bool) GroupStatus {
		st := GroupStatus{V: 1, Group: "prod", State: s, Reason: "before", Since: start, Mode: ModeEnabled,
			TargetVersion: v2, StartVersion: v1, HoldVersion: "0.9.0", RejectedVersions: []string{"0.9.5"}, InitialCount: 100, Progress: 0.4, FailedCount: 7,
			FailuresSince: start, StartedAt: start, Canaries: []Canary{{ID: idAt(0.5), HealthySince: start}},
			JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime}
		if s == StateUnstarted {
			st.InitialCount, st.Progress, st.FailedCount, st.Canaries, st.StartedAt, st.FailuresSince = 0, 0, 0, nil, time.Time{}, time.Time{}
		}
		if halted {
			st.Halted, st.HaltReason, st.HaltedAt = true, "too many failed", start.Add(time.Hour)
		}
		return st
	}
	// fresh is the unstarted, run-requested status a restart leaves.
	fresh := func(reason string) GroupStatus {
		return GroupStatus{V: 1, Group: "prod", State: StateUnstarted, Reason: reason, Since: now, Mode: ModeEnabled,
			TargetVersion: v2, StartVersion: v1, HoldVersion: "0.9.0", RejectedVersions: []string{"0.9.5"}, RunRequested: true,
			JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime}
	}
	type action func(GroupStatus, string, time.Time) (GroupStatus, Event, error)
	tests := []struct {
		name    string
		action  action
		prev    GroupStatus
		note    string
		want    func(GroupStatus) GroupStatus // from prev; nil when refused
		wantEv  Event
		wantErr bool
	}{
		{
			name: "rollback active halted", action: Rollback, prev: base(StateActive, true), note: "db migration broken",
			want: func(st GroupStatus) GroupStatus {
				st.State, st.Reason, st.Since = StateRolledBack, "operator rollback: db migration broken", now
				st.RejectedVersions = []string{"0.9.5", v2}
				st.Halted, st.HaltReason, st.HaltedAt = false, "", time.Time{}
				return st
			},
			wantEv: Event{V: 1, Group: "prod", Kind: EventTransition, From: StateActive, To: StateRolledBack, Reason: "operator rollback: db migration broken", At: now},
		},
		{
			name: "rollback done", action: Rollback, prev: base(StateDone, false),
			want: func(st GroupStatus) GroupStatus {
				st.State, st.Reason, st.Since = StateRolledBack, "operator rollback", now
				st.RejectedVersions = []string{"0.9.5", v2}
				return st
			},
			wantEv: Event{V: 1, Group: "prod", Kind: EventTransition, From: StateDone, To: StateRolledBack, Reason: "operator rollback", At: now},
		},
		{name: "rollback canary", action: Rollback, prev: base(StateCanary, false), want: func(st GroupStatus) GroupStatus {
			st.State, st.Reason, st.Since = StateRolledBack, "operator rollback", now
			st.RejectedVersions = []string{"0.9.5", v2}
			return st
		}, wantEv: Event{V: 1, Group: "prod", Kind: EventTransition, From: StateCanary, To: StateRolledBack, Reason: "operator rollback", At: now}},
		{name: "rollback unstarted refused", action: Rollback, prev: base(StateUnstarted, false), wantErr: true},
		{name: "rollback twice refused", action: Rollback, prev: base(StateRolledBack, false), wantErr: true},
		{
			name: "reset active keeps progress and forgives failures", action: Reset, prev: base(StateActive, true),
			want: func(st GroupStatus) GroupStatus {
				st.Reason, st.Since = "operator reset", now
				st.Halted, st.HaltReason, st.HaltedAt = false, "", time.Time{}
				st.FailuresSince, st.FailedCount = now, 0
				return st
			},
			wantEv: Event{V: 1, Group: "prod", Kind: EventOperator, From: StateActive, To: StateActive, Reason: "operator reset", At: now},
		},
		{
			name: "reset canary restarts it", action: Reset, prev: base(StateCanary, true),
			want:   func(GroupStatus) GroupStatus { return fresh("operator reset (canary phase restarts)") },
			wantEv: Event{V: 1, Group: "prod", Kind: EventTransition, From: StateCanary, To: StateUnstarted, Reason: "operator reset (canary phase restarts)", At: now},
		},
		{name: "reset done refused", action: Reset, prev: base(StateDone, false), wantErr: true},
		{name: "reset unstarted refused", action: Reset, prev: base(StateUnstarted, false), wantErr: true},
		{
			name: "run unstarted", action: Run, prev: base(StateUnstarted, false), note: "hotfix",
			want: func(st GroupStatus) GroupStatus {
				st.RunRequested = true
				return st
			},
			wantEv: Event{V: 1, Group: "prod", Kind: EventOperator, From: StateUnstarted, To: StateUnstarted, Reason: "operator run: hotfix (starts at once)", At: now},
		},
		{
			name: "run rolled back starts again", action: Run, prev: base(StateRolledBack, false),
			want:   func(GroupStatus) GroupStatus { return fresh("operator run (starts again at once)") },
			wantEv: Event{V: 1, Group: "prod", Kind: EventTransition, From: StateRolledBack, To: StateUnstarted, Reason: "operator run (starts again at once)", At: now},
		},
		{
			name: "run halted is reset", action: Run, prev: base(StateActive, true),
			want: func(st GroupStatus) GroupStatus {
				st.Reason, st.Since = "operator reset", now
				st.Halted, st.HaltReason, st.HaltedAt = false, "", time.Time{}
				st.FailuresSince, st.FailedCount = now, 0
				return st
			},
			wantEv: Event{V: 1, Group: "prod", Kind: EventOperator, From: StateActive, To: StateActive, Reason: "operator reset", At: now},
		},
		{name: "run running refused", action: Run, prev: base(StateActive, false), wantErr: true},
		{name: "run done refused", action: Run, prev: base(StateDone, false), wantErr: true},
		{
			name: "mark-done active halted", action: MarkDone, prev: base(StateActive, true),
			want: func(st GroupStatus) GroupStatus {
				st.State, st.Reason, st.Since = StateDone, "operator mark-done", now
				st.Halted, st.HaltReason, st.HaltedAt = false, "", time.Time{}
				st.Progress, st.DoneAt = 1, now
				return st
			},
			wantEv: Event{V: 1, Group: "prod", Kind: EventTransition, From: StateActive, To: StateDone, Reason: "operator mark-done", At: now},
		},
		{
			name: "mark-done unstarted skips the group", action: MarkDone, prev: base(StateUnstarted, false), note: "empty group",
			want: func(st GroupStatus) GroupStatus {
				st.State, st.Reason, st.Since = StateDone, "operator mark-done: empty group", now
				st.Progress, st.DoneAt = 1, now
				return st
			},
			wantEv: Event{V: 1, Group: "prod", Kind: EventTransition, From: StateUnstarted, To: StateDone, Reason: "operator mark-done: empty group", At: now},
		},
		{name: "mark-done rolled back refused", action: MarkDone, prev: base(StateRolledBack, false), wantErr: true},
		{name: "mark-done done refused", action: MarkDone, prev: base(StateDone, false), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keep := tt.prev.Clone()
			got, ev, err := tt.action(tt.prev, tt.note, now)
			if diff := cmp.Diff(keep, tt.prev); diff != "" {
				t.Errorf("action changed its input (-before +after):\n%s", diff)
			}
			if tt.wantErr {
				if !errors.Is(err, ErrBadAction) {
					t.Errorf("error = %v, want ErrBadAction", err)
				}
				if diff := cmp.Diff(tt.prev, got); diff != "" {
					t.Errorf("refused action changed the status (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want(tt.prev.Clone()), got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantEv, ev); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResetCanaryPicksFreshCanaries: after a canary failure and a reset,
// the next step starts the canary phase again at once (outside the window)
// without the canary that rolled back.
func TestResetCanaryPicksFreshCanaries(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	ids := spreadIDs(10, 0.5)
	agents := onVersion(ids, v1)
	cfg := testConfig()
	in := Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Agents: agents, Counts: CountAgents(agents), Now: start}
	st, _ := Next(in)
	if st.State != StateCanary {
		t.Fatalf("state %s", st.State)
	}
	bad := st.Canaries[0].ID
	for i := range agents {
		if agents[i].ID == bad {
			agents[i].Rollback, agents[i].RollbackFrom, agents[i].StartTime = true, v2, start.Add(time.Minute)
		}
	}
	in.Prev, in.Agents, in.Counts, in.Now = st, agents, CountAgents(agents), start.Add(10*time.Minute)
	st, _ = Next(in)
	if !st.Halted {
		t.Fatalf("not halted after a canary rolled back: %+v", st)
	}
	st, _, err := Reset(st, "", start.Add(5*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	in.Prev, in.Now = st, start.Add(5*time.Hour) // 08:00, outside the window
	st, evs := Next(in)
	if st.State != StateCanary || st.Halted {
		t.Fatalf("after reset: state %s halted %v (%q)", st.State, st.Halted, st.Waiting)
	}
	if st.IsCanary(bad) || len(st.Canaries) != 3 {
		t.Errorf("canaries %v include the one that rolled back (%s)", st.Canaries, bad)
	}
	if diff := cmp.Diff([]string{"transition:unstarted→canary"}, kinds(evs)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}
