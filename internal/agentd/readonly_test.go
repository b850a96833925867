package agentd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/releases"
)

// execAgentd runs the agentd binary with a clean NATS environment and
// returns its stdout, stderr and exit code.
func execAgentd(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "NATS_URL=", "NATS_CREDS=", "NATS_CA=", "NATS_CERT=", "NATS_KEY=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("agentd %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// snapshot describes every file and directory under dir: path, mode, size,
// modification time, inode and, for files, content.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(&b, "%s %v %d %s ino=%d\n", path, fi.Mode(), fi.Size(), fi.ModTime().Format(time.RFC3339Nano), ino)
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%q\n", data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// closedPort is a local NATS URL nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "nats://" + addr
}

// TestReadOnlyCommandsCreateNothing: status, --help and usage errors never
// create or change a file (status used to create the root, agent_id and
// update.yaml).
func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	bin := buildAgentd(t)
	parent := t.TempDir()
	missing := filepath.Join(parent, "nonexistent")
	empty := filepath.Join(parent, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, parent)

	stdout, stderr, code := execAgentd(t, bin, "status", "--root", missing)
	if code != cliutil.ExitFailure || !strings.Contains(stderr, missing) || !strings.Contains(stderr, "does not exist") {
		t.Errorf("status on a missing root: exit %d, want 1 and an error naming it\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if after := snapshot(t, parent); after != before {
		t.Errorf("status on a missing root changed the file system:\n--- before\n%s--- after\n%s", before, after)
		before = after
	}

	stdout, stderr, code = execAgentd(t, bin, "status", "--root", empty, "--group", "blue")
	if code != 0 {
		t.Fatalf("status on an empty root: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var rep agentd.StatusReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("status is not JSON: %v\n%s", err, stdout)
	}
	if rep.AgentID != "" || rep.Enabled || rep.Installed != "" || rep.DesiredError == "" {
		t.Errorf("status on an empty root: %+v, want no id, not enabled, nothing installed, and why nothing is desired", rep)
	}
	if after := snapshot(t, parent); after != before {
		t.Errorf("status on an empty root changed the file system:\n--- before\n%s--- after\n%s", before, after)
		before = after
	}

	if _, stderr, code := execAgentd(t, bin, "status", "--root", "/proc/self/status"); code != cliutil.ExitFailure || !strings.Contains(stderr, "not a directory") {
		t.Errorf("status --root on a file: exit %d, want 1 and \"not a directory\"\n%s", code, stderr)
	}

	for _, args := range [][]string{
		{"status", "--help", "--root", missing},
		{"enable", "--help", "--root", missing},
		{"status", "--root", missing, "--log-level", "loud"},
		{"status", "--root", empty, "--group", "Bad.Group"},
		{"enable", "--root", missing, "--group", "blue", "--process", "app", "--systemd-unit", "app.service", "--url-template", "https://dl.example/{{.Version}}.tar.gz"},
		{"enable", "--root", empty, "--group", "blue", "--url-template", "https://dl.example/{{.Version}.tar.gz", "--process", "app"},
		{"enable", "--root", empty, "--group", "blue", "--public-key", filepath.Join(parent, "no-such-key")},
		{"enable", "--root", empty, "--group", "blue", "--nats", closedPort(t), "--url-template", "https://dl.example/{{.Version}}.tar.gz", "--systemd-unit", "app.service"},
		{"disable", "--root", missing},
		{"update", "--root", missing},
	} {
		stdout, stderr, code := execAgentd(t, bin, args...)
		if after := snapshot(t, parent); after != before {
			t.Errorf("agentd %s (exit %d) changed the file system:\n--- before\n%s--- after\n%s\nstdout: %s\nstderr: %s",
				strings.Join(args, " "), code, before, after, stdout, stderr)
			before = after
		}
	}
}

// TestFailedEnableChangesNothing: enable validates every flag, and that the
// bus answers, before it writes update.yaml once; a failure leaves the file
// byte-identical (it used to save the group and url_template before a usage
// error, and enabled: true before failing to reach the bus).
func TestFailedEnableChangesNothing(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	root := t.TempDir()
	orig := "version: v1\nkind: update_config\nspec:\n  group: blue\n  url_template: https://old.example/{{.Version}}.tar.gz\n  enabled: false\n  app:\n    systemd_unit: app.service\n"
	path := filepath.Join(root, install.UpdateFileName)
	if err := os.WriteFile(path, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	id := "0b0e5c5e-58a1-4a39-8d5c-3ff4bd4bb0a1"
	if err := os.WriteFile(filepath.Join(root, install.AgentIDFileName), []byte(id+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "systemctl"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	pubKey := filepath.Join(t.TempDir(), "release.pub")
	if err := os.WriteFile(pubKey, []byte(strings.Repeat("ab", 32)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, root)

	for _, tc := range []struct {
		name string
		code int
		args []string
	}{
		{"--process and --systemd-unit", cliutil.ExitUsage, []string{"--nats", srv.URL(), "--group", "green",
			"--url-template", "https://new.example/{{.Version}}.tar.gz", "--systemd-unit", "app.service", "--process", "app"}},
		{"unreachable bus", cliutil.ExitFailure, []string{"--nats", closedPort(t), "--group", "green",
			"--url-template", "https://new.example/{{.Version}}.tar.gz", "--systemd-unit", "other.service"}},
		{"no bus at all", cliutil.ExitUsage, []string{"--group", "green"}},
		{"bad url template", cliutil.ExitUsage, []string{"--nats", srv.URL(), "--group", "green", "--url-template", "https://new.example/{{.Version"}},
		{"--process not a name in bin/", cliutil.ExitUsage, []string{"--nats", srv.URL(), "--group", "green", "--process", "../escape"}},
		{"--app-name not a name", cliutil.ExitUsage, []string{"--nats", srv.URL(), "--group", "green", "--app-name", "Billing API"}},
		{"--systemctl in the bin dir", cliutil.ExitUsage, []string{"--nats", srv.URL(), "--group", "green", "--systemctl", "/usr/local/bin/systemctl"}},
		{"--systemctl under the root", cliutil.ExitUsage, []string{"--nats", srv.URL(), "--group", "green",
			"--systemctl", filepath.Join(root, "versions", "1.0.0", "bin", "systemctl")}},
		{"--public-key, release file naming no app", cliutil.ExitUsage, []string{"--nats", srv.URL(), "--group", "green",
			"--url-template", "https://new.example/{{.Version}}/app-{{.Version}}.tar.gz", "--public-key", pubKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := execAgentd(t, bin, append([]string{"enable", "--root", root, "--log-level", "error"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			if after := snapshot(t, root); after != before {
				t.Errorf("failed enable changed the root:\n--- before\n%s--- after\n%s", before, after)
				before = after
			}
		})
	}
}

// TestLaterCommandsUseStoredAppSettings: enable saves --app, --bin-dir and
// the health settings in update.yaml, so a bare status, update, disable or
// unlink works (status used to fail: "a url_template is set but nothing
// runs the app").
func TestLaterCommandsUseStoredAppSettings(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx := context.Background()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, rollout.DefaultSpec("1.0.0", "1.1.0"), 0); err != nil {
		t.Fatal(err)
	}
	st := rollout.GroupStatus{V: 1, Group: "blue", State: rollout.StateUnstarted, TargetVersion: "1.1.0", StartVersion: "1.0.0",
		Mode: rollout.ModeEnabled, HealthTimeout: rollout.Duration(10 * time.Second), MinHealthyTime: rollout.Duration(100 * time.Millisecond)}
	if _, err := kv.Save(ctx, fleet.Plan, kv.GroupKey("blue"), st, 0); err != nil {
		t.Fatal(err)
	}
	rel := releaseServer(t, map[string]releases.Behaviour{"1.0.0": releases.Good})
	root := t.TempDir()
	binDir := filepath.Join(root, "bin")

	stdout, stderr, code := execAgentd(t, bin, "enable", "--root", root, "--nats", srv.URL(), "--group", "blue",
		"--url-template", releases.URLTemplate(rel.URL), "--process", "app", "--app-arg", "--port=0", "--bin-dir", binDir,
		"--health-url", "http://127.0.0.1:1/healthz", "--health-command", "true", "--app-name", "web", "--systemctl", "/usr/bin/systemctl",
		"--log-level", "error")
	if code != 0 {
		t.Fatalf("enable: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	uf, err := install.LoadUpdateFile(root)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"process": "app", "args": []any{"--port=0"}, "bin_dir": binDir,
		"health_url": "http://127.0.0.1:1/healthz", "health_command": "true", "name": "web", "systemctl": "/usr/bin/systemctl"}
	if app := storedApp(t, root); !uf.Spec.Enabled || uf.Spec.NATS != srv.URL() || !reflect.DeepEqual(app, want) {
		t.Errorf("update.yaml after enable: %+v, app %v; want enabled, nats %s and app %v", uf.Spec, app, srv.URL(), want)
	}

	stdout, stderr, code = execAgentd(t, bin, "status", "--root", root)
	if code != 0 {
		t.Fatalf("bare status after enable --app: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var rep agentd.StatusReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("status is not JSON: %v\n%s", err, stdout)
	}
	if rep.AgentID == "" || rep.Group != "blue" || !rep.Enabled || rep.Desired != "1.0.0" {
		t.Errorf("status: %+v", rep)
	}

	// update knows agentd supervises the app without being told.
	stdout, stderr, code = execAgentd(t, bin, "update", "--root", root)
	if code != cliutil.ExitUsage || !strings.Contains(stderr, "agentd run") {
		t.Errorf("bare update with a stored --app: exit %d, want 2 (use agentd run)\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// unlink uses the stored bin dir (nothing linked yet).
	stdout, stderr, code = execAgentd(t, bin, "unlink", "--root", root)
	if code != 0 || !strings.Contains(stdout, binDir) {
		t.Errorf("bare unlink: exit %d, want 0 naming %s\nstdout: %s\nstderr: %s", code, binDir, stdout, stderr)
	}

	stdout, stderr, code = execAgentd(t, bin, "disable", "--root", root)
	if code != 0 {
		t.Fatalf("bare disable: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if uf, err = install.LoadUpdateFile(root); err != nil || uf.Spec.Enabled || !reflect.DeepEqual(storedApp(t, root), want) {
		t.Errorf("after disable: %+v (%v), app %v; want disabled with the app settings kept", uf, err, storedApp(t, root))
	}

	// A flag overrides the stored setting: with --systemd-unit, update
	// runs (the unit replaces the supervised app for this invocation).
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "systemctl"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	stdout, stderr, code = execAgentd(t, bin, "update", "--root", root, "--systemd-unit", "app.service", "--health-url=", "--health-command=")
	if code != 0 || !strings.Contains(stdout, "disabled") {
		t.Errorf("update --systemd-unit over a stored --app: exit %d, want 0 (updates disabled)\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if app := storedApp(t, root); !reflect.DeepEqual(app, want) {
		t.Errorf("update's flags were saved: app %v, want the app settings enable saved", app)
	}
}

// storedApp is update.yaml's spec.app as plain YAML values.
func storedApp(t *testing.T, root string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, install.UpdateFileName))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Spec struct {
			App map[string]any `yaml:"app"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Spec.App
}

// TestRunSavesAppSettings: run saves the app settings it is given, as it
// saves --group and --url-template, so that a bare status or update agrees
// with the daemon on how the app runs.
func TestRunSavesAppSettings(t *testing.T) {
	bin := buildAgentd(t)
	root := t.TempDir()
	cmd := exec.Command(bin, "run", "--root", root, "--group", "blue", "--nats", closedPort(t), "--log-level", "error",
		"--url-template", "https://dl.example/{{.Version}}.tar.gz", "--systemd-unit", "app.service", "--bin-dir", filepath.Join(root, "bin"))
	cmd.Env = append(os.Environ(), "NATS_URL=", "NATS_CREDS=")
	var errOut natstest.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	want := map[string]any{"systemd_unit": "app.service", "bin_dir": filepath.Join(root, "bin")}
	natstest.Eventually(t, 30*time.Second, func() error {
		if _, err := os.Stat(filepath.Join(root, install.UpdateFileName)); err != nil {
			return err
		}
		if app := storedApp(t, root); !reflect.DeepEqual(app, want) {
			return fmt.Errorf("spec.app %v, want %v (agentd: %s)", app, want, errOut.String())
		}
		return nil
	})
	stdout, stderr, code := execAgentd(t, bin, "status", "--root", root)
	if code != 0 || !strings.Contains(stdout, `"group": "blue"`) {
		t.Errorf("bare status next to agentd run: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}
