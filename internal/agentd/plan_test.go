package agentd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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
	clk := clock.NewManual(time.Now())
	f := &agentd.PlanFollower{NC: nc, Group: "blue", Clock: clk, Log: natstest.Logger(t)}
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

// TestPlanFollowerIgnoresForeignMessages delivers on the agent's own plan
// subjects what an attacker in its account can aim there: another group's
// status (a direct get whose reply subject is fleet.plan.group.<own>, the
// reflection that once made prod hosts act on canary's status), a message
// with no stored-value headers, and, stored under the agent's own key, a
// status that names another group or was computed for another target. The
// follower acts on none of them, and still takes the next real change.
func TestPlanFollowerIgnoresForeignMessages(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	if _, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}
	status := func(group string, state rollout.State, target string) rollout.GroupStatus {
		return rollout.GroupStatus{V: 1, Group: group, State: state, TargetVersion: target, StartVersion: "1.0.0",
			Progress: 1, Mode: rollout.ModeEnabled}
	}
	blueRev, err := kv.Save(ctx, fleet.Plan, kv.GroupKey("blue"), status("blue", rollout.StateUnstarted, "1.1.0"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Save(ctx, fleet.Plan, kv.GroupKey("red"), status("red", rollout.StateDone, "1.1.0"), 0); err != nil {
		t.Fatal(err)
	}

	var log natstest.Buffer
	clk := clock.NewManual(time.Now())
	f := &agentd.PlanFollower{NC: srv.Conn("agent"), Group: "blue", Clock: clk,
		Log: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	natstest.Eventually(t, 10*time.Second, func() error {
		if p := f.Plan(); p.StatusRev != blueRev {
			return fmt.Errorf("status revision %d, want %d", p.StatusRev, blueRev)
		}
		return nil
	})
	want := f.Plan()

	// Each foreign message is followed by a wait for the follower to say
	// why it ignored it (the clock moved past the log's rate limit).
	logged := func(why string) {
		t.Helper()
		natstest.Eventually(t, 10*time.Second, func() error {
			if !strings.Contains(log.String(), why) {
				return fmt.Errorf("log does not say %q:\n%s", why, log.String())
			}
			return nil
		})
		clk.Advance(time.Minute)
	}
	attacker := srv.Conn("attacker")
	// Reflection: red's status, answered onto blue's subject. Its Nats-Subject
	// header says $KV.fleet_plan.group.red.
	if err := attacker.PublishRequest("$JS.API.DIRECT.GET."+kv.PlanStream+"."+kv.KeySubject(kv.BucketPlan, kv.GroupKey("red")),
		kv.PlanRepublish+kv.GroupKey("blue"), nil); err != nil {
		t.Fatal(err)
	}
	logged(`for key \"group.red\"`)
	// A bare message: no server headers at all.
	if err := attacker.Publish(kv.PlanRepublish+kv.GroupKey("blue"), []byte(`{"v":1,"group":"blue","state":"done"}`)); err != nil {
		t.Fatal(err)
	}
	logged("no Nats-Stream")
	// Stored under blue's key (a broken writer): a status naming red.
	if _, err := fleet.Plan.Put(ctx, kv.GroupKey("blue"), mustJSON(t, status("red", rollout.StateDone, "1.1.0"))); err != nil {
		t.Fatal(err)
	}
	logged("names another group")
	// Stored under blue's key: done, but for a target that is not the spec's.
	if _, err := fleet.Plan.Put(ctx, kv.GroupKey("blue"), mustJSON(t, status("blue", rollout.StateDone, "6.6.6"))); err != nil {
		t.Fatal(err)
	}
	logged("computed for another target")
	if diff := cmp.Diff(want, f.Plan()); diff != "" {
		t.Errorf("plan after the foreign messages (-want +got):\n%s", diff)
	}
	// A real change is still taken.
	realRev, err := fleet.Plan.Put(ctx, kv.GroupKey("blue"), mustJSON(t, status("blue", rollout.StateCanary, "1.1.0")))
	if err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() error {
		if p := f.Plan(); p.StatusRev != realRev || p.Status.State != rollout.StateCanary {
			return fmt.Errorf("status %s at revision %d, want the real change at %d", p.Status.State, p.StatusRev, realRev)
		}
		return nil
	})
	cancel()
	<-done
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
