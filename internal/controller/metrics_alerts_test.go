package controller_test

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// serveMetrics serves rc's /metrics with the group, mode and quarantine
// figures of a plan mirror, as "controller run --http-addr" does, and
// returns its base URL.
func (f *fixture) serveMetrics(rc *runningController) string {
	f.t.Helper()
	mirror := &controller.PlanMirror{NC: f.srv.Conn("mirror"), Store: &httpfind.Store{}, Log: natstest.Logger(f.t)}
	rc.c.ServePlanFrom(mirror)
	go func() { _ = mirror.Run(f.ctx) }()
	srv := httptest.NewServer(rc.c.HTTPHandler(&httpfind.Handler{Store: mirror.Store, Apps: mirror.FindApp, Ready: mirror.Ready}))
	f.t.Cleanup(srv.Close)
	return srv.URL
}

// waitMetrics scrapes base until every sample of want has its value (the
// plan mirror follows the bucket a moment behind the writes); it returns
// that scrape.
func (f *fixture) waitMetrics(base string, want map[string]float64) map[string]float64 {
	f.t.Helper()
	var samples map[string]float64
	natstest.Eventually(f.t, waitLong, func() error {
		var err error
		if samples, err = scrape(f.t, base+controller.PathMetrics); err != nil {
			return err
		}
		for key, v := range want {
			if got, ok := samples[key]; !ok || got != v {
				return fmt.Errorf("%s = %v (present %v), want %v", key, got, ok, v)
			}
		}
		return nil
	})
	return samples
}

// writeGroup applies an operator action to blue's stored status with
// compare-and-swap, as fleetctl does.
func (f *fixture) writeGroup(action func(rollout.GroupStatus, string, time.Time) (rollout.GroupStatus, rollout.Event, error)) {
	f.t.Helper()
	e, err := kv.Get[rollout.GroupStatus](f.ctx, f.fleet.Plan, kv.GroupKey("blue"))
	if err != nil {
		f.t.Fatal(err)
	}
	next, _, err := action(e.Value, "test", f.clk.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.GroupKey("blue"), next, e.Revision); err != nil {
		f.t.Fatal(err)
	}
}

// TestAlertedGaugeFollowsItsCause (issue 25 point 5): fleetwave_group_alerted
// says "taking longer than its alert_after" and nothing else. On the real
// controller's /metrics it is 1 for an active group past its alert_after;
// 0 once that group halts (the halt has its own alert: the engine's alerted
// flag, which a halt sets, made FleetwaveGroupAlertAfterPassed fire beside
// FleetwaveGroupHalted); and 0 for good once it is marked done (the flag
// stays set on a done group, and the alert kept firing for it).
func TestAlertedGaugeFollowsItsCause(t *testing.T) {
	f := newFixture(t)
	f.blueConfig(func(g *rollout.GroupConfig) {
		g.AlertAfter = rollout.Duration(time.Minute)
		g.FailureThreshold = 10 // 2 of 10 failed halts
	})
	rc := f.startController("c1")
	base := f.serveMetrics(rc)
	agents := tenAgents()

	st := f.startBlue(rc, agents)
	if st.Alerted {
		t.Fatalf("blue alerted as it became active: %+v", st)
	}
	f.waitMetrics(base, map[string]float64{
		`fleetwave_group_state{app="default",group="blue",state="active"}`: 1,
		`fleetwave_group_alerted{app="default",group="blue"}`:              0,
	})

	// Past alert_after, active, not halted: the one case the gauge is for.
	for !st.Alerted {
		if f.clk.Now().Sub(st.StartedAt) > 3*time.Minute {
			t.Fatalf("blue not alerted %v after its start (alert_after 1m)", f.clk.Now().Sub(st.StartedAt))
		}
		st = f.passWith(rc, agents)
	}
	f.waitMetrics(base, map[string]float64{
		`fleetwave_group_alerted{app="default",group="blue"}`: 1,
		`fleetwave_group_halted{app="default",group="blue"}`:  0,
	})

	// The two agents the window let update roll back: blue halts.
	for _, i := range told(st, agents) {
		agents[i].hb.Rollback, agents[i].hb.RollbackFrom, agents[i].hb.StartTime = true, "2.0.0", f.clk.Now().UTC()
		agents[i].hb.Error, agents[i].hb.ErrorClass = "health check failed", "release"
	}
	if st = f.passWith(rc, agents); !st.Halted {
		t.Fatalf("blue did not halt on 2 rollbacks of 10: %+v", st)
	}
	f.waitMetrics(base, map[string]float64{
		`fleetwave_group_halted{app="default",group="blue"}`:  1,
		`fleetwave_group_alerted{app="default",group="blue"}`: 0,
	})

	// Marked done (fleetctl mark-done): nothing to alert on.
	f.writeGroup(rollout.MarkDone)
	f.waitMetrics(base, map[string]float64{
		`fleetwave_group_state{app="default",group="blue",state="done"}`: 1,
		`fleetwave_group_halted{app="default",group="blue"}`:             0,
		`fleetwave_group_alerted{app="default",group="blue"}`:            0,
	})
	if e, err := kv.Get[rollout.GroupStatus](f.ctx, f.fleet.Plan, kv.GroupKey("blue")); err != nil || !e.Value.Alerted {
		t.Errorf("blue's stored alerted flag %v (%v): the test wants the engine's flag set on the done group", e.Value.Alerted, err)
	}
	for range 3 {
		f.passWith(rc, agents)
	}
	f.waitMetrics(base, map[string]float64{
		`fleetwave_group_state{app="default",group="blue",state="done"}`: 1,
		`fleetwave_group_alerted{app="default",group="blue"}`:            0,
	})
}

// TestAlertAfterNotRaisedAgainByAReset: a group halted before its
// alert_after passed and then reset: the halt raised its own alert and
// left the engine's alerted flag (alert_after's) alone, so the gauge says
// alert_after has passed only once it has, and the engine raises it then.
func TestAlertAfterNotRaisedAgainByAReset(t *testing.T) {
	f := newFixture(t)
	f.blueConfig(func(g *rollout.GroupConfig) {
		g.AlertAfter = rollout.Duration(5 * time.Minute)
		g.FailureThreshold = 10
	})
	rc := f.startController("c1")
	base := f.serveMetrics(rc)
	agents := tenAgents()
	st := f.startBlue(rc, agents)
	failing := told(st, agents)
	for _, i := range failing {
		agents[i].hb.Rollback, agents[i].hb.RollbackFrom, agents[i].hb.StartTime = true, "2.0.0", f.clk.Now().UTC()
		agents[i].hb.Error, agents[i].hb.ErrorClass = "health check failed", "release"
	}
	if st = f.passWith(rc, agents); !st.Halted || st.Alerted {
		t.Fatalf("blue: halted %v, alerted %v; want halted, and alert_after's flag not set by the halt", st.Halted, st.Alerted)
	}
	// The two report healthy on 1.0.0 again.
	for _, i := range failing {
		agents[i].hb.Rollback, agents[i].hb.RollbackFrom, agents[i].hb.Error, agents[i].hb.ErrorClass = false, "", "", ""
	}
	f.writeGroup(rollout.Reset)
	st = f.passWith(rc, agents)
	if st.Halted || st.Alerted || f.clk.Now().Sub(st.StartedAt) >= 5*time.Minute {
		t.Fatalf("blue after the reset: halted %v, alerted %v, %v after its start; want neither, within alert_after",
			st.Halted, st.Alerted, f.clk.Now().Sub(st.StartedAt))
	}
	f.waitMetrics(base, map[string]float64{
		`fleetwave_group_halted{app="default",group="blue"}`:  0,
		`fleetwave_group_alerted{app="default",group="blue"}`: 0,
	})
	for f.clk.Now().Sub(st.StartedAt) < 5*time.Minute {
		st = f.passWith(rc, agents)
		if st.State != rollout.StateActive || st.Halted {
			t.Fatalf("blue %s, halted %v; want active", st.State, st.Halted)
		}
	}
	if !st.Alerted {
		t.Errorf("alert_after passed after the reset, but the engine raised no alert")
	}
	f.waitMetrics(base, map[string]float64{`fleetwave_group_alerted{app="default",group="blue"}`: 1})
}

// TestModeAndQuarantineMetrics (issue 25 point 5): the effective mode and
// each source's, and the quarantined versions, are on /metrics, so that a
// pause and a quarantine can be alerted on (FleetwavePaused,
// FleetwaveVersionQuarantined); a group whose target is quarantined says so
// (its halt is the quarantine's, not a second alert).
func TestModeAndQuarantineMetrics(t *testing.T) {
	f := newFixture(t)
	f.blueConfig(nil)
	rc := f.startController("c1")
	base := f.serveMetrics(rc)
	agents := tenAgents()
	f.startBlue(rc, agents)
	samples := f.waitMetrics(base, map[string]float64{
		`fleetwave_mode{app="default",mode="enabled"}`:                         1,
		`fleetwave_mode{app="default",mode="paused"}`:                          0,
		`fleetwave_mode{app="default",mode="disabled"}`:                        0,
		`fleetwave_mode_setting{app="default",mode="enabled",source="config"}`: 1,
		`fleetwave_mode_setting{app="default",mode="enabled",source="plan"}`:   1,
		`fleetwave_group_target_quarantined{app="default",group="blue"}`:       0,
	})
	for key := range samples {
		if len(key) > len("fleetwave_version_quarantined") && key[:len("fleetwave_version_quarantined")] == "fleetwave_version_quarantined" {
			t.Errorf("nothing is quarantined, yet %s", key)
		}
	}

	// fleetctl pause: the plan's mode.
	spec, err := kv.Get[rollout.Spec](f.ctx, f.fleet.Plan, kv.KeySpec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Value.Mode = rollout.ModePaused
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec.Value, spec.Revision); err != nil {
		t.Fatal(err)
	}
	f.waitMetrics(base, map[string]float64{
		`fleetwave_mode{app="default",mode="paused"}`:                          1,
		`fleetwave_mode{app="default",mode="enabled"}`:                         0,
		`fleetwave_mode_setting{app="default",mode="paused",source="plan"}`:    1,
		`fleetwave_mode_setting{app="default",mode="enabled",source="config"}`: 1,
	})

	// The config's mode disabled is the lower: effective disabled.
	cfg, err := kv.Get[rollout.Config](f.ctx, f.fleet.Config, kv.KeyConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Value.Mode = rollout.ModeDisabled
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg.Value, cfg.Revision); err != nil {
		t.Fatal(err)
	}
	f.waitMetrics(base, map[string]float64{
		`fleetwave_mode{app="default",mode="disabled"}`:                         1,
		`fleetwave_mode{app="default",mode="paused"}`:                           0,
		`fleetwave_mode_setting{app="default",mode="disabled",source="config"}`: 1,
		`fleetwave_mode_setting{app="default",mode="paused",source="plan"}`:     1,
	})

	// An operator quarantines blue's target.
	q := rollout.QuarantineList{V: 1, Versions: []rollout.Quarantine{{Version: "2.0.0", Reason: "bad", At: f.clk.Now().UTC(), By: "alice"}}}
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeyQuarantine, q, 0); err != nil {
		t.Fatal(err)
	}
	f.waitMetrics(base, map[string]float64{
		`fleetwave_version_quarantined{app="default",version="2.0.0"}`:   1,
		`fleetwave_group_target_quarantined{app="default",group="blue"}`: 1,
	})
	// Lifted: gone.
	e, err := kv.Get[rollout.QuarantineList](f.ctx, f.fleet.Plan, kv.KeyQuarantine)
	if err != nil {
		t.Fatal(err)
	}
	e.Value.Versions = nil
	e.Value.Lifted = []rollout.Lift{{Version: "2.0.0", At: f.clk.Now().UTC(), By: "alice"}}
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeyQuarantine, e.Value, e.Revision); err != nil {
		t.Fatal(err)
	}
	samples = f.waitMetrics(base, map[string]float64{`fleetwave_group_target_quarantined{app="default",group="blue"}`: 0})
	if _, ok := samples[`fleetwave_version_quarantined{app="default",version="2.0.0"}`]; ok {
		t.Errorf("2.0.0's quarantine was lifted, yet fleetwave_version_quarantined{version=\"2.0.0\"} is served")
	}
}
