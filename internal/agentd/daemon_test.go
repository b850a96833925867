package agentd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/test/releases"
)

// agentdBin is the agentd binary, built once by the first test that needs
// it (linking takes seconds) and removed by TestMain.
var agentdBin struct {
	once      sync.Once
	dir, path string
	err       error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if agentdBin.dir != "" {
		os.RemoveAll(agentdBin.dir)
	}
	os.Exit(code)
}

// buildAgentd builds the agentd binary (once) and returns its path.
func buildAgentd(t *testing.T) string {
	t.Helper()
	agentdBin.once.Do(func() {
		if agentdBin.dir, agentdBin.err = os.MkdirTemp("", "agentd-test-bin"); agentdBin.err != nil {
			return
		}
		agentdBin.path = filepath.Join(agentdBin.dir, "agentd")
		out, err := exec.Command("go", "build", "-o", agentdBin.path, "github.com/fleetwave/fleetwave/cmd/agentd").CombinedOutput()
		if err != nil {
			agentdBin.err = fmt.Errorf("go build agentd: %v\n%s", err, out)
		}
	})
	if agentdBin.err != nil {
		t.Fatal(agentdBin.err)
	}
	return agentdBin.path
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
	return startAgentdEnv(t, bin, nil, args...)
}

// startAgentdEnv is startAgentd with env added to the environment.
func startAgentdEnv(t *testing.T, bin string, env []string, args ...string) *daemon {
	t.Helper()
	d := &daemon{log: filepath.Join(t.TempDir(), "agentd.log"), exited: make(chan struct{})}
	logFile, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(bin, args...)
	if env != nil {
		d.cmd.Env = append(os.Environ(), env...)
	}
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
	started := func(d *daemon) {
		t.Helper()
		natstest.Eventually(t, 30*time.Second, func() error {
			if !strings.Contains(d.output(), "agent started") {
				return fmt.Errorf("agentd (pid %d) has not started", d.cmd.Process.Pid)
			}
			return nil
		})
		holdsRoot(t, root, d.cmd.Process.Pid)
	}
	first := startAgentd(t, bin, run("--group", "blue")...)
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
	if code := second.wait(t, 20*time.Second); code != 1 {
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
	started(startAgentd(t, bin, run()...))
}

// throttledRelease serves releases, the tarball of path at about rate
// bytes per second.
type throttledRelease struct {
	http.Handler
	path    string
	tarball []byte
	rate    int
}

func (s *throttledRelease) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != s.path {
		s.Handler.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(s.tarball)))
	const tick = 20 * time.Millisecond
	chunk := s.rate / int(time.Second/tick)
	t := time.NewTicker(tick)
	defer t.Stop()
	for b := s.tarball; len(b) > 0; b = b[min(chunk, len(b)):] {
		if _, err := w.Write(b[:min(chunk, len(b))]); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

// TestDownloadProgress (issue 13 point 13): a slow download, with agentd's
// stderr not a terminal, logs its progress (bytes, rate, time left) every
// --progress-interval, and `agentd status` meanwhile shows how far it got.
func TestDownloadProgress(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx := context.Background()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	setPlan(t, ctx, fleet, "1.0.0", "2.0.0")
	relURL, tarball := slowRelease(t)
	root := t.TempDir()
	common := []string{"--root", root, "--bin-dir", filepath.Join(root, "bin")}
	upd := startAgentd(t, bin, append([]string{"update", "--force", "--nats", srv.URL(), "--group", "blue",
		"--url-template", releases.URLTemplate(relURL), "--systemd-unit", "app.service", "--systemctl", fakeSystemctl(t), "--progress-interval", "300ms"}, common...)...)

	// agentd status, meanwhile, shows the download under way.
	natstest.Eventually(t, 30*time.Second, func() error {
		out, err := exec.Command(bin, append([]string{"status", "--systemd-unit", "app.service"}, common...)...).Output()
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			return fmt.Errorf("agentd status: %v\n%s%s", err, out, ee.Stderr)
		} else if err != nil {
			return err
		}
		// The JSON fields, as a script reads them.
		var rep struct {
			InstallStep   string `json:"install_step"`
			InstallTarget string `json:"install_target"`
			Download      *struct {
				Received       int64 `json:"received"`
				Bytes          int64 `json:"bytes"`
				BytesPerSecond int64 `json:"bytes_per_second"`
			} `json:"download"`
		}
		if err := json.Unmarshal(out, &rep); err != nil {
			return fmt.Errorf("agentd status is not JSON: %v\n%s", err, out)
		}
		d := rep.Download
		if rep.InstallStep != "fetch" || rep.InstallTarget != "2.0.0" || d == nil ||
			d.Bytes != int64(len(tarball)) || d.Received <= 0 || d.Received >= d.Bytes || d.BytesPerSecond <= 0 {
			return fmt.Errorf("agentd status shows no download half way:\n%s", out)
		}
		return nil
	})
	if code := upd.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("agentd update: exit %d\n%s", code, upd.output())
	}
	log := upd.output()
	if !strings.Contains(log, "installed 2.0.0") {
		t.Errorf("agentd update did not install 2.0.0:\n%s", log)
	}
	line := regexp.MustCompile(`msg=downloading version=2\.0\.0 received=\d+ bytes=` + strconv.Itoa(len(tarball)) +
		` percent=\d+ rate="\d+\.\d MiB/s" eta=\d+`)
	if n := len(line.FindAllString(log, -1)); n < 2 {
		t.Errorf("%d progress lines with bytes, rate and time left, want at least 2:\n%s", n, log)
	}
	if !strings.Contains(log, "msg=downloaded version=2.0.0 bytes="+strconv.Itoa(len(tarball))) {
		t.Errorf("no line for the complete download:\n%s", log)
	}
	if strings.Contains(log, "\r") {
		t.Errorf("a terminal's progress line went to a log file:\n%q", log)
	}
}

// tarballOf is the tarball rs serves for version.
func tarballOf(rs *releases.Server, version string) ([]byte, error) {
	rec := httptest.NewRecorder()
	rs.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/"+version+"/app.tar.gz", nil))
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("release %s: %d", version, rec.Code)
	}
	return rec.Body.Bytes(), nil
}

// slowRelease serves release 2.0.0 (about 1.2 MiB) at 600 KiB/s, and
// returns the server's URL and the tarball.
func slowRelease(t *testing.T) (string, []byte) {
	t.Helper()
	// 2 MiB of random letters in bin/app: gzip leaves about 1.2 MiB, about
	// 2s at the rate served.
	rs := releases.NewServer(nil)
	noise := make([]byte, 2<<20)
	seed := uint32(1)
	for i := range noise {
		seed = seed*1664525 + 1013904223
		noise[i] = 'a' + byte(seed>>24)%26
	}
	if err := rs.AddScript("2.0.0", "#!/bin/sh\nexec sleep 1000000\n# "+string(noise)+"\n"); err != nil {
		t.Fatal(err)
	}
	tarball, err := tarballOf(rs, "2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	rel := httptest.NewServer(&throttledRelease{Handler: rs, path: "/2.0.0/app.tar.gz", tarball: tarball, rate: 600 << 10})
	t.Cleanup(rel.Close)
	return rel.URL, tarball
}

// fakeSystemctl is a stand-in systemctl (systemd is the outside world
// here) that does nothing, for agentd --systemctl.
func fakeSystemctl(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "systemctl")
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAgentdRunShortInterval: a heartbeat interval shorter than the
// default jitter (3s) is taken, with the jitter scaled to a tenth of it,
// not refused; an agent whose updates are disabled says so at start.
func TestAgentdRunShortInterval(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	d := startAgentd(t, bin, "run", "--root", t.TempDir(), "--group", "blue", "--nats", srv.URL(), "--heartbeat-interval", "2s")
	natstest.Eventually(t, 30*time.Second, func() error {
		out := d.output()
		if !strings.Contains(out, "agent started") || !strings.Contains(out, "updates are disabled on this host") {
			return fmt.Errorf("no start and no word on disabled updates yet:\n%s", out)
		}
		return nil
	})
	// A jitter given explicitly is still checked against the interval.
	bad := startAgentd(t, bin, "run", "--root", t.TempDir(), "--group", "blue", "--nats", srv.URL(), "--heartbeat-interval", "2s", "--heartbeat-jitter", "3s")
	if code := bad.wait(t, 20*time.Second); code != 2 || !strings.Contains(bad.output(), "--heartbeat-jitter 3s") {
		t.Errorf("jitter 3s over interval 2s: exit %d, want 2 naming the jitter:\n%s", code, bad.output())
	}
}
