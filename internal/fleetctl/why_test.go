package fleetctl

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// whyEnv is a fleet rolling 1.3.2 → 1.4.0 out to a, b and c, all three
// halted because 1.4.0 is quarantined; group a has two agents that rolled
// back, one of whose app printed hostile text (C1 and bidirectional
// controls: what a heartbeat's free text may hold).
func whyEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	var groups []rollout.GroupConfig
	for _, n := range []string{"a", "b", "c"} {
		groups = append(groups, rollout.DefaultGroup(n))
	}
	e.putConfig(rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC", QuarantineAfter: 2, Groups: groups})
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	q := rollout.Quarantine{Version: "1.4.0", AgentCount: 2, Agents: []rollout.AgentID{agentA, agentB}, At: testNow.Add(-2 * time.Minute),
		By:     rollout.QuarantineByController,
		Reason: "2 agents rolled back from 1.4.0 (release failures, quarantine_after 2): " + string(agentA) + " (h-a), " + string(agentB) + " (h-b)"}
	e.putQuarantine(rollout.QuarantineList{V: 1, Versions: []rollout.Quarantine{q}})
	for _, n := range []string{"a", "b", "c"} {
		st := groupStatus(rollout.StateCanary)
		st.Group, st.Halted, st.HaltedAt, st.HaltReason = n, true, testNow.Add(-time.Minute), q.HaltReason(n)
		st.RejectedVersions = []string{"1.4.0"}
		e.putStatus(st)
	}
	at := testNow.Add(-5 * time.Second)
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "a", At: at, Agents: 3, Versions: rollout.Counts{
		"1.3.2": {Count: 3, FailedCount: 2, LowestID: agentA}}})
	a, b := rolledBackBeat(agentA), rolledBackBeat(agentB)
	a.Error = "rolled back from 1.4.0: new version unhealthy: /opt/app/bin/app exited: exit status 3"
	a.ErrorOutput = "loading config\npanic: \u009b31mred no config \u202eevil"
	b.Error = "rolled back from 1.4.0: new version unhealthy: not healthy within health_timeout 5m"
	ok := rolledBackBeat(agentC)
	ok.Rollback, ok.RollbackFrom, ok.Error, ok.ErrorClass = false, "", "", ""
	e.putBeats("a", a, b, ok)
	return e
}

// TestStatusSaysWhyHostsFailed (issue 25 point 7): status lists a group's
// failed agents with host, id, reason and the app's last line, escaped;
// a quarantine halting three groups is one entry above the table, and
// each group's note is one line pointing at it (before: the whole
// quarantine reason under every group, and not a word of why a host
// failed).
func TestStatusSaysWhyHostsFailed(t *testing.T) {
	e := whyEnv(t)
	out := e.mustRun(status(StatusOptions{}))
	if n := strings.Count(out, "2 agents rolled back from 1.4.0"); n != 1 {
		t.Errorf("the quarantine reason is said %d times, want once:\n%s", n, out)
	}
	for _, want := range []string{
		"Quarantined: 1.4.0, by the controller 2m ago: 2 agents rolled back from 1.4.0",
		"halts a, b, c; never rolled out while quarantined; to go on anyway: fleetctl quarantine",
		"a: halted 1m ago: its target 1.4.0 is quarantined (see Quarantined)",
		"c: halted 1m ago: its target 1.4.0 is quarantined (see Quarantined)",
		"Failed agents:",
		"  a: h-a (" + string(agentA) + ") rolled back from 1.4.0: new version unhealthy: /opt/app/bin/app exited: exit status 3",
		`      last output: panic: \u009b31mred no config \u202eevil`,
		"  a: h-b (" + string(agentB) + ") rolled back from 1.4.0: new version unhealthy: not healthy within health_timeout 5m",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.ContainsAny(out, "\u009b\u202e") || strings.Contains(out, string(agentC)) {
		t.Errorf("status prints a control character or the healthy agent:\n%q", out)
	}
}

// TestAgentsLsSaysWhy (issue 25 point 7): agents ls has a REASON column
// when an agent reports an error, and --id shows that agent's error and
// its app's last lines, escaped; an unknown agent is an error.
func TestAgentsLsSaysWhy(t *testing.T) {
	e := whyEnv(t)
	out := e.mustRun(agentsList(AgentsOptions{Group: "a"}))
	if !strings.Contains(out, "REASON") || !strings.Contains(out, "new version unhealthy: /opt/app/bin/app exited: exit status 3") {
		t.Errorf("agents ls has no REASON:\n%s", out)
	}
	out = e.mustRun(agentsList(AgentsOptions{ID: string(agentA)}))
	for _, want := range []string{
		"Agent:       " + string(agentA), "Hostname:    h-a", "State:       rolled back from 1.4.0",
		"Error:       rolled back from 1.4.0: new version unhealthy: /opt/app/bin/app exited: exit status 3",
		"Output:      the app's last lines at the failure:\n  | loading config\n  | panic: \\u009b31mred no config \\u202eevil\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("agents ls --id lacks %q:\n%s", want, out)
		}
	}
	if strings.ContainsAny(out, "\u009b\u202e") || strings.Contains(out, string(agentB)) {
		t.Errorf("agents ls --id prints a control character or another agent:\n%q", out)
	}
	if _, err := e.run(agentsList(AgentsOptions{ID: "0f000000-0000-4000-8000-000000000000"})); err == nil ||
		!strings.Contains(err.Error(), "no heartbeat of it") {
		t.Errorf("agents ls --id of an agent the stream lacks: %v", err)
	}
}

func agentsList(o AgentsOptions) func(g *Global) error {
	return func(g *Global) error {
		o.Global = g
		if o.Interval == 0 {
			o.Interval = 30 * time.Second
		}
		return RunAgentsList(testCtx(), &o)
	}
}
