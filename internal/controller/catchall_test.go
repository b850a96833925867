package controller_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// catchAllConfig is staging then prod (the catch-all: the last group), one
// canary each, every agent in flight at once, nothing to wait for.
func catchAllConfig() rollout.Config {
	cfg := rollout.DefaultConfig()
	staging, prod := rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")
	for _, g := range []*rollout.GroupConfig{&staging, &prod} {
		g.CanaryCount, g.MaxInFlight, g.MinHealthyTime = 1, 100, 0
	}
	cfg.Groups = []rollout.GroupConfig{staging, prod}
	return cfg
}

// Hosts of groups the config does not name are rolled out with the
// catch-all group: counted in its initial count, told what to do by a copy
// of its status under their own group's key (which their agents read), and
// on the target when it is done. With catch_all "-" the copies are
// withdrawn and the hosts wait again.
func TestCatchAllRollsOutHostsOfUnknownGroups(t *testing.T) {
	f := newFixture(t)
	cfg := catchAllConfig()
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	rc := f.startController("c1")
	f.startAgent("staging", "1.0.0", false)
	f.startAgent("prod", "1.0.0", false)
	for range 2 {
		f.startAgent("lab", "1.0.0", false)
	}
	f.startAgent("edge", "1.0.0", false)
	f.waitHeard(rc.c, time.Time{})
	f.step(interval) // every agent established
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true // the test's clock may be outside the start windows
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}

	var state *kv.State
	for round := 0; round < 30; round++ {
		f.advance(reconcileEvery)
		natstest.Eventually(t, waitLong, func() error {
			var err error
			if state, err = f.fleet.ReadState(f.ctx); err != nil {
				return err
			}
			prod, ok := state.Groups["prod"]
			if !ok || prod.Value.TargetVersion != "2.0.0" {
				return fmt.Errorf("prod has no status for 2.0.0 yet")
			}
			// Every copy is the catch-all's status as stored now.
			for _, g := range []string{"lab", "edge"} {
				e, ok := state.Groups[g]
				if !ok {
					return fmt.Errorf("group %s has no status", g)
				}
				if want := rollout.FollowStatus(prod.Value, g); !sameStatus(want, e.Value) {
					return fmt.Errorf("group %s's status is not the catch-all's copy: %+v", g, e.Value)
				}
			}
			return nil
		})
		if prod := state.Groups["prod"].Value; prod.State != rollout.StateUnstarted && prod.InitialCount != 4 {
			t.Fatalf("prod started with %d agents, want 4 (its own and the 3 caught)", prod.InitialCount)
		}
		if state.Groups["prod"].Value.State == rollout.StateDone {
			break
		}
		if f.obey(state) > 0 { // the caught hosts obey their group's copy
			f.waitVersions(rc)
		}
	}
	prod := state.Groups["prod"].Value
	if prod.State != rollout.StateDone || prod.Halted {
		t.Fatalf("prod is %s (halted %v: %s), want done", prod.State, prod.Halted, prod.HaltReason)
	}
	for _, ra := range f.live {
		if ra.version != "2.0.0" {
			t.Errorf("agent of %s still on %s", ra.group, ra.version)
		}
	}
	if _, ok := state.Groups["staging"]; !ok || state.Groups["staging"].Value.Follows != "" {
		t.Errorf("staging, a group of the config, follows: %+v", state.Groups["staging"])
	}
	rep := f.status()
	var lab *struct{ follows, caughtIn string }
	for _, g := range rep.Groups {
		if g.Name == "lab" && g.Rollout != nil {
			lab = &struct{ follows, caughtIn string }{g.Rollout.Follows, ""}
		}
		if g.Name == "prod" && g.Rollout != nil && g.Rollout.Caught != nil {
			if g.Rollout.Caught.Agents != 3 || !slices.Equal(g.Rollout.Caught.Groups, []string{"edge", "lab"}) {
				t.Errorf("fleetctl status: prod catches %+v, want 3 agents of edge, lab", g.Rollout.Caught)
			}
		}
	}
	if lab == nil || lab.follows != "prod" {
		t.Errorf("fleetctl status: lab follows %+v, want prod", lab)
	}

	// catch_all "-": the copies are withdrawn; the hosts wait as before.
	e, err := kv.Get[rollout.Config](f.ctx, f.fleet.Config, kv.KeyConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.CatchAll = rollout.CatchAllNone
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, e.Revision); err != nil {
		t.Fatal(err)
	}
	f.advance(reconcileEvery)
	natstest.Eventually(t, waitLong, func() error {
		st, err := f.fleet.ReadState(f.ctx)
		if err != nil {
			return err
		}
		for _, g := range []string{"lab", "edge"} {
			if e, ok := st.Groups[g]; ok {
				return fmt.Errorf("group %s still has a status: %+v", g, e.Value)
			}
		}
		return nil
	})
	// Their agents drop the withdrawn copy: no status, they wait.
	natstest.Eventually(t, waitLong, func() error {
		for _, ra := range f.live {
			if ra.group != "lab" && ra.group != "edge" {
				continue
			}
			if p := ra.agent.Plan(); p.StatusRev != 0 || p.Status.Follows != "" {
				return fmt.Errorf("agent of %s keeps the copy (revision %d)", ra.group, p.StatusRev)
			}
		}
		return nil
	})
}

func sameStatus(a, b rollout.GroupStatus) bool {
	ba, _, errA := a.Bounded()
	bb, _, errB := b.Bounded()
	return errA == nil && errB == nil && fmt.Sprintf("%+v", ba) == fmt.Sprintf("%+v", bb)
}

// At most rollout.MaxCaughtGroups groups are followed, one key each; the
// groups past it get no key, are logged once (not every pass) and counted
// in fleetwave_catch_all_unfollowed_groups.
func TestCatchAllFollowsAtMostMaxCaughtGroups(t *testing.T) {
	f := newFixture(t)
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, catchAllConfig(), 0); err != nil {
		t.Fatal(err)
	}
	logs := &natstest.Buffer{}
	rc := f.startControllerLogging("c1", logs)
	base := f.serveMetrics(rc)
	var agents []*testAgent
	n := rollout.MaxCaughtGroups + 3
	for i := range n {
		id, err := rollout.NewAgentID(nil)
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, &testAgent{hb: heartbeat.Heartbeat{AgentID: id, Group: fmt.Sprintf("g%03d", i), Hostname: "h", ActiveVersion: "1.0.0"}})
	}
	f.publishHeartbeats(rc, agents)
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}
	f.advance(interval)
	f.publishHeartbeats(rc, agents) // established now
	for range 3 {
		f.pass()
	}
	var state *kv.State
	natstest.Eventually(t, waitLong, func() error {
		var err error
		if state, err = f.fleet.ReadState(f.ctx); err != nil {
			return err
		}
		follows := 0
		for _, e := range state.Groups {
			if e.Value.Follows == "prod" {
				follows++
			}
		}
		if follows != rollout.MaxCaughtGroups {
			return fmt.Errorf("%d groups follow prod, want %d", follows, rollout.MaxCaughtGroups)
		}
		return nil
	})
	for i := rollout.MaxCaughtGroups; i < n; i++ {
		if e, ok := state.Groups[fmt.Sprintf("g%03d", i)]; ok {
			t.Errorf("group g%03d past the bound has a status: %+v", i, e.Value)
		}
	}
	if prod := state.Groups["prod"].Value; prod.State != rollout.StateUnstarted && prod.InitialCount != rollout.MaxCaughtGroups {
		t.Errorf("prod started with %d agents, want %d", prod.InitialCount, rollout.MaxCaughtGroups)
	}
	f.waitMetrics(base, map[string]float64{
		`fleetwave_catch_all_unfollowed_groups{app="default"}`:      3,
		`fleetwave_group_caught_agents{app="default",group="prod"}`: float64(rollout.MaxCaughtGroups),
		`fleetwave_group_caught_groups{app="default",group="prod"}`: float64(rollout.MaxCaughtGroups),
	})
	if got := strings.Count(logs.String(), "the catch-all group follows at most"); got != 1 {
		t.Errorf("the groups past the bound were logged %d times over 3 passes, want once:\n%s", got, logs.String())
	}
}
