package httpfind

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// FuzzDecodeAnswer: the client's decoder never panics, and whatever it
// accepts is an answer an agent may act on and survives a round trip.
func FuzzDecodeAnswer(f *testing.F) {
	f.Add([]byte(`{"agent_version":"1.4.0","agent_autoupdate":true,"agent_update_jitter_seconds":5,"edition":"oss"}`))
	f.Add([]byte(`{"agent_version":"","agent_autoupdate":false}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAnswer(b)
		if err != nil {
			return
		}
		if a.Version != "" && rollout.ValidateVersion(a.Version) != nil {
			t.Fatalf("accepted version %q", a.Version)
		}
		if a.Update && a.Version == "" {
			t.Fatal("accepted an update to no version")
		}
		if a.JitterSeconds < 0 || a.JitterSeconds > maxJitterSeconds {
			t.Fatalf("accepted jitter %d", a.JitterSeconds)
		}
		enc, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeAnswer(enc)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if diff := cmp.Diff(a, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

// FuzzFindQuery: any query string gets either a 200 for a valid id (in any
// case, answered as the canonical one) and a configured group, or a JSON
// error without a version: 400, 414 for a long query, 404 for a group the
// config does not name.
func FuzzFindQuery(f *testing.F) {
	f.Add("host=" + string(idLow) + "&group=prod")
	f.Add("host=" + string(idLow) + "&group=prod&host=" + string(idHigh))
	f.Add("host=%zz&group=prod")
	f.Add("host=1b4e28ba-2fa1-4d2e-883f-0016d3cca427&group=prod&app=db")
	f.Add("host=1b4e28ba-2fa1-4d2e-883f-0016d3cca427&group=prod&app=")
	f.Add("host=1b4e28ba-2fa1-4d2e-883f-0016d3cca427&group=prod&app=a&app=b")
	f.Add("host=1b4e28ba-2fa1-4d2e-883f-0016d3cca427&group=prod&app=Bad%0a")
	store := storeWith(rollout.DefaultSpec(v1, v2), testStatus(rollout.StateDone))
	store.SetConfigured([]string{"staging", testGroup})
	h := &Handler{Store: store}
	f.Fuzz(func(t *testing.T, raw string) {
		req := httptest.NewRequest(http.MethodGet, PathFind, nil)
		req.URL.RawQuery = raw
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body := rec.Body.String()
		switch rec.Code {
		case http.StatusOK:
			id, group, app, _, err := parseFindQuery(raw)
			if app != "" {
				t.Fatalf("200 for app %q from a handler that serves one app", app)
			}
			if err != nil {
				t.Fatalf("200 for a query the parser refuses: %v", err)
			}
			if _, err := rollout.ParseAgentID(string(id)); err != nil {
				t.Fatal(err)
			}
			if err := rollout.ValidateGroupName(group); err != nil {
				t.Fatal(err)
			}
			if group != "staging" && group != testGroup {
				t.Fatalf("200 for group %q, which the config does not name", group)
			}
			if _, err := DecodeAnswer(rec.Body.Bytes()); err != nil {
				t.Fatalf("200 with a bad answer: %v", err)
			}
		case http.StatusBadRequest, http.StatusRequestURITooLong, http.StatusNotFound:
			var e errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("%d without a JSON error: %s", rec.Code, body)
			}
			if strings.Contains(body, "agent_version") {
				t.Fatalf("%d with an answer: %s", rec.Code, body)
			}
			if rec.Code == http.StatusNotFound && (e.Field != "group" || len(e.Groups) != 2) && e.Field != "app" {
				t.Fatalf("404 that is not an unknown group's or app's: %s", body)
			}
		default:
			t.Fatalf("status %d: %s", rec.Code, body)
		}
	})
}
