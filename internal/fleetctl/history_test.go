package fleetctl

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// historyOf runs "history -o json" with args through the binary and returns
// its records.
func historyOf(t *testing.T, bin string, env []string, args ...string) HistoryReport {
	t.Helper()
	stdout, stderr, code := runBin(t, bin, env, append([]string{"history", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("history %v: exit %d: %s", args, code, stderr)
	}
	var rep HistoryReport
	oneObject(t, stdout, &rep)
	return rep
}

// auditLine is an audit record as "actor command group".
func auditLines(rep HistoryReport) []string {
	var out []string
	for _, r := range rep.Records {
		if r.Audit != nil {
			out = append(out, fmt.Sprintf("%s %s %s", r.Audit.Actor, r.Audit.Command, r.Group))
		}
	}
	return out
}

// TestHistoryTwoActorsInOrder: pause, resume, plan set and rollback by two
// people (--actor on an open bus), through the binary: history lists both
// actors in the order they acted, each write with its reason and what
// changed, and the rollback's event after it; --group leaves out another
// group's entries and keeps the fleet-wide ones.
func TestHistoryTwoActorsInOrder(t *testing.T) {
	e := newEnv(t)
	bin := fleetctlBin(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	e.putStatus(groupStatus(rollout.StateActive))
	staging := groupStatus(rollout.StateActive)
	staging.Group = "staging"
	e.putStatus(staging)
	env := []string{"NATS_URL=" + e.srv.URL()}
	for _, step := range [][]string{
		{"--actor", "alice", "pause", "--reason", "db maintenance"},
		{"--actor", "bob", "resume"},
		{"--actor", "alice", "plan", "set", "--critical", "--reason", "CVE-2026-1"},
		{"--actor", "bob", "rollback", "--group", "prod", "--note", "500s on checkout"},
		{"--actor", "carol", "rollback", "--group", "staging"},
	} {
		if _, stderr, code := runBin(t, bin, env, step...); code != 0 {
			t.Fatalf("%v: exit %d: %s", step, code, stderr)
		}
	}

	all := historyOf(t, bin, env)
	want := []string{"alice pause ", "bob resume ", "alice plan set ", "bob rollback prod", "carol rollback staging"}
	if got := auditLines(all); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("audit records:\n got %q\nwant %q", got, want)
	}
	var pause, rollback *kv.AuditRecord
	var rollbackAt, eventAt int
	for i, r := range all.Records {
		switch {
		case r.Audit != nil && r.Audit.Command == "pause":
			pause = r.Audit
		case r.Audit != nil && r.Audit.Command == "rollback" && r.Group == "prod":
			rollback, rollbackAt = r.Audit, i
		case r.Event != nil && r.Group == "prod":
			eventAt = i
			if r.Kind != "event" || r.Event.To != rollout.StateRolledBack {
				t.Errorf("prod event: %+v", r)
			}
		}
	}
	if pause == nil || rollback == nil {
		t.Fatalf("no pause or prod rollback record: %+v", all.Records)
	}
	if pause.Reason != "db maintenance" || pause.Bucket != kv.BucketPlan || pause.Key != kv.KeySpec ||
		len(pause.Diff) != 1 || pause.Diff[0].Path != "mode" || string(pause.Diff[0].After) != `"paused"` {
		t.Errorf("pause record: %+v", pause)
	}
	if rollback.Reason != "500s on checkout" || rollback.PreviousRevision == 0 || rollback.Revision <= rollback.PreviousRevision {
		t.Errorf("rollback record: %+v", rollback)
	}
	if !hasChange(rollback.Diff, "state", `"active"`, `"rolledback"`) {
		t.Errorf("rollback diff lacks state active → rolledback: %+v", rollback.Diff)
	}
	if eventAt <= rollbackAt {
		t.Errorf("the rollback's event (entry %d) is not after the rollback (entry %d)", eventAt, rollbackAt)
	}

	prod := historyOf(t, bin, env, "--group", "prod")
	want = []string{"alice pause ", "bob resume ", "alice plan set ", "bob rollback prod"}
	if got := auditLines(prod); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("history --group prod:\n got %q\nwant %q", got, want)
	}
	for _, r := range prod.Records {
		if r.Group == "staging" {
			t.Errorf("history --group prod shows %+v", r)
		}
	}

	// The table for people: both actors, the reason, what changed.
	stdout, stderr, code := runBin(t, bin, env, "history", "--group", "prod")
	if code != 0 {
		t.Fatal(stderr)
	}
	for _, s := range []string{"ACTOR", "alice", "bob", "db maintenance", "mode enabled → paused", "transition", "state active → rolledback"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("history table lacks %q:\n%s", s, stdout)
		}
	}
	// Piped, every cell is in full (issue 25: CHANGE and REASON were cut
	// to 100 columns even in a pipe); on a terminal of 100 columns the
	// table fits it.
	if !strings.Contains(stdout, "rejected_versions (none) → 1.4.0, since") {
		t.Errorf("piped history cut the rollback's change:\n%s", stdout)
	}
	g, out, errOut := e.global()
	if err := RunHistory(testCtx(), &HistoryOptions{Global: g, Group: "prod", Output: "table", Width: 100, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	checkWidth(t, out.String())
	if !strings.Contains(errOut.String(), "fleetctl history -o wide") {
		t.Errorf("a cut table does not say how to see it whole: %q", errOut.String())
	}

	// A group nothing names (a typo): the fleet-wide entries, and a note.
	stdout, stderr, code = runBin(t, bin, env, "history", "--group", "prdo")
	if code != 0 || !strings.Contains(stderr, `no entry names group "prdo"`) || strings.Contains(stdout, "rollback") {
		t.Errorf("history --group prdo: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

func hasChange(diff []kv.FieldChange, path, before, after string) bool {
	for _, c := range diff {
		if c.Path == path && string(c.Before) == before && string(c.After) == after {
			return true
		}
	}
	return false
}

// TestHistorySince: --since starts at the first entry the stream stored at
// or after now - since, by the server's time index.
func TestHistorySince(t *testing.T) {
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	for _, step := range []func(g *Global) error{
		func(g *Global) error { g.Actor = "a"; return RunPause(testCtx(), &PauseOptions{Global: g}) },
		func(g *Global) error { g.Actor = "b"; return RunResume(testCtx(), &PauseOptions{Global: g}) },
		func(g *Global) error { g.Actor = "c"; return RunPause(testCtx(), &PauseOptions{Global: g}) },
	} {
		e.mustRun(step)
	}
	entries, _, err := e.fleet.ReadTimeline(e.ctx, time.Time{})
	if err != nil || len(entries) != 3 {
		t.Fatalf("timeline: %v, %d entries", err, len(entries))
	}
	// Now is set so that now - since is exactly when the second was stored.
	now := time.Now()
	since := now.Sub(entries[1].Stored)
	out := e.mustRun(func(g *Global) error {
		g.Now = func() time.Time { return now }
		return RunHistory(testCtx(), &HistoryOptions{Global: g, Since: since, Output: "json"})
	})
	var rep HistoryReport
	oneObject(t, out, &rep)
	if got := auditLines(rep); strings.Join(got, "|") != "b resume |c pause " {
		t.Errorf("--since %v: %q, want b resume, c pause", since, got)
	}
	out = e.mustRun(func(g *Global) error {
		g.Now = func() time.Time { return entries[2].Stored.Add(time.Hour) }
		return RunHistory(testCtx(), &HistoryOptions{Global: g, Since: time.Minute, Output: "json"})
	})
	rep = HistoryReport{}
	oneObject(t, out, &rep)
	if len(rep.Records) != 0 {
		t.Errorf("--since 1m an hour after the last entry: %+v", rep.Records)
	}
}

// TestFailedWriteRecordsNothing: a write that loses its compare-and-swap
// writes nothing and records nothing; a write whose record cannot be
// stored is made, said loudly, and exits 1.
func TestFailedWriteRecordsNothing(t *testing.T) {
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	_, err := e.run(func(g *Global) error {
		g.beforeWrite = func() { e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.1")) }
		return RunPause(testCtx(), &PauseOptions{Global: g})
	})
	mustContain(t, err, "changed under you")
	entries, _, err := e.fleet.ReadTimeline(e.ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("a failed write left %d audit entries: %+v", len(entries), entries[0].Audit)
	}

	// No stream to take the record: the write stands, stderr says the
	// record is missing, the exit status is 1.
	if err := e.fleet.JS.DeleteStream(e.ctx, kv.StreamAudit); err != nil {
		t.Fatal(err)
	}
	bin := fleetctlBin(t)
	stdout, stderr, code := runBin(t, bin, []string{"NATS_URL=" + e.srv.URL()}, "pause")
	if code != 1 || !strings.Contains(stderr, "audit record was NOT stored") || !strings.Contains(stdout, "plan paused") {
		t.Errorf("pause without an audit stream: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if m := e.spec().Value.Mode; m != rollout.ModePaused {
		t.Errorf("mode %q after the write whose record failed, want paused", m)
	}
}

// TestAuditOperatorMode: on an operator-mode server, the actor is the user
// name in each admin's creds; an agent's creds may not publish an audit
// record (nothing is stored), and the controller's events land in the
// timeline.
func TestAuditOperatorMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatal(stderr)
	}
	for _, name := range []string{"alice", "bob"} {
		if _, stderr, code := execute(t, "auth", "user", "--dir", dir, "--name", name, "--role", "admin"); code != 0 {
			t.Fatal(stderr)
		}
	}
	srv, connect := operatorServer(t, ctx, dir)
	adminNC, err := connect(filepath.Join(dir, auth.CredsFile(auth.UserAdmin)))
	if err != nil {
		t.Fatal(err)
	}
	defer adminNC.Close()
	js, _ := jetstream.New(adminNC)
	plan, err := js.KeyValue(ctx, kv.BucketPlan)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(rollout.DefaultSpec("1.3.2", "1.4.0"))
	if _, err := plan.Put(ctx, kv.KeySpec, data); err != nil {
		t.Fatal(err)
	}

	bin := fleetctlBin(t)
	for _, step := range []struct{ user, cmd string }{{"alice", "pause"}, {"bob", "resume"}} {
		env := []string{"NATS_URL=" + srv.URL(), "NATS_CREDS=" + filepath.Join(dir, auth.CredsFile(step.user)), "USER=someone-else"}
		if _, stderr, code := runBin(t, bin, env, step.cmd); code != 0 {
			t.Fatalf("%s %s: exit %d: %s", step.user, step.cmd, code, stderr)
		}
	}
	rep := historyOf(t, bin, []string{"NATS_URL=" + srv.URL(), "NATS_CREDS=" + filepath.Join(dir, auth.CredsFile(auth.UserAdmin))})
	if got := auditLines(rep); strings.Join(got, "|") != "alice pause |bob resume " {
		t.Errorf("actors from the creds: %q, want alice pause, bob resume", got)
	}

	// The controller's events go to the timeline (it publishes on
	// fleet.events.<g>, which FLEET_EVENTS captures).
	ctl, err := connect(filepath.Join(dir, auth.CredsFile(auth.UserController)))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	ev, _ := json.Marshal(rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, Reason: "3 of 20 failed", At: time.Now().UTC()})
	if err := ctl.Publish(kv.EventSubject("prod"), ev); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() error {
		rep := historyOf(t, bin, []string{"NATS_URL=" + srv.URL(), "NATS_CREDS=" + filepath.Join(dir, auth.CredsFile(auth.UserAdmin))})
		if n := len(rep.Records); n != 3 || rep.Records[2].Event == nil || rep.Records[2].Event.Kind != rollout.EventHalt {
			return fmt.Errorf("timeline has no halt event last: %+v", rep.Records)
		}
		return nil
	})

	// An agent's creds: the audit subjects are denied, nothing is stored.
	const id = rollout.AgentID("0a000000-0000-4000-8000-00000000000a")
	stdout, stderr, code := execute(t, "auth", "agent", "--dir", dir, "--id", string(id), "--group", "prod", "-o", "json")
	if code != 0 {
		t.Fatal(stderr)
	}
	var ag AuthAgentReport
	if err := json.Unmarshal([]byte(stdout), &ag); err != nil {
		t.Fatal(err)
	}
	agent, err := agentConnTo(t, srv.URL(), id, ag.Creds)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := json.Marshal(kv.AuditRecord{V: 1, At: time.Now().UTC(), Actor: "alice", Command: "resume", Bucket: kv.BucketPlan, Key: kv.KeySpec})
	for _, subj := range []string{kv.AuditSubject(""), kv.AuditSubject("prod"), kv.EventSubject("prod")} {
		if err := agent.nc.Publish(subj, forged); err != nil {
			t.Fatal(err)
		}
		if err := agent.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, 10*time.Second, func() error {
			agent.mu.Lock()
			defer agent.mu.Unlock()
			for _, e := range agent.errs {
				if strings.Contains(e, "Permissions Violation for Publish to \""+subj+"\"") {
					return nil
				}
			}
			return fmt.Errorf("no permissions violation for %s yet: %q", subj, agent.errs)
		})
	}
	ajs, _ := jetstream.New(agent.nc)
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	if _, err := ajs.Publish(pctx, kv.AuditSubject(""), forged); err == nil {
		t.Error("an agent's JetStream publish of an audit record was acked")
	}
	for stream, want := range map[string]uint64{kv.StreamAudit: 2, kv.StreamEvents: 1} {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != want {
			t.Errorf("%s holds %d messages after the agent's attempts, want %d", stream, info.State.Msgs, want)
		}
	}
}

// TestRequireReason: with require_reason in the config, a write without
// --reason (or a group action's --note) is a usage error that writes and
// records nothing; with one it goes through and the record carries it.
func TestRequireReason(t *testing.T) {
	e := newEnv(t)
	bin := fleetctlBin(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	e.putStatus(groupStatus(rollout.StateActive))
	env := []string{"NATS_URL=" + e.srv.URL(), "FLEETCTL_ACTOR=alice"}
	if _, stderr, code := runBin(t, bin, env, "config", "set", "--require-reason", "--reason", "SOC2"); code != 0 {
		t.Fatalf("config set --require-reason: exit %d: %s", code, stderr)
	}
	if !e.config().Value.RequireReason {
		t.Fatal("require_reason not stored")
	}
	spec := e.spec().Revision
	entries, _, _ := e.fleet.ReadTimeline(e.ctx, time.Time{})
	for _, args := range [][]string{{"pause"}, {"plan", "set", "--critical"}, {"rollback", "--group", "prod"},
		{"config", "set", "--require-reason=false"}, {"pause", "--reason", "  "}} {
		_, stderr, code := runBin(t, bin, env, args...)
		if code != 2 || !strings.Contains(stderr, "requires a reason") || !strings.Contains(stderr, "nothing written") {
			t.Errorf("%v without a reason: exit %d: %s", args, code, stderr)
		}
	}
	if got := e.spec().Revision; got != spec {
		t.Errorf("spec revision %d after refused writes, want %d", got, spec)
	}
	if got := e.status("prod").Value.State; got != rollout.StateActive {
		t.Errorf("prod %s after a refused rollback", got)
	}
	after, _, _ := e.fleet.ReadTimeline(e.ctx, time.Time{})
	if len(after) != len(entries) {
		t.Errorf("refused writes left %d timeline entries", len(after)-len(entries))
	}
	for _, args := range [][]string{{"pause", "--reason", "incident 42"}, {"rollback", "--group", "prod", "--note", "500s"}} {
		if _, stderr, code := runBin(t, bin, env, args...); code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
	rep := historyOf(t, bin, env)
	var reasons []string
	for _, r := range rep.Records {
		if r.Audit != nil {
			reasons = append(reasons, r.Audit.Reason)
		}
	}
	if strings.Join(reasons, "|") != "SOC2|incident 42|500s" {
		t.Errorf("reasons %q, want SOC2, incident 42, 500s", reasons)
	}
}
