package agentd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// buildAgentd builds the agentd binary into a temp dir.
func buildAgentd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agentd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/fleetwave/fleetwave/cmd/agentd").CombinedOutput(); err != nil {
		t.Fatalf("go build agentd: %v\n%s", err, out)
	}
	return bin
}

// daemon is an agentd process started by startAgentd.
type daemon struct {
	cmd    *exec.Cmd
	log    string // its stdout and stderr
	exited chan struct{}
	err    error // once exited is closed
}

// startAgentd starts bin with args, output to a file (not a terminal, not
// a pipe), and kills it when the test ends if it still runs.
func startAgentd(t *testing.T, bin string, args ...string) *daemon {
	t.Helper()
	d := &daemon{log: filepath.Join(t.TempDir(), "agentd.log"), exited: make(chan struct{})}
	logFile, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(bin, args...)
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.err = d.cmd.Wait()
		logFile.Close()
		close(d.exited)
	}()
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		<-d.exited
		if t.Failed() {
			t.Logf("--- %s %v:\n%s", filepath.Base(bin), args, d.output())
		}
	})
	return d
}

func (d *daemon) output() string {
	b, _ := os.ReadFile(d.log)
	return string(b)
}

// wait waits for the process to exit and returns its exit code, or fails
// the test when it still runs after timeout.
func (d *daemon) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-d.exited:
	case <-time.After(timeout):
		t.Fatalf("agentd (pid %d) still runs after %v; output:\n%s", d.cmd.Process.Pid, timeout, d.output())
	}
	var ee *exec.ExitError
	if errors.As(d.err, &ee) {
		return ee.ExitCode()
	}
	if d.err != nil {
		t.Fatalf("agentd: %v", d.err)
	}
	return 0
}

// holdsRoot waits until the root lock names pid as its holder.
func holdsRoot(t *testing.T, root string, pid int) {
	t.Helper()
	want := fmt.Sprintf("agentd run (pid %d, ", pid)
	natstest.Eventually(t, 30*time.Second, func() error {
		b, err := os.ReadFile(filepath.Join(root, "lock"))
		if err != nil || !strings.HasPrefix(string(b), want) {
			return fmt.Errorf("%s/lock holds %q (%v), want %q…", root, b, err, want)
		}
		return nil
	})
}

// TestOneDaemonPerRoot (issue 13 point 6): a second `agentd run` on a root
// exits 1 naming the first's pid and changes nothing; one-shot commands
// that change the root refuse too, status works; after kill -9 of the
// daemon (the kernel drops its lock) a new one starts.
func TestOneDaemonPerRoot(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	if _, err := kv.Ensure(context.Background(), srv.JetStream("admin"), kv.Options{Memory: true}); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	run := func(extra ...string) []string {
		return append([]string{"run", "--root", root, "--nats", srv.URL(), "--heartbeat-interval", "1h"}, extra...)
	}
	first := startAgentd(t, bin, run("--group", "blue")...)
	holdsRoot(t, root, first.cmd.Process.Pid)
	natstest.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(first.output(), "agent started") {
			return errors.New("the first agentd has not started")
		}
		return nil
	})
	updateYAML, err := os.ReadFile(filepath.Join(root, install.UpdateFileName))
	if err != nil {
		t.Fatal(err)
	}

	// Another group, so that a second daemon that went ahead would
	// change update.yaml.
	second := startAgentd(t, bin, run("--group", "green")...)
	if code := second.wait(t, 30*time.Second); code != 1 {
		t.Errorf("second agentd run: exit %d, want 1", code)
	}
	want := fmt.Sprintf("agentd: root %s is in use by agentd run (pid %d, started ", root, first.cmd.Process.Pid)
	if !strings.HasPrefix(second.output(), want) {
		t.Errorf("second agentd run says %q, want it to start with %q", second.output(), want)
	}
	for _, args := range [][]string{{"update", "--force"}, {"disable"}, {"unlink"}} {
		out, err := exec.Command(bin, append(args, "--root", root)...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.HasPrefix(string(out), want) {
			t.Errorf("agentd %v while the daemon runs: %v, %q; want exit 1 and %q…", args, err, out, want)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(root, install.UpdateFileName)); !bytes.Equal(got, updateYAML) {
		t.Errorf("update.yaml changed under the daemon:\n%s\nwas:\n%s", got, updateYAML)
	}
	// status reads and works beside the daemon.
	out, err := exec.Command(bin, "status", "--root", root).Output()
	var rep agentd.StatusReport
	if err != nil || json.Unmarshal(out, &rep) != nil || rep.Group != "blue" {
		t.Errorf("agentd status while the daemon runs: %v\n%s", err, out)
	}

	// kill -9: nothing runs to release the lock; the kernel does.
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	third := startAgentd(t, bin, run()...)
	holdsRoot(t, root, third.cmd.Process.Pid)
	natstest.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(third.output(), "agent started") {
			return errors.New("the agentd started after kill -9 of the first has not started")
		}
		return nil
	})
}
