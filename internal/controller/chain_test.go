package controller_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestRolledBackGroupStopsTheChain is issue 25 point 1 through a real
// controller on a real bus: dev → staging → prod (a plain list, each
// depending on the one before); dev done, staging active; the operator rolls
// dev back with fleetctl; when staging finishes, prod does not start, says
// it waits for dev, and none of its agents is told to update to 2.0.0.
func TestRolledBackGroupStopsTheChain(t *testing.T) {
	f := newFixture(t)
	events := f.subscribeEvents()
	cfg := rollout.DefaultConfig()
	cfg.Groups = nil
	for _, name := range []string{"dev", "staging", "prod"} {
		g := rollout.DefaultGroup(name)
		g.CanaryCount, g.MinHealthyTime, g.MaxInFlight = 0, 0, 100
		cfg.Groups = append(cfg.Groups, g)
	}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	rc := f.startController("c1")
	for _, g := range []string{"dev", "staging", "prod"} {
		f.startAgent(g, "1.0.0", false)
		f.startAgent(g, "1.0.0", false)
	}
	f.waitHeard(rc.c, time.Time{})
	f.step(interval) // every agent established
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true // the test's clock may be outside the start windows
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}

	// round advances one reconcile, reads the state, lets the agents of
	// groups obey, and waits until the controller heard them.
	var state *kv.State
	round := func(groups ...string) {
		t.Helper()
		f.advance(reconcileEvery)
		natstest.Eventually(t, waitLong, func() error {
			var err error
			if state, err = f.fleet.ReadState(f.ctx); err != nil {
				return err
			}
			for _, g := range []string{"dev", "staging", "prod"} {
				if st, ok := state.Groups[g]; !ok || !st.Value.Since.After(time.Time{}) {
					return fmt.Errorf("group %s has no status yet", g)
				}
			}
			return nil
		})
		if f.obeyGroups(state, groups...) > 0 {
			f.waitVersions(rc)
		}
	}
	// dev rolls out and is done, staging starts; staging's agents are slow.
	for i := 0; i < 20 && (state == nil || state.Groups["staging"].Value.State != rollout.StateActive); i++ {
		round("dev")
	}
	if dev, staging := state.Groups["dev"].Value, state.Groups["staging"].Value; dev.State != rollout.StateDone || staging.State != rollout.StateActive {
		t.Fatalf("dev %s, staging %s: want done and active", dev.State, staging.State)
	}

	// The operator rolls dev back.
	var out, errOut bytes.Buffer
	err := fleetctl.RunRollback(f.ctx, &fleetctl.GroupActionOptions{
		Global: &fleetctl.Global{NATSURL: f.srv.URL(), Timeout: waitLong, Out: &out, ErrOut: &errOut, Now: f.clk.Now},
		Group:  "dev", Note: "2.0.0 breaks dev",
	})
	if err != nil {
		t.Fatalf("fleetctl rollback: %v (%s)", err, errOut.String())
	}

	// staging finishes; dev goes back; the controller keeps passing.
	for i := 0; i < 6; i++ {
		round("dev", "staging", "prod")
	}
	if st := state.Groups["staging"].Value; st.State != rollout.StateDone {
		t.Fatalf("staging is %s, want done (it was running when dev was rolled back)", st.State)
	}
	prod := state.Groups["prod"].Value
	if prod.State != rollout.StateUnstarted || !strings.Contains(prod.Waiting, `"dev"`) || !strings.Contains(prod.Waiting, "rolled back") {
		t.Fatalf("prod is %s, waiting %q: want unstarted, waiting for the rolled-back dev", prod.State, prod.Waiting)
	}
	for _, ra := range f.live {
		if ra.group != "prod" {
			continue
		}
		if v, update := rollout.Decide(ra.agent.ID(), state.Spec.Value, prod, prod.Mode); update || v != "1.0.0" || ra.version != "1.0.0" {
			t.Errorf("prod agent %s runs %s and is told %s update=%v: want 1.0.0 and no update", ra.agent.ID(), ra.version, v, update)
		}
	}
	if got := events.transitions("prod"); fmt.Sprint(got) != "[→unstarted]" {
		t.Errorf("prod transitions %v, want only →unstarted", got)
	}
	// fleetctl status says why prod waits.
	rep := f.status()
	for _, g := range rep.Groups {
		if g.Name == "prod" && (g.Rollout == nil || !strings.Contains(g.Rollout.Waiting, `"dev"`)) {
			t.Errorf("fleetctl status: prod's rollout %+v does not say it waits for dev", g.Rollout)
		}
	}
}
