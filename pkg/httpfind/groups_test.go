package httpfind

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// getJSON GETs url with c and returns the status, Content-Type and body.
func getJSON(t *testing.T, c *http.Client, url string) (int, string, []byte) {
	t.Helper()
	resp := get(t, c, http.MethodGet, url)
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}

// A group the config does not name is a 404 naming the config's groups and
// the closest one, never "no update" (issue 13, point 2); a configured
// group with no status yet is answered as unstarted; with the config not
// known, every group is answered as before.
func TestFindUnknownGroup(t *testing.T) {
	store := storeWith(rollout.DefaultSpec(v1, v2), testStatus(rollout.StateDone))
	store.SetConfigured([]string{"staging", testGroup})
	srv := serve(t, &Handler{Store: store})

	code, ct, body := getJSON(t, srv.Client(), srv.URL+PathFind+"?host="+string(idLow)+"&group=prdo")
	if code != http.StatusNotFound || ct != "application/json" {
		t.Errorf("unknown group: status %d, Content-Type %q; want 404 application/json; body %s", code, ct, body)
	}
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body is not a JSON error: %v: %s", err, body)
	}
	if e.Field != "group" || !slices.Equal(e.Groups, []string{"staging", testGroup}) {
		t.Errorf("field %q groups %q, want group and [staging prod]: %s", e.Field, e.Groups, body)
	}
	for _, want := range []string{`unknown group "prdo"`, "staging, prod", `did you mean "prod"?`, "fleetctl config add-group --group prdo"} {
		if !strings.Contains(e.Error, want) {
			t.Errorf("error %q does not contain %q", e.Error, want)
		}
	}
	if strings.Contains(string(body), "agent_autoupdate") {
		t.Errorf("a 404 that reads as an answer: %s", body)
	}

	// The agent's client: an error that says so, not an answer.
	client := &Client{URLs: []string{srv.URL + PathFind}}
	a, err := client.Find(t.Context(), idLow, "prdo")
	if !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("client: %+v, %v; want ErrUnknownGroup", a, err)
	}
	var se *StatusError
	if !errors.As(err, &se) || !slices.Equal(se.Groups, []string{"staging", testGroup}) {
		t.Errorf("client error %v does not carry the groups", err)
	}
	if !strings.Contains(err.Error(), `did you mean "prod"?`) {
		t.Errorf("client error does not pass the hint on: %v", err)
	}
	// Any other failure is not an unknown group.
	if _, err := (&Client{URLs: []string{deadURL(t)}}).Find(t.Context(), idLow, testGroup); err == nil || errors.Is(err, ErrUnknownGroup) {
		t.Errorf("dead URL: %v, want an error that is not ErrUnknownGroup", err)
	}

	// Configured, no status yet: the start version, no update.
	if a, err := client.Find(t.Context(), idLow, "staging"); err != nil || a.Version != v1 || a.Update {
		t.Errorf("configured group without a status: %+v, %v; want %s and no update", a, err, v1)
	}
	// No plan yet: the typo is still the answer, before "no plan".
	store.DeleteSpec()
	if _, err := client.Find(t.Context(), idLow, "prdo"); !errors.Is(err, ErrUnknownGroup) {
		t.Errorf("unknown group with no plan: %v, want ErrUnknownGroup", err)
	}
	store.SetSpec(rollout.DefaultSpec(v1, v2))
	// Config not known: every group is answered.
	store.SetConfigured(nil)
	if a, err := client.Find(t.Context(), idLow, "prdo"); err != nil || a.Version != v1 || a.Update {
		t.Errorf("config not known: %+v, %v; want %s and no update", a, err, v1)
	}
}

// An id in capitals (macOS uuidgen) is the same agent: the same answer as
// the lowercase id, not a 400 (issue 13, point 10).
func TestFindAcceptsAnyCaseID(t *testing.T) {
	st := testStatus(rollout.StateActive)
	srv := serve(t, &Handler{Store: storeWith(rollout.DefaultSpec(v1, v2), st)})
	for _, id := range []rollout.AgentID{idLow, idCanary, idHigh} {
		_, _, lower := getJSON(t, srv.Client(), srv.URL+PathFind+"?host="+string(id)+"&group="+testGroup)
		for _, spelling := range []string{strings.ToUpper(string(id)), strings.ToUpper(string(id[:8])) + string(id[8:])} {
			code, ct, body := getJSON(t, srv.Client(), srv.URL+PathFind+"?host="+spelling+"&group="+testGroup)
			if code != http.StatusOK || ct != "application/json" {
				t.Errorf("%s: status %d %q: %s", spelling, code, ct, body)
			}
			if string(body) != string(lower) {
				t.Errorf("%s: answer %s, lowercase id answered %s", spelling, body, lower)
			}
		}
	}
	// The answers differ by id, so the comparison above means something.
	_, _, canary := getJSON(t, srv.Client(), srv.URL+PathFind+"?host="+string(idCanary)+"&group="+testGroup)
	_, _, high := getJSON(t, srv.Client(), srv.URL+PathFind+"?host="+string(idHigh)+"&group="+testGroup)
	if string(canary) == string(high) {
		t.Fatalf("canary and high id get the same answer %s; the test proves nothing", canary)
	}
}

// Error bodies quote what the client sent as it was: no \u003c for "<".
func TestErrorBodiesAreNotHTMLEscaped(t *testing.T) {
	srv := serve(t, &Handler{Store: storeWith(rollout.DefaultSpec(v1, v2))})
	code, ct, body := getJSON(t, srv.Client(), srv.URL+PathFind+"?host=%3Cb%3Ex%26y&group=prod")
	if code != http.StatusBadRequest || ct != "application/json" {
		t.Errorf("status %d %q, want 400 application/json", code, ct)
	}
	if !strings.Contains(string(body), `<b>x&y`) || strings.Contains(string(body), `\u00`) {
		t.Errorf("body escapes HTML characters: %s", body)
	}
}

// A runaway query (70 KB, 900 KB) reaches the handler and gets a JSON 414,
// not net/http's plain-text 431 (issue 13, point 10).
func TestServerLongQueryIsJSON(t *testing.T) {
	addr := runServer(t, &Server{Handler: findHandler()})
	for _, n := range []int{70 << 10, 900 << 10} {
		url := "http://" + addr + PathFind + "?host=" + string(idLow) + "&group=" + testGroup + "&pad=" + strings.Repeat("x", n)
		code, ct, body := getJSON(t, http.DefaultClient, url)
		if code != http.StatusRequestURITooLong || ct != "application/json" {
			t.Errorf("%d-byte query: status %d, Content-Type %q; want 414 application/json; body %.200s", n, code, ct, body)
			continue
		}
		var e errorBody
		if err := json.Unmarshal(body, &e); err != nil || !strings.Contains(e.Error, "at most 4096") {
			t.Errorf("%d-byte query: body %s (%v)", n, body, err)
		}
	}
}
