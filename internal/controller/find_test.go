package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// findError is the JSON of a find error.
type findError struct {
	Error  string   `json:"error"`
	Field  string   `json:"field"`
	Groups []string `json:"groups"`
}

// putConfig writes a config with the named groups.
func (f *fixture) putConfig(groups ...string) {
	f.t.Helper()
	cfg := rollout.DefaultConfig()
	cfg.Groups = nil
	for _, g := range groups {
		cfg.Groups = append(cfg.Groups, rollout.DefaultGroup(g))
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.fleet.Config.Put(f.ctx, kv.KeyConfig, data); err != nil {
		f.t.Fatal(err)
	}
}

// TestFindThroughController is GET /v1/find on a running controller ("controller
// run --http-addr"), as agents and curl see it (issue 13, points 2 and 10): a
// group the config does not name is a JSON 404 that names the config's
// groups; an id in capitals is the same agent; a 70 KB query gets a JSON
// error; error bodies are not HTML-escaped.
func TestFindThroughController(t *testing.T) {
	// File storage, as the controller creates the stream and buckets.
	srv := natstest.Start(t)
	fleet, err := kv.Ensure(t.Context(), srv.JetStream("setup"), kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ctx: t.Context(), srv: srv, fleet: fleet}
	f.putConfig("staging", "prod")
	spec, err := json.Marshal(rollout.DefaultSpec("1.0.0", "2.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.fleet.Plan.Put(f.ctx, kv.KeySpec, spec); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	o := runOptions()
	o.NATSURL, o.HTTPAddr = f.srv.URL(), addr
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx, &o, natstest.Logger(t)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller run: %v", err)
		}
	})
	base := "http://" + addr
	natstest.Eventually(t, waitLong, func() error {
		resp, err := http.Get(base + httpfind.PathReadyz)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
	find := base + httpfind.PathFind
	const id = "1b4e28ba-2fa1-4d2e-883f-0016d3cca427"

	// The controller writes the groups' progress (their jitter among it)
	// while the test asks, so the answer may move between two requests:
	// the uppercase id must match the lowercase one's answer asked just
	// before and just after it.
	natstest.Eventually(t, waitLong, func() error {
		code, _, before := httpGet(t, find+"?host="+id+"&group=prod")
		if code != http.StatusOK || !strings.Contains(before, `"agent_version":"1.0.0"`) {
			return fmt.Errorf("lowercase id: %d %s", code, before)
		}
		code, ct, upper := httpGet(t, find+"?host="+strings.ToUpper(id)+"&group=prod")
		_, _, after := httpGet(t, find+"?host="+id+"&group=prod")
		if before != after {
			return fmt.Errorf("the answer moved between two requests: %s then %s", before, after)
		}
		if code != http.StatusOK || upper != before {
			return fmt.Errorf("uppercase id: %d %q %s; want 200 and the lowercase id's answer %s", code, ct, upper, before)
		}
		return nil
	})

	code, ct, body := httpGet(t, find+"?host="+id+"&group=prdo")
	var e findError
	if err := json.Unmarshal([]byte(body), &e); err != nil || code != http.StatusNotFound || ct != "application/json" {
		t.Errorf("unknown group: %d %q %s (%v); want a JSON 404", code, ct, body, err)
	} else if e.Field != "group" || !slices.Equal(e.Groups, []string{"staging", "prod"}) ||
		!strings.Contains(e.Error, `did you mean "prod"?`) || !strings.Contains(e.Error, "staging, prod") {
		t.Errorf("unknown group: %s", body)
	}

	code, ct, body = httpGet(t, find+"?host="+id+"&group=prod&pad="+strings.Repeat("x", 70<<10))
	if err := json.Unmarshal([]byte(body), &e); err != nil || ct != "application/json" || code != http.StatusRequestURITooLong {
		t.Errorf("70 KB query: %d %q %.200s (%v); want a JSON 414", code, ct, body, err)
	}

	code, _, body = httpGet(t, find+"?host=%3Cscript%3E%26&group=prod")
	if code != http.StatusBadRequest || !strings.Contains(body, "<script>&") || strings.Contains(body, `\u00`) {
		t.Errorf("error with <>&: %d %s; want a 400 quoting them as sent", code, body)
	}
}

// TestPlanMirrorFollowsConfigGroups: a group added to the config is answered
// within ConfigRefresh, a removed one is 404 again, and a stored config
// that is not valid leaves the last good groups in place.
func TestPlanMirrorFollowsConfigGroups(t *testing.T) {
	f := newFixture(t)
	store := &httpfind.Store{}
	var logs natstest.Buffer
	clk := clock.NewManual(time.Now())
	m := &controller.PlanMirror{NC: f.fleet.JS.Conn(), Store: store, Clock: clk, ConfigRefresh: 5 * time.Second,
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	natstest.Eventually(t, waitLong, m.Ready)

	waitGroups := func(want ...string) {
		t.Helper()
		natstest.Eventually(t, waitLong, func() error {
			if got := store.Get().Configured; !slices.Equal(got, want) {
				clk.Advance(5 * time.Second)
				return fmt.Errorf("groups %q, want %q", got, want)
			}
			return nil
		})
	}
	// No config written: the default config's one group.
	waitGroups("default")
	f.putConfig("staging", "prod")
	waitGroups("staging", "prod")
	f.putConfig("prod")
	waitGroups("prod")
	_, err := store.Get().Find("1b4e28ba-2fa1-4d2e-883f-0016d3cca427", "staging")
	if !errors.Is(err, httpfind.ErrUnknownGroup) {
		t.Errorf("a removed group: %v, want ErrUnknownGroup", err)
	}

	if _, err := f.fleet.Config.Put(f.ctx, kv.KeyConfig, []byte(`{"v":1,"groups":[{"name":"Bad.Name"}]}`)); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, waitLong, func() error {
		if !strings.Contains(logs.String(), "keeps the groups of the last good config") {
			clk.Advance(5 * time.Second)
			return errors.New("the bad config is not logged yet")
		}
		return nil
	})
	if got := store.Get().Configured; !slices.Equal(got, []string{"prod"}) {
		t.Errorf("after a bad config: groups %q, want the last good [prod]", got)
	}
}

// httpGet GETs url and returns the status code, the Content-Type and the
// body.
func httpGet(t *testing.T, url string) (code int, contentType, body string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(data)
}
