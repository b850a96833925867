package sim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/test/sim"
)

// ciOptions: ~2,000 agents in 3 groups, 20% max_in_flight, canary_count 5,
// compressed time (heartbeat and stats 1s, reconcile 300ms).
func ciOptions(t *testing.T) sim.Options {
	return sim.Options{
		Agents: 2000, Groups: 3, AgentsPerConn: 1000,
		MaxInFlight: 20, CanaryCount: 5, FailureThreshold: 5,
		InstallMin: 200 * time.Millisecond, InstallMax: 600 * time.Millisecond,
		Timeout: 2 * time.Minute, Seed: 7, Log: natstest.Logger(t),
	}
}

func run(t *testing.T, o sim.Options) *sim.Report {
	t.Helper()
	rep, err := sim.Run(context.Background(), o)
	if rep != nil {
		var b strings.Builder
		rep.WriteTable(&b)
		t.Logf("report:\n%s", b.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestGoodRelease: every group reaches done, every agent ends on the
// target, and in the active phase no more agents update at once than
// max_in_flight × initial_count + 1 (the lowest-id guard); in the canary
// phase no more than the canaries.
func TestGoodRelease(t *testing.T) {
	o := ciOptions(t)
	rep := run(t, o)
	if rep.Outcome != "done" {
		t.Fatalf("outcome %s, want done", rep.Outcome)
	}
	total := 0
	for _, g := range rep.Groups {
		total += g.InitialCount
		if g.State != "done" || g.Halted {
			t.Errorf("group %s: %s halted=%v", g.Name, g.State, g.Halted)
		}
		if g.OnTarget != g.InitialCount {
			t.Errorf("group %s: %d of %d agents on the target", g.Name, g.OnTarget, g.InitialCount)
		}
		if g.MaxInFlightActive > g.Bound {
			t.Errorf("group %s: %d agents updating at once, bound %d", g.Name, g.MaxInFlightActive, g.Bound)
		}
		if g.MaxInFlightCanary > o.CanaryCount {
			t.Errorf("group %s: %d agents updating at once in the canary phase, %d canaries", g.Name, g.MaxInFlightCanary, o.CanaryCount)
		}
		if g.WallTime <= 0 {
			t.Errorf("group %s: no wall time", g.Name)
		}
	}
	if total != o.Agents {
		t.Errorf("initial counts sum to %d, want %d", total, o.Agents)
	}
	if rep.Notified != o.Agents || rep.NotifyP99 <= 0 {
		t.Errorf("notified %d agents (p99 %v), want %d", rep.Notified, rep.NotifyP99, o.Agents)
	}
	if rep.HeartbeatsPerSec <= 0 || rep.HeartbeatsRejected != 0 {
		t.Errorf("heartbeats %.0f/s, %d rejected", rep.HeartbeatsPerSec, rep.HeartbeatsRejected)
	}
}

// TestReleaseFailsEverywhere: a release that fails on every host is tried
// by no more hosts than group 1's canaries; group 1 halts; groups 2 and 3
// never start.
func TestReleaseFailsEverywhere(t *testing.T) {
	o := ciOptions(t)
	o.FailRate = map[string]float64{"2.0.0": 1}
	rep := run(t, o)
	if rep.Outcome != "halted" {
		t.Fatalf("outcome %s, want halted", rep.Outcome)
	}
	g1 := rep.Groups[0]
	if !g1.Halted || g1.State != "canary" {
		t.Errorf("group 1: %s halted=%v, want canary halted", g1.State, g1.Halted)
	}
	if g1.BadVersionHosts < 1 || g1.BadVersionHosts > o.CanaryCount {
		t.Errorf("group 1: %d hosts started the bad version, want 1..%d (canary_count)", g1.BadVersionHosts, o.CanaryCount)
	}
	if g1.StartsAfterHalt != 0 {
		t.Errorf("group 1: %d installs started after the halt", g1.StartsAfterHalt)
	}
	for _, g := range rep.Groups[1:] {
		if g.State != "unstarted" || g.Starts != 0 || g.BadVersionHosts != 0 {
			t.Errorf("group %s: %s with %d installs, want unstarted and none", g.Name, g.State, g.Starts)
		}
	}
}

// TestReleaseFailsOnTenPercent: the halt fires before the failures exceed
// failure_threshold + max_in_flight of the group.
func TestReleaseFailsOnTenPercent(t *testing.T) {
	o := ciOptions(t)
	o.FailRate = map[string]float64{"2.0.0": 0.10}
	// Failures fall on a fixed 10% of hosts (by id); with seed 1 group 1's
	// canaries are among the 90%, so the halt comes from failure_threshold
	// in the active phase, not from a canary.
	o.Seed = 1
	rep := run(t, o)
	if g1 := rep.Groups[0]; g1.State != "active" || !g1.Halted {
		t.Errorf("group 1: %s halted=%v, want active halted", g1.State, g1.Halted)
	}
	if rep.Outcome != "halted" {
		t.Fatalf("outcome %s, want halted", rep.Outcome)
	}
	halted := 0
	for i, g := range rep.Groups {
		if !g.Halted {
			if g.Failed > g.FailureLimit {
				t.Errorf("group %s: %d failures over the limit %d and not halted", g.Name, g.Failed, g.FailureLimit)
			}
			continue
		}
		halted++
		if limit := g.FailureLimit + g.Bound - 1; g.Failed > limit {
			t.Errorf("group %s: %d failures before the halt, want ≤ failure_threshold %d + max_in_flight %d", g.Name, g.Failed, g.FailureLimit, g.Bound-1)
		}
		if g.StartsAfterHalt != 0 {
			t.Errorf("group %s: %d installs started after the halt", g.Name, g.StartsAfterHalt)
		}
		for _, later := range rep.Groups[i+1:] {
			if later.Starts != 0 {
				t.Errorf("group %s started (%d installs) after %s halted", later.Name, later.Starts, g.Name)
			}
		}
	}
	if halted != 1 {
		t.Errorf("%d groups halted, want 1", halted)
	}
}
