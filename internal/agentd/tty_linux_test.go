package agentd_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/test/releases"
)

// openPTY opens a pseudo-terminal: the controlling side, and the terminal
// a child gets as its stderr.
func openPTY(t *testing.T) (ptmx, pts *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ptmx, pts
}

// TestDownloadProgressOnTerminal (issue 13 point 13): with stderr on a
// terminal, a download shows one redrawn line with bytes, rate and time
// left, and the log does not repeat the figures.
func TestDownloadProgressOnTerminal(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx := context.Background()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	setPlan(t, ctx, fleet, "1.0.0", "2.0.0")
	relURL, _ := slowRelease(t)
	root := t.TempDir()

	ptmx, pts := openPTY(t)
	cmd := exec.Command(bin, "update", "--force", "--root", root, "--bin-dir", filepath.Join(root, "bin"), "--nats", srv.URL(),
		"--group", "blue", "--url-template", releases.URLTemplate(relURL), "--systemd-unit", "app.service", "--systemctl", fakeSystemctl(t),
		"--progress-interval", "300ms")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, pts
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close() // the child's now: reads see EIO once it exits
	var term bytes.Buffer
	read := make(chan struct{})
	go func() {
		_, _ = term.ReadFrom(ptmx)
		close(read)
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			<-read
			t.Fatalf("agentd update: %v\n%s\n%s", err, stdout.String(), term.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("agentd update did not end within 60s")
	}
	<-read
	out := term.String()
	if !strings.Contains(stdout.String(), "installed 2.0.0") {
		t.Errorf("agentd update did not install 2.0.0:\n%s", stdout.String())
	}
	line := regexp.MustCompile(`\rapp\.tar\.gz: \d+\.\d MiB/1\.2 MiB \(\d+%\) \d+\.\d MiB/s ETA \d+s`)
	if n := len(line.FindAllString(out, -1)); n < 2 {
		t.Errorf("%d redrawn progress lines with bytes, rate and ETA, want at least 2:\n%q", n, out)
	}
	if strings.Contains(out, "received=") {
		t.Errorf("on a terminal the log repeats the progress line's figures:\n%q", out)
	}
}
