package controller_test

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// tenAgents are 10 agents of group blue on 1.0.0 whose ids sit at the
// fractions 0.05, 0.15, …, 0.95: agent i is let update once progress
// passes (i+0.5)/10.
func tenAgents() []*testAgent {
	out := make([]*testAgent, 10)
	for i := range out {
		frac := uint32((float64(i) + 0.5) / 10 * (1 << 32))
		id := rollout.AgentID(fmt.Sprintf("%08x-0000-4000-8000-%012x", frac, i+1))
		out[i] = &testAgent{hb: heartbeat.Heartbeat{AgentID: id, Group: "blue", Hostname: fmt.Sprintf("blue-%d", i), ActiveVersion: "1.0.0"}}
	}
	return out
}

// blueConfig is one group, blue, with no canaries, a window of 2 agents of
// 10 and a failure threshold that tolerates 5, edited by edit.
func (f *fixture) blueConfig(edit func(*rollout.GroupConfig)) {
	f.t.Helper()
	cfg := rollout.DefaultConfig()
	g := rollout.DefaultGroup("blue")
	g.CanaryCount, g.MaxInFlight, g.FailureThreshold, g.DependsOn = 0, 20, 50, []string{}
	if edit != nil {
		edit(&g)
	}
	cfg.Groups = []rollout.GroupConfig{g}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		f.t.Fatal(err)
	}
}

// passWith publishes the heartbeats of live at the current time, then runs
// one rollout pass, waits for it to finish and returns blue's status.
func (f *fixture) passWith(rc *runningController, live []*testAgent) rollout.GroupStatus {
	f.t.Helper()
	f.publishHeartbeats(rc, live)
	f.pass()
	f.settle()
	st, err := kv.Get[rollout.GroupStatus](f.ctx, f.fleet.Plan, kv.GroupKey("blue"))
	if err != nil {
		f.t.Fatal(err)
	}
	return st.Value
}

// startBlue establishes the agents, plans 1.0.0 → 2.0.0 and runs passes
// until blue is active, returning its status.
func (f *fixture) startBlue(rc *runningController, agents []*testAgent) rollout.GroupStatus {
	f.t.Helper()
	f.publishHeartbeats(rc, agents)
	f.advance(interval) // established
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true // the test's clock may be outside the start windows
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		f.t.Fatal(err)
	}
	for range 5 {
		if st := f.passWith(rc, agents); st.State == rollout.StateActive {
			return st
		}
	}
	f.t.Fatal("blue did not become active")
	return rollout.GroupStatus{}
}

// told lists which of agents Decide tells to update under st.
func told(st rollout.GroupStatus, agents []*testAgent) []int {
	var out []int
	for i, a := range agents {
		if _, update := rollout.Decide(a.hb.AgentID, rollout.DefaultSpec("1.0.0", "2.0.0"), st, rollout.ModeEnabled); update {
			out = append(out, i)
		}
	}
	return out
}

// TestUnreachableAgentsFreeTheWindow is issue 15's measurement: 4 of 10
// agents cut off, among them the 2 the window let update (they update
// through /v1/find while cut, so their last heartbeat still says 1.0.0,
// updating). Once they have been silent for three heartbeat intervals they
// are unreachable: out of the window, so the connected agents next in line
// update; fleetctl status and the metrics count them unreachable (not
// before: two intervals of silence is not enough). When the two come back
// on 2.0.0 they count from their new heartbeat.
func TestUnreachableAgentsFreeTheWindow(t *testing.T) {
	f := newFixture(t)
	f.blueConfig(nil)
	rc := f.startController("c1")
	srv := httptest.NewServer(rc.c.HTTPHandler(nil))
	t.Cleanup(srv.Close)
	agents := tenAgents()

	st := f.startBlue(rc, agents)
	if got := told(st, agents); fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("agents told to update at progress %v: %v, want [0 1]", st.Progress, got)
	}
	// 0 and 1 start updating, then 0, 1, 8 and 9 are cut off.
	for _, i := range []int{0, 1} {
		agents[i].hb.UpdatingTo, agents[i].hb.StartVersion, agents[i].hb.StartTime = "2.0.0", "1.0.0", f.clk.Now().UTC()
	}
	f.publishHeartbeats(rc, agents[:2])
	cutAt := f.clk.Now()
	live := agents[2:8]

	// Seven passes: 70s of silence, more than two intervals, not three.
	for range 7 {
		st = f.passWith(rc, live)
	}
	if f.clk.Now().Sub(cutAt) > rollout.UnreachableAfter(interval) {
		t.Fatalf("test too slow for its clock: %v of silence already", f.clk.Now().Sub(cutAt))
	}
	if got := told(st, agents); fmt.Sprint(got) != "[0 1]" {
		t.Errorf("after %v of silence, agents told to update: %v, want still [0 1] (the window is theirs)", f.clk.Now().Sub(cutAt), got)
	}
	if n := f.unreachableMetric(srv.URL); n != 0 {
		t.Errorf("after %v of silence, fleetwave_agents unreachable = %v, want 0 (three intervals make it)", f.clk.Now().Sub(cutAt), n)
	}

	// Three more: 100s, past three intervals and short of expiry.
	for range 3 {
		st = f.passWith(rc, live)
	}
	if got := told(st, agents); fmt.Sprint(got) != "[0 1 2 3]" {
		t.Errorf("with 0, 1, 8, 9 unreachable, agents told to update: %v (progress %v), want [0 1 2 3]", got, st.Progress)
	}
	if st.FailedCount != 0 || st.Frozen != "" || st.Halted {
		t.Errorf("failed %d, frozen %q, halted %v; want none", st.FailedCount, st.Frozen, st.Halted)
	}
	if n := f.unreachableMetric(srv.URL); n != 4 {
		t.Errorf("fleetwave_agents unreachable = %v, want 4", n)
	}
	rep := f.statusAtNow() // the stats loop ran at the pass's time too
	if len(rep.Groups) != 1 || rep.Groups[0].Rollout == nil {
		t.Fatalf("status groups %+v, want blue with its rollout", rep.Groups)
	}
	if split := rep.Groups[0].Rollout.Agents; split.Unreachable != 4 || split.Updating != 0 || split.Waiting != 6 {
		t.Errorf("status split %+v, want 4 unreachable, 0 updating, 6 waiting", split)
	}

	// 0 and 1 come back on 2.0.0 (updated through /v1/find); 8 and 9,
	// silent for the expiry by then, are gone.
	for _, i := range []int{0, 1} {
		agents[i].hb.ActiveVersion, agents[i].hb.UpdatingTo = "2.0.0", ""
	}
	live = agents[:8]
	st = f.passWith(rc, live)
	f.advance(statsEvery)
	rep = f.statusAtNow()
	if g := rep.Groups[0]; g.Agents != 8 || g.Rollout.Agents.Updated != 2 || g.Rollout.Agents.Unreachable != 0 {
		t.Errorf("after 0 and 1 came back on 2.0.0: %d agents, split %+v; want 8, 2 updated, none unreachable", g.Agents, g.Rollout.Agents)
	}
	if st.Progress < 0.4 {
		t.Errorf("progress %v went back", st.Progress)
	}
}

// TestStuckUpdateTimesOut: two agents start the update the window let them
// make and stay in it (stuck in their health wait, heartbeating "updating
// to 2.0.0" forever). Within update_timeout they hold the window; at it they
// are timed out: counted failed (the threshold tolerates them here), out of
// the window so that the next two update, and fleetctl status says so.
func TestStuckUpdateTimesOut(t *testing.T) {
	f := newFixture(t)
	f.blueConfig(func(g *rollout.GroupConfig) {
		g.HealthTimeout, g.MinHealthyTime, g.UpdateTimeout = rollout.Duration(10*time.Second), 0, rollout.Duration(time.Minute)
	})
	rc := f.startController("c1")
	agents := tenAgents()
	st := f.startBlue(rc, agents)
	if got := told(st, agents); fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("agents told to update at progress %v: %v, want [0 1]", st.Progress, got)
	}
	started := f.clk.Now().UTC()
	for _, i := range []int{0, 1} {
		agents[i].hb.UpdatingTo, agents[i].hb.StartVersion, agents[i].hb.StartTime = "2.0.0", "1.0.0", started
	}
	// Passes every 10s up to 50s after the start: within update_timeout.
	for f.clk.Now().Add(reconcileEvery).Sub(started) < time.Minute {
		st = f.passWith(rc, agents)
		if st.FailedCount != 0 || st.TimedOutCount != 0 || fmt.Sprint(told(st, agents)) != "[0 1]" {
			t.Fatalf("%v after the start: failed %d, timed out %d, told %v; want 0, 0, [0 1]",
				f.clk.Now().Sub(started), st.FailedCount, st.TimedOutCount, told(st, agents))
		}
	}
	st = f.passWith(rc, agents) // update_timeout reached
	if st.FailedCount != 2 || st.TimedOutCount != 2 || st.Halted {
		t.Errorf("%v after the start: failed %d, timed out %d, halted %v; want 2, 2, false",
			f.clk.Now().Sub(started), st.FailedCount, st.TimedOutCount, st.Halted)
	}
	if got := told(st, agents); fmt.Sprint(got) != "[0 1 2 3]" {
		t.Errorf("agents told to update: %v (progress %v), want [0 1 2 3]: the timed out ones freed the window", got, st.Progress)
	}
	rep := f.statusAtNow()
	if len(rep.Groups) != 1 || rep.Groups[0].Rollout == nil {
		t.Fatalf("status groups %+v, want blue with its rollout", rep.Groups)
	}
	r := rep.Groups[0].Rollout
	if r.UpdatesTimedOut != 2 || r.FailedCount != 2 || r.Agents.TimedOut != 2 || r.Agents.Updating != 2 {
		t.Errorf("status: updates_timed_out %d, failed_count %d, split %+v; want 2, 2, 2 of 2 updating timed out",
			r.UpdatesTimedOut, r.FailedCount, r.Agents)
	}
}

// unreachableMetric is the sum of fleetwave_agents{app="default",state="unreachable"}
// over blue's versions.
func (f *fixture) unreachableMetric(base string) float64 {
	f.t.Helper()
	samples, err := scrape(f.t, base+controller.PathMetrics)
	if err != nil {
		f.t.Fatal(err)
	}
	var n float64
	for _, v := range []string{"1.0.0", "2.0.0"} {
		n += samples[fmt.Sprintf(`fleetwave_agents{app="default",group="blue",state="unreachable",version=%q}`, v)]
	}
	return n
}
