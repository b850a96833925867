// Package systemd_test runs deploy/systemd/install.sh against a release
// tarball holding the real agentd, staged under a temporary --destdir.
package systemd_test

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// releaseTarball builds agentd and packs it as a release would:
// fleetwave-<v>/bin/agentd.
func releaseTarball(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "agentd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/fleetwave/fleetwave/cmd/agentd").CombinedOutput(); err != nil {
		t.Fatalf("go build agentd: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "fleetwave-0.1.0-linux.tar.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "fleetwave-0.1.0/bin/agentd", Mode: 0o755, Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	for _, c := range []io.Closer{tw, gz, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func TestInstallScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	tarball := releaseTarball(t)
	creds := filepath.Join(t.TempDir(), "agent.creds")
	if err := os.WriteFile(creds, []byte("-----BEGIN NATS USER JWT-----\nx\n------END NATS USER JWT------\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const id = "1b4e28ba-2fa1-4d2e-883f-0016d3cca427"
	run := func(dest string, extra ...string) (string, error) {
		args := append([]string{"install.sh", "--tarball", tarball, "--nats", "nats://nats-a:4222", "--group", "prod",
			"--creds", creds, "--destdir", dest}, extra...)
		out, err := exec.Command("bash", args...).CombinedOutput()
		return string(out), err
	}

	dest := t.TempDir()
	out, err := run(dest, "--agent-id", id, "--", "--systemd-unit", "app.service", "--health-url", "http://127.0.0.1:8080/healthz")
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	modes := map[string]fs.FileMode{}
	for _, f := range []string{"usr/local/bin/agentd", "etc/fleetwave/agent.creds", "etc/fleetwave/agentd.env",
		"etc/systemd/system/fleetwave-agentd.service", "var/lib/fleetwave/agent_id", "etc/fleetwave", "var/lib/fleetwave"} {
		fi, err := os.Stat(filepath.Join(dest, f))
		if err != nil {
			t.Fatal(err)
		}
		modes[f] = fi.Mode().Perm()
	}
	want := map[string]fs.FileMode{
		"usr/local/bin/agentd": 0o755, "etc/fleetwave/agent.creds": 0o600, "etc/fleetwave/agentd.env": 0o600,
		"etc/systemd/system/fleetwave-agentd.service": 0o644, "var/lib/fleetwave/agent_id": 0o644,
		"etc/fleetwave": 0o750, "var/lib/fleetwave": 0o750,
	}
	if diff := cmp.Diff(want, modes); diff != "" {
		t.Errorf("modes (-want +got):\n%s", diff)
	}
	env, err := os.ReadFile(filepath.Join(dest, "etc/fleetwave/agentd.env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"NATS_CREDS=/etc/fleetwave/agent.creds",
		"AGENTD_ARGS=--systemd-unit app.service --health-url http://127.0.0.1:8080/healthz"} {
		if !strings.Contains(string(env), line+"\n") {
			t.Errorf("agentd.env lacks %q:\n%s", line, env)
		}
	}
	unit, err := os.ReadFile(filepath.Join(dest, "etc/systemd/system/fleetwave-agentd.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"ProtectSystem=strict", "NoNewPrivileges=yes", "StateDirectory=fleetwave",
		"ExecStart=/usr/local/bin/agentd run --root /var/lib/fleetwave $AGENTD_ARGS"} {
		if !strings.Contains(string(unit), "\n"+line+"\n") {
			t.Errorf("unit lacks %q", line)
		}
	}
	// 'agentd enable' ran: update.yaml has the bus and group, and the id
	// the creds were minted for is the agent's.
	root := filepath.Join(dest, "var/lib/fleetwave")
	uf, err := install.LoadUpdateFile(root)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{"nats://nats-a:4222", "prod", true}, []any{uf.Spec.NATS, uf.Spec.Group, uf.Spec.Enabled}); diff != "" {
		t.Errorf("update.yaml spec nats, group, enabled (-want +got):\n%s", diff)
	}
	if got, err := install.LoadOrCreateAgentID(root); err != nil || got != id {
		t.Errorf("agent_id %q (%v), want %s", got, err, id)
	}
	if strings.Contains(out, "BEGIN NATS USER JWT") {
		t.Error("install.sh printed the creds")
	}

	// Refusals.
	for name, extra := range map[string][]string{
		"bad agent id":                {"--agent-id", "NOT-AN-ID"},
		"creds for another id":        {"--agent-id", "2b4e28ba-2fa1-4d2e-883f-0016d3cca427"},
		"flag value with white space": {"--", "--health-command", "curl -f http://x"},
		"unknown install.sh flag":     {"--colour"},
	} {
		t.Run(name, func(t *testing.T) {
			if out, err := run(dest, extra...); err == nil {
				t.Errorf("install.sh accepted it:\n%s", out)
			}
		})
	}
}

// TestStagedHostStatus: after install.sh set a host up with a URL template
// and a supervised app, the closing hint's 'agentd status --root R' works
// with nothing but the root and the creds: enable saved how the app runs
// in update.yaml (status used to fail "a url_template is set but nothing
// runs the app").
func TestStagedHostStatus(t *testing.T) {
	tarball := releaseTarball(t)
	creds := filepath.Join(t.TempDir(), "agent.creds")
	if err := os.WriteFile(creds, []byte("-----BEGIN NATS USER JWT-----\nx\n------END NATS USER JWT------\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	out, err := exec.Command("bash", "install.sh", "--tarball", tarball, "--nats", "nats://127.0.0.1:1", "--group", "prod",
		"--creds", creds, "--destdir", dest, "--url-template", "https://dl.example/app/{{.Version}}/app.tar.gz",
		"--", "--app", "app", "--health-url", "http://127.0.0.1:8080/healthz").CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	root := filepath.Join(dest, "var/lib/fleetwave")
	uf, err := install.LoadUpdateFile(root)
	if err != nil {
		t.Fatal(err)
	}
	if !uf.Spec.Enabled || uf.Spec.URLTemplate == "" {
		t.Errorf("update.yaml after install.sh: %+v, want enabled with the url_template", uf.Spec)
	}
	agentd := filepath.Join(dest, "usr/local/bin/agentd")
	cmd := exec.Command(agentd, "status", "--root", root, "--creds", filepath.Join(dest, "etc/fleetwave/agent.creds"))
	cmd.Env = append(os.Environ(), "NATS_URL=")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("agentd status on the staged host: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	for _, want := range []string{`"enabled": true`, `"group": "prod"`, `"desired_error": "`} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("agentd status lacks %s:\n%s", want, stdout.String())
		}
	}
}
