package install_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/install"
)

// hangingSystemctl is a systemctl that records its pid and hangs.
func hangingSystemctl(t *testing.T) (path, pidFile string) {
	t.Helper()
	dir := t.TempDir()
	path, pidFile = filepath.Join(dir, "systemctl"), filepath.Join(dir, "pid")
	script := "#!/bin/sh\necho $$ >'" + pidFile + ".tmp'; mv '" + pidFile + ".tmp' '" + pidFile + "'\nexec sleep 600\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, pidFile
}

func waitPid(t *testing.T, pidFile string) int {
	t.Helper()
	var pid int
	natstest.Eventually(t, 10*time.Second, func() error {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	return pid
}

// TestStoppedIsNotTheRelease: a systemctl call that fails because agentd is
// being stopped (its context cancelled, or systemd's SIGTERM to the whole
// control group reaching the child first) is an interruption, an
// infrastructure failure, never the release's; the same death with no stop
// under way stays a failure of the call.
func TestStoppedIsNotTheRelease(t *testing.T) {
	defer install.SetStopGrace(3 * time.Second)()
	cases := []struct {
		name string
		// kill ends the hanging child somehow, given its pid and the
		// context's cancel.
		kill        func(pid int, cancel context.CancelFunc)
		interrupted bool
	}{
		{"context cancelled while the child runs", func(_ int, cancel context.CancelFunc) { cancel() }, true},
		{"child SIGTERMed, then the context", func(pid int, cancel context.CancelFunc) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
			time.AfterFunc(300*time.Millisecond, cancel)
		}, true},
		{"child SIGKILLed, then the context", func(pid int, cancel context.CancelFunc) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			time.AfterFunc(300*time.Millisecond, cancel)
		}, true},
		{"child SIGTERMed, no stop", func(pid int, _ context.CancelFunc) { _ = syscall.Kill(pid, syscall.SIGTERM) }, false},
		{"child crashed (SIGSEGV), then the context", func(pid int, cancel context.CancelFunc) {
			_ = syscall.Kill(pid, syscall.SIGSEGV)
			time.AfterFunc(300*time.Millisecond, cancel)
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, pidFile := hangingSystemctl(t)
			r := &install.SystemdRunner{Unit: "app", Systemctl: path}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- r.Restart(ctx) }()
			tc.kill(waitPid(t, pidFile), cancel)
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("systemctl restart did not return")
			}
			if err == nil {
				t.Fatal("systemctl restart succeeded; want an error")
			}
			got := errors.Is(err, install.ErrInterrupted) && errors.Is(err, context.Canceled)
			class := install.ClassOf(err)
			if got != tc.interrupted || (class == install.ClassRelease) == tc.interrupted {
				t.Fatalf("err %q: interrupted %v, class %s; want interrupted %v", err, got, class, tc.interrupted)
			}
		})
	}
}

// TestWaitHealthyStopped: an app that dies (of SIGTERM, as systemd stops
// agentd's whole control group) while agentd is being stopped is an
// interruption, not ErrUnhealthy.
func TestWaitHealthyStopped(t *testing.T) {
	defer install.SetStopGrace(3 * time.Second)()
	r := &install.ProcessRunner{Path: "/bin/sleep", Args: []string{"600"}, StopTimeout: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- install.WaitHealthy(ctx, install.Health{Interval: 20 * time.Millisecond}, r, time.Minute, time.Minute, install.Clock{})
	}()
	_ = syscall.Kill(r.Pid(), syscall.SIGTERM)
	time.AfterFunc(200*time.Millisecond, cancel)
	err := <-done
	if errors.Is(err, install.ErrUnhealthy) || !errors.Is(err, install.ErrInterrupted) || install.ClassOf(err) != install.ClassInfrastructure {
		t.Fatalf("WaitHealthy: %v (class %s); want an interruption, not unhealthy", err, install.ClassOf(err))
	}
}

// TestWaitHealthyGracefulStop: an app that handles the SIGTERM systemd sends
// the whole control group and exits 0 (a graceful shutdown) while agentd is
// being stopped is an interruption too, not ErrUnhealthy (seen in
// TestSIGTERMAtEveryStep: a downgrade's health wait blamed the good
// release). An app that exits 0 while nothing stops agentd is unhealthy,
// once stopGrace has passed.
func TestWaitHealthyGracefulStop(t *testing.T) {
	defer install.SetStopGrace(3 * time.Second)()
	for _, stopping := range []bool{true, false} {
		// The app says when its handler is in place: a SIGTERM before
		// that would kill it (a signal death, the case above).
		ready := filepath.Join(t.TempDir(), "ready")
		graceful := []string{"-c", `trap 'exit 0' TERM; : >"$0"; while :; do sleep 0.05; done`, ready}
		r := &install.ProcessRunner{Path: "/bin/sh", Args: graceful, StopTimeout: time.Second}
		ctx, cancel := context.WithCancel(context.Background())
		if err := r.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			done <- install.WaitHealthy(ctx, install.Health{Interval: 20 * time.Millisecond}, r, time.Minute, time.Minute, install.Clock{})
		}()
		natstest.Eventually(t, 10*time.Second, func() error {
			_, err := os.Stat(ready)
			return err
		})
		_ = syscall.Kill(r.Pid(), syscall.SIGTERM)
		if stopping {
			time.AfterFunc(200*time.Millisecond, cancel)
		}
		err := <-done
		cancel()
		_ = r.Stop(context.Background())
		t.Logf("stopping %v: %v", stopping, err)
		interrupted := errors.Is(err, install.ErrInterrupted) && !errors.Is(err, install.ErrUnhealthy)
		if interrupted != stopping {
			t.Errorf("agentd stopping %v: WaitHealthy: %v (class %s)", stopping, err, install.ClassOf(err))
		}
	}
}
