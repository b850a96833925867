package controller_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// twoApps is a fleet of two apps on the same ten hosts, one group, blue:
// web, the default app (tarball), and db (script), whose overrides make
// blue tolerate one failure in ten.
type twoApps struct {
	f       *fixture
	rc      *runningController
	cfg     rollout.Config
	web, db kv.AppNS
	// webAgents and dbAgents are the hosts' heartbeats of each app: the
	// same agent ids.
	webAgents, dbAgents []*testAgent
}

func newTwoApps(t *testing.T) *twoApps {
	t.Helper()
	f := newFixture(t)
	cfg := rollout.DefaultConfig()
	g := rollout.DefaultGroup("blue")
	g.CanaryCount, g.MaxInFlight, g.FailureThreshold, g.DependsOn, g.MinHealthyTime = 0, 20, 50, []string{}, 0
	cfg.Groups = []rollout.GroupConfig{g}
	cfg.Apps = []rollout.AppConfig{
		{Name: "web", Installer: rollout.InstallerTarball},
		{Name: "db", Installer: rollout.InstallerScript, Overrides: map[string]json.RawMessage{"blue": json.RawMessage(`{"failure_threshold": "10%"}`)}},
	}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	e := &twoApps{f: f, cfg: cfg, webAgents: tenAgents(), dbAgents: tenAgents()}
	var err error
	if e.web, err = kv.NS(cfg, "web"); err != nil {
		t.Fatal(err)
	}
	if e.db, err = kv.NS(cfg, "db"); err != nil {
		t.Fatal(err)
	}
	for i, a := range e.dbAgents {
		a.hb.App, a.hb.Installer, a.hb.Hostname = "db", rollout.InstallerScript, fmt.Sprintf("blue-%d", i)
	}
	e.rc = f.startController("c1")
	return e
}

// publishAppHeartbeats is publishHeartbeats for app ns's heartbeats: on
// its subjects, heard in its inventory.
func (f *fixture) publishAppHeartbeats(rc *runningController, ns kv.AppNS, agents []*testAgent) {
	f.t.Helper()
	js := f.srv.JetStream("agents")
	for _, a := range agents {
		a.hb.V, a.hb.At = 1, f.clk.Now().UTC()
		data, err := json.Marshal(a.hb)
		if err != nil {
			f.t.Fatal(err)
		}
		if _, err := js.Publish(f.ctx, heartbeat.SubjectForApp(ns.Key(), a.hb.Group, a.hb.AgentID), data); err != nil {
			f.t.Fatal(err)
		}
	}
	now := f.clk.Now()
	natstest.Eventually(f.t, waitLong, func() error {
		inv := rc.c.AppInventory(ns.Name)
		if inv == nil {
			return fmt.Errorf("no inventory of app %s", ns.Name)
		}
		for _, a := range agents {
			got, ok := inv.Lookup(a.hb.AgentID, now)
			if !ok || got.LastSeen.Before(now) {
				return fmt.Errorf("agent %s of app %s not heard at %v", a.hb.AgentID, ns.Name, now)
			}
		}
		return nil
	})
}

// pass publishes both apps' heartbeats, runs one rollout pass and returns
// blue's status of each app.
func (e *twoApps) pass() (web, db rollout.GroupStatus) {
	f := e.f
	f.t.Helper()
	f.publishAppHeartbeats(e.rc, e.web, e.webAgents)
	f.publishAppHeartbeats(e.rc, e.db, e.dbAgents)
	f.pass()
	f.settle()
	get := func(ns kv.AppNS) rollout.GroupStatus {
		st, err := kv.Get[rollout.GroupStatus](f.ctx, f.fleet.Plan, ns.Group("blue"))
		if errors.Is(err, kv.ErrNotFound) {
			return rollout.GroupStatus{} // not started yet
		}
		if err != nil {
			f.t.Fatalf("app %s: %v", ns.Name, err)
		}
		return st.Value
	}
	return get(e.web), get(e.db)
}

// rollOut plans web 1.0.0 → 2.0.0 and db 1.0.0 → 1.1.0 at once and runs
// the real controller's passes until web is done (every host installs
// 2.0.0) and db halted (two hosts roll back from 1.1.0).
func (e *twoApps) rollOut() {
	f := e.f
	f.t.Helper()
	f.publishAppHeartbeats(e.rc, e.web, e.webAgents)
	f.publishAppHeartbeats(e.rc, e.db, e.dbAgents)
	f.advance(interval) // established
	for ns, target := range map[kv.AppNS]string{e.web: "2.0.0", e.db: "1.1.0"} {
		spec := rollout.DefaultSpec("1.0.0", target)
		spec.Critical = true // the test's clock may be outside the start windows
		if _, err := kv.Save(f.ctx, f.fleet.Plan, ns.Spec(), spec, 0); err != nil {
			f.t.Fatal(err)
		}
	}
	started := false
	for range 5 {
		if web, db := e.pass(); web.State == rollout.StateActive && db.State == rollout.StateActive {
			started = true
			break
		}
	}
	if !started {
		f.t.Fatal("blue did not become active in both apps")
	}
	for _, a := range e.webAgents {
		a.hb.ActiveVersion, a.hb.StartVersion, a.hb.StartTime = "2.0.0", "1.0.0", f.clk.Now().UTC()
	}
	for _, i := range []int{0, 7} {
		a := &e.dbAgents[i].hb
		a.Error, a.ErrorClass, a.ErrorCause, a.Rollback, a.RollbackFrom, a.StartTime = "1.1.0 did not become healthy", heartbeat.ClassRelease, "unhealthy", true, "1.1.0", f.clk.Now().UTC()
	}
	for range 30 {
		if web, db := e.pass(); web.State == rollout.StateDone && db.Halted {
			return
		}
	}
	web, db := e.pass()
	f.t.Fatalf("web %s (want done), db halted %v (want halted)", web.State, db.Halted)
}

// appStatus is what fleetctl status --app computes for ns's app from the
// store: the app's counts (kv.StatsOf) and plan (kv.State.AppView),
// through view.BuildRolloutStatus, once the controller wrote its counts
// at the clock's now.
func (e *twoApps) appStatus(ns kv.AppNS) view.StatusReport {
	f := e.f
	f.t.Helper()
	now := f.clk.Now().UTC()
	var entries []kv.Stats
	natstest.Eventually(f.t, waitLong, func() error {
		all, _, err := f.fleet.ReadValidStats(f.ctx)
		if err != nil {
			return err
		}
		entries = kv.StatsOf(all, ns)
		for _, s := range entries {
			if s.At.Equal(now) {
				return nil
			}
		}
		return fmt.Errorf("no counts of app %s at %v yet", ns.Name, now)
	})
	st, err := f.fleet.ReadState(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	plan, err := st.AppView(ns)
	if err != nil {
		f.t.Fatal(err)
	}
	return view.BuildRolloutStatus(entries, plan, f.clk.Now())
}

// fleetctl status runs "fleetctl status --app NAME -o json" against the
// fixture's bus at the clock's now, once the controller wrote the app's
// counts at it.
func (e *twoApps) fleetctlStatus(ns kv.AppNS) view.StatusReport {
	f := e.f
	f.t.Helper()
	e.appStatus(ns) // the counts at now are written
	var out, errOut bytes.Buffer
	o := &fleetctl.StatusOptions{
		Global: &fleetctl.Global{NATSURL: f.srv.URL(), Timeout: waitLong, Out: &out, ErrOut: &errOut, Now: f.clk.Now, App: ns.Name},
		Output: "json",
	}
	if err := fleetctl.RunStatus(f.ctx, o); err != nil {
		f.t.Fatalf("fleetctl status --app %s: %v (stderr: %s)", ns.Name, err, errOut.String())
	}
	var rep view.StatusReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		f.t.Fatalf("fleetctl status --app %s -o json: %v\n%s", ns.Name, err, out.String())
	}
	return rep
}

// TestDashboardApps (issue 26 point 1, the dashboard): two apps on the same
// hosts rolled out at once by the real controller, web to done and db
// halted. Every API path answers for the app it is asked (?app=, absent:
// the default app): its state, group rows, banners, versions, agents and
// timeline, none of the other app's; the overview lists both apps, db
// halted with its halt's banner, web done; the live stream follows the
// app it was opened for. The numbers of each app are those fleetctl status
// --app computes from the store (its counts and plan through the same
// view code) at the same clock instant.
func TestDashboardApps(t *testing.T) {
	e := newTwoApps(t)
	f := e.f
	d := f.startDashboard(e.rc)
	srv := d.serve()
	e.rollOut()

	status := func(app string) controller.Overview {
		t.Helper()
		var ov controller.Overview
		path := controller.PathAPIStatus
		if app != "" {
			path += "?app=" + app
		}
		getJSON(t, srv.URL+path, http.StatusOK, &ov)
		return ov
	}
	db, web, def := status("db"), status("web"), status("")
	if db.App != "db" || web.App != "web" || def.App != "web" {
		t.Errorf("apps of the answers: %q %q %q, want db, web and web (the default)", db.App, web.App, def.App)
	}
	if db.Fleet.State != "halted" || web.Fleet.State != "done" || def.Fleet.State != "done" {
		t.Errorf("states: db %+v, web %+v, default %+v; want halted, done, done", db.Fleet, web.Fleet, def.Fleet)
	}
	if db.Header == nil || !strings.Contains(db.Header.Version, "1.1.0") || web.Header == nil || !strings.Contains(web.Header.Version, "2.0.0") {
		t.Errorf("headers: db %+v, web %+v; want db's target 1.1.0, web's 2.0.0", db.Header, web.Header)
	}
	if len(db.Rows) != 1 || !db.Rows[0].Halted || len(web.Rows) != 1 || web.Rows[0].Halted || web.Rows[0].RawState != rollout.StateDone {
		t.Errorf("rows: db %+v\nweb %+v\nwant blue halted in db, done in web", db.Rows, web.Rows)
	}
	if !slices.ContainsFunc(db.Banners, func(b controller.Banner) bool { return b.Kind == "halt" && b.Group == "blue" && b.Version == "1.1.0" }) {
		t.Errorf("db's banners: %+v, want blue's halt on 1.1.0", db.Banners)
	}
	if len(web.Banners) != 0 {
		t.Errorf("web's banners: %+v, want none", web.Banners)
	}
	versions := func(ov controller.Overview) map[string]int {
		out := map[string]int{}
		for _, g := range ov.Versions {
			for _, v := range g.Versions {
				out[v.Version] += v.Count
			}
		}
		return out
	}
	if got := versions(db); !cmp.Equal(got, map[string]int{"1.0.0": 10}) {
		t.Errorf("db's versions: %v, want 10 on 1.0.0 (web's 2.0.0 is not db's)", got)
	}
	if got := versions(web); !cmp.Equal(got, map[string]int{"2.0.0": 10}) {
		t.Errorf("web's versions: %v, want 10 on 2.0.0", got)
	}
	if db.Agents != 10 || web.Agents != 10 {
		t.Errorf("agents: db %d, web %d; want 10 each", db.Agents, web.Agents)
	}

	// The overview: both apps, the same lines whichever app is shown.
	if diff := cmp.Diff(db.Apps, web.Apps); diff != "" {
		t.Errorf("the overview differs between the apps' answers:\n%s", diff)
	}
	if len(db.Apps) != 2 || db.Apps[0].App != "web" || db.Apps[1].App != "db" {
		t.Fatalf("overview: %+v, want web then db", db.Apps)
	}
	w, b := db.Apps[0], db.Apps[1]
	if !w.Default || w.Installer != "tarball" || w.Fleet.State != "done" || w.Target != "2.0.0" || w.Groups != 1 || w.GroupsDone != 1 ||
		w.OnTarget != 10 || w.Agents != 10 || w.Failed != 0 || len(w.Banners) != 0 {
		t.Errorf("web's line: %+v", w)
	}
	if b.Default || b.Installer != "script" || b.Fleet.State != "halted" || b.Target != "1.1.0" || b.Groups != 1 || b.GroupsDone != 0 ||
		!slices.Equal(b.Halted, []string{"blue"}) || b.OnTarget != 0 || b.Failed != 2 || b.Agents != 10 ||
		!slices.ContainsFunc(b.Banners, func(x controller.Banner) bool { return x.Kind == "halt" && x.Group == "blue" }) {
		t.Errorf("db's line: %+v", b)
	}

	// fleetctl status --app and the dashboard agree, at one instant: the
	// report fleetctl status --app -o json prints, which is what the view
	// code makes of the app's counts and plan in the store.
	for _, ns := range []kv.AppNS{e.web, e.db} {
		f.advance(statsEvery)
		fromStore := e.appStatus(ns)
		want := e.fleetctlStatus(ns)
		if diff := cmp.Diff(fromStore, want, cmpopts.IgnoreFields(view.GroupReport{}, "Failures", "FailuresTotal")); diff != "" {
			t.Errorf("app %s: fleetctl status --app is not the view of the app's counts and plan (-view +fleetctl):\n%s", ns.Name, diff)
		}
		if ns == e.db && (len(want.Groups) != 1 || want.Groups[0].FailuresTotal != 2) {
			t.Errorf("fleetctl status --app db: %+v, want blue's 2 failures", want.Groups)
		}
		now := f.clk.Now()
		natstest.Eventually(t, waitLong, func() error {
			ov := status(ns.Name)
			if !ov.At.Equal(now) {
				return fmt.Errorf("numbers at %v, want %v", ov.At, now)
			}
			if diff := cmp.Diff(want, ov.Status); diff != "" {
				return fmt.Errorf("app %s: the dashboard's report differs from fleetctl status --app -o json (-fleetctl +dashboard):\n%s", ns.Name, diff)
			}
			appCfg, err := e.cfg.ForApp(ns.Name)
			if err != nil {
				return err
			}
			if diff := cmp.Diff(view.Rows(want, &appCfg, now), ov.Rows); diff != "" {
				return fmt.Errorf("app %s: rows differ (-fleetctl +dashboard):\n%s", ns.Name, diff)
			}
			if diff := cmp.Diff(view.Header(want), *ov.Header); diff != "" {
				return fmt.Errorf("app %s: header differs (-fleetctl +dashboard):\n%s", ns.Name, diff)
			}
			return nil
		})
	}

	// The agents: the app's inventory only.
	var page controller.AgentsPage
	getJSON(t, srv.URL+controller.PathAPIAgents+"?app=db&state=rolled_back", http.StatusOK, &page)
	if page.Total != 2 || len(page.Agents) != 2 || page.Agents[0].ID != e.dbAgents[0].hb.AgentID {
		t.Errorf("db's rolled back agents: %+v, want agents 0 and 7", page)
	}
	getJSON(t, srv.URL+controller.PathAPIAgents+"?app=db", http.StatusOK, &page)
	if page.Total != 10 || slices.Contains(page.Versions, "2.0.0") {
		t.Errorf("db's agents: %d on %v, want 10, none on web's 2.0.0", page.Total, page.Versions)
	}
	for _, path := range []string{"?app=web&state=rolled_back", "?state=rolled_back"} {
		getJSON(t, srv.URL+controller.PathAPIAgents+path, http.StatusOK, &page)
		if page.Total != 0 {
			t.Errorf("%s: %d agents, want none (db's rollbacks are not web's)", path, page.Total)
		}
	}

	// The timeline: each app's events, not the other's.
	timeline := func(app string) []view.TimelineRow {
		t.Helper()
		var rows []view.TimelineRow
		getJSON(t, srv.URL+controller.PathAPIHistory+"?app="+app, http.StatusOK, &rows)
		return rows
	}
	has := func(rows []view.TimelineRow, what, change string) bool {
		return slices.ContainsFunc(rows, func(r view.TimelineRow) bool {
			return r.Group == "blue" && r.What == what && strings.Contains(r.Change, change)
		})
	}
	natstest.Eventually(t, waitLong, func() error {
		dbRows, webRows := timeline("db"), timeline("web")
		switch {
		case !has(dbRows, string(rollout.EventHalt), ""):
			return fmt.Errorf("db's timeline has no halt of blue: %+v", dbRows)
		case has(dbRows, string(rollout.EventTransition), "done"):
			return fmt.Errorf("db's timeline has web's done: %+v", dbRows)
		case !has(webRows, string(rollout.EventTransition), "done"):
			return fmt.Errorf("web's timeline has no done of blue: %+v", webRows)
		case has(webRows, string(rollout.EventHalt), ""):
			return fmt.Errorf("web's timeline has db's halt: %+v", webRows)
		}
		return nil
	})

	// The stream follows its app.
	ch, closeStream := streamQuery(t, srv.Client(), srv.URL, "?app=db")
	defer closeStream()
	var ov controller.Overview
	next(t, ch, "status", &ov)
	if ov.App != "db" || ov.Fleet.State != "halted" {
		t.Errorf("db's stream: app %q, %+v; want db, halted", ov.App, ov.Fleet)
	}
	d.push()
	next(t, ch, "status", &ov)
	if ov.App != "db" || ov.Fleet.State != "halted" {
		t.Errorf("db's stream after a push: app %q, %+v; want db, halted", ov.App, ov.Fleet)
	}
}

// TestDashboardAppParam: ?app= on every API path. An app the config does
// not list, or a name that is not one, answers a JSON 400 that names the
// apps, and opens no stream; the default app's name is the same as no
// app. A paused app's banner names fleetctl resume --app NAME, and only
// its line of the overview says paused. The timeline of an app has the
// events and the operators' writes of that app, and the fleet-wide ones
// (the config, an unattributed change), not another app's: an event names
// its app (an event of before apps, none, or "default" before the app was
// named: the default app's), a write of fleet_plan its key's app; the live
// stream of an app sends its entries only.
func TestDashboardAppParam(t *testing.T) {
	f := newFixture(t)
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("blue")}
	cfg.Apps = []rollout.AppConfig{{Name: "web"}, {Name: "db", Installer: rollout.InstallerScript}}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	rc := f.startController("c1")
	d := f.startDashboard(rc)
	srv := d.serve()

	for _, path := range []string{controller.PathAPIStatus, controller.PathAPIAgents, controller.PathAPIHistory, controller.PathAPIStream} {
		for _, app := range []string{"nope", "DB", "db.spec", "web%20", strings.Repeat("a", 300), "group"} {
			u := srv.URL + path + "?app=" + app
			code, ct, body := httpGet(t, u)
			var e struct{ Error string }
			if code != http.StatusBadRequest || ct != "application/json" || json.Unmarshal([]byte(body), &e) != nil {
				t.Errorf("GET %s?app=%.20s: %d %s %.200s, want a JSON 400", path, app, code, ct, body)
				continue
			}
			if !strings.Contains(e.Error, "web, db") {
				t.Errorf("GET %s?app=%.20s: %q does not name the apps", path, app, e.Error)
			}
			if len(e.Error) > 400 {
				t.Errorf("GET %s?app=%.20s: an error of %d bytes", path, app, len(e.Error))
			}
		}
	}
	if n := d.dash.Streams(); n != 0 {
		t.Errorf("%d streams open after refusals, want 0", n)
	}

	// The default app's name is no app.
	var byName, none controller.Overview
	getJSON(t, srv.URL+controller.PathAPIStatus+"?app=web", http.StatusOK, &byName)
	getJSON(t, srv.URL+controller.PathAPIStatus, http.StatusOK, &none)
	if byName.App != "web" || none.App != "web" || len(none.Apps) != 2 || none.Apps[1].App != "db" || none.Apps[1].Installer != "script" {
		t.Errorf("?app=web: %q, no app: %q with apps %+v", byName.App, none.App, none.Apps)
	}

	// db paused: its banner names the command with --app db (fleetctl
	// asks for --app on a fleet with several apps), on db's page and in
	// db's line of the overview.
	dbNS, err := kv.NS(cfg, "db")
	if err != nil {
		t.Fatal(err)
	}
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	spec.Mode = rollout.ModePaused
	if _, err := kv.Save(f.ctx, f.fleet.Plan, dbNS.Spec(), spec, 0); err != nil {
		t.Fatal(err)
	}
	var dbOv controller.Overview
	getJSON(t, srv.URL+controller.PathAPIStatus+"?app=db", http.StatusOK, &dbOv)
	if dbOv.Fleet.State != "paused" || len(dbOv.Banners) != 1 || !strings.Contains(dbOv.Banners[0].Text, "To go on: fleetctl resume --app db") {
		t.Errorf("db paused: %+v, banners %+v; want a paused banner naming fleetctl resume --app db", dbOv.Fleet, dbOv.Banners)
	}
	if b := dbOv.Apps[1].Banners; len(b) != 1 || b[0].Kind != "paused" || dbOv.Apps[0].Fleet.State == "paused" {
		t.Errorf("overview: web %+v, db %+v; want db alone paused", dbOv.Apps[0], dbOv.Apps[1])
	}

	// The timeline, per app.
	audit := func(key, reason string, bucket string) {
		rec := kv.AuditRecord{V: 1, At: f.clk.Now().UTC(), Actor: "alice", Reason: reason, Command: "test", Bucket: bucket, Key: key}
		if err := f.fleet.PublishAudit(f.ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	audit("group.blue", "web's write", kv.BucketPlan)
	audit("db.group.blue", "db's write", kv.BucketPlan)
	audit("db.spec", "db's plan", kv.BucketPlan)
	audit(kv.KeyConfig, "the fleet's config", kv.BucketConfig)
	event := func(app, reason string) {
		ev := rollout.Event{V: 1, App: app, Group: "blue", Kind: rollout.EventHalt, From: rollout.StateActive, To: rollout.StateActive, Reason: reason, At: f.clk.Now().UTC()}
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.srv.JetStream("events").Publish(f.ctx, kv.EventSubject("blue"), data); err != nil {
			t.Fatal(err)
		}
	}
	event("web", "web's halt")
	event("db", "db's halt")
	event("", "a halt of before apps")
	event(rollout.DefaultAppName, "a halt of before the app was named")
	// An event about no app and no group (an unattributed change): every app's.
	data, err := json.Marshal(rollout.Event{V: 1, Kind: rollout.EventUnattributed, Reason: "a raw write", At: f.clk.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.JetStream("events").Publish(f.ctx, kv.EventSubject(""), data); err != nil {
		t.Fatal(err)
	}
	reasons := func(app string) []string {
		var rows []view.TimelineRow
		getJSON(t, srv.URL+controller.PathAPIHistory+"?app="+url.QueryEscape(app), http.StatusOK, &rows)
		out := []string{}
		for _, r := range rows {
			out = append(out, r.Reason)
		}
		return out
	}
	want := map[string][]string{
		"":    {"web's write", "the fleet's config", "web's halt", "a halt of before apps", "a halt of before the app was named", "a raw write"},
		"web": {"web's write", "the fleet's config", "web's halt", "a halt of before apps", "a halt of before the app was named", "a raw write"},
		"db":  {"db's write", "db's plan", "the fleet's config", "db's halt", "a raw write"},
	}
	natstest.Eventually(t, waitLong, func() error {
		for app, want := range want {
			if got := reasons(app); !cmp.Equal(got, want) {
				return fmt.Errorf("timeline of app %q: %q, want %q", app, got, want)
			}
		}
		return nil
	})

	// The live stream: db's page gets db's entries only.
	ch, closeStream := streamQuery(t, srv.Client(), srv.URL, "?app=db")
	defer closeStream()
	var ov controller.Overview
	next(t, ch, "status", &ov)
	if ov.App != "db" {
		t.Errorf("db's stream: numbers of app %q", ov.App)
	}
	event("web", "web's second halt")
	event("db", "db's second halt")
	d.push()
	var row view.TimelineRow
	next(t, ch, "timeline", &row)
	if row.Reason != "db's second halt" {
		t.Errorf("db's stream: timeline entry %q, want db's second halt (not web's)", row.Reason)
	}
}

// TestDashboardAppsInBrowser (issue 26 point 1, the dashboard): in headless
// Chromium, with two apps rolled out by the real controller (web done, db
// halted), the page opened on ?app=db shows db's group halted with its
// reason and db's agents; the all-apps overview shows web done and db
// halted with its halt's banner; picking web in the selector shows web's
// group done, the choice kept in the address, and db's halt is still in
// sight. Screenshots apps-db.png and apps-web.png.
func TestDashboardAppsInBrowser(t *testing.T) {
	e := newTwoApps(t)
	b := newBrowser(t)
	srv, _ := servePage(t, e.f, e.rc)
	e.rollOut()

	// overview checks the all-apps overview on the page of app shown: db's
	// halt under db's row, unless db's page is shown (its banners have it).
	overview := func(shown string) string {
		return fmt.Sprintf(`((shown) => {
		const card = document.getElementById("apps-card");
		if (card.hidden) return "the overview is hidden";
		const rows = [...document.querySelectorAll("#apps tr.app-row")];
		if (rows.map(r => r.dataset.app).join(",") !== "web,db") return "apps " + rows.map(r => r.dataset.app).join(",");
		const web = rows[0], db = rows[1];
		if (web.dataset.state !== "done") return "web " + web.dataset.state;
		if (!web.querySelector(".target").textContent.includes("2.0.0")) return "web's target " + web.querySelector(".target").textContent;
		if (web.querySelector(".groups-done").textContent !== "1 / 1") return "web's groups done " + web.querySelector(".groups-done").textContent;
		if (web.querySelector(".on-target").textContent !== "10 / 10") return "web on target " + web.querySelector(".on-target").textContent;
		if (db.dataset.state !== "halted") return "db " + db.dataset.state;
		if (db.querySelector(".failed").textContent !== "2") return "db failed " + db.querySelector(".failed").textContent;
		if (document.querySelector('#apps tr.current').dataset.app !== shown) return "current " + document.querySelector('#apps tr.current').dataset.app;
		const news = document.querySelector('#apps tr.app-news[data-app="db"] .app-banner[data-kind="halt"][data-group="blue"]');
		if (shown === "db") {
			if (news) return "db's halt under its row and in the banners";
			const b = document.querySelector('#banners .banner[data-kind="halt"][data-group="blue"]');
			return b && b.textContent.includes("blue halted") ? "" : "no halt banner on db's page";
		}
		if (!news || !news.textContent.includes("blue halted")) return "no halt banner under db";
		if (document.querySelector('#apps tr.app-news[data-app="web"]')) return "bad news under web";
		return "";
	})(%q)`, shown)
	}

	b.run(chromedp.Navigate(srv.URL + "/?app=db"))
	b.expect("db's page", `(() => {
		if (document.getElementById("app-pick").hidden) return "no app selector";
		if (document.getElementById("app-select").value !== "db") return "selector on " + document.getElementById("app-select").value;
		const top = document.getElementById("fleet-state");
		if (top.dataset.state !== "halted") return "top: " + top.textContent;
		const row = document.querySelector('tr.group-row[data-group="blue"]');
		if (!row || row.dataset.halted !== "true") return "blue not halted";
		const note = document.querySelector('tr.notes-row[data-group="blue"] .halt-reason');
		if (!note || !note.textContent.includes("1.1.0")) return "halt reason: " + (note && note.textContent);
		if (!document.getElementById("plan-version").textContent.includes("1.0.0 → 1.1.0")) return "plan " + document.getElementById("plan-version").textContent;
		const t = document.getElementById("agents");
		if (t.dataset.total !== "10") return "agents " + t.dataset.total;
		if (document.getElementById("f-version").textContent.includes("2.0.0")) return "web's 2.0.0 among db's versions";
		return document.querySelector('#timeline li[data-what="halt"][data-group="blue"]') ? "" : "no halt in db's timeline";
	})()`)
	b.expect("the overview from db's page", overview("db"))
	b.screenshot(t, "apps-db.png", "")

	var v string
	b.run(chromedp.Evaluate(setSelect("app-select", "web"), &v))
	b.expect("web's page", `(() => {
		if (new URLSearchParams(location.search).get("app") !== "web") return "address " + location.search;
		if (document.getElementById("app-select").value !== "web") return "selector on " + document.getElementById("app-select").value;
		const top = document.getElementById("fleet-state");
		if (top.dataset.state !== "done") return "top: " + top.textContent;
		const row = document.querySelector('tr.group-row[data-group="blue"]');
		if (!row || row.dataset.state !== "done" || row.dataset.halted !== "false") return "blue " + (row && row.dataset.state);
		if (document.querySelector('#banners .banner')) return "web's page has banners: " + document.getElementById("banners").textContent;
		if (document.querySelector('#timeline li[data-what="halt"]')) return "db's halt in web's timeline";
		const v = document.querySelector('.vrow[data-group="blue"] .vitem[data-version="2.0.0"]');
		return v && v.textContent.includes("10") ? "" : "web's versions: " + document.getElementById("versions").textContent;
	})()`)
	b.expect("the overview from web's page", overview("web"))
	b.screenshot(t, "apps-web.png", "")

	if errs := b.pageErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors:\n  %q", errs)
	}

	// An app the config does not list: said, not a blank page.
	b.clearErrors()
	b.run(chromedp.Navigate(srv.URL + "/?app=nope"))
	b.expect("an unknown app", `(() => {
		const ready = document.getElementById("ready");
		if (ready.hidden || !ready.textContent.includes("web, db")) return "ready: " + ready.textContent;
		return document.getElementById("fleet-state").dataset.state === "error" ? "" : "top " + document.getElementById("fleet-state").textContent;
	})()`)
	for _, e := range b.pageErrors() { // the refused requests are logged; nothing else may be
		if !strings.Contains(e, "400 (Bad Request)") {
			t.Errorf("the page of an unknown app logged %q", e)
		}
	}
}
