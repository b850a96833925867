package agentd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/releases"
)

func runAgentd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := agentd.NewCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cliutil.Prepare(cmd)
	err := cmd.ExecuteContext(context.Background())
	if err != nil {
		out.WriteString("error: " + err.Error())
	}
	return out.String() + errOut.String(), cliutil.ExitCode(err)
}

// TestEnableUpdateStatusWithSystemd drives the one-shot commands with the
// app run by systemd. systemd is the outside world here: a stand-in
// systemctl (--systemctl, saved) records what it is asked to do.
func TestEnableUpdateStatusWithSystemd(t *testing.T) {
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
	// The group has not started: a new host still gets the group's version.
	st := rollout.GroupStatus{V: 1, Group: "blue", State: rollout.StateUnstarted, TargetVersion: "1.1.0", StartVersion: "1.0.0",
		Mode: rollout.ModeEnabled, HealthTimeout: rollout.Duration(10 * time.Second), MinHealthyTime: rollout.Duration(100 * time.Millisecond), JitterSeconds: 7}
	stRev, err := kv.Save(ctx, fleet.Plan, kv.GroupKey("blue"), st, 0)
	if err != nil {
		t.Fatal(err)
	}
	rel := releaseServer(t, map[string]releases.Behaviour{"1.0.0": releases.Good, "1.1.0": releases.Good})

	fake := t.TempDir()
	calls := filepath.Join(fake, "calls")
	script := "#!/bin/sh\necho \"$@\" >> " + calls + "\n"
	if err := os.WriteFile(filepath.Join(fake, "systemctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}

	root := t.TempDir()
	common := []string{"--root", root, "--bin-dir", filepath.Join(root, "bin"), "--systemd-unit", "app.service",
		"--systemctl", filepath.Join(fake, "systemctl"), "--log-level", "error"}
	out, code := runAgentd(t, append([]string{"enable", "--nats", srv.URL(), "--group", "blue",
		"--url-template", releases.URLTemplate(rel.URL)}, common...)...)
	if code != 0 || !strings.Contains(out, "installed 1.0.0") {
		t.Fatalf("agentd enable: exit %d:\n%s", code, out)
	}
	// Saved, the unit and the bin dir included: later commands need only --root.
	common = []string{"--root", root, "--log-level", "error"}
	out, code = runAgentd(t, append([]string{"update"}, common...)...)
	// The group has not started: the plan says 1.0.0, which it runs.
	if code != 0 || !strings.Contains(out, "up to date: 1.0.0") {
		t.Fatalf("agentd update before the group started: exit %d:\n%s", code, out)
	}
	st.State, st.Progress = rollout.StateDone, 1
	if _, err := kv.Update(ctx, fleet.Plan, kv.GroupKey("blue"), st, stRev); err != nil {
		t.Fatal(err)
	}
	out, code = runAgentd(t, append([]string{"update"}, common...)...)
	if code != 0 || !strings.Contains(out, "installed 1.1.0") {
		t.Fatalf("agentd update: exit %d:\n%s", code, out)
	}
	got, _ := os.ReadFile(calls)
	if !strings.Contains(string(got), "restart app.service") {
		t.Errorf("systemctl was not asked to restart the unit; calls:\n%s", got)
	}

	out, code = runAgentd(t, append([]string{"status"}, common...)...)
	if code != 0 {
		t.Fatalf("agentd status: exit %d:\n%s", code, out)
	}
	var rep agentd.StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("agentd status is not JSON: %v\n%s", err, out)
	}
	if rep.Installed != "1.1.0" || rep.Desired != "1.1.0" || rep.Previous != "1.0.0" || !rep.Enabled || rep.Group != "blue" || rep.Jitter != 7 {
		t.Errorf("agentd status: %+v", rep)
	}

	// unlink removes only our links; link puts the active version back.
	out, code = runAgentd(t, append([]string{"unlink"}, common...)...)
	if code != 0 || !strings.Contains(out, "removed 1 link") {
		t.Fatalf("agentd unlink: exit %d:\n%s", code, out)
	}
	if _, err := os.Lstat(filepath.Join(root, "bin", "app")); !os.IsNotExist(err) {
		t.Errorf("bin/app still there after unlink: %v", err)
	}
	out, code = runAgentd(t, append([]string{"link"}, common...)...)
	if target, _ := os.Readlink(filepath.Join(root, "bin", "app")); code != 0 || !strings.Contains(target, "1.1.0") {
		t.Fatalf("agentd link: exit %d, bin/app -> %q:\n%s", code, target, out)
	}
	if _, code := runAgentd(t, append([]string{"link", "--version", "9.9.9"}, common...)...); code != cliutil.ExitFailure {
		t.Errorf("link of a version not installed: exit %d, want 1", code)
	}

	if out, code = runAgentd(t, append([]string{"disable"}, common...)...); code != 0 {
		t.Fatalf("agentd disable: exit %d:\n%s", code, out)
	}
	out, _ = runAgentd(t, append([]string{"status"}, common...)...)
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Enabled {
		t.Errorf("after disable: %+v (%v)", rep, err)
	}
	if _, code := runAgentd(t, append([]string{"update", "--process", "app", "--systemd-unit", "app.service"}, common...)...); code != cliutil.ExitUsage {
		t.Errorf("update with both --app and --systemd-unit: exit %d, want %d", code, cliutil.ExitUsage)
	}
	if _, code := runAgentd(t, append([]string{"update", "--process", "app"}, common...)...); code != cliutil.ExitUsage {
		t.Errorf("update with --app over the saved --systemd-unit: exit %d, want %d (use agentd run)", code, cliutil.ExitUsage)
	}
}

// TestRelativeRootAndBinDir: agentd run with a relative --root and
// --bin-dir must make absolute links, which resolve from any working
// directory (relative ones dangled, and the first install was rolled back).
func TestRelativeRootAndBinDir(t *testing.T) {
	t.Chdir(t.TempDir())
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tree := install.Tree{Root: filepath.Join(wd, "state"), BinDir: filepath.Join(wd, "bin")}
	// An installed release of the app.
	if err := os.MkdirAll(filepath.Join(tree.VersionDir("1.0.0"), "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree.VersionDir("1.0.0"), "bin", "app"), []byte("#!/bin/sh\necho 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tree.MarkerPath("1.0.0"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	out, code := runAgentd(t, "link", "--root", "state", "--bin-dir", "bin", "--group", "blue", "--version", "1.0.0", "--log-level", "error")
	if code != 0 {
		t.Fatalf("agentd link: exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "linked 1.0.0 into "+tree.BinDir+"\n") {
		t.Errorf("agentd link says %q, want the absolute bin dir %s", out, tree.BinDir)
	}
	link := filepath.Join(tree.BinDir, "app")
	want := filepath.Join(tree.VersionDir("1.0.0"), "bin", "app")
	if target, err := os.Readlink(link); err != nil || target != want {
		t.Errorf("bin/app -> %q (%v), want %s", target, err, want)
	}
	t.Chdir("/")
	if got, err := exec.Command(link).Output(); err != nil || strings.TrimSpace(string(got)) != "1" {
		t.Errorf("running %s from /: %q, %v", link, got, err)
	}
	if _, err := install.LoadUpdateFile(tree.Root); err != nil {
		t.Errorf("update.yaml is not under the absolute root: %v", err)
	}
}
