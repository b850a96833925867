package install_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// scriptHost is a host whose "package manager" is a shell script: the
// install command records the version asked for in d/installed (and every
// call, with its environment, in d/calls); files in d change what it does:
// fail-V (print ten lines, exit 1), tempfail (exit 75), hang (a child and
// itself sleep). The version command prints d/installed; version 1.2.0 is
// unhealthy.
type scriptHost struct {
	t      *testing.T
	d      string
	in     *install.Installer
	status install.Status
}

const fakePM = `set -eu
d=%q
echo "$FLEETWAVE_ACTION $FLEETWAVE_VERSION prev=$FLEETWAVE_PREVIOUS_VERSION app=$FLEETWAVE_APP path=$PATH" >>"$d/calls"
if [ -e "$d/hang" ]; then echo "waiting for the package lock"; sleep 600 & echo $! >"$d/child"; sleep 600; fi
if [ -e "$d/tempfail" ]; then echo "mirror unreachable"; exit 75; fi
if [ -e "$d/fail-$FLEETWAVE_VERSION" ]; then i=0; while [ $i -lt 14 ]; do echo "line $i"; i=$((i+1)); done; echo "E: package is broken" >&2; exit 1; fi
if [ -e "$d/wrong" ]; then echo 9.9.9 >"$d/installed"; exit 0; fi
echo "$FLEETWAVE_VERSION" >"$d/installed"
`

func newScriptHost(t *testing.T) *scriptHost {
	t.Helper()
	d := t.TempDir()
	root := filepath.Join(d, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	h := &scriptHost{t: t, d: d}
	h.in = &install.Installer{
		Tree: install.Tree{Root: root, BinDir: filepath.Join(d, "bin")},
		Script: &install.Script{App: "db", Install: fmt.Sprintf(fakePM, d),
			Version: fmt.Sprintf(`cat %q 2>/dev/null || true`, filepath.Join(d, "installed")),
			Timeout: 10 * time.Second, PIDFile: install.Tree{Root: root}.ScriptPIDPath()},
		Health: install.Health{Command: []string{install.ShellPath, "-c", fmt.Sprintf(`v=$(cat %q); [ "$v" != 1.2.0 ] || { echo "1.2.0: config invalid"; exit 1; }`, filepath.Join(d, "installed"))},
			Interval: 200 * time.Millisecond},
		Log:  slog.New(slog.DiscardHandler),
		Save: func(st install.Status) error { h.status = st; return nil },
	}
	return h
}

func (h *scriptHost) touch(name string) {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(h.d, name), nil, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *scriptHost) calls() []string {
	b, _ := os.ReadFile(filepath.Join(h.d, "calls"))
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func (h *scriptHost) install(v string) error {
	st, err := h.in.Install(context.Background(), h.status, v, 2*time.Second, 50*time.Millisecond)
	h.status = st
	return err
}

func TestScriptInstallUpgradeAndRollback(t *testing.T) {
	h := newScriptHost(t)
	if err := h.install("1.0.0"); err != nil {
		t.Fatal(err)
	}
	if err := h.install("1.1.0"); err != nil {
		t.Fatal(err)
	}
	if h.status.ActiveVersion != "1.1.0" || h.status.VersionHistory[0] != "1.0.0" {
		t.Fatalf("status %+v", h.status)
	}
	err := h.install("1.2.0")
	if !errors.Is(err, install.ErrUnhealthy) {
		t.Fatalf("install of the unhealthy 1.2.0: %v", err)
	}
	st := h.status
	if st.ActiveVersion != "1.1.0" || !st.Rollback || st.RollbackFrom != "1.2.0" || st.ErrorClass != install.ClassRelease {
		t.Fatalf("after the rollback: %+v", st)
	}
	if !strings.Contains(st.ErrorOutput, "1.2.0: config invalid") {
		t.Fatalf("error_output %q: want the health command's output; %+v", st.ErrorOutput, st)
	}
	want := []string{
		"install 1.0.0 prev= app=db path=" + install.SystemPath,
		"install 1.1.0 prev=1.0.0 app=db path=" + install.SystemPath,
		"install 1.2.0 prev=1.1.0 app=db path=" + install.SystemPath,
		"rollback 1.1.0 prev=1.2.0 app=db path=" + install.SystemPath,
	}
	if got := h.calls(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if j, err := install.LoadJournal(h.in.Tree); err != nil || j != nil {
		t.Fatalf("journal left: %+v %v", j, err)
	}
	// Not retried automatically.
	if err := h.install("1.2.0"); !errors.Is(err, install.ErrSkipped) {
		t.Fatalf("retry of a rolled back version: %v", err)
	}
}

func TestScriptFailureKeepsTheCommandsLastLines(t *testing.T) {
	h := newScriptHost(t)
	if err := h.install("1.0.0"); err != nil {
		t.Fatal(err)
	}
	h.touch("fail-1.1.0")
	err := h.install("1.1.0")
	if !errors.Is(err, install.ErrScriptFailed) {
		t.Fatalf("got %v, want ErrScriptFailed", err)
	}
	st := h.status
	if st.ActiveVersion != "1.0.0" || !st.Rollback || st.ErrorClass != install.ClassRelease || st.ErrorCause != "install command failed" {
		t.Fatalf("status %+v", st)
	}
	lines := strings.Split(st.ErrorOutput, "\n")
	if len(lines) != install.OutputLines || lines[len(lines)-1] != "E: package is broken" || lines[0] != "line 5" {
		t.Fatalf("error_output %q: want the last %d lines", st.ErrorOutput, install.OutputLines)
	}
	if !strings.Contains(st.Error, "E: package is broken") {
		t.Fatalf("error %q: want the command's last line", st.Error)
	}
}

func TestScriptTimeoutKillsTheGroupAndBlamesNoVersion(t *testing.T) {
	h := newScriptHost(t)
	if err := h.install("1.0.0"); err != nil {
		t.Fatal(err)
	}
	h.in.Script.Timeout = 300 * time.Millisecond
	h.touch("hang")
	err := h.install("1.1.0")
	if !errors.Is(err, install.ErrScriptTimeout) {
		t.Fatalf("got %v, want ErrScriptTimeout", err)
	}
	if st := h.status; st.Rollback || st.ErrorClass != install.ClassInfrastructure || !strings.Contains(st.ErrorOutput, "waiting for the package lock") {
		t.Fatalf("status %+v", st)
	}
	b, err := os.ReadFile(filepath.Join(h.d, "child"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	eventually(t, 5*time.Second, func() error {
		if syscall.Kill(pid, 0) == nil && !zombie(pid) {
			return fmt.Errorf("the command's child %d still runs", pid)
		}
		return nil
	})
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || strings.HasPrefix(s[i+1:], " Z")
}

func TestScriptTempFailIsInfrastructure(t *testing.T) {
	h := newScriptHost(t)
	h.touch("tempfail")
	err := h.install("1.0.0")
	if !errors.Is(err, install.ErrScriptTempFail) || install.ClassOf(err) != install.ClassInfrastructure {
		t.Fatalf("got %v (%s)", err, install.ClassOf(err))
	}
	if h.status.Rollback || h.status.ActiveVersion != "" || h.status.ErrorOutput != "mirror unreachable" {
		t.Fatalf("status %+v", h.status)
	}
}

func TestScriptVersionCommandIsTheTruth(t *testing.T) {
	h := newScriptHost(t)
	if err := h.install("1.0.0"); err != nil {
		t.Fatal(err)
	}
	// Upgraded by hand.
	if err := os.WriteFile(filepath.Join(h.d, "installed"), []byte("1.1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, changed, err := h.in.Refresh(context.Background(), func() install.Status { return h.status })
	if err != nil || !changed || st.ActiveVersion != "1.1.0" || h.status.ActiveVersion != "1.1.0" || st.VersionHistory[0] != "1.0.0" {
		t.Fatalf("refresh: %+v %v %v", st, changed, err)
	}
	// A version command that prints something else is a clear error and
	// changes nothing.
	if err := os.WriteFile(filepath.Join(h.d, "installed"), []byte("1.1.0-1ubuntu\x1b[31m garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, changed, err = h.in.Refresh(context.Background(), func() install.Status { return h.status })
	if !errors.Is(err, install.ErrVersionCommand) || changed || h.status.ActiveVersion != "1.1.0" {
		t.Fatalf("refresh of garbage: %v %v %+v", err, changed, h.status)
	}
	if err := os.WriteFile(filepath.Join(h.d, "installed"), []byte("1.1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// An install command that installs something else than asked.
	h.touch("wrong")
	err = h.install("1.3.0")
	if !errors.Is(err, install.ErrScriptVersion) {
		t.Fatalf("got %v, want ErrScriptVersion", err)
	}
}

func TestScriptCrashDuringTheCommandIsUndone(t *testing.T) {
	h := newScriptHost(t)
	if err := h.install("1.0.0"); err != nil {
		t.Fatal(err)
	}
	// What a kill -9 during the install command of 1.1.0 leaves: the
	// journal at step script, the package half there.
	j := fmt.Sprintf(`{"v":1,"step":"script","target":"1.1.0","from":"1.0.0","installer":"script","started_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`)
	if err := os.WriteFile(h.in.Tree.JournalPath(), []byte(j), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.d, "installed"), []byte("1.1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := h.in.Repair(context.Background(), h.status)
	if err != nil {
		t.Fatal(err)
	}
	if st.ActiveVersion != "1.0.0" || st.Rollback || st.ErrorClass != install.ClassInfrastructure {
		t.Fatalf("after the repair: %+v", st)
	}
	if c := h.calls(); c[len(c)-1] != "rollback 1.0.0 prev=1.1.0 app=db path="+install.SystemPath {
		t.Fatalf("last call %q, want the rollback", c[len(c)-1])
	}
	// The next install runs it again and it completes.
	if err := h.install("1.1.0"); err != nil || h.status.ActiveVersion != "1.1.0" {
		t.Fatalf("install after the repair: %v %+v", err, h.status)
	}
	// A tarball installer refuses the script's journal, naming the fix.
	if err := os.WriteFile(h.in.Tree.JournalPath(), []byte(j), 0o644); err != nil {
		t.Fatal(err)
	}
	tarball := *h.in
	tarball.Script = nil
	if _, err := tarball.Repair(context.Background(), h.status); err == nil || !strings.Contains(err.Error(), "--installer script") {
		t.Fatalf("tarball repair of a script journal: %v", err)
	}
}

type upRunner struct{}

func (upRunner) Restart(context.Context) error { return nil }
func (upRunner) Stop(context.Context) error    { return nil }
func (upRunner) Alive(context.Context) error   { return nil }

// TestHealthReportsTheLastAnsweredFailure: when the last probe before
// health_timeout is cut off (a loaded host, or a check that starts to
// hang), the failure reported is the last one the check gave, with its
// output, not "signal: killed". (On a loaded machine the last probe, left
// with one interval, was cut off and the rollback lost why the version
// failed: TestScriptInstallUpgradeAndRollback under -race.)
func TestHealthReportsTheLastAnsweredFailure(t *testing.T) {
	d := t.TempDir()
	cmd := fmt.Sprintf(`if [ -e %[1]q ]; then exec sleep 600; fi; : >%[1]q; echo "listen_adress: unknown key"; exit 1`, filepath.Join(d, "answered"))
	h := install.Health{Command: []string{install.ShellPath, "-c", cmd}, Interval: 100 * time.Millisecond}
	err := install.WaitHealthy(context.Background(), h, upRunner{}, time.Second, 0, install.Clock{})
	if !errors.Is(err, install.ErrUnhealthy) || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("got %v, want the answered failure", err)
	}
	if !strings.Contains(err.Error(), "listen_adress: unknown key") {
		t.Fatalf("got %v, want the check's output", err)
	}
}
