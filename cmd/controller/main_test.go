package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

var controllerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fleetwave-controller-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	controllerBin = filepath.Join(dir, "controller")
	build := exec.Command("go", "build", "-o", controllerBin, "github.com/fleetwave/fleetwave/cmd/controller")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the controller:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a controller process the test started.
type proc struct {
	cmd  *exec.Cmd
	out  *natstest.Buffer // stdout and stderr
	done chan struct{}    // closed when it has exited
	err  error            // Wait's result, set before done closes
}

// startController runs the controller binary with args and env (added to
// the test's environment, without NATS_URL) until the test ends.
func startController(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(controllerBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NATS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	p := &proc{cmd: cmd, out: &natstest.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- controller %v:\n%s", args, p.out.String())
		}
	})
	return p
}

// exited waits up to timeout for p to end and returns its exit code and how
// long it ran; the test fails if it is still running.
func (p *proc) exited(t *testing.T, timeout time.Duration, started time.Time) (int, time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("controller still running after %v, want it to refuse to start:\n%s", timeout, p.out.String())
	}
	took := time.Since(started)
	var ee *exec.ExitError
	if p.err == nil {
		return 0, took
	}
	if !errors.As(p.err, &ee) {
		t.Fatalf("wait: %v", p.err)
	}
	return ee.ExitCode(), took
}

// waitReady waits until the bus at port has the controller's stream and
// buckets: the controller is up.
func waitReady(t *testing.T, port int) {
	t.Helper()
	natstest.Eventually(t, 30*time.Second, func() error {
		nc, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), Log: natstest.Logger(t)})
		if err != nil {
			return err
		}
		defer nc.Close()
		_, err = kv.Open(context.Background(), js)
		return err
	})
}

func listen(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// runArgs are the flags every test's controller gets: short intervals.
func runArgs(store string, port int, more ...string) []string {
	return append([]string{"run", "--store-dir", store, "--listen", listen(port), "--id", "c1",
		"--heartbeat-interval", "1s", "--stats-interval", "1s", "--reconcile-interval", "500ms", "--lease-ttl", "5s"}, more...)
}

// TestSecondControllerOnOneStoreRefuses: nats-server takes no lock on its
// store, so a second controller on a store in use started, replayed the
// streams and wrote over the first one's files. It must fail at once,
// naming the holder, and change nothing; once the holder is killed (-9, no
// cleanup) the store is free again.
func TestSecondControllerOnOneStoreRefuses(t *testing.T) {
	store := filepath.Join(t.TempDir(), "nats")
	port1 := natstest.FreePort(t)
	first := startController(t, nil, runArgs(store, port1)...)
	waitReady(t, port1)

	lockFile := filepath.Join(store, "fleetwave.lock")
	before, _ := os.ReadFile(lockFile)
	// Another port (else the port in use would stop it), the same store.
	for _, second := range [][]string{
		runArgs(store, natstest.FreePort(t)),
		runArgs(store, port1), // the same port too: the store is the news
	} {
		t0 := time.Now()
		p := startController(t, nil, second...)
		code, took := p.exited(t, 10*time.Second, t0)
		if code != 1 {
			t.Errorf("second controller exit code %d, want 1 (failure)", code)
		}
		if took > 5*time.Second {
			t.Errorf("second controller took %v to refuse, want at once", took)
		}
		if want := fmt.Sprintf("pid %d", first.cmd.Process.Pid); !strings.Contains(p.out.String(), want) {
			t.Errorf("second controller's error does not name the first (%s):\n%s", want, p.out.String())
		}
		if !strings.Contains(p.out.String(), store) {
			t.Errorf("second controller's error does not name the store %s:\n%s", store, p.out.String())
		}
	}
	if want := fmt.Sprintf("pid %d", first.cmd.Process.Pid); !strings.Contains(string(before), want) {
		t.Errorf("lock file %s says %q, want the holder (%s)", lockFile, before, want)
	}
	if after, _ := os.ReadFile(lockFile); !bytes.Equal(before, after) {
		t.Errorf("refused controllers changed the lock file:\nbefore %q\nafter  %q", before, after)
	}

	// kill -9: the kernel drops the flock, and a new controller takes
	// the store (and its data) over.
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.done
	port3 := natstest.FreePort(t)
	third := startController(t, nil, runArgs(store, port3)...)
	waitReady(t, port3)
	natstest.Eventually(t, 10*time.Second, func() error {
		b, err := os.ReadFile(lockFile)
		if err != nil {
			return err
		}
		if want := fmt.Sprintf("pid %d", third.cmd.Process.Pid); !strings.Contains(string(b), want) {
			return fmt.Errorf("lock file %q does not name the new holder (%s)", b, want)
		}
		return nil
	})
}

// TestNATSURLDoesNotTurnEmbeddingOff: the README has operators export
// NATS_URL for fleetctl and the nats CLI; the controller read it too, stopped
// embedding and failed "no servers available". Only --nats decides, and the
// first line says which mode and why.
func TestNATSURLDoesNotTurnEmbeddingOff(t *testing.T) {
	dead := natstest.FreePort(t) // nobody listens there
	port := natstest.FreePort(t)
	p := startController(t, []string{fmt.Sprintf("NATS_URL=nats://127.0.0.1:%d", dead)},
		runArgs(filepath.Join(t.TempDir(), "nats"), port)...)
	waitReady(t, port)
	first, _, _ := strings.Cut(p.out.String(), "\n")
	for _, want := range []string{"embedded", fmt.Sprintf("nats://127.0.0.1:%d", port), "no --nats given", "NATS_URL"} {
		if !strings.Contains(first, want) {
			t.Errorf("first log line does not say %q:\n%s", want, first)
		}
	}
}

// TestConnectModeSaysWhy: with --nats the first line says where it connects
// and that the flag chose it.
func TestConnectModeSaysWhy(t *testing.T) {
	s := natstest.Start(t)
	p := startController(t, nil, "run", "--nats", s.URL(), "--id", "c1")
	natstest.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(p.out.String(), "controller started") {
			return errors.New("controller not started yet")
		}
		return nil
	})
	first, _, _ := strings.Cut(p.out.String(), "\n")
	if !strings.Contains(first, "connecting to "+s.URL()+" (from --nats)") {
		t.Errorf("first log line does not say it connects to %s because of --nats:\n%s", s.URL(), first)
	}
}

// TestStartFailuresAreImmediate: a busy port or a store directory that cannot
// be created waited 10 s for the embedded server and then guessed "(port in
// use?)". The start fails at once with the system's error, and leaves no
// store behind.
func TestStartFailuresAreImmediate(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port
	aFile := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(aFile, []byte("not a directory\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := map[string]struct {
		args []string
		want string
	}{
		"--listen port in use": {
			args: runArgs(filepath.Join(t.TempDir(), "nats"), busyPort),
			want: "address already in use",
		},
		"--http-addr port in use": {
			args: runArgs(filepath.Join(t.TempDir(), "nats"), natstest.FreePort(t), "--http-addr", listen(busyPort)),
			want: "address already in use",
		},
		"store dir under a regular file": {
			args: runArgs(filepath.Join(aFile, "nats"), natstest.FreePort(t)),
			want: "not a directory",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t0 := time.Now()
			p := startController(t, nil, tc.args...)
			code, took := p.exited(t, 30*time.Second, t0)
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			if took > 3*time.Second {
				t.Errorf("took %v to fail, want at once", took)
			}
			if !strings.Contains(p.out.String(), tc.want) {
				t.Errorf("error does not give the cause %q:\n%s", tc.want, p.out.String())
			}
			if strings.Contains(p.out.String(), "port in use?") {
				t.Errorf("error guesses instead of saying:\n%s", p.out.String())
			}
		})
	}
	for _, name := range []string{"--listen port in use", "--http-addr port in use"} {
		store := cases[name].args[2]
		if _, err := os.Stat(store); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the failed start left %s behind (stat: %v)", name, store, err)
		}
	}
}

// TestHelpListsTheExitCodesItReturns: the controller waits on no rollout, so
// its help must not promise exit code 3.
func TestHelpListsTheExitCodesItReturns(t *testing.T) {
	out, err := exec.Command(controllerBin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("controller --help: %v\n%s", err, out)
	}
	_, codes, ok := strings.Cut(string(out), "Exit codes:\n")
	if !ok {
		t.Fatalf("controller --help lists no exit codes:\n%s", out)
	}
	codes, _, _ = strings.Cut(codes, "\n\n")
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^\s+(\d+)\s`).FindAllStringSubmatch(codes, -1) {
		got = append(got, m[1])
	}
	if strings.Join(got, " ") != "0 1 2" {
		t.Errorf("controller --help lists exit codes %v, want 0 1 2:\n%s", got, codes)
	}
}

// TestEmptyNATSFlagIsAUsageError: an empty --nats (an unset variable in a unit
// file) used to mean "embed"; now that the flag alone decides, an empty one
// is a mistake to report, exit code 2, and not a server started.
func TestEmptyNATSFlagIsAUsageError(t *testing.T) {
	store := filepath.Join(t.TempDir(), "nats")
	t0 := time.Now()
	p := startController(t, nil, runArgs(store, natstest.FreePort(t), "--nats", "")...)
	if code, _ := p.exited(t, 10*time.Second, t0); code != 2 {
		t.Errorf("exit code %d, want 2 (usage)", code)
	}
	if !strings.Contains(p.out.String(), "--nats") {
		t.Errorf("error does not name --nats:\n%s", p.out.String())
	}
	if _, err := os.Stat(store); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a usage error left %s behind (stat: %v)", store, err)
	}
}
