package fleetctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Agents of group prod for the retry tests: two rolled back from the
// target 1.4.0, one on it, one not there yet.
const (
	agentA rollout.AgentID = "00000000-0000-4000-8000-00000000000a"
	agentB rollout.AgentID = "00000000-0000-4000-8000-00000000000b"
	agentC rollout.AgentID = "00000000-0000-4000-8000-00000000000c"
	agentD rollout.AgentID = "00000000-0000-4000-8000-00000000000d"
)

func (e *env) putBeats(group string, beats ...heartbeat.Heartbeat) {
	e.t.Helper()
	for _, hb := range beats {
		hb.V, hb.Group, hb.At = 1, group, testNow
		data, err := heartbeat.Encode(&hb)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.fleet.JS.Publish(e.ctx, heartbeat.SubjectFor(group, hb.AgentID), data); err != nil {
			e.t.Fatal(err)
		}
	}
}

func rolledBackBeat(id rollout.AgentID) heartbeat.Heartbeat {
	return heartbeat.Heartbeat{AgentID: id, Hostname: "h-" + string(id[len(id)-1:]), ActiveVersion: "1.3.2", StartVersion: "1.3.2",
		StartTime: testNow.Add(-time.Hour), Rollback: true, RollbackFrom: "1.4.0", Error: "install 1.4.0: unhealthy", ErrorClass: "release"}
}

func retryEnv(t *testing.T, state rollout.State) *env {
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	e.putStatus(groupStatus(state))
	e.putBeats("prod", rolledBackBeat(agentA), rolledBackBeat(agentB),
		heartbeat.Heartbeat{AgentID: agentC, Hostname: "h-c", ActiveVersion: "1.4.0"},
		heartbeat.Heartbeat{AgentID: agentD, Hostname: "h-d", ActiveVersion: "1.3.2"})
	return e
}

// TestRetryOneAgent: fleetctl retry --group prod --agent A writes the
// request for A alone (compare-and-swap, event, audit record), says how
// many agents it concerns, and history shows it.
func TestRetryOneAgent(t *testing.T) {
	e := retryEnv(t, rollout.StateActive)
	before := e.status("prod")
	nc := e.srv.Conn("events")
	sub, err := nc.SubscribeSync(kv.EventSubject("prod"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Pasted in upper case with a space: forgiven.
	out := e.mustRun(func(g *Global) error {
		g.Actor = "ops"
		return RunRetry(testCtx(), &RetryOptions{GroupActionOptions: GroupActionOptions{Global: g, Group: "prod", Note: "disk replaced"},
			Agents: []string{" " + strings.ToUpper(string(agentA))}})
	})
	for _, want := range []string{
		`group "prod" (still active): operator retry: disk replaced (agent ` + string(agentA) + ` tries 1.4.0 once more if it rolled back from it)`,
		"1 of the group's 4 agents rolled back from 1.4.0; each tries it once more when the plan lets it:\n  " + string(agentA) + "\n",
		"written to fleet_plan/group.prod",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	_, report, _ := strings.Cut(out, "\n") // the first line is every group action's
	checkWidth(t, report)
	got := e.status("prod")
	want := before.Value.Clone()
	want.Retry = rollout.RetryRequest{Token: "20261123T120000.000000000Z", Agents: []rollout.AgentID{agentA}, At: testNow, Note: "disk replaced"}
	if diff := cmp.Diff(want, got.Value); diff != "" {
		t.Errorf("stored status (-want +got):\n%s", diff)
	}
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no event: %v", err)
	}
	var ev rollout.Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil || ev.Kind != rollout.EventOperator || !strings.Contains(ev.Reason, "operator retry: disk replaced") {
		t.Errorf("event %s (%v)", msg.Data, err)
	}
	hist := e.mustRun(func(g *Global) error {
		g.Now = time.Now
		return RunHistory(testCtx(), &HistoryOptions{Global: g, Since: time.Hour, Output: "json"})
	})
	var rep HistoryReport
	oneObject(t, hist, &rep)
	if got := strings.Join(auditLines(rep), "|"); got != "ops retry prod" {
		t.Errorf("history audit records %q, want the retry by ops", got)
	}
	text := e.mustRun(func(g *Global) error {
		g.Now = time.Now
		return RunHistory(testCtx(), &HistoryOptions{Global: g, Since: time.Hour})
	})
	// status shows the request.
	st := e.mustRun(func(g *Global) error {
		g.Now = func() time.Time { return testNow.Add(2 * time.Minute) }
		return RunStatus(testCtx(), &StatusOptions{Global: g, Output: "table"})
	})
	if want := "prod: retry asked 2m ago for agent " + string(agentA) + ": disk replaced"; !strings.Contains(st, want) {
		t.Errorf("status lacks %q:\n%s", want, st)
	}
	if !strings.Contains(text, "retry") || !strings.Contains(text, "disk replaced") {
		t.Errorf("history does not show the retry:\n%s", text)
	}
}

// TestRetryEveryAgentJSON: without --agent, the request is for every agent
// and -o json lists the agents concerned.
func TestRetryEveryAgentJSON(t *testing.T) {
	e := retryEnv(t, rollout.StateDone)
	rev := e.status("prod").Revision
	out := e.mustRun(func(g *Global) error {
		return RunRetry(testCtx(), &RetryOptions{GroupActionOptions: GroupActionOptions{Global: g, Group: "prod", Output: "json"}})
	})
	var res struct {
		WriteResult
		Value rollout.GroupStatus `json:"value"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Command != "retry" || !res.Written || res.Key != "group.prod" || res.PreviousRevision != rev || res.Revision <= rev {
		t.Errorf("result %+v", res.WriteResult)
	}
	if diff := cmp.Diff([]rollout.AgentID{agentA, agentB}, res.Agents); diff != "" {
		t.Errorf("agents (-want +got):\n%s", diff)
	}
	if res.Value.Retry.Token == "" || len(res.Value.Retry.Agents) != 0 || res.Event == nil {
		t.Errorf("value.retry %+v, event %v", res.Value.Retry, res.Event)
	}
	if diff := cmp.Diff(res.Value, e.status("prod").Value); diff != "" {
		t.Errorf("json value is not what was stored (-json +stored):\n%s", diff)
	}
}

// TestRetryRefusals: nothing is written, and the error says why.
func TestRetryRefusals(t *testing.T) {
	halted := groupStatus(rollout.StateActive)
	halted.Halted, halted.HaltReason = true, "2 of 20 failed"
	unknown := "00000000-0000-4000-8000-0000000000ff"
	for _, tc := range []struct {
		name     string
		status   rollout.GroupStatus
		agents   []string
		beats    bool // the retryEnv agents are there
		parts    []string
		wantIs   error
		wantCode int
	}{
		{"an agent on the target", groupStatus(rollout.StateActive), []string{string(agentC)}, true,
			[]string{"agent " + string(agentC) + " did not roll back from 1.4.0 (it runs 1.4.0)", "nothing written"}, nil, cliutil.ExitFailure},
		{"an agent not in the group", groupStatus(rollout.StateActive), []string{string(agentA), unknown}, true,
			[]string{"agent " + unknown + ` is not in group "prod"`, "fleetctl agents ls --group prod", "nothing written"}, nil, cliutil.ExitFailure},
		{"a malformed id", groupStatus(rollout.StateActive), []string{"web-1"}, true,
			[]string{"--agent: invalid agent id", "fleetctl agents ls"}, nil, cliutil.ExitUsage},
		{"nobody rolled back", groupStatus(rollout.StateActive), nil, false,
			[]string{"none of its 0 agents rolled back from 1.4.0", "nothing written"}, nil, cliutil.ExitFailure},
		{"halted", halted, nil, true, []string{"it is halted (active)", "fleetctl reset --group prod"}, rollout.ErrBadAction, cliutil.ExitFailure},
		{"unstarted", groupStatus(rollout.StateUnstarted), nil, true, []string{"it is unstarted"}, rollout.ErrBadAction, cliutil.ExitFailure},
		{"rolled back", groupStatus(rollout.StateRolledBack), nil, true, []string{"fleetctl run"}, rollout.ErrBadAction, cliutil.ExitFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
			e.putStatus(tc.status)
			if tc.beats {
				e.putBeats("prod", rolledBackBeat(agentA), rolledBackBeat(agentB), heartbeat.Heartbeat{AgentID: agentC, ActiveVersion: "1.4.0"})
			}
			rev := e.status("prod").Revision
			out, err := e.run(func(g *Global) error {
				return RunRetry(testCtx(), &RetryOptions{GroupActionOptions: GroupActionOptions{Global: g, Group: "prod"}, Agents: tc.agents})
			})
			mustContain(t, err, tc.parts...)
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("err = %v, want %v", err, tc.wantIs)
			}
			if code := cliutil.ExitCode(err); code != tc.wantCode {
				t.Errorf("exit code %d, want %d", code, tc.wantCode)
			}
			if out != "" {
				t.Errorf("a refused retry printed %q", out)
			}
			if got := e.status("prod").Revision; got != rev {
				t.Errorf("a refused retry wrote: revision %d → %d", rev, got)
			}
			entries, _, err := e.fleet.ReadTimeline(e.ctx, time.Time{})
			if err != nil || len(entries) != 0 {
				t.Errorf("a refused retry left %d audit entries (%v)", len(entries), err)
			}
		})
	}
}

// TestRetryHelpTeaches: --help explains the rules and shows examples.
func TestRetryHelpTeaches(t *testing.T) {
	root := NewCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"retry", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fleetctl retry --group prod --agent", "fleetctl reset --group prod --force --reason \"disk replaced\" && fleetctl retry --group prod",
		"a restart never retries twice", "--agent stringArray", "-o json"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
}
