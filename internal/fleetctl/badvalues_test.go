package fleetctl

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// JetStream API responses as stored when a request's reply subject is a
// bucket key. Neither has "v"; encoding/json decodes them into zero values.
const (
	streamInfoResponse = `{"type":"io.nats.jetstream.api.v1.stream_info_response","total":0,"offset":0,"limit":0,` +
		`"config":{"name":"KV_fleet_plan","subjects":["$KV.fleet_plan.>"]},"created":"2026-11-23T12:00:00Z","state":{"messages":3}}`
	consumerErrorResponse = `{"type":"io.nats.jetstream.api.v1.consumer_create_response",` +
		`"error":{"code":403,"err_code":10099,"description":"permission denied"}}`
)

// putRaw writes data at key of bucket, whatever it is.
func (e *env) putRaw(bucket, key, data string) uint64 {
	e.t.Helper()
	var rev uint64
	var err error
	switch bucket {
	case kv.BucketConfig:
		rev, err = e.fleet.Config.Put(e.ctx, key, []byte(data))
	case kv.BucketPlan:
		rev, err = e.fleet.Plan.Put(e.ctx, key, []byte(data))
	case kv.BucketStats:
		rev, err = e.fleet.Stats.Put(e.ctx, key, []byte(data))
	default:
		e.t.Fatalf("no bucket %s", bucket)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return rev
}

// forge stores data at key of bucket in a message that carries
// JetStream's own headers claiming revision 999, as a direct-get response
// reflected into the key's subject is stored; it returns the stream's real
// sequence. jetstream's KeyValue.Get reports 999 for it, and every
// compare-and-swap against 999 fails.
func (e *env) forge(bucket, key, data string) uint64 {
	e.t.Helper()
	m := nats.NewMsg(kv.KeySubject(bucket, key))
	m.Data = []byte(data)
	m.Header.Set("Nats-Stream", kv.StreamOf(bucket))
	m.Header.Set("Nats-Subject", kv.KeySubject(bucket, key))
	m.Header.Set("Nats-Sequence", "999")
	m.Header.Set("Nats-Time-Stamp", "2026-11-23T12:00:00Z")
	ack, err := e.fleet.JS.PublishMsg(e.ctx, m)
	if err != nil {
		e.t.Fatal(err)
	}
	return ack.Sequence
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func problemKeys(ps []Problem) []string {
	var keys []string
	for _, p := range ps {
		keys = append(keys, p.Key)
	}
	sort.Strings(keys)
	return keys
}

// TestStatusSkipsBadStats: "nats kv put fleet_stats x x" and a valid-looking
// count of staging stored under prod's key must not break status nor change
// what it shows: the table is the one without them, stderr names both keys
// and the repair, and -o json lists them under "problems".
func TestStatusSkipsBadStats(t *testing.T) {
	e := rolloutFixture(t)
	e.putRaw(kv.BucketStats, "x", "x")
	e.putRaw(kv.BucketStats, kv.StatsKey("prod", "c2"), jsonOf(t, kv.Stats{V: 1, ControllerID: "c2", Group: "staging",
		At: testNow.Add(-time.Second), Agents: 99, Versions: rollout.Counts{"1.4.0": {Count: 99, LowestID: idA}}}))

	g, out, errOut := e.global()
	if err := RunStatus(testCtx(), &StatusOptions{Global: g, Output: "table"}); err != nil {
		t.Fatalf("status: %v", err)
	}
	checkGolden(t, "status_plan.golden", out.String()) // the same table as without the bad entries
	for _, want := range []string{
		"warning: skipped fleet_stats/x", "not a JSON object",
		"warning: skipped fleet_stats/prod.c2", `the count of group "staging" by controller "c2"`,
		"to repair: it expires with the bucket's TTL, or remove it: nats kv del fleet_stats x",
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}

	js := e.mustRun(status(StatusOptions{Output: "json"}))
	var rep StatusReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
	if diff := cmp.Diff([]string{"fleet_stats/prod.c2", "fleet_stats/x"}, problemKeys(rep.Problems)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	for _, p := range rep.Problems {
		if p.Revision == 0 || p.Error == "" || !strings.Contains(p.Fix, "nats kv del fleet_stats") {
			t.Errorf("problem %+v: want revision, error and fix", p)
		}
	}
	agents := map[string]int{}
	for _, gr := range rep.Groups {
		agents[gr.Name] = gr.Agents
	}
	if diff := cmp.Diff(map[string]int{"dev": 3, "staging": 10, "prod": 30, "old": 0, "lab": 2}, agents); diff != "" {
		t.Errorf("agents per group (-want +got):\n%s", diff)
	}
	if !strings.Contains(js, `"problems": [`) {
		t.Errorf("JSON lacks the problems field:\n%s", js)
	}
}

// TestStatusNamesBadRolloutValues: a group status, the spec or the config
// replaced by a JetStream response. status still prints (the other groups,
// or the counts), names the key and the repair, and --wait fails at once
// instead of waiting for a rollout that cannot finish.
func TestStatusNamesBadRolloutValues(t *testing.T) {
	for _, tc := range []struct {
		name, bucket, key, data string
		wantPlan                bool
		wantTable, wantFix      string
	}{
		{"group status", kv.BucketPlan, kv.GroupKey("prod"), streamInfoResponse, true,
			"prod     invalid", "fleetctl reset --group prod"},
		{"spec", kv.BucketPlan, kv.KeySpec, streamInfoResponse, false,
			"staging  10", "fleetctl plan set --start VERSION --target VERSION"},
		{"config", kv.BucketConfig, kv.KeyConfig, consumerErrorResponse, false,
			"staging  10", "fleetctl config apply -f FILE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := rolloutFixture(t)
			e.putRaw(tc.bucket, tc.key, tc.data)
			where := tc.bucket + "/" + tc.key

			g, out, errOut := e.global()
			if err := RunStatus(testCtx(), &StatusOptions{Global: g, Output: "table"}); err != nil {
				t.Fatalf("status: %v", err)
			}
			if !strings.Contains(out.String(), tc.wantTable) {
				t.Errorf("table lacks %q:\n%s", tc.wantTable, out)
			}
			checkWidth(t, out.String())
			for _, want := range []string{"warning: skipped " + where, `no "v"`, tc.wantFix} {
				if !strings.Contains(errOut.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut)
				}
			}

			js := e.mustRun(status(StatusOptions{Output: "json"}))
			var rep StatusReport
			if err := json.Unmarshal([]byte(js), &rep); err != nil {
				t.Fatalf("%v\n%s", err, js)
			}
			if diff := cmp.Diff([]string{where}, problemKeys(rep.Problems)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
			if (rep.Plan != nil) != tc.wantPlan {
				t.Errorf("plan shown: %v, want %v", rep.Plan != nil, tc.wantPlan)
			}
			if tc.wantPlan {
				invalid := map[string]bool{}
				for _, gr := range rep.Groups {
					invalid[gr.Name] = gr.Rollout.StatusInvalid
					if gr.Name == "staging" && (gr.Rollout.State != rollout.StateCanary || !gr.Rollout.Halted) {
						t.Errorf("staging: %+v, want its own status (canary, halted)", gr.Rollout)
					}
				}
				if diff := cmp.Diff(map[string]bool{"dev": false, "staging": false, "prod": true, "old": false, "lab": false}, invalid); diff != "" {
					t.Errorf("status_invalid (-want +got):\n%s", diff)
				}
			}

			_, err := e.run(status(StatusOptions{Wait: true, WaitInterval: time.Millisecond}))
			mustContain(t, err, "status --wait", where, tc.wantFix)
			if code := cliutil.ExitCode(err); code != cliutil.ExitFailure {
				t.Errorf("--wait exit code %d, want %d", code, cliutil.ExitFailure)
			}
		})
	}
}

// TestConfigApplyReplacesForgedConfig: a config stored with JetStream's own
// headers once wedged "config apply" (it wrote against the forged revision
// and failed with "changed under you" forever). Whether its body is a valid
// config or a JetStream response, show and set now say it is not valid and
// name apply, and apply replaces it with compare-and-swap on the stream's
// own sequence.
func TestConfigApplyReplacesForgedConfig(t *testing.T) {
	for name, body := range map[string]string{
		"valid body":        jsonOf(t, rollout.DefaultConfig()),
		"a stream response": streamInfoResponse,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.putConfig(rollout.DefaultConfig())
			seq := e.forge(kv.BucketConfig, kv.KeyConfig, body)
			if raw, err := e.fleet.Config.Get(e.ctx, kv.KeyConfig); err != nil || raw.Revision() != 999 {
				t.Fatalf("jetstream's KeyValue.Get reports revision %d (%v), want the forged 999: the test no longer forges", raw.Revision(), err)
			}

			_, err := e.run(configShow("yaml"))
			mustContain(t, err, "fleet_config/config", "not valid", "fleetctl config apply -f FILE")
			_, err = e.run(configSet(ConfigSetOptions{Mode: ptr("paused")}))
			mustContain(t, err, "fleet_config/config", "fleetctl config apply -f FILE")

			out := e.mustRun(configApply(writeFile(t, "c.yaml", "groups:\n  - name: prod\n    max_in_flight: 10%\n")))
			if !strings.Contains(out, "fleet_config/config written") {
				t.Errorf("output:\n%s", out)
			}
			c, _, err := e.fleet.ReadConfig(e.ctx)
			if err != nil {
				t.Fatalf("after apply: %v", err)
			}
			if c.Revision != seq+1 || len(c.Value.Groups) != 1 || c.Value.Groups[0].Name != "prod" {
				t.Errorf("after apply: revision %d, groups %+v; want revision %d and the file's group", c.Revision, c.Value.Groups, seq+1)
			}
		})
	}
}

// TestPlanSetReplacesForgedSpec: the same for the spec. pause and plan show
// refuse it naming plan set; plan set without both versions says what it
// needs; with them it replaces the value, and pause works again.
func TestPlanSetReplacesForgedSpec(t *testing.T) {
	for name, body := range map[string]string{
		"valid body":        jsonOf(t, rollout.DefaultSpec("1.3.2", "1.4.0")),
		"a stream response": streamInfoResponse,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.putConfig(rollout.DefaultConfig())
			e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
			seq := e.forge(kv.BucketPlan, kv.KeySpec, body)

			_, err := e.run(func(g *Global) error { return RunPause(testCtx(), &PauseOptions{Global: g}) })
			mustContain(t, err, "fleet_plan/spec", "not valid", "fleetctl plan set --start VERSION --target VERSION")
			_, err = e.run(func(g *Global) error { return RunPlanShow(testCtx(), &PlanShowOptions{Global: g, Output: "table"}) })
			mustContain(t, err, "fleet_plan/spec", "fleetctl plan set")
			_, err = e.run(planSet(PlanSetOptions{Target: ptr("1.5.0")}))
			mustContain(t, err, "the stored plan spec is not valid", "--start is required")
			if code := cliutil.ExitCode(err); code != cliutil.ExitUsage {
				t.Errorf("exit code %d, want %d", code, cliutil.ExitUsage)
			}

			out := e.mustRun(planSet(PlanSetOptions{Start: ptr("1.4.0"), Target: ptr("1.5.0")}))
			if !strings.Contains(out, "fleet_plan/spec replaced") {
				t.Errorf("output:\n%s", out)
			}
			s, err := e.fleet.ReadSpec(e.ctx)
			if err != nil {
				t.Fatalf("after plan set: %v", err)
			}
			if diff := cmp.Diff(kv.Entry[rollout.Spec]{Value: rollout.DefaultSpec("1.4.0", "1.5.0"), Revision: seq + 1}, s); diff != "" {
				t.Errorf("after plan set (-want +got):\n%s", diff)
			}
			e.mustRun(func(g *Global) error { return RunPause(testCtx(), &PauseOptions{Global: g}) })
		})
	}
}

// TestResetRemovesBadGroupStatus: the other actions refuse a bad group
// status and name reset; reset removes it (compare-and-swap on its true
// revision, so a concurrent write wins) and says what happens next.
func TestResetRemovesBadGroupStatus(t *testing.T) {
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	staging := groupStatus(rollout.StateActive)
	staging.Group = "staging"
	e.forge(kv.BucketPlan, kv.GroupKey("prod"), jsonOf(t, staging))

	_, err := e.run(func(g *Global) error { return RunRollback(testCtx(), &GroupActionOptions{Global: g, Group: "prod"}) })
	mustContain(t, err, "rollback --group prod", "fleet_plan/group.prod", "JetStream's own headers", "fleetctl reset --group prod")

	// Someone writes the key between our read and our delete: we lose.
	g, _, _ := e.global()
	g.beforeWrite = func() { e.putStatus(groupStatus(rollout.StateActive)) }
	err = RunReset(testCtx(), &GroupActionOptions{Global: g, Group: "prod"})
	if !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("reset racing a write: %v, want ErrConflict", err)
	}
	if st := e.status("prod"); st.Value.Group != "prod" {
		t.Fatalf("the concurrent write was lost: %+v", st.Value)
	}

	e.putRaw(kv.BucketPlan, kv.GroupKey("prod"), streamInfoResponse)
	nc := e.srv.Conn("events")
	sub, err := nc.SubscribeSync(kv.EventSubject("prod"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	out := e.mustRun(func(g *Global) error {
		return RunReset(testCtx(), &GroupActionOptions{Global: g, Group: "prod", Note: "junk in the bucket"})
	})
	for _, want := range []string{`group "prod": removed fleet_plan/group.prod`, "fresh unstarted status"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := e.fleet.ReadGroupStatus(e.ctx, "prod"); !errors.Is(err, kv.ErrNotFound) {
		t.Errorf("after reset: %v, want no status", err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ev rollout.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Kind != rollout.EventOperator || !strings.Contains(ev.Reason, "junk in the bucket") || !strings.Contains(ev.Reason, "not valid") {
		t.Errorf("event %+v", ev)
	}
}

// TestAgentsListNamesBadHeartbeats: a body that is not a heartbeat, one
// that speaks for another agent, and a good-looking one stored with
// JetStream's own headers are skipped and named, on stderr and in JSON.
func TestAgentsListNamesBadHeartbeats(t *testing.T) {
	e := newEnv(t)
	id := func(n int) rollout.AgentID {
		return rollout.AgentID("00000000-0000-4000-8000-00000000000" + string(rune('0'+n)))
	}
	beat := func(n int) []byte {
		data, err := heartbeat.Encode(&heartbeat.Heartbeat{V: 1, AgentID: id(n), Group: "blue", Hostname: "h", At: testNow})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	publish := func(m *nats.Msg) {
		t.Helper()
		if _, err := e.fleet.JS.PublishMsg(e.ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	msg := func(n int, data []byte) *nats.Msg {
		m := nats.NewMsg(heartbeat.SubjectFor("blue", id(n)))
		m.Data = data
		return m
	}
	publish(msg(1, beat(1)))
	publish(msg(2, []byte("x")))
	publish(msg(3, beat(4)))
	foreign := msg(5, beat(5))
	foreign.Header.Set("Nats-Stream", kv.StreamHB)
	foreign.Header.Set("Nats-Sequence", "999")
	publish(foreign)
	bad := []string{"FLEET_HB/" + heartbeat.SubjectFor("blue", id(2)), "FLEET_HB/" + heartbeat.SubjectFor("blue", id(3)),
		"FLEET_HB/" + heartbeat.SubjectFor("blue", id(5))}

	g, out, errOut := e.global()
	if err := RunAgentsList(testCtx(), &AgentsOptions{Global: g, Output: "table"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), string(id(1))) || strings.Count(out.String(), "\n") != 2 {
		t.Errorf("table: want the header and agent %s only:\n%s", id(1), out)
	}
	for _, want := range append(bad, "JetStream's own headers", "nats stream purge FLEET_HB --subject") {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}

	js := e.mustRun(func(g *Global) error { return RunAgentsList(testCtx(), &AgentsOptions{Global: g, Output: "json"}) })
	var rep AgentsReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Invalid != 3 || len(rep.Agents) != 1 {
		t.Errorf("invalid %d, agents %d; want 3 and 1", rep.Invalid, len(rep.Agents))
	}
	if diff := cmp.Diff(bad, problemKeys(rep.Problems)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}
