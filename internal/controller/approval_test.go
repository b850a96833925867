package controller_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// buildFleetctl builds the fleetctl binary into a temporary directory.
func buildFleetctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fleetctl")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/fleetwave/fleetwave/cmd/fleetctl").CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/fleetctl: %v\n%s", err, out)
	}
	return bin
}

// fleetctlRun runs the binary against the fixture's bus with a clean
// environment and returns stdout, stderr and the exit code.
func (f *fixture) fleetctlRun(bin string, args ...string) (string, string, int) {
	f.t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"HOME=" + f.t.TempDir(), "PATH=" + os.Getenv("PATH"), "NATS_URL=" + f.srv.URL()}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		f.t.Fatal(err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// waitGroup runs a rollout pass and waits until group's stored status
// satisfies cond; it returns that status and its revision.
func (f *fixture) waitGroup(group string, cond func(rollout.GroupStatus) error) kv.Entry[rollout.GroupStatus] {
	f.t.Helper()
	f.advance(reconcileEvery)
	var e kv.Entry[rollout.GroupStatus]
	natstest.Eventually(f.t, waitLong, func() error {
		var err error
		if e, err = kv.Get[rollout.GroupStatus](f.ctx, f.fleet.Plan, kv.GroupKey(group)); err != nil {
			return err
		}
		return cond(e.Value)
	})
	return e
}

func awaitingStage(stage rollout.ApprovalStage) func(rollout.GroupStatus) error {
	return func(st rollout.GroupStatus) error {
		if st.AwaitingApproval.Stage != stage {
			return fmt.Errorf("state %s, awaiting %q, want awaiting %s", st.State, st.AwaitingApproval.Stage, stage)
		}
		return nil
	}
}

func inState(s rollout.State) func(rollout.GroupStatus) error {
	return func(st rollout.GroupStatus) error {
		if st.State != s {
			return fmt.Errorf("state %s (%s), want %s", st.State, st.Reason, s)
		}
		return nil
	}
}

// TestApprovalGate (issue 16 point 2) with a real controller, agents, the
// dashboard and the fleetctl binary: a group whose config asks for an
// approval before it starts and after its canaries waits, visibly (status
// table and JSON, dashboard JSON with the pending count, the
// fleetwave_group_awaiting_approval metric, an approval_needed event), until
// "fleetctl --actor alice approve" moves it; the transition and the audit
// trail ("fleetctl history") name the approver; approve on a group that is
// not waiting, or at another stage, is a usage error that writes nothing;
// an unknown group is named with the closest one.
func TestApprovalGate(t *testing.T) {
	bin := buildFleetctl(t)
	f := newFixture(t)
	events := f.subscribeEvents()
	cfg := rollout.DefaultConfig()
	prod := rollout.DefaultGroup("prod")
	prod.CanaryCount, prod.MaxInFlight, prod.MinHealthyTime = 1, 50, 0
	prod.Approval = rollout.ApprovalGates{rollout.ApprovalStart, rollout.ApprovalAfterCanary}
	cfg.Groups = []rollout.GroupConfig{prod}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	rc := f.startController("c1")
	dash := f.startDashboard(rc)
	srv := dash.serve()
	for range 3 {
		f.startAgent("prod", "1.0.0", false)
	}
	f.waitHeard(rc.c, time.Time{})
	f.step(interval) // every agent established
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true // the test's clock may be outside the start windows
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}

	// 1. The group waits before it starts, and says so everywhere.
	waiting := f.waitGroup("prod", awaitingStage(rollout.ApprovalStart))
	if waiting.Value.State != rollout.StateUnstarted || waiting.Value.Halted {
		t.Fatalf("awaiting approval: state %s halted %v, want unstarted, not halted", waiting.Value.State, waiting.Value.Halted)
	}
	rep := f.statusAtNow()
	r := rep.Groups[0].Rollout
	if r.AwaitingApproval == nil || r.AwaitingApproval.Stage != rollout.ApprovalStart || r.AwaitingApproval.Approved != nil {
		t.Fatalf("fleetctl status -o json: awaiting_approval %+v, want stage start, not approved", r.AwaitingApproval)
	}
	table, stderr, code := f.fleetctlRun(bin, "status")
	if code != 0 || !strings.Contains(table, "unstarted (awaiting approval)") ||
		!strings.Contains(table, "prod: awaiting approval to start (waiting") || !strings.Contains(table, "fleetctl approve --group prod --reason TEXT") {
		t.Errorf("fleetctl status (exit %d) does not show the wait:\n%s%s", code, table, stderr)
	}
	natstest.Eventually(t, waitLong, func() error {
		var ov controller.Overview
		getJSON(t, srv.URL+controller.PathAPIStatus, http.StatusOK, &ov)
		if len(ov.PendingApprovals) != 1 || ov.PendingApprovals[0].Group != "prod" || ov.PendingApprovals[0].Stage != rollout.ApprovalStart {
			return fmt.Errorf("dashboard pending approvals %+v, want prod at start", ov.PendingApprovals)
		}
		if len(ov.Rows) != 1 || ov.Rows[0].AwaitingApproval != rollout.ApprovalStart || ov.Rows[0].State != "unstarted (awaiting approval)" ||
			!strings.Contains(strings.Join(ov.Rows[0].Notes, "\n"), "awaiting approval to start") {
			return fmt.Errorf("dashboard row %+v, want prod awaiting approval to start", ov.Rows)
		}
		return nil
	})
	if page := rawGet(t, srv.URL+"/"); !strings.Contains(page, `id="approvals"`) {
		t.Errorf("the page has no place for the pending approvals:\n%s", page)
	}
	if js := rawGet(t, srv.URL+"/ui/app.js"); !strings.Contains(js, "pending_approvals") || !strings.Contains(js, "approvals pending") {
		t.Error("the page's script does not show the pending approvals")
	}
	samples, err := scrape(t, srv.URL+controller.PathMetrics)
	if err != nil {
		t.Fatal(err)
	}
	if err := metricsMatchStatus(samples, rep); err != nil {
		t.Error(err)
	}
	if got := samples[`fleetwave_group_awaiting_approval{app="default",group="prod",stage="start"}`]; got != 1 {
		t.Errorf("fleetwave_group_awaiting_approval{stage=start} = %v, want 1", got)
	}

	// 2. Approving another stage than the awaited one writes nothing.
	_, stderr, code = f.fleetctlRun(bin, "--actor", "mallory", "approve", "--group", "prod", "--stage", "after_canary", "--reason", "too early")
	if code != 1 || !strings.Contains(stderr, "--stage after_canary, but it awaits approval to start (stage start)") || !strings.Contains(stderr, "nothing written") {
		t.Errorf("approve at the wrong stage: exit %d, stderr %q; want 1 (the fleet's state, not usage) naming the awaited stage", code, stderr)
	}
	// Without a reason, neither.
	_, stderr, code = f.fleetctlRun(bin, "approve", "--group", "prod")
	if code != 2 || !strings.Contains(stderr, "--reason is required") {
		t.Errorf("approve without --reason: exit %d, stderr %q; want 2", code, stderr)
	}
	// A typo is named with the closest group, as every group command does.
	_, stderr, code = f.fleetctlRun(bin, "approve", "--group", "prdo", "--reason", "x")
	if code != 2 || !strings.Contains(stderr, `--group "prdo": no such group in the config`) || !strings.Contains(stderr, "did you mean --group prod?") {
		t.Errorf("approve of an unknown group: exit %d, stderr %q; want 2 naming prod", code, stderr)
	}
	if e := f.groupEntry("prod"); e.Revision != waiting.Revision {
		t.Fatalf("a refused approve wrote the status: revision %d, was %d", e.Revision, waiting.Revision)
	}

	// 3. alice approves; the controller starts the group, naming her.
	out, stderr, code := f.fleetctlRun(bin, "--actor", "alice", "approve", "--group", "prod", "--reason", "CHG-1234 signed off")
	if code != 0 || !strings.Contains(out, "approval to start given by alice") {
		t.Fatalf("approve: exit %d\n%s%s", code, out, stderr)
	}
	started := f.waitGroup("prod", inState(rollout.StateCanary))
	if !strings.Contains(started.Value.Reason, "approved by alice: CHG-1234 signed off") || started.Value.AwaitingApproval.Stage != "" {
		t.Errorf("started: reason %q, awaiting %+v; want the approver named and no wait", started.Value.Reason, started.Value.AwaitingApproval)
	}

	// 4. approve on a group that is not waiting: a clear error, nothing written.
	_, stderr, code = f.fleetctlRun(bin, "--actor", "alice", "approve", "--group", "prod", "--reason", "again")
	if code != 1 || !strings.Contains(stderr, `approve group "prod": it is not awaiting approval (it is canary`) || !strings.Contains(stderr, "nothing written") {
		t.Errorf("approve of a group not waiting: exit %d, stderr %q; want 1 saying it is not awaiting approval", code, stderr)
	}
	if e := f.groupEntry("prod"); e.Revision != started.Revision {
		t.Errorf("a refused approve wrote the status: revision %d, was %d", e.Revision, started.Revision)
	}

	// 5. The canary updates and is healthy: the group waits again, in canary.
	state, err := f.fleet.ReadState(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.obey(state) != 1 {
		t.Fatal("want the one canary told to update")
	}
	f.waitVersions(rc)
	f.waitGroup("prod", awaitingStage(rollout.ApprovalAfterCanary))
	f.advance(reconcileEvery) // one more pass: still waiting, never active by itself
	if st := f.groupEntry("prod").Value; st.State != rollout.StateCanary || st.Halted {
		t.Fatalf("awaiting approval after the canaries: state %s halted %v, want canary", st.State, st.Halted)
	}
	out, stderr, code = f.fleetctlRun(bin, "--actor", "bob", "approve", "--group", "prod", "--stage", "after_canary", "--reason", "canary dashboards clean", "-o", "json")
	var res struct {
		Command string `json:"command"`
		Written bool   `json:"written"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Command != "approve" || !res.Written {
		t.Fatalf("approve -o json: exit %d\n%s%s", code, out, stderr)
	}
	active := f.waitGroup("prod", inState(rollout.StateActive))
	if !strings.Contains(active.Value.Reason, "approved by bob: canary dashboards clean") {
		t.Errorf("active: reason %q, want bob named", active.Value.Reason)
	}

	// 6. The audit trail shows who approved, and the waits.
	hist, stderr, code := f.fleetctlRun(bin, "history", "--group", "prod", "-o", "json")
	if code != 0 {
		t.Fatalf("history: exit %d: %s", code, stderr)
	}
	var h struct {
		Records []struct {
			Kind  string          `json:"kind"`
			Audit *kv.AuditRecord `json:"audit"`
			Event *rollout.Event  `json:"event"`
		} `json:"records"`
	}
	if err := json.Unmarshal([]byte(hist), &h); err != nil {
		t.Fatal(err)
	}
	var approvers, kinds []string
	for _, r := range h.Records {
		if r.Audit != nil && r.Audit.Command == "approve" {
			approvers = append(approvers, r.Audit.Actor+": "+r.Audit.Reason)
		}
		if r.Event != nil && r.Event.Kind == rollout.EventApprovalNeeded {
			kinds = append(kinds, string(r.Event.Kind))
		}
	}
	if want := []string{"alice: CHG-1234 signed off", "bob: canary dashboards clean"}; fmt.Sprint(approvers) != fmt.Sprint(want) {
		t.Errorf("audit trail approvals %v, want %v", approvers, want)
	}
	if len(kinds) != 2 {
		t.Errorf("audit trail holds %d approval_needed events, want 2", len(kinds))
	}
	table, _, _ = f.fleetctlRun(bin, "history", "--group", "prod")
	if !strings.Contains(table, "alice") || !strings.Contains(table, "approve") {
		t.Errorf("fleetctl history does not show alice's approval:\n%s", table)
	}
	if got := events.transitions("prod"); fmt.Sprint(got) != fmt.Sprint([]string{"→unstarted", "unstarted→canary", "canary→active"}) {
		t.Errorf("transitions %v", got)
	}
}

// groupEntry reads group's status and revision.
func (f *fixture) groupEntry(group string) kv.Entry[rollout.GroupStatus] {
	f.t.Helper()
	e, err := kv.Get[rollout.GroupStatus](f.ctx, f.fleet.Plan, kv.GroupKey(group))
	if err != nil {
		f.t.Fatal(err)
	}
	return e
}
