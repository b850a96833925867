package agentd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/releases"
)

// With the bus gone, an agent whose group the controllers do not know says
// so as an error naming its group and the config's groups, not "unreachable"
// and not a quiet "no update" (issue 13, point 2).
func TestFallbackReportsUnknownGroup(t *testing.T) {
	srv := natstest.Start(t)
	store := &httpfind.Store{}
	store.SetSpec(rollout.DefaultSpec("1.0.0", "2.0.0"))
	store.SetConfigured([]string{"blue", "green"})
	var asked atomic.Int32
	h := &httpfind.Handler{Store: store}
	find := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(find.Close)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rel := httptest.NewServer(releases.NewServer(nil)) // never asked: nothing is to be installed
	t.Cleanup(rel.Close)

	// An enabled agent (only those ask the find endpoint), group mistyped.
	root := t.TempDir()
	uf := install.NewUpdateFile("bleu")
	uf.Spec.Enabled = true
	if err := uf.Save(root); err != nil {
		t.Fatal(err)
	}
	var logs natstest.Buffer
	a, err := agentd.New(agentd.Options{
		Root: root, NATSURL: srv.URL(), Interval: time.Hour,
		FindURLs: []string{find.URL + httpfind.PathFind}, FallbackAfter: 50 * time.Millisecond, FindInterval: 50 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil)),
		App: agentd.AppOptions{URLTemplate: releases.URLTemplate(rel.URL), BinDir: filepath.Join(root, "bin"), Process: "app"},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	srv.Shutdown()
	natstest.Eventually(t, 20*time.Second, func() error {
		if !strings.Contains(logs.String(), "the controllers do not know this agent's group") {
			return errors.New("no unknown-group line yet")
		}
		return nil
	})
	// Asked again and again, it says so once.
	seen := asked.Load()
	natstest.Eventually(t, 20*time.Second, func() error {
		if asked.Load() < seen+3 {
			return errors.New("not asked three more times yet")
		}
		return nil
	})
	out := logs.String()
	if n := strings.Count(out, "do not know this agent's group"); n != 1 {
		t.Errorf("unknown group logged %d times, want once:\n%s", n, out)
	}
	for _, want := range []string{"level=ERROR", "group=bleu", "blue, green", `did you mean \"blue\"?`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "find endpoint unreachable") {
		t.Errorf("an unknown group logged as an outage:\n%s", out)
	}
	cancel()
	<-done
}

// TestFallbackAsksForTheApp (issue 26): with the bus gone, another app's
// agent asks the find endpoint for its own app (app=NAME), keeping the
// URL's own query; the default app's asks as before, without app.
func TestFallbackAsksForTheApp(t *testing.T) {
	srv := natstest.Start(t)
	store := &httpfind.Store{}
	store.SetSpec(rollout.DefaultSpec("1.0.0", "1.0.0"))
	store.SetConfigured([]string{"blue"})
	h := &httpfind.Handler{Store: store}
	var mu sync.Mutex
	apps := map[string]string{} // query app → the URL's own parameter
	find := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		apps[r.URL.Query().Get("app")] = r.URL.Query().Get("token")
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(find.Close)
	rel := httptest.NewServer(releases.NewServer(nil))
	t.Cleanup(rel.Close)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := t.TempDir()
	done := make(chan error, 2)
	for _, name := range []string{"", "db"} {
		dir := root
		if name != "" {
			dir = filepath.Join(root, "apps", name)
		}
		uf := install.NewUpdateFile("blue")
		uf.Spec.Enabled = true
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := uf.Save(dir); err != nil {
			t.Fatal(err)
		}
		a, err := agentd.New(agentd.Options{
			Root: root, Name: name, NATSURL: srv.URL(), Interval: time.Hour,
			FindURLs: []string{find.URL + httpfind.PathFind + "?token=t1"}, FallbackAfter: 50 * time.Millisecond, FindInterval: 50 * time.Millisecond,
			Log: natstest.Logger(t),
			App: agentd.AppOptions{URLTemplate: releases.URLTemplate(rel.URL), BinDir: filepath.Join(dir, "bin"), Process: "app"},
		})
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- a.Run(ctx) }()
	}
	srv.Shutdown()
	natstest.Eventually(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if apps[""] != "t1" || apps["db"] != "t1" || len(apps) != 2 {
			return fmt.Errorf("find asked for apps %v (app → token), want the default app's (no app) and db's, token kept", apps)
		}
		return nil
	})
	cancel()
	<-done
	<-done
}
