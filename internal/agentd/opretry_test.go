package agentd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/releases"
)

// retryHost is one agentd of group blue with its own root, which can be
// stopped and started again on that root.
type retryHost struct {
	t      *testing.T
	name   string
	root   string
	url    string
	rel    string
	a      *agentd.Agent
	logs   *natstest.Buffer
	cancel context.CancelFunc
	done   chan error
}

func (h *retryHost) start() {
	h.t.Helper()
	h.logs = &natstest.Buffer{}
	if _, err := os.Stat(filepath.Join(h.root, install.UpdateFileName)); err != nil {
		uf := install.NewUpdateFile("blue")
		uf.Spec.Enabled = true
		if err := uf.Save(h.root); err != nil {
			h.t.Fatal(err)
		}
	}
	a, err := agentd.New(agentd.Options{
		Root: h.root, NATSURL: h.url, Interval: time.Hour,
		Log: slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		App: agentd.AppOptions{URLTemplate: releases.URLTemplate(h.rel), BinDir: filepath.Join(h.root, "bin"), Process: "app"},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.a, h.cancel, h.done = a, cancel, make(chan error, 1)
	go func() { h.done <- a.Run(ctx) }()
}

func (h *retryHost) stop() {
	h.t.Helper()
	h.cancel()
	if err := <-h.done; !errors.Is(err, context.Canceled) {
		h.t.Errorf("%s: agent ended with %v", h.name, err)
	}
	if h.t.Failed() {
		h.t.Logf("%s log:\n%s", h.name, h.logs.String())
	}
}

// starts is how many times the host started release 3.0.0's app.
func (h *retryHost) starts() int {
	data, _ := os.ReadFile(filepath.Join(h.root, "starts-3.0.0"))
	return strings.Count(string(data), "start\n")
}

func (h *retryHost) beat(ctx context.Context, fleet *kv.Fleet) (*heartbeat.Heartbeat, error) {
	m, err := kv.DirectGetLast(ctx, fleet.JS.Conn(), kv.StreamHB, heartbeat.SubjectFor("blue", h.a.ID()))
	if err != nil {
		return nil, err
	}
	return heartbeat.DecodeFrom(m.Subject, m.Data)
}

func (h *retryHost) updateFile() install.Status {
	h.t.Helper()
	f, err := install.LoadUpdateFile(h.root)
	if err != nil {
		h.t.Fatal(err)
	}
	return f.Status
}

// waitRolledBack waits until the host's heartbeat says it rolled back from
// 3.0.0 after starting its app starts times.
func (h *retryHost) waitRolledBack(ctx context.Context, fleet *kv.Fleet, starts int) *heartbeat.Heartbeat {
	h.t.Helper()
	var got *heartbeat.Heartbeat
	natstest.Eventually(h.t, 30*time.Second, func() error {
		hb, err := h.beat(ctx, fleet)
		switch {
		case err != nil:
			return err
		case h.starts() != starts:
			return fmt.Errorf("%s started 3.0.0 %d times, want %d", h.name, h.starts(), starts)
		case !hb.Rollback || hb.RollbackFrom != "3.0.0" || hb.ActiveVersion != "2.0.0" || hb.UpdatingTo != "":
			return fmt.Errorf("%s heartbeat %+v, want rolled back from 3.0.0", h.name, hb)
		}
		got = hb
		return nil
	})
	return got
}

func (h *retryHost) waitOn(ctx context.Context, fleet *kv.Fleet, v string) {
	h.t.Helper()
	natstest.Eventually(h.t, 30*time.Second, func() error {
		hb, err := h.beat(ctx, fleet)
		if err != nil {
			return err
		}
		if hb.ActiveVersion != v || hb.Rollback || hb.Error != "" || hb.UpdatingTo != "" {
			return fmt.Errorf("%s heartbeat %+v, want %s installed", h.name, hb, v)
		}
		return nil
	})
}

// retry runs fleetctl retry --group blue [--agent id] and returns the token
// it wrote.
func retry(t *testing.T, ctx context.Context, url string, fleet *kv.Fleet, note string, agents ...rollout.AgentID) (string, string) {
	t.Helper()
	out, errOut := &natstest.Buffer{}, &natstest.Buffer{}
	g := &fleetctl.Global{NATSURL: url, Timeout: 10 * time.Second, Out: out, ErrOut: errOut, Now: time.Now, Actor: "test"}
	var ids []string
	for _, id := range agents {
		ids = append(ids, string(id))
	}
	if err := fleetctl.RunRetry(ctx, &fleetctl.RetryOptions{
		GroupActionOptions: fleetctl.GroupActionOptions{Global: g, Group: "blue", Note: note}, Agents: ids}); err != nil {
		t.Fatalf("fleetctl retry: %v\n%s%s", err, out, errOut)
	}
	st, err := kv.Get[rollout.GroupStatus](ctx, fleet.Plan, kv.GroupKey("blue"))
	if err != nil {
		t.Fatal(err)
	}
	return st.Value.Retry.Token, out.String()
}

// TestOperatorRetry (issue 15 point 7) with real agentd and real installs:
// two agents roll back from a broken 3.0.0. fleetctl retry --agent B, the
// release still broken: B tries once more, rolls back again and stays put,
// A is not touched, and a restart of B does not retry again. The release
// is fixed and fleetctl retry --agent A: A installs 3.0.0 and ends on it,
// B (not named) stays on 2.0.0. A retry of the whole group: B retries and
// ends on 3.0.0, and A, on the target, records the request as not for it.
func TestOperatorRetry(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	// 3.0.0 fails to start while the flag file exists ("the release is
	// broken"); each start is counted in the host's root.
	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(broken, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rs := releases.NewServer(nil)
	if err := rs.Add("2.0.0", releases.Good); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`#!/bin/sh
echo start >> "$(dirname "$0")/../starts-3.0.0"
if [ -e %q ]; then echo "app 3.0.0: cannot start" >&2; exit 3; fi
exec sleep 1000000
`, broken)
	if err := rs.AddScript("3.0.0", script); err != nil {
		t.Fatal(err)
	}
	rel := releaseServerOf(t, rs)

	hostA := &retryHost{t: t, name: "A", root: t.TempDir(), url: srv.URL(), rel: rel}
	hostB := &retryHost{t: t, name: "B", root: t.TempDir(), url: srv.URL(), rel: rel}
	hostA.start()
	defer func() { hostA.stop() }()
	hostB.start()
	defer func() { hostB.stop() }()

	setPlan(t, ctx, fleet, "1.0.0", "2.0.0")
	hostA.waitOn(ctx, fleet, "2.0.0")
	hostB.waitOn(ctx, fleet, "2.0.0")
	setPlan(t, ctx, fleet, "2.0.0", "3.0.0")
	hostA.waitRolledBack(ctx, fleet, 1)
	firstB := hostB.waitRolledBack(ctx, fleet, 1)

	// 1. Retry B while the release is still broken: once, then it stays.
	tokenB, out := retry(t, ctx, srv.URL(), fleet, "flaky host?", hostB.a.ID())
	if !strings.Contains(out, "1 of the group's 2 agents rolled back from 3.0.0") {
		t.Errorf("fleetctl retry output:\n%s", out)
	}
	againB := hostB.waitRolledBack(ctx, fleet, 2)
	if !againB.StartTime.After(firstB.StartTime) {
		t.Errorf("B's second rollback has start_time %v, not after the first's %v", againB.StartTime, firstB.StartTime)
	}
	if st := hostB.updateFile(); st.RetryToken != tokenB || !st.Rollback || st.RollbackFrom != "3.0.0" {
		t.Errorf("B's update.yaml %+v, want rolled back from 3.0.0 with retry_token %s", st, tokenB)
	}
	if !strings.Contains(hostB.logs.String(), "retrying a version this host rolled back from, once, as an operator asked") {
		t.Errorf("B did not log its retry")
	}
	// B stays put: the plan changes again (a new status revision), B
	// decides on it and does not retry.
	seen := len(hostB.logs.String())
	setPlanKeepingRetry(t, ctx, fleet)
	natstest.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(hostB.logs.String()[seen:], "not retrying a version this host rolled back from") {
			return errors.New("B has not decided to stay on 2.0.0 yet")
		}
		return nil
	})
	// A was not named: it never retried.
	if n := hostA.starts(); n != 1 {
		t.Errorf("A started 3.0.0 %d times, want 1 (it was not named)", n)
	}
	if st := hostA.updateFile(); st.RetryToken != "" || !st.Rollback {
		t.Errorf("A's update.yaml %+v: a request for B changed it", st)
	}

	// 2. A restart of B does not retry again.
	hostB.stop()
	hostB.start()
	natstest.Eventually(t, 20*time.Second, func() error {
		if !strings.Contains(hostB.logs.String(), "not retrying a version this host rolled back from") {
			return errors.New("the restarted B has not decided yet")
		}
		return nil
	})
	if n := hostB.starts(); n != 2 {
		t.Errorf("B started 3.0.0 %d times after its restart, want still 2", n)
	}

	// 3. The release is fixed; retry A alone: A ends on 3.0.0, B stays.
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	tokenA, _ := retry(t, ctx, srv.URL(), fleet, "release fixed", hostA.a.ID())
	if tokenA == tokenB {
		t.Fatalf("two requests share the token %s", tokenA)
	}
	hostA.waitOn(ctx, fleet, "3.0.0")
	if n := hostA.starts(); n != 2 {
		t.Errorf("A started 3.0.0 %d times, want 2", n)
	}
	natstest.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(hostB.logs.String(), "an operator retry request names other hosts") {
			return errors.New("B has not seen the request for A yet")
		}
		return nil
	})
	if hb, err := hostB.beat(ctx, fleet); err != nil || hb.ActiveVersion != "2.0.0" || !hb.Rollback || hostB.starts() != 2 {
		t.Errorf("B after the retry of A: %+v (%v), %d starts; want it on 2.0.0, rolled back, not retried", hb, err, hostB.starts())
	}

	// 4. Retry the whole group: B (rolled back) retries and ends on
	// 3.0.0; A, on the target, records the request as not for it.
	tokenAll, out := retry(t, ctx, srv.URL(), fleet, "")
	if !strings.Contains(out, "1 of the group's 2 agents rolled back from 3.0.0") || !strings.Contains(out, string(hostB.a.ID())) {
		t.Errorf("fleetctl retry output:\n%s", out)
	}
	hostB.waitOn(ctx, fleet, "3.0.0")
	natstest.Eventually(t, 10*time.Second, func() error {
		if got := hostA.updateFile().RetryToken; got != tokenAll {
			return fmt.Errorf("A's retry_token %q, want %s (passed over: A is on the target)", got, tokenAll)
		}
		return nil
	})
	if n := hostA.starts(); n != 2 {
		t.Errorf("A started 3.0.0 %d times, want still 2", n)
	}
}

// releaseServerOf serves rs for the test's life and returns its URL.
func releaseServerOf(t *testing.T, rs *releases.Server) string {
	t.Helper()
	srv := httptest.NewServer(rs)
	t.Cleanup(srv.Close)
	return srv.URL
}

// setPlanKeepingRetry rewrites group blue's status unchanged but for its
// reason: a new revision every agent decides on again.
func setPlanKeepingRetry(t *testing.T, ctx context.Context, fleet *kv.Fleet) {
	t.Helper()
	e, err := kv.Get[rollout.GroupStatus](ctx, fleet.Plan, kv.GroupKey("blue"))
	if err != nil {
		t.Fatal(err)
	}
	st := e.Value
	st.Reason = "touched by the test"
	if _, err := kv.Save(ctx, fleet.Plan, kv.GroupKey("blue"), st, e.Revision); err != nil {
		t.Fatal(err)
	}
}

// TestAgentdUpdateHonoursRetryOnce: the one-shot 'agentd update' honours an
// operator's retry request the same way, once: without a request it does
// not retry a version it rolled back from; with one it retries, and after
// that retry failed it does not retry again for the same request.
func TestAgentdUpdateHonoursRetryOnce(t *testing.T) {
	srv := natstest.Start(t)
	ctx := context.Background()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	if _, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}
	st := rollout.GroupStatus{V: 1, Group: "blue", State: rollout.StateUnstarted, TargetVersion: "1.1.0", StartVersion: "1.0.0",
		Mode: rollout.ModeEnabled, HealthTimeout: rollout.Duration(time.Second), MinHealthyTime: rollout.Duration(100 * time.Millisecond)}
	rev, err := kv.Save(ctx, fleet.Plan, kv.GroupKey("blue"), st, 0)
	if err != nil {
		t.Fatal(err)
	}
	save := func(next rollout.GroupStatus) {
		t.Helper()
		if rev, err = kv.Update(ctx, fleet.Plan, kv.GroupKey("blue"), next, rev); err != nil {
			t.Fatal(err)
		}
		st = next
	}
	rel := releaseServer(t, map[string]releases.Behaviour{"1.0.0": releases.Good, "1.1.0": releases.Good})
	// systemd is a stand-in that does what it is told; the health command
	// fails while the flag file exists (what the app needs is missing).
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "systemctl"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "broken")

	root := t.TempDir()
	out, code := runAgentd(t, "enable", "--nats", srv.URL(), "--group", "blue", "--url-template", releases.URLTemplate(rel.URL),
		"--root", root, "--bin-dir", filepath.Join(root, "bin"), "--systemd-unit", "app.service", "--systemctl", filepath.Join(fake, "systemctl"),
		"--health-command", "test ! -e "+broken, "--log-level", "error")
	if code != 0 || !strings.Contains(out, "installed 1.0.0") {
		t.Fatalf("agentd enable: exit %d:\n%s", code, out)
	}
	update := func() (string, int) { return runAgentd(t, "update", "--root", root, "--log-level", "error") }
	if err := os.WriteFile(broken, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	next := st
	next.State, next.Progress = rollout.StateDone, 1
	save(next)
	if out, code := update(); code != cliutil.ExitFailure || !strings.Contains(out, "new version unhealthy") {
		t.Fatalf("agentd update of a broken 1.1.0: exit %d:\n%s", code, out)
	}
	if out, code := update(); code != 0 || !strings.Contains(out, "not retrying 1.1.0: this host rolled back from it; to try it once more, an operator runs 'fleetctl retry --group blue --agent ") {
		t.Fatalf("agentd update without a retry request: exit %d:\n%s", code, out)
	}

	// A request; the cause is not fixed yet: one retry, rolled back again.
	next, _, err = rollout.Retry(st, nil, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	save(next)
	if out, code := update(); code != cliutil.ExitFailure || !strings.Contains(out, "retrying 1.1.0 once, as an operator asked (fleetctl retry, token "+st.Retry.Token+")") {
		t.Fatalf("agentd update with a retry request: exit %d:\n%s", code, out)
	}
	f, err := install.LoadUpdateFile(root)
	if err != nil {
		t.Fatal(err)
	}
	if s := f.Status; !s.Rollback || s.RollbackFrom != "1.1.0" || s.ActiveVersion != "1.0.0" || s.RetryToken != st.Retry.Token {
		t.Errorf("update.yaml after the failed retry: %+v", s)
	}
	if out, code := update(); code != 0 || !strings.Contains(out, "not retrying 1.1.0") {
		t.Fatalf("agentd update after the request was honoured: exit %d:\n%s", code, out)
	}

	// The cause fixed, a new request: installed.
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	next, _, err = rollout.Retry(st, nil, "fixed", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	save(next)
	if out, code := update(); code != 0 || !strings.Contains(out, "installed 1.1.0") {
		t.Fatalf("agentd update with a second retry request: exit %d:\n%s", code, out)
	}
}
