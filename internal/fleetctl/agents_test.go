package fleetctl

import (
	"encoding/json"
	"fmt"
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

// An agent silent for more than three heartbeat intervals is unreachable:
// STATE says so with what it last said, and -o json's class is
// "unreachable"; within three intervals it is what it said.
func TestAgentsListShowsUnreachableAgents(t *testing.T) {
	e := newEnv(t)
	hb := heartbeat.Heartbeat{V: 1, AgentID: "00000000-0000-4000-8000-000000000009", Hostname: "web-9", Group: "blue",
		ActiveVersion: "1.0.0", Error: "download: HTTP 503", ErrorClass: heartbeat.ClassInfrastructure, ErrorCause: "download failed (HTTP 503)", At: testNow}
	data, err := heartbeat.Encode(&hb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.fleet.JS.Publish(e.ctx, heartbeat.SubjectFor("blue", hb.AgentID), data); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute) // the stream stored it now
	for _, tc := range []struct {
		interval  time.Duration
		class     string
		stateCell string
	}{
		{time.Second, "unreachable", "unreachable (last: blocked: download failed (HTTP 503))"},
		{time.Hour, "blocked", "  blocked: download failed (HTTP 503)  "},
	} {
		list := func(output string) string {
			g, out, _ := e.global()
			g.Now = func() time.Time { return later }
			if err := RunAgentsList(testCtx(), &AgentsOptions{Global: g, Interval: tc.interval, Output: output}); err != nil {
				t.Fatal(err)
			}
			return out.String()
		}
		if out := list("text"); !strings.Contains(squeeze(out), tc.stateCell) {
			t.Errorf("interval %v: want %q in\n%s", tc.interval, tc.stateCell, out)
		}
		if out := list("json"); !strings.Contains(out, `"class": "`+tc.class+`"`) {
			t.Errorf("interval %v: want class %s in\n%s", tc.interval, tc.class, out)
		}
	}
}

// TestAgentsListWarnsOfUnknownGroups (issue 25, seen through the binaries):
// a host enabled with --group prdo heartbeats and shows "ok" in agents ls,
// but no rollout ever updates it. agents ls says so on stderr, with the
// closest group and both fixes, and -o json names the group and the count.
func TestAgentsListWarnsOfUnknownGroups(t *testing.T) {
	e := newEnv(t)
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("canary"), rollout.DefaultGroup("prod")}
	cfg.CatchAll = rollout.CatchAllNone // below: with a catch-all
	e.putConfig(cfg)
	for i, group := range []string{"prod", "prdo", "prdo"} {
		hb := heartbeat.Heartbeat{V: 1, AgentID: rollout.AgentID(fmt.Sprintf("00000000-0000-4000-8000-00000000000%d", i+1)), Hostname: "web",
			Group: group, ActiveVersion: "1.0.0", StartVersion: "1.0.0", At: testNow}
		data, err := heartbeat.Encode(&hb)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.fleet.JS.Publish(e.ctx, heartbeat.SubjectFor(group, hb.AgentID), data); err != nil {
			t.Fatal(err)
		}
	}
	g, out, errOut := e.global()
	if err := RunAgentsList(testCtx(), &AgentsOptions{Global: g}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "prdo") {
		t.Errorf("the table lacks the agents:\n%s", out)
	}
	want := `warning: 2 agent(s) in group "prdo", which the config does not name (did you mean "prod"?): no rollout updates them`
	if !strings.Contains(errOut.String(), want) || strings.Contains(errOut.String(), `group "prod",`) {
		t.Errorf("stderr:\n%s\nwant %q, and nothing about prod", errOut, want)
	}
	// With a catch-all group (omitted: the last, prod) and no copy of its
	// status under prdo yet, the warning says the controller will follow
	// it, not that no rollout ever updates it.
	cfg.CatchAll = ""
	e.putConfig(cfg)
	g, _, errOut = e.global()
	if err := RunAgentsList(testCtx(), &AgentsOptions{Global: g}); err != nil {
		t.Fatal(err)
	}
	want = `warning: 2 agent(s) in group "prdo", which the config does not name (did you mean "prod"?): not followed yet by catch-all group "prod"`
	if !strings.Contains(errOut.String(), want) || strings.Contains(errOut.String(), "no rollout updates them") {
		t.Errorf("stderr:\n%s\nwant %q", errOut, want)
	}
	g, out, _ = e.global()
	if err := RunAgentsList(testCtx(), &AgentsOptions{Global: g, Output: "json"}); err != nil {
		t.Fatal(err)
	}
	var rep AgentsReport
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.UnknownGroups) != 1 || rep.UnknownGroups["prdo"] != 2 {
		t.Errorf("unknown_groups %v, want prdo: 2", rep.UnknownGroups)
	}
}
