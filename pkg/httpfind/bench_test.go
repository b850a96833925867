package httpfind

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// reportRate adds the requests per second that b.N requests in b.Elapsed
// imply (for RunParallel, the whole process's rate, not one goroutine's).
func reportRate(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "req/s")
	}
}

// benchStore is a plan of ten active groups, as a controller holds.
func benchStore() *Store {
	st := testStatus(rollout.StateActive)
	groups := []rollout.GroupStatus{st}
	for _, g := range []string{"dev", "qa", "staging", "canary-eu", "eu-1", "eu-2", "us-1", "us-2", "ap-1"} {
		s := st.Clone()
		s.Group = g
		groups = append(groups, s)
	}
	return storeWith(rollout.DefaultSpec(v1, v2), groups...)
}

// BenchmarkDecide is the baseline: the decision alone, no HTTP.
func BenchmarkDecide(b *testing.B) {
	p := benchStore().Get()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Find(idLow, testGroup); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b)
}

// BenchmarkFind is the handler alone: parsing, validation, the decision
// and the JSON, through httptest.NewRecorder with no network.
func BenchmarkFind(b *testing.B) {
	h := &Handler{Store: benchStore(), Ready: func() error { return nil }}
	req := httptest.NewRequest(http.MethodGet, PathFind+"?host="+string(idLow)+"&group="+testGroup, nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
	reportRate(b)
}

// BenchmarkFindHTTP is the endpoint as agents see it: the Client over a
// loopback server, keep-alive connections, many goroutines at once. Client
// and server share the machine's CPUs, so the rate is a floor for a
// controller with its own.
func BenchmarkFindHTTP(b *testing.B) {
	srv := httptest.NewServer(&Handler{Store: benchStore(), Ready: func() error { return nil }})
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 256}
	defer tr.CloseIdleConnections()
	c := &Client{URLs: []string{srv.URL + PathFind}, HTTP: &http.Client{Transport: tr}}
	ids := []rollout.AgentID{idLow, idCanary, idHigh}
	b.ReportAllocs()
	b.SetParallelism(8) // requests wait on the network; more goroutines than CPUs keep both sides busy
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if _, err := c.Find(b.Context(), ids[i%len(ids)], testGroup); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportRate(b)
}
