package agentd_test

// Issue 25, point 11, through the real agentd binary: --hostname is saved
// and heartbeated; a group the rollout config does not name is said by
// enable, run and status; the "not retrying" hint says which command
// takes which flag.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// agentdOut runs the agentd binary to its end: stdout, stderr, exit code.
func agentdOut(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("agentd %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

func statusOf(t *testing.T, bin, root string) agentd.StatusReport {
	t.Helper()
	out, errOut, code := agentdOut(t, bin, "status", "--root", root)
	var rep agentd.StatusReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("agentd status: exit %d\n%s%s", code, out, errOut)
	}
	return rep
}

// TestHostnameSaved: 'agentd enable --hostname web-1' is kept in
// update.yaml, so the daemon started without it heartbeats web-1 and
// 'agentd status' shows it; a name heartbeats could not carry is refused
// with exit 2, writing nothing.
func TestHostnameSaved(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	fleet, err := kv.Ensure(t.Context(), srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if out, errOut, code := agentdOut(t, bin, "enable", "--root", root, "--group", "blue", "--nats", srv.URL(), "--hostname", "web-1"); code != 0 {
		t.Fatalf("agentd enable --hostname web-1: exit %d\n%s%s", code, out, errOut)
	}
	uf, err := install.LoadUpdateFile(root)
	if err != nil {
		t.Fatal(err)
	}
	if uf.Spec.Hostname != "web-1" {
		t.Errorf("update.yaml spec.hostname %q, want web-1", uf.Spec.Hostname)
	}
	if rep := statusOf(t, bin, root); rep.Hostname != "web-1" {
		t.Errorf("agentd status hostname %q, want web-1", rep.Hostname)
	}

	d := startAgentd(t, bin, "run", "--root", root, "--heartbeat-interval", "1s")
	natstest.Eventually(t, 30*time.Second, func() error {
		hbs, err := fleet.LastHeartbeats(t.Context(), "blue")
		if err != nil {
			return err
		}
		if len(hbs) != 1 {
			return fmt.Errorf("%d heartbeats of group blue", len(hbs))
		}
		var hb heartbeat.Heartbeat
		if err := json.Unmarshal(hbs[0].Data, &hb); err != nil {
			return err
		}
		if hb.Hostname != "web-1" {
			return fmt.Errorf("heartbeat hostname %q, want web-1 (saved by enable)", hb.Hostname)
		}
		return nil
	})
	_ = d.cmd.Process.Signal(os.Interrupt)
	if code := d.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("agentd run: exit %d", code)
	}

	// --hostname= clears it: the system's name again.
	if out, errOut, code := agentdOut(t, bin, "enable", "--root", root, "--hostname="); code != 0 {
		t.Fatalf("agentd enable --hostname=: exit %d\n%s%s", code, out, errOut)
	}
	sys, _ := os.Hostname()
	if rep := statusOf(t, bin, root); rep.Hostname != heartbeat.CleanName(sys, heartbeat.MaxHostnameLen) {
		t.Errorf("after --hostname=, agentd status hostname %q, want the system's %q", rep.Hostname, sys)
	}

	for _, bad := range []string{"web\t1", "web\x1b[2J", "   ", strings.Repeat("h", 256)} {
		fresh := filepath.Join(t.TempDir(), "root")
		out, errOut, code := agentdOut(t, bin, "enable", "--root", fresh, "--group", "blue", "--hostname", bad)
		if code != 2 || !strings.Contains(errOut, "--hostname") {
			t.Errorf("agentd enable --hostname %q: exit %d, want 2 naming --hostname\n%s%s", bad, code, out, errOut)
		}
		if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("agentd enable --hostname %q created %s (%v)", bad, fresh, err)
		}
	}
}

// TestUnknownGroup: a host enabled with a group the rollout config does not
// name ("prdo" for "prod") is told so, by a running controller: enable
// warns, run logs it as an error, status shows it, with the config's
// groups and the closest one, from the find endpoint; without find URLs,
// from the plan on the bus (a spec, and no status for the group).
func TestUnknownGroup(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx := t.Context()
	// File storage, as the controller creates the stream and buckets.
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("dev"), rollout.DefaultGroup("prod")}
	// No catch-all group: a host of a group not in the config gets no
	// status at all (with one, "prdo" would follow prod: catchall_test.go).
	cfg.CatchAll = rollout.CatchAllNone
	if _, err := kv.Save(ctx, fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, rollout.DefaultSpec("1.0.0", "1.0.0"), 0); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	o := controller.RunOptions{ID: "c1", StatsInterval: time.Second, HeartbeatInterval: time.Second, AgentExpiry: time.Minute,
		ReconcileInterval: 200 * time.Millisecond, LeaseTTL: 3 * time.Second, Replicas: 1, NATSURL: srv.URL(), HTTPAddr: addr}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- controller.Run(cctx, &o, natstest.Logger(t)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("controller run: %v", err)
		}
	})
	findURL := "http://" + addr + "/v1/find"
	// The controller has written the configured groups' statuses, and its
	// find endpoint knows the config.
	natstest.Eventually(t, 30*time.Second, func() error {
		for _, g := range []string{"dev", "prod"} {
			if _, err := fleet.Plan.Get(ctx, kv.GroupKey(g)); err != nil {
				return fmt.Errorf("no status for %s yet: %v", g, err)
			}
		}
		return nil
	})

	for _, tc := range []struct {
		name string
		find bool
		want []string // in enable's warning, run's log and status's group_error
	}{
		{"find endpoint", true, []string{`group "prdo" is not in the rollout config`, `did you mean "prod"?`, "the config's groups: dev, prod"}},
		{"bus", false, []string{`group "prdo" has no status in the plan although a plan is set: the rollout config does not name it`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			args := []string{"--root", root, "--nats", srv.URL()}
			if tc.find {
				args = append(args, "--find-url", findURL)
			}
			var stdout, stderr string
			natstest.Eventually(t, 30*time.Second, func() error {
				var code int
				stdout, stderr, code = agentdOut(t, bin, append([]string{"enable", "--group", "prdo"}, args...)...)
				if code != 0 {
					t.Fatalf("agentd enable --group prdo: exit %d\n%s%s", code, stdout, stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(stderr, "warning: ") || !strings.Contains(stderr, w) {
						// The find endpoint reads the config every few
						// seconds: the first answers may not know it yet.
						return fmt.Errorf("agentd enable --group prdo says\n%s%s\nwant a warning with %q", stdout, stderr, w)
					}
				}
				return nil
			})
			rep := statusOf(t, bin, root)
			for _, w := range tc.want {
				if !strings.Contains(rep.GroupError, w) {
					t.Errorf("agentd status group_error %q, want %q in it", rep.GroupError, w)
				}
			}
			d := startAgentd(t, bin, "run", "--root", root, "--heartbeat-interval", "1s", "--log-format", "text")
			level := "level=WARN"
			if tc.find {
				level = "level=ERROR"
			}
			natstest.Eventually(t, 30*time.Second, func() error {
				out := d.output()
				for _, w := range append([]string{level}, tc.want...) {
					// The text log quotes the message: its quotes come escaped.
					if !strings.Contains(out, strings.ReplaceAll(w, `"`, `\"`)) {
						return fmt.Errorf("agentd run has not said %q:\n%s", w, out)
					}
				}
				return nil
			})
			_ = d.cmd.Process.Signal(os.Interrupt)
			d.wait(t, 30*time.Second)

			// The right group: nothing to say.
			if stdout, stderr, code := agentdOut(t, bin, append([]string{"enable", "--group", "prod"}, args...)...); code != 0 || strings.Contains(stderr, "warning") {
				t.Errorf("agentd enable --group prod: exit %d\n%s%s", code, stdout, stderr)
			}
			if rep := statusOf(t, bin, root); rep.GroupError != "" {
				t.Errorf("agentd status of group prod: group_error %q", rep.GroupError)
			}
		})
	}
}

// TestNotRetryingHint: agentd update on a host that rolled back from the
// target says which command takes which flag: fleetctl retry (an
// operator's, with --group and --agent) or agentd update --force (on the
// host); "(fleetctl retry … or --force)" read as a fleetctl flag. Likewise
// for disabled updates.
func TestNotRetryingHint(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx := t.Context()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	common := []string{"--root", root, "--nats", srv.URL(), "--log-level", "error"}
	if out, errOut, code := agentdOut(t, bin, append([]string{"enable", "--group", "blue", "--url-template", "http://127.0.0.1:1/{{.Version}}/app.tar.gz",
		"--bin-dir", filepath.Join(root, "bin"), "--systemd-unit", "app.service", "--systemctl", fakeSystemctl(t)}, common...)...); code != 0 {
		t.Fatalf("agentd enable: exit %d\n%s%s", code, out, errOut)
	}
	uf, err := install.LoadUpdateFile(root)
	if err != nil {
		t.Fatal(err)
	}
	uf.Status = install.Status{ActiveVersion: "1.0.0", StartVersion: "1.0.0", Rollback: true, RollbackFrom: "1.1.0",
		Error: "rolled back from 1.1.0: unhealthy", ErrorClass: install.ClassRelease, ErrorCause: "unhealthy"}
	if err := uf.Save(root); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, rollout.DefaultSpec("1.0.0", "1.1.0"), 0); err != nil {
		t.Fatal(err)
	}
	st := rollout.GroupStatus{V: 1, Group: "blue", State: rollout.StateDone, TargetVersion: "1.1.0", StartVersion: "1.0.0",
		Progress: 1, Mode: rollout.ModeEnabled}
	if _, err := kv.Save(ctx, fleet.Plan, kv.GroupKey("blue"), st, 0); err != nil {
		t.Fatal(err)
	}
	id, err := os.ReadFile(filepath.Join(root, "agent_id"))
	if err != nil {
		t.Fatal(err)
	}

	out, errOut, code := agentdOut(t, bin, append([]string{"update"}, common...)...)
	want := "not retrying 1.1.0: this host rolled back from it; to try it once more, an operator runs 'fleetctl retry --group blue --agent " +
		strings.TrimSpace(string(id)) + "', or, on this host, 'agentd update --force'"
	if code != 0 || !strings.Contains(out, want) || strings.Contains(out, "or --force)") {
		t.Errorf("agentd update: exit %d\n%s%s\nwant %q", code, out, errOut, want)
	}

	if out, errOut, code := agentdOut(t, bin, "disable", "--root", root); code != 0 {
		t.Fatalf("agentd disable: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = agentdOut(t, bin, append([]string{"update"}, common...)...)
	want = "update to 1.1.0 due, but updates are disabled on this host: 'agentd enable' turns them on, or 'agentd update --force' installs it once"
	if code != 0 || !strings.Contains(out, want) {
		t.Errorf("agentd update with updates disabled: exit %d\n%s%s\nwant %q", code, out, errOut, want)
	}
}
