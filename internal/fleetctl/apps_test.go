package fleetctl

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestConfigSetAppOverride (issue 26, point 3): config set --app NAME
// --group G changes that app's own settings of G (its override), the
// fleet's and the other apps' staying; setting it back to the fleet's
// value removes the override; the fleet's settings and the order are
// refused with --app, and so is a rolling-out group of that app.
func TestConfigSetAppOverride(t *testing.T) {
	e := newEnv(t)
	e.putConfig(twoApps())
	set := func(o ConfigSetOptions) error {
		_, err := e.run(func(g *Global) error { o.Global = g; return RunConfigSet(testCtx(), &o) })
		return err
	}
	if err := set(ConfigSetOptions{ForApp: "db", Group: "prod", MaxInFlight: ptr("5%"), CanaryCount: ptr(3)}); err != nil {
		t.Fatal(err)
	}
	cfg := e.config().Value
	db, err := cfg.ForApp("db")
	if err != nil {
		t.Fatal(err)
	}
	web, _ := cfg.ForApp("web")
	prod, _ := db.Group("prod")
	if prod.MaxInFlight != 5 || prod.CanaryCount != 3 {
		t.Errorf("db's prod: max_in_flight %v canary_count %d, want 5%% and 3", prod.MaxInFlight, prod.CanaryCount)
	}
	fleetProd, _ := cfg.Group("prod")
	webProd, _ := web.Group("prod")
	if !reflect.DeepEqual(fleetProd, webProd) || fleetProd.MaxInFlight == 5 {
		t.Errorf("the fleet's or web's prod changed: %+v / %+v", fleetProd, webProd)
	}
	if got := string(cfg.Apps[1].Overrides["prod"]); got != `{"canary_count":3,"max_in_flight":"5%"}` {
		t.Errorf("db's override of prod: %s", got)
	}
	// Back to the fleet's values: no override left.
	def := rollout.DefaultGroup("prod")
	if err := set(ConfigSetOptions{ForApp: "db", Group: "prod", MaxInFlight: ptr(def.MaxInFlight.String()), CanaryCount: ptr(def.CanaryCount)}); err != nil {
		t.Fatal(err)
	}
	if o := e.config().Value.Apps[1].Overrides; o != nil {
		t.Errorf("overrides left after setting the fleet's values back: %v", o)
	}

	rev := e.configRevision()
	for name, tc := range map[string]struct {
		o     ConfigSetOptions
		usage bool
		want  string
	}{
		"order":      {ConfigSetOptions{ForApp: "db", Group: "prod", DependsOn: ptr("")}, true, "--depends-on is the fleet's"},
		"mode":       {ConfigSetOptions{ForApp: "db", Group: "prod", Mode: ptr("paused")}, true, "are the fleet's"},
		"no group":   {ConfigSetOptions{ForApp: "db", CanaryCount: ptr(1)}, true, "say which group"},
		"unknown":    {ConfigSetOptions{ForApp: "nope", Group: "prod", CanaryCount: ptr(1)}, true, "the apps are: web, db"},
		"bad values": {ConfigSetOptions{ForApp: "db", Group: "prod", CanaryCount: ptr(99)}, false, "canary_count"},
	} {
		t.Run(name, func(t *testing.T) {
			err := set(tc.o)
			mustContain(t, err, tc.want)
			if got := errors.As(err, new(cliutil.UsageError)); tc.usage && !got {
				t.Errorf("not a usage error: %v", err)
			}
			if e.configRevision() != rev {
				t.Errorf("refused config set wrote the config")
			}
		})
	}
	// db's prod rolling out: its own settings are frozen, web's are not.
	ns, _ := kv.NS(e.config().Value, "db")
	st := groupStatus(rollout.StateActive)
	e.put(e.fleet.Plan, ns.Group("prod"), st)
	mustContain(t, set(ConfigSetOptions{ForApp: "db", Group: "prod", CanaryCount: ptr(2)}), `app db: config change rejected: group "prod" is active`)
	if err := set(ConfigSetOptions{ForApp: "web", Group: "prod", CanaryCount: ptr(2)}); err != nil {
		t.Errorf("web's prod (not rolling out) refused: %v", err)
	}

	// A fleet without apps: its app has no settings of its own.
	one := newEnv(t)
	_, err = one.run(func(g *Global) error {
		return RunConfigSet(testCtx(), &ConfigSetOptions{Global: g, ForApp: "default", Group: "default", CanaryCount: ptr(2)})
	})
	mustContain(t, err, "has no name", "fleetctl apps add NAME --default")
}

// TestEntriesOfApp (issue 26, point 1 and 4): which app an event or an
// audit record is about. Records made before apps carry no app and are the
// default app's; so are events a fleet without apps published as
// "default" before it named its app; a config write is every app's.
func TestEntriesOfApp(t *testing.T) {
	cfg := twoApps()
	web, db := kv.DefaultNS(cfg), kv.OtherNS("db")
	for _, tc := range []struct {
		name    string
		ev      *rollout.Event
		audit   *kv.AuditRecord
		web, db bool
		app     string
	}{
		{name: "event before apps", ev: &rollout.Event{}, web: true, app: "web"},
		{name: "event of the unnamed app", ev: &rollout.Event{App: "default"}, web: true, app: "web"},
		{name: "event of web", ev: &rollout.Event{App: "web"}, web: true, app: "web"},
		{name: "event of db", ev: &rollout.Event{App: "db"}, db: true, app: "db"},
		{name: "event of an app since removed", ev: &rollout.Event{App: "api"}, app: "api"},
		{name: "plan write before apps", audit: &kv.AuditRecord{Bucket: kv.BucketPlan, Key: "group.prod"}, web: true, app: "web"},
		{name: "plan write of db before it named itself", audit: &kv.AuditRecord{Bucket: kv.BucketPlan, Key: "db.spec"}, db: true, app: "db"},
		{name: "plan write of the unnamed app", audit: &kv.AuditRecord{Bucket: kv.BucketPlan, Key: "spec", App: "default"}, web: true, app: "web"},
		{name: "plan write of db", audit: &kv.AuditRecord{Bucket: kv.BucketPlan, Key: "db.spec", App: "db"}, db: true, app: "db"},
		{name: "config write", audit: &kv.AuditRecord{Bucket: kv.BucketConfig, Key: "config"}, web: true, db: true, app: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			of := func(ns kv.AppNS) bool {
				if tc.ev != nil {
					return eventOfApp(tc.ev, ns, cfg)
				}
				return auditOfApp(tc.audit, ns, cfg)
			}
			if got := of(web); got != tc.web {
				t.Errorf("of web: %v, want %v", got, tc.web)
			}
			if got := of(db); got != tc.db {
				t.Errorf("of db: %v, want %v", got, tc.db)
			}
			if got := entryApp(kv.TimelineEntry{Event: tc.ev, Audit: tc.audit}, cfg); got != tc.app {
				t.Errorf("entryApp %q, want %q", got, tc.app)
			}
		})
	}
}

// TestDeleteGroupWithAppOverrides (issue 26, point 3): deleting a group
// takes the apps' own settings of it along (the config would not validate
// with them), and is refused while the group rolls out for any app.
func TestDeleteGroupWithAppOverrides(t *testing.T) {
	e := newEnv(t)
	cfg := twoApps()
	cfg.Apps[1].Overrides = map[string]json.RawMessage{"prod": json.RawMessage(`{"canary_count":1}`)}
	e.putConfig(cfg)
	ns, _ := kv.NS(cfg, "db")
	e.put(e.fleet.Plan, ns.Group("prod"), groupStatus(rollout.StateActive))
	del := func() error {
		_, err := e.run(func(g *Global) error {
			return RunConfigDeleteGroup(testCtx(), &ConfigDeleteGroupOptions{Global: g, Group: "prod"})
		})
		return err
	}
	rev := e.configRevision()
	mustContain(t, del(), `app db: config change rejected: group "prod" is active; it cannot be removed`)
	if e.configRevision() != rev {
		t.Fatal("refused delete-group wrote the config")
	}
	done := groupStatus(rollout.StateDone)
	e.put(e.fleet.Plan, ns.Group("prod"), done)
	if err := del(); err != nil {
		t.Fatal(err)
	}
	got := e.config().Value
	if _, ok := got.Group("prod"); ok || got.Apps[1].Overrides != nil {
		t.Errorf("after delete-group prod: groups %v, db's overrides %s", got.AppNames(), got.Apps[1].Overrides)
	}
}
