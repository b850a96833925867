package install_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// linkFakeVersion creates versions/<v>/bin with the given executables (shell
// scripts with body) and a marker.
func linkFakeVersion(t *testing.T, tr install.Tree, v string, bins map[string]string) {
	t.Helper()
	dir := filepath.Join(tr.VersionDir(v), "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range bins {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(tr.MarkerPath(v), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// linkSnapshot maps every entry of dir to its link target (or "file").
func linkSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			target = "file"
		}
		out[e.Name()] = target
	}
	return out
}

func TestLinkSwapAndRestoreExactly(t *testing.T) {
	root := t.TempDir()
	tr := install.Tree{Root: root, BinDir: filepath.Join(root, "bin")}
	linkFakeVersion(t, tr, "1.0.0", map[string]string{"app": "echo 1", "tool": "echo tool"})
	linkFakeVersion(t, tr, "2.0.0", map[string]string{"app": "echo 2", "newtool": "echo new"})
	// Something of the operator's in the bin dir: never touched.
	if err := os.MkdirAll(tr.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/env", filepath.Join(tr.BinDir, "theirs")); err != nil {
		t.Fatal(err)
	}

	if _, err := tr.Link("1.0.0"); err != nil {
		t.Fatal(err)
	}
	if v, err := tr.LinkedVersion(); err != nil || v != "1.0.0" {
		t.Fatalf("LinkedVersion = %q, %v; want 1.0.0", v, err)
	}
	before := linkSnapshot(t, tr.BinDir)

	prev, err := tr.Link("2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"app":     filepath.Join(tr.VersionDir("2.0.0"), "bin", "app"),
		"newtool": filepath.Join(tr.VersionDir("2.0.0"), "bin", "newtool"),
		"theirs":  "/usr/bin/env",
	}
	if diff := cmp.Diff(want, linkSnapshot(t, tr.BinDir)); diff != "" {
		t.Errorf("bin dir after linking 2.0.0 (-want +got):\n%s", diff)
	}
	out, err := runBin(t, filepath.Join(tr.BinDir, "app"))
	if err != nil || out != "2" {
		t.Errorf("running the linked app: %q, %v; want 2", out, err)
	}

	if err := tr.RestoreLinks(prev); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, linkSnapshot(t, tr.BinDir)); diff != "" {
		t.Errorf("bin dir after restore (-before +after):\n%s", diff)
	}
}

func TestLinkNeverClobbersAFile(t *testing.T) {
	root := t.TempDir()
	tr := install.Tree{Root: root, BinDir: filepath.Join(root, "bin")}
	linkFakeVersion(t, tr, "1.0.0", map[string]string{"app": "echo 1", "zz": "echo z"})
	if err := os.MkdirAll(tr.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tr.BinDir, "zz"), []byte("operator's own"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := linkSnapshot(t, tr.BinDir)
	if _, err := tr.Link("1.0.0"); err == nil || !strings.Contains(err.Error(), "not a symlink") {
		t.Fatalf("Link over a regular file: %v, want a refusal", err)
	}
	if diff := cmp.Diff(before, linkSnapshot(t, tr.BinDir)); diff != "" {
		t.Errorf("bin dir changed by a refused link (-before +after):\n%s", diff)
	}
	if _, err := tr.Link("../../etc"); err == nil {
		t.Error("Link accepted a version that is a path")
	}
}

// TestLinkRefusesARelativeTree: links into a relative root would be
// relative to the bin dir and dangle.
func TestLinkRefusesARelativeTree(t *testing.T) {
	t.Chdir(t.TempDir())
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	abs := install.Tree{Root: filepath.Join(wd, "root"), BinDir: filepath.Join(wd, "bin")}
	linkFakeVersion(t, abs, "1.0.0", map[string]string{"app": "echo 1"})
	cases := []struct {
		name string
		tree install.Tree
		want string
	}{
		{name: "relative root", tree: install.Tree{Root: "root", BinDir: abs.BinDir}, want: `root "root" is not an absolute path`},
		{name: "relative bin dir", tree: install.Tree{Root: abs.Root, BinDir: "bin"}, want: `bin dir "bin" is not an absolute path`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { os.RemoveAll(abs.BinDir) })
			if _, err := tc.tree.Link("1.0.0"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Link: %v; want an error saying %q", err, tc.want)
			}
			if _, err := os.Lstat(abs.BinDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused Link made the bin dir: %v; it holds %v", err, linkSnapshot(t, abs.BinDir))
			}
			if _, err := tc.tree.Unlink(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Unlink: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

func runBin(t *testing.T, path string) (string, error) {
	t.Helper()
	out, err := exec.Command(path).Output()
	return strings.TrimSpace(string(out)), err
}

func TestLockIsExclusiveAndNamesItsHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	l1, err := install.AcquireLock(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = install.AcquireLock(path)
	if !errors.Is(err, install.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second lock: %v; want ErrLocked naming pid %d", err, os.Getpid())
	}
	if err := l1.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := install.AcquireLock(path)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Release()
}

func healthApp(t *testing.T, body string) *install.ProcessRunner {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &install.ProcessRunner{Path: path, StopTimeout: 2 * time.Second}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	if err := r.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestWaitHealthy(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	const timeout, minHealthy, interval = 2 * time.Second, 300 * time.Millisecond, 20 * time.Millisecond
	cases := []struct {
		name       string
		app        string
		health     install.Health
		status     int32
		minHealthy time.Duration
		wantErr    string
	}{
		{name: "stays up", app: "exec sleep 60"},
		// Exits at once; a long minHealthy means only an app that stays up
		// 5s could pass, so a slow machine cannot make this flaky.
		{name: "exits", app: "exit 3", minHealthy: 5 * time.Second, wantErr: "exit status 3"},
		{name: "health URL ok", app: "exec sleep 60", health: install.Health{URL: srv.URL}, status: 200},
		{name: "health URL 503", app: "exec sleep 60", health: install.Health{URL: srv.URL}, status: 503, wantErr: "503"},
		{name: "health command ok", app: "exec sleep 60", health: install.Health{Command: []string{"true"}}},
		{name: "health command fails", app: "exec sleep 60", health: install.Health{Command: []string{"sh", "-c", "echo broken; exit 1"}}, wantErr: "broken"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status.Store(tc.status)
			r := healthApp(t, tc.app)
			h := tc.health
			h.Interval = interval
			mh := minHealthy
			if tc.minHealthy != 0 {
				mh = tc.minHealthy
			}
			err := install.WaitHealthy(context.Background(), h, r, timeout, mh, install.Clock{})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("WaitHealthy: %v", err)
				}
				return
			}
			if !errors.Is(err, install.ErrUnhealthy) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("WaitHealthy: %v; want ErrUnhealthy mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestProcessRunnerStopKillsTheGroup(t *testing.T) {
	// The app ignores SIGTERM: Stop must still end it (SIGKILL after the
	// timeout), and with it the child it started in the background, which
	// only a signal to the whole process group reaches.
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	r := healthApp(t, fmt.Sprintf("trap '' TERM; sleep 60 & echo $! > '%s.tmp' && mv '%[1]s.tmp' '%[1]s'; wait", pidFile))
	r.StopTimeout = 200 * time.Millisecond
	if err := r.Alive(context.Background()); err != nil {
		t.Fatalf("Alive before stop: %v", err)
	}
	child := waitChildPid(t, pidFile)
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Alive(context.Background()); err == nil {
		t.Fatal("Alive after Stop: nil, want an error")
	}
	// Killed, it is gone once reaped, or a zombie until then.
	deadline := time.Now().Add(10 * time.Second)
	for {
		state, gone := procState(t, child)
		if gone || state == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app's background child (pid %d) survived Stop (state %s): Stop did not signal the process group", child, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitChildPid reads the pid the app writes to path once it has started.
func waitChildPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || pid <= 0 {
				t.Fatalf("%s holds %q, want a pid", path, b)
			}
			return pid
		}
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app did not write %s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procState is the state letter of pid from /proc/<pid>/stat, or gone when
// there is no such process.
func procState(t *testing.T, pid int) (state string, gone bool) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return "", true
	}
	if err != nil {
		t.Fatal(err)
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses.
	var fields []string
	if i := bytes.LastIndexByte(b, ')'); i >= 0 {
		fields = strings.Fields(string(b[i+1:]))
	}
	if len(fields) == 0 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return fields[0], false
}
