package scripts_test

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
)

// freePair returns a port p with p+1 free too.
func freePair(t *testing.T) int {
	t.Helper()
	for range 20 {
		p := natstest.FreePort(t)
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1)); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no two free ports in a row")
	return 0
}

// demoReleaseURL starts scripts/demo.sh with env, returns the release URL
// it announces, and stops the demo: SIGTERM to its process group, so that
// each agentd stops the app it supervises (in a process group of its own)
// and the demo cleans up; SIGKILL if that takes over a minute.
func demoReleaseURL(t *testing.T, env ...string) string {
	t.Helper()
	cmd := exec.Command("bash", "demo.sh")
	cmd.Env = append(cmd.Environ(), append(env, "TMPDIR="+t.TempDir())...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	stop := func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(time.Minute):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	defer stop()
	lines := make(chan string, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if after, ok := strings.CutPrefix(sc.Text(), "agents download from "); ok {
				lines <- after
			}
		}
		done <- cmd.Wait()
	}()
	select {
	case url, ok := <-lines:
		if !ok {
			t.Fatal("demo.sh ended without announcing its release site")
		}
		return url
	case <-time.After(5 * time.Minute): // the demo builds every binary first
		t.Fatal("demo.sh announced no release site in 5 minutes")
		return ""
	}
}

// TestDemoPorts: DEMO_PORT places the release site too (on DEMO_PORT+1),
// DEMO_RELEASES_PORT alone, and a port that is none is refused.
func TestDemoPorts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the demo")
	}
	p := freePair(t)
	if got, want := demoReleaseURL(t, fmt.Sprintf("DEMO_PORT=%d", p)), fmt.Sprintf("http://127.0.0.1:%d/", p+1); !strings.HasPrefix(got, want) {
		t.Errorf("with DEMO_PORT=%d the release site is at %s, want %s…", p, got, want)
	}
	r := natstest.FreePort(t)
	if got, want := demoReleaseURL(t, fmt.Sprintf("DEMO_PORT=%d", freePair(t)), fmt.Sprintf("DEMO_RELEASES_PORT=%d", r)),
		fmt.Sprintf("http://127.0.0.1:%d/", r); !strings.HasPrefix(got, want) {
		t.Errorf("with DEMO_RELEASES_PORT=%d the release site is at %s, want %s…", r, got, want)
	}
	for _, env := range []string{"DEMO_PORT=abc", "DEMO_PORT=65535", "DEMO_RELEASES_PORT=0", "DEMO_PORT=99999"} {
		cmd := exec.Command("bash", "demo.sh")
		cmd.Env = append(cmd.Environ(), env, "TMPDIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "want a TCP port") {
			t.Errorf("%s: %v, want exit 2 naming the port:\n%s", env, err, out)
		}
	}
}
