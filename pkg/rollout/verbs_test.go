package rollout

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Issue 28, point 5: operator verbs. Table cases for RunSkipCanaries and
// MarkDoneForced (the actions), and for Next honouring a run request that
// skips the canaries (unstarted → active, with the operator's reason).

func TestRunSkipCanaries(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	now := start.Add(2 * time.Hour)
	const note = "INC-77: hotfix, on-call agreed"
	base := func(s State, halted bool) GroupStatus {
		st := startedStatus(s, start, idAt(0.5))
		st.Reason, st.HoldVersion, st.RejectedVersions = "before", "0.9.0", []string{"0.9.5"}
		if s == StateUnstarted || s == StateRolledBack {
			st.InitialCount, st.Progress, st.Canaries, st.StartedAt, st.FailuresSince = 0, 0, nil, time.Time{}, time.Time{}
		}
		if s == StateRolledBack {
			st.RejectedVersions = []string{"0.9.5", v2}
		}
		if halted {
			st.Halted, st.HaltReason, st.HaltedAt = true, "canary crashed", start.Add(time.Hour)
		}
		return st
	}
	// fresh is the unstarted status a restart leaves, asked to start
	// without canaries.
	fresh := func(reason string, rejected ...string) GroupStatus {
		return GroupStatus{V: 1, Group: "staging", State: StateUnstarted, Reason: reason, Since: now, Mode: ModeEnabled,
			TargetVersion: v2, StartVersion: v1, HoldVersion: "0.9.0", RejectedVersions: append([]string{"0.9.5"}, rejected...),
			RunRequested: true, SkipCanaries: note,
			JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime}
	}
	tests := []struct {
		name    string
		prev    GroupStatus
		note    string
		want    func(GroupStatus) GroupStatus // nil: refused
		wantEv  Event
		wantErr string
	}{
		{
			name: "unstarted: a run request that skips the canaries", prev: base(StateUnstarted, false), note: note,
			want: func(st GroupStatus) GroupStatus {
				st.RunRequested, st.SkipCanaries = true, note
				return st
			},
			wantEv: Event{V: 1, Group: "staging", Kind: EventOperator, From: StateUnstarted, To: StateUnstarted,
				Reason: "operator run --skip-canaries: " + note + " (starts at once in active, without canaries)", At: now},
		},
		{
			name: "unstarted halted (a quarantined target): the halt is cleared, as run does", prev: base(StateUnstarted, true), note: note,
			want: func(st GroupStatus) GroupStatus {
				st.Halted, st.HaltReason, st.HaltedAt = false, "", time.Time{}
				st.RunRequested, st.SkipCanaries = true, note
				return st
			},
			wantEv: Event{V: 1, Group: "staging", Kind: EventOperator, From: StateUnstarted, To: StateUnstarted,
				Reason: "operator run --skip-canaries: " + note + " (starts at once in active, without canaries)", At: now},
		},
		{
			name: "rolledback: back to unstarted, started again without canaries", prev: base(StateRolledBack, false), note: note,
			want: func(GroupStatus) GroupStatus {
				return fresh("operator run --skip-canaries: "+note+" (starts again at once in active, without canaries)", v2)
			},
			wantEv: Event{V: 1, Group: "staging", Kind: EventTransition, From: StateRolledBack, To: StateUnstarted,
				Reason: "operator run --skip-canaries: " + note + " (starts again at once in active, without canaries)", At: now},
		},
		{
			name: "canary halted: the canary phase ends, restarted without canaries", prev: base(StateCanary, true), note: note,
			want: func(GroupStatus) GroupStatus {
				return fresh("operator run --skip-canaries: " + note + " (the halted canary phase ends; starts again at once in active, without canaries)")
			},
			wantEv: Event{V: 1, Group: "staging", Kind: EventTransition, From: StateCanary, To: StateUnstarted,
				Reason: "operator run --skip-canaries: " + note + " (the halted canary phase ends; starts again at once in active, without canaries)", At: now},
		},
		{name: "a reason is required", prev: base(StateUnstarted, false), note: "  ", wantErr: "a reason is required"},
		{name: "canary running is refused", prev: base(StateCanary, false), note: note, wantErr: "it is canary; it is already running: it goes active when its canaries are healthy"},
		{name: "active is refused: past its canaries", prev: base(StateActive, false), note: note, wantErr: "past its canaries and already running"},
		{name: "active halted is refused, naming run without the flag", prev: base(StateActive, true), note: note, wantErr: "run without --skip-canaries (with --force) resets it"},
		{name: "done is refused", prev: base(StateDone, false), note: note, wantErr: "it is done; change target_version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := tt.prev.Clone()
			got, ev, err := RunSkipCanaries(tt.prev, tt.note, now)
			if diff := cmp.Diff(prev, tt.prev); diff != "" {
				t.Fatalf("the action changed its input:\n%s", diff)
			}
			if tt.want == nil {
				if !errors.Is(err, ErrBadAction) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want ErrBadAction with %q", err, tt.wantErr)
				}
				if diff := cmp.Diff(tt.prev, got); diff != "" {
					t.Errorf("refused, but the status changed:\n%s", diff)
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
			if err := got.Validate(); err != nil {
				t.Errorf("the result does not validate: %v", err)
			}
		})
	}
	// A long reason is cut to MaxSkipReason, and still validates.
	long := strings.Repeat("x", 5000)
	got, _, err := RunSkipCanaries(base(StateUnstarted, false), long, now)
	if err != nil || len(got.SkipCanaries) > MaxSkipReason+len("…") || got.Validate() != nil {
		t.Errorf("long reason: %d bytes kept, err %v, validate %v", len(got.SkipCanaries), err, got.Validate())
	}
	bad := base(StateActive, false)
	bad.SkipCanaries = long
	if err := bad.Validate(); !errors.Is(err, ErrBadStatus) || !strings.Contains(err.Error(), "skip_canaries longer than 200 bytes") {
		t.Errorf("a status with an overlong skip_canaries validates: %v", err)
	}
	// mark-done drops a request that never took effect; rollback keeps
	// the record of a group that started without canaries.
	req, _, _ := RunSkipCanaries(base(StateUnstarted, false), note, now)
	if done, _, err := MarkDone(req, "skip it", now); err != nil || done.SkipCanaries != "" || done.RunRequested {
		t.Errorf("mark-done of a group asked to skip canaries: %+v, %v", done, err)
	}
	started := base(StateActive, false)
	started.SkipCanaries = note
	if rb, _, err := Rollback(started, "500s", now); err != nil || rb.SkipCanaries != note {
		t.Errorf("rollback dropped the record of the skipped canaries: %+v, %v", rb, err)
	}
}

func TestMarkDoneForced(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	now := start.Add(2 * time.Hour)
	rolledBack := startedStatus(StateActive, start, idAt(0.5))
	rolledBack.State, rolledBack.Reason, rolledBack.Since = StateRolledBack, "operator rollback: 500s", start.Add(time.Hour)
	rolledBack.RejectedVersions = []string{"0.9.5", v2}

	// Plain mark-done refuses a rolled back group, naming the fix.
	_, _, err := MarkDone(rolledBack, "x", now)
	if !errors.Is(err, ErrBadAction) || !strings.Contains(err.Error(), "fleetctl mark-done --group staging --force --reason TEXT") {
		t.Errorf("mark-done of rolledback: %v, want a refusal naming --force --reason", err)
	}
	if _, _, err := MarkDoneForced(rolledBack, " ", now); !errors.Is(err, ErrBadAction) || !strings.Contains(err.Error(), "a reason is required") {
		t.Errorf("forced mark-done without a reason: %v", err)
	}
	got, ev, err := MarkDoneForced(rolledBack, "forced past a rollback: the 500s were the load balancer", now)
	if err != nil {
		t.Fatal(err)
	}
	want := rolledBack.Clone()
	want.State, want.Since, want.Progress, want.DoneAt = StateDone, now, 1, now
	want.Reason = "operator mark-done: forced past a rollback: the 500s were the load balancer"
	want.RejectedVersions = []string{"0.9.5"} // done completes the target
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	wantEv := Event{V: 1, Group: "staging", Kind: EventTransition, From: StateRolledBack, To: StateDone, Reason: want.Reason, At: now}
	if diff := cmp.Diff(wantEv, ev); diff != "" {
		t.Errorf("event (-want +got):\n%s", diff)
	}
	if v, update := Decide(idAt(0.9), DefaultSpec(v1, v2), got, ModeEnabled); v != v2 || !update {
		t.Errorf("an agent of the group marked done is told %s update=%v, want %s", v, update, v2)
	}
	// From the states mark-done allows, it is mark-done; done is refused.
	active := startedStatus(StateActive, start, idAt(0.5))
	a, _, err1 := MarkDoneForced(active, "r", now)
	b, _, err2 := MarkDone(active, "r", now)
	if err1 != nil || err2 != nil || !cmp.Equal(a, b) {
		t.Errorf("forced mark-done of active differs from mark-done: %v %v\n%s", err1, err2, cmp.Diff(b, a))
	}
	done := startedStatus(StateActive, start, idAt(0.5))
	done.State = StateDone
	if _, _, err := MarkDoneForced(done, "r", now); !errors.Is(err, ErrBadAction) {
		t.Errorf("forced mark-done of done: %v, want refused", err)
	}
}

// skipInput is staging (10 agents on v1, canary_count 3, window 03:00 UTC)
// at now with prev.
func skipInput(cfg Config, prev GroupStatus, agents []AgentView, now time.Time) Input {
	return Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents), Now: now}
}

func TestNextRunSkipCanaries(t *testing.T) {
	const note = "INC-77: hotfix"
	ids := spreadIDs(10, 0.5)
	agents := onVersion(ids, v1)
	// 12:00: staging's window (03:00-04:00) is closed; a run request
	// starts it anyway.
	now := mustTime(t, "2024-03-05T12:00:00Z")
	cfg := testConfig()
	unstarted := func() GroupStatus {
		st, _ := Next(skipInput(cfg, GroupStatus{}, agents, now.Add(-time.Hour)))
		if st.State != StateUnstarted || st.Waiting == "" {
			t.Fatalf("setup: %s waiting %q", st.State, st.Waiting)
		}
		return st
	}
	requested := func() GroupStatus {
		st, _, err := RunSkipCanaries(unstarted(), note, now.Add(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	t.Run("unstarted → active at once, no canaries, the reason in the transition and the status", func(t *testing.T) {
		st, evs := Next(skipInput(cfg, requested(), agents, now))
		if got := kinds(evs); !slices.Equal(got, []string{"transition:unstarted→active"}) {
			t.Fatalf("events %v, want one transition unstarted→active (no canary state)", got)
		}
		wantReason := "run requested by an operator: canaries skipped by an operator (" + note + "): starting with 10 agents in active, no canaries"
		if evs[0].Reason != wantReason {
			t.Errorf("transition reason %q, want %q", evs[0].Reason, wantReason)
		}
		if st.State != StateActive || len(st.Canaries) != 0 || st.InitialCount != 10 || st.RunRequested ||
			!st.StartedAt.Equal(now) || !st.FailuresSince.Equal(now) || st.SkipCanaries != note || st.Reason != wantReason {
			t.Errorf("status after the start: %+v", st)
		}
		// The same step ran active: progress moved without any canary.
		if st.Progress <= 0 {
			t.Errorf("progress %v: the active phase did not run in the same step", st.Progress)
		}
		if err := st.Validate(); err != nil {
			t.Error(err)
		}
		// Agents below progress are told to update now.
		told := 0
		for _, id := range ids {
			if v, update := Decide(id, DefaultSpec(v1, v2), st, st.Mode); update && v == v2 {
				told++
			}
		}
		if told == 0 {
			t.Error("no agent is told to update after the start without canaries")
		}
		// The next step keeps it active, the record kept.
		st2, _ := Next(skipInput(cfg, st, agents, now.Add(time.Minute)))
		if st2.State != StateActive || st2.SkipCanaries != note {
			t.Errorf("the next step: %s skip %q", st2.State, st2.SkipCanaries)
		}
	})

	t.Run("without the request a run starts in canary, as before", func(t *testing.T) {
		plain, _, err := Run(unstarted(), note, now.Add(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		st, evs := Next(skipInput(cfg, plain, agents, now))
		if got := kinds(evs); !slices.Equal(got, []string{"transition:unstarted→canary"}) || len(st.Canaries) != 3 {
			t.Errorf("events %v canaries %d, want unstarted→canary with 3 canaries", got, len(st.Canaries))
		}
	})

	t.Run("no agents present: it waits, the request kept", func(t *testing.T) {
		st, evs := Next(skipInput(cfg, requested(), nil, now))
		if st.State != StateUnstarted || len(evs) != 0 || !st.RunRequested || st.SkipCanaries != note || !strings.Contains(st.Waiting, "no agents present") {
			t.Errorf("%s events %v run %v skip %q waiting %q", st.State, kinds(evs), st.RunRequested, st.SkipCanaries, st.Waiting)
		}
	})

	t.Run("paused: it waits, the request kept", func(t *testing.T) {
		paused := cfg
		paused.Mode = ModePaused
		st, evs := Next(skipInput(paused, requested(), agents, now))
		if st.State != StateUnstarted || len(evs) != 0 || !st.RunRequested || st.SkipCanaries != note {
			t.Errorf("%s events %v", st.State, kinds(evs))
		}
	})

	t.Run("a quarantined target halts it before it starts", func(t *testing.T) {
		in := skipInput(cfg, requested(), agents, now)
		in.Quarantine = QuarantineList{V: 1, Versions: []Quarantine{{Version: v2, By: "controller", Reason: "rolled back on 5 hosts", At: now}}}
		st, evs := Next(in)
		if st.State != StateUnstarted || !st.Halted || slices.Contains(kinds(evs), "transition:unstarted→active") {
			t.Errorf("%s halted %v events %v", st.State, st.Halted, kinds(evs))
		}
	})

	t.Run("a new target drops the request", func(t *testing.T) {
		in := skipInput(cfg, requested(), agents, now)
		in.Spec = DefaultSpec(v1, "3.0.0")
		st, _ := Next(in)
		if st.SkipCanaries != "" || st.RunRequested || st.State != StateUnstarted {
			t.Errorf("after a new target: %s run %v skip %q", st.State, st.RunRequested, st.SkipCanaries)
		}
	})

	t.Run("done then: the record stays", func(t *testing.T) {
		st, _ := Next(skipInput(cfg, requested(), agents, now))
		st, evs := Next(skipInput(cfg, st, onVersion(ids, v2), now.Add(10*time.Minute)))
		if st.State != StateDone || st.SkipCanaries != note || !slices.Contains(kinds(evs), "transition:active→done") {
			t.Errorf("%s skip %q events %v", st.State, st.SkipCanaries, kinds(evs))
		}
	})
}

// TestNextRunSkipCanariesApproval: skipping the canaries does not skip an
// approval the config asks for after them: the group waits for it in
// unstarted (one approval_needed event), and the approval starts it in
// active naming the approver. A start approval is asked first, as for any
// start.
func TestNextRunSkipCanariesApproval(t *testing.T) {
	skip := func(st GroupStatus, _ string, now time.Time) (GroupStatus, Event, error) {
		return RunSkipCanaries(st, "INC-9", now)
	}
	const (
		startWait  = "awaiting approval to start"
		canaryWait = "awaiting approval to go active after its canaries"
	)
	newTarget := "transition:→unstarted"
	t.Run("after_canary", func(t *testing.T) {
		runApprovalSteps(t, ApprovalGates{ApprovalAfterCanary}, false, []approvalStep{
			{at: 2 * time.Hour, state: StateUnstarted, waiting: "window: next opens", events: []string{newTarget}},
			{at: 2*time.Hour + time.Minute, action: skip, state: StateUnstarted, awaiting: ApprovalAfterCanary, since: 2*time.Hour + time.Minute,
				waiting: canaryWait, events: []string{"approval_needed"}},
			{at: 2*time.Hour + 5*time.Minute, state: StateUnstarted, awaiting: ApprovalAfterCanary, since: 2*time.Hour + time.Minute, waiting: canaryWait},
			{at: 3 * time.Hour, approve: "bob", stage: ApprovalAfterCanary, state: StateActive, events: []string{"transition:unstarted→active"},
				reason: "canaries skipped by an operator (INC-9): starting with 10 agents in active, no canaries; approved by bob: LGTM"},
		})
	})
	t.Run("start and after_canary: two approvals, the start one first", func(t *testing.T) {
		runApprovalSteps(t, ApprovalGates{ApprovalStart, ApprovalAfterCanary}, false, []approvalStep{
			{at: 2 * time.Hour, state: StateUnstarted, waiting: "window: next opens", events: []string{newTarget}},
			{at: 2*time.Hour + time.Minute, action: skip, state: StateUnstarted, awaiting: ApprovalStart, since: 2*time.Hour + time.Minute,
				waiting: startWait, events: []string{"approval_needed"}},
			{at: 2*time.Hour + 2*time.Minute, approve: "alice", state: StateUnstarted, awaiting: ApprovalAfterCanary, since: 2*time.Hour + 2*time.Minute,
				waiting: canaryWait, events: []string{"approval_needed"}},
			// The start approval passes again each step; the wait for the
			// second does not start over (no new event).
			{at: 2*time.Hour + 3*time.Minute, state: StateUnstarted, awaiting: ApprovalAfterCanary, since: 2*time.Hour + 2*time.Minute, waiting: canaryWait},
			{at: 2*time.Hour + 4*time.Minute, approve: "carol", state: StateActive, events: []string{"transition:unstarted→active"}, reason: "approved by carol"},
		})
	})
}
