// Package systemd_test runs deploy/systemd/install.sh against a release
// tarball holding the real agentd, staged under a temporary --destdir.
package systemd_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/install"
)

var dist struct {
	once    sync.Once
	dir     string
	tarball string
	err     error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if dist.dir != "" {
		os.RemoveAll(dist.dir)
	}
	os.Exit(code)
}

// releaseTarball builds the release tarball with scripts/dist.sh, once per
// test binary: the real agentd, controller and fleetctl in
// fleetwave-<v>/bin/, the units and install.sh in fleetwave-<v>/deploy/systemd/.
func releaseTarball(t *testing.T) string {
	t.Helper()
	dist.once.Do(func() {
		if dist.dir, dist.err = os.MkdirTemp("", "fleetwave-dist"); dist.err != nil {
			return
		}
		out, err := exec.Command("bash", "../../scripts/dist.sh", "--version", "0.1.0", "--os", runtime.GOOS,
			"--arch", runtime.GOARCH, "--out", dist.dir).CombinedOutput()
		if err != nil {
			dist.err = fmt.Errorf("scripts/dist.sh: %v\n%s", err, out)
			return
		}
		dist.tarball = strings.TrimSpace(string(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:]))
	})
	if dist.err != nil {
		t.Fatal(dist.err)
	}
	return dist.tarball
}

func TestInstallScript(t *testing.T) {
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
		"ExecStart=/usr/local/bin/agentd run --root /var/lib/fleetwave $AGENTD_ARGS",
		// No bin dir in agentd's PATH: the one its children get.
		"Environment=PATH=" + install.SystemPath} {
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

// TestDistTarball: scripts/dist.sh's tarball holds what install.sh and an
// operator need, its .sha256 matches, and the binaries carry the version.
func TestDistTarball(t *testing.T) {
	tarball := releaseTarball(t)
	if want := "fleetwave-0.1.0-" + runtime.GOOS + "-" + runtime.GOARCH + ".tar.gz"; filepath.Base(tarball) != want {
		t.Errorf("tarball %s, want %s", filepath.Base(tarball), want)
	}
	data, err := os.ReadFile(tarball)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(tarball + ".sha256")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	if want := hex.EncodeToString(h[:]) + "  " + filepath.Base(tarball) + "\n"; string(sum) != want {
		t.Errorf(".sha256 %q, want %q", sum, want)
	}
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]fs.FileMode{}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			modes[hdr.Name] = fs.FileMode(hdr.Mode).Perm()
		}
	}
	want := map[string]fs.FileMode{
		"fleetwave-0.1.0/bin/agentd": 0o755, "fleetwave-0.1.0/bin/controller": 0o755, "fleetwave-0.1.0/bin/fleetctl": 0o755,
		"fleetwave-0.1.0/deploy/systemd/install.sh":                   0o755,
		"fleetwave-0.1.0/deploy/systemd/fleetwave-agentd.service":     0o644,
		"fleetwave-0.1.0/deploy/systemd/fleetwave-controller.service": 0o644,
		// The release repository's timestamp timer (docs/release-repo.md).
		"fleetwave-0.1.0/deploy/systemd/fleetwave-repo-timestamp.service": 0o644,
		"fleetwave-0.1.0/deploy/systemd/fleetwave-repo-timestamp.timer":   0o644,
	}
	if diff := cmp.Diff(want, modes); diff != "" {
		t.Errorf("tarball files (-want +got):\n%s", diff)
	}

	// The version is built in, and dist.sh refuses bad input.
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xzf", tarball, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(dir, "fleetwave-0.1.0/bin/fleetctl"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "0.1.0") {
		t.Errorf("fleetctl --version: %v, %q", err, out)
	}
	for _, args := range [][]string{{"--version", "1 0"}, {"--os"}, {"--colour"}} {
		out := t.TempDir()
		cmd := exec.Command("bash", append([]string{"../../scripts/dist.sh", "--out", out}, args...)...)
		if b, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("dist.sh %v accepted it:\n%s", args, b)
		}
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Errorf("dist.sh %v wrote %v", args, ents)
		}
	}
}

// TestInstallScriptStagedTreeHasNoAgentID: a tree staged with --destdir (a
// package, an image) holds no agent id, so every host installed from it
// draws its own on first start; and the release URL reaches update.yaml
// then, through AGENTD_ARGS. The install.sh used is the one in the tarball.
func TestInstallScriptStagedTreeHasNoAgentID(t *testing.T) {
	tarball := releaseTarball(t)
	unpacked := t.TempDir()
	if out, err := exec.Command("tar", "-xzf", tarball, "-C", unpacked).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	creds := filepath.Join(t.TempDir(), "agent.creds")
	if err := os.WriteFile(creds, []byte("-----BEGIN NATS USER JWT-----\nx\n------END NATS USER JWT------\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const template = "https://dl.example/app/{{.Version}}/app.tar.gz"
	pkg := t.TempDir()
	out, err := exec.Command("bash", filepath.Join(unpacked, "fleetwave-0.1.0/deploy/systemd/install.sh"),
		"--tarball", tarball, "--nats", "nats://nats-a:4222", "--group", "prod", "--creds", creds, "--destdir", pkg,
		"--url-template", template, "--", "--systemd-unit", "app.service").CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	root := "var/lib/fleetwave"
	if _, err := os.Stat(filepath.Join(pkg, root, "agent_id")); !os.IsNotExist(err) {
		t.Errorf("the staged tree has an agent_id (%v): every host installed from it would share it", err)
	}
	var names []string
	ents, err := os.ReadDir(filepath.Join(pkg, root))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"update.yaml"}, names); diff != "" {
		t.Errorf("staged %s (-want +got):\n%s", root, diff)
	}
	uf, err := install.LoadUpdateFile(filepath.Join(pkg, root))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(install.UpdateSpec{NATS: "nats://nats-a:4222", Group: "prod", Enabled: true}, uf.Spec); diff != "" {
		t.Errorf("staged update.yaml spec (-want +got):\n%s", diff)
	}
	env, err := os.ReadFile(filepath.Join(pkg, "etc/fleetwave/agentd.env"))
	if err != nil {
		t.Fatal(err)
	}
	const argsLine = "AGENTD_ARGS=--systemd-unit app.service --url-template=" + template + "\n"
	if !strings.Contains(string(env), argsLine) {
		t.Fatalf("agentd.env lacks %q:\n%s", argsLine, env)
	}
	agentdArgs := strings.Fields(strings.TrimPrefix(argsLine, "AGENTD_ARGS="))

	// Two hosts from the one staged tree: each agentd, started as the unit
	// starts it, draws an id of its own and saves the release URL.
	bus := natstest.Start(t)
	var ids []string
	for i := range 2 {
		host := filepath.Join(t.TempDir(), fmt.Sprint("host", i))
		if out, err := exec.Command("cp", "-a", pkg, host).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v\n%s", err, out)
		}
		state := filepath.Join(host, root)
		// The unit's first start: agentd run, with AGENTD_ARGS. It draws
		// the host's id and saves what AGENTD_ARGS says; then it is stopped.
		args := append([]string{"run", "--root", state, "--nats", bus.URL()}, agentdArgs...)
		run := exec.Command(filepath.Join(host, "usr/local/bin/agentd"), args...)
		var log strings.Builder
		run.Stdout, run.Stderr = &log, &log
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, 30*time.Second, func() error {
			if _, err := install.LoadAgentID(state); err != nil {
				return err
			}
			uf, err := install.LoadUpdateFile(state)
			if err != nil {
				return err
			}
			if uf.Spec.URLTemplate != template {
				return fmt.Errorf("url_template %q not saved yet", uf.Spec.URLTemplate)
			}
			return nil
		})
		_ = run.Process.Signal(syscall.SIGTERM)
		_ = run.Wait()
		out, err := exec.Command(filepath.Join(host, "usr/local/bin/agentd"), "status", "--root", state).Output()
		if err != nil {
			t.Fatalf("agentd status on host %d: %v\nrun's log:\n%s", i, err, log.String())
		}
		var st struct {
			AgentID string `json:"agent_id"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			t.Fatalf("agentd status: %v\n%s", err, out)
		}
		if got, err := install.LoadAgentID(state); err != nil || string(got) != st.AgentID {
			t.Errorf("host %d: agent_id file %q (%v), status says %q", i, got, err, st.AgentID)
		}
		uf, err := install.LoadUpdateFile(state)
		if err != nil {
			t.Fatal(err)
		}
		if uf.Spec.URLTemplate != template || !uf.Spec.Enabled || uf.Spec.NATS != "nats://nats-a:4222" {
			t.Errorf("host %d: update.yaml spec after first start %+v", i, uf.Spec)
		}
		ids = append(ids, st.AgentID)
	}
	if ids[0] == ids[1] || slices.Contains(ids, "") {
		t.Errorf("two hosts installed from one package have ids %q: want two different ids", ids)
	}

	// A group agentd refuses stages nothing.
	empty := t.TempDir()
	out, err = exec.Command("bash", "install.sh", "--tarball", tarball, "--nats", "nats://nats-a:4222", "--group", "Not A Group",
		"--creds", creds, "--destdir", empty).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "invalid group name") {
		t.Errorf("install.sh with a bad group: %v, want a refusal naming it:\n%s", err, out)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("install.sh with a bad group staged %v", ents)
	}
}

// TestStagedHostStatus: on a tree install.sh staged with a URL template and
// a supervised app, the closing hint's 'agentd status --root R' works with
// nothing but the root and the creds, and creates nothing (status used to
// fail "a url_template is set but nothing runs the app", and to draw an id).
func TestStagedHostStatus(t *testing.T) {
	tarball := releaseTarball(t)
	creds := filepath.Join(t.TempDir(), "agent.creds")
	if err := os.WriteFile(creds, []byte("-----BEGIN NATS USER JWT-----\nx\n------END NATS USER JWT------\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	out, err := exec.Command("bash", "install.sh", "--tarball", tarball, "--nats", "nats://127.0.0.1:1", "--group", "prod",
		"--creds", creds, "--destdir", dest, "--url-template", "https://dl.example/app/{{.Version}}/app.tar.gz",
		"--", "--process", "app", "--health-url", "http://127.0.0.1:8080/healthz").CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	root := filepath.Join(dest, "var/lib/fleetwave")
	agentd := filepath.Join(dest, "usr/local/bin/agentd")
	cmd := exec.Command(agentd, "status", "--root", root, "--creds", filepath.Join(dest, "etc/fleetwave/agent.creds"))
	cmd.Env = append(os.Environ(), "NATS_URL=")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("agentd status on the staged host: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	for _, want := range []string{`"enabled": true`, `"group": "prod"`} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("agentd status lacks %s:\n%s", want, stdout.String())
		}
	}
	if _, err := os.Stat(filepath.Join(root, "agent_id")); !os.IsNotExist(err) {
		t.Errorf("agentd status drew an agent id on the staged tree (%v)", err)
	}
}
