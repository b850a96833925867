package agentd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

func TestPlanFollowerWithoutConsumers(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := srv.JetStream("admin")
	fleet, err := kv.Ensure(ctx, admin, kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	// A spec exists before the agent starts: read at start.
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	specRev, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	nc := srv.Conn("agent")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Now())
	f := &agentd.PlanFollower{NC: nc, JS: js, Group: "blue", Clock: clk, Log: natstest.Logger(t)}
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	waitPlan := func(what string, ok func(agentd.Plan) bool) {
		t.Helper()
		natstest.Eventually(t, 10*time.Second, func() error {
			if p := f.Plan(); !ok(p) {
				return fmt.Errorf("%s: plan is %+v", what, p)
			}
			return nil
		})
	}
	waitPlan("spec read at start", func(p agentd.Plan) bool { return p.SpecRev == specRev && p.Spec.TargetVersion == "1.1.0" })

	// Live changes arrive through the republished subjects.
	st := rollout.GroupStatus{V: 1, Group: "blue", State: rollout.StateActive, TargetVersion: "1.1.0", StartVersion: "1.0.0", Progress: 0.5, Mode: rollout.ModeEnabled}
	stRev, err := kv.Save(ctx, fleet.Plan, kv.GroupKey("blue"), st, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitPlan("group status republished", func(p agentd.Plan) bool { return p.StatusRev == stRev && p.Status.Progress == 0.5 })
	// Another group's status is none of this agent's business.
	if _, err := kv.Save(ctx, fleet.Plan, kv.GroupKey("green"), st, 0); err != nil {
		t.Fatal(err)
	}
	spec.TargetVersion = "1.2.0"
	specRev, err = kv.Update(ctx, fleet.Plan, kv.KeySpec, spec, specRev)
	if err != nil {
		t.Fatal(err)
	}
	waitPlan("new target republished", func(p agentd.Plan) bool { return p.SpecRev == specRev && p.Spec.TargetVersion == "1.2.0" })
	if p := f.Plan(); p.StatusRev != stRev {
		t.Errorf("status revision moved to %d by another group's write", p.StatusRev)
	}

	// The follower costs the server no consumer.
	info, err := fleet.Plan.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := admin.Stream(ctx, "KV_"+info.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	si, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if si.State.Consumers != 0 {
		t.Errorf("plan stream has %d consumers with one agent following it; want 0", si.State.Consumers)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("follower ended with %v", err)
	}
}
