package controller_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// appHost is one host of a multi-app fleet as the bus sees it: one
// heartbeat per app it runs, on the app's subject (agentd's own multi-app
// run is tested with agentd; here the hosts do exactly what the plan tells
// them, so that the controller alone is under test).
type appHost struct {
	id      rollout.AgentID
	group   string
	version map[string]string // by app token ("" the default app)
	// broken apps roll back whatever version they are told to install.
	broken map[string]bool
	left   map[string]bool
	seq    uint64
}

// appFleet is the hosts of a multi-app test and the bus they beat on.
type appFleet struct {
	f     *fixture
	js    jetstream.JetStream
	hosts []*appHost
}

func (af *appFleet) beat(h *appHost, app string) {
	af.f.t.Helper()
	h.seq++
	v := h.version[app]
	hb := &heartbeat.Heartbeat{V: heartbeat.SchemaVersion, AgentID: h.id, Hostname: "host-" + string(h.id[len(h.id)-4:]), Group: h.group,
		ActiveVersion: v, StartVersion: v, UpdaterVersion: "0.1.0", At: af.f.clk.Now().UTC(), Seq: h.seq, App: app, Installer: rollout.InstallerTarball,
		Left: h.left[app]}
	if app == "db" {
		hb.Installer = rollout.InstallerScript
	}
	if h.broken[app] && strings.HasPrefix(v, "rolledback:") {
		hb.ActiveVersion, hb.StartVersion = strings.TrimPrefix(v, "rolledback:"), strings.TrimPrefix(v, "rolledback:")
		hb.Rollback, hb.RollbackFrom = true, "6.0.0"
		hb.Error, hb.ErrorClass = "health check failed", heartbeat.ClassRelease
	}
	data, err := heartbeat.Encode(hb)
	if err != nil {
		af.f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(af.f.ctx, waitLong)
	defer cancel()
	if _, err := af.js.Publish(ctx, heartbeat.SubjectForApp(app, h.group, h.id), data); err != nil {
		af.f.t.Fatal(err)
	}
}

// beatAll sends every host's heartbeat of every app it runs.
func (af *appFleet) beatAll() {
	af.f.t.Helper()
	for _, h := range af.hosts {
		for app := range h.version {
			af.beat(h, app)
		}
	}
}

// obey makes every host install what app's plan tells it (ns's view of
// state); a host where the app is broken rolls back. It returns how many
// hosts changed.
func (af *appFleet) obey(state *kv.State, ns kv.AppNS) int {
	af.f.t.Helper()
	view, err := state.AppView(ns)
	if err != nil {
		af.f.t.Fatal(err)
	}
	n := 0
	for _, h := range af.hosts {
		cur, runs := h.version[ns.Key()]
		st, ok := view.Groups[h.group]
		if !runs || !ok || !view.HasSpec || strings.HasPrefix(cur, "rolledback:") {
			continue
		}
		v, update := rollout.Decide(h.id, view.Spec.Value, st.Value, st.Value.Mode)
		if !update || v == "" || v == cur {
			continue
		}
		if h.broken[ns.Key()] {
			h.version[ns.Key()] = "rolledback:" + cur
		} else {
			h.version[ns.Key()] = v
		}
		n++
	}
	return n
}

// versionsIn is the active version of every agent in app's inventory.
func versionsIn(rc *runningController, app string, now time.Time) map[rollout.AgentID]string {
	out := map[rollout.AgentID]string{}
	if inv := rc.c.AppInventory(app); inv != nil {
		for _, a := range inv.Agents("", now) {
			out[a.Heartbeat.AgentID] = a.Heartbeat.ActiveVersion
		}
	}
	return out
}

// waitInventories waits until rc's inventory of each app shows every host
// that runs it, on the version it reports.
func (af *appFleet) waitInventories(rc *runningController) {
	af.f.t.Helper()
	natstest.Eventually(af.f.t, waitLong, func() error {
		for _, app := range []struct{ name, key string }{{"web", ""}, {"db", "db"}} {
			seen := versionsIn(rc, app.name, af.f.clk.Now())
			want := map[rollout.AgentID]string{}
			for _, h := range af.hosts {
				if v, ok := h.version[app.key]; ok && !h.left[app.key] {
					if h.broken[app.key] && strings.HasPrefix(v, "rolledback:") {
						v = strings.TrimPrefix(v, "rolledback:")
					}
					want[h.id] = v
				}
			}
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				return fmt.Errorf("app %s: inventory %v, want %v", app.name, seen, want)
			}
		}
		return nil
	})
}

// twoAppConfig is a fleet of two groups (prod after canary) and two apps:
// web (the default app: today's keys) and db.
func twoAppConfig() rollout.Config {
	cfg := rollout.DefaultConfig()
	canary, prod := rollout.DefaultGroup("canary"), rollout.DefaultGroup("prod")
	canary.CanaryCount, prod.CanaryCount = 1, 1
	canary.MinHealthyTime, prod.MinHealthyTime = 0, 0
	canary.MaxInFlight, prod.MaxInFlight = 50, 50
	prod.DependsOn = []string{"canary"}
	cfg.Groups = []rollout.GroupConfig{canary, prod}
	cfg.Apps = []rollout.AppConfig{{Name: "web"}, {Name: "db", Installer: rollout.InstallerScript}}
	return cfg
}

func newAppFleet(t *testing.T, f *fixture, perGroup int) *appFleet {
	t.Helper()
	af := &appFleet{f: f, js: f.srv.JetStream("hosts")}
	n := 0
	for _, g := range []string{"canary", "prod"} {
		for range perGroup {
			n++
			af.hosts = append(af.hosts, &appHost{
				id:      rollout.AgentID(fmt.Sprintf("0b000000-0000-4000-8000-%012d", n)),
				group:   g,
				version: map[string]string{"": "1.0.0", "db": "5.0.0"},
				broken:  map[string]bool{}, left: map[string]bool{},
			})
		}
	}
	return af
}

// TestAppsRollOutAtOnce: two apps on the same hosts roll out at once with
// different targets, each on its own keys; app db's bad release halts app
// db only, while app web completes; every event names its app; each app's
// counts are its own fleet_stats entries; a heartbeat of an app the config
// does not list is rejected and counted nowhere; a host that leaves app db
// leaves db's inventory only (TestAppAddedLater: in a rescan too).
func TestAppsRollOutAtOnce(t *testing.T) {
	f := newFixture(t)
	events := f.subscribeEvents()
	cfg := twoAppConfig()
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	web, _ := kv.NS(cfg, "web")
	db, _ := kv.NS(cfg, "db")
	c1 := f.startController("c1")
	af := newAppFleet(t, f, 3)
	af.beatAll()
	// A heartbeat for an app the config does not list.
	stray := &appHost{id: "0b000000-0000-4000-8000-999999999999", group: "prod", version: map[string]string{"cache": "1.0.0"}}
	af.beat(stray, "cache")
	af.waitInventories(c1)
	natstest.Eventually(t, waitLong, func() error {
		if _, rejected := c1.c.Counters(); rejected != 1 {
			return fmt.Errorf("%d heartbeats rejected, want the one of app cache", rejected)
		}
		return nil
	})
	if inv := c1.c.AppInventory("cache"); inv != nil {
		t.Errorf("an inventory for app cache, which the config does not list")
	}
	if c1.c.Inventory() != c1.c.AppInventory("web") || c1.c.AppInventory("") != c1.c.AppInventory("web") {
		t.Errorf("Inventory() and AppInventory(\"\") must be the default app's (web)")
	}
	if got := c1.c.Apps(); !slices.Equal(got, []string{"web", "db"}) {
		t.Errorf("apps %v, want [web db]", got)
	}
	f.advance(interval) // every agent established
	af.beatAll()
	af.waitInventories(c1)

	// Both apps' plans at once, each with its own target; db's release
	// is broken on every host.
	if _, err := kv.Save(f.ctx, f.fleet.Plan, web.Spec(), specCritical("1.0.0", "2.0.0"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Save(f.ctx, f.fleet.Plan, db.Spec(), specCritical("5.0.0", "6.0.0"), 0); err != nil {
		t.Fatal(err)
	}
	for _, h := range af.hosts {
		h.broken["db"] = true
	}
	var state *kv.State
	webDone := false
	for round := 0; round < 40 && !webDone; round++ {
		f.advance(reconcileEvery)
		natstest.Eventually(t, waitLong, func() error {
			var err error
			if state, err = f.fleet.ReadState(f.ctx); err != nil {
				return err
			}
			for _, ns := range []kv.AppNS{web, db} {
				a := state.ForApp(ns)
				for _, g := range []string{"canary", "prod"} {
					if st, ok := a.Groups[g]; !ok || !st.Value.Since.After(f.clk.Now().Add(-time.Hour)) {
						return fmt.Errorf("app %s group %s has no status yet", ns.Name, g)
					}
				}
			}
			return nil
		})
		for _, g := range []string{"canary", "prod"} {
			if st := state.ForApp(web).Groups[g].Value; st.Halted {
				t.Fatalf("app web's group %s halted (%s): db's failures reached web", g, st.HaltReason)
			}
		}
		webDone = state.ForApp(web).Groups["prod"].Value.State == rollout.StateDone
		if af.obey(state, web)+af.obey(state, db) > 0 {
			af.beatAll()
			af.waitInventories(c1)
		}
	}
	if !webDone {
		t.Fatalf("app web did not finish in 40 rounds: %+v", state.ForApp(web).Groups)
	}
	// The pass after the last failures: db's canary group is halted, and
	// its prod group never started.
	f.advance(reconcileEvery)
	natstest.Eventually(t, waitLong, func() error {
		var err error
		if state, err = f.fleet.ReadState(f.ctx); err != nil {
			return err
		}
		if st := state.ForApp(db).Groups["canary"].Value; !st.Halted {
			return fmt.Errorf("app db's canary group is %s, not halted", st.State)
		}
		return nil
	})
	if st := state.ForApp(db).Groups["prod"].Value; st.State != rollout.StateUnstarted {
		t.Errorf("app db's prod group is %s after its canary halted, want unstarted", st.State)
	}
	for _, h := range af.hosts {
		if h.version[""] != "2.0.0" {
			t.Errorf("host %s runs web %s, want 2.0.0", h.id, h.version[""])
		}
		if strings.HasPrefix(h.version["db"], "6.") {
			t.Errorf("host %s runs db %s: db's halt did not stop it", h.id, h.version["db"])
		}
	}
	// Each app's status is under its own keys, with its own target.
	if tv := state.Groups["prod"].Value.TargetVersion; tv != "2.0.0" {
		t.Errorf("fleet_plan group.prod (web's) targets %q, want 2.0.0", tv)
	}
	if tv := state.ForApp(db).Groups["canary"].Value.TargetVersion; tv != "6.0.0" {
		t.Errorf("fleet_plan db.group.canary targets %q, want 6.0.0", tv)
	}

	// Every event names its app: web's transitions, db's halt.
	natstest.Eventually(t, waitLong, func() error {
		events.mu.Lock()
		defer events.mu.Unlock()
		var webDoneEv, dbHalt bool
		for _, ev := range events.events {
			switch {
			case ev.App == "" && ev.Group != "":
				return fmt.Errorf("an event without its app: %+v", ev)
			case ev.App == "web" && ev.Kind == rollout.EventTransition && ev.To == rollout.StateDone && ev.Group == "prod":
				webDoneEv = true
			case ev.App == "db" && ev.Kind == rollout.EventHalt && ev.Group == "canary":
				dbHalt = true
			case ev.App == "web" && ev.Kind == rollout.EventHalt:
				return fmt.Errorf("a halt event of app web: %+v", ev)
			}
		}
		if !webDoneEv || !dbHalt {
			return fmt.Errorf("web prod done event %v, db canary halt event %v", webDoneEv, dbHalt)
		}
		return nil
	})

	// Counts: each app's in its own fleet_stats entries.
	f.advance(statsEvery - reconcileEvery%statsEvery)
	natstest.Eventually(t, waitLong, func() error {
		entries, err := f.fleet.ReadStats(f.ctx)
		if err != nil {
			return err
		}
		got := map[string]string{}
		for _, s := range entries {
			vs := make([]string, 0, len(s.Versions))
			for v, c := range s.Versions {
				vs = append(vs, fmt.Sprintf("%s=%d", v, c.Count))
			}
			sort.Strings(vs)
			got[s.App+"/"+s.Group] = strings.Join(vs, ",")
		}
		want := map[string]string{"/canary": "2.0.0=3", "/prod": "2.0.0=3", "db/canary": "5.0.0=3", "db/prod": "5.0.0=3"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("stats %v, want %v", got, want)
		}
		return nil
	})

	// A host leaves app db: out of db's inventory, still in web's.
	leaver := af.hosts[0]
	leaver.left["db"] = true
	af.beat(leaver, "db")
	af.waitInventories(c1)
	if _, ok := c1.c.AppInventory("web").Lookup(leaver.id, f.clk.Now()); !ok {
		t.Errorf("host %s left app db and vanished from app web's inventory", leaver.id)
	}
}

// specCritical is a plan from start to target that ignores the groups'
// windows (the test's clock may be outside them).
func specCritical(start, target string) rollout.Spec {
	s := rollout.DefaultSpec(start, target)
	s.Critical = true
	return s
}

// TestAppAddedLater: hosts that heartbeat for an app before the config
// lists it are rejected, and counted in the app's inventory as soon as the
// config gains it (the controller reads the stream again), without
// waiting for their next heartbeat.
func TestAppAddedLater(t *testing.T) {
	f := newFixture(t)
	cfg := twoAppConfig()
	cfg.Apps = nil // one app, "default"
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	c1 := f.startController("c1")
	af := newAppFleet(t, f, 2)
	af.beatAll()
	natstest.Eventually(t, waitLong, func() error {
		if _, rejected := c1.c.Counters(); rejected != uint64(len(af.hosts)) {
			return fmt.Errorf("%d heartbeats rejected, want app db's %d", rejected, len(af.hosts))
		}
		return nil
	})
	if got := len(c1.c.Inventory().Agents("", f.clk.Now())); got != len(af.hosts) {
		t.Errorf("default app's inventory: %d agents, want %d", got, len(af.hosts))
	}
	e, err := kv.Get[rollout.Config](f.ctx, f.fleet.Config, kv.KeyConfig)
	if err != nil {
		t.Fatal(err)
	}
	next := e.Value
	next.Apps = []rollout.AppConfig{{Name: "web"}, {Name: "db"}}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, next, e.Revision); err != nil {
		t.Fatal(err)
	}
	f.advance(statsEvery) // the stats tick reads the config's apps
	af.waitInventories(c1)
	if got := c1.c.Apps(); !slices.Equal(got, []string{"web", "db"}) {
		t.Errorf("apps %v, want [web db]", got)
	}

	// A host leaves app db; a controller started now reads the same from
	// the stream: the host in web's inventory, not in db's.
	leaver := af.hosts[0]
	leaver.left["db"] = true
	af.beat(leaver, "db")
	af.waitInventories(c1)
	c2 := f.startController("c2")
	af.waitInventories(c2)
	if _, rejected := c2.c.Counters(); rejected != 0 {
		t.Errorf("a controller started once db was configured rejected %d heartbeats, want none", rejected)
	}
	if _, ok := c2.c.AppInventory("web").Lookup(leaver.id, f.clk.Now()); !ok {
		t.Errorf("host %s left app db and is not in app web's inventory of a controller started later", leaver.id)
	}
}
