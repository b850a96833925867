package controller_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestLeaderPublishesGroupSelectors: the leader writes each app's groups
// and selectors on the app's groups key once a group has a selector, keeps
// it current as the config changes (the selectors gone: the groups without
// them, so agents go back to their own), and never creates it for a
// config without selectors.
func TestLeaderPublishesGroupSelectors(t *testing.T) {
	f := newFixture(t)
	f.putConfig("canary", "prod")
	f.startController("c1")
	f.pass()
	f.pass()
	if _, err := f.fleet.Plan.Get(f.ctx, kv.KeyGroups); err == nil {
		t.Fatal("groups key written for a config without selectors")
	}

	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("canary"), rollout.DefaultGroup("prod")}
	cfg.Groups[0].Selector = rollout.Selector{"env": "canary"}
	cfg.Apps = []rollout.AppConfig{{Name: "web"}, {Name: "db", Overrides: map[string]json.RawMessage{
		"prod": json.RawMessage(`{"selector":{"tier":"db"}}`)}}}
	putConfig(t, f, cfg)
	want := func(key, value string) {
		t.Helper()
		natstest.Eventually(t, waitLong, func() error {
			f.advance(reconcileEvery)
			e, err := f.fleet.Plan.Get(f.ctx, key)
			if err != nil {
				return err
			}
			if string(e.Value()) != value {
				return fmt.Errorf("%s = %s, want %s", key, e.Value(), value)
			}
			return nil
		})
	}
	want(kv.KeyGroups, `{"v":1,"groups":[{"name":"canary","selector":{"env":"canary"}},{"name":"prod"}]}`)
	want(kv.OtherNS("db").Groups(), `{"v":1,"groups":[{"name":"canary","selector":{"env":"canary"}},{"name":"prod","selector":{"tier":"db"}}]}`)

	cfg.Groups[0].Selector = nil
	cfg.Apps = nil
	putConfig(t, f, cfg)
	want(kv.KeyGroups, `{"v":1,"groups":[{"name":"canary"},{"name":"prod"}]}`)
	for _, key := range []string{kv.KeyGroups, kv.OtherNS("db").Groups()} {
		if pk := kv.ParsePlanKey(key); pk.Kind != "" {
			t.Errorf("%s reads as a plan key of kind %q", key, pk.Kind)
		}
	}
}

func putConfig(t *testing.T, f *fixture, cfg rollout.Config) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.fleet.Config.Put(f.ctx, kv.KeyConfig, data); err != nil {
		t.Fatal(err)
	}
}
