package rollout

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func rolledBack(id AgentID, from, to, class string, start time.Time) AgentView {
	return AgentView{ID: id, ActiveVersion: to, Rollback: true, RollbackFrom: from, Error: "health check failed", ErrorClass: class, StartTime: start}
}

func TestQuarantineFrom(t *testing.T) {
	now := mustTime(t, "2024-03-04T10:00:00Z")
	before, after := now.Add(-2*time.Hour), now.Add(-30*time.Minute)
	ids := spreadIDs(30, 0.5)
	lifted := QuarantineList{V: 1, Lifted: []Lift{{Version: v2, At: now.Add(-time.Hour), By: "alice"}}}
	already := QuarantineList{V: 1, Versions: []Quarantine{{Version: v2, Reason: "x", At: before, By: "alice"}}}
	tests := []struct {
		name   string
		agents []AgentView
		after  int
		prev   QuarantineList
		want   []string // version:count
	}{
		{"three in different groups", []AgentView{
			rolledBack(ids[0], v2, v1, FailureRelease, after), rolledBack(ids[1], v2, v1, "", after), rolledBack(ids[2], v2, v1, FailureRelease, after),
		}, 3, QuarantineList{}, []string{"2.0.0:3"}},
		{"two are not enough", []AgentView{
			rolledBack(ids[0], v2, v1, FailureRelease, after), rolledBack(ids[1], v2, v1, FailureRelease, after),
		}, 3, QuarantineList{}, nil},
		{"the same agent twice counts once", []AgentView{
			rolledBack(ids[0], v2, v1, FailureRelease, after), rolledBack(ids[0], v2, v1, FailureRelease, after), rolledBack(ids[1], v2, v1, FailureRelease, after),
		}, 3, QuarantineList{}, nil},
		{"artifact and infrastructure do not count", []AgentView{
			rolledBack(ids[0], v2, v1, FailureRelease, after), rolledBack(ids[1], v2, v1, FailureArtifact, after), rolledBack(ids[2], v2, v1, FailureInfrastructure, after),
		}, 2, QuarantineList{}, nil},
		{"an error without a rollback does not count", []AgentView{
			rolledBack(ids[0], v2, v1, FailureRelease, after), rolledBack(ids[1], v2, v1, FailureRelease, after),
			{ID: ids[2], ActiveVersion: v1, Error: "boom", ErrorClass: FailureRelease},
		}, 3, QuarantineList{}, nil},
		{"an agent back on the version does not count", []AgentView{
			rolledBack(ids[0], v2, v1, FailureRelease, after), rolledBack(ids[1], v2, v1, FailureRelease, after), rolledBack(ids[2], v2, v2, FailureRelease, after),
		}, 3, QuarantineList{}, nil},
		{"unreachable agents count", []AgentView{
			rolledBack(ids[0], v2, v1, FailureRelease, after), rolledBack(ids[1], v2, v1, FailureRelease, after),
			func() AgentView {
				a := rolledBack(ids[2], v2, v1, FailureRelease, after)
				a.Unreachable = true
				return a
			}(),
		}, 3, QuarantineList{}, []string{"2.0.0:3"}},
		{"versions counted apart", []AgentView{
			rolledBack(ids[0], v2, v1, FailureRelease, after), rolledBack(ids[1], "3.0.0", v1, FailureRelease, after),
			rolledBack(ids[2], v2, v1, FailureRelease, after), rolledBack(ids[3], "3.0.0", v1, FailureRelease, after),
		}, 2, QuarantineList{}, []string{"2.0.0:2", "3.0.0:2"}},
		{"quarantine_after 1", []AgentView{rolledBack(ids[0], v2, v1, FailureRelease, after)}, 1, QuarantineList{}, []string{"2.0.0:1"}},
		{"quarantine_after 0 is off", []AgentView{
			rolledBack(ids[0], v2, v1, FailureRelease, after), rolledBack(ids[1], v2, v1, FailureRelease, after), rolledBack(ids[2], v2, v1, FailureRelease, after),
		}, 0, QuarantineList{}, nil},
		{"already quarantined", []AgentView{
			rolledBack(ids[0], v2, v1, FailureRelease, after), rolledBack(ids[1], v2, v1, FailureRelease, after), rolledBack(ids[2], v2, v1, FailureRelease, after),
		}, 3, already, nil},
		{"after a lift only newer attempts count", []AgentView{
			rolledBack(ids[0], v2, v1, FailureRelease, after), rolledBack(ids[1], v2, v1, FailureRelease, after),
			rolledBack(ids[2], v2, v1, FailureRelease, before), rolledBack(ids[3], v2, v1, FailureRelease, time.Time{}),
		}, 3, lifted, nil},
		{"after a lift three new ones quarantine again", []AgentView{
			rolledBack(ids[0], v2, v1, FailureRelease, after), rolledBack(ids[1], v2, v1, FailureRelease, after), rolledBack(ids[2], v2, v1, FailureRelease, after),
		}, 3, lifted, []string{"2.0.0:3"}},
		{"an invalid version is ignored", []AgentView{
			rolledBack(ids[0], "x", v1, FailureRelease, after), rolledBack(ids[1], "x", v1, FailureRelease, after),
		}, 2, QuarantineList{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := QuarantineFrom(tt.agents, tt.after, tt.prev, now)
			var sum []string
			for _, q := range got {
				sum = append(sum, q.Version+":"+string(rune('0'+q.AgentCount)))
				if q.At != now || q.By != QuarantineByController {
					t.Errorf("%s: at %v by %q", q.Version, q.At, q.By)
				}
				if err := q.validate(); err != nil {
					t.Errorf("%s: not valid: %v", q.Version, err)
				}
			}
			if diff := cmp.Diff(tt.want, sum); diff != "" {
				t.Errorf("quarantined (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQuarantineFromCapsAgentsAndNamesThem(t *testing.T) {
	now := mustTime(t, "2024-03-04T10:00:00Z")
	ids := spreadIDs(25, 0.5)
	var agents []AgentView
	for i := len(ids) - 1; i >= 0; i-- {
		agents = append(agents, rolledBack(ids[i], v2, v1, FailureRelease, now))
	}
	got := QuarantineFrom(agents, 3, QuarantineList{}, now)
	if len(got) != 1 {
		t.Fatalf("got %d quarantines", len(got))
	}
	q := got[0]
	if q.AgentCount != 25 || len(q.Agents) != MaxQuarantineAgents || q.Agents[0] != ids[0] || q.Agents[19] != ids[19] {
		t.Errorf("count %d, agents %v", q.AgentCount, q.Agents)
	}
	want := "25 agents rolled back from 2.0.0 (release failures, quarantine_after 3): " +
		strings.Join([]string{string(ids[0]), string(ids[1]), string(ids[2]), string(ids[3]), string(ids[4])}, ", ") + " and 20 more"
	if q.Reason != want {
		t.Errorf("reason\n got %q\nwant %q", q.Reason, want)
	}
	hr := q.HaltReason("prod")
	for _, s := range []string{"quarantined: 25 agents rolled back from 2.0.0 (release failures", "fleetctl quarantine rm 2.0.0", "fleetctl reset --group prod"} {
		if !strings.Contains(hr, s) {
			t.Errorf("halt reason %q lacks %q", hr, s)
		}
	}
	// A version of the longest allowed length still gives a valid entry.
	long := "1.0.0-" + strings.Repeat("a", MaxVersionLen-6)
	var longAgents []AgentView
	for _, id := range ids[:5] {
		longAgents = append(longAgents, rolledBack(id, long, v1, FailureRelease, now))
	}
	if lq := QuarantineFrom(longAgents, 3, QuarantineList{}, now); len(lq) != 1 || lq[0].validate() != nil {
		t.Errorf("long version: %+v", lq)
	} else if _, err := (QuarantineList{}).Add(lq[0]); err != nil {
		t.Errorf("long version not added: %v", err)
	}
	// Agents that name sites: the reason says where the rollbacks were.
	sited := []AgentView{rolledBack(ids[0], v2, v1, FailureRelease, now), rolledBack(ids[1], v2, v1, FailureRelease, now), rolledBack(ids[2], v2, v1, FailureRelease, now)}
	sited[0].Site, sited[1].Site = "edge-a", "edge-a"
	if sq := QuarantineFrom(sited, 3, QuarantineList{}, now); len(sq) != 1 ||
		!strings.HasPrefix(sq[0].Reason, "3 agents rolled back from 2.0.0 (release failures, quarantine_after 3; sites: edge-a 2, no site 1): ") {
		t.Errorf("sites: %+v", sq)
	}
	op := Quarantine{Version: v2, Reason: "CVE-2024-1", At: now, By: "alice"}
	if hr := op.HaltReason("prod"); !strings.HasPrefix(hr, "quarantined: by alice: CVE-2024-1;") {
		t.Errorf("operator halt reason %q", hr)
	}
}

func TestQuarantineListAddLift(t *testing.T) {
	now := mustTime(t, "2024-03-04T10:00:00Z")
	q := Quarantine{Version: v2, Reason: "bad", At: now, By: "alice"}
	l, err := QuarantineList{}.Add(q)
	if err != nil {
		t.Fatal(err)
	}
	if l.V != 1 || !l.Quarantined(v2) || l.Quarantined(v1) {
		t.Fatalf("after add: %+v", l)
	}
	if _, err := l.Add(q); !errors.Is(err, ErrBadQuarantine) || !strings.Contains(err.Error(), "already quarantined") {
		t.Errorf("second add: %v", err)
	}
	if _, err := l.Add(Quarantine{Version: "nope", Reason: "x", At: now, By: "a"}); !errors.Is(err, ErrBadQuarantine) {
		t.Errorf("bad version added: %v", err)
	}
	if _, err := l.Add(Quarantine{Version: "3.0.0", At: now, By: "a"}); err == nil {
		t.Errorf("add without a reason accepted")
	}
	lifted, old, err := l.Lift(v2, "bob", "fixed upstream", now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if lifted.Quarantined(v2) || old.Version != v2 || len(lifted.Lifted) != 1 || lifted.liftedAt(v2) != now.Add(time.Hour) {
		t.Errorf("after lift: %+v", lifted)
	}
	if !l.Quarantined(v2) {
		t.Errorf("Lift changed the list it was called on")
	}
	if err := lifted.Validate(); err != nil {
		t.Errorf("lifted list not valid: %v", err)
	}
	if _, _, err := lifted.Lift(v2, "bob", "", now); !errors.Is(err, ErrBadQuarantine) {
		t.Errorf("lift of a version not quarantined: %v", err)
	}
	again, err := lifted.Add(q)
	if err != nil || len(again.Lifted) != 0 || !again.Quarantined(v2) {
		t.Errorf("re-add after lift: %+v %v", again, err)
	}
	full := QuarantineList{V: 1}
	for i := range MaxQuarantined {
		full.Versions = append(full.Versions, Quarantine{Version: "1.0." + itoa(i), Reason: "r", At: now, By: "a"})
	}
	if _, err := full.Add(Quarantine{Version: "9.9.9", Reason: "r", At: now, By: "a"}); err == nil || !strings.Contains(err.Error(), "lift one first") {
		t.Errorf("add to a full list: %v", err)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func TestQuarantineListValidate(t *testing.T) {
	now := mustTime(t, "2024-03-04T10:00:00Z")
	good := Quarantine{Version: v2, Reason: "bad", At: now, By: "controller", Agents: []AgentID{idAt(0.5)}, AgentCount: 3}
	tests := []struct {
		name string
		l    QuarantineList
		want string // "" valid
	}{
		{"empty", QuarantineList{V: 1}, ""},
		{"one", QuarantineList{V: 1, Versions: []Quarantine{good}}, ""},
		{"no v", QuarantineList{Versions: []Quarantine{good}}, "v 0"},
		{"twice", QuarantineList{V: 1, Versions: []Quarantine{good, good}}, "listed twice"},
		{"bad version", QuarantineList{V: 1, Versions: []Quarantine{{Version: "v2", Reason: "r", At: now, By: "a"}}}, "version"},
		{"no reason", QuarantineList{V: 1, Versions: []Quarantine{{Version: v2, At: now, By: "a"}}}, "reason"},
		{"no by", QuarantineList{V: 1, Versions: []Quarantine{{Version: v2, Reason: "r", At: now}}}, "by"},
		{"no at", QuarantineList{V: 1, Versions: []Quarantine{{Version: v2, Reason: "r", By: "a"}}}, "no at"},
		{"bad agent", QuarantineList{V: 1, Versions: []Quarantine{{Version: v2, Reason: "r", At: now, By: "a", Agents: []AgentID{"x"}, AgentCount: 1}}}, "agents[0]"},
		{"count below list", QuarantineList{V: 1, Versions: []Quarantine{{Version: v2, Reason: "r", At: now, By: "a", Agents: []AgentID{idAt(0.1)}}}}, "agent_count"},
		{"bad lift", QuarantineList{V: 1, Lifted: []Lift{{Version: v2}}}, "lifted[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.l.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !errors.Is(err, ErrBadQuarantine) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// A group whose target is quarantined halts, in unstarted, canary or
// active, naming the version, the agents and the rule, and rejects the
// target so Decide answers the hold version to new and unstarted hosts.
func TestNextQuarantine(t *testing.T) {
	now := mustTime(t, "2024-03-05T03:10:00Z") // in the window
	agents := onVersion(spreadIDs(10, 0.5), v1)
	q := QuarantineFrom([]AgentView{
		rolledBack(idAt(0.11), v2, v1, FailureRelease, now), rolledBack(idAt(0.21), v2, v1, FailureRelease, now), rolledBack(idAt(0.31), v2, v1, "", now),
	}, 3, QuarantineList{}, now)
	list, err := QuarantineList{}.Add(q[0])
	if err != nil {
		t.Fatal(err)
	}
	started := now.Add(-time.Hour)
	base := GroupStatus{V: 1, Group: "staging", TargetVersion: v2, StartVersion: v1, HoldVersion: "1.5.0", Mode: ModeEnabled,
		InitialCount: 10, StartedAt: started, FailuresSince: started, Since: started}
	with := func(s State, mod func(*GroupStatus)) GroupStatus {
		st := base.Clone()
		st.State = s
		if mod != nil {
			mod(&st)
		}
		return st
	}
	tests := []struct {
		name       string
		prev       GroupStatus
		spec       Spec
		quarantine QuarantineList
		mode       Mode
		wantHalt   bool
		wantState  State
		wantEvents []string
	}{
		{"unstarted halts and does not start", with(StateUnstarted, nil), DefaultSpec(v1, v2), list, ModeEnabled, true, StateUnstarted, []string{"halt", "alert"}},
		{"canary halts", with(StateCanary, func(s *GroupStatus) { s.Canaries = []Canary{{ID: agents[0].ID}} }), DefaultSpec(v1, v2), list, ModeEnabled, true, StateCanary, []string{"halt", "alert"}},
		{"active halts", with(StateActive, func(s *GroupStatus) { s.Progress = 0.3 }), DefaultSpec(v1, v2), list, ModeEnabled, true, StateActive, []string{"halt", "alert"}},
		{"paused halts too", with(StateActive, nil), DefaultSpec(v1, v2), list, ModePaused, true, StateActive, []string{"halt", "alert"}},
		{"done is left alone", with(StateDone, func(s *GroupStatus) { s.Progress = 1 }), DefaultSpec(v1, v2), list, ModeEnabled, false, StateDone, nil},
		{"rolledback is left alone", with(StateRolledBack, nil), DefaultSpec(v1, v2), list, ModeEnabled, false, StateRolledBack, nil},
		{"already halted: no second halt", with(StateActive, func(s *GroupStatus) { s.Halted, s.HaltReason = true, "earlier" }), DefaultSpec(v1, v2), list, ModeEnabled, true, StateActive, nil},
		{"another target moves on", with(StateUnstarted, func(s *GroupStatus) { s.TargetVersion = "3.0.0"; s.RunRequested = true }), DefaultSpec(v1, "3.0.0"), list, ModeEnabled, false, StateCanary, []string{"transition:unstarted→canary"}},
		{"a new target resets the halt", with(StateActive, func(s *GroupStatus) { s.Halted = true }), DefaultSpec(v1, "3.0.0"), list, ModeEnabled, false, StateCanary, []string{"transition:active→unstarted", "transition:unstarted→canary"}},
		{"no quarantine: it starts", with(StateUnstarted, func(s *GroupStatus) { s.RunRequested = true }), DefaultSpec(v1, v2), QuarantineList{}, ModeEnabled, false, StateCanary, []string{"transition:unstarted→canary"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Mode = tt.mode
			st, evs := Next(Input{Config: cfg, Group: "staging", Spec: tt.spec, Prev: tt.prev, Counts: CountAgents(agents),
				Agents: agents, Now: now, Quarantine: tt.quarantine})
			if st.Halted != tt.wantHalt || st.State != tt.wantState {
				t.Fatalf("halted %t in %s (%s), want halted %t in %s", st.Halted, st.State, st.HaltReason, tt.wantHalt, tt.wantState)
			}
			if diff := cmp.Diff(tt.wantEvents, kinds(evs)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if !tt.wantHalt || tt.prev.Halted {
				return
			}
			for _, s := range []string{"quarantined: 3 agents rolled back from 2.0.0 (release failures", string(idAt(0.11)), string(idAt(0.31)), "fleetctl reset --group staging"} {
				if !strings.Contains(st.HaltReason, s) {
					t.Errorf("halt reason %q lacks %q", st.HaltReason, s)
				}
			}
			if !st.Rejected(v2) {
				t.Errorf("halted group does not reject %s: %v", v2, st.RejectedVersions)
			}
			// What agents are told: the hold version, never the
			// quarantined target; a new host installs the hold version.
			for _, id := range []AgentID{agents[0].ID, idAt(0.01), idAt(0.99)} {
				v, update := Decide(id, tt.spec, st, ModeEnabled)
				if v != "1.5.0" || update {
					t.Errorf("Decide(%s) = %s, %t; want 1.5.0, false", id, v, update)
				}
				if Act("", v, update) != true || Act(v1, v, update) {
					t.Errorf("a new host must install %s, a host on %s must wait", v, v1)
				}
			}
		})
	}
}

// An operator's reset or run lifts a quarantine halt of an unstarted group;
// Next halts it again while the version is still quarantined.
func TestResetAndRunClearAQuarantineHalt(t *testing.T) {
	now := mustTime(t, "2024-03-05T03:10:00Z")
	st := GroupStatus{V: 1, Group: "staging", State: StateUnstarted, TargetVersion: v2, StartVersion: v1, Halted: true, HaltReason: "quarantined: x", HaltedAt: now}
	for name, act := range map[string]func(GroupStatus, string, time.Time) (GroupStatus, Event, error){"reset": Reset, "run": Run} {
		got, ev, err := act(st, "lifted", now)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Halted || got.HaltReason != "" || got.State != StateUnstarted || ev.Kind != EventOperator {
			t.Errorf("%s: %+v, event %+v", name, got, ev)
		}
	}
	if _, _, err := Reset(GroupStatus{V: 1, Group: "staging", State: StateUnstarted}, "", now); !errors.Is(err, ErrBadAction) {
		t.Errorf("reset of an unstarted group that is not halted: %v", err)
	}
}

func TestConfigQuarantineAfter(t *testing.T) {
	if c := DefaultConfig(); c.QuarantineAfter != DefaultQuarantineAfter {
		t.Errorf("default %d", c.QuarantineAfter)
	}
	for _, tt := range []struct {
		json string
		want int
		err  string
	}{
		{`{"v":1}`, DefaultQuarantineAfter, ""},
		{`{"v":1,"quarantine_after":0}`, 0, ""},
		{`{"v":1,"quarantine_after":1000}`, 1000, ""},
		{`{"v":1,"quarantine_after":1001}`, 0, "quarantine_after 1001 must be 0 (off) or 1-1000"},
		{`{"v":1,"quarantine_after":-1}`, 0, "quarantine_after -1"},
		{`{"v":1,"quarantine_after":"3"}`, 0, "quarantine_after"},
	} {
		var c Config
		err := json.Unmarshal([]byte(tt.json), &c)
		if err == nil {
			err = c.Validate()
		}
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.json, err)
		case tt.err == "" && c.QuarantineAfter != tt.want:
			t.Errorf("%s: quarantine_after %d, want %d", tt.json, c.QuarantineAfter, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: error %v, want %q", tt.json, err, tt.err)
		}
	}
}
