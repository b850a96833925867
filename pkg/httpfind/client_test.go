package httpfind

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// healthy is a find server answering for a done group (v2, update).
func healthy(t *testing.T) (url string, hits *atomic.Int64) {
	t.Helper()
	h := &Handler{Store: storeWith(rollout.DefaultSpec(v1, v2), testStatus(rollout.StateDone))}
	hits = new(atomic.Int64)
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	return srv.URL + PathFind, hits
}

// failing is a server answering every request with code and body.
func failing(t *testing.T, code int, contentType, body string) string {
	t.Helper()
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	return srv.URL + PathFind
}

var doneAnswer = Answer{Version: v2, Update: true, JitterSeconds: 17, Edition: DefaultEdition}

func TestClientFailover(t *testing.T) {
	good, _ := healthy(t)
	tests := []struct {
		name string
		urls []string
	}{
		{"first down", []string{deadURL(t), good}},
		{"first answers 500", []string{failing(t, 500, "text/html", "<h1>oops</h1>"), good}},
		{"first not ready", []string{failing(t, 503, "application/json", `{"error":"not ready: nats: disconnected"}`), good}},
		{"first answers garbage", []string{failing(t, 200, "text/html", "<html>captive portal</html>"), good}},
		{"first answers an update to nothing", []string{failing(t, 200, "application/json", `{"agent_version":"","agent_autoupdate":true}`), good}},
		{"first is not a URL", []string{"ftp://ctl-1/v1/find", good}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{URLs: tc.urls}
			// Whichever URL a call starts at, it ends at the healthy one.
			for range len(tc.urls) {
				got, err := c.Find(t.Context(), idLow, testGroup)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(doneAnswer, got); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestClientAllFail: the error names every URL and why, and the causes are
// reachable with errors.As and errors.Is.
func TestClientAllFail(t *testing.T) {
	dead := deadURL(t)
	html := failing(t, 502, "text/html", "<html><body>Bad Gateway</body></html>")
	notReady := failing(t, 503, "application/json", `{"error":"no plan yet"}`)
	c := &Client{URLs: []string{dead, html, notReady}}
	_, err := c.Find(t.Context(), idLow, testGroup)
	if err == nil {
		t.Fatal("no error with every URL failing")
	}
	msg := err.Error()
	for _, want := range []string{dead, html, notReady, "502 Bad Gateway: <html><body>Bad Gateway</body></html>", "503 Service Unavailable: no plan yet"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("errors.Is(err, ECONNREFUSED) is false: %v", err)
	}
	var se *StatusError
	if !errors.As(err, &se) {
		t.Errorf("no StatusError in %v", err)
	}
}

// TestClientRotates: successive calls start at successive URLs, so agents
// spread over the controllers.
func TestClientRotates(t *testing.T) {
	a, hitsA := healthy(t)
	b, hitsB := healthy(t)
	c := &Client{URLs: []string{a, b}}
	for range 10 {
		if _, err := c.Find(t.Context(), idLow, testGroup); err != nil {
			t.Fatal(err)
		}
	}
	if hitsA.Load() != 5 || hitsB.Load() != 5 {
		t.Errorf("hits %d and %d, want 5 and 5", hitsA.Load(), hitsB.Load())
	}
}

// TestClientAttemptTimeout: a controller that accepts and never answers
// costs one attempt's timeout, not the caller's whole deadline.
func TestClientAttemptTimeout(t *testing.T) {
	hang := serve(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // the client gives up and hangs up
	}))
	good, _ := healthy(t)
	c := &Client{URLs: []string{hang.URL, good}, Timeout: 100 * time.Millisecond}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for range 2 {
		if _, err := c.Find(ctx, idLow, testGroup); err != nil {
			t.Fatal(err)
		}
	}
}

func TestClientCanceled(t *testing.T) {
	good, hits := healthy(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := (&Client{URLs: []string{good, good}}).Find(ctx, idLow, testGroup)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests after cancel", hits.Load())
	}
}

// TestClientRefusesBadInput: what the server would refuse is refused
// without asking it.
func TestClientRefusesBadInput(t *testing.T) {
	good, hits := healthy(t)
	c := &Client{URLs: []string{good}}
	if _, err := c.Find(t.Context(), "not-an-id", testGroup); !errors.Is(err, rollout.ErrBadAgentID) {
		t.Errorf("bad id: %v, want ErrBadAgentID", err)
	}
	if _, err := c.Find(t.Context(), idLow, "Prod.EU"); !errors.Is(err, rollout.ErrBadGroupName) {
		t.Errorf("bad group: %v, want ErrBadGroupName", err)
	}
	if _, err := (&Client{}).Find(t.Context(), idLow, testGroup); !errors.Is(err, ErrNoURL) {
		t.Errorf("no URLs: %v, want ErrNoURL", err)
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests for bad input", hits.Load())
	}
}

// TestClientBodyLimit: a 200 larger than MaxBodyBytes is not an answer,
// however it starts.
func TestClientBodyLimit(t *testing.T) {
	big := `{"agent_version":"1.4.0","agent_autoupdate":true,"pad":"` + strings.Repeat("x", MaxBodyBytes) + `"}`
	_, err := (&Client{URLs: []string{failing(t, 200, "application/json", big)}}).Find(t.Context(), idLow, testGroup)
	if !errors.Is(err, ErrBadAnswer) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err %v, want ErrBadAnswer for the size", err)
	}
	// A long error page is cut short in the message.
	_, err = (&Client{URLs: []string{failing(t, 500, "text/plain", strings.Repeat("e", MaxBodyBytes*2))}}).Find(t.Context(), idLow, testGroup)
	var se *StatusError
	if !errors.As(err, &se) || len(se.Message) > 210 {
		t.Fatalf("err %v, want a StatusError with a short message", err)
	}
}

func TestFindURL(t *testing.T) {
	q := "group=prod&host=" + string(idLow)
	tests := []struct{ base, want string }{
		{"https://ctl-1.example.net/v1/find", "https://ctl-1.example.net/v1/find?" + q},
		{"https://ctl-1.example.net", "https://ctl-1.example.net/v1/find?" + q},
		{"https://ctl-1.example.net/", "https://ctl-1.example.net/v1/find?" + q},
		{"http://10.0.0.1:8080/fleet/v1/find", "http://10.0.0.1:8080/fleet/v1/find?" + q},
		{"https://ctl/v1/find?token=abc&host=x", "https://ctl/v1/find?" + q + "&token=abc"},
	}
	for _, tc := range tests {
		got, err := findURL(tc.base, idLow, testGroup, "")
		if err != nil || got != tc.want {
			t.Errorf("findURL(%q) = %q, %v; want %q", tc.base, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "ctl-1:8080", "ftp://ctl/v1/find", "https:///v1/find", "http://[::1"} {
		if got, err := findURL(bad, idLow, testGroup, ""); err == nil {
			t.Errorf("findURL(%q) = %q, want an error", bad, got)
		}
	}
}

func TestDecodeAnswer(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    Answer
		wantErr string
	}{
		{name: "full", body: `{"agent_version":"1.4.0","agent_autoupdate":true,"agent_update_jitter_seconds":5,"edition":"oss"}`,
			want: Answer{Version: v2, Update: true, JitterSeconds: 5, Edition: "oss"}},
		{name: "keep what you have", body: `{"agent_version":"","agent_autoupdate":false}`, want: Answer{}},
		{name: "unknown fields skipped", body: `{"agent_version":"1.4.0-rc.1+b5","agent_autoupdate":false,"server_edition":"enterprise","x":[1]}`,
			want: Answer{Version: "1.4.0-rc.1+b5"}},
		{name: "trailing newline", body: "{\"agent_version\":\"1.4.0\",\"agent_autoupdate\":false}\n", want: Answer{Version: v2}},
		{name: "version missing", body: `{"agent_autoupdate":true}`, wantErr: "agent_version missing"},
		{name: "autoupdate missing", body: `{"agent_version":"1.4.0"}`, wantErr: "agent_autoupdate missing"},
		{name: "version with v", body: `{"agent_version":"v1.4.0","agent_autoupdate":false}`, wantErr: "leading"},
		{name: "version garbage", body: `{"agent_version":"../../etc","agent_autoupdate":false}`, wantErr: "agent_version"},
		{name: "update to nothing", body: `{"agent_version":"","agent_autoupdate":true}`, wantErr: "empty"},
		{name: "negative jitter", body: `{"agent_version":"1.4.0","agent_autoupdate":true,"agent_update_jitter_seconds":-1}`, wantErr: "jitter"},
		{name: "huge jitter", body: `{"agent_version":"1.4.0","agent_autoupdate":true,"agent_update_jitter_seconds":99999999}`, wantErr: "jitter"},
		{name: "wrong type", body: `{"agent_version":140,"agent_autoupdate":true}`, wantErr: "invalid find answer"},
		{name: "null", body: `null`, wantErr: "agent_version missing"},
		{name: "array", body: `[]`, wantErr: "invalid find answer"},
		{name: "two objects", body: `{"agent_version":"1.4.0","agent_autoupdate":true}{}`, wantErr: "after the JSON"},
		{name: "empty", body: ``, wantErr: "invalid find answer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeAnswer([]byte(tc.body))
			if tc.wantErr != "" {
				if !errors.Is(err, ErrBadAnswer) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want ErrBadAnswer containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
