package fleetctl

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

func (e *env) quarantine() kv.Entry[rollout.QuarantineList] {
	e.t.Helper()
	q, err := e.fleet.ReadQuarantine(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return q
}

func (e *env) putQuarantine(l rollout.QuarantineList) uint64 {
	e.t.Helper()
	data, err := json.Marshal(l)
	if err != nil {
		e.t.Fatal(err)
	}
	rev, err := e.fleet.Plan.Put(e.ctx, kv.KeyQuarantine, data)
	if err != nil {
		e.t.Fatal(err)
	}
	return rev
}

func controllerQuarantine(v string) rollout.QuarantineList {
	ids := []rollout.AgentID{"0a000000-0000-4000-8000-000000000001", "0b000000-0000-4000-8000-000000000002", "0c000000-0000-4000-8000-000000000003"}
	return rollout.QuarantineList{V: 1, Versions: []rollout.Quarantine{{Version: v, At: testNow.Add(-10 * 60e9), By: rollout.QuarantineByController,
		Agents: ids, AgentCount: 3, Reason: "3 agents rolled back from " + v + " (release failures, quarantine_after 3): " + string(ids[0]) + ", " + string(ids[1]) + ", " + string(ids[2])}}}
}

// plan set refuses a quarantined target (or start) with the reason and the
// way out, writes nothing, and takes it with --force.
func TestPlanSetRefusesQuarantinedVersion(t *testing.T) {
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	e.putQuarantine(controllerQuarantine("1.5.0"))
	before := e.spec()

	for _, o := range []PlanSetOptions{
		{Target: ptr("1.5.0")},
		{Target: ptr("v1.5.0"), Start: ptr("1.4.0")},
		{Target: ptr("1.6.0"), Start: ptr("1.5.0")},
	} {
		_, err := e.run(planSet(o))
		mustContain(t, err, "1.5.0 is quarantined", "by controller", "3 agents rolled back from 1.5.0", "fleetctl quarantine rm 1.5.0", "--force", "nothing written")
		// The fleet's state refuses it, not the invocation: exit 1.
		if code := cliutil.ExitCode(err); code != cliutil.ExitFailure {
			t.Errorf("exit code %d, want %d", code, cliutil.ExitFailure)
		}
		if after := e.spec(); after.Revision != before.Revision {
			t.Fatalf("refused plan set wrote the spec: revision %d → %d", before.Revision, after.Revision)
		}
	}
	// Another target is fine; so is a change that keeps a quarantined
	// version that is already the target (it was refused when set).
	e.mustRun(planSet(PlanSetOptions{Target: ptr("1.4.1")}))

	out := e.mustRun(planSet(PlanSetOptions{Target: ptr("1.5.0"), Force: true}))
	if got := e.spec().Value.TargetVersion; got != "1.5.0" {
		t.Fatalf("forced: target %s", got)
	}
	if !strings.Contains(out, "1.5.0 is quarantined (--force): groups rolling it out halt at once") {
		t.Errorf("forced: no warning:\n%s", out)
	}
	e.mustRun(planSet(PlanSetOptions{Critical: ptr(true)}))
}

// quarantine add, ls and rm: table and JSON, bad input refused with
// nothing written, every write in the audit trail with actor and command.
func TestQuarantineAddLsRm(t *testing.T) {
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	halted := groupStatus(rollout.StateActive)
	halted.Halted, halted.HaltReason = true, "quarantined: 3 agents rolled back from 1.4.0"
	e.putStatus(halted)

	ls := func(output string) string {
		return e.mustRun(func(g *Global) error {
			return RunQuarantineLs(testCtx(), &QuarantineOptions{Global: g, Output: output})
		})
	}
	add := func(v, reason, output string) func(g *Global) error {
		return func(g *Global) error {
			g.Reason, g.Actor = reason, "alice"
			return RunQuarantineAdd(testCtx(), &QuarantineOptions{Global: g, Version: v, Output: output})
		}
	}
	rm := func(v, output string) func(g *Global) error {
		return func(g *Global) error {
			g.Reason, g.Actor = "fixed by a config change", "bob"
			return RunQuarantineRm(testCtx(), &QuarantineOptions{Global: g, Version: v, Output: output})
		}
	}

	if out := ls("table"); out != "No version is quarantined.\n" {
		t.Errorf("empty ls: %q", out)
	}
	var rep QuarantineReport
	if err := json.Unmarshal([]byte(ls("json")), &rep); err != nil || rep.Revision != 0 || rep.Versions == nil || len(rep.Versions) != 0 {
		t.Errorf("empty ls -o json: %+v %v", rep, err)
	}

	// Bad input: refused, nothing written.
	for _, c := range []struct {
		cmd  func(g *Global) error
		want []string
	}{
		{add("latest", "x", "text"), []string{"VERSION", "latest"}},
		{add("1.5.0", " ", "text"), []string{"--reason is required", "nothing written"}},
		{rm("1.5.0", "text"), []string{"1.5.0 is not quarantined", "no version is quarantined", "nothing written"}},
	} {
		_, err := e.run(c.cmd)
		mustContain(t, err, c.want...)
	}
	if q := e.quarantine(); q.Revision != 0 {
		t.Fatalf("refused commands wrote revision %d", q.Revision)
	}

	// An operator quarantines a version before anyone installs it.
	out := e.mustRun(add("v1.5.0", "CVE-2026-1234 in libfoo", "text"))
	for _, s := range []string{"1.5.0 quarantined by alice: CVE-2026-1234 in libfoo", "fleet_plan/quarantine written", "fleetctl quarantine rm 1.5.0"} {
		if !strings.Contains(out, s) {
			t.Errorf("add output lacks %q:\n%s", s, out)
		}
	}
	out = e.mustRun(add("1.4.0", "canaries crash", "json"))
	var wr WriteResult
	if err := json.Unmarshal([]byte(out), &wr); err != nil || wr.Command != "quarantine add" || !wr.Written || wr.Key != kv.KeyQuarantine || wr.PreviousRevision == 0 {
		t.Errorf("add -o json: %+v %v\n%s", wr, err, out)
	}
	_, err := e.run(add("1.4.0", "again", "text"))
	mustContain(t, err, "1.4.0 is already quarantined", "by alice: canaries crash", "nothing written")

	q := e.quarantine().Value
	if !q.Quarantined("1.5.0") || !q.Quarantined("1.4.0") || q.Versions[0].By != "alice" || q.Versions[0].At != testNow {
		t.Errorf("stored: %+v", q)
	}

	out = ls("table")
	for _, s := range []string{"VERSION", "HALTED", "1.5.0", "alice", "CVE-2026-1234", "1.4.0", "prod"} {
		if !strings.Contains(out, s) {
			t.Errorf("ls lacks %q:\n%s", s, out)
		}
	}
	checkWidth(t, out)
	if err := json.Unmarshal([]byte(ls("json")), &rep); err != nil || len(rep.Versions) != 2 || rep.Revision == 0 {
		t.Errorf("ls -o json: %+v %v", rep, err)
	}

	// The controller's quarantine lists its agents, one a line.
	withAgents := e.quarantine()
	l := withAgents.Value
	l.Versions = append(l.Versions, controllerQuarantine("1.6.0").Versions...)
	if _, err := kv.Save(e.ctx, e.fleet.Plan, kv.KeyQuarantine, l, withAgents.Revision); err != nil {
		t.Fatal(err)
	}
	out = ls("table")
	if !strings.Contains(out, "1.6.0 rolled back on:\n  0a000000-0000-4000-8000-000000000001\n") {
		t.Errorf("ls does not list the agents:\n%s", out)
	}
	checkWidth(t, out)

	// Lifting: the halted group stays halted and the output says how on.
	out = e.mustRun(rm("1.4.0", "text"))
	for _, s := range []string{"1.4.0 no longer quarantined", "by alice: canaries crash", "stay halted", "fleetctl reset --group prod"} {
		if !strings.Contains(out, s) {
			t.Errorf("rm output lacks %q:\n%s", s, out)
		}
	}
	if st := e.status("prod").Value; !st.Halted {
		t.Errorf("rm changed the group status: %+v", st)
	}
	q = e.quarantine().Value
	if q.Quarantined("1.4.0") || !q.Quarantined("1.5.0") || !q.Quarantined("1.6.0") || len(q.Lifted) != 1 || q.Lifted[0].By != "bob" {
		t.Errorf("after rm: %+v", q)
	}

	// The audit trail: actor, command, reason and what changed.
	entries, problems, err := e.fleet.ReadTimeline(e.ctx, testNow.Add(-1e12))
	if err != nil || len(problems) > 0 {
		t.Fatalf("timeline: %v %v", err, problems)
	}
	var got []string
	for _, en := range entries {
		if a := en.Audit; a != nil {
			got = append(got, a.Actor+" "+a.Command+" "+a.Reason+" "+a.Key)
		}
	}
	want := []string{
		"alice quarantine add CVE-2026-1234 in libfoo quarantine",
		"alice quarantine add canaries crash quarantine",
		"bob quarantine rm fixed by a config change quarantine",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit records (-want +got):\n%s", diff)
	}
}

// A stored quarantine list that is not valid: ls and rm report it with the
// fix, plan set refuses to guess, and add replaces it.
func TestQuarantineBadStoredValue(t *testing.T) {
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	rev, err := e.fleet.Plan.Put(e.ctx, kv.KeyQuarantine, []byte(`{"v":1,"versions":[{"version":"nope"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.run(func(g *Global) error {
		return RunQuarantineLs(testCtx(), &QuarantineOptions{Global: g, Output: "table"})
	})
	mustContain(t, err, "fleet_plan/quarantine", "fleetctl quarantine add")
	_, err = e.run(planSet(PlanSetOptions{Target: ptr("1.5.0")}))
	mustContain(t, err, "quarantine list", "not valid", "--force")
	e.mustRun(func(g *Global) error {
		g.Reason = "bad"
		return RunQuarantineAdd(testCtx(), &QuarantineOptions{Global: g, Version: "1.6.0", Output: "text"})
	})
	q := e.quarantine()
	if q.Revision <= rev || len(q.Value.Versions) != 1 || !q.Value.Quarantined("1.6.0") {
		t.Errorf("after add over a bad value: %+v", q)
	}
}

// The binary: quarantine add/ls/rm as a stranger runs them, and history
// shows who did what.
func TestQuarantineBinaryAndHistory(t *testing.T) {
	e := newEnv(t)
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL()}
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))

	if _, stderr, code := runBin(t, bin, env, "quarantine", "add", "1.5.0"); code != cliutil.ExitUsage || !strings.Contains(stderr, "--reason is required") {
		t.Errorf("add without --reason: exit %d: %s", code, stderr)
	}
	if _, stderr, code := runBin(t, bin, env, "quarantine", "add"); code != cliutil.ExitUsage || !strings.Contains(stderr, "quarantine add: give the VERSION") {
		t.Errorf("add without VERSION: exit %d: %s", code, stderr)
	}
	for _, step := range [][]string{
		{"--actor", "alice", "quarantine", "add", "1.5.0", "--reason", "CVE-2026-1234"},
		{"--actor", "bob", "quarantine", "rm", "1.5.0", "--reason", "false alarm"},
	} {
		if _, stderr, code := runBin(t, bin, env, step...); code != 0 {
			t.Fatalf("%v: exit %d: %s", step, code, stderr)
		}
	}
	stdout, stderr, code := runBin(t, bin, env, "--actor", "carol", "plan", "set", "--target", "1.5.0")
	if code != 0 {
		t.Errorf("plan set of a lifted version: exit %d: %s", code, stderr)
	}
	_ = stdout
	all := historyOf(t, bin, env)
	want := []string{"alice quarantine add ", "bob quarantine rm ", "carol plan set "}
	if got := auditLines(all); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("audit records:\n got %q\nwant %q", got, want)
	}
	stdout, _, code = runBin(t, bin, env, "history")
	for _, s := range []string{"alice", "quarantine add", "CVE-2026-1234", "bob", "quarantine rm"} {
		if code != 0 || !strings.Contains(stdout, s) {
			t.Errorf("history table lacks %q:\n%s", s, stdout)
		}
	}
	stdout, _, code = runBin(t, bin, env, "quarantine", "--help")
	if code != 0 || !strings.Contains(stdout, "quarantine_after") || !strings.Contains(stdout, "rm") {
		t.Errorf("quarantine --help:\n%s", stdout)
	}
}

// config set --quarantine-after: 0 turns the rule off, out of bounds is
// refused with the bounds and nothing written.
func TestConfigSetQuarantineAfter(t *testing.T) {
	e := newEnv(t)
	set := func(n int) func(g *Global) error {
		return func(g *Global) error {
			return RunConfigSet(testCtx(), &ConfigSetOptions{Global: g, QuarantineAfter: ptr(n), Output: "text"})
		}
	}
	out := e.mustRun(set(5))
	if !strings.Contains(out, "quarantine_after 3 → 5") || e.config().Value.QuarantineAfter != 5 {
		t.Errorf("set 5: %s", out)
	}
	rev := e.configRevision()
	_, err := e.run(set(1001))
	mustContain(t, err, "quarantine_after 1001 must be 0 (off) or 1-1000")
	if e.configRevision() != rev {
		t.Errorf("refused config set wrote the config")
	}
	e.mustRun(set(0))
	if e.config().Value.QuarantineAfter != 0 {
		t.Errorf("set 0: %+v", e.config().Value)
	}
}
