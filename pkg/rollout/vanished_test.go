package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// vanishInput is group staging active on v2, started with initial agents,
// of which present are there now, all on the target, with progress 1.
func vanishInput(t *testing.T, initial, present int, limit, maxInFlight Percent) Input {
	t.Helper()
	start := mustTime(t, "2024-03-05T03:00:00Z")
	cfg := testConfig()
	cfg.Groups[0].VanishedLimit, cfg.Groups[0].MaxInFlight = limit, maxInFlight
	prev := startedStatus(StateActive, start, "")
	prev.InitialCount, prev.Progress = initial, 1
	agents := onVersion(spreadIDs(present, 0.5), v2)
	return Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents),
		Now: start.Add(time.Hour)}
}

// TestNextVanished is issue 25 point 2: a group whose present agents all
// reached the target is done only when the agents that vanished since it
// started are within vanished_limit (default 10%, as Teleport); otherwise
// it stays active, says how many vanished and why it is not done, and
// raises a vanished event with an alert.
func TestNextVanished(t *testing.T) {
	tests := []struct {
		name             string
		initial, present int
		limit, inFlight  Percent
		wantDone         bool
		wantVanished     int
		held             string // substring of DoneHeld when not done
	}{
		{name: "none vanished", initial: 100, present: 100, limit: 10, inFlight: 20, wantDone: true},
		{name: "at the bound: 10 of 100", initial: 100, present: 90, limit: 10, inFlight: 20, wantDone: true, wantVanished: 10},
		{name: "past the bound: 11 of 100", initial: 100, present: 89, limit: 10, inFlight: 20, wantVanished: 11,
			held: "11 of the 100 initial agents vanished since the group started, more than vanished_limit 10% (10)"},
		{name: "the issue: 15 of 100", initial: 100, present: 85, limit: 10, inFlight: 20, wantVanished: 15,
			held: "not done until they return (or fleetctl config set --group staging --vanished-limit 15%, or fleetctl mark-done --group staging)"},
		{name: "small group at the bound: 1 of 10", initial: 10, present: 9, limit: 10, inFlight: 20, wantDone: true, wantVanished: 1},
		{name: "small group past it: 2 of 10", initial: 10, present: 8, limit: 10, inFlight: 20, wantVanished: 2, held: "2 of the 10 initial"},
		{name: "fraction of a host: 1 of 9 is past 10%", initial: 9, present: 8, limit: 10, inFlight: 20, wantVanished: 1, held: "(0.90): not done until they return (or fleetctl config set --group staging --vanished-limit 12%"},
		{name: "0% wants every host back", initial: 100, present: 99, limit: 0, inFlight: 20, wantVanished: 1, held: "vanished_limit 0% (0)"},
		{name: "100% never waits", initial: 10, present: 1, limit: 100, inFlight: 100, wantDone: true, wantVanished: 9},
		{name: "more present than initial", initial: 10, present: 12, limit: 10, inFlight: 20, wantDone: true},
		{name: "zero initial agents", initial: 0, present: 3, limit: 0, inFlight: 20, wantDone: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := vanishInput(t, tt.initial, tt.present, tt.limit, tt.inFlight)
			st, evs := Next(in)
			if st.Vanished != tt.wantVanished {
				t.Errorf("vanished = %d, want %d", st.Vanished, tt.wantVanished)
			}
			if tt.wantDone {
				if st.State != StateDone || st.DoneHeld != "" {
					t.Fatalf("state %s, done_held %q, frozen %q: want done", st.State, st.DoneHeld, st.Frozen)
				}
				if tt.wantVanished > 0 && !strings.Contains(st.Reason, "initial agents vanished") {
					t.Errorf("done reason %q does not say how many vanished", st.Reason)
				}
				return
			}
			if st.State != StateActive || st.Frozen != "" {
				t.Fatalf("state %s, frozen %q: want active, not frozen", st.State, st.Frozen)
			}
			if !strings.Contains(st.DoneHeld, tt.held) {
				t.Errorf("done_held = %q, want it to contain %q", st.DoneHeld, tt.held)
			}
			if diff := cmp.Diff([]string{"vanished", "alert"}, kinds(evs)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			for _, e := range evs {
				if !strings.Contains(e.Reason, st.DoneHeld) {
					t.Errorf("%s event reason %q does not say %q", e.Kind, e.Reason, st.DoneHeld)
				}
			}
			if st.Alerted {
				t.Errorf("alerted set: that is alert_after's and halts' flag")
			}
			// The next step holds still, without a second alert.
			in.Prev, in.Now = st, in.Now.Add(time.Minute)
			again, evs := Next(in)
			if again.State != StateActive || again.DoneHeld != st.DoneHeld || len(evs) != 0 {
				t.Errorf("second step: state %s, done_held %q, events %v: want the same hold and no events", again.State, again.DoneHeld, kinds(evs))
			}
		})
	}
}

// TestNextVanishedReturn: the hold ends when enough agents return (the
// group is done, saying how many are still gone), when agents that
// returned still have to update (not done, but not for vanished agents),
// and when an operator marks the group done.
func TestNextVanishedReturn(t *testing.T) {
	in := vanishInput(t, 100, 85, 10, 20)
	held, _ := Next(in)
	if held.DoneHeld == "" {
		t.Fatal("not held at 15 of 100 vanished")
	}
	t.Run("enough return", func(t *testing.T) {
		back := vanishInput(t, 100, 92, 10, 20)
		back.Prev = held
		st, evs := Next(back)
		if st.State != StateDone || st.DoneHeld != "" || st.Vanished != 8 {
			t.Errorf("state %s, done_held %q, vanished %d: want done, 8 vanished", st.State, st.DoneHeld, st.Vanished)
		}
		if diff := cmp.Diff([]string{"transition:active→done"}, kinds(evs)); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})
	t.Run("returned agents still to update", func(t *testing.T) {
		back := vanishInput(t, 100, 95, 10, 20)
		back.Agents[0].ActiveVersion = v1
		back.Counts = CountAgents(back.Agents)
		back.Prev = held
		st, _ := Next(back)
		if st.State != StateActive || st.DoneHeld != "" {
			t.Errorf("state %s, done_held %q: want active, no vanished hold", st.State, st.DoneHeld)
		}
	})
	t.Run("mark-done", func(t *testing.T) {
		st, _, err := MarkDone(held, "the 15 were decommissioned", in.Now)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != StateDone || st.DoneHeld != "" {
			t.Errorf("state %s, done_held %q: want done, no hold", st.State, st.DoneHeld)
		}
	})
	t.Run("a new start forgets", func(t *testing.T) {
		rb, _, err := Rollback(held, "", in.Now)
		if err != nil {
			t.Fatal(err)
		}
		rerun, _, err := Run(rb, "", in.Now)
		if err != nil {
			t.Fatal(err)
		}
		start := vanishInput(t, 100, 85, 10, 20)
		start.Prev = rerun
		for i := range start.Agents {
			start.Agents[i].ActiveVersion = v1
		}
		start.Counts = CountAgents(start.Agents)
		st, _ := Next(start)
		if st.State != StateCanary || st.Vanished != 0 || st.DoneHeld != "" || st.InitialCount != 85 {
			t.Errorf("state %s, vanished %d, done_held %q, initial %d: want canary from 85, nothing vanished",
				st.State, st.Vanished, st.DoneHeld, st.InitialCount)
		}
	})
}

// TestNextVanishedCanary: the count is kept in the canary phase too, for
// status to show.
func TestNextVanishedCanary(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	ids := spreadIDs(8, 0.5)
	prev := startedStatus(StateCanary, start, ids[0])
	agents := onVersion(ids, v1)
	st, _ := Next(Input{Config: testConfig(), Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents),
		Now: start.Add(time.Minute)})
	if st.Vanished != 2 {
		t.Errorf("vanished = %d, want 2 (10 initial, 8 present)", st.Vanished)
	}
}

func TestConfigVanishedLimit(t *testing.T) {
	var c Config
	if err := c.UnmarshalJSON([]byte(`{"v":1,"groups":[{"name":"a"}]}`)); err != nil {
		t.Fatal(err)
	}
	if got := c.Groups[0].VanishedLimit; got != DefaultVanishedLimit {
		t.Errorf("absent vanished_limit = %v, want %v", got, DefaultVanishedLimit)
	}
	for _, bad := range []string{`"101%"`, `"-1%"`} {
		if err := c.UnmarshalJSON([]byte(`{"v":1,"groups":[{"name":"a","vanished_limit":` + bad + `}]}`)); err != nil {
			t.Fatal(err)
		}
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), `group "a": vanished_limit`) || !strings.Contains(err.Error(), "must be 0%-100%") {
			t.Errorf("vanished_limit %s: Validate = %v, want it refused naming the group and range", bad, err)
		}
	}
}
