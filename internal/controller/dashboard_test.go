package controller_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// dashEnv is a dashboard on a running controller, served through the
// controller's HTTP handler as "controller run --http-addr" serves it.
type dashEnv struct {
	f      *fixture
	rc     *runningController
	mirror *controller.PlanMirror
	dash   *controller.Dashboard
	// ticker paces the dashboard's pushes: a clock of its own, so that the
	// fixture's clock counts only the agents' and controllers' timers.
	ticker  *clock.Manual
	handler http.Handler
}

// startDashboard follows the plan with a mirror and runs a dashboard on rc
// until the test ends.
func (f *fixture) startDashboard(rc *runningController) *dashEnv {
	f.t.Helper()
	mirror := &controller.PlanMirror{NC: f.srv.Conn("mirror"), Store: &httpfind.Store{}, Log: natstest.Logger(f.t)}
	rc.c.ServePlanFrom(mirror)
	e := &dashEnv{f: f, rc: rc, mirror: mirror, ticker: clock.NewManual(time.Now())}
	e.dash = &controller.Dashboard{C: rc.c, Mirror: mirror, Ticker: e.ticker, Log: natstest.Logger(f.t)}
	e.handler = rc.c.HTTPHandler(&httpfind.Handler{Store: mirror.Store, Ready: mirror.Ready}, e.dash)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{}, 2)
	go func() { _ = mirror.Run(ctx); done <- struct{}{} }()
	go func() { _ = e.dash.Run(ctx); done <- struct{}{} }()
	f.t.Cleanup(func() { cancel(); <-done; <-done })
	return e
}

// serve serves the dashboard with httptest until the test ends.
func (e *dashEnv) serve() *httptest.Server {
	srv := httptest.NewServer(e.handler)
	e.f.t.Cleanup(srv.Close)
	return srv
}

// push makes the dashboard's loop run one pass: read the timeline, push
// the numbers to the open streams.
func (e *dashEnv) push() {
	e.f.t.Helper()
	if !e.ticker.WaitPending(1, timeout(waitLong)) {
		e.f.t.Fatal("the dashboard's loop did not arm its timer")
	}
	e.ticker.Advance(controller.DefaultUIRefresh)
}

// getJSON GETs url, checks the status code and decodes the body into v.
func getJSON(t *testing.T, url string, code int, v any) {
	t.Helper()
	got, ct, body := httpGet(t, url)
	if got != code {
		t.Fatalf("GET %s: %d, want %d: %s", url, got, code, body)
	}
	if ct != "application/json" {
		t.Fatalf("GET %s: Content-Type %q, want application/json", url, ct)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v\n%s", url, err, body)
	}
}

// TestDashboardStatusIsFleetctlStatus (issue 14 point 3): through a rollout
// (canary, active, done), /api/v1/status holds the report "fleetctl status
// -o json" prints at the same clock instant, and the rows and header
// fleetctl status and watch print from it: one source of truth.
func TestDashboardStatusIsFleetctlStatus(t *testing.T) {
	f := newFixture(t)
	cfg := rollout.DefaultConfig()
	prod := rollout.DefaultGroup("prod")
	prod.CanaryCount, prod.MaxInFlight = 1, 50
	prod.MinHealthyTime = rollout.Duration(20 * time.Second)
	cfg.Groups = []rollout.GroupConfig{prod}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	rc := f.startController("c1")
	srv := f.startDashboard(rc).serve()
	for range 4 {
		f.startAgent("prod", "1.0.0", false)
	}
	f.startAgent("prod", "0.9.0", true) // rolled back from 9.9.9
	f.waitHeard(rc.c, time.Time{})
	f.step(interval) // every agent established
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true // the test's clock may be outside the start windows
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}

	seen := map[rollout.State]bool{}
	for round := 0; round < 30 && !seen[rollout.StateDone]; round++ {
		f.advance(reconcileEvery)
		f.statusAtNow()
		now := f.clk.Now()
		var ov controller.Overview
		natstest.Eventually(t, waitLong, func() error {
			ov = controller.Overview{}
			getJSON(t, srv.URL+controller.PathAPIStatus, http.StatusOK, &ov)
			want := f.status()
			if !ov.At.Equal(now) {
				return fmt.Errorf("numbers at %v, want the clock's %v", ov.At, now)
			}
			if diff := cmp.Diff(want, ov.Status); diff != "" {
				return fmt.Errorf("/api/v1/status differs from fleetctl status -o json (-fleetctl +dashboard):\n%s", diff)
			}
			if diff := cmp.Diff(view.Rows(want, &cfg, now), ov.Rows); diff != "" {
				return fmt.Errorf("rows differ from fleetctl's (-fleetctl +dashboard):\n%s", diff)
			}
			if want.Plan != nil {
				if ov.Header == nil {
					return errors.New("no header, and fleetctl status has a plan")
				}
				if diff := cmp.Diff(view.Header(want), *ov.Header); diff != "" {
					return fmt.Errorf("header differs from fleetctl's (-fleetctl +dashboard):\n%s", diff)
				}
			}
			return nil
		})
		if !ov.Leader || ov.Controller != "c1" || ov.Agents != 5 || ov.Ready != "" {
			t.Errorf("overview: controller %q leader %v agents %d ready %q; want c1, true, 5, \"\"", ov.Controller, ov.Leader, ov.Agents, ov.Ready)
		}
		if len(ov.Versions) != 1 || ov.Versions[0].Group != "prod" || ov.Versions[0].Agents != 5 {
			t.Errorf("versions: %+v, want prod with 5 agents", ov.Versions)
		}
		if len(ov.Status.Groups) == 1 && ov.Status.Groups[0].Rollout != nil {
			seen[ov.Status.Groups[0].Rollout.State] = true
		}
		state, err := f.fleet.ReadState(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if f.obey(state) > 0 {
			f.waitVersions(rc)
		}
	}
	if !seen[rollout.StateCanary] || !seen[rollout.StateActive] || !seen[rollout.StateDone] {
		t.Errorf("the rollout went through %v; want canary, active and done", seen)
	}
}

// testAgent is a heartbeat the agents tests publish themselves, so that
// host names, errors and installs are what the test needs.
type testAgent struct {
	hb    heartbeat.Heartbeat
	class string
}

// publishHeartbeats publishes one heartbeat per agent, at the clock's
// current time, and waits until rc has heard all of them.
func (f *fixture) publishHeartbeats(rc *runningController, agents []*testAgent) {
	f.t.Helper()
	js := f.srv.JetStream("agents")
	for _, a := range agents {
		a.hb.V, a.hb.At = 1, f.clk.Now().UTC()
		data, err := json.Marshal(a.hb)
		if err != nil {
			f.t.Fatal(err)
		}
		if _, err := js.Publish(f.ctx, heartbeat.SubjectFor(a.hb.Group, a.hb.AgentID), data); err != nil {
			f.t.Fatal(err)
		}
	}
	now := f.clk.Now()
	natstest.Eventually(f.t, waitLong, func() error {
		for _, a := range agents {
			got, ok := rc.c.Inventory().Lookup(a.hb.AgentID, now)
			if !ok || got.LastSeen.Before(now) {
				return fmt.Errorf("agent %s not heard at %v", a.hb.AgentID, now)
			}
		}
		return nil
	})
}

// agentsFleet is 14 agents in two groups, on three versions, in every
// class, with host names in mixed case.
func agentsFleet(t *testing.T) (unreachable, rest []*testAgent) {
	t.Helper()
	add := func(list *[]*testAgent, group, version, host, class string) {
		id, err := rollout.NewAgentID(nil)
		if err != nil {
			t.Fatal(err)
		}
		a := &testAgent{hb: heartbeat.Heartbeat{AgentID: id, Group: group, Hostname: host, ActiveVersion: version}, class: class}
		switch class {
		case view.AgentUpdating:
			a.hb.UpdatingTo, a.hb.StartVersion = "2.0.0", version
		case view.AgentFailed:
			a.hb.Error = "health check failed"
			a.hb.ErrorOutput = "listening on :8080\npanic: open /etc/app.conf: no such file\n<b>\u202eevil"
		case view.AgentBlocked:
			a.hb.Error, a.hb.ErrorClass, a.hb.ErrorCause = "download 2.0.0: HTTP 503", heartbeat.ClassInfrastructure, "release site: HTTP 503"
		case view.AgentRolledBack:
			a.hb.Rollback, a.hb.RollbackFrom = true, "2.0.0"
		}
		*list = append(*list, a)
	}
	add(&unreachable, "blue", "1.0.0", "Web-07.Example.COM", view.AgentUnreachable)
	add(&unreachable, "green", "2.0.0", "db-02.internal", view.AgentUnreachable)
	for _, c := range []struct{ group, version, host, class string }{
		{"blue", "1.0.0", "Web-01.Example.COM", view.AgentOK},
		{"blue", "1.0.0", "web-02.example.com", view.AgentOK},
		{"blue", "2.0.0", "WEB-03.EXAMPLE.COM", view.AgentOK},
		{"blue", "1.0.0", "web-04.example.com", view.AgentUpdating},
		{"blue", "1.0.0", "web-05.example.com", view.AgentFailed},
		{"blue", "1.5.0", "web-06.example.com", view.AgentRolledBack},
		{"green", "1.0.0", "db-01.internal", view.AgentOK},
		{"green", "2.0.0", "DB-03.internal", view.AgentOK},
		{"green", "2.0.0", "db-04.internal", view.AgentFailed},
		{"green", "1.5.0", "db-05.internal", view.AgentUpdating},
		{"green", "1.0.0", "db-06.internal", view.AgentRolledBack},
		{"green", "1.0.0", "db-07.internal", view.AgentBlocked},
	} {
		add(&rest, c.group, c.version, c.host, c.class)
	}
	return unreachable, rest
}

// TestDashboardAgents: /api/v1/agents filters the inventory by group,
// version, state (the agent's class) and q (a substring of the id or host
// name, any case), sorted by group then id, and pages it; a page past the
// last is the last. Bad input is a JSON 400 that names the parameter, and
// changes nothing.
func TestDashboardAgents(t *testing.T) {
	f := newFixture(t)
	rc := f.startController("c1")
	srv := f.startDashboard(rc).serve()
	unreachable, rest := agentsFleet(t)
	// Two agents beat, then fall silent for longer than three intervals
	// (rollout.UnreachableAfter); the others beat now.
	f.publishHeartbeats(rc, unreachable)
	f.advance(rollout.UnreachableAfter(interval) + time.Second)
	f.publishHeartbeats(rc, rest)
	all := append(slices.Clone(unreachable), rest...)
	slices.SortFunc(all, func(a, b *testAgent) int {
		return strings.Compare(a.hb.Group+"/"+string(a.hb.AgentID), b.hb.Group+"/"+string(b.hb.AgentID))
	})
	ids := func(list []*testAgent) []rollout.AgentID {
		out := []rollout.AgentID{}
		for _, a := range list {
			out = append(out, a.hb.AgentID)
		}
		return out
	}
	where := func(keep func(a *testAgent) bool) []rollout.AgentID {
		var out []*testAgent
		for _, a := range all {
			if keep(a) {
				out = append(out, a)
			}
		}
		return ids(out)
	}
	page := func(query string) controller.AgentsPage {
		t.Helper()
		var p controller.AgentsPage
		getJSON(t, srv.URL+controller.PathAPIAgents+query, http.StatusOK, &p)
		return p
	}
	pageIDs := func(p controller.AgentsPage) []rollout.AgentID {
		out := []rollout.AgentID{}
		for _, a := range p.Agents {
			out = append(out, a.ID)
		}
		return out
	}
	// An id's last 12 hex digits in capitals: q ignores case on ids too.
	someID := string(rest[4].hb.AgentID)
	idQuery := strings.ToUpper(someID[len(someID)-12:])

	for _, tc := range []struct {
		name, query string
		want        []rollout.AgentID
	}{
		{"all", "", ids(all)},
		{"group", "?group=green", where(func(a *testAgent) bool { return a.hb.Group == "green" })},
		{"version", "?version=2.0.0", where(func(a *testAgent) bool { return a.hb.ActiveVersion == "2.0.0" })},
		{"group and version", "?group=blue&version=1.0.0", where(func(a *testAgent) bool { return a.hb.Group == "blue" && a.hb.ActiveVersion == "1.0.0" })},
		{"unknown group", "?group=nope", []rollout.AgentID{}},
		{"q host any case", "?q=EXAMPLE.com", where(func(a *testAgent) bool { return strings.HasSuffix(strings.ToLower(a.hb.Hostname), "example.com") })},
		{"q host lower", "?q=.internal", where(func(a *testAgent) bool { return a.hb.Group == "green" })},
		{"q id in capitals", "?q=" + idQuery, []rollout.AgentID{rest[4].hb.AgentID}},
		{"q trimmed", "?q=%20web-03%20", where(func(a *testAgent) bool { return a.hb.Hostname == "WEB-03.EXAMPLE.COM" })},
		{"q no match", "?q=zzz", []rollout.AgentID{}},
		{"q and group", "?q=internal&group=blue", []rollout.AgentID{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := page(tc.query)
			if diff := cmp.Diff(tc.want, pageIDs(p)); diff != "" {
				t.Errorf("agents%s (-want +got):\n%s", tc.query, diff)
			}
			if p.Total != len(tc.want) || p.Page != 1 || p.Pages != 1 || p.PerPage != 50 {
				t.Errorf("total %d page %d of %d per %d; want %d, 1 of 1 per 50", p.Total, p.Page, p.Pages, p.PerPage, len(tc.want))
			}
		})
	}
	for _, class := range view.AgentClasses {
		p := page("?state=" + class)
		want := where(func(a *testAgent) bool { return a.class == class })
		if len(want) == 0 {
			t.Fatalf("the fleet has no %s agent", class)
		}
		if diff := cmp.Diff(want, pageIDs(p)); diff != "" {
			t.Errorf("agents?state=%s (-want +got):\n%s", class, diff)
		}
		for _, a := range p.Agents {
			if a.Class != class {
				t.Errorf("agents?state=%s: %s has class %s", class, a.ID, a.Class)
			}
		}
	}

	// The rows: what fleetctl agents ls shows, and the filters' choices.
	p := page("?q=web-04")
	if len(p.Agents) != 1 {
		t.Fatalf("q=web-04: %d agents, want 1", len(p.Agents))
	}
	a := p.Agents[0]
	if a.Group != "blue" || a.Hostname != "web-04.example.com" || a.Version != "1.0.0" || a.Class != view.AgentUpdating ||
		a.State != "updating → 2.0.0" || !a.LastSeen.Equal(f.clk.Now()) || a.Seen != view.Age(f.clk.Now(), f.clk.Now()) || a.Established {
		t.Errorf("row of web-04: %+v", a)
	}
	// A failed agent's row carries why (error) and its app's last lines
	// (output), as its heartbeat sent them: the page escapes them.
	if p := page("?q=web-05"); len(p.Agents) != 1 || p.Agents[0].Error != "health check failed" ||
		p.Agents[0].Output != "listening on :8080\npanic: open /etc/app.conf: no such file\n<b>\u202eevil" {
		t.Errorf("row of web-05, which failed: %+v", p.Agents)
	}
	if p := page("?q=web-01"); len(p.Agents) != 1 || p.Agents[0].Output != "" {
		t.Errorf("row of web-01, which is fine: %+v", p.Agents)
	}
	if diff := cmp.Diff([]string{"2.0.0", "1.5.0", "1.0.0"}, p.Versions); diff != "" {
		t.Errorf("versions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"blue", "green"}, p.Groups); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}

	// Pages of 5 of 14 agents: 5, 5, 4; past the last, the last.
	allIDs := ids(all)
	for _, tc := range []struct {
		query      string
		page       int
		start, end int
	}{
		{"?per_page=5", 1, 0, 5},
		{"?per_page=5&page=2", 2, 5, 10},
		{"?per_page=5&page=3", 3, 10, 14},
		{"?per_page=5&page=4", 3, 10, 14},
		{"?per_page=5&page=999999999", 3, 10, 14},
		{"?per_page=500&page=2", 1, 0, 14},
		{"?per_page=3&page=2&group=blue", 2, 3, 6},
	} {
		p := page(tc.query)
		want := allIDs[tc.start:tc.end]
		total, per := 14, 5
		switch tc.query {
		case "?per_page=500&page=2":
			per = 500
		case "?per_page=3&page=2&group=blue":
			blue := where(func(a *testAgent) bool { return a.hb.Group == "blue" })
			want, total, per = blue[tc.start:tc.end], len(blue), 3
		}
		pages := (total + per - 1) / per
		if diff := cmp.Diff(want, pageIDs(p)); diff != "" {
			t.Errorf("agents%s (-want +got):\n%s", tc.query, diff)
		}
		if p.Total != total || p.Page != tc.page || p.Pages != pages || p.PerPage != per {
			t.Errorf("agents%s: total %d page %d of %d per %d; want %d, %d of %d per %d",
				tc.query, p.Total, p.Page, p.Pages, p.PerPage, total, tc.page, pages, per)
		}
	}

	// Bad input: a JSON 400 naming the parameter, and the inventory and
	// the listing unchanged.
	before := rawGet(t, srv.URL+controller.PathAPIAgents)
	for _, tc := range []struct{ query, names string }{
		{"?state=bogus", "state"},
		{"?state=OK", "state"},
		{"?page=0", "page"},
		{"?page=-1", "page"},
		{"?page=x", "page"},
		{"?page=1.5", "page"},
		{"?per_page=10000", "per_page"},
		{"?per_page=0", "per_page"},
		{"?q=" + strings.Repeat("a", 257), "q"},
		{"?group=" + strings.Repeat("g", 257), "group"},
		{"?version=" + strings.Repeat("1", 257), "version"},
	} {
		var e struct{ Error string }
		getJSON(t, srv.URL+controller.PathAPIAgents+tc.query, http.StatusBadRequest, &e)
		if !strings.HasPrefix(e.Error, tc.names) {
			t.Errorf("agents%.40s: error %q, want it to name %s", tc.query, e.Error, tc.names)
		}
	}
	// Several bad parameters: the error names the first, in the order
	// group, version, state, q, page, per_page, the same every time.
	long := strings.Repeat("x", 257)
	for _, tc := range []struct{ query, names string }{
		{"?q=" + long + "&version=" + long + "&group=" + long, "group"},
		{"?q=" + long + "&version=" + long, "version"},
		{"?per_page=y&page=x", "page"},
		{"?per_page=0&state=bogus&page=0", "state"},
	} {
		for range 20 {
			var e struct{ Error string }
			getJSON(t, srv.URL+controller.PathAPIAgents+tc.query, http.StatusBadRequest, &e)
			if !strings.HasPrefix(e.Error, tc.names+" ") && !strings.HasPrefix(e.Error, tc.names+":") {
				t.Fatalf("agents%.60s…: error %q, want it to name %s", tc.query, e.Error, tc.names)
			}
		}
	}
	if after := rawGet(t, srv.URL+controller.PathAPIAgents); after != before {
		t.Errorf("the listing changed after bad requests:\nbefore %s\nafter  %s", before, after)
	}
	if n := rc.c.Inventory().Len(); n != len(all) {
		t.Errorf("inventory holds %d agents after bad requests, want %d", n, len(all))
	}
}

// rawGet is the body of a GET that must answer 200.
func rawGet(t *testing.T, url string) string {
	t.Helper()
	code, _, body := httpGet(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d: %s", url, code, body)
	}
	return body
}

// dashboardPaths are every path the dashboard serves.
var dashboardPaths = []string{
	controller.PathUI, "/ui/app.js", "/ui/style.css", "/ui/index.html", controller.PathAPIStatus,
	controller.PathAPIAgents, controller.PathAPIHistory, controller.PathAPIStream, "/api/v1/nope",
}

// TestDashboardReadOnly: the dashboard answers only GET and HEAD (405 with
// Allow otherwise, and the security headers on every answer), an unknown
// /api/ path is a JSON 404, and /ui/ serves only the embedded web/ files,
// whatever dots or escapes the path holds.
func TestDashboardReadOnly(t *testing.T) {
	f := newFixture(t)
	rc := f.startController("c1")
	srv := f.startDashboard(rc).serve()
	do := func(method, path string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(`{"mode":"disabled"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(body)
	}
	secure := func(what string, h http.Header) {
		t.Helper()
		for name, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
			if got := h.Get(name); got != want {
				t.Errorf("%s: %s %q, want %q", what, name, got, want)
			}
		}
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "connect-src 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: Content-Security-Policy %q lacks %q", what, csp, want)
			}
		}
	}
	for _, path := range dashboardPaths {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			resp, body := do(method, path)
			what := method + " " + path
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("%s: %s, want 405: %s", what, resp.Status, body)
			}
			if got := resp.Header.Get("Allow"); got != "GET, HEAD" {
				t.Errorf("%s: Allow %q, want \"GET, HEAD\"", what, got)
			}
			if !strings.Contains(body, "read-only") {
				t.Errorf("%s: body %q does not say the dashboard is read-only", what, body)
			}
			secure(what, resp.Header)
		}
	}
	for path, ct := range map[string]string{
		controller.PathUI:         "text/html; charset=utf-8",
		"/ui/index.html":          "text/html; charset=utf-8",
		"/ui/app.js":              "text/javascript; charset=utf-8",
		"/ui/style.css":           "text/css; charset=utf-8",
		controller.PathAPIStatus:  "application/json",
		controller.PathAPIAgents:  "application/json",
		controller.PathAPIHistory: "application/json",
	} {
		resp, body := do(http.MethodGet, path)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != ct || body == "" {
			t.Errorf("GET %s: %s, Content-Type %q, %d bytes; want 200, %q", path, resp.Status, resp.Header.Get("Content-Type"), len(body), ct)
		}
		secure("GET "+path, resp.Header)
		resp, body = do(http.MethodHead, path)
		if resp.StatusCode != http.StatusOK || body != "" {
			t.Errorf("HEAD %s: %s with %d bytes, want 200 and no body", path, resp.Status, len(body))
		}
	}
	// Lists are lists, even empty ones (the page iterates over them).
	for _, path := range []string{controller.PathAPIHistory, controller.PathAPIAgents, controller.PathAPIStatus} {
		if _, body := do(http.MethodGet, path); strings.Contains(body, "null") {
			t.Errorf("GET %s on an empty bus has a null: %s", path, body)
		}
	}
	if _, body := do(http.MethodGet, "/"); !strings.Contains(body, "/ui/app.js") {
		t.Errorf("GET / is not the page: %.200s", body)
	}

	notFound := func(path, what string) {
		t.Helper()
		resp, body := do(http.MethodGet, path)
		var e struct{ Error string }
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
			t.Errorf("GET %s (%s): %s, Content-Type %q, body %.200q; want a JSON 404", path, what, resp.Status, resp.Header.Get("Content-Type"), body)
		}
		if strings.Contains(body, "package ") || strings.Contains(body, "module ") || strings.Contains(body, "root:") {
			t.Errorf("GET %s (%s) read a file outside web/: %.200q", path, what, body)
		}
		secure("GET "+path, resp.Header)
	}
	notFound("/api/v1/nope", "unknown API path")
	notFound("/api/", "API root")
	notFound("/api/v2/status", "unknown API version")
	for _, path := range []string{
		"/ui/../dashboard.go", "/ui/%2e%2e/dashboard.go", "/ui/..%2fdashboard.go", "/ui/%2E%2E%2Fdashboard.go",
		"/ui/../../../go.mod", "/ui/%2e%2e/%2e%2e/%2e%2e/go.mod", "/ui/..%5cdashboard.go", "/ui/....//dashboard.go",
		"/ui//etc/passwd", "/ui/%2fetc%2fpasswd", "/ui/web/../../dashboard.go", "/ui/", "/ui/nope.js", "/ui/app.js%00.css",
	} {
		notFound(path, "outside web/")
	}
	// Dots cleaned by the client never reach the server as dots: check
	// what a raw request line does.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprint(conn, "GET /ui/../dashboard.go HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(raw), "HTTP/1.1 404 ") || strings.Contains(string(raw), "package controller") {
		t.Errorf("raw GET /ui/../dashboard.go: %.300q, want a 404", raw)
	}
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	name string
	data []byte
}

// stream GETs /api/v1/stream from base and returns its events until the
// body ends (the channel is then closed) and a function that closes it.
func stream(t *testing.T, client *http.Client, base string) (<-chan sseEvent, func()) {
	t.Helper()
	return streamQuery(t, client, base, "")
}

// streamQuery is stream with query ("?app=db") after the stream's path.
func streamQuery(t *testing.T, client *http.Client, base, query string) (<-chan sseEvent, func()) {
	t.Helper()
	resp, err := openStreamQuery(client, base, query)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %s: %s", controller.PathAPIStream, resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("stream Content-Type %q, want text/event-stream", ct)
	}
	ch := make(chan sseEvent, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 16<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"): // a comment: keepalive
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = append(ev.data, strings.TrimPrefix(line, "data: ")...)
			}
		}
	}()
	var closed bool
	return ch, func() {
		if !closed {
			closed = true
			resp.Body.Close()
		}
	}
}

func openStream(client *http.Client, base string) (*http.Response, error) {
	return openStreamQuery(client, base, "")
}

func openStreamQuery(client *http.Client, base, query string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, base+controller.PathAPIStream+query, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	return client.Do(req)
}

// next waits for the next event called name on ch (skipping others) and
// decodes it into v. The stream ending first fails the test.
func next(t *testing.T, ch <-chan sseEvent, name string, v any) {
	t.Helper()
	deadline := time.After(waitLong)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended while waiting for a %q event", name)
			}
			if ev.name != name {
				continue
			}
			if err := json.Unmarshal(ev.data, v); err != nil {
				t.Fatalf("%s event: %v\n%s", name, err, ev.data)
			}
			return
		case <-deadline:
			t.Fatalf("no %q event within %v", name, waitLong)
		}
	}
}

// TestDashboardStream: /api/v1/stream sends the numbers at once, each new
// entry of the audit trail (an operator's write, a rollout event) as a
// "timeline" event, and fresh numbers on every push.
func TestDashboardStream(t *testing.T) {
	f := newFixture(t)
	rc := f.startController("c1")
	e := f.startDashboard(rc)
	srv := e.serve()
	ch, closeStream := stream(t, srv.Client(), srv.URL)
	defer closeStream()
	var ov controller.Overview
	next(t, ch, "status", &ov)
	if ov.Controller != "c1" || ov.Agents != 0 || !ov.At.Equal(f.clk.Now()) {
		t.Errorf("first status: controller %q, %d agents, at %v; want c1, 0, %v", ov.Controller, ov.Agents, ov.At, f.clk.Now())
	}

	// An operator's write, then a rollout event.
	rec := kv.AuditRecord{V: 1, At: f.clk.Now().UTC(), Actor: "alice", Reason: "night freeze", Command: "pause", Group: "prod",
		Bucket: kv.BucketPlan, Key: "group.prod"}
	if err := f.fleet.PublishAudit(f.ctx, rec); err != nil {
		t.Fatal(err)
	}
	e.push()
	var row view.TimelineRow
	next(t, ch, "timeline", &row)
	if row.Kind != view.KindAudit || row.Actor != "alice" || row.What != "pause" || row.Group != "prod" || row.Reason != "night freeze" {
		t.Errorf("timeline event for the audit record: %+v", row)
	}
	ev := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventTransition, From: rollout.StateCanary, To: rollout.StateActive,
		Reason: "canaries healthy", At: f.clk.Now().UTC()}
	data, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.JetStream("events").Publish(f.ctx, kv.EventSubject("prod"), data); err != nil {
		t.Fatal(err)
	}
	e.push()
	next(t, ch, "timeline", &row)
	if row.Kind != view.KindEvent || row.Group != "prod" || row.Change != "canary → active" || row.Reason != "canaries healthy" {
		t.Errorf("timeline event for the rollout event: %+v", row)
	}
	var tl []view.TimelineRow
	getJSON(t, srv.URL+controller.PathAPIHistory, http.StatusOK, &tl)
	if len(tl) != 2 || tl[0].Actor != "alice" || tl[1].Kind != view.KindEvent {
		t.Errorf("/api/v1/timeline: %+v, want the record then the event", tl)
	}

	// A new agent: the next push counts it.
	id, _ := rollout.NewAgentID(nil)
	f.publishHeartbeats(rc, []*testAgent{{hb: heartbeat.Heartbeat{AgentID: id, Group: "prod", Hostname: "h", ActiveVersion: "1.0.0"}}})
	e.push()
	for ov.Agents != 1 { // a push already under way may still say 0
		next(t, ch, "status", &ov)
	}
}

// TestDashboardStreamOutlivesServerTimeouts: served by httpfind.Server (as
// "controller run --http-addr" serves it), whose read and write timeouts are
// 10 s, a stream still delivers after 11 s. Slow by nature (the timeouts
// are constants of the server): it runs in parallel with the others.
func TestDashboardStreamOutlivesServerTimeouts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rc := f.startController("c1")
	e := f.startDashboard(rc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	served := make(chan error, 1)
	go func() { served <- (&httpfind.Server{Handler: e.handler, Log: natstest.Logger(t)}).Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{}}
	ch, closeStream := stream(t, client, base)
	defer closeStream()
	start := time.Now()
	var ov controller.Overview
	next(t, ch, "status", &ov)
	const past = 11 * time.Second
	quiet := time.NewTimer(past - time.Since(start))
	defer quiet.Stop()
	for waiting := true; waiting; {
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended after %v, before %v", time.Since(start).Round(time.Millisecond), past)
			}
		case <-quiet.C:
			waiting = false
		}
	}
	e.push()
	next(t, ch, "status", &ov)
}

// TestDashboardStreamLimit: past maxStreams (256) pages following at once,
// the next is a JSON 503 with Retry-After, and once one leaves another gets
// in. The pages come from 16 addresses, 16 each (an address may hold 16:
// TestDashboardStreamPerClient), the 257th from a 17th.
func TestDashboardStreamLimit(t *testing.T) {
	const maxStreams, perClient = 256, 16
	f := newFixture(t)
	rc := f.startController("c1")
	srv := f.startDashboard(rc).serve()
	clients := make([]*http.Client, maxStreams/perClient)
	for i := range clients {
		clients[i] = clientFrom(t, fmt.Sprintf("127.0.1.%d", i+1))
	}
	closers := make([]func(), 0, maxStreams)
	t.Cleanup(func() {
		for _, c := range closers {
			c()
		}
	})
	for i := range maxStreams {
		ch, c := stream(t, clients[i/perClient], srv.URL)
		closers = append(closers, c)
		var ov controller.Overview
		next(t, ch, "status", &ov)
		go func() { // every open stream gets every push: keep reading
			for range ch {
			}
		}()
	}
	another := clientFrom(t, "127.0.2.1")
	if err := refusedStream(another, srv.URL, "256 pages follow this controller already; try again later"); err != nil {
		t.Fatalf("stream %d: %v", maxStreams+1, err)
	}
	closers[0]()
	natstest.Eventually(t, waitLong, func() error {
		resp, err := openStream(another, srv.URL)
		if err != nil {
			return err
		}
		closers = append(closers, func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("after one page left: %s", resp.Status)
		}
		return nil
	})
	if err := refusedStream(clients[0], srv.URL, "try again later"); err != nil {
		t.Errorf("full again: %v", err)
	}
}

// TestRunDashboardOnSecuredBus is "controller run --http-addr" on a bus
// that needs credentials (--creds, operator mode): on a non-loopback
// address without TLS the dashboard's paths answer 403 with the reason and
// the fix (and the log says so), while /metrics and /v1/find are served; on
// 127.0.0.1, or with --ui-insecure, the page is served; --ui=false leaves
// / to the find handler (its JSON 404).
func TestRunDashboardOnSecuredBus(t *testing.T) {
	dir := auth.Dir{Path: t.TempDir()}
	if _, err := dir.Init("test", auth.DefaultJetStreamLimits); err != nil {
		t.Fatal(err)
	}
	srv := natstest.StartConfig(t, filepath.Join(dir.Path, auth.FileResolverConf))
	creds := filepath.Join(dir.Path, auth.CredsFile(auth.UserController))
	js := func(user string) jetstream.JetStream {
		nc, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{URL: srv.URL(), Name: "test " + user,
			Creds: filepath.Join(dir.Path, auth.CredsFile(user)), Log: natstest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return js
	}
	if _, err := kv.Ensure(t.Context(), js(auth.UserController), kv.Options{}); err != nil {
		t.Fatal(err)
	}
	fleet, err := kv.Open(t.Context(), js(auth.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("prod")}
	if _, err := kv.Save(t.Context(), fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Save(t.Context(), fleet.Plan, kv.KeySpec, rollout.DefaultSpec("1.0.0", "2.0.0"), 0); err != nil {
		t.Fatal(err)
	}
	const host = "1b4e28ba-2fa1-4d2e-883f-0016d3cca427"

	for _, tc := range []struct {
		name     string
		bind     string
		creds    bool
		ui       bool
		insecure bool
		// page is the status of GET /; refused: a 403 naming the fix.
		page    int
		refused bool
		logs    string
	}{
		{"secured, all interfaces, no TLS", "0.0.0.0", true, true, false, http.StatusForbidden, true, "dashboard not served"},
		{"secured, loopback", "127.0.0.1", true, true, false, http.StatusOK, false, "dashboard on http://127.0.0.1:"},
		{"secured, all interfaces, --ui-insecure", "0.0.0.0", true, true, true, http.StatusOK, false, "dashboard on http://localhost:"},
		{"not secured, all interfaces", "0.0.0.0", false, true, false, http.StatusOK, false, "dashboard on http://localhost:"},
		{"--ui=false", "0.0.0.0", true, false, false, http.StatusNotFound, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := natstest.FreePort(t)
			o := runOptions()
			o.NATSURL, o.HTTPAddr, o.UI, o.UIInsecure = srv.URL(), fmt.Sprintf("%s:%d", tc.bind, port), tc.ui, tc.insecure
			if tc.creds {
				o.Creds = creds
			} else {
				o.Creds = ""
			}
			var logs natstest.Buffer
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			if !tc.creds {
				// No --creds: a bus of its own, without authentication.
				o.NATSURL = natstest.Start(t).URL()
			}
			go func() { done <- controller.Run(ctx, &o, slog.New(slog.NewTextHandler(&logs, nil))) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("controller run: %v", err)
				}
				if t.Failed() {
					t.Logf("controller log:\n%s", logs.String())
				}
			})
			base := fmt.Sprintf("http://127.0.0.1:%d", port)
			natstest.Eventually(t, waitLong, func() error {
				select {
				case err := <-done:
					t.Fatalf("controller run ended: %v", err)
				default:
				}
				resp, err := http.Get(base + controller.PathMetrics)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("GET /metrics: %s", resp.Status)
				}
				return nil
			})
			get := func(path string) (code int, body string) {
				t.Helper()
				code, _, body = httpGet(t, base+path)
				return code, body
			}
			code, body := get(controller.PathUI)
			if code != tc.page {
				t.Errorf("GET /: %d, want %d: %.300s", code, tc.page, body)
			}
			switch {
			case tc.refused:
				for _, want := range []string{"not served", "--http-tls-cert", "127.0.0.1", "--ui-insecure", o.HTTPAddr} {
					if !strings.Contains(body, want) {
						t.Errorf("GET / refused with %q: does not say %q", body, want)
					}
				}
				for _, path := range []string{"/ui/app.js", controller.PathAPIStatus, controller.PathAPIAgents, controller.PathAPIStream} {
					if code, body := get(path); code != http.StatusForbidden {
						t.Errorf("GET %s: %d, want 403: %.200s", path, code, body)
					}
				}
			case tc.page == http.StatusOK:
				if !strings.Contains(body, "/ui/app.js") {
					t.Errorf("GET / is not the page: %.200s", body)
				}
				var ov controller.Overview
				getJSON(t, base+controller.PathAPIStatus, http.StatusOK, &ov)
				if ov.Controller != "c1" {
					t.Errorf("/api/v1/status: controller %q, want c1", ov.Controller)
				}
			case !tc.ui:
				var e struct{ Error string }
				if json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, httpfind.PathFind) {
					t.Errorf("GET / with --ui=false: %q, want the find handler's JSON 404", body)
				}
				if code, body := get(controller.PathAPIStatus); code != http.StatusNotFound || !strings.Contains(body, httpfind.PathFind) {
					t.Errorf("GET %s with --ui=false: %d %.200s, want the find handler's 404", controller.PathAPIStatus, code, body)
				}
			}
			if tc.creds {
				// /v1/find answers whatever the dashboard does.
				natstest.Eventually(t, waitLong, func() error {
					code, body := get(httpfind.PathFind + "?group=prod&host=" + host)
					if code != http.StatusOK {
						return fmt.Errorf("GET /v1/find: %d: %s", code, body)
					}
					return nil
				})
			}
			if !strings.Contains(logs.String(), tc.logs) {
				t.Errorf("log lacks %q:\n%s", tc.logs, logs.String())
			}
			if tc.refused && !strings.Contains(logs.String(), "level=WARN") {
				t.Errorf("the refusal is not a warning:\n%s", logs.String())
			}
		})
	}
}

// TestRunHelpNamesUIFlags: "controller run --help" documents --ui and
// --ui-insecure.
func TestRunHelpNamesUIFlags(t *testing.T) {
	cmd := controller.NewCommand()
	var out strings.Builder
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"run", "--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--ui ", "read-only dashboard", "--ui-insecure", "non-loopback"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("controller run --help lacks %q:\n%s", want, out.String())
		}
	}
}
