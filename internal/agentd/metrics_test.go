package agentd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/version"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/test/releases"
)

// parseMetrics reads the Prometheus text format into samples keyed by name
// and sorted labels: name{a="x",b="y"}.
func parseMetrics(r io.Reader) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out, nil
}

func scrapeAgent(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// want checks samples against want, returning the differences.
func wantSamples(samples map[string]float64, want map[string]float64) error {
	var diffs []string
	for k, v := range want {
		if got, ok := samples[k]; !ok || got != v {
			diffs = append(diffs, fmt.Sprintf("%s = %v (present %v), want %v", k, got, ok, v))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		return fmt.Errorf("%s", strings.Join(diffs, "; "))
	}
	return nil
}

// TestAgentdMetrics (issue 14 point 1): "agentd run --metrics-addr
// --metrics-textfile" serves and writes the installed version, the last
// install's result and duration, installs and rollbacks, the bus
// connection, fallback and download bytes, through an install and a
// rollback; the textfile is a valid exposition that node_exporter can read.
func TestAgentdMetrics(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	rel := releaseServer(t, map[string]releases.Behaviour{"2.0.0": releases.Good, "3.0.0": releases.Crash})
	setPlan(t, ctx, fleet, "1.0.0", "2.0.0")
	root := t.TempDir()
	uf := install.NewUpdateFile("blue")
	uf.Spec.Enabled = true
	if err := uf.Save(root); err != nil {
		t.Fatal(err)
	}
	textfile := filepath.Join(t.TempDir(), "agentd.prom")
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	d := startAgentd(t, bin, "run", "--root", root, "--nats", srv.URL(), "--url-template", releases.URLTemplate(rel.URL),
		"--bin-dir", filepath.Join(root, "bin"), "--process", "app", "--metrics-addr", addr, "--metrics-textfile", textfile)
	url := "http://" + addr + "/metrics"

	natstest.Eventually(t, 30*time.Second, func() error {
		s, err := scrapeAgent(url)
		if err != nil {
			return err
		}
		if s["fleetwave_agent_download_bytes_total"] <= 0 {
			return fmt.Errorf("no download bytes counted")
		}
		return wantSamples(s, map[string]float64{
			`fleetwave_agent_info{agentd_version="` + version.Version + `",group="blue",version="2.0.0"}`: 1,
			`fleetwave_agent_installs_total{result="ok"}`:                                                 1,
			`fleetwave_agent_installs_total{result="failed"}`:                                             0,
			"fleetwave_agent_last_install_success":                                                        1,
			"fleetwave_agent_rollbacks_total":                                                             0,
			"fleetwave_agent_bus_connected":                                                               1,
			"fleetwave_agent_fallback":                                                                    0,
		})
	})

	setPlan(t, ctx, fleet, "2.0.0", "3.0.0") // 3.0.0 crashes: rolled back
	final := map[string]float64{
		`fleetwave_agent_info{agentd_version="` + version.Version + `",group="blue",version="2.0.0"}`: 1,
		`fleetwave_agent_installs_total{result="ok"}`:                                                 1,
		`fleetwave_agent_installs_total{result="failed"}`:                                             1,
		"fleetwave_agent_last_install_success":                                                        0,
		"fleetwave_agent_rollbacks_total":                                                             1,
	}
	natstest.Eventually(t, 30*time.Second, func() error {
		s, err := scrapeAgent(url)
		if err != nil {
			return err
		}
		if s["fleetwave_agent_last_install_duration_seconds"] <= 0 {
			return fmt.Errorf("no install duration")
		}
		return wantSamples(s, final)
	})
	// The textfile is written after the install: the same figures.
	natstest.Eventually(t, 10*time.Second, func() error {
		b, err := os.ReadFile(textfile)
		if err != nil {
			return err
		}
		s, err := parseMetrics(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("textfile: %v\n%s", err, b)
		}
		return wantSamples(s, final)
	})
	if fi, err := os.Stat(textfile); err != nil || fi.Mode().Perm()&0o044 != 0o044 {
		t.Errorf("textfile mode %v (%v): node_exporter's user must read it", fi.Mode(), err)
	}
	// Stopped, agentd leaves a file that says it is off the bus.
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.wait(t, 20*time.Second); code != 0 {
		t.Errorf("agentd exited %d on SIGTERM", code)
	}
	b, err := os.ReadFile(textfile)
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseMetrics(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := wantSamples(s, map[string]float64{"fleetwave_agent_bus_connected": 0, "fleetwave_agent_rollbacks_total": 1}); err != nil {
		t.Errorf("textfile after stop: %v", err)
	}
}

// TestAgentdMetricsFlagsChecked: a bad --metrics-textfile or --metrics-addr
// is a usage error (exit 2), and a --metrics-addr port in use exit 1,
// before anything is written: update.yaml stays
// byte-identical, agent_id is not drawn, and no textfile appears.
func TestAgentdMetricsFlagsChecked(t *testing.T) {
	bin := buildAgentd(t)
	root := t.TempDir()
	if err := install.NewUpdateFile("blue").Save(root); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(root, "update.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for name, args := range map[string][]string{
		"missing dir":  {"--metrics-textfile", filepath.Join(dir, "nope", "agentd.prom")},
		"not .prom":    {"--metrics-textfile", filepath.Join(dir, "agentd.txt")},
		"a directory":  {"--metrics-textfile", dir + "/x.prom/"},
		"bad addr":     {"--metrics-addr", "9469"},
		"port too big": {"--metrics-addr", "127.0.0.1:99999"},
		"port in use":  {"--metrics-addr", busy.Addr().String()},
	} {
		if name == "a directory" {
			if err := os.Mkdir(filepath.Join(dir, "x.prom"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(bin, append([]string{"run", "--root", root, "--nats", "nats://127.0.0.1:1", "--group", "green"}, args...)...)
		out, err := cmd.CombinedOutput()
		want := 2
		if name == "port in use" {
			want = 1 // the system's error, not the invocation's
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != want {
			t.Errorf("%s: %v, want exit %d\n%s", name, err, want, out)
		}
		if !strings.Contains(string(out), "--metrics-") {
			t.Errorf("%s: the error does not name the flag:\n%s", name, out)
		}
		after, _ := os.ReadFile(filepath.Join(root, "update.yaml"))
		if !bytes.Equal(before, after) {
			t.Errorf("%s: update.yaml changed:\n%s", name, after)
		}
		if _, err := os.Stat(filepath.Join(root, "agent_id")); err == nil {
			t.Errorf("%s: agent_id was drawn", name)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files appeared beside the textfile: %v", entries)
	}
}
