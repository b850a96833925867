package fleetctl

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// An agent in the middle of an install shows what it is updating to and
// for how long; the others show how their last update ended.
func TestAgentsListShowsUpdatingAgents(t *testing.T) {
	e := newEnv(t)
	beats := []heartbeat.Heartbeat{
		{AgentID: "00000000-0000-4000-8000-000000000001", Hostname: "web-1", ActiveVersion: "1.0.0",
			StartVersion: "1.0.0", StartTime: testNow.Add(-12 * time.Second), UpdatingTo: "1.1.0"},
		{AgentID: "00000000-0000-4000-8000-000000000002", Hostname: "web-2", ActiveVersion: "1.1.0",
			StartVersion: "1.0.0", StartTime: testNow.Add(-time.Hour)},
		{AgentID: "00000000-0000-4000-8000-000000000003", Hostname: "web-3", ActiveVersion: "1.0.0",
			StartVersion: "1.0.0", StartTime: testNow.Add(-time.Hour), Rollback: true, RollbackFrom: "1.1.0"},
	}
	for _, hb := range beats {
		hb.V, hb.Group, hb.At = 1, "blue", testNow
		data, err := heartbeat.Encode(&hb)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.fleet.JS.Publish(e.ctx, heartbeat.SubjectFor("blue", hb.AgentID), data); err != nil {
			t.Fatal(err)
		}
	}
	out := e.mustRun(func(g *Global) error { return RunAgentsList(testCtx(), &AgentsOptions{Global: g}) })
	want := map[rollout.AgentID]string{
		beats[0].AgentID: "  1.0.0  updating → 1.1.0 (12s)  ",
		beats[1].AgentID: "  1.1.0  ok  ",
		beats[2].AgentID: "  1.0.0  rolled back from 1.1.0  ",
	}
	for id, w := range want {
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, string(id)) {
				line = l
			}
		}
		// Columns are padded: compare with runs of spaces squeezed to two.
		if got := squeeze(line); !strings.Contains(got, w) {
			t.Errorf("agent %s: line %q, want it to contain %q\n%s", id, line, w, out)
		}
	}
	checkWidth(t, out)
}

// squeeze turns every run of two or more spaces into two.
func squeeze(s string) string {
	for strings.Contains(s, "   ") {
		s = strings.ReplaceAll(s, "   ", "  ")
	}
	return s
}
