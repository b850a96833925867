package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// A JetStream API response as stored when a request's reply subject is a
// bucket key: no "v", and encoding/json decodes it into a zero value.
const streamInfoResponse = `{"type":"io.nats.jetstream.api.v1.stream_info_response","total":0,"offset":0,"limit":0,` +
	`"config":{"name":"KV_fleet_plan","subjects":["$KV.fleet_plan.>"]},"created":"2026-11-23T12:00:00Z","state":{"messages":3}}`

// startControllerLogging is startController with the controller's log
// written to logs.
func (f *fixture) startControllerLogging(id string, logs *natstest.Buffer) *runningController {
	f.t.Helper()
	return f.startControllerWith(id, slog.New(slog.NewTextHandler(logs, nil)))
}

// pass advances the clock by one rollout interval and waits until the
// leader has run a pass at the new time (it renews its lease first thing).
func (f *fixture) pass() {
	f.t.Helper()
	f.advance(reconcileEvery)
	now := f.clk.Now().UTC()
	natstest.Eventually(f.t, waitLong, func() error {
		l, err := kv.Get[kv.LeaseValue](f.ctx, f.fleet.Stats, kv.KeyLeader)
		if err != nil {
			return err
		}
		if !l.Value.Renewed.Equal(now) {
			return fmt.Errorf("lease renewed at %v, want %v", l.Value.Renewed, now)
		}
		return nil
	})
}

// settle waits until every loop has finished its work for the current
// clock reading: each re-arms its timer only when done.
func (f *fixture) settle() {
	f.t.Helper()
	if want := f.loopTimers(); !f.clk.WaitPending(want, timeout(waitLong)) {
		f.t.Fatalf("loops did not finish: %d timers pending, want %d", f.clk.Pending(), want)
	}
}

// independentGroups is a config of groups that depend on nobody, each with
// one canary and nothing to wait for.
func independentGroups(names ...string) rollout.Config {
	cfg := rollout.DefaultConfig()
	cfg.Groups = nil
	for _, n := range names {
		g := rollout.DefaultGroup(n)
		g.CanaryCount, g.MinHealthyTime, g.MaxInFlight, g.DependsOn = 1, 0, 50, []string{}
		cfg.Groups = append(cfg.Groups, g)
	}
	return cfg
}

// TestControllerSkipsBadGroupAndStats: with one group's status replaced by
// another group's (what a direct-get response reflected into the key
// leaves) and two bad fleet_stats entries, the controller keeps driving the
// other group, never overwrites the bad status, says so once (not every
// pass) naming the key and the repair, and fleetctl status names all three.
// After "fleetctl reset --group green" the group starts afresh. green comes
// first in the config, so a pass that stopped at it would never reach blue.
func TestControllerSkipsBadGroupAndStats(t *testing.T) {
	f := newFixture(t)
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, independentGroups("green", "blue"), 0); err != nil {
		t.Fatal(err)
	}
	var logs natstest.Buffer
	rc := f.startControllerLogging("c1", &logs)
	for range 2 {
		f.startAgent("blue", "1.0.0", false)
		f.startAgent("green", "1.0.0", false)
	}
	f.waitHeard(rc.c, time.Time{})
	f.step(interval) // every agent established

	// The bad values. green's holds blue's status, halted: a controller
	// that took it for "no status" would write a fresh one over it.
	foreign := rollout.GroupStatus{V: 1, Group: "blue", State: rollout.StateActive, TargetVersion: "2.0.0", StartVersion: "1.0.0",
		Halted: true, HaltReason: "3 of 4 failed"}
	data, err := json.Marshal(foreign)
	if err != nil {
		t.Fatal(err)
	}
	greenRev, err := f.fleet.Plan.Put(f.ctx, kv.GroupKey("green"), data)
	if err != nil {
		t.Fatal(err)
	}
	blueCount, err := json.Marshal(kv.Stats{V: 1, ControllerID: "c9", Group: "blue", At: f.clk.Now().UTC(), Agents: 99,
		Versions: rollout.Counts{"1.0.0": {Count: 99}}})
	if err != nil {
		t.Fatal(err)
	}
	for key, v := range map[string][]byte{"x": []byte("x"), kv.StatsKey("green", "c9"): blueCount} {
		if _, err := f.fleet.Stats.Put(f.ctx, key, v); err != nil {
			t.Fatal(err)
		}
	}
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true // the test's clock may be outside the start windows
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}

	for range 3 {
		f.pass()
	}
	f.settle()
	st, err := f.fleet.ReadState(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if blue := st.Groups["blue"].Value; blue.State != rollout.StateCanary {
		t.Errorf("blue is %s (%s), want canary: the controller stopped driving the good group", blue.State, blue.Waiting)
	}
	raw, err := f.fleet.Plan.Get(f.ctx, kv.GroupKey("green"))
	if err != nil {
		t.Fatal(err)
	}
	if raw.Revision() != greenRev || string(raw.Value()) != string(data) {
		t.Errorf("the bad status of green was overwritten: revision %d → %d, value %s", greenRev, raw.Revision(), raw.Value())
	}
	if n := strings.Count(logs.String(), "key=fleet_plan/group.green"); n != 1 {
		t.Errorf("the bad status was logged %d times in 3 passes, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "fleetctl reset --group green") {
		t.Errorf("the log does not name the repair:\n%s", logs.String())
	}

	// fleetctl status: both groups' counts, the bad entries left out and named.
	rep := f.statusAtNow()
	var problems []string
	for _, p := range rep.Problems {
		problems = append(problems, p.Key)
	}
	sort.Strings(problems)
	if diff := cmp.Diff([]string{"fleet_plan/group.green", "fleet_stats/green.c9", "fleet_stats/x"}, problems); diff != "" {
		t.Errorf("status problems (-want +got):\n%s", diff)
	}
	agents := map[string]int{}
	invalid := map[string]bool{}
	for _, g := range rep.Groups {
		agents[g.Name] = g.Agents
		invalid[g.Name] = g.Rollout != nil && g.Rollout.StatusInvalid
	}
	if diff := cmp.Diff(map[string]int{"blue": 2, "green": 2}, agents); diff != "" {
		t.Errorf("agents per group (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{"blue": false, "green": true}, invalid); diff != "" {
		t.Errorf("status_invalid (-want +got):\n%s", diff)
	}

	// The operator's reset removes the bad status; the controller starts
	// green afresh at its next pass.
	var out, errOut natstest.Buffer
	err = fleetctl.RunReset(f.ctx, &fleetctl.GroupActionOptions{
		Global: &fleetctl.Global{NATSURL: f.srv.URL(), Timeout: waitLong, Out: &out, ErrOut: &errOut, Now: f.clk.Now},
		Group:  "green",
	})
	if err != nil {
		t.Fatalf("fleetctl reset --group green: %v (stderr %s)", err, errOut.String())
	}
	f.pass()
	natstest.Eventually(t, waitLong, func() error {
		e, err := f.fleet.ReadGroupStatus(f.ctx, "green")
		if err != nil {
			return err
		}
		if e.Value.TargetVersion != "2.0.0" || e.Value.Halted {
			return fmt.Errorf("green: %+v, want a fresh status for 2.0.0", e.Value)
		}
		return nil
	})
	f.settle()
	if !strings.Contains(logs.String(), "the bad value was replaced") {
		t.Errorf("the repair was not logged:\n%s", logs.String())
	}
}

// statusAtNow waits until the controllers wrote stats at the current clock
// reading, then runs "fleetctl status -o json".
func (f *fixture) statusAtNow() fleetctl.StatusReport {
	f.t.Helper()
	now := f.clk.Now().UTC()
	natstest.Eventually(f.t, waitLong, func() error {
		entries, _, err := f.fleet.ReadValidStats(f.ctx)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.At.Equal(now) {
				return nil
			}
		}
		return fmt.Errorf("no stats written at %v yet", now)
	})
	return f.status()
}

// TestControllerStopsOnBadSpecOrConfig: a spec or config that is a
// JetStream response moves no group and writes no status, is logged once
// naming the key and the command that replaces it, and that command (run
// against the value with compare-and-swap) brings the rollout back.
func TestControllerStopsOnBadSpecOrConfig(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		bucket    func(*kv.Fleet) interface {
			Put(context.Context, string, []byte) (uint64, error)
		}
		fix    string
		repair func(t *testing.T, f *fixture, g *fleetctl.Global) error
	}{
		{"spec", kv.KeySpec, func(k *kv.Fleet) interface {
			Put(context.Context, string, []byte) (uint64, error)
		} {
			return k.Plan
		}, "fleetctl plan set", func(_ *testing.T, f *fixture, g *fleetctl.Global) error {
			return fleetctl.RunPlanSet(f.ctx, &fleetctl.PlanSetOptions{Global: g, Start: ptr("1.0.0"), Target: ptr("2.0.0"), Critical: ptr(true)})
		}},
		{"config", kv.KeyConfig, func(k *kv.Fleet) interface {
			Put(context.Context, string, []byte) (uint64, error)
		} {
			return k.Config
		}, "fleetctl config apply", func(t *testing.T, f *fixture, g *fleetctl.Global) error {
			file := filepath.Join(t.TempDir(), "c.json")
			data, err := json.Marshal(independentGroups("blue"))
			if err != nil {
				return err
			}
			if err := os.WriteFile(file, data, 0o600); err != nil {
				return err
			}
			return fleetctl.RunConfigApply(f.ctx, &fleetctl.ConfigApplyOptions{Global: g, File: file})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, independentGroups("blue"), 0); err != nil {
				t.Fatal(err)
			}
			spec := rollout.DefaultSpec("1.0.0", "2.0.0")
			spec.Critical = true
			if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := tc.bucket(f.fleet).Put(f.ctx, tc.key, []byte(streamInfoResponse)); err != nil {
				t.Fatal(err)
			}
			var logs natstest.Buffer
			rc := f.startControllerLogging("c1", &logs)
			f.startAgent("blue", "1.0.0", false)
			f.waitHeard(rc.c, time.Time{})
			for range 3 {
				f.pass()
			}
			f.settle()
			if _, err := f.fleet.ReadGroupStatus(f.ctx, "blue"); err == nil {
				t.Errorf("a group status was written while the %s is not valid", tc.name)
			}
			if n := strings.Count(logs.String(), "rollout stopped"); n != 1 {
				t.Errorf("logged %d times in 3 passes, want once:\n%s", n, logs.String())
			}
			for _, want := range []string{"level=ERROR", "key=" + map[string]string{"spec": "fleet_plan/spec", "config": "fleet_config/config"}[tc.name], tc.fix} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("the log lacks %q:\n%s", want, logs.String())
				}
			}

			var out, errOut natstest.Buffer
			g := &fleetctl.Global{NATSURL: f.srv.URL(), Timeout: waitLong, Out: &out, ErrOut: &errOut, Now: f.clk.Now}
			if err := tc.repair(t, f, g); err != nil {
				t.Fatalf("repair: %v (stderr %s)", err, errOut.String())
			}
			f.pass()
			natstest.Eventually(t, waitLong, func() error {
				_, err := f.fleet.ReadGroupStatus(f.ctx, "blue")
				return err
			})
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestPlanMirrorSkipsBadValues: the find endpoint's copy of the plan takes
// good values and skips a status whose group is another group's, a
// JetStream response stored as the spec, and garbage, keeping the last good
// value of each key.
func TestPlanMirrorSkipsBadValues(t *testing.T) {
	f := newFixture(t)
	// Every group below is in the config: what is tested is the plan's values.
	cfg := rollout.DefaultConfig()
	for _, g := range []string{"blue", "green", "red", "last"} {
		cfg.Groups = append(cfg.Groups, rollout.DefaultGroup(g))
	}
	cfgData, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.fleet.Config.Put(f.ctx, kv.KeyConfig, cfgData); err != nil {
		t.Fatal(err)
	}
	store := &httpfind.Store{}
	var logs natstest.Buffer
	m := &controller.PlanMirror{NC: f.fleet.JS.Conn(), Store: store, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// Loaded first: from then on every change arrives in order. (A mirror
	// that starts when the spec is already bad has no last good value.)
	natstest.Eventually(t, waitLong, m.Ready)

	put := func(key string, v any) {
		t.Helper()
		data, ok := v.([]byte)
		if !ok {
			var err error
			if data, err = json.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.fleet.Plan.Put(f.ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	blue := rollout.GroupStatus{V: 1, Group: "blue", State: rollout.StateDone, TargetVersion: "2.0.0", StartVersion: "1.0.0", Progress: 1}
	put(kv.KeySpec, spec)
	put(kv.GroupKey("blue"), blue)
	// The bad values, then a good one: the watch delivers in order, so
	// once the last is in the store the others have been seen.
	put(kv.GroupKey("green"), blue) // blue's status under green's key
	put(kv.GroupKey("red"), []byte(streamInfoResponse))
	put(kv.KeySpec, []byte(streamInfoResponse))
	put(kv.GroupKey("blue"), []byte("x"))
	put(kv.GroupKey("last"), rollout.GroupStatus{V: 1, Group: "last", State: rollout.StateUnstarted})
	natstest.Eventually(t, waitLong, func() error {
		if _, ok := store.Get().Groups["last"]; !ok {
			return fmt.Errorf("the mirror has not caught up")
		}
		return nil
	})
	p := store.Get()
	var groups []string
	for g := range p.Groups {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	if diff := cmp.Diff([]string{"blue", "last"}, groups); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(blue, p.Groups["blue"]); diff != "" {
		t.Errorf("blue: the last good status is kept (-want +got):\n%s", diff)
	}
	if !p.HasSpec || p.Spec != spec {
		t.Errorf("spec: %+v (has %v), want the last good one", p.Spec, p.HasSpec)
	}
	// Agents of green are answered as an unstarted group, not as blue.
	a, err := p.Find(rollout.AgentID("00000000-0000-4000-8000-000000000001"), "green")
	if err != nil || a.Version != "1.0.0" || a.Update {
		t.Errorf("find for green: %+v %v, want the start version and no update", a, err)
	}
	for _, key := range []string{"fleet_plan/group.green", "fleet_plan/group.red", "fleet_plan/spec", "fleet_plan/group.blue"} {
		if n := strings.Count(logs.String(), "key="+key+" "); n != 1 {
			t.Errorf("%s logged %d times, want once:\n%s", key, n, logs.String())
		}
	}
}
