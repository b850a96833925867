package fleetctl

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// sitesStats is prod's count with agents at two sites and two naming
// none, as the controller writes it.
func sitesStats() kv.Stats {
	return kv.Stats{V: 1, ControllerID: "c1", Group: "prod", At: testNow.Add(-5 * time.Second), Agents: 12,
		Versions: rollout.Counts{
			"1.4.0": {Count: 4, LowestID: idA},
			"1.3.2": {Count: 8, FailedCount: 1, Updating: 1, Unreachable: 1, LowestID: idB},
		},
		Sites: rollout.SiteCounts{
			"edge-a":       {"1.4.0": {Count: 4}, "1.3.2": {Count: 2, FailedCount: 1}},
			"edge-b":       {"1.3.2": {Count: 4, Updating: 1, Unreachable: 1}},
			rollout.NoSite: {"1.3.2": {Count: 2}},
		}}
}

func sitesEnv(t *testing.T, plan bool) *env {
	t.Helper()
	e := newEnv(t)
	if plan {
		prod := rollout.DefaultGroup("prod")
		prod.DependsOn = []string{}
		e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC", Groups: []rollout.GroupConfig{prod}})
		e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
		e.putStatus(groupStatus(rollout.StateActive))
	}
	e.putStats(sitesStats())
	return e
}

// TestStatusBySite (issue 15 point 8): with agents naming sites, fleetctl
// status adds a table of agents by group and site (the rollout's columns
// with a plan, the counts without), and -o json carries the same, by
// site, with each site's split.
func TestStatusBySite(t *testing.T) {
	e := sitesEnv(t, true)
	out := e.mustRun(status(StatusOptions{Output: "table"}))
	checkGolden(t, "status_sites.golden", out)
	checkWidth(t, out)
	for _, want := range []string{
		"Agents by site:",
		"GROUP  SITE  AGENTS  UPDATED  UPDATING  WAITING  FAILED  UNREACHABLE",
		"prod  edge-a  6  4 66%  0  1  1  0",
		"edge-b  4  0 0%  1  2  0  1",
		"(none)  2  0 0%  0  2  0  0",
	} {
		if !strings.Contains(squeeze(out), want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}

	var rep StatusReport
	if err := json.Unmarshal([]byte(e.mustRun(status(StatusOptions{Output: "json"}))), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Groups) != 1 {
		t.Fatalf("groups %+v, want prod", rep.Groups)
	}
	type site struct {
		Site                 string
		Agents, Failed, Unre int
		Split                AgentSplit
	}
	var got []site
	for _, s := range rep.Groups[0].Sites {
		if s.Split == nil {
			t.Fatalf("site %s: no split with a plan", s.Site)
		}
		got = append(got, site{s.Site, s.Agents, s.Failed, s.Unreachable, *s.Split})
	}
	want := []site{
		{"edge-a", 6, 1, 0, AgentSplit{Updated: 4, Unchanged: 1, Failed: 1, Waiting: 1}},
		{"edge-b", 4, 0, 1, AgentSplit{Unchanged: 3, Updating: 1, Waiting: 2, Unreachable: 1}},
		{rollout.NoSite, 2, 0, 0, AgentSplit{Unchanged: 2, Waiting: 2}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("json sites (-want +got):\n%s", diff)
	}
	if v := rep.Groups[0].Sites[0].Versions["1.3.2"]; v.Count != 2 || v.Failed != 1 {
		t.Errorf("edge-a 1.3.2: %+v, want 2 agents, 1 failed", v)
	}
}

// TestStatusBySiteWithoutPlan: no plan, the site table has the counts only.
func TestStatusBySiteWithoutPlan(t *testing.T) {
	e := sitesEnv(t, false)
	out := squeeze(e.mustRun(status(StatusOptions{Output: "table"})))
	for _, want := range []string{"GROUP  SITE  AGENTS  FAILED  UNREACHABLE", "prod  edge-a  6  1  0", "edge-b  4  0  1"} {
		if !strings.Contains(out, want) {
			t.Errorf("status without a plan lacks %q:\n%s", want, out)
		}
	}
}

// TestStatusWithoutSites: a fleet whose agents name no site shows no site
// table, its JSON has no "sites", and --by-site says there are none.
func TestStatusWithoutSites(t *testing.T) {
	e := newEnv(t)
	s := sitesStats()
	s.Sites = nil
	e.putStats(s)
	out := e.mustRun(status(StatusOptions{Output: "table"}))
	if strings.Contains(out, "SITE") || strings.Contains(out, "site") {
		t.Errorf("status without sites mentions sites:\n%s", out)
	}
	if js := e.mustRun(status(StatusOptions{Output: "json"})); strings.Contains(js, `"sites"`) {
		t.Errorf("status -o json without sites has \"sites\":\n%s", js)
	}
	out = e.mustRun(status(StatusOptions{Output: "table", BySite: true}))
	if !strings.Contains(out, "No agent names a site") {
		t.Errorf("status --by-site without sites:\n%s", out)
	}
}

// TestAgentsListSites: agents ls shows a SITE column when an agent names a
// site ("-" for one that does not), filters by --site, and a bad --site is
// a usage error.
func TestAgentsListSites(t *testing.T) {
	e := newEnv(t)
	beats := []heartbeat.Heartbeat{
		{AgentID: "00000000-0000-4000-8000-000000000001", Hostname: "web-1", ActiveVersion: "1.0.0", Site: "edge-a"},
		{AgentID: "00000000-0000-4000-8000-000000000002", Hostname: "web-2", ActiveVersion: "1.0.0", Site: "edge-b"},
		{AgentID: "00000000-0000-4000-8000-000000000003", Hostname: "web-3", ActiveVersion: "1.0.0"},
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
	out := squeeze(e.mustRun(func(g *Global) error { return RunAgentsList(testCtx(), &AgentsOptions{Global: g}) }))
	for _, want := range []string{"AGENT ID  GROUP  SITE  HOSTNAME", string(beats[0].AgentID) + "  blue  edge-a  web-1",
		string(beats[2].AgentID) + "  blue  -  web-3"} {
		if !strings.Contains(out, want) {
			t.Errorf("agents ls lacks %q:\n%s", want, out)
		}
	}
	out = e.mustRun(func(g *Global) error { return RunAgentsList(testCtx(), &AgentsOptions{Global: g, Site: "edge-b"}) })
	if !strings.Contains(out, "web-2") || strings.Contains(out, "web-1") || strings.Contains(out, "web-3") {
		t.Errorf("agents ls --site edge-b:\n%s", out)
	}
	g, stdout, stderr := e.global()
	if err := RunAgentsList(testCtx(), &AgentsOptions{Global: g, Site: "edge-c"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "No agents.") || !strings.Contains(stderr.String(), `no agent names site "edge-c"; the sites are: edge-a, edge-b`) {
		t.Errorf("agents ls --site edge-c: %s; stderr %s", stdout.String(), stderr.String())
	}
	var rep AgentsReport
	js := e.mustRun(func(g *Global) error {
		return RunAgentsList(testCtx(), &AgentsOptions{Global: g, Site: "edge-a", Output: "json"})
	})
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Agents) != 1 || rep.Agents[0].Site != "edge-a" {
		t.Errorf("agents ls --site edge-a -o json: %+v", rep.Agents)
	}

	for _, bad := range []string{"edge a", "(none)", strings.Repeat("s", 41)} {
		_, stderr, code := execute(t, "agents", "ls", "--site", bad)
		if code != cliutil.ExitUsage || !strings.Contains(stderr, "--site") {
			t.Errorf("agents ls --site %q: exit %d, want %d naming --site: %s", bad, code, cliutil.ExitUsage, stderr)
		}
	}
}
