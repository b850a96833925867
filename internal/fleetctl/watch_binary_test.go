package fleetctl

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// fleetctlBinary builds cmd/fleetctl into the test's temporary directory.
func fleetctlBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fleetctl")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/fleetwave/fleetwave/cmd/fleetctl").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// openPTY opens a pseudo-terminal of cols×rows: the terminal side for a
// child's output, and the side that reads what it wrote.
func openPTY(t *testing.T, cols, rows uint16) (term, reader *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows}); err != nil {
		t.Fatalf("set window size: %v", err)
	}
	return s, m
}

// busyFixture is rolloutFixture with counts fresh at the real clock (the
// binary's) and more groups than fit the table on 24 rows with events.
func busyFixture(t *testing.T) *env {
	e := rolloutFixture(t)
	at := time.Now().UTC()
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "staging", At: at, Agents: 10, Versions: rollout.Counts{
		"1.4.0": {Count: 1, LowestID: idA}, "1.3.2": {Count: 9, FailedCount: 1, Updating: 2, LowestID: idB}}})
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "prod", At: at, Agents: 30, Versions: rollout.Counts{"1.3.2": {Count: 30, LowestID: idA}}})
	for i := range 8 {
		e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: fmt.Sprintf("lab-%d", i), At: at, Agents: 2, Versions: rollout.Counts{"1.2.0": {Count: 2, LowestID: idA}}})
	}
	return e
}

// publishLong publishes n halt events with reasons longer than any line,
// event i saying "event i".
func publishLong(t *testing.T, e *env, n int) {
	t.Helper()
	for i := range n {
		ev := rollout.Event{V: 1, Group: "staging", Kind: rollout.EventHalt, From: rollout.StateCanary, To: rollout.StateCanary,
			Reason: fmt.Sprintf("event %d: %s", i, longReason), At: time.Now().UTC()}
		if err := e.fleet.PublishEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWatchBinaryOnA80x24Terminal runs the real fleetctl on a pseudo-terminal
// of 80×24: every screen fits it, with the status table on top and the
// newest event below, and Ctrl-C restores the terminal and exits 0.
func TestWatchBinaryOnA80x24Terminal(t *testing.T) {
	bin := fleetctlBinary(t)
	e := busyFixture(t)
	term, reader := openPTY(t, 80, 24)
	var out, errOut natstest.Buffer
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(&out, reader) // until the child's end closes the terminal
		close(copied)
	}()
	cmd := exec.Command(bin, "--nats", e.srv.URL(), "watch")
	cmd.Env = append(os.Environ(), "TERM=xterm")
	cmd.Stdout, cmd.Stderr = term, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	term.Close() // the child holds it now
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	natstest.Eventually(t, 20*time.Second, func() error {
		if !strings.Contains(errOut.String(), "Watching fleet.events.>") || !strings.Contains(out.String(), "GROUP ") {
			return fmt.Errorf("not watching yet; stderr %q", errOut.String())
		}
		return nil
	})
	publishLong(t, e, 12)
	natstest.Eventually(t, 20*time.Second, func() error {
		if !strings.Contains(out.String(), "event 11: canary") {
			return errors.New("the last event is not on the screen yet")
		}
		return nil
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("watch ended with %v on Ctrl-C, want exit 0; stderr %s", err, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("watch did not end on Ctrl-C")
	}
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal did not close after watch ended")
	}

	all := out.String()
	if !strings.HasPrefix(all, enterScreen) {
		t.Errorf("output starts %q, want the alternate screen entered", shorten(all, 20))
	}
	if !strings.HasSuffix(all, leaveScreen) {
		t.Errorf("output ends %q, want the terminal restored", all[max(0, len(all)-20):])
	}
	screens := strings.Split(strings.TrimSuffix(strings.TrimPrefix(all, enterScreen), leaveScreen), clearScreen)[1:]
	if len(screens) < 2 {
		t.Fatalf("%d screens drawn, want at least 2", len(screens))
	}
	for i, sc := range screens {
		// The terminal turns "\n" into "\r\n".
		lines := strings.Split(strings.ReplaceAll(sc, "\r", ""), "\n")
		if len(lines) > 24 {
			t.Errorf("screen %d: %d lines on 24 rows:\n%s", i, len(lines), sc)
		}
		for _, l := range lines {
			if n := utf8.RuneCountInString(l); n > 80 {
				t.Errorf("screen %d: line %d columns wide on 80: %q", i, n, l)
			}
		}
	}
	last := strings.ReplaceAll(screens[len(screens)-1], "\r", "")
	header, newest := strings.Index(last, "\nGROUP "), strings.Index(last, "event 11: canary")
	if header < 0 || newest < header || strings.Index(last, "event 10: canary") < newest {
		t.Errorf("last screen: want the status table, then the newest event first:\n%s", last)
	}
	if !strings.Contains(last, "\nstaging ") || !strings.Contains(last, "UPDATING") {
		t.Errorf("last screen has no staging row or UPDATING column:\n%s", last)
	}
}

// TestWatchBinaryOnADumbTerminalPrintsLines: TERM=dumb (an editor's shell
// buffer) cannot redraw, so watch prints plain lines there too.
func TestWatchBinaryOnADumbTerminalPrintsLines(t *testing.T) {
	bin := fleetctlBinary(t)
	e := busyFixture(t)
	term, reader := openPTY(t, 80, 24)
	var out, errOut natstest.Buffer
	go func() { _, _ = io.Copy(&out, reader) }()
	cmd := exec.Command(bin, "--nats", e.srv.URL(), "watch")
	cmd.Env = append(os.Environ(), "TERM=dumb")
	cmd.Stdout, cmd.Stderr = term, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	term.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	natstest.Eventually(t, 20*time.Second, func() error {
		if !strings.Contains(errOut.String(), "Watching fleet.events.>") {
			return fmt.Errorf("not watching yet; stderr %q", errOut.String())
		}
		return nil
	})
	publishLong(t, e, 1)
	natstest.Eventually(t, 20*time.Second, func() error {
		if strings.Count(out.String(), "explanation") != 5 {
			return fmt.Errorf("the event is not printed yet: %q", out.String())
		}
		return nil
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("watch ended with %v on Ctrl-C, want exit 0", err)
	}
	if got := out.String(); strings.Contains(got, "\x1b") || !strings.HasPrefix(got, time.Now().UTC().Format("2006-")) {
		t.Errorf("want plain event lines on a dumb terminal, got %q", got)
	}
}

// TestWatchBinaryPipedLinesFit100Columns: piped, the real fleetctl prints
// plain lines (no terminal control) of at most 100 columns.
func TestWatchBinaryPipedLinesFit100Columns(t *testing.T) {
	bin := fleetctlBinary(t)
	e := busyFixture(t)
	var out, errOut natstest.Buffer
	cmd := exec.Command(bin, "--nats", e.srv.URL(), "watch")
	cmd.Stdout, cmd.Stderr = &out, &errOut // a pipe
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	natstest.Eventually(t, 20*time.Second, func() error {
		if !strings.Contains(errOut.String(), "Watching fleet.events.>") {
			return fmt.Errorf("not watching yet; stderr %q", errOut.String())
		}
		return nil
	})
	publishLong(t, e, 3)
	natstest.Eventually(t, 20*time.Second, func() error {
		if strings.Count(out.String(), "explanation") != 15 || !strings.HasSuffix(out.String(), "\n") {
			return errors.New("the last event is not printed yet")
		}
		return nil
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("watch ended with %v on Ctrl-C, want exit 0", err)
	}
	got := out.String()
	if strings.Contains(got, "\x1b") {
		t.Errorf("terminal control in piped output: %q", got)
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	starts := 0
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("line %d columns wide (max 100): %q", n, l)
		}
		if !strings.HasPrefix(l, "    ") {
			starts++
		}
	}
	if starts != 3 || len(lines) <= 3 {
		t.Errorf("%d events in %d lines, want 3 events continued on indented lines:\n%s", starts, len(lines), got)
	}
}
