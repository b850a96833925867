package rollout

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// approvalStep is one step of an approval scenario: optionally an operator
// action or a change of the world at the step's time, then one Next, and
// what must hold after it.
type approvalStep struct {
	at time.Duration // after 03:00 UTC, when staging's window opens
	// Before the step's Next:
	approve  string        // fleetctl approve by this actor ("" none)
	stage    ApprovalStage // its --stage
	action   func(GroupStatus, string, time.Time) (GroupStatus, Event, error)
	healthy  bool   // the canaries report the target healthy
	failed   bool   // the canaries roll back from the target
	target   string // a new plan target
	noConfig bool   // the config stops asking for approvals
	// After it:
	state    State
	awaiting ApprovalStage // the stage awaited ("" none)
	since    time.Duration // when the wait began (after 03:00); checked when awaiting
	waiting  string        // a substring of Waiting ("" for none)
	events   []string      // kinds(events)
	reason   string        // a substring of the last event's reason
	alerted  bool
	halted   bool
}

// runApprovalSteps runs staging (10 agents, 1 canary, min_healthy_time 0,
// alert_after 1h, window 03:00-04:00 UTC every day) with the approval
// config gates through steps from no status.
func runApprovalSteps(t *testing.T, gates ApprovalGates, alertOnWait bool, steps []approvalStep) {
	t.Helper()
	day := mustTime(t, "2024-03-05T03:00:00Z")
	ids := spreadIDs(10, 0.5)
	cfg := testConfig()
	g := &cfg.Groups[0]
	g.CanaryCount, g.MinHealthyTime, g.AlertAfter = 1, 0, Duration(time.Hour)
	g.Approval, g.AlertOnApprovalWait = gates, alertOnWait
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	spec := DefaultSpec(v1, v2)
	agents := onVersion(ids, v1)
	var st GroupStatus
	for i, s := range steps {
		now := day.Add(s.at)
		if s.target != "" {
			spec = DefaultSpec(v1, s.target)
		}
		if s.noConfig {
			cfg.Groups[0].Approval = nil
		}
		for j, a := range agents {
			if !st.IsCanary(a.ID) {
				continue
			}
			switch {
			case s.healthy:
				agents[j] = AgentView{ID: a.ID, ActiveVersion: spec.TargetVersion, StartTime: now.Add(-time.Second)}
			case s.failed:
				agents[j] = AgentView{ID: a.ID, ActiveVersion: v1, Rollback: true, RollbackFrom: spec.TargetVersion, Error: "health check failed",
					StartTime: now.Add(-time.Second)}
			}
		}
		if s.approve != "" {
			next, ev, err := Approve(st, s.stage, s.approve, "LGTM", now)
			if err != nil {
				t.Fatalf("step %d: approve: %v", i, err)
			}
			if ev.Kind != EventOperator || !strings.Contains(ev.Reason, "given by "+s.approve) {
				t.Errorf("step %d: approve event %+v, want an operator event naming %s", i, ev, s.approve)
			}
			st = next
		}
		if s.action != nil {
			next, _, err := s.action(st, "", now)
			if err != nil {
				t.Fatalf("step %d: action: %v", i, err)
			}
			st = next
		}
		next, evs := Next(Input{Config: cfg, Group: "staging", Spec: spec, Prev: st, Agents: agents, Counts: CountAgents(agents), Now: now})
		if err := next.Validate(); err != nil {
			t.Fatalf("step %d: Next wrote a status that does not validate: %v", i, err)
		}
		st = next
		if st.State != s.state {
			t.Errorf("step %d: state %s (%s), want %s", i, st.State, st.Reason, s.state)
		}
		if st.AwaitingApproval.Stage != s.awaiting {
			t.Errorf("step %d: awaiting %q, want %q", i, st.AwaitingApproval.Stage, s.awaiting)
		} else if s.awaiting != "" && !st.AwaitingApproval.Since.Equal(day.Add(s.since)) {
			t.Errorf("step %d: awaiting since %s, want %s", i, st.AwaitingApproval.Since, day.Add(s.since))
		}
		if (st.Waiting == "") != (s.waiting == "") || !strings.Contains(st.Waiting, s.waiting) {
			t.Errorf("step %d: waiting %q, want %q", i, st.Waiting, s.waiting)
		}
		if got := kinds(evs); !slices.Equal(got, s.events) {
			t.Errorf("step %d: events %v, want %v", i, got, s.events)
		}
		if s.reason != "" && (len(evs) == 0 || !strings.Contains(evs[len(evs)-1].Reason, s.reason)) {
			t.Errorf("step %d: events %+v, want the last one's reason to contain %q", i, evs, s.reason)
		}
		if st.Alerted != s.alerted {
			t.Errorf("step %d: alerted %v, want %v", i, st.Alerted, s.alerted)
		}
		if st.Halted != s.halted {
			t.Errorf("step %d: halted %v (%s), want %v", i, st.Halted, st.HaltReason, s.halted)
		}
	}
}

// TestNextApproval (issue 16 point 2): a group whose config asks for an
// approval waits in a visible awaiting-approval state (never a failure,
// never a halt, one approval_needed event) at that stage until an operator
// approves it; the approval moves it on with the approver named in the
// transition; a new target or a reset starts the approvals over; the wait
// does not count towards alert_after unless alert_on_approval_wait.
func TestNextApproval(t *testing.T) {
	const (
		startWait  = "awaiting approval to start (fleetctl approve --group staging --reason TEXT)"
		canaryWait = "awaiting approval to go active after its canaries (fleetctl approve --group staging --reason TEXT)"
	)
	newTarget := "transition:→unstarted"
	reset := func(st GroupStatus, note string, now time.Time) (GroupStatus, Event, error) {
		return Reset(st, note, now)
	}
	tests := []struct {
		name        string
		gates       ApprovalGates
		alertOnWait bool
		steps       []approvalStep
	}{
		{name: "no approval asked: the group starts and goes active by itself", steps: []approvalStep{
			{at: 10 * time.Minute, state: StateCanary, events: []string{newTarget, "transition:unstarted→canary"}},
			{at: 20 * time.Minute, healthy: true, state: StateActive, events: []string{"transition:canary→active"}},
		}},
		{name: "before start: waits, one event, the approval starts it naming the approver", gates: ApprovalGates{ApprovalStart}, steps: []approvalStep{
			{at: 10 * time.Minute, state: StateUnstarted, awaiting: ApprovalStart, since: 10 * time.Minute, waiting: startWait,
				events: []string{newTarget, "approval_needed"}, reason: startWait},
			{at: 30 * time.Minute, state: StateUnstarted, awaiting: ApprovalStart, since: 10 * time.Minute, waiting: startWait},
			{at: 40 * time.Minute, approve: "alice", state: StateCanary, events: []string{"transition:unstarted→canary"},
				reason: "approved by alice: LGTM: starting with 10 agents, 1 canaries"},
			// The after_canary stage asks for nothing: it goes active by itself.
			{at: 50 * time.Minute, healthy: true, state: StateActive, events: []string{"transition:canary→active"}},
		}},
		{name: "before start: the window closing does not send a waiting group back; the approval starts it at once", gates: ApprovalGates{ApprovalStart}, steps: []approvalStep{
			{at: 10 * time.Minute, state: StateUnstarted, awaiting: ApprovalStart, since: 10 * time.Minute, waiting: startWait,
				events: []string{newTarget, "approval_needed"}},
			{at: 6 * time.Hour, state: StateUnstarted, awaiting: ApprovalStart, since: 10 * time.Minute, waiting: startWait},
			{at: 7 * time.Hour, approve: "alice", state: StateCanary, events: []string{"transition:unstarted→canary"}, reason: "approved by alice"},
		}},
		{name: "before start, the window closed before the group got there: it waits for the window, not for approval", gates: ApprovalGates{ApprovalStart}, steps: []approvalStep{
			{at: 2 * time.Hour, state: StateUnstarted, waiting: "window: next opens Wed 2024-03-06 03:00 UTC", events: []string{newTarget}},
			{at: 24 * time.Hour, state: StateUnstarted, awaiting: ApprovalStart, since: 24 * time.Hour, waiting: startWait, events: []string{"approval_needed"}},
		}},
		{name: "after canary: canaries healthy, the group waits in canary; the approval makes it active", gates: ApprovalGates{ApprovalAfterCanary}, steps: []approvalStep{
			{at: 10 * time.Minute, state: StateCanary, events: []string{newTarget, "transition:unstarted→canary"}},
			{at: 20 * time.Minute, healthy: true, state: StateCanary, awaiting: ApprovalAfterCanary, since: 20 * time.Minute, waiting: canaryWait,
				events: []string{"approval_needed"}, reason: canaryWait},
			{at: 2 * time.Hour, healthy: true, state: StateCanary, awaiting: ApprovalAfterCanary, since: 20 * time.Minute, waiting: canaryWait},
			{at: 3 * time.Hour, approve: "bob", stage: ApprovalAfterCanary, healthy: true, state: StateActive, events: []string{"transition:canary→active"},
				reason: "all 1 canaries healthy on 2.0.0 for min_healthy_time 0s; approved by bob: LGTM"},
		}},
		{name: "after canary: a canary failing while the group waits halts it, and the wait ends", gates: ApprovalGates{ApprovalAfterCanary}, steps: []approvalStep{
			{at: 10 * time.Minute, state: StateCanary, events: []string{newTarget, "transition:unstarted→canary"}},
			{at: 20 * time.Minute, healthy: true, state: StateCanary, awaiting: ApprovalAfterCanary, since: 20 * time.Minute, waiting: canaryWait,
				events: []string{"approval_needed"}},
			{at: 30 * time.Minute, failed: true, state: StateCanary, events: []string{"halt", "alert"}, halted: true},
		}},
		{name: "both stages: the start approval does not approve the second stage", gates: ApprovalGates{ApprovalStart, ApprovalAfterCanary}, steps: []approvalStep{
			{at: 10 * time.Minute, state: StateUnstarted, awaiting: ApprovalStart, since: 10 * time.Minute, waiting: startWait,
				events: []string{newTarget, "approval_needed"}},
			{at: 20 * time.Minute, approve: "alice", stage: ApprovalStart, state: StateCanary, events: []string{"transition:unstarted→canary"}},
			{at: 30 * time.Minute, healthy: true, state: StateCanary, awaiting: ApprovalAfterCanary, since: 30 * time.Minute, waiting: canaryWait,
				events: []string{"approval_needed"}},
			{at: 40 * time.Minute, approve: "carol", healthy: true, state: StateActive, events: []string{"transition:canary→active"}, reason: "approved by carol"},
		}},
		{name: "a new target resets the approvals: an approval given for the old one does not start the new one", gates: ApprovalGates{ApprovalStart}, steps: []approvalStep{
			{at: 10 * time.Minute, state: StateUnstarted, awaiting: ApprovalStart, since: 10 * time.Minute, waiting: startWait,
				events: []string{newTarget, "approval_needed"}},
			{at: 20 * time.Minute, approve: "alice", target: "3.0.0", state: StateUnstarted, awaiting: ApprovalStart, since: 20 * time.Minute, waiting: startWait,
				events: []string{"transition:unstarted→unstarted", "approval_needed"}},
			{at: 30 * time.Minute, state: StateUnstarted, awaiting: ApprovalStart, since: 20 * time.Minute, waiting: startWait},
		}},
		{name: "a reset clears the approvals: a group restarting its canaries asks again", gates: ApprovalGates{ApprovalStart, ApprovalAfterCanary}, steps: []approvalStep{
			{at: 10 * time.Minute, state: StateUnstarted, awaiting: ApprovalStart, since: 10 * time.Minute, waiting: startWait,
				events: []string{newTarget, "approval_needed"}},
			{at: 20 * time.Minute, approve: "alice", state: StateCanary, events: []string{"transition:unstarted→canary"}},
			{at: 30 * time.Minute, healthy: true, state: StateCanary, awaiting: ApprovalAfterCanary, since: 30 * time.Minute, waiting: canaryWait,
				events: []string{"approval_needed"}},
			{at: 40 * time.Minute, action: reset, state: StateUnstarted, awaiting: ApprovalStart, since: 40 * time.Minute, waiting: startWait,
				events: []string{"approval_needed"}},
		}},
		{name: "the config stops asking while the group waits: it moves on", gates: ApprovalGates{ApprovalStart}, steps: []approvalStep{
			{at: 10 * time.Minute, state: StateUnstarted, awaiting: ApprovalStart, since: 10 * time.Minute, waiting: startWait,
				events: []string{newTarget, "approval_needed"}},
			{at: 20 * time.Minute, noConfig: true, state: StateCanary, events: []string{"transition:unstarted→canary"}, reason: "no approval needed any more"},
		}},
		{name: "alert_after does not count the wait after the canaries", gates: ApprovalGates{ApprovalAfterCanary}, steps: []approvalStep{
			{at: 0, state: StateCanary, events: []string{newTarget, "transition:unstarted→canary"}},
			{at: 10 * time.Minute, healthy: true, state: StateCanary, awaiting: ApprovalAfterCanary, since: 10 * time.Minute, waiting: canaryWait,
				events: []string{"approval_needed"}},
			// 5h since the start, 4h50m of it awaiting approval: 10m counted.
			{at: 5 * time.Hour, healthy: true, state: StateCanary, awaiting: ApprovalAfterCanary, since: 10 * time.Minute, waiting: canaryWait},
			{at: 5 * time.Hour, approve: "alice", healthy: true, state: StateActive, events: []string{"transition:canary→active"}},
			// 5h40m since the start: 50m counted.
			{at: 5*time.Hour + 40*time.Minute, state: StateActive},
			// 6h since the start: 1h10m counted, past alert_after 1h.
			{at: 6 * time.Hour, state: StateActive, alerted: true, events: []string{"alert"},
				reason: "not done 6h after it started (1h10m not counting 4h50m awaiting approval) (alert_after 1h); the rollout continues"},
		}},
		{name: "alert_on_approval_wait: the wait after the canaries counts", gates: ApprovalGates{ApprovalAfterCanary}, alertOnWait: true, steps: []approvalStep{
			{at: 0, state: StateCanary, events: []string{newTarget, "transition:unstarted→canary"}},
			{at: 10 * time.Minute, healthy: true, state: StateCanary, awaiting: ApprovalAfterCanary, since: 10 * time.Minute, waiting: canaryWait,
				events: []string{"approval_needed"}},
			{at: time.Hour, healthy: true, state: StateCanary, awaiting: ApprovalAfterCanary, since: 10 * time.Minute, waiting: canaryWait,
				alerted: true, events: []string{"alert"}, reason: "not done 1h after it started (alert_after 1h)"},
		}},
		{name: "alert_on_approval_wait: a group awaiting its start approval for alert_after alerts, once", gates: ApprovalGates{ApprovalStart}, alertOnWait: true, steps: []approvalStep{
			{at: 0, state: StateUnstarted, awaiting: ApprovalStart, waiting: startWait, events: []string{newTarget, "approval_needed"}},
			{at: 59 * time.Minute, state: StateUnstarted, awaiting: ApprovalStart, waiting: startWait},
			{at: time.Hour, state: StateUnstarted, awaiting: ApprovalStart, waiting: startWait, alerted: true, events: []string{"alert"},
				reason: "awaiting approval to start for 1h (alert_after 1h, alert_on_approval_wait)"},
			{at: 2 * time.Hour, state: StateUnstarted, awaiting: ApprovalStart, waiting: startWait, alerted: true},
			// Started: the rollout's own alert_after clock starts afresh.
			{at: 2 * time.Hour, approve: "alice", state: StateCanary, events: []string{"transition:unstarted→canary"}},
		}},
		{name: "by default a group awaiting its start approval never alerts", gates: ApprovalGates{ApprovalStart}, steps: []approvalStep{
			{at: 0, state: StateUnstarted, awaiting: ApprovalStart, waiting: startWait, events: []string{newTarget, "approval_needed"}},
			{at: 48 * time.Hour, state: StateUnstarted, awaiting: ApprovalStart, waiting: startWait},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runApprovalSteps(t, tt.gates, tt.alertOnWait, tt.steps)
		})
	}
}

// TestNextApprovalPausedKeepsTheWait: a mode other than enabled freezes a
// waiting group with its wait (and an approval given meanwhile) kept; the
// approval moves it once the mode is enabled again.
func TestNextApprovalPausedKeepsTheWait(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:10:00Z")
	ids := spreadIDs(4, 0.5)
	agents := onVersion(ids, v1)
	cfg := testConfig()
	cfg.Groups[0].Approval = ApprovalGates{ApprovalStart}
	spec := DefaultSpec(v1, v2)
	in := Input{Config: cfg, Group: "staging", Spec: spec, Agents: agents, Counts: CountAgents(agents), Now: start}
	st, _ := Next(in)
	if st.AwaitingApproval.Stage != ApprovalStart {
		t.Fatalf("awaiting %+v, want start", st.AwaitingApproval)
	}
	in.Config.Mode, in.Prev, in.Now = ModePaused, st, start.Add(time.Minute)
	paused, evs := Next(in)
	if paused.AwaitingApproval != st.AwaitingApproval || len(evs) != 0 || !strings.HasPrefix(paused.Waiting, "mode paused") {
		t.Fatalf("paused: awaiting %+v, waiting %q, events %v; want the wait kept, no event", paused.AwaitingApproval, paused.Waiting, kinds(evs))
	}
	approved, _, err := Approve(paused, "", "alice", "ok", start.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	in.Prev, in.Now = approved, start.Add(3*time.Minute)
	still, _ := Next(in)
	if still.State != StateUnstarted {
		t.Fatalf("paused and approved: state %s, want unstarted until enabled", still.State)
	}
	in.Config.Mode, in.Prev, in.Now = ModeEnabled, still, start.Add(4*time.Minute)
	moved, _ := Next(in)
	if moved.State != StateCanary || moved.AwaitingApproval != (ApprovalWait{}) {
		t.Fatalf("enabled: state %s, awaiting %+v; want canary, no wait", moved.State, moved.AwaitingApproval)
	}
	if diff := cmp.Diff([]Approval{{Stage: ApprovalStart, By: "alice", Reason: "ok", At: start.Add(2 * time.Minute)}}, moved.Approvals); diff != "" {
		t.Errorf("approvals kept as the record of who approved (-want +got):\n%s", diff)
	}
}

// TestApprove: fleetctl approve records who approved which stage; it is
// refused, changing nothing, for a group not awaiting approval, a halted
// one, another stage than the awaited one, no reason, and a stage already
// approved.
func TestApprove(t *testing.T) {
	since := mustTime(t, "2024-03-05T03:10:00Z")
	now := since.Add(time.Hour)
	waiting := func(stage ApprovalStage) GroupStatus {
		st := startedStatus(StateCanary, since, idAt(0.5))
		if stage == ApprovalStart {
			st = GroupStatus{V: 1, Group: "staging", State: StateUnstarted, Since: since, TargetVersion: v2, StartVersion: v1}
		}
		st.AwaitingApproval = ApprovalWait{Stage: stage, Since: since}
		st.Waiting = AwaitingText("staging", stage)
		return st
	}
	approved := waiting(ApprovalStart)
	approved.Approvals = []Approval{{Stage: ApprovalStart, By: "bob", Reason: "first", At: since}}
	halted := startedStatus(StateCanary, since, idAt(0.5))
	halted.Halted, halted.HaltReason = true, "canary failed"
	notWaiting := startedStatus(StateActive, since, "")
	tests := []struct {
		name    string
		prev    GroupStatus
		stage   ApprovalStage
		by      string
		reason  string
		want    []Approval
		wantEv  string
		wantErr []string
	}{
		{name: "start, stage not named", prev: waiting(ApprovalStart), by: "alice", reason: " change 42 ",
			want:   []Approval{{Stage: ApprovalStart, By: "alice", Reason: "change 42", At: now}},
			wantEv: "operator approve: change 42 (approval to start given by alice; the group moves at the controller's next step)"},
		{name: "after_canary, stage named", prev: waiting(ApprovalAfterCanary), stage: ApprovalAfterCanary, by: "alice", reason: "metrics fine",
			want:   []Approval{{Stage: ApprovalAfterCanary, By: "alice", Reason: "metrics fine", At: now}},
			wantEv: "approval to go active after its canaries given by alice"},
		{name: "not awaiting", prev: notWaiting, by: "alice", reason: "x",
			wantErr: []string{`approve group "staging": it is not awaiting approval (it is active)`}},
		{name: "another stage than the awaited one", prev: waiting(ApprovalStart), stage: ApprovalAfterCanary, by: "alice", reason: "x",
			wantErr: []string{"--stage after_canary, but it awaits approval to start (stage start)"}},
		{name: "halted", prev: halted, by: "alice", reason: "x",
			wantErr: []string{"it is halted (canary failed), not awaiting approval", "fleetctl reset --group staging"}},
		{name: "no reason", prev: waiting(ApprovalStart), by: "alice", reason: "  ",
			wantErr: []string{"a reason is required"}},
		{name: "already approved", prev: approved, by: "alice", reason: "x",
			wantErr: []string{"stage start is already approved (by bob at 2024-03-05T03:10:00Z: first)"}},
		{name: "unknown stage", prev: waiting(ApprovalStart), stage: "later", by: "alice", reason: "x",
			wantErr: []string{`stage "later" must be start or after_canary`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.prev.Clone()
			st, ev, err := Approve(tt.prev, tt.stage, tt.by, tt.reason, now)
			if diff := cmp.Diff(before, tt.prev); diff != "" {
				t.Errorf("Approve changed its argument (-before +after):\n%s", diff)
			}
			if tt.wantErr != nil {
				if err == nil || !errors.Is(err, ErrBadAction) {
					t.Fatalf("err = %v, want ErrBadAction", err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %q, want it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, st.Approvals); diff != "" {
				t.Errorf("approvals (-want +got):\n%s", diff)
			}
			if ev.Kind != EventOperator || ev.From != tt.prev.State || ev.To != tt.prev.State || !strings.Contains(ev.Reason, tt.wantEv) {
				t.Errorf("event %+v, want an operator event containing %q", ev, tt.wantEv)
			}
			if st.AwaitingApproval != tt.prev.AwaitingApproval || st.State != tt.prev.State {
				t.Errorf("Approve moved the group (%s, %+v): only Next does", st.State, st.AwaitingApproval)
			}
			if err := st.Validate(); err != nil {
				t.Errorf("approved status does not validate: %v", err)
			}
		})
	}
}

// TestActionsClearApprovals: a reset drops the approvals given (a group
// that asks for them asks again), a rollback or mark-done ends a wait.
func TestActionsClearApprovals(t *testing.T) {
	at := mustTime(t, "2024-03-05T03:00:00Z")
	given := []Approval{{Stage: ApprovalStart, By: "alice", Reason: "ok", At: at}}
	active := startedStatus(StateActive, at, "")
	active.Approvals = given
	canary := startedStatus(StateCanary, at, idAt(0.5))
	canary.Approvals, canary.AwaitingApproval = given, ApprovalWait{Stage: ApprovalAfterCanary, Since: at}
	for _, tt := range []struct {
		name      string
		prev      GroupStatus
		action    func(GroupStatus, string, time.Time) (GroupStatus, Event, error)
		approvals bool // the approvals stay
	}{
		{"reset active", active, Reset, false},
		{"reset canary (restarts)", canary, Reset, false},
		{"rollback canary", canary, Rollback, true},
		{"mark-done canary", canary, MarkDone, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, _, err := tt.action(tt.prev, "", at.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if st.AwaitingApproval != (ApprovalWait{}) {
				t.Errorf("awaiting %+v after %s, want none", st.AwaitingApproval, tt.name)
			}
			if got := len(st.Approvals) > 0; got != tt.approvals {
				t.Errorf("approvals %v after %s, want kept = %v", st.Approvals, tt.name, tt.approvals)
			}
		})
	}
}

// TestApprovalConfig: the approval setting reads as a list of stages or
// one word ("manual", "none", a stage), is stored as the list in rollout
// order, round-trips, and an unknown or repeated stage is a validation
// error naming the allowed ones.
func TestApprovalConfig(t *testing.T) {
	tests := []struct {
		json    string
		want    ApprovalGates
		wantErr string
	}{
		{json: `"manual"`, want: ApprovalGates{ApprovalStart}},
		{json: `"none"`},
		{json: `[]`},
		{json: `null`},
		{json: `"after_canary"`, want: ApprovalGates{ApprovalAfterCanary}},
		{json: `["after_canary","start"]`, want: ApprovalGates{ApprovalStart, ApprovalAfterCanary}},
		{json: `"start, after_canary"`, want: ApprovalGates{ApprovalStart, ApprovalAfterCanary}},
		{json: `["start","later"]`, want: ApprovalGates{ApprovalStart, "later"},
			wantErr: `group "prod": approval "later" is not a stage: use start, after_canary (a list, or "manual" for start, "none" for no approval)`},
		{json: `"automatic"`, want: ApprovalGates{"automatic"}, wantErr: `approval "automatic" is not a stage`},
		{json: `["start","start"]`, want: ApprovalGates{ApprovalStart, ApprovalStart}, wantErr: "approval lists start twice"},
	}
	for _, tt := range tests {
		t.Run(tt.json, func(t *testing.T) {
			var c Config
			doc := `{"v":1,"groups":[{"name":"prod","approval":` + tt.json + `,"alert_on_approval_wait":true}]}`
			if err := json.Unmarshal([]byte(doc), &c); err != nil {
				t.Fatal(err)
			}
			g := c.Groups[0]
			if diff := cmp.Diff(tt.want, g.Approval); diff != "" {
				t.Errorf("approval (-want +got):\n%s", diff)
			}
			if !g.AlertOnApprovalWait {
				t.Error("alert_on_approval_wait not read")
			}
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
			} else {
				if err == nil || !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Validate = %v, want ErrBadConfig containing %q", err, tt.wantErr)
				}
				return
			}
			data, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			var back Config
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c, back); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			if len(tt.want) == 0 && strings.Contains(string(data), `"approval"`) {
				t.Errorf("no approval is written as none: %s", data)
			}
		})
	}
	// A group without the fields asks for no approval, and writes none
	// (an older controller reads it).
	data, err := json.Marshal(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "approval") {
		t.Errorf("default config mentions approval: %s", data)
	}
}

// TestApprovalStatusValidate: a stored status with an approval field no
// controller or fleetctl writes is refused.
func TestApprovalStatusValidate(t *testing.T) {
	at := mustTime(t, "2024-03-05T03:00:00Z")
	ok := startedStatus(StateCanary, at, idAt(0.5))
	ok.AwaitingApproval = ApprovalWait{Stage: ApprovalAfterCanary, Since: at}
	ok.Approvals = []Approval{{Stage: ApprovalStart, By: "alice", Reason: "x", At: at}}
	ok.ApprovalWaited = Duration(time.Minute)
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*GroupStatus){
		"unknown awaited stage": func(st *GroupStatus) { st.AwaitingApproval.Stage = "later" },
		"wait without since":    func(st *GroupStatus) { st.AwaitingApproval.Since = time.Time{} },
		"unknown approved":      func(st *GroupStatus) { st.Approvals[0].Stage = "" },
		"approval by nobody":    func(st *GroupStatus) { st.Approvals[0].By = "" },
		"negative wait":         func(st *GroupStatus) { st.ApprovalWaited = -1 },
		"too many approvals": func(st *GroupStatus) {
			for range MaxApprovals {
				st.Approvals = append(st.Approvals, st.Approvals[0])
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			st := ok.Clone()
			edit(&st)
			if err := st.Validate(); !errors.Is(err, ErrBadStatus) {
				t.Errorf("Validate = %v, want ErrBadStatus", err)
			}
		})
	}
}

// TestHaltIsNotAlertAfter: a halt raises its own alert and leaves Alerted
// (alert_after's) alone, so a reset group still gets its alert_after alert
// when alert_after passes, and a halted group never gets a second one.
func TestHaltIsNotAlertAfter(t *testing.T) {
	st := GroupStatus{Group: "g", TargetVersion: "2.0.0", State: StateActive, StartedAt: time.Unix(0, 0)}
	m := &machine{st: st, now: time.Unix(0, 0).Add(time.Minute), gc: GroupConfig{AlertAfter: Duration(time.Hour)}}
	m.halt("2 agents failed")
	if m.st.Alerted {
		t.Fatal("a halt set Alerted: the alert_after alert would never come after a reset")
	}
	m.now = time.Unix(0, 0).Add(2 * time.Hour)
	m.events = nil
	m.alertAfter()
	if m.st.Alerted || len(m.events) != 0 {
		t.Fatalf("a halted group got an alert_after alert beside its halt: %v", m.events)
	}
	m.st.clearHalt()
	m.alertAfter()
	if !m.st.Alerted || len(m.events) != 1 || m.events[0].Kind != EventAlert {
		t.Fatalf("after the reset, alert_after passed: alerted %v events %v", m.st.Alerted, m.events)
	}
}
