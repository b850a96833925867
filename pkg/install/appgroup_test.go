//go:build linux

package install_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// groupApp is an app that starts two background children, one that dies on
// SIGTERM and one that ignores it (as the app itself does), and writes their
// pids to <dir>/<its pid>.children: only SIGKILL to the whole group ends it.
const groupApp = `#!/bin/sh
sleep 1000 &
a=$!
trap '' TERM
sleep 1000 &
echo "$a $!" > "$1/$$.tmp" && mv "$1/$$.tmp" "$1/$$.children"
wait
`

// appChildren waits until the groupApp instance led by leader has written
// its children's pids, and returns them.
func appChildren(t *testing.T, dir string, leader int) []int {
	t.Helper()
	path := filepath.Join(dir, strconv.Itoa(leader)+".children")
	var pids []int
	eventually(t, 10*time.Second, func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pids = nil
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("%s: %q", path, b)
			}
			pids = append(pids, pid)
		}
		return nil
	})
	return pids
}

// eventually polls cond until it holds, failing the test after timeout.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer collects a logger's output for the test to read.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// running reports whether pid is a process that has not exited (a zombie has).
func running(t *testing.T, pid int) bool {
	t.Helper()
	state, gone := procState(t, pid)
	return !gone && state != "Z"
}

// liveLeaders lists the groupApp instances in dir that still run.
func liveLeaders(t *testing.T, dir string) []int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.children"))
	if err != nil {
		t.Fatal(err)
	}
	live := []int{}
	for _, f := range files {
		pid, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(f), ".children"))
		if err != nil {
			t.Fatal(err)
		}
		if running(t, pid) {
			live = append(live, pid)
		}
	}
	slices.Sort(live)
	return live
}

// statField is field n (as proc(5) numbers them) of /proc/<pid>/stat.
func statField(t *testing.T, pid, n int) string {
	t.Helper()
	b := readFile(t, fmt.Sprintf("/proc/%d/stat", pid))
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return fields[n-3]
}

func TestProcessRunnerStopsTheAppAnEarlierAgentdLeft(t *testing.T) {
	for _, how := range []string{"StopOrphan", "Restart"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			app := filepath.Join(dir, "app")
			if err := os.WriteFile(app, []byte(groupApp), 0o755); err != nil {
				t.Fatal(err)
			}
			pidFile := filepath.Join(dir, "app.pid")
			var logs syncBuffer
			runner := func() *install.ProcessRunner {
				r := &install.ProcessRunner{Path: app, Args: []string{dir}, PIDFile: pidFile, StopTimeout: 200 * time.Millisecond,
					Log: slog.New(slog.NewTextHandler(&logs, nil))}
				t.Cleanup(func() { _ = r.Stop(ctx) })
				return r
			}
			earlier := runner()
			if err := earlier.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			old := append([]int{earlier.Pid()}, appChildren(t, dir, earlier.Pid())...)

			// That agentd is killed: its runner is gone, its app runs on.
			// The next agentd has only the record.
			r := runner()
			if how == "StopOrphan" {
				if err := r.StopOrphan(ctx); err != nil {
					t.Fatalf("StopOrphan: %v", err)
				}
				if _, err := os.Stat(pidFile); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the record is still there after StopOrphan (%v)", err)
				}
			}
			if err := r.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			for _, pid := range old {
				if running(t, pid) {
					t.Errorf("pid %d of the app the earlier agentd left (leader and children %v) still runs", pid, old)
				}
			}
			appChildren(t, dir, r.Pid())
			if diff := cmp.Diff([]int{r.Pid()}, liveLeaders(t, dir)); diff != "" {
				t.Errorf("app instances running (-want +got):\n%s", diff)
			}
			if want := fmt.Sprintf("stopped an app left running by an earlier agentd\" path=%s", app); !strings.Contains(logs.String(), want) ||
				!strings.Contains(logs.String(), fmt.Sprintf("pid=%d", old[0])) {
				t.Errorf("log %q does not say %q", logs.String(), want)
			}

			// The record names the new group, and goes once it is gone.
			var rec struct {
				Instance string `json:"instance"`
				PID      int    `json:"pid"`
				PGID     int    `json:"pgid"`
				Start    uint64 `json:"start_time_ticks"`
				Path     string `json:"path"`
			}
			if err := json.Unmarshal(readFile(t, pidFile), &rec); err != nil {
				t.Fatal(err)
			}
			start, _ := strconv.ParseUint(statField(t, r.Pid(), 22), 10, 64)
			if rec.PID != r.Pid() || rec.PGID != r.Pid() || rec.Start != start || rec.Path != app {
				t.Errorf("record %+v, want pid and pgid %d, start time %d, path %s", rec, r.Pid(), start, app)
			}
			env := readFile(t, fmt.Sprintf("/proc/%d/environ", r.Pid()))
			if rec.Instance == "" || !slices.Contains(strings.Split(string(env), "\x00"), "FLEETWAVE_APP_INSTANCE="+rec.Instance) {
				t.Errorf("record's instance %q is not in the app's environment", rec.Instance)
			}
			if err := r.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if got := liveLeaders(t, dir); len(got) != 0 {
				t.Errorf("app instances %v run after Stop", got)
			}
			if _, err := os.Stat(pidFile); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the record is still there after Stop (%v)", err)
			}
		})
	}
}

func TestStopOrphanFindsAnAppWhosePidWasNotRecorded(t *testing.T) {
	// The agentd was killed after it started the app but before it could
	// record the pid: the record holds only the instance the app was
	// started with, in its environment. Another copy of the app, started
	// without it, is not the recorded one.
	dir := t.TempDir()
	app := filepath.Join(dir, "app")
	if err := os.WriteFile(app, []byte(groupApp), 0o755); err != nil {
		t.Fatal(err)
	}
	instance := fmt.Sprintf("TEST%dX%d", os.Getpid(), time.Now().UnixNano())
	start := func(env []string) []int {
		t.Helper()
		cmd := exec.Command(app, dir)
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		})
		return append([]int{cmd.Process.Pid}, appChildren(t, dir, cmd.Process.Pid)...)
	}
	orphan := start(append(os.Environ(), "FLEETWAVE_APP_INSTANCE="+instance))
	other := start(os.Environ())

	pidFile := filepath.Join(dir, "app.pid")
	rec := fmt.Sprintf(`{"instance": %q, "pid": 0, "pgid": 0, "boot_id": %q, "path": %q, "started_at": %q}`, instance,
		strings.TrimSpace(string(readFile(t, "/proc/sys/kernel/random/boot_id"))), app, time.Now().Format(time.RFC3339Nano))
	if err := os.WriteFile(pidFile, []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	r := &install.ProcessRunner{Path: app, Args: []string{dir}, PIDFile: pidFile, StopTimeout: 200 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := r.StopOrphan(context.Background()); err != nil {
		t.Fatalf("StopOrphan: %v", err)
	}
	for _, pid := range orphan {
		if running(t, pid) {
			t.Errorf("pid %d of the app started as %s (leader and children %v) still runs", pid, instance, orphan)
		}
	}
	for _, pid := range other {
		if !running(t, pid) {
			t.Errorf("pid %d of another copy of the app (leader and children %v) was stopped", pid, other)
		}
	}
	if want := fmt.Sprintf("stopped an app left running by an earlier agentd\" path=%s", app); !strings.Contains(logs.String(), want) ||
		!strings.Contains(logs.String(), fmt.Sprintf("pid=%d", orphan[0])) {
		t.Errorf("log %q does not say %q with pid=%d", logs.String(), want, orphan[0])
	}
	if _, err := os.Stat(pidFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the record is still there after StopOrphan (%v)", err)
	}
}

func TestStopOrphanStopsOnlyTheRecordedProcess(t *testing.T) {
	// A live process of the test's stands where the record points: only
	// when it is the recorded process (same start time, group and boot) may
	// it be stopped. A pid given to another process since is never killed.
	cases := []struct {
		name        string
		ownGroup    bool // the process leads its own group, as the app does
		forge       func(rec map[string]any)
		wantStopped bool
	}{
		{name: "the recorded process", ownGroup: true, wantStopped: true},
		{name: "another start time", ownGroup: true, forge: func(rec map[string]any) {
			rec["start_time_ticks"] = rec["start_time_ticks"].(uint64) + 1
		}},
		{name: "not in the recorded group", ownGroup: false},
		{name: "recorded in an earlier boot", ownGroup: true, forge: func(rec map[string]any) {
			rec["boot_id"] = "00000000-0000-0000-0000-000000000000"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "1000")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: tc.ownGroup}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := cmd.Process.Pid
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})
			start, _ := strconv.ParseUint(statField(t, pid, 22), 10, 64)
			sid, _ := strconv.Atoi(statField(t, pid, 6))
			rec := map[string]any{
				"pid":              pid,
				"pgid":             pid,
				"sid":              sid,
				"start_time_ticks": start,
				"boot_id":          strings.TrimSpace(string(readFile(t, "/proc/sys/kernel/random/boot_id"))),
				"path":             "/bin/sleep",
				"started_at":       time.Now(),
			}
			if tc.forge != nil {
				tc.forge(rec)
			}
			data, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			pidFile := filepath.Join(t.TempDir(), "app.pid")
			if err := os.WriteFile(pidFile, data, 0o644); err != nil {
				t.Fatal(err)
			}
			r := &install.ProcessRunner{Path: "/bin/false", PIDFile: pidFile, StopTimeout: 200 * time.Millisecond}
			if err := r.StopOrphan(context.Background()); err != nil {
				t.Fatalf("StopOrphan: %v", err)
			}
			if stopped := !running(t, pid); stopped != tc.wantStopped {
				t.Errorf("pid %d (record %s) stopped: %v, want %v", pid, data, stopped, tc.wantStopped)
			}
			if _, err := os.Stat(pidFile); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the record is still there (%v): it names no running app", err)
			}
		})
	}
}

func TestProcessRunnerStopEndsMembersThatOutliveTheLeader(t *testing.T) {
	// The app exits on SIGTERM at once; its child ignores SIGTERM. Stop must
	// not return while that child runs on in the group (reparented to init,
	// it would never be stopped by anyone).
	dir := t.TempDir()
	r := healthApp(t, fmt.Sprintf("(trap '' TERM; exec sleep 1000) & echo $! > '%s/child.tmp' && mv '%[1]s/child.tmp' '%[1]s/child'; wait", dir))
	r.StopTimeout = 200 * time.Millisecond
	child := waitChildPid(t, filepath.Join(dir, "child"))
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if running(t, child) {
		state, _ := procState(t, child)
		t.Fatalf("the app's child (pid %d, state %s) still runs after Stop returned", child, state)
	}
}
