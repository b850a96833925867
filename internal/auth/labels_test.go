package auth_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestMayJoinGrantsAndDenials: an agent minted to move between groups by
// its labels (fleetctl auth agent --may-join, issue 28) gets, besides its
// own group's grants, exactly: its own heartbeat in the groups it may
// join, a read of their statuses, and a read of the groups key (the
// groups and their selectors). It still writes nothing but its own
// heartbeats (no plan key, no groups key, no status, no other agent's
// heartbeat, anywhere) and reads nothing beyond the spec, group statuses
// and the groups key (not the quarantine list, the config, the stats, the
// inventory). With a list of groups, a group not on it is refused like
// any other. Against an operator-mode server, each denial proven by the
// server's own permissions violation.
func TestMayJoinGrantsAndDenials(t *testing.T) {
	e := newFleetEnv(t)
	for id, join := range map[rollout.AgentID][]string{agentA: {auth.JoinAny}, agentB: {"red"}} {
		if _, _, err := e.dir.IssueAgentApps(id, "blue", auth.AppGrant{Join: join}, ""); err != nil {
			t.Fatal(err)
		}
	}
	e.put(e.fleet.Plan, kv.KeySpec, rollout.Spec{V: 1, StartVersion: "1.0.0", TargetVersion: "1.1.0"})
	for _, g := range []string{"blue", "red", "green"} {
		e.put(e.fleet.Plan, kv.GroupKey(g), rollout.GroupStatus{V: 1, Group: g, State: rollout.StateUnstarted})
	}
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("red"), rollout.DefaultGroup("blue")}
	cfg.Groups[0].Selector = rollout.Selector{"rack": "r1"}
	e.put(e.fleet.Config, kv.KeyConfig, cfg)
	groupsRev := e.put(e.fleet.Plan, kv.KeyGroups, rollout.GroupListOf(cfg))

	directGetKey := func(key string) func(ctx context.Context, a *agentConn) error {
		return func(ctx context.Context, a *agentConn) error {
			_, err := kv.DirectGetLast(ctx, a.nc, kv.PlanStream, kv.KeySubject(kv.BucketPlan, key))
			return err
		}
	}
	heartbeatIn := func(id rollout.AgentID, group string) func(ctx context.Context, a *agentConn) error {
		return func(ctx context.Context, a *agentConn) error {
			ack, err := a.js.Publish(ctx, heartbeat.SubjectFor(group, id), hbData(t, id, group))
			if err == nil && ack.Stream != kv.StreamHB {
				err = errors.New("acked by stream " + ack.Stream)
			}
			return err
		}
	}
	grants := []struct {
		name string
		id   rollout.AgentID
		run  func(ctx context.Context, a *agentConn) error
	}{
		{"any: heartbeat in its own group", agentA, heartbeatIn(agentA, "blue")},
		{"any: heartbeat as itself in another group", agentA, heartbeatIn(agentA, "red")},
		{"any: heartbeat in a group the config does not have yet", agentA, heartbeatIn(agentA, "green")},
		{"any: read another group's status", agentA, directGetKey(kv.GroupKey("red"))},
		{"any: read the groups key", agentA, func(ctx context.Context, a *agentConn) error {
			m, err := kv.DirectGetLast(ctx, a.nc, kv.PlanStream, kv.KeySubject(kv.BucketPlan, kv.KeyGroups))
			if err == nil && m.Sequence < groupsRev {
				err = fmt.Errorf("groups at revision %d, want %d", m.Sequence, groupsRev)
			}
			return err
		}},
		{"any: follow the groups key and another group's status", agentA, func(ctx context.Context, a *agentConn) error {
			got := make(chan *nats.Msg, 2)
			for _, subj := range []string{kv.PlanRepublish + kv.KeyGroups, kv.PlanRepublish + kv.GroupKey("red")} {
				if _, err := a.nc.ChanSubscribe(subj, got); err != nil {
					return err
				}
			}
			if err := a.nc.FlushWithContext(ctx); err != nil {
				return err
			}
			groupsRev = e.put(e.fleet.Plan, kv.KeyGroups, rollout.GroupListOf(cfg))
			e.put(e.fleet.Plan, kv.GroupKey("red"), rollout.GroupStatus{V: 1, Group: "red", State: rollout.StateUnstarted})
			for seen := 0; seen < 2; seen++ {
				select {
				case m := <-got:
					if m.Header.Get(jetstream.SequenceHeader) == "" {
						return errors.New("not a republished value: " + m.Subject)
					}
				case <-ctx.Done():
					return errors.New("republished changes not received")
				}
			}
			return nil
		}},
		{"list: heartbeat in a group on its list", agentB, heartbeatIn(agentB, "red")},
		{"list: read that group's status", agentB, directGetKey(kv.GroupKey("red"))},
		{"list: read the groups key", agentB, directGetKey(kv.KeyGroups)},
	}
	for _, g := range grants {
		t.Run("grant/"+g.name, func(t *testing.T) {
			a := e.agent(g.id, auth.AgentCredsFile(g.id))
			ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
			defer cancel()
			if err := g.run(ctx, a); err != nil {
				t.Fatalf("granted call failed: %v (server said: %q)", err, a.violations())
			}
			if v := a.violations(); len(v) > 0 {
				t.Errorf("granted call caused errors: %q", v)
			}
		})
	}

	jsPublish := func(subject string, data []byte) func(context.Context, *agentConn) error {
		return func(ctx context.Context, a *agentConn) error {
			_, err := a.js.Publish(ctx, subject, data)
			return err
		}
	}
	directGet := func(stream, subject string) func(context.Context, *agentConn) error {
		return func(ctx context.Context, a *agentConn) error {
			_, err := a.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
			return err
		}
	}
	publish := func(subject string) func(context.Context, *agentConn) error {
		return func(ctx context.Context, a *agentConn) error {
			if err := a.nc.Publish(subject, []byte("{}")); err != nil {
				return err
			}
			return a.nc.FlushWithContext(ctx)
		}
	}
	subscribe := func(subject string) func(context.Context, *agentConn) error {
		return func(ctx context.Context, a *agentConn) error {
			if _, err := a.nc.SubscribeSync(subject); err != nil {
				return err
			}
			return a.nc.FlushWithContext(ctx)
		}
	}
	groupsKey := kv.KeySubject(kv.BucketPlan, kv.KeyGroups)
	denials := []struct {
		id rollout.AgentID
		denial
	}{
		// Writes: nothing but its own heartbeats.
		{agentA, denial{"any: write the groups key (move every host)", jsPublish(groupsKey, []byte(`{"v":1,"groups":[]}`)), groupsKey, false}},
		{agentA, denial{"any: fake the republished groups key", publish(kv.PlanRepublish + kv.KeyGroups), kv.PlanRepublish + kv.KeyGroups, true}},
		{agentA, denial{"any: write another group's status", jsPublish("$KV.fleet_plan.group.red", []byte(`{"v":1}`)), "$KV.fleet_plan.group.red", false}},
		{agentA, denial{"any: write the spec", jsPublish("$KV.fleet_plan.spec", []byte(`{"v":1}`)), "$KV.fleet_plan.spec", false}},
		{agentA, denial{"any: write an app's groups key", jsPublish(kv.KeySubject(kv.BucketPlan, kv.OtherNS("db").Groups()), []byte(`{"v":1}`)),
			kv.KeySubject(kv.BucketPlan, kv.OtherNS("db").Groups()), false}},
		{agentA, denial{"any: heartbeat as another agent in another group", jsPublish(heartbeat.SubjectFor("red", agentB), hbData(t, agentB, "red")),
			heartbeat.SubjectFor("red", agentB), false}},
		{agentA, denial{"any: fake a group's republished status", publish(kv.PlanRepublish + kv.GroupKey("red")), kv.PlanRepublish + kv.GroupKey("red"), true}},
		{agentA, denial{"any: write fleet_config", publish("$KV.fleet_config.config"), "$KV.fleet_config.config", true}},
		{agentA, denial{"any: publish an event", publish("fleet.events.red"), "fleet.events.red", true}},
		// Reads: nothing beyond the spec, group statuses and the groups key.
		{agentA, denial{"any: read the quarantine list", directGet(kv.PlanStream, kv.KeySubject(kv.BucketPlan, kv.KeyQuarantine)),
			"$JS.API.DIRECT.GET.KV_fleet_plan." + kv.KeySubject(kv.BucketPlan, kv.KeyQuarantine), false}},
		{agentA, denial{"any: read the config", directGet("KV_fleet_config", "$KV.fleet_config.config"),
			"$JS.API.DIRECT.GET.KV_fleet_config.$KV.fleet_config.config", false}},
		{agentA, denial{"any: read another agent's heartbeat", directGet(kv.StreamHB, heartbeat.SubjectFor("blue", agentB)),
			"$JS.API.DIRECT.GET.FLEET_HB." + heartbeat.SubjectFor("blue", agentB), false}},
		{agentA, denial{"any: read an app's spec", directGet(kv.PlanStream, kv.KeySubject(kv.BucketPlan, kv.OtherNS("db").Spec())),
			"$JS.API.DIRECT.GET.KV_fleet_plan." + kv.KeySubject(kv.BucketPlan, kv.OtherNS("db").Spec()), false}},
		{agentA, denial{"any: subscribe to every heartbeat", subscribe("fleet.hb.>"), "fleet.hb.>", true}},
		{agentA, denial{"any: subscribe to every plan change", subscribe("fleet.plan.>"), "fleet.plan.>", true}},
		// A list is a list.
		{agentB, denial{"list: heartbeat in a group not on its list", jsPublish(heartbeat.SubjectFor("green", agentB), hbData(t, agentB, "green")),
			heartbeat.SubjectFor("green", agentB), false}},
		{agentB, denial{"list: read a group's status not on its list", directGet(kv.PlanStream, "$KV.fleet_plan.group.green"),
			"$JS.API.DIRECT.GET.KV_fleet_plan.$KV.fleet_plan.group.green", false}},
		{agentB, denial{"list: heartbeat as another agent in a group on its list", jsPublish(heartbeat.SubjectFor("red", agentA), hbData(t, agentA, "red")),
			heartbeat.SubjectFor("red", agentA), false}},
	}
	for _, d := range denials {
		t.Run("deny/"+d.name, func(t *testing.T) { d.expect(t, e, e.agent(d.id, auth.AgentCredsFile(d.id))) })
	}
	// Nothing the agents tried reached the groups key.
	if got, err := e.fleet.Plan.Get(e.ctx, kv.KeyGroups); err != nil || got.Revision() != groupsRev {
		t.Fatalf("groups key: %v; want it at revision %d, written by the admin alone", err, groupsRev)
	}
	t.Logf("--may-join credentials: %d grants, %d denials tested", len(grants), len(denials))
}
