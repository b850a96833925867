// Package apt proves the script installer with a real package manager: it
// builds versions of a small Debian package with dpkg-deb, publishes them
// in a local apt repository (dpkg-scanpackages, a file: source), and lets
// the real agentd binary, as a daemon on a real NATS server, install,
// upgrade and roll them back with apt-get, survive kill -9 in the middle
// of apt-get (dpkg's own journal and agentd's together), and count a host
// upgraded by hand on the version it runs.
//
// The machine's own package state is never touched: apt and dpkg work in a
// throwaway root (apt's Dir, dpkg's --root and --admindir, maintainer
// scripts run chrootless), all of it under the test's temp dir.
package apt_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/aptenv"
)

// versions of the package fwdemo; badVersion's health check fails.
var versions = []string{"1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0"}

const badVersion = "1.2.0"

const group = "apt"

// preinst and postinst of every version: a hook file hooks/kill-<phase>-<version>
// under the throwaway root makes the script kill agentd (its pid in
// hooks/agentd.pid) and then its own process group (the install command,
// apt-get, dpkg and itself) with SIGKILL, once: a kill -9 (or a power cut)
// in the middle of apt-get.
const maintScript = `#!/bin/sh
h="$DPKG_ROOT/hooks/kill-%s-%s"
if [ -e "$h" ]; then
  rm -f "$h"
  : >"$h.fired"
  kill -9 "$(cat "$DPKG_ROOT/hooks/agentd.pid")"
  kill -9 0
fi
exit 0
`

// check is the package's health check: it prints why it fails.
const checkScript = `#!/bin/sh
if [ "%s" = bad ]; then
  echo "fwdemo %s: starting"
  echo "fwdemo %s: /etc/fwdemo.conf: unknown key 'listen_adress'" >&2
  exit 1
fi
echo "fwdemo %s ok"
`

func TestMain(m *testing.M) {
	code := m.Run()
	os.Exit(code)
}

// aptHost is one host whose app fwdemo is installed by apt in a throwaway
// root, by agentd's script installer.
type aptHost struct {
	t      *testing.T
	dir    string       // the test's dir: repo, agentd root
	sys    *aptenv.Root // the throwaway system root apt and dpkg work in
	root   string       // agentd's --root
	agentd string
	nats   *natstest.Server
	fleet  *kv.Fleet
	ctx    context.Context
	run    *exec.Cmd
	runErr chan error
	hbs    chan heartbeat.Heartbeat
}

func newAptHost(t *testing.T) *aptHost {
	t.Helper()
	aptenv.Require(t)
	dir := t.TempDir()
	h := &aptHost{t: t, dir: dir, root: filepath.Join(dir, "agentd"), ctx: t.Context()}
	h.agentd = filepath.Join(dir, "agentd-bin")
	build := exec.Command("go", "build", "-o", h.agentd, "./cmd/agentd")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build agentd: %v\n%s", err, out)
	}
	h.sys = aptenv.NewRoot(t, dir, h.buildRepo())
	if err := os.MkdirAll(h.sys.Path("hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	h.nats = natstest.Start(t)
	var err error
	if h.fleet, err = kv.Ensure(h.ctx, h.nats.JetStream("admin"), kv.Options{Memory: true}); err != nil {
		t.Fatal(err)
	}
	h.hbs = make(chan heartbeat.Heartbeat, 1000)
	nc := h.nats.Conn("watch")
	sub, err := nc.Subscribe("fleet.hb.>", func(m *nats.Msg) {
		var hb heartbeat.Heartbeat
		if json.Unmarshal(m.Data, &hb) == nil {
			select {
			case h.hbs <- hb:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	t.Cleanup(h.stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agentd's log:\n%s", h.log())
		}
	})
	return h
}

func (h *aptHost) must(name string, args ...string) string {
	h.t.Helper()
	return h.sys.Must(name, args...)
}

func (h *aptHost) write(path, content string, mode os.FileMode) {
	h.t.Helper()
	aptenv.WriteFile(h.t, path, content, mode)
}

// buildRepo builds every version with dpkg-deb and indexes them; it
// returns the repository's directory.
func (h *aptHost) buildRepo() string {
	var debs []aptenv.Deb
	for _, v := range versions {
		mode := "good"
		if v == badVersion {
			mode = "bad"
		}
		debs = append(debs, aptenv.Deb{Name: "fwdemo", Version: v,
			Scripts: map[string]string{"preinst": fmt.Sprintf(maintScript, "preinst", v), "postinst": fmt.Sprintf(maintScript, "postinst", v)},
			Files: map[string]string{"opt/fwdemo/version": v + "\n",
				"opt/fwdemo/bin/fwdemo-check": fmt.Sprintf(checkScript, mode, v, v, v)}})
	}
	return aptenv.BuildRepo(h.t, h.dir, debs)
}

func (h *aptHost) args(cmd string) []string {
	return []string{cmd, "--root", h.root, "--nats", h.nats.URL(), "--group", group, "--log-format", "text",
		"--installer", "script", "--install-cmd", h.sys.InstallCmd("fwdemo"), "--version-cmd", h.sys.VersionCmd("fwdemo"), "--script-timeout", "2m",
		"--health-command", h.sys.Path("opt/fwdemo/bin/fwdemo-check")}
}

func (h *aptHost) logPath() string { return filepath.Join(h.dir, "agentd.log") }

func (h *aptHost) log() string {
	b, _ := os.ReadFile(h.logPath())
	return string(b)
}

func (h *aptHost) agentdCmd(failpoint string, args ...string) *exec.Cmd {
	cmd := exec.Command(h.agentd, args...)
	cmd.Env = append(os.Environ(), install.FailpointEnv+"="+failpoint)
	return cmd
}

// enable runs 'agentd enable', which installs the plan's version at once.
func (h *aptHost) enable() {
	h.t.Helper()
	out, err := h.agentdCmd("", h.args("enable")...).CombinedOutput()
	if err != nil {
		h.t.Fatalf("agentd enable: %v\n%s", err, out)
	}
}

// start starts 'agentd run --heartbeat-interval 1s' (and records its pid
// for the kill hooks).
func (h *aptHost) start(failpoint string) {
	h.t.Helper()
	cmd := h.agentdCmd(failpoint, append(h.args("run"), "--heartbeat-interval", "1s")...)
	logf, err := os.OpenFile(h.logPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		h.t.Fatal(err)
	}
	fmt.Fprintf(logf, "=== agentd run (failpoint %q)\n", failpoint)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.write(h.sys.Path("hooks/agentd.pid"), strconv.Itoa(cmd.Process.Pid), 0o644)
	h.run, h.runErr = cmd, make(chan error, 1)
	go func() { h.runErr <- cmd.Wait(); logf.Close() }()
}

// waitKilled waits for the daemon to die of SIGKILL (a hook or failpoint).
func (h *aptHost) waitKilled() {
	h.t.Helper()
	select {
	case err := <-h.runErr:
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			h.t.Fatalf("agentd ended with %v, want SIGKILL\n%s", err, h.log())
		}
	case <-time.After(3 * time.Minute):
		h.t.Fatalf("agentd was not killed\n%s", h.log())
	}
	h.run = nil
}

func (h *aptHost) stop() {
	if h.run == nil {
		return
	}
	_ = h.run.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.runErr:
	case <-time.After(60 * time.Second):
		_ = h.run.Process.Kill()
		<-h.runErr
	}
	h.run = nil
}

// setPlan tells the group to run target now.
func (h *aptHost) setPlan(target string) {
	h.t.Helper()
	h.setPlanMode(target, rollout.ModeEnabled)
}

// setPlanMode sets the plan to target with the group in mode (paused: the
// group runs target, and nobody is moved to it).
func (h *aptHost) setPlanMode(target string, mode rollout.Mode) {
	h.t.Helper()
	spec := rollout.DefaultSpec(target, target)
	var rev uint64
	if e, err := kv.Get[rollout.Spec](h.ctx, h.fleet.Plan, kv.KeySpec); err == nil {
		rev = e.Revision
	}
	if _, err := kv.Save(h.ctx, h.fleet.Plan, kv.KeySpec, spec, rev); err != nil {
		h.t.Fatal(err)
	}
	st := rollout.GroupStatus{V: 1, Group: group, State: rollout.StateDone, TargetVersion: target, StartVersion: target,
		Progress: 1, Mode: mode, HealthTimeout: rollout.Duration(8 * time.Second), MinHealthyTime: rollout.Duration(300 * time.Millisecond)}
	rev = 0
	if e, err := kv.Get[rollout.GroupStatus](h.ctx, h.fleet.Plan, kv.GroupKey(group)); err == nil {
		rev = e.Revision
	}
	if _, err := kv.Save(h.ctx, h.fleet.Plan, kv.GroupKey(group), st, rev); err != nil {
		h.t.Fatal(err)
	}
}

// dpkgState is what dpkg says of fwdemo: "installed 1.1.0", "half-configured 1.3.0"...
func (h *aptHost) dpkgState() string { return h.sys.State("fwdemo") }

func (h *aptHost) status() install.Status {
	h.t.Helper()
	uf, err := install.LoadUpdateFile(h.root)
	if err != nil {
		h.t.Fatal(err)
	}
	return uf.Status
}

// converged waits until the host runs v, consistently: dpkg has it fully
// installed (and nothing half-done: dpkg --audit is clean), its files are
// v's, update.yaml says it with no install journal open, and a heartbeat
// says it too, as installed by the script installer.
func (h *aptHost) converged(v string) {
	h.t.Helper()
	natstest.Eventually(h.t, 90*time.Second, func() error {
		if s := h.dpkgState(); s != "installed "+v {
			return fmt.Errorf("dpkg: %q, want installed %s", s, v)
		}
		if err := h.sys.Audit(); err != nil {
			return err
		}
		if b, _ := os.ReadFile(h.sys.Path("opt/fwdemo/version")); strings.TrimSpace(string(b)) != v {
			return fmt.Errorf("files of %q", b)
		}
		uf, err := install.LoadUpdateFile(h.root)
		if err != nil {
			return err
		}
		if uf.Status.ActiveVersion != v {
			return fmt.Errorf("update.yaml active %q, want %s (%s)", uf.Status.ActiveVersion, v, uf.Status.Error)
		}
		if j, err := install.LoadJournal(install.Tree{Root: h.root}); err != nil || j != nil && j.Step != install.StepUndone {
			return fmt.Errorf("journal open: %+v %v", j, err)
		}
		return h.heartbeated(v)
	})
}

// heartbeated reports whether the latest heartbeat says v, installed by
// the script installer (older heartbeats are dropped).
func (h *aptHost) heartbeated(v string) error {
	var last *heartbeat.Heartbeat
	for {
		select {
		case hb := <-h.hbs:
			last = &hb
			continue
		default:
		}
		break
	}
	if last == nil {
		return fmt.Errorf("no new heartbeat")
	}
	if last.ActiveVersion != v || last.Installer != rollout.InstallerScript {
		return fmt.Errorf("heartbeat says %q by %q", last.ActiveVersion, last.Installer)
	}
	return nil
}

func (h *aptHost) hook(phase, v string) string {
	p := h.sys.Path("hooks/kill-" + phase + "-" + v)
	h.write(p, "", 0o644)
	return p
}

func (h *aptHost) fired(hook string) {
	h.t.Helper()
	if _, err := os.Stat(hook + ".fired"); err != nil {
		h.t.Fatalf("the kill hook %s did not fire\n%s", filepath.Base(hook), h.log())
	}
}

// TestAptScriptInstaller: install, upgrade, a health-failed rollback
// (a downgrade by apt), kill -9 in the middle of apt-get at four points
// (dpkg unpacking the target, configuring it, configuring the version
// rolled back to, and between apt-get's end and agentd's record of it),
// each converging after a restart, and a host upgraded by hand with apt
// counted on its real version.
func TestAptScriptInstaller(t *testing.T) {
	h := newAptHost(t)

	// Install: enable installs the plan's version at once.
	h.setPlan("1.0.0")
	h.enable()
	if s := h.dpkgState(); s != "installed 1.0.0" {
		t.Fatalf("after enable: dpkg says %q", s)
	}
	h.start("")
	h.converged("1.0.0")

	// Upgrade, killed while dpkg unpacks 1.1.0 (preinst: the package is
	// half-installed, dpkg's own journal open): the next start undoes it
	// (the command again, for 1.0.0, which runs dpkg --configure -a
	// first), then installs 1.1.0 again.
	k := h.hook("preinst", "1.1.0")
	h.setPlan("1.1.0")
	h.waitKilled()
	h.fired(k)
	if s := h.dpkgState(); strings.HasPrefix(s, "installed ") {
		t.Fatalf("killed in preinst, dpkg says %q: the kill was not in the middle of apt-get", s)
	}
	h.start("")
	h.converged("1.1.0")

	// A release whose health check fails is rolled back by apt
	// (--allow-downgrades fwdemo=1.1.0); killed while dpkg configures
	// 1.1.0 again in that rollback: the next start finishes the rollback.
	k = h.hook("postinst", "1.1.0")
	h.setPlan(badVersion)
	h.waitKilled()
	h.fired(k)
	h.start("")
	h.converged("1.1.0")
	st := h.status()
	if !st.Rollback || st.RollbackFrom != badVersion || st.ErrorClass != install.ClassRelease {
		t.Fatalf("after the rollback: %+v", st)
	}
	if !strings.Contains(st.ErrorOutput, "unknown key 'listen_adress'") {
		t.Fatalf("error_output %q: want the health check's last lines", st.ErrorOutput)
	}

	// Killed while dpkg configures 1.3.0 (half-configured): undone, then
	// installed again.
	k = h.hook("postinst", "1.3.0")
	h.setPlan("1.3.0")
	h.waitKilled()
	h.fired(k)
	if s := h.dpkgState(); s != "half-configured 1.3.0" {
		t.Fatalf("killed in postinst, dpkg says %q", s)
	}
	h.start("")
	h.converged("1.3.0")

	// Killed after apt-get finished, before agentd read the version
	// (agentd's failpoint): the next start undoes and redoes it.
	h.stop()
	h.setPlan("1.4.0")
	h.start("script/done")
	h.waitKilled()
	if s := h.dpkgState(); s != "installed 1.4.0" {
		t.Fatalf("killed after the command, dpkg says %q", s)
	}
	h.start("")
	h.converged("1.4.0")

	// Upgraded by hand with apt: counted on 1.5.0 within a heartbeat
	// period or two, while the plan still says 1.4.0 (the group paused:
	// otherwise agentd's next decision would move the host back).
	h.setPlanMode("1.4.0", rollout.ModePaused)
	h.must("apt-get", "install", "-y", "-q", "fwdemo=1.5.0")
	h.converged("1.5.0")
	h.stop()

	// And re-read at start: downgraded by hand while agentd was stopped.
	h.must("apt-get", "install", "-y", "-q", "--allow-downgrades", "fwdemo=1.3.0")
	out, err := h.agentdCmd("", "status", "--root", h.root, "--nats", h.nats.URL()).Output()
	if err != nil {
		t.Fatalf("agentd status: %v", err)
	}
	var rep struct {
		Installer string `json:"installer"`
	}
	if err := json.Unmarshal(out, &rep); err != nil || rep.Installer != rollout.InstallerScript {
		t.Fatalf("agentd status: installer %q (%v)\n%s", rep.Installer, err, out)
	}
	h.setPlan("1.3.0")
	h.start("")
	h.converged("1.3.0")

	// No package of the test reached the machine's own dpkg.
	if out, err := exec.Command("dpkg-query", "-W", "fwdemo").CombinedOutput(); err == nil {
		t.Fatalf("fwdemo is in the machine's own dpkg database: %s", out)
	}
}
