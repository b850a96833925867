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

// TestHeartbeatWithBadLabelsRejected: a heartbeat whose labels break the
// rules (a control character in a value, more than 32, not an object) is
// refused like any malformed heartbeat, counted by its own reason
// (bad_labels), and its agent is counted nowhere; one with good labels is
// counted, labels and all.
func TestHeartbeatWithBadLabelsRejected(t *testing.T) {
	f := newFixture(t)
	f.putConfig("prod")
	rc := f.startController("c1")
	url := f.serveMetrics(rc)
	const base = `{"v":1,"agent_id":"%s","hostname":"h","group":"prod","active_version":"1.0.0","start_version":"","rollback":false,"rollback_from":"","error":"","updater_version":"1.0.0","at":"2026-11-29T10:00:00Z","seq":1,"labels":%s}`
	many := "{"
	for i := range 33 {
		if i > 0 {
			many += ","
		}
		many += fmt.Sprintf(`"k%d":"v"`, i)
	}
	many += "}"
	for id, labels := range map[string]string{
		"0b000000-0000-4000-8000-000000000001": `{"pool":"a\u001b[31mb"}`,
		"0b000000-0000-4000-8000-000000000002": many,
		"0b000000-0000-4000-8000-000000000003": `["pool","a"]`,
		"0b000000-0000-4000-8000-000000000004": `{"pool":"a","os":"linux"}`,
	} {
		if _, err := f.fleet.JS.Publish(f.ctx, "fleet.hb.prod."+id, []byte(fmt.Sprintf(base, id, labels))); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, waitLong, func() error {
		got := rejected(t, url)
		if got["bad_labels"] != 3 || got["malformed"] != 0 {
			return fmt.Errorf("rejected %v: want bad_labels 3, malformed 0", got)
		}
		agents := rc.c.Inventory().Agents("", f.clk.Now())
		if len(agents) != 1 {
			return fmt.Errorf("%d agents in the inventory, want the one with good labels", len(agents))
		}
		if l := agents[0].Heartbeat.Labels.String(); l != "os=linux,pool=a" {
			return fmt.Errorf("labels %q", l)
		}
		return nil
	})
}
