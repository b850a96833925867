package controller

import (
	"context"
	"errors"
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

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// vectorOf is an instant-vector answer with one series per label value.
func vectorOf(value string, labels ...string) string {
	var series []string
	for _, l := range labels {
		series = append(series, fmt.Sprintf(`{"metric":{"instance":%q},"value":[1700000000,%q]}`, l, value))
	}
	return `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(series, ",") + `]}}`
}

// streamHuge writes a vector answer whose one label is n bytes, in 64 KiB
// writes (the test allocates one chunk, not n), and reports how many bytes
// the client took before it hung up.
func streamHuge(w http.ResponseWriter, n int64, announce bool) int64 {
	head, tail := `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"instance":"`, `"},"value":[1700000000,"0.5"]}]}}`
	if announce {
		w.Header().Set("Content-Length", strconv.FormatInt(int64(len(head))+n+int64(len(tail)), 10))
	}
	w.Header().Set("Content-Type", "application/json")
	sent := int64(0)
	write := func(b []byte) bool {
		k, err := w.Write(b)
		sent += int64(k)
		return err == nil
	}
	if !write([]byte(head)) {
		return sent
	}
	chunk := []byte(strings.Repeat("x", 64<<10))
	for left := n; left > 0; left -= int64(len(chunk)) {
		if !write(chunk[:min(int64(len(chunk)), left)]) {
			return sent
		}
	}
	write([]byte(tail))
	return sent
}

// TestAnalysisHostilePrometheus: what a hostile or broken Prometheus
// answers is read through bounds. A 1 GiB body, streamed or announced, is
// not read past 1 MiB; a 1.5 MB label makes the answer too large; a 900
// KiB label is cut to a small series; more than rollout.MaxSeries series
// are not judged; a redirect to another host is not followed and the other
// host never sees a request (so never the bearer token); a redirect to
// the same host is followed, with the token; a redirect loop stops; huge
// headers are refused. Each is a measurement (inconclusive, or judged),
// never an unbounded one.
func TestAnalysisHostilePrometheus(t *testing.T) {
	var otherHits atomic.Int64
	other := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
		t.Errorf("the other host got %s %s with Authorization %q", r.Method, r.URL, r.Header.Get("Authorization"))
		_, _ = io.WriteString(w, vectorOf("0", "other"))
	}))
	// Another address than Prometheus's, as another host is.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	other.Listener = ln
	other.Start()
	t.Cleanup(other.Close)

	var mu sync.Mutex
	auth := map[string][]string{} // path → Authorization headers seen
	var streamed atomic.Int64
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		q := r.Form.Get("query")
		mu.Lock()
		auth[r.URL.Path] = append(auth[r.URL.Path], r.Header.Get("Authorization"))
		mu.Unlock()
		switch {
		case r.URL.Path == "/moved/api/v1/query":
			_, _ = io.WriteString(w, vectorOf("0.001", "moved"))
		case q == "huge_body":
			streamed.Store(streamHuge(w, 1<<30, false))
		case q == "huge_announced":
			streamed.Store(streamHuge(w, 1<<30, true))
		case q == "label_1500k":
			streamHuge(w, 1500<<10, false)
		case q == "label_900k":
			_, _ = io.WriteString(w, vectorOf("0.5", strings.Repeat("é", 450<<10), "b"))
		case q == "many_series":
			var ls []string
			for i := range rollout.MaxSeries + 1 {
				ls = append(ls, fmt.Sprint(i))
			}
			_, _ = io.WriteString(w, vectorOf("0", ls...))
		case q == "other_host":
			http.Redirect(w, r, other.URL+"/api/v1/query?query=up", http.StatusTemporaryRedirect)
		case q == "same_host":
			http.Redirect(w, r, "/moved/api/v1/query", http.StatusTemporaryRedirect)
		case q == "loop":
			http.Redirect(w, r, r.URL.Path, http.StatusTemporaryRedirect)
		case q == "huge_header":
			w.Header().Set("X-Junk", strings.Repeat("j", 128<<10))
			_, _ = io.WriteString(w, vectorOf("0", "a"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(prom.Close)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := testAnalyzer(t)
	client := a.clientFor(rollout.AnalysisConfig{PrometheusURL: prom.URL, PrometheusBearerTokenFile: token})

	for _, tc := range []struct {
		query   string
		err     string // the measurement's error has it; "" for none
		samples int
		series  int // the longest series at most
	}{
		{query: "huge_body", err: "answer larger than 1048576 bytes: not read"},
		{query: "huge_announced", err: "answer larger than 1048576 bytes: not read"},
		{query: "label_1500k", err: "answer larger than 1048576 bytes: not read"},
		{query: "label_900k", samples: 2, series: rollout.MaxSeriesLen + len("…")},
		{query: "many_series", err: "the query returned 11 series, at most 10"},
		{query: "other_host", err: "Prometheus " + prom.URL + " redirected to another host: not followed (to " + other.URL + "): set prometheus_url"},
		{query: "same_host", samples: 1, series: 20},
		{query: "loop", err: "stopped after 3 redirects"},
		{query: "huge_header", err: "server response headers exceeded 65536 bytes"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			m := a.measure(context.Background(), client, "default", "prod", checkStatus(tc.query), time.Now())
			if tc.err == "" && m.Error != "" || !strings.Contains(m.Error, tc.err) {
				t.Fatalf("error %q, want %q", m.Error, tc.err)
			}
			if len(m.Error) > maxQueryErrorLen+len("…") {
				t.Errorf("error of %d bytes", len(m.Error))
			}
			if len(m.Samples) != tc.samples {
				t.Fatalf("%d samples, want %d", len(m.Samples), tc.samples)
			}
			for _, s := range m.Samples {
				if len(s.Series) > tc.series {
					t.Errorf("series of %d bytes, want at most %d: %.80s…", len(s.Series), tc.series, s.Series)
				}
			}
		})
	}
	if n := streamed.Load(); n > 64<<20 {
		t.Errorf("the 1 GiB body: %d bytes sent before the controller hung up, want it to stop reading at 1 MiB", n)
	}
	if n := otherHits.Load(); n != 0 {
		t.Errorf("the other host got %d requests, want 0", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for path, got := range auth {
		for _, h := range got {
			if h != "Bearer s3cret" {
				t.Errorf("%s got Authorization %q, want the token (the configured host)", path, h)
			}
		}
	}
	if len(auth["/moved/api/v1/query"]) != 1 {
		t.Errorf("the same-host redirect's target got %d requests, want 1", len(auth["/moved/api/v1/query"]))
	}
}

// TestAnalysisQueriesBounded: however many checks are due, at most
// maxQueries queries run at once.
func TestAnalysisQueriesBounded(t *testing.T) {
	var now, most atomic.Int64
	release := make(chan struct{})
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		defer now.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		_, _ = io.WriteString(w, vectorOf("0", "a"))
	}))
	t.Cleanup(prom.Close)
	a := testAnalyzer(t)
	cfg := rollout.Config{AnalysisConfig: rollout.AnalysisConfig{PrometheusURL: prom.URL}}
	st := rollout.GroupStatus{State: rollout.StateActive}
	for i := range 12 {
		cs := checkStatus("up")
		cs.Name = fmt.Sprint("c", i)
		cs.Interval = rollout.Duration(5 * time.Second)
		st.Analysis = append(st.Analysis, cs)
	}
	a.schedule(defaultNS, cfg, "prod", st, time.Now())
	natstest.Eventually(t, 10*time.Second, func() error {
		if n := now.Load(); n < maxQueries {
			return fmt.Errorf("%d queries running", n)
		}
		return nil
	})
	// Not an outcome awaited: a window in which a query beyond the bound,
	// all of them started at once, would arrive.
	if natstest.Within(300*time.Millisecond, func() error {
		if most.Load() > maxQueries {
			return nil
		}
		return errors.New("still bounded")
	}) == nil {
		t.Errorf("%d queries at once, want %d", most.Load(), maxQueries)
	}
	close(release)
	a.stop()
	if got := most.Load(); got != maxQueries {
		t.Errorf("%d queries at once, want %d", got, maxQueries)
	}
	if got := len(a.take(defaultNS, "prod")); got != 12 {
		t.Errorf("%d measurements, want 12", got)
	}
}
