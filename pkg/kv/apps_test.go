package kv_test

import (
	"encoding/json"
	"testing"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

func TestAppNamespaces(t *testing.T) {
	var cfg rollout.Config
	if err := json.Unmarshal([]byte(`{"v":1,"apps":[{"name":"web"},{"name":"db","installer":"script"}]}`), &cfg); err != nil {
		t.Fatal(err)
	}
	web, err := kv.NS(cfg, "web")
	if err != nil {
		t.Fatal(err)
	}
	def, _ := kv.NS(cfg, "")
	if web != def || !web.IsDefault() {
		t.Fatalf("web %+v, default %+v", web, def)
	}
	db, _ := kv.NS(cfg, "db")
	for _, c := range []struct{ got, want string }{
		{web.Spec(), "spec"}, {web.Group("prod"), "group.prod"}, {web.Quarantine(), "quarantine"},
		{web.HBSubject("prod", "a1"), "fleet.hb.prod.a1"}, {web.Stats("prod", "c1"), "prod.c1"},
		{db.Spec(), "db.spec"}, {db.Group("prod"), "db.group.prod"}, {db.Quarantine(), "db.quarantine"},
		{db.HBSubject("prod", "a1"), "fleet.hb.db.prod.a1"}, {db.Stats("prod", "c1"), "db.prod.c1"},
		{db.HBFilter(""), "fleet.hb.db.*.*"}, {web.HBFilter("prod"), "fleet.hb.prod.*"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if _, err := kv.NS(cfg, "nope"); err == nil {
		t.Fatal("unknown app accepted")
	}
}

func TestParsePlanKey(t *testing.T) {
	for key, want := range map[string]kv.PlanKey{
		"spec":          {Kind: kv.KeySpec},
		"quarantine":    {Kind: kv.KeyQuarantine},
		"group.prod":    {Kind: kv.KindGroup, Group: "prod"},
		"group.spec":    {Kind: kv.KindGroup, Group: "spec"},
		"db.spec":       {App: "db", Kind: kv.KeySpec},
		"db.quarantine": {App: "db", Kind: kv.KeyQuarantine},
		"db.group.prod": {App: "db", Kind: kv.KindGroup, Group: "prod"},
		"db.other":      {},
		"DB.spec":       {},
		"db.group.":     {},
		"db.group.a.b":  {},
		"leader":        {},
	} {
		if got := kv.ParsePlanKey(key); got != want {
			t.Errorf("ParsePlanKey(%q) = %+v, want %+v", key, got, want)
		}
	}
}
