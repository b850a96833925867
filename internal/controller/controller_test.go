package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

const (
	interval   = 30 * time.Second
	statsEvery = 10 * time.Second
	expiry     = 2 * time.Minute
	waitLong   = 20 * time.Second
)

// fixture is one bus with a manual clock shared by every controller and
// agent in the test, so intervals and expiry are stepped, not slept.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	srv   *natstest.Server
	fleet *kv.Fleet
	clk   *clock.Manual
	live  map[rollout.AgentID]*runningAgent
	ctrls []*runningController
	// notify is the webhooks of the controllers started from now on.
	notify controller.Notify
	// releases, when set, gives each controller started from now on its
	// release repository (releases_test.go).
	releases func(id string) *controller.ReleaseRepo
}

type runningAgent struct {
	agent   *agentd.Agent
	group   string
	version string
	failed  bool
	stop    context.CancelFunc
	done    chan error
}

type runningController struct {
	c    *controller.Controller
	stop context.CancelFunc
	done chan error
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv := natstest.Start(t)
	fleet, err := kv.Ensure(ctx, srv.JetStream("setup"), kv.Options{AgentExpiry: expiry, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, ctx: ctx, srv: srv, fleet: fleet, clk: clock.NewManual(time.Now()), live: map[rollout.AgentID]*runningAgent{}}
}

func (f *fixture) startController(id string) *runningController {
	f.t.Helper()
	return f.startControllerWith(id, natstest.Logger(f.t))
}

// startControllerWith is startController with the controller logging to log.
func (f *fixture) startControllerWith(id string, log *slog.Logger) *runningController {
	f.t.Helper()
	var releases *controller.ReleaseRepo
	if f.releases != nil {
		releases = f.releases(id)
	}
	c, err := controller.New(f.fleet, controller.Options{
		ID: id, StatsInterval: statsEvery, HeartbeatInterval: interval, AgentExpiry: expiry,
		Notify: f.notify, Releases: releases, Clock: f.clk, Log: log,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	rc := &runningController{c: c, stop: cancel, done: make(chan error, 1)}
	go func() { rc.done <- c.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-rc.done:
		f.t.Fatalf("controller %s stopped: %v", id, err)
	case <-time.After(waitLong):
		f.t.Fatalf("controller %s not ready", id)
	}
	f.ctrls = append(f.ctrls, rc)
	f.t.Cleanup(func() { rc.halt(f.t) })
	return rc
}

// halt stops the controller and checks it ended because it was told to.
func (rc *runningController) halt(t *testing.T) {
	t.Helper()
	rc.stop()
	if err := <-rc.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("controller ended with %v", err)
	}
	rc.done <- context.Canceled // idempotent for the cleanup call
}

func (f *fixture) startAgent(group, version string, failed bool) *runningAgent {
	f.t.Helper()
	return f.startAgentOn(group, version, failed, "host-"+group)
}

// startAgentOn is startAgent with the agent reporting hostname.
func (f *fixture) startAgentOn(group, version string, failed bool, hostname string) *runningAgent {
	f.t.Helper()
	root := f.t.TempDir()
	uf := install.NewUpdateFile(group)
	uf.Status.ActiveVersion = version
	if failed {
		uf.Status.Rollback, uf.Status.RollbackFrom = true, "9.9.9"
	}
	if err := uf.Save(root); err != nil {
		f.t.Fatal(err)
	}
	a, err := agentd.New(agentd.Options{
		Root: root, NATSURL: f.srv.URL(), Hostname: hostname,
		Interval: interval, Clock: f.clk, Log: natstest.Logger(f.t),
	})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	ra := &runningAgent{agent: a, group: group, version: version, failed: failed, stop: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Run(ctx) }()
	f.live[a.ID()] = ra
	f.t.Cleanup(func() { cancel(); <-ra.done })
	return ra
}

func (f *fixture) stopAgent(ra *runningAgent) {
	f.t.Helper()
	ra.stop()
	if err := <-ra.done; !errors.Is(err, context.Canceled) {
		f.t.Fatalf("agent ended with %v", err)
	}
	ra.done <- context.Canceled
	delete(f.live, ra.agent.ID())
}

// waitHeard waits until controller c has heard every live agent at the
// clock's current time (or, with at zero, at all).
func (f *fixture) waitHeard(c *controller.Controller, at time.Time) {
	f.t.Helper()
	natstest.Eventually(f.t, waitLong, func() error {
		seen := map[rollout.AgentID]time.Time{}
		for _, a := range c.Inventory().Agents("", f.clk.Now()) {
			seen[a.Heartbeat.AgentID] = a.LastSeen
		}
		var missing []string
		for id := range f.live {
			last, ok := seen[id]
			if !ok || last.Before(at) {
				missing = append(missing, fmt.Sprintf("%s (last seen %v)", id, last))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d of %d live agents not heard at %v: %v", len(missing), len(f.live), at, missing)
		}
		return nil
	})
}

// Timers each loop owner keeps armed on the fixture's clock: an agent its
// heartbeat, its plan refresh and its bus watch; a controller its stats
// and its rollout.
const (
	timersPerAgent      = 3
	timersPerController = 2
)

// loopTimers is how many timers are armed once every loop is idle.
func (f *fixture) loopTimers() int {
	return timersPerAgent*len(f.live) + timersPerController*len(f.ctrls)
}

// advance moves the clock by d once every agent and controller loop has
// re-armed its timer.
func (f *fixture) advance(d time.Duration) {
	f.t.Helper()
	// Counting fewer would let the clock move while a loop has not
	// re-armed yet, and that loop would miss the step.
	want := f.loopTimers()
	if !f.clk.WaitPending(want, timeout(waitLong)) {
		f.t.Fatalf("loops did not re-arm: %d timers pending, want %d", f.clk.Pending(), want)
	}
	f.clk.Advance(d)
}

// step advances the clock by d, which must bring the agents' next beat, and
// waits until the controllers heard every live agent.
func (f *fixture) step(d time.Duration) {
	f.t.Helper()
	f.advance(d)
	for _, rc := range f.ctrls {
		f.waitHeard(rc.c, f.clk.Now())
	}
}

func timeout(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}

// expected is the report fleetctl status must print for the given agents.
func expected(agents []*runningAgent) fleetctl.StatusReport {
	groups := map[string]*fleetctl.GroupReport{}
	for _, a := range agents {
		g := groups[a.group]
		if g == nil {
			g = &fleetctl.GroupReport{Name: a.group, Versions: map[string]fleetctl.VersionReport{}}
			groups[a.group] = g
		}
		v := g.Versions[a.version]
		v.Count++
		g.Agents++
		if a.failed {
			v.Failed++
			g.Failed++
		}
		if v.LowestID == "" || a.agent.ID() < v.LowestID {
			v.LowestID = a.agent.ID()
		}
		g.Versions[a.version] = v
	}
	rep := fleetctl.StatusReport{Groups: []fleetctl.GroupReport{}}
	for _, g := range groups {
		rep.Groups = append(rep.Groups, *g)
	}
	sort.Slice(rep.Groups, func(i, j int) bool { return rep.Groups[i].Name < rep.Groups[j].Name })
	return rep
}

// status runs "fleetctl status -o json" against the fixture's bus.
func (f *fixture) status() fleetctl.StatusReport {
	f.t.Helper()
	var out, errOut bytes.Buffer
	o := &fleetctl.StatusOptions{
		Global: &fleetctl.Global{NATSURL: f.srv.URL(), Timeout: waitLong, Out: &out, ErrOut: &errOut, Now: f.clk.Now},
		Output: "json",
	}
	if err := fleetctl.RunStatus(f.ctx, o); err != nil {
		f.t.Fatalf("fleetctl status: %v (stderr: %s)", err, errOut.String())
	}
	var rep fleetctl.StatusReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		f.t.Fatalf("fleetctl status -o json: %v\n%s", err, out.String())
	}
	return rep
}

// waitStatus waits until every controller has written stats at the current
// clock reading, then checks fleetctl's report against want.
func (f *fixture) waitStatus(want fleetctl.StatusReport, controllers int) {
	f.t.Helper()
	now := f.clk.Now()
	natstest.Eventually(f.t, waitLong, func() error {
		entries, err := f.fleet.ReadStats(f.ctx)
		if err != nil {
			return err
		}
		written := map[string]int{}
		for _, e := range entries {
			if e.At.Equal(now.UTC()) {
				written[e.Group]++
			}
		}
		for _, g := range want.Groups {
			if written[g.Name] != controllers {
				return fmt.Errorf("group %s: %d of %d controllers wrote stats at %v", g.Name, written[g.Name], controllers, now)
			}
		}
		return nil
	})
	for i := range want.Groups {
		want.Groups[i].Controllers = controllers
	}
	got := f.status()
	// Failures (the failed agents' hosts and reasons, from heartbeats)
	// are not counts: TestStatusSaysWhyHostsFailed checks them.
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(fleetctl.GroupReport{}, "At", "Failures", "FailuresTotal")); diff != "" {
		f.t.Fatalf("fleetctl status (-want +got):\n%s", diff)
	}
}

func (f *fixture) agents() []*runningAgent {
	out := make([]*runningAgent, 0, len(f.live))
	for _, a := range f.live {
		out = append(out, a)
	}
	return out
}

// fleet50 starts 50 agents in 3 groups on 2 versions, two of them rolled back.
func (f *fixture) fleet50() {
	f.t.Helper()
	for _, spec := range []struct {
		group, version string
		n, failed      int
	}{
		{"canary", "1.0.0", 3, 0}, {"canary", "1.1.0", 2, 1},
		{"staging", "1.0.0", 10, 1}, {"staging", "1.1.0", 5, 0},
		{"prod", "1.0.0", 30, 0},
	} {
		for i := range spec.n {
			f.startAgent(spec.group, spec.version, i < spec.failed)
		}
	}
}

func TestCountsExpiryAndTwoControllers(t *testing.T) {
	f := newFixture(t)
	c1 := f.startController("c1")
	c2 := f.startController("c2")
	f.fleet50()
	f.waitHeard(c1.c, time.Time{})
	f.waitHeard(c2.c, time.Time{})

	// Not counted before they have been known for one interval.
	f.advance(statsEvery)
	if got := c1.c.Inventory().Counts(f.clk.Now()); len(got) != 0 {
		t.Fatalf("agents counted after %v, before one heartbeat interval: %v", statsEvery, got)
	}
	f.step(interval - statsEvery)
	all := f.agents()
	f.waitStatus(expected(all), 2) // two controllers, counted once

	// Stop 5 prod and 5 staging agents right after their beat at t0+30s.
	var stopped, kept []*runningAgent
	quota := map[string]int{"prod": 5, "staging": 5}
	for _, a := range all {
		if quota[a.group] > 0 && !a.failed {
			quota[a.group]--
			f.stopAgent(a)
			stopped = append(stopped, a)
			continue
		}
		kept = append(kept, a)
	}
	if len(stopped) != 10 {
		t.Fatalf("stopped %d agents, want 10", len(stopped))
	}
	// Their last beat was at t0+30s. Through t0+120s (90s of silence <
	// expiry) they still count.
	for range 3 {
		f.step(interval)
		f.waitStatus(expected(all), 2)
	}
	// At t0+150s they have been silent for the expiry: gone.
	f.step(interval)
	f.waitStatus(expected(kept), 2)
	if got := c1.c.Inventory().Len(); got != 40 {
		t.Errorf("inventory holds %d agents after expiry, want 40", got)
	}

	// agents ls reads the stream itself: the stopped agents' last messages
	// are still there (the stream's MaxAge is real time), the filter works.
	var out, errOut bytes.Buffer
	err := fleetctl.RunAgentsList(f.ctx, &fleetctl.AgentsOptions{
		Global: &fleetctl.Global{NATSURL: f.srv.URL(), Timeout: waitLong, Out: &out, ErrOut: &errOut, Now: f.clk.Now},
		Group:  "canary", Version: "1.1.0", Output: "json",
	})
	if err != nil {
		t.Fatal(err)
	}
	var rep fleetctl.AgentsReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	var ids []rollout.AgentID
	for _, r := range rep.Agents {
		ids = append(ids, r.AgentID)
	}
	var wantIDs []rollout.AgentID
	for _, a := range all {
		if a.group == "canary" && a.version == "1.1.0" {
			wantIDs = append(wantIDs, a.agent.ID())
		}
	}
	sort.Slice(wantIDs, func(i, j int) bool { return wantIDs[i] < wantIDs[j] })
	if diff := cmp.Diff(wantIDs, ids); diff != "" {
		t.Errorf("agents ls --group canary --version 1.1.0 (-want +got):\n%s", diff)
	}
}

func TestRestartRecoversCountsWithoutNewHeartbeats(t *testing.T) {
	f := newFixture(t)
	c1 := f.startController("c1")
	for i := range 12 {
		f.startAgent([]string{"blue", "green"}[i%2], []string{"2.0.0", "2.1.0-rc.1"}[i%3%2], i == 4)
	}
	f.waitHeard(c1.c, time.Time{})
	f.step(interval)
	want := expected(f.agents())
	f.waitStatus(want, 1)
	before := c1.c.Inventory().Counts(f.clk.Now())

	// Restart: the agents stay quiet (their timers are not due), so
	// everything the new controller knows comes from the stream.
	c1.halt(t)
	f.ctrls = nil
	received, _ := c1.c.Counters()
	c2 := f.startController("c1")
	after := c2.c.Inventory().Counts(f.clk.Now())
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("counts after restart (-before +after):\n%s", diff)
	}
	if err := c2.c.WriteStats(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(want, 1)
	if got, _ := c2.c.Counters(); got != 12 {
		t.Errorf("restarted controller read %d heartbeats, want exactly the 12 recovered (first run read %d)", got, received)
	}
}

func TestBadHeartbeatsRejectedAndCounted(t *testing.T) {
	f := newFixture(t)
	rc := f.startController("c1")
	good := f.startAgent("edge", "3.0.0", false)
	f.waitHeard(rc.c, time.Time{})

	js := f.srv.JetStream("attacker")
	// Every bad heartbeat on a subject of its own: the stream keeps one
	// message per subject, and a later one could replace an earlier one
	// before the controller's consumer sees it.
	ids := make([]rollout.AgentID, 5)
	for i := range ids {
		ids[i], _ = rollout.NewAgentID(nil)
	}
	other := ids[0]
	valid := func(group string, id rollout.AgentID, mutate func(map[string]any)) []byte {
		m := map[string]any{"v": 1, "agent_id": id, "hostname": "h", "group": group, "active_version": "3.0.0", "at": time.Now()}
		if mutate != nil {
			mutate(m)
		}
		b, _ := json.Marshal(m)
		return b
	}
	bad := []struct {
		name    string
		subject string
		data    []byte
	}{
		{"not json", heartbeat.SubjectFor("edge", ids[0]), []byte("{not json")},
		{"oversized", heartbeat.SubjectFor("edge", ids[1]), valid("edge", ids[1], func(m map[string]any) { m["hostname"] = strings.Repeat("x", 5000) })},
		{"other agent's subject", heartbeat.SubjectFor("edge", good.agent.ID()), valid("edge", other, nil)},
		{"other group's subject", heartbeat.SubjectFor("core", ids[2]), valid("edge", ids[2], nil)},
		{"unknown schema", heartbeat.SubjectFor("edge", ids[3]), valid("edge", ids[3], func(m map[string]any) { m["v"] = 2 })},
		{"bad version", heartbeat.SubjectFor("edge", ids[4]), valid("edge", ids[4], func(m map[string]any) { m["active_version"] = "latest" })},
		{"bad agent id token", "fleet.hb.edge.NOT-AN-ID", valid("edge", "NOT-AN-ID", nil)},
	}
	for _, b := range bad {
		if _, err := js.Publish(f.ctx, b.subject, b.data); err != nil {
			t.Fatalf("%s: publish: %v", b.name, err)
		}
	}
	// A good heartbeat after the bad ones is still taken.
	late, _ := rollout.NewAgentID(nil)
	if _, err := js.Publish(f.ctx, heartbeat.SubjectFor("edge", late), valid("edge", late, nil)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, waitLong, func() error {
		if _, rejected := rc.c.Counters(); rejected != uint64(len(bad)) {
			return fmt.Errorf("rejected %d, want %d", rejected, len(bad))
		}
		if n := rc.c.Inventory().Len(); n != 2 {
			return fmt.Errorf("inventory has %d agents, want 2 (the running agent and the late good heartbeat)", n)
		}
		return nil
	})
	// The good agent's entry was not overwritten by the impostor.
	for _, a := range rc.c.Inventory().Agents("edge", f.clk.Now()) {
		if a.Heartbeat.AgentID == good.agent.ID() && a.Heartbeat.Hostname != "host-edge" {
			t.Errorf("agent %s was overwritten by a heartbeat for another id: %+v", good.agent.ID(), a.Heartbeat)
		}
	}
	select {
	case err := <-rc.done:
		t.Fatalf("controller stopped after bad heartbeats: %v", err)
	default:
	}
}
