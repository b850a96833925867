package httpfind

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Versions and ids the tests use. Fractions: idLow 0, idCanary 0.75,
// idHigh 0.9375; progress in the tests is 0.5, so idLow is below it and the
// others above.
const (
	v1 = "1.3.2"
	v2 = "1.4.0"

	idLow    rollout.AgentID = "00000000-0000-4000-8000-000000000001"
	idCanary rollout.AgentID = "c0000000-0000-4000-8000-00000000000c"
	idHigh   rollout.AgentID = "f0000000-0000-4000-8000-00000000000f"

	testGroup = "prod"
)

// testStatus is a status of testGroup for spec target v2 in state, with
// idCanary as its one canary and progress 0.5.
func testStatus(state rollout.State) rollout.GroupStatus {
	return rollout.GroupStatus{
		V:             rollout.SchemaVersion,
		Group:         testGroup,
		State:         state,
		Reason:        "test",
		TargetVersion: v2,
		StartVersion:  v1,
		InitialCount:  10,
		Canaries:      []rollout.Canary{{ID: idCanary}},
		Progress:      0.5,
		JitterSeconds: 17,
	}
}

// storeWith is a Store holding spec and the given statuses.
func storeWith(spec rollout.Spec, groups ...rollout.GroupStatus) *Store {
	s := &Store{}
	p := Plan{Spec: spec, HasSpec: true, Groups: map[string]rollout.GroupStatus{}}
	for _, st := range groups {
		p.Groups[st.Group] = st
	}
	s.Set(p)
	return s
}

// serve starts h on a loopback httptest server closed at cleanup.
func serve(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// deadURL is the URL of a port nothing listens on any more.
func deadURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + PathFind
}

// get does a GET of url and returns the response (body closed at cleanup).
func get(t testing.TB, c *http.Client, method, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}
