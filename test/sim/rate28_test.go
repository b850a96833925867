package sim_test

import (
	"slices"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/sim"
)

// Issue 28, points 6 and 7, at a small scale (docs/PERFORMANCE.md §12 has
// the 10,000-host figures): one group, no canaries, a real controller and
// NATS server.

func oneGroup28(t *testing.T, agents int) sim.Options {
	return sim.Options{
		Agents: agents, Groups: 1, AgentsPerConn: 1000, NoCanaries: true,
		MaxInFlight: 50, FailureThreshold: 5, NoQuarantine: true,
		InstallMin: 200 * time.Millisecond, InstallMax: 600 * time.Millisecond,
		Timeout: 2 * time.Minute, Seed: 28, Log: natstest.Logger(t),
	}
}

// TestSimRateRamp: a rate of 50/s ×2 up to 400/s on 2,000 hosts ramps
// 50, 100, 200, 400 and no further; no period starts more than 400, and
// max_in_flight's bound holds too.
func TestSimRateRamp(t *testing.T) {
	o := oneGroup28(t, 2000)
	o.Rate = &rollout.RateConfig{Start: rollout.RatePer{N: 50, Per: time.Second}, Factor: 2, Max: rollout.RatePer{N: 400, Per: time.Second}}
	rep := run(t, o)
	g := rep.Groups[0]
	if rep.Outcome != "done" || g.OnTarget != g.InitialCount {
		t.Fatalf("outcome %s, %d of %d on the target", rep.Outcome, g.OnTarget, g.InitialCount)
	}
	a := g.Rate.Allowances
	if len(a) < 3 || a[0] != 50 || !slices.IsSorted(a) || a[len(a)-1] > 400 {
		t.Errorf("allowances %v: want a ramp from 50, never down (no failure), never above 400", a)
	}
	if g.Rate.MaxStarted > 400 || g.Rate.MaxStarted < 1 {
		t.Errorf("at most %d started in one period, want 1..400", g.Rate.MaxStarted)
	}
	if g.MaxInFlightActive > g.Bound {
		t.Errorf("%d in flight at once, bound %d", g.MaxInFlightActive, g.Bound)
	}
}

// TestSimAdaptiveVsFixed: a release failing on 10% of hosts, run with the
// fixed bound and with adaptive_in_flight on the same hosts. The adaptive
// bound shrinks, and the halt comes no later in the rollout: no more hosts
// started the bad version by the end, no more failed. (In wall time it
// comes later: fewer hosts at once reach failure_threshold's count more
// slowly; the test logs both.)
func TestSimAdaptiveVsFixed(t *testing.T) {
	o := oneGroup28(t, 2000)
	o.FailRate, o.FailureThreshold = map[string]float64{"2.0.0": 0.1}, 1
	fixed := run(t, o)
	o.AdaptiveInFlight = true
	adaptive := run(t, o)
	f, a := fixed.Groups[0], adaptive.Groups[0]
	if !f.Halted || !a.Halted {
		t.Fatalf("halted: fixed %v, adaptive %v; want both", f.Halted, a.Halted)
	}
	if a.Adaptive.Start == 0 || a.Adaptive.Min >= a.Adaptive.Start && a.Adaptive.Min >= a.Adaptive.Max || a.Adaptive.Moves["failures"] == 0 {
		t.Errorf("adaptive bound %+v: want it to shrink on failures", a.Adaptive)
	}
	if a.Adaptive.Max > f.Bound-1 {
		t.Errorf("adaptive bound reached %d, above max_in_flight's %d", a.Adaptive.Max, f.Bound-1)
	}
	if a.BadVersionHosts > f.BadVersionHosts || a.Failed > f.Failed {
		t.Errorf("adaptive: %d hosts started the bad version, %d failed; fixed: %d, %d: want no more", a.BadVersionHosts, a.Failed, f.BadVersionHosts, f.Failed)
	}
	t.Logf("halt after %v (adaptive) vs %v (fixed); bad-version hosts %d vs %d; failed %d vs %d",
		a.HaltAfter, f.HaltAfter, a.BadVersionHosts, f.BadVersionHosts, a.Failed, f.Failed)
}

// TestSimAdaptiveHeartbeatLag: heartbeats reaching the controller 3s late
// (three intervals) for 4s of a good rollout: the bound shrinks for lag,
// and the rollout still finishes once the lag is gone.
func TestSimAdaptiveHeartbeatLag(t *testing.T) {
	o := oneGroup28(t, 1000)
	o.AdaptiveInFlight = true
	o.HeartbeatLag, o.LagFrom, o.LagFor = 3*time.Second, time.Second, 4*time.Second
	rep := run(t, o)
	g := rep.Groups[0]
	if rep.Outcome != "done" || g.OnTarget != g.InitialCount {
		t.Fatalf("outcome %s, %d of %d on the target", rep.Outcome, g.OnTarget, g.InitialCount)
	}
	if g.Adaptive.Moves["lag"] == 0 || g.Adaptive.Min >= g.Adaptive.Max {
		t.Errorf("adaptive bound %+v: want it to shrink for lag", g.Adaptive)
	}
}
