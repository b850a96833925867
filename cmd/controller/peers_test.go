package main_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The peers of the controller that it does not trust (docs/security.md):
// Prometheus and whoever reaches its HTTP port. These tests run the real
// controller binary, with its embedded NATS server, against them.

// statusLimit is rollout.MaxStatusBytes, written out so that this file
// builds against older code too (to show the tests fail there).
const statusLimit = 64 << 10

// peakRSS is the controller's peak resident set (VmHWM of
// /proc/<pid>/status), in bytes.
func peakRSS(t *testing.T, p *proc) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("read the controller's memory: %v", err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}

// hostilePrometheus answers each check's query as a hostile Prometheus
// would (the query names the attack), and counts what it was asked.
type hostilePrometheus struct {
	srv   *httptest.Server
	other *httptest.Server // another host, a redirect's target

	hugeBodies atomic.Int64 // 1 GiB answers begun
	otherHits  atomic.Int64
	mu         sync.Mutex
	auth       map[string]map[string]bool // path → Authorization headers seen
	otherAuth  []string
}

func startHostilePrometheus(t *testing.T) *hostilePrometheus {
	t.Helper()
	p := &hostilePrometheus{auth: map[string]map[string]bool{}}
	p.other = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.otherHits.Add(1)
		p.mu.Lock()
		p.otherAuth = append(p.otherAuth, r.Header.Get("Authorization"))
		p.mu.Unlock()
		_, _ = io.WriteString(w, vector("0.001", "elsewhere"))
	}))
	ln, err := net.Listen("tcp", "127.0.0.2:0") // another address: another host
	if err != nil {
		t.Fatal(err)
	}
	p.other.Listener = ln
	p.other.Start()
	t.Cleanup(p.other.Close)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		p.mu.Lock()
		if p.auth[r.URL.Path] == nil {
			p.auth[r.URL.Path] = map[string]bool{}
		}
		p.auth[r.URL.Path][r.Header.Get("Authorization")] = true
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch q := r.Form.Get("query"); {
		case r.URL.Path == "/moved/api/v1/query":
			_, _ = io.WriteString(w, vector("0.001", "moved"))
		case q == "label_1500k": // a failing value under a 1.5 MB label
			streamVector(w, 1500<<10, "0.5")
		case q == "label_900k": // the same under a label that fits in 1 MiB
			streamVector(w, 900<<10, "0.5")
		case q == "body_1g": // 1 GiB, streamed
			p.hugeBodies.Add(1)
			streamVector(w, 1<<30, "0.001")
		case q == "redirect_other":
			http.Redirect(w, r, p.other.URL+"/api/v1/query?query=up", http.StatusTemporaryRedirect)
		case q == "redirect_same":
			http.Redirect(w, r, "/moved/api/v1/query", http.StatusTemporaryRedirect)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// vector is an instant-vector answer of one series.
func vector(value, instance string) string {
	return fmt.Sprintf(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"instance":%q},"value":[1700000000,%q]}]}}`, instance, value)
}

// streamVector writes an answer of two series, a good one and one of
// value whose label is n bytes, 64 KiB at a time (never n bytes in
// memory), until the client hangs up. (With several series, the deciding
// one is named in the check's status.)
func streamVector(w http.ResponseWriter, n int64, value string) {
	if _, err := io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"instance":"a"},"value":[1700000000,"0.001"]},{"metric":{"instance":"`); err != nil {
		return
	}
	chunk := []byte(strings.Repeat("x", 64<<10))
	for left := n; left > 0; left -= int64(len(chunk)) {
		if _, err := w.Write(chunk[:min(int64(len(chunk)), left)]); err != nil {
			return
		}
	}
	_, _ = fmt.Fprintf(w, `"},"value":[1700000000,%q]}]}}`, value)
}

// simAgents are hosts that do at once what rollout.Decide tells them and
// heartbeat every 200ms, two per group.
type simAgents struct {
	mu       sync.Mutex
	group    map[rollout.AgentID]string
	versions map[rollout.AgentID]string
}

func runSimAgents(ctx context.Context, t *testing.T, nc *nats.Conn, fleet *kv.Fleet, groups []string) *simAgents {
	a := &simAgents{group: map[rollout.AgentID]string{}, versions: map[rollout.AgentID]string{}}
	for _, g := range groups {
		for range 2 {
			id, err := rollout.NewAgentID(nil)
			if err != nil {
				t.Fatal(err)
			}
			a.group[id], a.versions[id] = g, "1.0.0"
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for seq := uint64(1); ; seq++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			state, err := fleet.ReadState(ctx)
			a.mu.Lock()
			for id, g := range a.group {
				if err == nil && state.HasSpec {
					if st, ok := state.Groups[g]; ok {
						if to, update := rollout.Decide(id, state.Spec.Value, st.Value, st.Value.Mode); update && rollout.Act(a.versions[id], to, update) {
							a.versions[id] = to
						}
					}
				}
				hb := heartbeat.Heartbeat{V: heartbeat.SchemaVersion, AgentID: id, Hostname: "host-" + string(id[:8]), Group: g,
					ActiveVersion: a.versions[id], At: time.Now().UTC(), Seq: seq}
				if data, err := heartbeat.Encode(&hb); err == nil {
					_ = nc.Publish(heartbeat.SubjectFor(g, id), data)
				}
			}
			a.mu.Unlock()
		}
	})
	return a
}

// TestHostilePrometheus (issue 24 point 6): the real controller, its
// checks against a hostile Prometheus, one group per attack and a calm
// group after them in the evaluation order:
//
//   - h-label: a failing value under a 1.5 MB label (more than the bus's
//     max payload: the status write failed every pass and Reconcile
//     returned there): the answer is over 1 MiB, not read: inconclusive,
//     the group holds.
//   - h-cut: a failing value under a 900 KiB label: the group halts, the
//     label cut to a few hundred bytes.
//   - h-body: a 1 GiB body, streamed: not read past 1 MiB: inconclusive.
//   - h-redirect: a redirect to another host, with a bearer token
//     configured: not followed; the other host gets no request at all.
//   - h-same: a redirect to the same host (a proxy moving the API): it is
//     followed, with the token (the host it is for), and the group passes.
//   - calm: no checks; it must finish while the others are hostile.
//
// Throughout, the controller's peak RSS stays under 150 MB and every
// group status under 64 KiB.
func TestHostilePrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the controller against a hostile Prometheus for ~30s")
	}
	prom := startHostilePrometheus(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "prom-token")
	if err := os.WriteFile(token, []byte("tok-7f3a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := natstest.FreePort(t)
	ctl := startController(t, nil, runArgs(filepath.Join(dir, "nats"), port)...)
	waitReady(t, port)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nc, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{URL: "nats://" + listen(port), Log: natstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	fleet, err := kv.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}

	attacks := map[string]string{"h-label": "label_1500k", "h-cut": "label_900k", "h-body": "body_1g",
		"h-redirect": "redirect_other", "h-same": "redirect_same"}
	order := []string{"h-label", "h-cut", "h-body", "h-redirect", "h-same", "calm"}
	cfg := rollout.DefaultConfig()
	cfg.Groups = nil
	for _, name := range order {
		g := rollout.DefaultGroup(name)
		g.CanaryCount, g.MaxInFlight, g.MinHealthyTime = 1, 100, 0
		g.DependsOn = []string{} // independent: each starts at once
		if q, ok := attacks[name]; ok {
			g.Analysis = []rollout.Check{{Name: "errors", Query: q, Success: "< 0.05", Interval: rollout.Duration(time.Second),
				Count: 1, InconclusiveLimit: rollout.MaxInconclusiveLimit}}
		}
		cfg.Groups = append(cfg.Groups, g)
	}
	cfg.PrometheusURL, cfg.PrometheusBearerTokenFile = prom.srv.URL, token
	if _, err := kv.Save(ctx, fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	runSimAgents(ctx, t, nc, fleet, order)
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true
	if _, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}

	holds := func(detail string) func(rollout.GroupStatus) error {
		return func(st rollout.GroupStatus) error {
			if st.Halted || st.State != rollout.StateCanary || len(st.Analysis) != 1 {
				return fmt.Errorf("%s halted=%v: want canary, holding", st.State, st.Halted)
			}
			if c := st.Analysis[0]; c.Inconclusive < 2 || !strings.Contains(c.Detail, detail) {
				return fmt.Errorf("check %d inconclusive in a row, detail %.200q: want 2 or more with %q", c.Inconclusive, c.Detail, detail)
			}
			return nil
		}
	}
	want := map[string]func(rollout.GroupStatus) error{
		"h-label":    holds("answer larger than 1048576 bytes: not read"),
		"h-body":     holds("answer larger than 1048576 bytes: not read"),
		"h-redirect": holds("redirected to another host: not followed (to " + prom.other.URL + ")"),
		"h-cut": func(st rollout.GroupStatus) error {
			if !st.Halted || !strings.HasPrefix(st.HaltReason, `analysis failed: check "errors" measured 0.5`) {
				return fmt.Errorf("halted=%v %.200q: want halted by the check", st.Halted, st.HaltReason)
			}
			if n := len(st.Analysis[0].Series); n > 300 {
				return fmt.Errorf("the check's series is %d bytes: want the label cut", n)
			}
			return nil
		},
		"h-same": func(st rollout.GroupStatus) error {
			if st.State != rollout.StateDone || st.Halted {
				return fmt.Errorf("%s halted=%v: want done (the same-host redirect followed)", st.State, st.Halted)
			}
			return nil
		},
		"calm": func(st rollout.GroupStatus) error {
			if st.State != rollout.StateDone {
				return fmt.Errorf("%s: want done while the others are hostile", st.State)
			}
			return nil
		},
	}
	const rssLimit = 150 << 20
	var peak int64
	natstest.Eventually(t, 90*time.Second, func() error {
		if peak = peakRSS(t, ctl); peak >= rssLimit {
			t.Fatalf("the controller's peak RSS is %d MB, want under 150 MB", peak>>20)
		}
		var errs []string
		for _, g := range order {
			raw, err := fleet.Plan.Get(ctx, kv.GroupKey(g))
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", g, err))
				continue
			}
			if n := len(raw.Value()); n >= statusLimit {
				t.Fatalf("%s's status is %d bytes, want under %d", g, n, statusLimit)
			}
			st, err := kv.DecodeGroupStatus(kv.GroupKey(g), raw.Value())
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", g, err))
				continue
			}
			if err := want[g](st); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", g, err))
			}
		}
		if n := prom.hugeBodies.Load(); n < 5 {
			errs = append(errs, fmt.Sprintf("%d answers of 1 GiB begun, want 5 or more", n))
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "\n"))
		}
		return nil
	})
	if peak = peakRSS(t, ctl); peak >= rssLimit {
		t.Errorf("the controller's peak RSS is %d MB, want under 150 MB", peak>>20)
	}
	t.Logf("the controller's peak RSS (VmHWM): %.1f MB after %d answers of 1 GiB begun", float64(peak)/(1<<20), prom.hugeBodies.Load())

	prom.mu.Lock()
	defer prom.mu.Unlock()
	if n := prom.otherHits.Load(); n != 0 {
		t.Errorf("the other host got %d requests (Authorization %q), want 0", n, prom.otherAuth)
	}
	for path, seen := range prom.auth {
		for h := range seen {
			if h != "Bearer tok-7f3a" {
				t.Errorf("%s got Authorization %q, want the token", path, h)
			}
		}
	}
	if !prom.auth["/moved/api/v1/query"]["Bearer tok-7f3a"] {
		t.Error("the same-host redirect's target never got the query with the token")
	}
}

// httpPaths are every kind of path the HTTP port serves.
var httpPaths = []string{"/", "/ui/app.js", "/api/v1/status", "/api/v1/agents", "/api/v1/timeline", "/api/v1/stream",
	"/v1/find?host=0f3e5a52-5b7d-4a57-9a52-0d6b8c0f3e5a&group=default", "/metrics", "/healthz", "/readyz"}

func isDashboardPath(p string) bool {
	return p == "/" || strings.HasPrefix(p, "/ui/") || strings.HasPrefix(p, "/api/")
}

// statusFor GETs path from addr with Host host (and a browser's Fetch
// Metadata when browser) and returns the status code, reading only the
// head of the answer (the stream never ends).
func statusFor(t *testing.T, addr, path, host string, browser bool) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if browser {
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.Header.Set("Sec-Fetch-Mode", "cors")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", path, host, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// startHTTPController runs the controller with --http-addr on a free
// loopback port (and more flags) and returns that address once it answers.
func startHTTPController(t *testing.T, more ...string) (*proc, string) {
	t.Helper()
	httpAddr := listen(natstest.FreePort(t))
	port := natstest.FreePort(t)
	p := startController(t, nil, runArgs(filepath.Join(t.TempDir(), "nats"), port, append([]string{"--http-addr", httpAddr}, more...)...)...)
	waitReady(t, port)
	natstest.Eventually(t, 30*time.Second, func() error {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz: %s", resp.Status)
		}
		return nil
	})
	return p, httpAddr
}

// TestHTTPHostAllowlist (issue 24 point 7): DNS rebinding sends a name the
// attacker owns as Host. The controller answers it 421 on every path a
// browser asks for, and on the dashboard's paths for any client; with
// --http-allowed-hosts, on every path for every client. Agents and
// Prometheus reaching /v1/find and /metrics by a name of their own keep
// working without the flag; IP addresses and localhost always answer.
func TestHTTPHostAllowlist(t *testing.T) {
	t.Parallel()
	_, addr := startHTTPController(t)
	_, port, _ := net.SplitHostPort(addr)
	_, listed := startHTTPController(t, "--http-allowed-hosts", "fleet.example.com")
	for _, tc := range []struct {
		name    string
		addr    string
		host    string
		browser bool
		refused func(path string) bool
	}{
		{"default: evil.example from a browser", addr, "evil.example", true, func(string) bool { return true }},
		{"default: evil.example:port from a browser", addr, "evil.example:" + port, true, func(string) bool { return true }},
		{"default: evil.example from an agent", addr, "evil.example", false, isDashboardPath},
		{"default: localhost", addr, "localhost:" + port, true, func(string) bool { return false }},
		{"default: the address", addr, addr, true, func(string) bool { return false }},
		{"listed: evil.example from an agent", listed, "evil.example", false, func(string) bool { return true }},
		{"listed: the name", listed, "fleet.example.com", true, func(string) bool { return false }},
		{"listed: the address", listed, listed, false, func(string) bool { return false }},
	} {
		for _, p := range httpPaths {
			got := statusFor(t, tc.addr, p, tc.host, tc.browser)
			if refused := got == http.StatusMisdirectedRequest; refused != tc.refused(p) {
				t.Errorf("%s: GET %s: %d, want 421: %v", tc.name, p, got, tc.refused(p))
			}
		}
	}
}

// TestSSEIdleConnectionsFromOnePeer (issue 24 point 7): 300 connections to
// the live stream from one address that never read do not keep a viewer at
// another address out: one address holds at most 16 streams.
func TestSSEIdleConnectionsFromOnePeer(t *testing.T) {
	t.Parallel()
	_, addr := startHTTPController(t)
	var ok, busy int
	for i := range 300 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}, Timeout: 10 * time.Second}
		conn, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := fmt.Fprintf(conn, "GET /api/v1/stream HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
			t.Fatal(err)
		}
		// The status line only: then the connection sits, unread.
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		switch {
		case strings.Contains(line, " 200 "):
			ok++
		case strings.Contains(line, " 503 "):
			busy++
		default:
			t.Fatalf("connection %d: %q", i, line)
		}
	}
	if ok > 16 || ok+busy != 300 {
		t.Errorf("one address got %d streams (%d refused), want at most 16", ok, busy)
	}

	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	viewer := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/stream", nil)
	resp, err := viewer.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("a viewer at another address: %s %s", resp.Status, body)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if sc.Text() == "event: status" {
			return
		}
	}
	t.Fatalf("the viewer's stream ended without a status event: %v", sc.Err())
}
