package httpfind

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestFindEqualsDecide is DESIGN §5's promise: over real HTTP, through the
// handler and the Client, the find answer is rollout.Decide on the same
// spec and status with the status's mode, as agentd computes it from the
// bus — for every state, halted or not, every mode wherever it is set, a
// stale status, a group the plan does not know, and agents that are a
// canary, below progress and above it.
func TestFindEqualsDecide(t *testing.T) {
	store := &Store{}
	srv := serve(t, &Handler{Store: store})
	client := &Client{URLs: []string{srv.URL + PathFind}}

	type modes struct {
		name         string
		spec, status rollout.Mode
	}
	allModes := []modes{
		{"enabled", rollout.ModeEnabled, ""},
		{"enabled-both", rollout.ModeEnabled, rollout.ModeEnabled},
		{"spec-empty", "", ""},
		{"spec-paused", rollout.ModePaused, ""},
		{"spec-disabled", rollout.ModeDisabled, ""},
		{"status-paused", rollout.ModeEnabled, rollout.ModePaused},
		{"status-disabled", rollout.ModeEnabled, rollout.ModeDisabled},
		{"spec-paused-status-disabled", rollout.ModePaused, rollout.ModeDisabled},
		{"spec-unknown", "bogus", ""},
		{"status-unknown", rollout.ModeEnabled, "bogus"},
	}
	states := []rollout.State{rollout.StateUnstarted, rollout.StateCanary, rollout.StateActive,
		rollout.StateDone, rollout.StateRolledBack, "nonsense"}
	ids := []rollout.AgentID{idCanary, idLow, idHigh}

	type tcase struct {
		name   string
		spec   rollout.Spec
		status *rollout.GroupStatus // nil: the plan has no status for the group
	}
	var cases []tcase
	for _, m := range allModes {
		spec := rollout.DefaultSpec(v1, v2)
		spec.Mode = m.spec
		for _, state := range states {
			for _, halted := range []bool{false, true} {
				for _, stale := range []bool{false, true} {
					st := testStatus(state)
					st.Mode, st.Halted = m.status, halted
					if stale {
						st.TargetVersion = "1.3.9" // the controller has not caught up with a new target
					}
					cases = append(cases, tcase{
						name:   fmt.Sprintf("%s/%s/halted=%t/stale=%t", m.name, state, halted, stale),
						spec:   spec,
						status: &st,
					})
				}
			}
		}
		cases = append(cases, tcase{name: m.name + "/no-status", spec: spec})
	}
	for _, spec := range []rollout.Spec{
		{TargetVersion: v2, StartVersion: "", Mode: rollout.ModeEnabled}, // no valid start: rolledback answers "", false
		{TargetVersion: "", StartVersion: v1},                            // no valid target: "", false
		{TargetVersion: "v1.4.0", StartVersion: v1},                      // invalid target
	} {
		for _, state := range []rollout.State{rollout.StateActive, rollout.StateRolledBack} {
			st := testStatus(state)
			st.TargetVersion = spec.TargetVersion
			cases = append(cases, tcase{name: fmt.Sprintf("spec-%q-%q/%s", spec.StartVersion, spec.TargetVersion, state), spec: spec, status: &st})
		}
	}

	seen := map[Answer]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Plan{Spec: tc.spec, HasSpec: true}
			var st rollout.GroupStatus
			if tc.status != nil {
				st = *tc.status
				p.Groups = map[string]rollout.GroupStatus{testGroup: st}
			}
			store.Set(p)
			for _, id := range ids {
				v, update := rollout.Decide(id, tc.spec, st, st.Mode)
				want := Answer{Version: v, Update: update, JitterSeconds: st.JitterSeconds, Edition: DefaultEdition}
				got, err := client.Find(t.Context(), id, testGroup)
				if err != nil {
					t.Fatalf("agent %s: %v", id, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("agent %s: find answer differs from Decide (-want +got):\n%s", id, diff)
				}
				seen[Answer{Version: got.Version, Update: got.Update}] = true
			}
		})
	}
	// The table must reach every kind of answer, or it proves less than it
	// seems to.
	for _, a := range []Answer{{Version: v1}, {Version: v1, Update: true}, {Version: v2}, {Version: v2, Update: true}, {}} {
		if !seen[a] {
			t.Errorf("no case answered version %q update %t", a.Version, a.Update)
		}
	}
}

// TestFindAnswersRFDTable pins a few rows of the "Proxy answer" tables with
// literal values, so that TestFindEqualsDecide cannot pass by both sides
// being wrong the same way.
func TestFindAnswersRFDTable(t *testing.T) {
	tests := []struct {
		name       string
		mode       rollout.Mode // the status's mode
		state      rollout.State
		halted     bool
		id         rollout.AgentID
		group      string
		wantV      string
		wantUpdate bool
	}{
		{"enabled unstarted", rollout.ModeEnabled, rollout.StateUnstarted, false, idLow, testGroup, v1, false},
		{"enabled canary, a canary", rollout.ModeEnabled, rollout.StateCanary, false, idCanary, testGroup, v2, true},
		{"enabled canary, not a canary", rollout.ModeEnabled, rollout.StateCanary, false, idLow, testGroup, v1, false},
		{"enabled active, below progress", rollout.ModeEnabled, rollout.StateActive, false, idLow, testGroup, v2, true},
		{"enabled active, above progress", rollout.ModeEnabled, rollout.StateActive, false, idHigh, testGroup, v2, false},
		{"enabled active, a canary above progress", rollout.ModeEnabled, rollout.StateActive, false, idCanary, testGroup, v2, true},
		{"enabled active halted", rollout.ModeEnabled, rollout.StateActive, true, idLow, testGroup, v1, false},
		{"enabled done", rollout.ModeEnabled, rollout.StateDone, false, idHigh, testGroup, v2, true},
		{"enabled rolledback", rollout.ModeEnabled, rollout.StateRolledBack, false, idHigh, testGroup, v1, true},
		{"paused active", rollout.ModePaused, rollout.StateActive, false, idLow, testGroup, v2, false},
		{"paused canary", rollout.ModePaused, rollout.StateCanary, false, idCanary, testGroup, v1, false},
		{"disabled unstarted", rollout.ModeDisabled, rollout.StateUnstarted, false, idLow, testGroup, v2, false},
		{"unknown group", rollout.ModeEnabled, rollout.StateDone, false, idLow, "staging", v1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := testStatus(tc.state)
			st.Mode, st.Halted = tc.mode, tc.halted
			srv := serve(t, &Handler{Store: storeWith(rollout.DefaultSpec(v1, v2), st), Edition: "enterprise"})
			got, err := (&Client{URLs: []string{srv.URL}}).Find(t.Context(), tc.id, tc.group)
			if err != nil {
				t.Fatal(err)
			}
			wantJitter := st.JitterSeconds
			if tc.group != testGroup {
				wantJitter = 0
			}
			want := Answer{Version: tc.wantV, Update: tc.wantUpdate, JitterSeconds: wantJitter, Edition: "enterprise"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestFindBadParams: every malformed request gets the right status and a
// JSON error naming the field, and no version.
func TestFindBadParams(t *testing.T) {
	st := testStatus(rollout.StateDone)
	store := storeWith(rollout.DefaultSpec(v1, v2), st)
	srv := serve(t, &Handler{Store: store, Ready: func() error { return errors.New("nats: disconnected") }})
	ok := "host=" + string(idLow) + "&group=" + testGroup

	tests := []struct {
		name      string
		method    string // default GET
		path      string // default PathFind
		query     string
		wantCode  int
		wantField string
		wantIn    string // a part of the error message
	}{
		{name: "not an id", query: "host=web-01&group=prod", wantCode: 400, wantField: "host", wantIn: "invalid agent id"},
		{name: "uppercase non-hex id", query: "host=" + strings.ToUpper("g"+string(idCanary)[1:]) + "&group=prod", wantCode: 400, wantField: "host", wantIn: "want a UUID like 1b4e28ba-2fa1-4d2e-883f-0016d3cca427 (any case)"},
		{name: "id in braces", query: "host=%7B" + string(idLow) + "%7D&group=prod", wantCode: 400, wantField: "host"},
		{name: "host too long", query: "host=" + strings.Repeat("a", MaxParamLen+1) + "&group=prod", wantCode: 400, wantField: "host", wantIn: "at most 256"},
		{name: "host missing", query: "group=prod", wantCode: 400, wantField: "host", wantIn: "missing parameter host"},
		{name: "host empty", query: "host=&group=prod", wantCode: 400, wantField: "host", wantIn: "missing parameter host"},
		{name: "host repeated", query: ok + "&host=" + string(idHigh), wantCode: 400, wantField: "host", wantIn: "given 2 times"},
		{name: "host repeated, same value", query: ok + "&host=" + string(idLow), wantCode: 400, wantField: "host"},
		{name: "group missing", query: "host=" + string(idLow), wantCode: 400, wantField: "group", wantIn: "missing parameter group"},
		{name: "group repeated", query: ok + "&group=staging", wantCode: 400, wantField: "group", wantIn: "given 2 times"},
		{name: "group with a dot", query: "host=" + string(idLow) + "&group=prod.eu", wantCode: 400, wantField: "group", wantIn: "invalid group name"},
		{name: "group with a space", query: "host=" + string(idLow) + "&group=prod%20eu", wantCode: 400, wantField: "group"},
		{name: "group uppercase", query: "host=" + string(idLow) + "&group=Prod", wantCode: 400, wantField: "group"},
		{name: "group wildcard", query: "host=" + string(idLow) + "&group=%3E", wantCode: 400, wantField: "group"},
		{name: "group too long for a name", query: "host=" + string(idLow) + "&group=" + strings.Repeat("g", rollout.MaxGroupNameLen+1), wantCode: 400, wantField: "group"},
		{name: "group too long", query: "host=" + string(idLow) + "&group=" + strings.Repeat("g", MaxParamLen+1), wantCode: 400, wantField: "group", wantIn: "at most 256"},
		{name: "bad escape", query: "host=%zz&group=prod", wantCode: 400, wantField: "", wantIn: "query"},
		{name: "semicolon", query: "host=" + string(idLow) + ";group=prod", wantCode: 400, wantField: ""},
		{name: "query too long", query: ok + "&pad=" + strings.Repeat("x", maxQueryLen), wantCode: 414, wantField: "", wantIn: "at most 4096"},
		{name: "no query", wantCode: 400, wantField: "host"},
		{name: "POST", method: http.MethodPost, query: ok, wantCode: 405, wantIn: "use GET"},
		{name: "PUT", method: http.MethodPut, query: ok, wantCode: 405},
		{name: "DELETE", method: http.MethodDelete, query: ok, wantCode: 405},
		{name: "unknown path", path: "/v1/finder", query: ok, wantCode: 404, wantIn: "no such endpoint"},
		{name: "trailing slash", path: PathFind + "/", query: ok, wantCode: 404},
		{name: "webapi path", path: "/v1/webapi/find", query: ok, wantCode: 404},
		// With good parameters the not-ready controller refuses: this case
		// shows that parameters are judged before readiness above.
		{name: "good params, not ready", query: ok, wantCode: 503, wantIn: "not ready"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method, path := tc.method, tc.path
			if method == "" {
				method = http.MethodGet
			}
			if path == "" {
				path = PathFind
			}
			resp := get(t, srv.Client(), method, srv.URL+path+"?"+tc.query)
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantCode {
				t.Errorf("status %d, want %d; body %s", resp.StatusCode, tc.wantCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", cc)
			}
			if tc.wantCode == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow %q, want GET, HEAD", resp.Header.Get("Allow"))
			}
			var e map[string]string
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("body is not a JSON error: %v: %s", err, body)
			}
			if e["error"] == "" {
				t.Errorf("no error message: %s", body)
			}
			if !strings.Contains(e["error"], tc.wantIn) {
				t.Errorf("error %q does not contain %q", e["error"], tc.wantIn)
			}
			if e["field"] != tc.wantField {
				t.Errorf("field %q, want %q", e["field"], tc.wantField)
			}
			for k := range e {
				if k != "error" && k != "field" {
					t.Errorf("unexpected key %q in %s", k, body)
				}
			}
			for _, v := range []string{v1, v2, "agent_version"} {
				if strings.Contains(string(body), v) {
					t.Errorf("error body reveals %q: %s", v, body)
				}
			}
		})
	}
}

// TestFindNoPlan: before a spec is loaded there is no version to tell, not
// even for a group the plan knows.
func TestFindNoPlan(t *testing.T) {
	store := &Store{}
	store.SetGroup(testGroup, testStatus(rollout.StateDone))
	srv := serve(t, &Handler{Store: store})
	_, err := (&Client{URLs: []string{srv.URL}}).Find(t.Context(), idLow, testGroup)
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusServiceUnavailable || se.Message != ErrNoPlan.Error() {
		t.Fatalf("find with no spec: %v; want a 503 %q", err, ErrNoPlan)
	}
	store.SetSpec(rollout.DefaultSpec(v1, v2))
	if a, err := (&Client{URLs: []string{srv.URL}}).Find(t.Context(), idLow, testGroup); err != nil || a.Version != v2 {
		t.Fatalf("after SetSpec: %+v, %v; want version %s", a, err, v2)
	}
	store.DeleteSpec()
	if _, err := (&Client{URLs: []string{srv.URL}}).Find(t.Context(), idLow, testGroup); !errors.As(err, &se) || se.Code != 503 {
		t.Fatalf("after DeleteSpec: %v; want 503", err)
	}
	// A nil Store is an empty one.
	rec := httptest.NewRecorder()
	(&Handler{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathFind+"?host="+string(idLow)+"&group=prod", nil))
	if rec.Code != 503 {
		t.Errorf("nil Store: status %d, want 503", rec.Code)
	}
}

// TestFindNeverRevealsInstalledVersion: whatever the plan holds, the answer
// has exactly the four keys, and its version is the group's hold or the
// spec's target (or empty): plan values, never anything about the agent.
func TestFindNeverRevealsInstalledVersion(t *testing.T) {
	store := &Store{}
	srv := serve(t, &Handler{Store: store})
	r := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	wantKeys := []string{"agent_autoupdate", "agent_update_jitter_seconds", "agent_version", "edition"}
	for i := range 300 {
		spec := rollout.DefaultSpec(pick(v1, "2.0.0", "", "0.9.0-rc.1"), pick(v2, "2.1.0", "", "bad"))
		spec.Mode = rollout.Mode(pick("", "enabled", "paused", "disabled"))
		st := testStatus(rollout.State(pick("unstarted", "canary", "active", "done", "rolledback")))
		st.TargetVersion = pick(spec.TargetVersion, "9.9.9")
		st.StartVersion = pick(spec.StartVersion, "8.8.8")
		st.HoldVersion = pick("", "7.7.7")
		st.Halted = r.IntN(3) == 0
		st.Progress = r.Float64()
		st.Mode = rollout.Mode(pick("", "enabled", "paused"))
		st.Canaries = []rollout.Canary{{ID: idCanary}, {ID: idHigh}}
		store.Set(Plan{Spec: spec, HasSpec: true, Groups: map[string]rollout.GroupStatus{testGroup: st}})

		id := []rollout.AgentID{idLow, idCanary, idHigh}[i%3]
		resp := get(t, srv.Client(), http.MethodGet, srv.URL+PathFind+"?host="+string(id)+"&group="+testGroup)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("case %d: status %d: %s", i, resp.StatusCode, body)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("case %d: %v: %s", i, err, body)
		}
		keys := slices.Sorted(maps.Keys(m))
		if diff := cmp.Diff(wantKeys, keys); diff != "" {
			t.Fatalf("case %d: keys (-want +got):\n%s\nbody %s", i, diff, body)
		}
		var v string
		_ = json.Unmarshal(m["agent_version"], &v)
		if hold := st.Hold(spec); v != "" && v != hold && v != spec.TargetVersion {
			t.Fatalf("case %d: agent_version %q is neither the group's hold %q nor the spec's target %q", i, v, hold, spec.TargetVersion)
		}
		if resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("case %d: Cache-Control %q", i, resp.Header.Get("Cache-Control"))
		}
	}
}

// TestHealthz: alive whatever the bus and the plan say.
func TestHealthz(t *testing.T) {
	srv := serve(t, &Handler{Ready: func() error { return errors.New("nats: disconnected") }})
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		resp := get(t, srv.Client(), method, srv.URL+PathHealthz)
		body, _ := io.ReadAll(resp.Body)
		want := "ok\n"
		if method == http.MethodHead {
			want = ""
		}
		if resp.StatusCode != 200 || string(body) != want {
			t.Errorf("%s %s: %d %q, want 200 %q", method, PathHealthz, resp.StatusCode, body, want)
		}
	}
	if resp := get(t, srv.Client(), http.MethodPost, srv.URL+PathHealthz); resp.StatusCode != 405 {
		t.Errorf("POST %s: %d, want 405", PathHealthz, resp.StatusCode)
	}
}

// TestReadyz: ready means connected and a spec loaded; otherwise 503 with
// the reason as JSON.
func TestReadyz(t *testing.T) {
	var readyErr error
	store := &Store{}
	srv := serve(t, &Handler{Store: store, Ready: func() error { return readyErr }})
	check := func(wantCode int, wantErr string) {
		t.Helper()
		resp := get(t, srv.Client(), http.MethodGet, srv.URL+PathReadyz)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != wantCode {
			t.Fatalf("status %d, want %d; body %s", resp.StatusCode, wantCode, body)
		}
		if wantCode == 200 {
			if string(body) != "ok\n" {
				t.Fatalf("body %q, want ok", body)
			}
			return
		}
		var e errorBody
		if err := json.Unmarshal(body, &e); err != nil || e.Error != wantErr {
			t.Fatalf("body %s (%v), want error %q", body, err, wantErr)
		}
	}
	check(503, "no plan yet")
	store.SetSpec(rollout.DefaultSpec(v1, v2))
	check(200, "")
	readyErr = errors.New("nats: disconnected")
	check(503, "not ready: nats: disconnected")
	readyErr = nil
	check(200, "")
	store.DeleteSpec()
	check(503, "no plan yet")
}

// TestFindQueryExtras: parameters other than host and group are ignored, and
// order does not matter.
func TestFindQueryExtras(t *testing.T) {
	srv := serve(t, &Handler{Store: storeWith(rollout.DefaultSpec(v1, v2), testStatus(rollout.StateDone))})
	q := url.Values{"group": {testGroup}, "host": {string(idLow)}, "_": {"12345"}}
	resp := get(t, srv.Client(), http.MethodGet, srv.URL+PathFind+"?"+q.Encode())
	body, _ := io.ReadAll(resp.Body)
	a, err := DecodeAnswer(body)
	if resp.StatusCode != 200 || err != nil || a.Version != v2 || !a.Update {
		t.Fatalf("status %d, %+v, %v; body %s", resp.StatusCode, a, err, body)
	}
}
