package fleetctl

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestPlanForecastLabelsGolden: with a selector on lab (tier=lab), the
// forecast counts two prod hosts whose labels say tier=lab in lab (5, not
// 3; prod 98, not 100) and says so; a host already heartbeating in lab, and
// a prod host whose labels match no selector, stay where they are. lab's
// five agents are more than its canaries: its schedule changes with them.
func TestPlanForecastLabelsGolden(t *testing.T) {
	e := forecastFixture(t, testNow.Add(-5*time.Second))
	cfg := e.config().Value
	for i := range cfg.Groups {
		if cfg.Groups[i].Name == "lab" {
			cfg.Groups[i].Selector = rollout.Selector{"tier": "lab"}
		}
	}
	e.putConfig(cfg)
	beat := func(id rollout.AgentID, labels rollout.Labels) heartbeat.Heartbeat {
		set, err := heartbeat.MakeLabelSet(labels)
		if err != nil {
			t.Fatal(err)
		}
		return heartbeat.Heartbeat{AgentID: id, Hostname: "h", ActiveVersion: "1.3.2", UpdaterVersion: "1.3.2", Seq: 1, Labels: set}
	}
	auto := rollout.Labels{"os": "linux", "arch": "amd64"}
	withTier := func(tier string) rollout.Labels {
		l := rollout.Labels{"tier": tier}
		for k, v := range auto {
			l[k] = v
		}
		return l
	}
	e.putBeats("prod", beat(agentA, withTier("lab")), beat(agentB, withTier("lab")), beat(agentC, withTier("web")))
	e.putBeats("lab", beat(agentD, withTier("lab")))
	out := e.mustRun(forecast(PlanForecastOptions{At: forecastAt, Output: "table", Local: newYork(t)}))
	checkGolden(t, "forecast_labels.golden", out)
	checkWidth(t, out)
	if !strings.Contains(out, "2 prod → lab") {
		t.Errorf("no note of the agents moved by their labels:\n%s", out)
	}
}
