package rollout

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Issue 28 point 4: canaries for small groups, and lost canaries.

// TestNextSmallGroup: a group with at most small_group agents present when
// it starts skips its canary phase, unstarted → active in one transition
// whose reason says why; one more agent and it has canaries as before.
func TestNextSmallGroup(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:05:00Z") // staging's window (03:00) is open
	tests := []struct {
		name        string
		small       int
		agents      int
		unreachable int // of agents
		approval    ApprovalGates
		wantState   State
		wantReason  string // substring
		wantSkip    string
		wantCanary  int
		wantEvents  []string
	}{
		{name: "at the threshold: skips", small: 3, agents: 3, wantState: StateActive,
			wantReason: "window open: starting with 3 agents, canaries skipped (small group: 3 agents ≤ small_group 3)",
			wantSkip:   "small group: 3 agents ≤ small_group 3", wantEvents: []string{"transition:unstarted→active"}},
		{name: "threshold+1: canaries", small: 3, agents: 4, wantState: StateCanary, wantCanary: 3,
			wantReason: "starting with 4 agents, 3 canaries", wantEvents: []string{"transition:unstarted→canary"}},
		{name: "below the threshold: skips", small: 3, agents: 1, wantState: StateActive,
			wantSkip: "small group: 1 agent ≤ small_group 3", wantEvents: []string{"transition:unstarted→active"}},
		{name: "0 is never", small: 0, agents: 1, wantState: StateCanary, wantCanary: 1, wantEvents: []string{"transition:unstarted→canary"}},
		{name: "the largest setting", small: MaxSmallGroup, agents: 1000, wantState: StateActive,
			wantSkip: "small group: 1000 agents ≤ small_group 1000", wantEvents: []string{"transition:unstarted→active"}},
		{name: "unreachable agents are present", small: 3, agents: 4, unreachable: 2, wantState: StateCanary, wantCanary: 2,
			wantEvents: []string{"transition:unstarted→canary"}},
		{name: "after_canary approval is still asked", small: 3, agents: 3, approval: ApprovalGates{ApprovalAfterCanary}, wantState: StateCanary,
			wantReason: "starting with 3 agents, no canaries (small group: 3 agents ≤ small_group 3); after_canary approval still asked",
			wantSkip:   "small group: 3 agents ≤ small_group 3", wantEvents: []string{"transition:unstarted→canary", "approval_needed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Groups[0].SmallGroup, cfg.Groups[0].Approval = tt.small, tt.approval
			agents := onVersion(spreadIDs(tt.agents, 0.5), v1)
			for i := range tt.unreachable {
				agents[i].Unreachable = true
			}
			prev := newStatus("staging", DefaultSpec(v1, v2), start.Add(-time.Hour), "new target_version 2.0.0")
			st, evs := Next(Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents), Now: start})
			if st.State != tt.wantState || st.Halted {
				t.Fatalf("state %s halted %v (%s), want %s", st.State, st.Halted, st.HaltReason, tt.wantState)
			}
			if !strings.Contains(st.Reason, tt.wantReason) {
				t.Errorf("reason %q, want it to contain %q", st.Reason, tt.wantReason)
			}
			if st.CanariesSkipped != tt.wantSkip || len(st.Canaries) != tt.wantCanary {
				t.Errorf("canaries_skipped %q with %d canaries, want %q with %d", st.CanariesSkipped, len(st.Canaries), tt.wantSkip, tt.wantCanary)
			}
			if diff := cmp.Diff(tt.wantEvents, kinds(evs)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if st.InitialCount != tt.agents || !st.StartedAt.Equal(start) {
				t.Errorf("initial %d started %v, want %d at %v", st.InitialCount, st.StartedAt, tt.agents, start)
			}
			if st.State == StateActive {
				if st.Progress <= 0 {
					t.Errorf("progress %v: an active group lets agents go", st.Progress)
				}
				// Agents are told to update at once: nobody waits for a
				// canary that does not exist.
				if v, ok := Decide(agents[0].ID, DefaultSpec(v1, v2), st, ModeEnabled); !ok || v != v2 {
					t.Errorf("Decide = %s %v, want %s", v, ok, v2)
				}
			}
			if err := st.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestNextSmallGroupFinishes: a small group already on the target is done
// in the same step it starts, and a restart forgets the skip.
func TestNextSmallGroupFinishes(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:05:00Z")
	cfg := testConfig()
	cfg.Groups[0].SmallGroup = 2
	agents := onVersion(spreadIDs(2, 0.5), v2)
	prev := newStatus("staging", DefaultSpec(v1, v2), start.Add(-time.Hour), "new target_version 2.0.0")
	st, evs := Next(Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents), Now: start})
	if diff := cmp.Diff([]string{"transition:unstarted→active", "transition:active→done"}, kinds(evs)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if st.State != StateDone {
		t.Fatalf("state %s, want done", st.State)
	}
	rb, _, err := Rollback(st, "", start)
	if err != nil {
		t.Fatal(err)
	}
	if rb, _, err = Run(rb, "", start); err != nil {
		t.Fatal(err)
	}
	if rb.CanariesSkipped != "" {
		t.Errorf("restarted group keeps canaries_skipped %q", rb.CanariesSkipped)
	}
}

// lostInput is staging in canary with canaries ids[2], ids[5], ids[8] of
// ten agents on v1 (canary_count 3); ids[8] has been missing since 03:20
// and is gone, it is 03:25 (health_timeout 5m has passed).
func lostInput(t *testing.T) (Input, []AgentID) {
	t.Helper()
	start := mustTime(t, "2024-03-05T03:00:00Z")
	ids := spreadIDs(10, 0.5)
	prev := startedStatus(StateCanary, start, ids[2])
	prev.Canaries = []Canary{{ID: ids[2]}, {ID: ids[5]}, {ID: ids[8], Hostname: "web-8", MissingSince: start.Add(20 * time.Minute)}}
	agents := onVersion(ids, v1)
	agents = append(agents[:8], agents[9:]...)
	return Input{Config: testConfig(), Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents),
		Now: start.Add(25 * time.Minute)}, ids
}

// TestNextLostCanary: a canary that vanished before it reported on the
// target is replaced once it has been missing for health_timeout (where it
// would have halted the group), from the candidates SelectCanaries would
// take, neither a canary now nor one replaced before; a canary that
// reported first halts the group as before, and so does one with no
// candidate left or past the bound of canary_count replacements.
func TestNextLostCanary(t *testing.T) {
	in0, ids := lostInput(t)
	at := in0.Now
	tests := []struct {
		name        string
		edit        func(in *Input)
		wantHalt    string // substring; "" for no halt
		wantCanary  AgentID
		wantEvents  []string
		wantMissing bool // the lost canary is still a canary, missing
	}{
		// Candidates: ids 0,1,3,4,6,7,9 (2 and 5 are canaries, 8 is
		// gone); the median of seven is ids[4].
		{name: "never reported: replaced", wantCanary: ids[4], wantEvents: []string{"canary_replaced"}},
		{name: "missing for less than health_timeout: kept", edit: func(in *Input) { in.Now = at.Add(-time.Second) }, wantMissing: true},
		{name: "unreachable and never reported: replaced", wantCanary: ids[4], wantEvents: []string{"canary_replaced"},
			edit: func(in *Input) {
				in.Agents = onVersion(ids, v1)
				in.Agents[8].Unreachable = true
				in.Counts = CountAgents(in.Agents)
			}},
		{name: "an attempt begun since the start, then unreachable: halts", wantHalt: "not replaced: it had reported on 2.0.0",
			wantEvents: []string{"halt", "alert"}, wantMissing: true,
			edit: func(in *Input) {
				in.Agents = onVersion(ids, v1)
				in.Agents[8].Unreachable, in.Agents[8].StartTime = true, in.Prev.FailuresSince.Add(time.Minute)
				in.Counts = CountAgents(in.Agents)
			}},
		{name: "an attempt from before the group started says nothing: replaced", wantCanary: ids[4], wantEvents: []string{"canary_replaced"},
			edit: func(in *Input) {
				in.Agents = onVersion(ids, v1)
				in.Agents[8].Unreachable, in.Agents[8].StartTime = true, in.Prev.FailuresSince.Add(-time.Hour)
				in.Counts = CountAgents(in.Agents)
			}},
		{name: "vanished mid-update: halts", wantHalt: "canary " + string(ids[8]) + " (web-8) missing since 2024-03-05T03:20:00Z (longer than health_timeout 5m); not replaced: it had reported on 2.0.0 (first seen acting on it at 2024-03-05T03:10:00Z)",
			wantEvents: []string{"halt", "alert"}, wantMissing: true,
			edit: func(in *Input) { in.Prev.Canaries[2].ReportedAt = in.Prev.StartedAt.Add(10 * time.Minute) }},
		{name: "last heartbeat says updating, then unreachable: halts", wantHalt: "not replaced: it had reported on 2.0.0 (first seen acting on it at 2024-03-05T03:25:00Z)",
			wantEvents: []string{"halt", "alert"}, wantMissing: true,
			edit: func(in *Input) {
				in.Agents = onVersion(ids, v1)
				in.Agents[8].Unreachable, in.Agents[8].UpdatingTo, in.Agents[8].StartTime = true, v2, in.Prev.StartedAt.Add(time.Minute)
				in.Counts = CountAgents(in.Agents)
			}},
		{name: "healthy once, then gone: halts", wantHalt: "not replaced: it had reported on 2.0.0",
			wantEvents: []string{"halt", "alert"}, wantMissing: true,
			edit: func(in *Input) { in.Prev.Canaries[2].HealthySince = in.Prev.StartedAt.Add(10 * time.Minute) }},
		{name: "no candidate left: halts", wantHalt: "not replaced: no candidate left", wantEvents: []string{"halt", "alert"}, wantMissing: true,
			edit: func(in *Input) {
				for i := range in.Agents {
					switch in.Agents[i].ID {
					case ids[2], ids[5]:
					case ids[0]:
						in.Agents[i].Rollback, in.Agents[i].RollbackFrom = true, v2
					case ids[1]:
						in.Agents[i].Unreachable = true
					default:
						in.Agents[i].ActiveVersion = v2
					}
				}
				in.Counts = CountAgents(in.Agents)
				in.Config.Groups[0].FailureThreshold = 50 // the canary decides, not the rollback
			}},
		{name: "bound: canary_count replacements already", wantHalt: "not replaced: 3 lost canaries already replaced since the group started, the most canary_count 3 allows",
			wantEvents: []string{"halt", "alert"}, wantMissing: true,
			edit: func(in *Input) {
				for _, i := range []int{0, 1, 3} {
					in.Prev.ReplacedCanaries = append(in.Prev.ReplacedCanaries, ReplacedCanary{ID: idAt(0.001 * float64(i+1)), By: ids[i], At: in.Prev.StartedAt})
				}
			}},
		{name: "one replaced before is not picked again", wantCanary: ids[6], wantEvents: []string{"canary_replaced"},
			edit: func(in *Input) {
				in.Prev.ReplacedCanaries = []ReplacedCanary{{ID: ids[4], By: ids[5], At: in.Prev.StartedAt}}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, _ := lostInput(t)
			if tt.edit != nil {
				tt.edit(&in)
			}
			before := len(in.Prev.ReplacedCanaries)
			st, evs := Next(in)
			if diff := cmp.Diff(tt.wantEvents, kinds(evs)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if st.Halted != (tt.wantHalt != "") || !strings.Contains(st.HaltReason, tt.wantHalt) {
				t.Errorf("halted %v %q, want %q", st.Halted, st.HaltReason, tt.wantHalt)
			}
			if st.State != StateCanary || len(st.Canaries) != 3 {
				t.Fatalf("state %s with %d canaries, want canary with 3", st.State, len(st.Canaries))
			}
			c := st.Canaries[2]
			if tt.wantMissing {
				if c.ID != ids[8] || c.MissingSince.IsZero() || len(st.ReplacedCanaries) != before {
					t.Errorf("canary %+v, %d replaced: want ids[8] still missing, nothing replaced", c, len(st.ReplacedCanaries))
				}
			}
			if tt.wantCanary != "" {
				if diff := cmp.Diff(Canary{ID: tt.wantCanary}, c); diff != "" {
					t.Errorf("replacement (-want +got):\n%s", diff)
				}
				if len(st.ReplacedCanaries) != before+1 || len(evs) == 0 {
					t.Fatalf("%d replaced canaries, %d events: want one more replaced, named by an event", len(st.ReplacedCanaries), len(evs))
				}
				want := ReplacedCanary{ID: ids[8], Hostname: "web-8", MissingSince: in.Prev.Canaries[2].MissingSince, By: tt.wantCanary, At: in.Now}
				if diff := cmp.Diff(want, st.ReplacedCanaries[len(st.ReplacedCanaries)-1]); diff != "" {
					t.Errorf("replaced_canaries (-want +got):\n%s", diff)
				}
				ev := evs[0]
				wantReason := "canary " + string(ids[8]) + " (web-8) missing since 2024-03-05T03:20:00Z (longer than health_timeout 5m) before it reported on 2.0.0: replaced by " + string(tt.wantCanary)
				if !strings.HasPrefix(ev.Reason, wantReason) || len(ev.Agents) != 1 || ev.Agents[0].ID != ids[8] || ev.Agents[0].Hostname != "web-8" {
					t.Errorf("event %q agents %+v, want %q… naming the lost canary", ev.Reason, ev.Agents, wantReason)
				}
				// The new canary is told to update; the lost one is not
				// a canary any more.
				if v, ok := Decide(tt.wantCanary, in.Spec, st, ModeEnabled); !ok || v != v2 {
					t.Errorf("Decide(replacement) = %s %v, want %s", v, ok, v2)
				}
				if st.IsCanary(ids[8]) {
					t.Errorf("the lost canary is still a canary")
				}
			}
			if err := st.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestNextLostCanariesKeepVanishing: a group whose canaries keep
// vanishing before they report replaces at most canary_count of them,
// then halts; its status says which were replaced.
func TestNextLostCanariesKeepVanishing(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	cfg := testConfig()
	cfg.Groups[0].CanaryCount = 2
	agents := onVersion(spreadIDs(20, 0.5), v1)
	st := newStatus("staging", DefaultSpec(v1, v2), start.Add(-time.Hour), "new target_version 2.0.0")
	now := start
	step := func() []Event {
		t.Helper()
		var evs []Event
		st, evs = Next(Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: st, Agents: agents, Counts: CountAgents(agents), Now: now})
		if err := st.Validate(); err != nil {
			t.Fatal(err)
		}
		return evs
	}
	step()
	if st.State != StateCanary || len(st.Canaries) != 2 {
		t.Fatalf("state %s with %d canaries", st.State, len(st.Canaries))
	}
	var lost []AgentID
	for round := range 3 {
		// The first canary's host vanishes.
		gone := st.Canaries[0].ID
		lost = append(lost, gone)
		for i := range agents {
			if agents[i].ID == gone {
				agents = append(agents[:i], agents[i+1:]...)
				break
			}
		}
		now = now.Add(time.Minute)
		if evs := step(); len(evs) != 0 || st.Canaries[0].MissingSince.IsZero() {
			t.Fatalf("round %d: events %v, canary %+v: want it missing, nothing else", round, kinds(evs), st.Canaries[0])
		}
		now = now.Add(DefaultHealthTimeout.D())
		evs := step()
		if round < 2 {
			if diff := cmp.Diff([]string{"canary_replaced"}, kinds(evs)); diff != "" || st.Halted {
				t.Fatalf("round %d: halted %v %q, events (-want +got):\n%s", round, st.Halted, st.HaltReason, diff)
			}
			continue
		}
		if diff := cmp.Diff([]string{"halt", "alert"}, kinds(evs)); diff != "" {
			t.Errorf("round %d: events (-want +got):\n%s", round, diff)
		}
		if !st.Halted || !strings.Contains(st.HaltReason, "not replaced: 2 lost canaries already replaced since the group started, the most canary_count 2 allows") {
			t.Errorf("halted %v %q", st.Halted, st.HaltReason)
		}
	}
	var replaced []AgentID
	for _, r := range st.ReplacedCanaries {
		replaced = append(replaced, r.ID)
	}
	if diff := cmp.Diff(lost[:2], replaced); diff != "" {
		t.Errorf("replaced_canaries (-want +got):\n%s", diff)
	}
}

// TestReplacedCanariesValidate: a status's replaced canaries are checked
// as its canaries are, and read back as written.
func TestReplacedCanariesValidate(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	ids := spreadIDs(12, 0.5)
	st := startedStatus(StateCanary, start, ids[0])
	st.CanariesSkipped = ""
	st.ReplacedCanaries = []ReplacedCanary{{ID: ids[1], Hostname: "web-1", MissingSince: start, By: ids[0], At: start.Add(5 * time.Minute)}}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"replaced_canaries":[{"id":"`+string(ids[1])+`","hostname":"web-1","missing_since":"2024-03-05T03:00:00Z","by":"`+string(ids[0])+`","at":"2024-03-05T03:05:00Z"}]`) {
		t.Errorf("JSON %s", data)
	}
	var back GroupStatus
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(st, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	for name, edit := range map[string]func(*GroupStatus){
		"bad id":        func(s *GroupStatus) { s.ReplacedCanaries[0].ID = "not-an-id" },
		"bad by":        func(s *GroupStatus) { s.ReplacedCanaries[0].By = "" },
		"control bytes": func(s *GroupStatus) { s.ReplacedCanaries[0].Hostname = "web\x1b[2J" },
		"too many": func(s *GroupStatus) {
			for i := range MaxCanaryCount {
				s.ReplacedCanaries = append(s.ReplacedCanaries, ReplacedCanary{ID: ids[i+1], By: ids[0]})
			}
		},
	} {
		bad := st.Clone()
		edit(&bad)
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "replaced_canaries") {
			t.Errorf("%s: Validate = %v, want a replaced_canaries error", name, err)
		}
	}
}

// TestForecastSmallGroup: the forecast runs the same rule: a small group
// has no canary phase (active when it starts, sooner done), says so, and
// one agent more has canaries.
func TestForecastSmallGroup(t *testing.T) {
	now := mustTime(t, "2026-11-23T12:00:00Z")
	run := func(agents int) GroupForecast {
		cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{fgroup("a", []string{"*"}, 12, func(g *GroupConfig) {
			g.CanaryCount, g.SmallGroup = 3, 3
		})}}
		return Simulate(ForecastInput{Config: cfg, Spec: DefaultSpec(v1, v2), Counts: onV1(agents, "a"), Now: now}).Groups[0]
	}
	small, large := run(3), run(4)
	if small.SkipsCanaries != "small group: 3 agents ≤ small_group 3" || small.Canaries != 0 || !small.Active.Equal(small.Start) || !small.Start.Equal(now) {
		t.Errorf("3 agents: skips %q, %d canaries, start %v active %v", small.SkipsCanaries, small.Canaries, small.Start, small.Active)
	}
	if large.SkipsCanaries != "" || large.Canaries != 3 || !large.Active.After(large.Start) {
		t.Errorf("4 agents: skips %q, %d canaries, start %v active %v", large.SkipsCanaries, large.Canaries, large.Start, large.Active)
	}
	if !small.Done.Before(large.Done) || small.Outcome != OutcomeFinishes {
		t.Errorf("small group done %v (%s), not before the canaried one %v", small.Done, small.Outcome, large.Done)
	}
	for _, w := range small.Warnings {
		if strings.Contains(w, "canary_count") {
			t.Errorf("warning %q about canaries it does not have", w)
		}
	}
}
