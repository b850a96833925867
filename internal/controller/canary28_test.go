package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestLostCanaryReplaced is issue 28 point 4 through a real controller,
// real agents and the embedded NATS: the group's one canary goes away
// before it reports anything on the target (its agent stops, turns
// unreachable, then expires). Instead of halting the group after
// health_timeout, the controller replaces it with another present agent,
// says so (a canary_replaced event naming the lost host, the status's
// replaced_canaries, fleetctl status), and the group finishes with the
// agents that are left.
func TestLostCanaryReplaced(t *testing.T) {
	f := newFixture(t)
	events := f.subscribeEvents()
	cfg := rollout.DefaultConfig()
	g := rollout.DefaultGroup("prod")
	g.CanaryCount, g.MinHealthyTime, g.MaxInFlight = 1, 0, 100
	g.HealthTimeout = rollout.Duration(time.Minute)
	cfg.Groups = []rollout.GroupConfig{g}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	rc := f.startController("c1")
	byID := map[rollout.AgentID]*runningAgent{}
	for i := range 10 {
		ra := f.startAgentOn("prod", "1.0.0", false, fmt.Sprintf("web-%d", i))
		byID[ra.agent.ID()] = ra
	}
	f.waitHeard(rc.c, time.Time{})
	f.step(interval) // every agent established
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true // the test's clock may be outside the start window
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}
	var state *kv.State
	read := func() rollout.GroupStatus {
		t.Helper()
		natstest.Eventually(t, waitLong, func() error {
			var err error
			if state, err = f.fleet.ReadState(f.ctx); err != nil {
				return err
			}
			if st, ok := state.Groups["prod"]; !ok || st.Value.State == rollout.StateUnstarted {
				return fmt.Errorf("prod has not started")
			}
			return nil
		})
		return state.Groups["prod"].Value
	}
	f.advance(reconcileEvery)
	st := read()
	if st.State != rollout.StateCanary || len(st.Canaries) != 1 {
		t.Fatalf("prod is %s with %d canaries, want canary with 1", st.State, len(st.Canaries))
	}
	lost := st.Canaries[0]
	// The canary's host goes away before it updates (it never obeys).
	f.stopAgent(byID[lost.ID])
	for round := 0; round < 80 && st.State != rollout.StateDone; round++ {
		f.advance(reconcileEvery)
		st = read()
		if st.Halted {
			t.Fatalf("prod halted: %s", st.HaltReason)
		}
		if f.obey(state) > 0 {
			f.waitVersions(rc)
		}
	}
	if st.State != rollout.StateDone {
		t.Fatalf("prod is %s (%s), want done", st.State, st.Reason)
	}
	if len(st.ReplacedCanaries) != 1 || st.ReplacedCanaries[0].ID != lost.ID || st.ReplacedCanaries[0].Hostname != lost.Hostname ||
		st.ReplacedCanaries[0].By == lost.ID || len(st.Canaries) != 1 || st.Canaries[0].ID != st.ReplacedCanaries[0].By {
		t.Errorf("replaced_canaries %+v, canaries %+v: want %s replaced by the canary", st.ReplacedCanaries, st.Canaries, lost.ID)
	}
	for _, ra := range f.live {
		if ra.version != "2.0.0" {
			t.Errorf("agent %s still on %s", ra.agent.ID(), ra.version)
		}
	}
	natstest.Eventually(t, waitLong, func() error {
		events.mu.Lock()
		defer events.mu.Unlock()
		for _, ev := range events.events {
			if ev.Group == "prod" && ev.Kind == rollout.EventCanaryReplaced && len(ev.Agents) == 1 && ev.Agents[0].ID == lost.ID &&
				strings.Contains(ev.Reason, "("+lost.Hostname+") missing since") && strings.Contains(ev.Reason, "before it reported on 2.0.0: replaced by "+string(st.Canaries[0].ID)) {
				return nil
			}
		}
		return fmt.Errorf("no canary_replaced event naming %s (%s)", lost.ID, lost.Hostname)
	})
	want := []string{"→unstarted", "unstarted→canary", "canary→active", "active→done"}
	if got := events.transitions("prod"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("transitions %v, want %v", got, want)
	}
	rep := f.status()
	if len(rep.Groups) != 1 || rep.Groups[0].Rollout == nil || len(rep.Groups[0].Rollout.ReplacedCanaries) != 1 {
		t.Errorf("fleetctl status does not show the replaced canary: %+v", rep.Groups)
	}
}
