package fleetctl

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Issue 28, point 5: the operator verbs through the real fleetctl binary
// on a real embedded server: run --skip-canaries, rollback --all and
// mark-done of a rolled back group; the refusals (exit codes, nothing
// written: the revisions do not move) and the history entries.

// revisions are the stored revisions of the groups' status keys (0: none),
// read raw so that a status that is not valid has one too.
func (e *env) revisions(groups ...string) map[string]uint64 {
	e.t.Helper()
	out := map[string]uint64{}
	for _, g := range groups {
		en, err := e.fleet.Plan.Get(e.ctx, kv.GroupKey(g))
		if err == nil {
			out[g] = en.Revision()
		}
	}
	return out
}

// named is groupStatus(state) for group.
func named(group string, state rollout.State) rollout.GroupStatus {
	st := groupStatus(state)
	st.Group = group
	if state == rollout.StateUnstarted {
		st.InitialCount, st.Progress, st.StartedAt, st.FailuresSince = 0, 0, time.Time{}, time.Time{}
	}
	return st
}

// auditsOf are the audit records of history -o json with command.
func auditsOf(rep HistoryReport, command string) []*kv.AuditRecord {
	var out []*kv.AuditRecord
	for _, r := range rep.Records {
		if r.Audit != nil && r.Audit.Command == command {
			out = append(out, r.Audit)
		}
	}
	return out
}

// writeResultOf decodes a write result whose value is v.
type writeResultOf[V any] struct {
	Command          string          `json:"command"`
	Written          bool            `json:"written"`
	Bucket           string          `json:"bucket"`
	Key              string          `json:"key"`
	Revision         uint64          `json:"revision"`
	PreviousRevision uint64          `json:"previous_revision"`
	Value            V               `json:"value"`
	Changes          []string        `json:"changes"`
	Event            *rollout.Event  `json:"event"`
	Agents           json.RawMessage `json:"agents"`
}

func TestRunSkipCanariesBinary(t *testing.T) {
	bin := fleetctlBin(t) // before the env: its 30 s context is not for the build
	e := newEnv(t)
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("dev"), rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod"), rollout.DefaultGroup("lab")}
	e.putConfig(cfg)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	e.putStatus(named("dev", rollout.StateDone))
	e.putStatus(named("staging", rollout.StateActive))
	e.putStatus(named("prod", rollout.StateUnstarted))
	halted := named("lab", rollout.StateCanary)
	halted.Halted, halted.HaltReason, halted.HaltedAt = true, "canary crashed: exit status 2", testNow.Add(-time.Minute)
	halted.Canaries = []rollout.Canary{{ID: "0b000000-0000-4000-8000-000000000000"}}
	e.putStatus(halted)
	env := []string{"NATS_URL=" + e.srv.URL(), "FLEETCTL_ACTOR=alice"}
	all := []string{"dev", "staging", "prod", "lab"}

	// Refusals: nothing written.
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"run", "--group", "prod", "--skip-canaries"}, cliutil.ExitUsage, []string{"run --skip-canaries: --reason is required", "nothing written", "--help' for usage"}},
		{[]string{"run", "--group", "staging", "--skip-canaries", "--reason", "x"}, cliutil.ExitFailure, []string{`run --skip-canaries group "staging": it is active`, "past its canaries"}},
		{[]string{"run", "--group", "dev", "--skip-canaries", "--reason", "x"}, cliutil.ExitFailure, []string{`group "dev": it is done`, "change target_version"}},
		{[]string{"run", "--group", "lab", "--skip-canaries", "--reason", "x"}, cliutil.ExitFailure, []string{
			"run --skip-canaries --group lab refused: the group is halted", "canary crashed",
			"ends the canary phase: the group starts again straight in active, without canaries",
			`fleetctl run --skip-canaries --group lab --force --reason "…"`, "nothing written"}},
		{[]string{"run", "--group", "prdo", "--skip-canaries", "--reason", "x"}, cliutil.ExitUsage, []string{"did you mean --group prod?"}},
	} {
		before := e.revisions(all...)
		_, stderr, code := runBin(t, bin, env, tc.args...)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d: %s", tc.args, code, tc.code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr lacks %q:\n%s", tc.args, w, stderr)
			}
		}
		if tc.code == cliutil.ExitFailure && strings.Contains(stderr, "--help' for usage") {
			t.Errorf("%v: a refusal by the group's state is not a usage error: %s", tc.args, stderr)
		}
		if after := e.revisions(all...); !sameRevs(before, after) {
			t.Errorf("%v refused but wrote: revisions %v → %v", tc.args, before, after)
		}
	}

	// The run request: written with the reason, history shows it.
	reason := "INC-42: the fix must reach every host today"
	stdout, stderr, code := runBin(t, bin, env, "run", "--group", "prod", "--skip-canaries", "--reason", reason)
	if code != 0 {
		t.Fatalf("run --skip-canaries: exit %d: %s", code, stderr)
	}
	if want := `group "prod" (still unstarted): operator run --skip-canaries: ` + reason + " (starts at once in active, without canaries)"; !strings.Contains(stdout, want) {
		t.Errorf("stdout lacks %q:\n%s", want, stdout)
	}
	if st := e.status("prod").Value; !st.RunRequested || st.SkipCanaries != reason || st.State != rollout.StateUnstarted {
		t.Errorf("prod after run --skip-canaries: %+v", st)
	}
	rep := historyOf(t, bin, env, "--group", "prod")
	if a := auditsOf(rep, "run --skip-canaries"); len(a) != 1 || a[0].Reason != reason || a[0].Actor != "alice" || a[0].Group != "prod" {
		t.Errorf("audit records of run --skip-canaries: %+v", a)
	}
	stdout, _, _ = runBin(t, bin, env, "history", "--group", "prod")
	if !strings.Contains(stdout, "run --skip-canaries") || !strings.Contains(stdout, reason) {
		t.Errorf("history lacks the run --skip-canaries and its reason:\n%s", stdout)
	}

	// Forced past the halt: the canary phase ends, restarted without
	// canaries; -o json names the command.
	stdout, stderr, code = runBin(t, bin, env, "run", "--group", "lab", "--skip-canaries", "--force", "--reason", "INC-43: the canary host was bad", "-o", "json")
	if code != 0 {
		t.Fatalf("forced run --skip-canaries: exit %d: %s", code, stderr)
	}
	var res writeResultOf[rollout.GroupStatus]
	oneObject(t, stdout, &res)
	if res.Command != "run --skip-canaries --force" || !res.Written || res.Event == nil || res.Event.From != rollout.StateCanary || res.Event.To != rollout.StateUnstarted ||
		res.Value.SkipCanaries == "" || !res.Value.RunRequested || res.Value.Halted || len(res.Value.Canaries) != 0 {
		t.Errorf("forced run --skip-canaries -o json: %+v", res)
	}
	if !strings.Contains(res.Value.SkipCanaries, "INC-43") || !strings.Contains(res.Value.SkipCanaries, "forced past a halt") {
		t.Errorf("skip_canaries %q does not keep the reason and the force", res.Value.SkipCanaries)
	}
	rep = historyOf(t, bin, env, "--group", "lab")
	if a := auditsOf(rep, "run --skip-canaries --force"); len(a) != 1 || a[0].Reason != "INC-43: the canary host was bad" {
		t.Errorf("audit records of the forced run --skip-canaries: %+v", a)
	}

	// --help teaches it.
	stdout, _, _ = runBin(t, bin, env, "run", "--help")
	for _, w := range []string{"--skip-canaries", "straight in active", "run --group prod --skip-canaries --reason"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("run --help lacks %q", w)
		}
	}
	stdout, _, _ = runBin(t, bin, env, "--help")
	if !strings.Contains(stdout, "--skip-canaries") || !strings.Contains(stdout, "--all: every started group") {
		t.Errorf("fleetctl --help does not mention --skip-canaries and rollback --all:\n%s", stdout)
	}
}

func sameRevs(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// rollbackAllEnv is dev (active, halted), staging (done), qa (canary),
// prod (unstarted), lab (rolled back), edge (active for an older
// target), and a status for ghost, which the config lacks.
func rollbackAllEnv(t *testing.T) (*env, []string) {
	e := newEnv(t)
	cfg := rollout.DefaultConfig()
	cfg.Groups = nil
	names := []string{"dev", "staging", "qa", "prod", "lab", "edge"}
	for _, n := range names {
		cfg.Groups = append(cfg.Groups, rollout.DefaultGroup(n))
	}
	e.putConfig(cfg)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	dev := named("dev", rollout.StateActive)
	dev.Halted, dev.HaltReason = true, "3 of 20 failed"
	e.putStatus(dev)
	e.putStatus(named("staging", rollout.StateDone))
	e.putStatus(named("qa", rollout.StateCanary))
	e.putStatus(named("prod", rollout.StateUnstarted))
	e.putStatus(named("lab", rollout.StateRolledBack))
	edge := named("edge", rollout.StateActive)
	edge.TargetVersion = "1.3.9"
	e.putStatus(edge)
	e.putStatus(named("ghost", rollout.StateActive))
	return e, append(names, "ghost")
}

func TestRollbackAllBinary(t *testing.T) {
	bin := fleetctlBin(t) // before the env: its 30 s context is not for the build
	e, all := rollbackAllEnv(t)
	env := []string{"NATS_URL=" + e.srv.URL(), "FLEETCTL_ACTOR=bob"}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollback", "--all", "--group", "dev", "--reason", "x"}, "--all and --group dev are exclusive"},
		{[]string{"rollback", "--all"}, "rollback --all: --reason is required"},
		{[]string{"rollback", "--reason", "x"}, "say which group (--group G), or --all"},
	} {
		before := e.revisions(all...)
		_, stderr, code := runBin(t, bin, env, tc.args...)
		if code != cliutil.ExitUsage || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "--help' for usage") {
			t.Errorf("%v: exit %d, want 2 saying %q: %s", tc.args, code, tc.want, stderr)
		}
		if after := e.revisions(all...); !sameRevs(before, after) {
			t.Errorf("%v refused but wrote: revisions %v → %v", tc.args, before, after)
		}
	}

	// Completion offers the new flags.
	if stdout, _, _ := runBin(t, bin, env, "__complete", "rollback", "--a"); !strings.Contains(stdout, "--all") {
		t.Errorf("completion of rollback --a lacks --all:\n%s", stdout)
	}
	if stdout, _, _ := runBin(t, bin, env, "__complete", "run", "--s"); !strings.Contains(stdout, "--skip-canaries") {
		t.Errorf("completion of run --s lacks --skip-canaries:\n%s", stdout)
	}

	reason := "INC-51: 1.4.0 corrupts the cache"
	before := e.revisions(all...)
	stdout, stderr, code := runBin(t, bin, env, "rollback", "--all", "--reason", reason)
	if code != 0 {
		t.Fatalf("rollback --all: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, w := range []string{
		`group "dev": active → rolledback: operator rollback: ` + reason + " (fleet_plan/group.dev revision",
		`group "staging": done → rolledback: operator rollback: ` + reason,
		`group "qa": canary → rolledback: operator rollback: ` + reason,
		`group "prod": skipped (unstarted): nothing to roll back`,
		`group "lab": skipped (rolledback): already rolled back`,
		`group "edge": skipped (active): its status is for 1.3.9, not the plan's target 1.4.0`,
		`group "ghost": skipped (active): not in the config`, "fleetctl rollback --group ghost rolls it back",
		"rolled back 3 of 7 groups from 1.4.0, 4 skipped",
	} {
		if !strings.Contains(stdout, w) {
			t.Errorf("stdout lacks %q:\n%s", w, stdout)
		}
	}
	after := e.revisions(all...)
	for _, g := range all {
		moved := after[g] != before[g]
		if want := g == "dev" || g == "staging" || g == "qa"; moved != want {
			t.Errorf("group %s: revision %d → %d, moved %v, want %v", g, before[g], after[g], moved, want)
		}
	}
	for _, g := range []string{"dev", "staging", "qa"} {
		if st := e.status(g).Value; st.State != rollout.StateRolledBack || st.Halted || !strings.Contains(st.Reason, reason) {
			t.Errorf("%s after rollback --all: %s halted %v %q", g, st.State, st.Halted, st.Reason)
		}
	}
	// One audit record per group rolled back, with the reason; history shows them.
	rep := historyOf(t, bin, env)
	var groups []string
	for _, a := range auditsOf(rep, "rollback --all") {
		if a.Reason != reason || a.Actor != "bob" {
			t.Errorf("audit record %+v", a)
		}
		groups = append(groups, a.Group)
	}
	slices.Sort(groups)
	if fmt.Sprint(groups) != "[dev qa staging]" {
		t.Errorf("audit records of rollback --all for %v, want one each for dev, qa, staging", groups)
	}
	stdout, _, _ = runBin(t, bin, env, "history", "--group", "qa")
	if !strings.Contains(stdout, "rollback --all") || !strings.Contains(stdout, reason) {
		t.Errorf("history --group qa lacks the rollback --all:\n%s", stdout)
	}

	// Again, -o json: one object, every group skipped, nothing written, exit 0.
	before = e.revisions(all...)
	stdout, stderr, code = runBin(t, bin, env, "rollback", "--all", "--reason", reason, "-o", "json")
	if code != 0 {
		t.Fatalf("rollback --all again: exit %d: %s", code, stderr)
	}
	var res writeResultOf[RollbackAllReport]
	oneObject(t, stdout, &res)
	if res.Command != "rollback --all" || res.Written || res.Value.RolledBack != 0 || res.Value.Skipped != 7 || res.Value.Failed != 0 ||
		res.Value.TargetVersion != "1.4.0" || len(res.Value.Groups) != 7 || res.Value.Groups[0].Group != "dev" || res.Value.Groups[0].Outcome != OutcomeSkipped {
		t.Errorf("rollback --all -o json again: %+v", res)
	}
	if after := e.revisions(all...); !sameRevs(before, after) {
		t.Errorf("rollback --all with nothing to do wrote: %v → %v", before, after)
	}
}

// TestRollbackAllPartialFailureBinary: a group whose status cannot be
// rolled back (not valid) does not stop the others; the output and the
// error say exactly which groups moved and which did not; exit 1.
func TestRollbackAllPartialFailureBinary(t *testing.T) {
	bin := fleetctlBin(t) // before the env: its 30 s context is not for the build
	e, all := rollbackAllEnv(t)
	e.putRaw(kv.BucketPlan, kv.GroupKey("staging"), `{"v":1,"group":"staging","state":"sideways"}`)
	env := []string{"NATS_URL=" + e.srv.URL(), "FLEETCTL_ACTOR=bob"}
	before := e.revisions(all...)
	stdout, stderr, code := runBin(t, bin, env, "rollback", "--all", "--reason", "INC-52", "-o", "json")
	if code != cliutil.ExitFailure {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, stdout, stderr)
	}
	var res writeResultOf[RollbackAllReport]
	oneObject(t, stdout, &res)
	outcome := map[string]string{}
	for _, g := range res.Value.Groups {
		outcome[g.Group] = g.Outcome
	}
	if outcome["dev"] != OutcomeRolledBack || outcome["qa"] != OutcomeRolledBack || outcome["staging"] != OutcomeFailed || res.Value.Failed != 1 || !res.Written {
		t.Errorf("outcomes %v (failed %d, written %v)", outcome, res.Value.Failed, res.Written)
	}
	for _, w := range []string{"rollback --all: 1 of the started groups failed", "Rolled back: dev, qa.", "NOT rolled back: staging",
		"fleetctl rollback --all --reason \"…\" again"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	if !slices.ContainsFunc(res.Changes, func(l string) bool {
		return strings.Contains(l, `group "staging": FAILED: its stored status is not valid`) && strings.Contains(l, "fleetctl reset --group staging")
	}) {
		t.Errorf("changes do not say why staging failed: %q", res.Changes)
	}
	after := e.revisions(all...)
	if after["staging"] != before["staging"] || after["dev"] == before["dev"] || after["qa"] == before["qa"] {
		t.Errorf("revisions %v → %v: want dev and qa moved, staging not", before, after)
	}
}

// TestRollbackAllConflictMidway: another writer changes a group's status
// between rollback --all's read and its compare-and-swap write (a real
// conflict on the bus): that group is not rolled back (the other edit is
// kept), the groups before and after it are, and the error names both.
func TestRollbackAllConflictMidway(t *testing.T) {
	e, _ := rollbackAllEnv(t)
	g, out, _ := e.global()
	g.Reason = "INC-53"
	writes := 0
	theirs := named("staging", rollout.StateDone)
	theirs.Reason = "someone else's write"
	g.beforeWrite = func() {
		writes++
		if writes == 2 { // staging, the second group rolled back
			e.putStatus(theirs)
		}
	}
	err := RunRollback(testCtx(), &GroupActionOptions{Global: g, All: true})
	if err == nil || cliutil.ExitCode(err) != cliutil.ExitFailure {
		t.Fatalf("err %v (exit %d), want a failure", err, cliutil.ExitCode(err))
	}
	mustContain(t, err, "Rolled back: dev, qa.", "NOT rolled back: staging")
	if !strings.Contains(out.String(), `group "staging": FAILED: NOT rolled back: fleet_plan/group.staging changed under you`) {
		t.Errorf("output does not say staging lost a race:\n%s", out.String())
	}
	if st := e.status("staging").Value; st.Reason != "someone else's write" || st.State != rollout.StateDone {
		t.Errorf("the other writer's edit was lost: %s %q", st.State, st.Reason)
	}
	for _, n := range []string{"dev", "qa"} {
		if st := e.status(n).Value; st.State != rollout.StateRolledBack {
			t.Errorf("%s is %s after rollback --all, want rolledback", n, st.State)
		}
	}
}

func TestMarkDoneRolledBackBinary(t *testing.T) {
	bin := fleetctlBin(t) // before the env: its 30 s context is not for the build
	e := newEnv(t)
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("prod")}
	e.putConfig(cfg)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	rb := named("prod", rollout.StateRolledBack)
	rb.Reason, rb.RejectedVersions = "operator rollback: 500s on checkout", []string{"1.4.0"}
	e.putStatus(rb)
	env := []string{"NATS_URL=" + e.srv.URL(), "FLEETCTL_ACTOR=carol"}

	rev := e.status("prod").Revision
	_, stderr, code := runBin(t, bin, env, "mark-done", "--group", "prod", "--reason", "no force")
	for _, w := range []string{"mark-done --group prod refused: the group was rolled back", "500s on checkout",
		"install 1.4.0, the version it was rolled back from", `fleetctl mark-done --group prod --force --reason "…"`, "nothing written"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("refusal lacks %q:\n%s", w, stderr)
		}
	}
	if code != cliutil.ExitFailure {
		t.Errorf("mark-done of rolledback without --force: exit %d, want 1", code)
	}
	_, stderr, code = runBin(t, bin, env, "mark-done", "--group", "prod", "--force")
	if code != cliutil.ExitUsage || !strings.Contains(stderr, "--reason is required with --force") {
		t.Errorf("--force without --reason: exit %d: %s", code, stderr)
	}
	if got := e.status("prod").Revision; got != rev {
		t.Fatalf("refused but written: revision %d → %d", rev, got)
	}

	reason := "INC-60: the 500s were the load balancer, not 1.4.0"
	stdout, stderr, code := runBin(t, bin, env, "mark-done", "--group", "prod", "--force", "--reason", reason)
	if code != 0 {
		t.Fatalf("forced mark-done: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "FORCED past the group was rolled back") || !strings.Contains(stdout, "rolledback → done") {
		t.Errorf("forced mark-done output:\n%s", stdout)
	}
	st := e.status("prod").Value
	if st.State != rollout.StateDone || st.Progress != 1 || len(st.RejectedVersions) != 0 || !strings.Contains(st.Reason, "forced past a rollback") || !strings.Contains(st.Reason, reason) {
		t.Errorf("prod after the forced mark-done: %s progress %v rejected %v %q", st.State, st.Progress, st.RejectedVersions, st.Reason)
	}
	rep := historyOf(t, bin, env, "--group", "prod")
	if a := auditsOf(rep, "mark-done --force"); len(a) != 1 || a[0].Reason != reason || a[0].Actor != "carol" {
		t.Errorf("audit records of mark-done --force: %+v", a)
	}
	stdout, _, _ = runBin(t, bin, env, "history", "--group", "prod")
	if !strings.Contains(stdout, "mark-done --force") || !strings.Contains(stdout, "state rolledback → done") {
		t.Errorf("history lacks the forced mark-done:\n%s", stdout)
	}
	// Done now: mark-done again is refused by the group's state.
	_, stderr, code = runBin(t, bin, env, "mark-done", "--group", "prod", "--force", "--reason", "again")
	if code != cliutil.ExitFailure || !strings.Contains(stderr, "it is done") {
		t.Errorf("mark-done of done: exit %d: %s", code, stderr)
	}
}

// TestRollbackAllFollowedCopy: a group not in the config whose status is
// the controller's copy of the catch-all's (follows) is skipped with the
// truth: its hosts go where the catch-all goes (rolling the copy back by
// hand would be overwritten at the controller's next pass).
func TestRollbackAllFollowedCopy(t *testing.T) {
	e, _ := rollbackAllEnv(t)
	copyOf := named("edge", rollout.StateDone)
	copyOf.Group, copyOf.Follows = "branch-7", "edge"
	e.putStatus(copyOf)
	g, out, _ := e.global()
	g.Reason = "INC-54"
	if err := RunRollback(testCtx(), &GroupActionOptions{Global: g, All: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `group "branch-7": skipped (done): not in the config: its hosts follow catch-all group edge and go where it goes`) {
		t.Errorf("output:\n%s", out.String())
	}
	if st := e.status("branch-7").Value; st.State != rollout.StateDone {
		t.Errorf("the copy was written: %s", st.State)
	}
}
