// Package proctest runs the project's own binaries in end-to-end tests:
// built once per test binary, each started until its test ends, its log
// shown when the test failed.
package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const module = "github.com/fleetwave/fleetwave/"

// Main builds cmds (paths in this module, e.g. "cmd/agentd") into a new
// temp dir, sets *dir to it, runs the tests and removes it; it returns the
// exit code for os.Exit.
func Main(m *testing.M, dir *string, cmds ...string) int {
	d, err := os.MkdirTemp("", "fleetwave-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(d)
	args := []string{"build", "-o", d + "/"}
	for _, c := range cmds {
		args = append(args, module+c)
	}
	build := exec.Command("go", args...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the binaries:", err)
		return 1
	}
	*dir = d
	return m.Run()
}

// Run runs bin to completion and returns its output, failing t if it
// fails.
func Run(t testing.TB, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Start runs bin until the test ends (SIGTERM, then SIGKILL after 15s),
// its output in logPath. check, when not nil, reads the log once the
// process stopped (to fail the test on what it logged); the log's tail is
// shown when the test failed.
func Start(t testing.TB, logPath, bin string, check func(log []byte), args ...string) *exec.Cmd {
	t.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
		b, _ := os.ReadFile(logPath)
		if check != nil {
			check(b)
		}
		if t.Failed() {
			t.Logf("--- %s:\n%s", logPath, Tail(string(b), 4000))
		}
	})
	return cmd
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
