package controller_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

const reconcileEvery = 10 * time.Second // controller.DefaultReconcileInterval

// eventLog collects rollout events from fleet.events.>.
type eventLog struct {
	mu     sync.Mutex
	events []rollout.Event
}

func (f *fixture) subscribeEvents() *eventLog {
	f.t.Helper()
	log := &eventLog{}
	sub, err := f.srv.Conn("events").Subscribe(kv.EventsPrefix+">", func(m *nats.Msg) {
		var ev rollout.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			f.t.Errorf("event is not JSON: %s", m.Data)
			return
		}
		log.mu.Lock()
		log.events = append(log.events, ev)
		log.mu.Unlock()
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return log
}

func (l *eventLog) transitions(group string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.events {
		if ev.Group == group && ev.Kind == rollout.EventTransition {
			out = append(out, string(ev.From)+"→"+string(ev.To))
		}
	}
	return out
}

// obey makes every live agent do what rollout.Decide tells it, as agentd
// will: an agent told to update "installs" the version at once.
func (f *fixture) obey(state *kv.State) (updated int) {
	f.t.Helper()
	return f.obeyGroups(state)
}

// obeyGroups is obey for the agents of the named groups only (none named:
// every group): the others keep what they run (they are slow to update).
func (f *fixture) obeyGroups(state *kv.State, groups ...string) (updated int) {
	f.t.Helper()
	for _, ra := range f.live {
		st, ok := state.Groups[ra.group]
		if !ok || (len(groups) > 0 && !slices.Contains(groups, ra.group)) {
			continue
		}
		v, update := rollout.Decide(ra.agent.ID(), state.Spec.Value, st.Value, st.Value.Mode)
		if !update || v == "" || v == ra.version {
			continue
		}
		if err := ra.agent.SetStatus(install.Status{ActiveVersion: v, StartVersion: ra.version, StartTime: f.clk.Now().UTC()}); err != nil {
			f.t.Fatal(err)
		}
		ra.version = v
		updated++
	}
	return updated
}

func TestLeaderDrivesRolloutInDependencyOrder(t *testing.T) {
	f := newFixture(t)
	events := f.subscribeEvents()
	cfg := rollout.DefaultConfig()
	canary, prod := rollout.DefaultGroup("canary"), rollout.DefaultGroup("prod")
	canary.CanaryCount, prod.CanaryCount = 1, 1
	canary.MinHealthyTime = rollout.Duration(20 * time.Second)
	prod.MinHealthyTime = rollout.Duration(0)
	canary.MaxInFlight, prod.MaxInFlight = 50, 50
	prod.DependsOn = []string{"canary"}
	cfg.Groups = []rollout.GroupConfig{canary, prod}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	c1 := f.startController("c1")
	c2 := f.startController("c2")
	for range 4 {
		f.startAgent("canary", "1.0.0", false)
		f.startAgent("prod", "1.0.0", false)
	}
	f.waitHeard(c1.c, time.Time{})
	f.waitHeard(c2.c, time.Time{})
	f.step(interval) // every agent established

	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true // the test's clock may be outside the start windows
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}

	var state *kv.State
	doneAt := map[string]int{}
	startedAt := map[string]int{}
	for round := 0; round < 40 && len(doneAt) < 2; round++ {
		if round == 6 {
			// The leader goes away mid-rollout; the other controller
			// takes over (at once: a clean stop releases the lease).
			leader := c1
			if st, err := kv.Get[kv.LeaseValue](f.ctx, f.fleet.Stats, kv.KeyLeader); err == nil && st.Value.Holder == "c2" {
				leader = c2
			}
			leader.halt(t)
			f.ctrls = slices.DeleteFunc(f.ctrls, func(rc *runningController) bool { return rc == leader })
		}
		f.advance(reconcileEvery)
		var err error
		natstest.Eventually(t, waitLong, func() error {
			state, err = f.fleet.ReadState(f.ctx)
			if err != nil {
				return err
			}
			for _, g := range []string{"canary", "prod"} {
				if st, ok := state.Groups[g]; !ok || !st.Value.Since.After(time.Time{}) {
					return fmt.Errorf("group %s has no status yet", g)
				}
			}
			return nil
		})
		for _, g := range []string{"canary", "prod"} {
			st := state.Groups[g].Value
			if st.Halted {
				t.Fatalf("group %s halted: %s", g, st.HaltReason)
			}
			if _, ok := startedAt[g]; !ok && st.State != rollout.StateUnstarted {
				startedAt[g] = round
			}
			if _, ok := doneAt[g]; !ok && st.State == rollout.StateDone {
				doneAt[g] = round
			}
		}
		if f.obey(state) > 0 {
			// Wait until every controller has heard the new versions.
			for _, rc := range f.ctrls {
				f.waitVersions(rc)
			}
		}
	}
	if len(doneAt) != 2 {
		t.Fatalf("rollout did not finish in 40 rounds: canary %s, prod %s", state.Groups["canary"].Value.State, state.Groups["prod"].Value.State)
	}
	if startedAt["prod"] < doneAt["canary"] {
		t.Errorf("prod started in round %d, before canary was done in round %d", startedAt["prod"], doneAt["canary"])
	}
	want := []string{"→unstarted", "unstarted→canary", "canary→active", "active→done"}
	natstest.Eventually(t, waitLong, func() error {
		for _, g := range []string{"canary", "prod"} {
			if got := events.transitions(g); fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("group %s transitions %v, want %v", g, got, want)
			}
		}
		return nil
	})
	// The same events, in the same order, are in the audit trail's
	// timeline: FLEET_AUDIT captures fleet.events.>.
	natstest.Eventually(t, waitLong, func() error {
		entries, problems, err := f.fleet.ReadTimeline(f.ctx, time.Time{})
		if err != nil || len(problems) > 0 {
			return fmt.Errorf("timeline: %v %v", err, problems)
		}
		for _, g := range []string{"canary", "prod"} {
			var got []string
			for _, e := range entries {
				if ev := e.Event; ev != nil && ev.Group == g && ev.Kind == rollout.EventTransition {
					got = append(got, string(ev.From)+"→"+string(ev.To))
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("timeline of %s: transitions %v, want %v", g, got, want)
			}
		}
		return nil
	})
	for _, ra := range f.live {
		if ra.version != "2.0.0" {
			t.Errorf("agent %s in %s still on %s", ra.agent.ID(), ra.group, ra.version)
		}
	}
}

// waitVersions waits until rc's inventory shows every live agent's version.
func (f *fixture) waitVersions(rc *runningController) {
	f.t.Helper()
	natstest.Eventually(f.t, waitLong, func() error {
		seen := map[rollout.AgentID]string{}
		for _, a := range rc.c.Inventory().Agents("", f.clk.Now()) {
			seen[a.Heartbeat.AgentID] = a.Heartbeat.ActiveVersion
		}
		for id, ra := range f.live {
			if seen[id] != ra.version {
				return fmt.Errorf("agent %s: controller has %q, agent runs %q", id, seen[id], ra.version)
			}
		}
		return nil
	})
}
