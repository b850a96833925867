//go:build linux

package agentd_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// appProcs lists the running (not exited) processes of the supervised app
// in /proc: leaders run bin/app with token as argument, their children
// "sleep token". Each test draws its own token.
func appProcs(t *testing.T, token string) (leaders, children []int) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// A zombie's cmdline is empty: only running processes match.
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := bytes.Split(bytes.TrimSuffix(cmdline, []byte{0}), []byte{0})
		switch {
		case len(args) == 2 && string(args[0]) == "sleep" && string(args[1]) == token:
			children = append(children, pid)
		case len(args) == 3 && filepath.Base(string(args[1])) == "app" && string(args[2]) == token:
			leaders = append(leaders, pid)
		}
	}
	return leaders, children
}

// pgid is pid's process group, 0 once it is gone.
func pgid(pid int) int {
	g, _ := syscall.Getpgid(pid)
	return g
}

func TestKilledAgentdLeavesOneApp(t *testing.T) {
	// Issue 12: an agentd killed with SIGKILL cannot stop the app it
	// supervises (the app has its own process group); the next agentd must
	// find and stop it before it starts its own, or every kill adds an app.
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx := context.Background()
	if _, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true}); err != nil {
		t.Fatal(err)
	}

	// Version 1.0.0 installed and active, as an earlier install leaves it.
	root := t.TempDir()
	tree := install.Tree{Root: root, BinDir: filepath.Join(root, "bin")}
	token := strconv.Itoa(900_000_000 + rand.IntN(99_999_999))
	if err := os.MkdirAll(filepath.Join(tree.VersionDir("1.0.0"), "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	app := "#!/bin/sh\nsleep \"$1\" &\nwait\n"
	if err := os.WriteFile(filepath.Join(tree.VersionDir("1.0.0"), "bin", "app"), []byte(app), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tree.MarkerPath("1.0.0"), []byte("0000000000000000000000000000000000000000000000000000000000000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Link("1.0.0"); err != nil {
		t.Fatal(err)
	}
	uf := install.NewUpdateFile("blue")
	uf.Spec.URLTemplate = "http://127.0.0.1:9/{{.Version}}/app.tar.gz" // never fetched: nothing to update to
	uf.Status.ActiveVersion = "1.0.0"
	if err := uf.Save(root); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, no app of this test outlives it.
	t.Cleanup(func() {
		leaders, children := appProcs(t, token)
		for _, pid := range append(leaders, children...) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	// agentd's output goes to a file, not a pipe: the app inherits it, and
	// a pipe an orphaned app holds open would keep Wait from returning.
	logPath := filepath.Join(t.TempDir(), "agentd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("agentd output:\n%s", b)
		}
	})
	// start runs agentd; exited is closed once it has exited, with its
	// exit in *err.
	start := func() (cmd *exec.Cmd, exited <-chan struct{}, err *error) {
		t.Helper()
		cmd = exec.Command(bin, "run", "--root", root, "--process", "app", "--bin-dir", tree.BinDir, "--app-arg", token,
			"--nats", srv.URL(), "--heartbeat-interval", "1h")
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done, werr := make(chan struct{}), new(error)
		go func() {
			*werr = cmd.Wait()
			close(done)
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-done
		})
		return cmd, done, werr
	}
	// newApp waits until an app other than the ones seen so far runs, with
	// its child (in its process group), and records it as seen.
	seen := map[int]bool{}
	newApp := func() {
		t.Helper()
		natstest.Eventually(t, 30*time.Second, func() error {
			leaders, children := appProcs(t, token)
			for _, pid := range leaders {
				if !seen[pid] && slices.ContainsFunc(children, func(c int) bool { return pgid(c) == pid }) {
					seen[pid] = true
					return nil
				}
			}
			return fmt.Errorf("no new app started (running: %v, children %v; seen %v)", leaders, children, seen)
		})
	}

	agentd, exited, exitErr := start()
	newApp()
	for range 3 {
		if err := agentd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-exited
		agentd, exited, exitErr = start()
		newApp()
	}
	leaders, children := appProcs(t, token)
	if len(leaders) != 1 || len(children) != 1 {
		t.Errorf("after 3 SIGKILLs of agentd: %d app instances %v and %d children %v run, want 1 and 1",
			len(leaders), leaders, len(children), children)
	}

	// A clean stop ends the app with agentd.
	if err := agentd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if *exitErr != nil {
			t.Errorf("agentd exited on SIGTERM with %v, want 0", *exitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agentd did not exit within 30s of SIGTERM")
	}
	leaders, children = appProcs(t, token)
	if all := slices.Concat(leaders, children); len(all) != 0 {
		t.Errorf("after agentd stopped on SIGTERM, app processes %v (instances %v) still run", all, leaders)
	}
}
