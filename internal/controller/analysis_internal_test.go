package controller

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/model"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// fakePrometheus answers /api/v1/query as Prometheus does (the outside
// world: a real Prometheus cannot check a bearer token), recording the
// Authorization headers it got.
type fakePrometheus struct {
	mu     sync.Mutex
	auth   []string
	status int
	body   string
}

func (f *fakePrometheus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	if r.URL.Path != "/api/v1/query" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.status)
	_, _ = io.WriteString(w, f.body)
}

func testAnalyzer(t *testing.T) *analyzer {
	t.Helper()
	c, err := New(&kv.Fleet{}, Options{ID: "t", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return c.an
}

func checkStatus(query string) rollout.CheckStatus {
	return rollout.CheckStatus{Name: "errors", Query: query, Success: "< 0.01", Interval: rollout.Duration(time.Second)}
}

// TestAnalysisClientTLSAndBearer: the client checks the server against
// prometheus_ca_file and sends the token of prometheus_bearer_token_file,
// read again on every query (a rotated token is used at once); a server
// it cannot verify is an inconclusive measurement naming the error.
func TestAnalysisClientTLSAndBearer(t *testing.T) {
	fake := &fakePrometheus{status: http.StatusOK,
		body: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"instance":"b"},"value":[1700000000,"0.5"]},{"metric":{"instance":"a"},"value":[1700000000,"0.002"]}]}}`}
	srv := httptest.NewTLSServer(fake)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := testAnalyzer(t)
	settings := rollout.AnalysisConfig{PrometheusURL: srv.URL, PrometheusCAFile: ca, PrometheusBearerTokenFile: token}
	client := a.clientFor(settings)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := a.measure(context.Background(), client, "default", "prod", checkStatus("up"), at)
	want := rollout.Measurement{Group: "prod", Check: "errors", Query: "up", At: at,
		Samples: []rollout.Sample{{Series: `{instance="a"}`, Value: 0.002}, {Series: `{instance="b"}`, Value: 0.5}}}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("measurement (-want +got):\n%s", diff)
	}
	if err := os.WriteFile(token, []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.measure(context.Background(), client, "default", "prod", checkStatus("up"), at)
	fake.mu.Lock()
	if diff := cmp.Diff([]string{"Bearer first", "Bearer second"}, fake.auth); diff != "" {
		t.Errorf("Authorization headers (-want +got):\n%s", diff)
	}
	fake.mu.Unlock()
	if again := a.clientFor(settings); again.api != client.api {
		t.Error("the client was built again for the same settings")
	}

	noCA := a.clientFor(rollout.AnalysisConfig{PrometheusURL: srv.URL})
	m = a.measure(context.Background(), noCA, "default", "prod", checkStatus("up"), at)
	if !strings.Contains(m.Error, "Prometheus "+srv.URL+" unreachable") || !strings.Contains(m.Error, "certificate") {
		t.Errorf("unverified server: error %q", m.Error)
	}
	bad := a.clientFor(rollout.AnalysisConfig{PrometheusURL: srv.URL, PrometheusCAFile: filepath.Join(dir, "missing.pem")})
	m = a.measure(context.Background(), bad, "default", "prod", checkStatus("up"), at)
	if !strings.HasPrefix(m.Error, "prometheus_ca_file: open ") {
		t.Errorf("missing CA file: error %q", m.Error)
	}
}

// TestAnalysisQueryErrors: what Prometheus answers becomes a measurement's
// samples or its error.
func TestAnalysisQueryErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  int
		body    string
		samples []rollout.Sample
		err     string
	}{
		{"empty vector: no data", 200, `{"status":"success","data":{"resultType":"vector","result":[]}}`, []rollout.Sample{}, ""},
		{"scalar", 200, `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"3"]}}`, []rollout.Sample{{Value: 3}}, ""},
		{"range vector", 200, `{"status":"success","data":{"resultType":"matrix","result":[]}}`, nil,
			"the query returned a matrix; want an instant vector or a scalar"},
		{"bad query", 400, `{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected end of input"}`, nil,
			"answered bad_data: 1:5: parse error: unexpected end of input"},
		{"server error", 503, `Service Unavailable`, nil, "answered server_error: server error: 503"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakePrometheus{status: tc.status, body: tc.body}
			srv := httptest.NewServer(fake)
			defer srv.Close()
			a := testAnalyzer(t)
			m := a.measure(context.Background(), a.clientFor(rollout.AnalysisConfig{PrometheusURL: srv.URL}), "default", "prod", checkStatus("up"), time.Now())
			if tc.err == "" && m.Error != "" || !strings.Contains(m.Error, tc.err) {
				t.Errorf("error %q, want %q", m.Error, tc.err)
			}
			if diff := cmp.Diff(tc.samples, m.Samples); diff != "" {
				t.Errorf("samples (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := samplesOf(make(model.Vector, rollout.MaxSeries+1)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d series, at most %d", rollout.MaxSeries+1, rollout.MaxSeries)) {
		t.Errorf("too many series: %v", err)
	}
}

// TestAnalysisScheduleOncePerInterval: a check is queried once per
// interval, not once per rollout pass, even before its result is judged;
// a measurement given back is taken again.
func TestAnalysisScheduleOncePerInterval(t *testing.T) {
	fake := &fakePrometheus{status: 200, body: `{"status":"success","data":{"resultType":"vector","result":[]}}`}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	a := testAnalyzer(t)
	cfg := rollout.Config{AnalysisConfig: rollout.AnalysisConfig{PrometheusURL: srv.URL}}
	now := time.Now()
	st := rollout.GroupStatus{State: rollout.StateActive, Analysis: []rollout.CheckStatus{checkStatus("up")}}
	a.schedule(defaultNS, cfg, "prod", st, now)
	a.schedule(defaultNS, cfg, "prod", st, now.Add(300*time.Millisecond)) // running or just measured: not again
	a.stop()
	a.schedule(defaultNS, cfg, "prod", st, now.Add(600*time.Millisecond)) // measured, not judged yet: not again
	a.stop()
	ms := a.take(defaultNS, "prod")
	if len(ms) != 1 || !ms[0].At.Equal(now) {
		t.Fatalf("measurements %+v, want one at %v", ms, now)
	}
	a.putBack(defaultNS, "prod", ms)
	if again := a.take(defaultNS, "prod"); len(again) != 1 {
		t.Errorf("given back: %d measurements", len(again))
	}
	a.schedule(defaultNS, cfg, "prod", st, now.Add(time.Second)) // an interval later
	a.stop()
	if got := a.take(defaultNS, "prod"); len(got) != 1 {
		t.Errorf("an interval later: %d measurements, want 1", len(got))
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.auth) != 2 {
		t.Errorf("%d queries, want 2", len(fake.auth))
	}
}

// defaultNS is the namespace of a config without apps: the default app's.
var defaultNS = kv.DefaultNS(rollout.DefaultConfig())
