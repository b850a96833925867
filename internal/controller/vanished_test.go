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

// TestVanishedHostsKeepGroupFromDone is issue 25 point 2 through a real
// controller, real agents and the embedded NATS: 10 agents start a group,
// 2 of them go away for good (their entries expire), the 8 others reach the
// target. The group is not done (20% vanished, more than the default
// vanished_limit 10%): it stays active, says why, publishes a vanished
// event and an alert, and fleetctl status shows how many vanished.
func TestVanishedHostsKeepGroupFromDone(t *testing.T) {
	f := newFixture(t)
	events := f.subscribeEvents()
	cfg := rollout.DefaultConfig()
	g := rollout.DefaultGroup("prod")
	g.CanaryCount, g.MinHealthyTime, g.MaxInFlight = 0, 0, 100
	cfg.Groups = []rollout.GroupConfig{g}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	rc := f.startController("c1")
	var agents []*runningAgent
	for range 10 {
		agents = append(agents, f.startAgent("prod", "1.0.0", false))
	}
	f.waitHeard(rc.c, time.Time{})
	f.step(interval) // every agent established
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true
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
	if st := read(); st.InitialCount != 10 {
		t.Fatalf("prod started with %d agents, want 10", st.InitialCount)
	}
	// Two hosts go away for good before they update.
	f.stopAgent(agents[0])
	f.stopAgent(agents[1])
	var st rollout.GroupStatus
	for elapsed := time.Duration(0); elapsed <= expiry+2*interval; elapsed += reconcileEvery {
		f.advance(reconcileEvery)
		st = read()
		if f.obey(state) > 0 {
			f.waitVersions(rc)
		}
	}
	if st.State != rollout.StateActive || st.Vanished != 2 || !strings.Contains(st.DoneHeld, "2 of the 10 initial agents vanished") {
		t.Fatalf("prod is %s, vanished %d, done_held %q: want active, 2 vanished, held from done", st.State, st.Vanished, st.DoneHeld)
	}
	for _, ra := range f.live {
		if ra.version != "2.0.0" {
			t.Errorf("agent %s still on %s: the test wants every present agent on the target", ra.agent.ID(), ra.version)
		}
	}
	natstest.Eventually(t, waitLong, func() error {
		events.mu.Lock()
		defer events.mu.Unlock()
		var vanished, alert bool
		for _, ev := range events.events {
			vanished = vanished || ev.Group == "prod" && ev.Kind == rollout.EventVanished
			alert = alert || ev.Group == "prod" && ev.Kind == rollout.EventAlert && strings.Contains(ev.Reason, "vanished")
		}
		if !vanished || !alert {
			return fmt.Errorf("vanished event %t, alert event %t", vanished, alert)
		}
		return nil
	})
	if got := events.transitions("prod"); strings.Contains(fmt.Sprint(got), "done") {
		t.Errorf("prod transitions %v: it must not be done", got)
	}
	rep := f.status()
	if len(rep.Groups) != 1 || rep.Groups[0].Rollout == nil || rep.Groups[0].Rollout.Vanished != 2 || rep.Groups[0].Rollout.DoneHeld == "" {
		t.Errorf("fleetctl status does not show 2 vanished and why prod is not done: %+v", rep.Groups)
	}
}
