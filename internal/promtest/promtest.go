// Package promtest runs a real Prometheus server (the Debian package
// prometheus; .ci/run installs it) as a child process for tests, and serves
// small test exporters for it to scrape. Tests that need Prometheus fail,
// not skip, without it.
package promtest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fleetwave/fleetwave/internal/natstest"
)

// Options describe what the Prometheus server scrapes.
type Options struct {
	// Targets are host:port addresses whose /metrics it scrapes, in one job.
	Targets []string
	// Job names the scrape job ("test" when empty).
	Job string
	// RuleFiles are rule files it loads (absolute paths).
	RuleFiles []string
	// Interval is the scrape and rule evaluation interval; 1s when 0.
	Interval time.Duration
}

// Server is a running Prometheus child process.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	args []string
	// Addr is host:port of its HTTP API, URL the same as a base URL.
	Addr string
	URL  string
	// API is the Prometheus Go API client on it.
	API promv1.API

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	logFile *os.File
	logPath string
}

// Start runs Prometheus with a config of its own and a data directory in
// a temporary directory, on a free port, and returns once it is ready. It
// is stopped when the test ends (its log printed if the test failed).
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not found (%v): install it (apt-get install prometheus; .ci/run does)", err)
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.Job == "" {
		o.Job = "test"
	}
	dir := t.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\n", o.Interval, o.Interval)
	if len(o.RuleFiles) > 0 {
		b.WriteString("rule_files:\n")
		for _, f := range o.RuleFiles {
			fmt.Fprintf(&b, "  - %q\n", f)
		}
	}
	fmt.Fprintf(&b, "scrape_configs:\n  - job_name: %q\n    static_configs:\n      - targets: [", o.Job)
	for i, tg := range o.Targets {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", tg)
	}
	b.WriteString("]\n")
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	s := &Server{t: t, bin: bin, dir: dir, Addr: addr, URL: "http://" + addr, logPath: filepath.Join(dir, "prometheus.log"),
		args: []string{"--config.file=" + cfgPath, "--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + addr}}
	client, err := api.NewClient(api.Config{Address: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	s.API = promv1.NewAPI(client)
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(s.logPath)
			t.Logf("--- prometheus:\n%s", tail(string(b), 3000))
		}
	})
	s.Restart()
	return s
}

// Restart starts the server again, on the same address with the same
// data, after Stop or Kill, and waits until it is ready.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		s.t.Fatal("promtest: Restart of a running Prometheus")
	}
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.mu.Unlock()
		s.t.Fatal(err)
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited, s.logFile = cmd, exited, logFile
	s.mu.Unlock()
	natstest.Eventually(s.t, 60*time.Second, func() error {
		select {
		case <-exited:
			b, _ := os.ReadFile(s.logPath)
			s.t.Fatalf("prometheus exited:\n%s", tail(string(b), 3000))
		default:
		}
		resp, err := http.Get(s.URL + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", resp.Status)
		}
		return nil
	})
}

// Stop stops the server (SIGTERM, SIGKILL after 15s) and waits until it
// has exited; its port refuses connections then. A no-op when stopped.
func (s *Server) Stop() { s.end(syscall.SIGTERM) }

// Kill kills the server at once, as a crash would, and waits until it has
// exited.
func (s *Server) Kill() { s.end(syscall.SIGKILL) }

func (s *Server) end(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.logFile.Close()
	s.cmd = nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// Exporter is a test exporter: an HTTP server whose /metrics serves the
// gauge app_error_rate{version} with the values the test sets.
type Exporter struct {
	srv  *httptest.Server
	rate *prometheus.GaugeVec
	// Addr is host:port of the server, for Options.Targets.
	Addr string
}

// ErrorRateMetric is the gauge an Exporter serves.
const ErrorRateMetric = "app_error_rate"

// NewExporter serves an exporter until the test ends.
func NewExporter(t testing.TB) *Exporter {
	t.Helper()
	reg := prometheus.NewRegistry()
	e := &Exporter{rate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: ErrorRateMetric,
		Help: "The app's error rate by version, as the test sets it.",
	}, []string{"version"})}
	reg.MustRegister(e.rate)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	e.Addr = strings.TrimPrefix(e.srv.URL, "http://")
	return e
}

// SetErrorRate sets app_error_rate{version} to v.
func (e *Exporter) SetErrorRate(version string, v float64) {
	e.rate.WithLabelValues(version).Set(v)
}

// DeleteErrorRate removes app_error_rate{version}: the series ends (Prometheus
// marks it stale at its next scrape), and a query about it has no data.
func (e *Exporter) DeleteErrorRate(version string) {
	e.rate.DeleteLabelValues(version)
}
