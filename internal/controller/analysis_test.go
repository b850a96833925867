package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/promtest"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The metric analysis integration tests (issue 16 point 1) run a real
// Prometheus server (internal/promtest) scraping a test exporter whose
// app_error_rate{version} the test sets, a real controller in process on
// the real clock with short intervals, a real embedded NATS server, and
// simulated agents: heartbeats on the bus from hosts that do at once what
// rollout.Decide tells them.

const (
	gateGroup  = "prod"
	gateAgents = 8
	gateWait   = 90 * time.Second
	goodRate   = 0.001
	badRate    = 0.3
)

// errorRateCheck is the check of the tests: the target version's error
// rate below 5%, measured every second.
func errorRateCheck(count, inconclusiveLimit int) rollout.Check {
	return rollout.Check{Name: "error-rate", Query: `max(app_error_rate{version="{{.Version}}"})`, Success: "< 0.05",
		Interval: rollout.Duration(time.Second), Count: count, InconclusiveLimit: inconclusiveLimit}
}

// gateFleet is the system under test.
type gateFleet struct {
	*fixture
	c          *controller.Controller
	prom       *promtest.Server
	exp        *promtest.Exporter
	events     *eventLog
	metricsURL string

	mu       sync.Mutex
	versions map[rollout.AgentID]string
	// limit, when not 0, is how many agents may be on a version other
	// than 1.0.0: the others do not install it (yet), as slow hosts.
	limit int
}

// newGateFleet starts Prometheus, the exporter (1.0.0 at a good rate), the
// controller and gateAgents agents on 1.0.0 in group prod (2 canaries,
// 50% in flight, no min_healthy_time) with check, and waits until every
// agent is counted.
func newGateFleet(t *testing.T, check rollout.Check) *gateFleet {
	t.Helper()
	g := &gateFleet{fixture: newFixture(t), versions: map[rollout.AgentID]string{}}
	g.exp = promtest.NewExporter(t)
	g.prom = promtest.Start(t, promtest.Options{Targets: []string{g.exp.Addr}})
	// Prometheus scrapes its first targets seconds after it is ready.
	g.setRate("1.0.0", goodRate)
	g.events = g.subscribeEvents()

	cfg := rollout.DefaultConfig()
	grp := rollout.DefaultGroup(gateGroup)
	grp.CanaryCount, grp.MaxInFlight, grp.MinHealthyTime = 2, 50, 0
	grp.HealthTimeout = rollout.Duration(30 * time.Second)
	cfg.Groups = []rollout.GroupConfig{grp}
	cfg.PrometheusURL = g.prom.URL
	cfg.Analysis = []rollout.Check{check}
	if _, err := kv.Save(g.ctx, g.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}

	c, err := controller.New(g.fleet, controller.Options{
		ID: "c1", StatsInterval: 300 * time.Millisecond, HeartbeatInterval: 300 * time.Millisecond, AgentExpiry: time.Minute,
		ReconcileInterval: 200 * time.Millisecond, Clock: clock.Real{}, Log: natstest.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	g.c = c
	ctx, cancel := context.WithCancel(g.ctx)
	mirror := &controller.PlanMirror{NC: g.srv.Conn("mirror"), Store: &httpfind.Store{}, Log: natstest.Logger(t)}
	c.ServePlanFrom(mirror)
	var wg sync.WaitGroup
	wg.Go(func() { _ = mirror.Run(ctx) })
	wg.Go(func() {
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("controller stopped: %v", err)
		}
	})
	srv := httptest.NewServer(c.HTTPHandler(http.NotFoundHandler()))
	g.metricsURL = srv.URL + controller.PathMetrics

	for range gateAgents {
		id, err := rollout.NewAgentID(nil)
		if err != nil {
			t.Fatal(err)
		}
		g.versions[id] = "1.0.0"
	}
	wg.Go(func() { g.runAgents(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait(); srv.Close() })

	natstest.Eventually(t, gateWait, func() error {
		entries, err := g.fleet.ReadStats(g.ctx)
		if err != nil {
			return err
		}
		for _, gs := range kv.MergeStats(entries, time.Now()) {
			if gs.Group == gateGroup && gs.Versions.Total() == gateAgents {
				return nil
			}
		}
		return fmt.Errorf("not every agent counted yet")
	})
	return g
}

// setRate sets the error rate of version v and waits until Prometheus has
// scraped it.
func (g *gateFleet) setRate(v string, rate float64) {
	g.t.Helper()
	g.exp.SetErrorRate(v, rate)
	q := fmt.Sprintf(`app_error_rate{version=%q}`, v)
	natstest.Eventually(g.t, gateWait, func() error {
		res, _, _, err := g.prom.API.Query(g.ctx, q, time.Time{})
		if err != nil {
			return err
		}
		if vec, ok := res.(model.Vector); !ok || len(vec) != 1 || float64(vec[0].Value) != rate {
			return fmt.Errorf("%s: %v, want %v", q, res, rate)
		}
		return nil
	})
}

// runAgents is the simulated hosts: every 100ms each one reads the plan,
// installs at once the version rollout.Decide tells it, and heartbeats.
func (g *gateFleet) runAgents(ctx context.Context) {
	nc := g.srv.Conn("agents")
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	seq := uint64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		state, err := g.fleet.ReadState(ctx)
		g.mu.Lock()
		if err == nil && state.HasSpec {
			if st, ok := state.Groups[gateGroup]; ok {
				updated := 0
				for _, v := range g.versions {
					if v != "1.0.0" {
						updated++
					}
				}
				for id, v := range g.versions {
					if g.limit > 0 && updated >= g.limit {
						break
					}
					if to, update := rollout.Decide(id, state.Spec.Value, st.Value, st.Value.Mode); update && rollout.Act(v, to, update) {
						g.versions[id] = to
						updated++
					}
				}
			}
		}
		seq++
		for id, v := range g.versions {
			hb := heartbeat.Heartbeat{V: heartbeat.SchemaVersion, AgentID: id, Hostname: "host-" + string(id[:8]), Group: gateGroup,
				ActiveVersion: v, At: time.Now().UTC(), Seq: seq}
			if data, err := heartbeat.Encode(&hb); err == nil {
				_ = nc.Publish(heartbeat.SubjectFor(gateGroup, id), data)
			}
		}
		g.mu.Unlock()
	}
}

// onVersion counts the agents on v.
func (g *gateFleet) onVersion(v string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, av := range g.versions {
		if av == v {
			n++
		}
	}
	return n
}

// release writes the plan 1.0.0 → v (critical: windows ignored).
func (g *gateFleet) release(v string) {
	g.t.Helper()
	spec := rollout.DefaultSpec("1.0.0", v)
	spec.Critical = true
	if _, err := kv.Save(g.ctx, g.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		g.t.Fatal(err)
	}
}

// waitGroup polls prod's status until cond holds, failing on a halt unless
// the test waits for one (halts).
func (g *gateFleet) waitGroup(what string, halts bool, cond func(st rollout.GroupStatus) bool) rollout.GroupStatus {
	g.t.Helper()
	var st rollout.GroupStatus
	natstest.Eventually(g.t, gateWait, func() error {
		e, err := kv.Get[rollout.GroupStatus](g.ctx, g.fleet.Plan, kv.GroupKey(gateGroup))
		if err != nil {
			return err
		}
		st = e.Value
		if st.Halted && !halts {
			g.t.Fatalf("waiting for %s: the group halted: %s", what, st.HaltReason)
		}
		if !cond(st) {
			return fmt.Errorf("waiting for %s: %s halted=%v waiting=%q checks=%+v", what, st.State, st.Halted, st.Waiting, st.Analysis)
		}
		return nil
	})
	return st
}

// statusReport is "fleetctl status -o json".
func (g *gateFleet) statusReport() fleetctl.StatusReport {
	g.t.Helper()
	var out, errOut bytes.Buffer
	o := &fleetctl.StatusOptions{
		Global: &fleetctl.Global{NATSURL: g.srv.URL(), Timeout: waitLong, Out: &out, ErrOut: &errOut, Now: time.Now},
		Output: "json",
	}
	if err := fleetctl.RunStatus(g.ctx, o); err != nil {
		g.t.Fatalf("fleetctl status: %v (stderr: %s)", err, errOut.String())
	}
	var rep fleetctl.StatusReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		g.t.Fatalf("fleetctl status -o json: %v\n%s", err, out.String())
	}
	return rep
}

// statusChecks are prod's checks in "fleetctl status -o json", and its
// notes as fleetctl status and the dashboard show them.
func (g *gateFleet) statusChecks() ([]rollout.CheckStatus, []string) {
	g.t.Helper()
	rep := g.statusReport()
	for _, gr := range rep.Groups {
		if gr.Name == gateGroup && gr.Rollout != nil {
			return gr.Rollout.Analysis, view.GroupNotes(gr, rep.Plan, time.Now())
		}
	}
	g.t.Fatalf("no rollout of %s in fleetctl status", gateGroup)
	return nil, nil
}

// eventsOf are prod's events of kind, in order.
func (g *gateFleet) eventsOf(kind rollout.EventKind) []rollout.Event {
	g.events.mu.Lock()
	defer g.events.mu.Unlock()
	var out []rollout.Event
	for _, ev := range g.events.events {
		if ev.Group == gateGroup && ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// waitEvent waits for an event of kind whose reason has want.
func (g *gateFleet) waitEvent(kind rollout.EventKind, want string) rollout.Event {
	g.t.Helper()
	var found rollout.Event
	natstest.Eventually(g.t, gateWait, func() error {
		for _, ev := range g.eventsOf(kind) {
			if strings.Contains(ev.Reason, want) {
				found = ev
				return nil
			}
		}
		return fmt.Errorf("no %s event with %q yet: %+v", kind, want, g.eventsOf(kind))
	})
	return found
}

// inTimeline checks that the audit timeline (FLEET_AUDIT) holds prod's
// event of kind with want in its reason.
func (g *gateFleet) inTimeline(kind rollout.EventKind, want string) {
	g.t.Helper()
	natstest.Eventually(g.t, waitLong, func() error {
		entries, _, err := g.fleet.ReadTimeline(g.ctx, time.Time{})
		if err != nil {
			return err
		}
		for _, e := range entries {
			if ev := e.Event; ev != nil && ev.Group == gateGroup && ev.Kind == kind && strings.Contains(ev.Reason, want) {
				return nil
			}
		}
		return fmt.Errorf("the timeline has no %s event with %q", kind, want)
	})
}

// TestAnalysisHaltsBadCanaries: a release whose canaries raise the error
// rate halts in canary, the check's name, measured value and query in the
// halt reason, the events and the audit timeline; fleetctl status and the
// controller's metrics show the check's failed measurement; no agent
// beyond the canaries updates.
func TestAnalysisHaltsBadCanaries(t *testing.T) {
	g := newGateFleet(t, errorRateCheck(3, 5))
	g.setRate("2.0.0", badRate)
	g.release("2.0.0")
	st := g.waitGroup("the halt", true, func(st rollout.GroupStatus) bool { return st.Halted })
	want := `analysis failed: check "error-rate" measured 0.3: 0.3 does not meet success < 0.05; query: max(app_error_rate{version="2.0.0"})`
	if st.State != rollout.StateCanary || st.HaltReason != want {
		t.Fatalf("%s halted: %q\nwant canary halted: %q", st.State, st.HaltReason, want)
	}
	g.waitEvent(rollout.EventHalt, want)
	g.waitEvent(rollout.EventAlert, want)
	g.inTimeline(rollout.EventHalt, want)

	checks, notes := g.statusChecks()
	if len(checks) != 1 || checks[0].Result != rollout.ResultFailed || checks[0].Value == nil || *checks[0].Value != badRate {
		t.Errorf("fleetctl status -o json: checks %+v, want error-rate failed at 0.3", checks)
	}
	if !hasLine(notes, `check error-rate: failed: 0.3 does not meet success < 0.05, passed 0 of 3, measured `) {
		t.Errorf("status notes: %q", notes)
	}
	natstest.Eventually(t, waitLong, func() error {
		m, err := scrape(t, g.metricsURL)
		if err != nil {
			return err
		}
		if v := m[`fleetwave_analysis_value{check="error-rate",group="prod"}`]; v != badRate {
			return fmt.Errorf("fleetwave_analysis_value %v, want 0.3", v)
		}
		if n := m[`fleetwave_analysis_measurements_total{app="default",check="error-rate",group="prod",result="failed"}`]; n < 1 {
			return fmt.Errorf("no failed measurement counted")
		}
		return nil
	})
	if n := g.onVersion("2.0.0"); n != 2 {
		t.Errorf("%d agents on 2.0.0, want the 2 canaries", n)
	}
}

// TestAnalysisPromotesGoodRelease: a release that keeps the error rate low
// leaves canary only after the check passed its count (3), and finishes.
func TestAnalysisPromotesGoodRelease(t *testing.T) {
	g := newGateFleet(t, errorRateCheck(3, 5))
	g.setRate("2.0.0", goodRate)
	g.release("2.0.0")
	g.waitGroup("done", false, func(st rollout.GroupStatus) bool { return st.State == rollout.StateDone })
	passed := g.waitEvent(rollout.EventAnalysis, `check "error-rate" passed 3 of 3: 0.001 meets success < 0.05`)
	var toActive *rollout.Event
	for _, ev := range g.eventsOf(rollout.EventTransition) {
		if ev.From == rollout.StateCanary && ev.To == rollout.StateActive {
			toActive = &ev
		}
	}
	if toActive == nil || !strings.Contains(toActive.Reason, "analysis passed: error-rate 3/3") || toActive.At.Before(passed.At) {
		t.Errorf("canary → active %+v, want after the check passed 3 times (%v)", toActive, passed.At)
	}
	if n := g.onVersion("2.0.0"); n != gateAgents {
		t.Errorf("%d of %d agents on 2.0.0", n, gateAgents)
	}
	g.inTimeline(rollout.EventAnalysis, `check "error-rate" passed 3 of 3`)
}

// TestAnalysisHoldsWhilePrometheusDown: Prometheus killed mid-canary (the
// check has passed, not yet its count): the measurements are inconclusive
// and the group holds in canary, visibly and without a halt; Prometheus
// back on the same port and data, the group continues to done.
func TestAnalysisHoldsWhilePrometheusDown(t *testing.T) {
	g := newGateFleet(t, errorRateCheck(10, 60))
	g.setRate("2.0.0", goodRate)
	g.release("2.0.0")
	g.waitGroup("a first pass", false, func(st rollout.GroupStatus) bool {
		return st.State == rollout.StateCanary && len(st.Analysis) == 1 && st.Analysis[0].Passes >= 1
	})
	g.prom.Kill()
	st := g.waitGroup("the hold", false, func(st rollout.GroupStatus) bool {
		return len(st.Analysis) == 1 && st.Analysis[0].Inconclusive >= 3
	})
	if st.State != rollout.StateCanary || !strings.Contains(st.Waiting, `analysis inconclusive: check "error-rate"`) ||
		!strings.Contains(st.Analysis[0].Detail, "unreachable") {
		t.Fatalf("%s waiting %q, check %+v: want canary, waiting on the inconclusive check, Prometheus unreachable", st.State, st.Waiting, st.Analysis[0])
	}
	g.waitEvent(rollout.EventAnalysis, `check "error-rate" inconclusive (Prometheus `+g.prom.URL+` unreachable`)
	_, notes := g.statusChecks()
	if !hasLine(notes, `check error-rate: inconclusive, `) || !hasLine(notes, `waiting: analysis inconclusive: check "error-rate"`) {
		t.Errorf("status notes: %q", notes)
	}
	passesBefore := st.Analysis[0].Passes

	g.prom.Restart()
	g.waitEvent(rollout.EventAnalysis, `check "error-rate" conclusive again after`)
	st = g.waitGroup("done", false, func(st rollout.GroupStatus) bool { return st.State == rollout.StateDone })
	if c := st.Analysis[0]; c.Passes < 10 || c.Passes <= passesBefore || c.Inconclusive != 0 {
		t.Errorf("check after the outage: %+v", c)
	}
	g.inTimeline(rollout.EventAnalysis, `check "error-rate" inconclusive`)
}

// TestAnalysisInconclusiveLimitHalts: Prometheus killed mid-canary and
// left down: after inconclusive_limit inconclusive measurements in a row
// the group halts with "analysis inconclusive".
func TestAnalysisInconclusiveLimitHalts(t *testing.T) {
	g := newGateFleet(t, errorRateCheck(10, 3))
	g.setRate("2.0.0", goodRate)
	g.release("2.0.0")
	g.waitGroup("a first pass", false, func(st rollout.GroupStatus) bool {
		return len(st.Analysis) == 1 && st.Analysis[0].Passes >= 1
	})
	g.prom.Kill()
	st := g.waitGroup("the halt", true, func(st rollout.GroupStatus) bool { return st.Halted })
	want := `analysis inconclusive: check "error-rate", 3 inconclusive measurements in a row (inconclusive_limit 3), last: Prometheus ` + g.prom.URL + ` unreachable`
	if st.State != rollout.StateCanary || !strings.HasPrefix(st.HaltReason, want) {
		t.Fatalf("%s halted: %q\nwant canary halted: %q…", st.State, st.HaltReason, want)
	}
	g.waitEvent(rollout.EventHalt, want)
}

// TestAnalysisHaltsInActive: a release that passes in canary and raises
// the error rate once the group is active halts in active.
func TestAnalysisHaltsInActive(t *testing.T) {
	g := newGateFleet(t, errorRateCheck(2, 5))
	g.setRate("2.0.0", goodRate)
	// The group stays in active: only the canaries and two more agents
	// update.
	g.mu.Lock()
	g.limit = 4
	g.mu.Unlock()
	g.release("2.0.0")
	g.waitGroup("active", false, func(st rollout.GroupStatus) bool { return st.State == rollout.StateActive })
	g.setRate("2.0.0", badRate)
	st := g.waitGroup("the halt", true, func(st rollout.GroupStatus) bool { return st.Halted || st.State == rollout.StateDone })
	if st.State != rollout.StateActive || !strings.HasPrefix(st.HaltReason, `analysis failed: check "error-rate" measured 0.3`) {
		t.Fatalf("%s halted=%v: %q; want active, halted by the check", st.State, st.Halted, st.HaltReason)
	}
}

func hasLine(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
