package fleetctl

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// catchAllFixture is staging then prod (the catch-all: the last group,
// unless catchAll says otherwise) in Europe/Berlin, 1.3.2 → 1.4.0 not
// started, with hosts in lab (4, followed: its status is prod's copy),
// edge (2, not followed yet) and none in old (a copy left from before).
func catchAllFixture(t *testing.T, catchAll string, statsAt time.Time) *env {
	t.Helper()
	e := newEnv(t)
	staging := rollout.DefaultGroup("staging")
	staging.StartHour, staging.CanaryCount, staging.MaxInFlight = 9, 1, 100
	prod := rollout.DefaultGroup("prod")
	prod.StartHour, prod.CanaryCount, prod.MaxInFlight = 9, 2, 50
	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "Europe/Berlin",
		Groups: []rollout.GroupConfig{staging, prod}, CatchAll: catchAll})
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	prodSt := groupStatus(rollout.StateUnstarted)
	prodSt.Progress, prodSt.InitialCount, prodSt.StartedAt, prodSt.FailuresSince = 0, 0, time.Time{}, time.Time{}
	e.putStatus(prodSt)
	if catchAll != rollout.CatchAllNone {
		e.putStatus(rollout.FollowStatus(prodSt, "lab"))
	}
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "staging", At: statsAt, Agents: 3, Versions: rollout.Counts{"1.3.2": {Count: 3}}})
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "prod", At: statsAt, Agents: 10, Versions: rollout.Counts{"1.3.2": {Count: 10}}})
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "lab", At: statsAt, Agents: 4, Versions: rollout.Counts{"1.3.2": {Count: 4}}})
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "edge", At: statsAt, Agents: 2, Versions: rollout.Counts{"1.3.2": {Count: 1}, rollout.NoVersion: {Count: 1}}})
	return e
}

// The forecast counts the hosts of the groups not in the config into the
// catch-all group, as the controller does, and says so: prod rolls out its
// 10 agents and lab's 4 and edge's 2 (edge is followed from the
// controller's next pass on: the forecast follows every group with hosts,
// up to the bound, as the controller will).
func TestPlanForecastCatchAllGolden(t *testing.T) {
	e := catchAllFixture(t, "", testNow.Add(-5*time.Second))
	out := e.mustRun(forecast(PlanForecastOptions{At: forecastAt, Output: "table", Local: newYork(t)}))
	checkGolden(t, "forecast_catchall.golden", out)
	checkWidth(t, out)
	if !strings.Contains(out, "prod: catch-all: 6 of its 16 agents are hosts of groups not in the config") {
		t.Errorf("the forecast does not say prod catches 6 agents:\n%s", out)
	}
}

func TestPlanForecastCatchAllJSON(t *testing.T) {
	for _, tt := range []struct {
		name, catchAll   string
		group            string
		agents, caught   int
		groups           []string
		otherAgents      int
		otherCaughtGroup []string
	}{
		{name: "the last group by default", group: "prod", agents: 16, caught: 6, groups: []string{"edge", "lab"}, otherAgents: 3},
		{name: "catch_all names staging", catchAll: "staging", group: "staging", agents: 9, caught: 6, groups: []string{"edge", "lab"}, otherAgents: 10},
		{name: "catch_all -: nobody catches them", catchAll: rollout.CatchAllNone, group: "prod", agents: 10, otherAgents: 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := catchAllFixture(t, tt.catchAll, testNow.Add(-5*time.Second))
			out := e.mustRun(forecast(PlanForecastOptions{At: forecastAt, Output: "json"}))
			var fc rollout.Forecast
			if err := json.Unmarshal([]byte(out), &fc); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, g := range fc.Groups {
				switch {
				case g.Group == tt.group:
					if g.Agents != tt.agents || g.Caught != tt.caught || !slices.Equal(g.CaughtGroups, tt.groups) {
						t.Errorf("%s: agents %d, caught %d of %v; want %d, %d of %v", g.Group, g.Agents, g.Caught, g.CaughtGroups, tt.agents, tt.caught, tt.groups)
					}
				default:
					if g.Agents != tt.otherAgents || g.Caught != 0 {
						t.Errorf("%s: agents %d, caught %d; want %d, 0", g.Group, g.Agents, g.Caught, tt.otherAgents)
					}
				}
			}
		})
	}
}

// fleetctl status counts the caught hosts on the catch-all's row and names
// their groups; each group not in the config says whom it follows, or why
// its hosts wait.
func TestStatusCatchAll(t *testing.T) {
	e := catchAllFixture(t, "", testNow.Add(-5*time.Second))
	table := e.mustRun(status(StatusOptions{Output: "table"}))
	for _, want := range []string{
		"prod: catch-all: also rolls out 4 agents of 1 group not in the config: lab",
		"lab: not in the config: its 4 agents follow catch-all group prod (rolled out with it, counted in it)",
		"edge: not in the config: its agents wait: catch-all group prod does not follow it yet",
	} {
		if !strings.Contains(strings.Join(strings.Fields(table), " "), want) {
			t.Errorf("status lacks %q:\n%s", want, table)
		}
	}
	checkWidth(t, table)
	out := e.mustRun(status(StatusOptions{Output: "json"}))
	var rep StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	byName := map[string]GroupReport{}
	for _, g := range rep.Groups {
		byName[g.Name] = g
	}
	if r := byName["prod"].Rollout; !r.CatchAll || r.Caught == nil || r.Caught.Agents != 4 || !slices.Equal(r.Caught.Groups, []string{"lab"}) {
		t.Errorf("prod: catch_all %v, caught %+v; want true, 4 agents of lab", r.CatchAll, r.Caught)
	}
	if r := byName["lab"].Rollout; r.Follows != "prod" || r.InConfig {
		t.Errorf("lab: follows %q, in config %v; want prod, false", r.Follows, r.InConfig)
	}
	if r := byName["edge"].Rollout; r.Follows != "" || !strings.Contains(r.Unfollowed, "does not follow it yet") {
		t.Errorf("edge: follows %q, unfollowed %q", r.Follows, r.Unfollowed)
	}
	if r := byName["staging"].Rollout; r.CatchAll || r.Caught != nil {
		t.Errorf("staging is not the catch-all: %+v", r)
	}
	for _, key := range []string{`"catch_all": true`, `"caught": {`, `"follows": "prod"`, `"unfollowed": "`} {
		if !strings.Contains(out, key) {
			t.Errorf("JSON lacks %s", key)
		}
	}

	// catch_all "-": the words of before.
	e = catchAllFixture(t, rollout.CatchAllNone, testNow.Add(-5*time.Second))
	table = e.mustRun(status(StatusOptions{Output: "table"}))
	if !strings.Contains(table, "edge: not in the config: its agents are not rolled out") || strings.Contains(table, "catch-all") {
		t.Errorf("with catch_all \"-\":\n%s", table)
	}
}

// config set --catch-all names the catch-all group, "-" none, "" the last
// group; a group the config lacks is refused and nothing is written.
func TestConfigSetCatchAll(t *testing.T) {
	e := catchAllFixture(t, "", testNow)
	set := func(v string) func(g *Global) error {
		return func(g *Global) error {
			return RunConfigSet(testCtx(), &ConfigSetOptions{Global: g, CatchAll: &v, Output: "text"})
		}
	}
	for _, v := range []string{"staging", rollout.CatchAllNone, ""} {
		e.mustRun(set(v))
		if got := e.config().Value.CatchAll; got != v {
			t.Errorf("set %q: stored %q", v, got)
		}
	}
	rev := e.configRevision()
	_, err := e.run(set("stagin"))
	mustContain(t, err, `catch_all "stagin": not a group of the config`)
	if e.configRevision() != rev {
		t.Error("a refused --catch-all wrote the config")
	}
}
