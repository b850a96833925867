package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestQuarantineAcrossGroups is issue 15's "three agents in different
// groups roll back from V": real heartbeats on the bus, one agent in each
// of groups a, b and c reports it rolled back from 2.0.0 with a release
// failure (and a second agent of a with a bad artifact, which does not
// count towards the quarantine). Two failures of four agents are not above
// failure_threshold 50%, so no group halts on its own. The controller quarantines 2.0.0 in
// fleet_plan/quarantine (by controller, the three agents), announces it on
// the timeline, and halts every group rolling 2.0.0 out (a, b, c, d active
// and e, still unstarted behind d) with a reason naming the version, the
// rule and the agents; fleetctl plan set --target 2.0.0 is refused (and
// taken with --force); Decide and /v1/find answer a new host the last good
// version, 1.1.0, never 2.0.0.
func TestQuarantineAcrossGroups(t *testing.T) {
	f := newFixture(t)
	events := f.subscribeEvents()
	cfg := rollout.DefaultConfig()
	cfg.Groups = nil
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		g := rollout.DefaultGroup(n)
		g.CanaryCount, g.MinHealthyTime, g.MaxInFlight, g.FailureThreshold, g.DependsOn = 0, 0, 100, 50, []string{}
		if n == "e" {
			g.DependsOn = []string{"d"}
		}
		cfg.Groups = append(cfg.Groups, g)
	}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	beat := func(group string, hb heartbeat.Heartbeat) {
		t.Helper()
		hb.V, hb.Group, hb.Hostname, hb.UpdaterVersion, hb.At = heartbeat.SchemaVersion, group, "h-"+group, "0.1.0", f.clk.Now().UTC()
		data, err := heartbeat.Encode(&hb)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(f.ctx, waitLong)
		defer cancel()
		if _, err := f.fleet.JS.Publish(ctx, heartbeat.SubjectFor(group, hb.AgentID), data); err != nil {
			t.Fatal(err)
		}
	}
	id := func(group string, i int) rollout.AgentID {
		return rollout.AgentID(fmt.Sprintf("%02x000000-0000-4000-8000-%012d", 0x10*(int(group[0]-'a')+1)+i, i))
	}
	rc := f.startController("c1")
	groupOf := map[rollout.AgentID]string{}
	for _, g := range []string{"a", "b", "c", "d", "e"} {
		for i := range 4 {
			groupOf[id(g, i)] = g
			beat(g, heartbeat.Heartbeat{AgentID: id(g, i), ActiveVersion: "1.1.0"})
		}
	}
	heard := func(want func(heartbeat.Heartbeat) bool) {
		t.Helper()
		natstest.Eventually(t, waitLong, func() error {
			n := 0
			for _, a := range rc.c.Inventory().Agents("", f.clk.Now()) {
				if want(a.Heartbeat) {
					n++
				}
			}
			if n < len(groupOf) {
				return fmt.Errorf("controller heard %d of %d agents as wanted", n, len(groupOf))
			}
			return nil
		})
	}
	heard(func(heartbeat.Heartbeat) bool { return true })
	spec := rollout.DefaultSpec("1.1.0", "2.0.0")
	spec.Critical = true
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}
	f.advance(interval) // established
	states := func(wantHalted bool, want map[string]rollout.State) map[string]rollout.GroupStatus {
		t.Helper()
		var out map[string]rollout.GroupStatus
		natstest.Eventually(t, waitLong, func() error {
			st, err := f.fleet.ReadState(f.ctx)
			if err != nil {
				return err
			}
			out = map[string]rollout.GroupStatus{}
			for g, w := range want {
				out[g] = st.Groups[g].Value
				if got := st.Groups[g].Value; got.State != w || got.Halted != wantHalted {
					f.settle()
					f.advance(reconcileEvery)
					return fmt.Errorf("group %s: %s halted=%t (%s), want %s", g, got.State, got.Halted, got.HaltReason, w)
				}
			}
			return nil
		})
		return out
	}
	states(false, map[string]rollout.State{"a": rollout.StateActive, "b": rollout.StateActive, "c": rollout.StateActive, "d": rollout.StateActive, "e": rollout.StateUnstarted})

	// One agent each in a, b and c tries 2.0.0 and rolls back (a release
	// failure; c's agent is older and does not classify). The second
	// agent of a also fails, but on a bad download: it must not count.
	started := f.clk.Now().UTC()
	failed := []rollout.AgentID{id("a", 0), id("b", 0), id("c", 1)}
	rollBack := func(agent rollout.AgentID, class string) {
		t.Helper()
		beat(groupOf[agent], heartbeat.Heartbeat{AgentID: agent, ActiveVersion: "1.1.0", StartVersion: "1.1.0", StartTime: started,
			Rollback: true, RollbackFrom: "2.0.0", Error: "health check failed", ErrorClass: class})
		natstest.Eventually(t, waitLong, func() error {
			if a, ok := rc.c.Inventory().Lookup(agent, f.clk.Now()); ok && a.Heartbeat.Rollback && a.Heartbeat.ErrorClass == class {
				return nil
			}
			return fmt.Errorf("controller has not heard %s roll back", agent)
		})
	}
	rollBack(failed[0], rollout.FailureRelease)
	rollBack(failed[1], rollout.FailureRelease)
	rollBack(id("a", 1), rollout.FailureArtifact)
	// Two release rollbacks (and one that is not the release's fault):
	// below quarantine_after 3, and no group above its threshold.
	f.settle()
	f.advance(reconcileEvery)
	f.settle()
	f.advance(reconcileEvery)
	f.settle()
	states(false, map[string]rollout.State{"a": rollout.StateActive, "b": rollout.StateActive, "c": rollout.StateActive, "d": rollout.StateActive, "e": rollout.StateUnstarted})
	if e, err := f.fleet.ReadQuarantine(f.ctx); err != nil || e.Revision != 0 {
		t.Fatalf("quarantine written after two release rollbacks: %+v %v", e, err)
	}
	rollBack(failed[2], "") // an older agent that does not classify: a release failure
	f.settle()
	f.advance(reconcileEvery)

	var q rollout.QuarantineList
	natstest.Eventually(t, waitLong, func() error {
		e, err := f.fleet.ReadQuarantine(f.ctx)
		if err != nil {
			return err
		}
		if !e.Value.Quarantined("2.0.0") {
			f.settle()
			f.advance(reconcileEvery)
			return fmt.Errorf("2.0.0 not quarantined yet: %+v", e.Value)
		}
		q = e.Value
		return nil
	})
	got, _ := q.Lookup("2.0.0")
	if got.By != rollout.QuarantineByController || got.AgentCount != 3 || fmt.Sprint(got.Agents) != fmt.Sprint(failed) {
		t.Errorf("quarantine: %+v; want by controller, the 3 agents %v", got, failed)
	}
	if !strings.Contains(got.Reason, "3 agents rolled back from 2.0.0 (release failures") {
		t.Errorf("reason %q", got.Reason)
	}

	// Every group rolling 2.0.0 out halts, naming the version, the agents
	// and the rule; e halts before it ever starts.
	halted := states(true, map[string]rollout.State{"a": rollout.StateActive, "b": rollout.StateActive, "c": rollout.StateActive,
		"d": rollout.StateActive, "e": rollout.StateUnstarted})
	for _, g := range []string{"a", "b", "c", "d", "e"} {
		st := halted[g]
		if !st.Halted {
			t.Errorf("group %s not halted: %+v", g, st)
			continue
		}
		for _, s := range []string{"quarantined: 3 agents rolled back from 2.0.0 (release failures", string(failed[0]), string(failed[1]), string(failed[2]), "fleetctl quarantine rm 2.0.0"} {
			if !strings.Contains(st.HaltReason, s) {
				t.Errorf("group %s: halt reason %q lacks %q", g, st.HaltReason, s)
			}
		}
		// A new host of the group installs the last good version.
		newHost := rollout.AgentID(fmt.Sprintf("f%07x-0000-4000-8000-000000000000", int(g[0])))
		if v, update := rollout.Decide(newHost, spec, st, st.Mode); v != "1.1.0" || update || !rollout.Act("", v, update) {
			t.Errorf("group %s: Decide(new host) = %s, %t; want 1.1.0 installed by a new host", g, v, update)
		}
	}

	// The timeline: the fleet-wide quarantine event, then the halts.
	natstest.Eventually(t, waitLong, func() error {
		entries, problems, err := f.fleet.ReadTimeline(f.ctx, time.Time{})
		if err != nil || len(problems) > 0 {
			return fmt.Errorf("timeline: %v %v", err, problems)
		}
		quarantinedAt, halts := -1, map[string]int{}
		for i, e := range entries {
			switch ev := e.Event; {
			case ev == nil:
			case ev.Kind == rollout.EventQuarantine && ev.Group == "" && e.Group() == "":
				quarantinedAt = i
			case ev.Kind == rollout.EventHalt:
				halts[ev.Group] = i
			}
		}
		if quarantinedAt < 0 || len(halts) != 5 {
			return fmt.Errorf("quarantine event at %d, halts %v", quarantinedAt, halts)
		}
		for g, i := range halts {
			if i < quarantinedAt {
				return fmt.Errorf("group %s halted (entry %d) before the quarantine event (entry %d)", g, i, quarantinedAt)
			}
		}
		return nil
	})
	natstest.Eventually(t, waitLong, func() error {
		events.mu.Lock()
		defer events.mu.Unlock()
		for _, ev := range events.events {
			if ev.Kind == rollout.EventQuarantine && strings.Contains(ev.Reason, "version 2.0.0 quarantined") {
				return nil
			}
		}
		return fmt.Errorf("no quarantine event on %s", kv.EventSubject(""))
	})

	// /v1/find answers a new host the last good version, from the plan the
	// controller's mirror follows.
	mirror := &controller.PlanMirror{NC: f.srv.Conn("mirror"), Store: &httpfind.Store{}, Log: natstest.Logger(t)}
	mctx, mcancel := context.WithCancel(f.ctx)
	mdone := make(chan error, 1)
	go func() { mdone <- mirror.Run(mctx) }()
	t.Cleanup(func() { mcancel(); <-mdone })
	natstest.Eventually(t, waitLong, mirror.Ready)
	srv := httptest.NewServer(&httpfind.Handler{Store: mirror.Store, Ready: mirror.Ready})
	t.Cleanup(srv.Close)
	for _, g := range []string{"a", "d", "e"} {
		natstest.Eventually(t, waitLong, func() error {
			code, _, body := httpGet(t, srv.URL+"/v1/find?group="+g+"&host=ffffffff-0000-4000-8000-000000000001")
			var ans httpfind.Answer
			if code != 200 || json.Unmarshal([]byte(body), &ans) != nil {
				return fmt.Errorf("find %s: %d %s", g, code, body)
			}
			if ans.Version != "1.1.0" || ans.Update {
				return fmt.Errorf("find %s: %+v, want 1.1.0 without autoupdate", g, ans)
			}
			return nil
		})
	}

	// fleetctl plan set refuses 2.0.0 as a target once it is not the
	// target any more, and --force takes it.
	planSet := func(target string, force bool) (string, error) {
		var out, errOut bytes.Buffer
		err := fleetctl.RunPlanSet(f.ctx, &fleetctl.PlanSetOptions{
			Global: &fleetctl.Global{NATSURL: f.srv.URL(), Timeout: waitLong, Out: &out, ErrOut: &errOut, Now: f.clk.Now, Actor: "alice"},
			Target: &target, Force: force,
		})
		return out.String() + errOut.String(), err
	}
	if out, err := planSet("2.1.0", false); err != nil {
		t.Fatalf("plan set --target 2.1.0: %v\n%s", err, out)
	}
	before, err := f.fleet.ReadSpec(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = planSet("2.0.0", false)
	if err == nil || !strings.Contains(err.Error(), "--target 2.0.0 is quarantined") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("plan set --target 2.0.0: %v, want a refusal naming the quarantine and --force", err)
	}
	if after, err := f.fleet.ReadSpec(f.ctx); err != nil || after.Revision != before.Revision {
		t.Errorf("refused plan set wrote the spec: %d → %d (%v)", before.Revision, after.Revision, err)
	}
	if out, err := planSet("2.0.0", true); err != nil || !strings.Contains(out, "quarantined (--force)") {
		t.Errorf("plan set --target 2.0.0 --force: %v\n%s", err, out)
	}
}

// quarantineAfter sets the stored config's quarantine_after (0: the rule
// off), for tests about one group's own halts, whose rollbacks would
// otherwise quarantine the version fleet-wide first.
func (f *fixture) quarantineAfter(n int) {
	f.t.Helper()
	e, _, err := f.fleet.ReadConfig(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	cfg := e.Value
	cfg.QuarantineAfter = n
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, e.Revision); err != nil {
		f.t.Fatal(err)
	}
}
