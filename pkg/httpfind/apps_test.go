package httpfind

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestFindPerApp: the app parameter picks the app's plan (absent, empty or
// the default app's name: the default app's); an app the config does not
// list is a 404 naming the apps, which the Client reports as
// ErrUnknownApp; a bad or repeated app is a 400; and a handler that serves
// one app refuses any app rather than answer another app's plan.
func TestFindPerApp(t *testing.T) {
	web := storeWith(rollout.DefaultSpec(v1, v2), testStatus(rollout.StateDone))
	dbStatus := testStatus(rollout.StateDone)
	dbStatus.TargetVersion, dbStatus.StartVersion = "6.0.0", "5.0.0"
	db := storeWith(rollout.DefaultSpec("5.0.0", "6.0.0"), dbStatus)
	apps := []string{"web", "db"}
	h := &Handler{Store: web, Apps: func(app string) (*Store, []string, bool) {
		switch app {
		case "", "web":
			return web, apps, true
		case "db":
			return db, apps, true
		}
		return nil, apps, false
	}}
	srv := serve(t, h)
	ctx := context.Background()
	for _, tc := range []struct{ app, want string }{{"", v2}, {"web", v2}, {"db", "6.0.0"}} {
		c := &Client{URLs: []string{srv.URL}, App: tc.app}
		a, err := c.Find(ctx, idLow, testGroup)
		if err != nil {
			t.Fatalf("app %q: %v", tc.app, err)
		}
		if a.Version != tc.want {
			t.Errorf("app %q: told %q, want %q", tc.app, a.Version, tc.want)
		}
	}
	_, err := (&Client{URLs: []string{srv.URL}, App: "cache"}).Find(ctx, idLow, testGroup)
	var se *StatusError
	if !errors.Is(err, ErrUnknownApp) || !errors.As(err, &se) || se.Code != http.StatusNotFound || !slices.Equal(se.Apps, apps) {
		t.Errorf("unknown app: %v (%+v), want a 404 naming the apps %v", err, se, apps)
	}
	if errors.Is(err, ErrUnknownGroup) {
		t.Errorf("unknown app reported as an unknown group: %v", err)
	}
	for _, q := range []string{"&app=Bad", "&app=a&app=b", "&app=a" + strings.Repeat("b", 300)} {
		resp, err := http.Get(srv.URL + PathFind + "?host=" + string(idLow) + "&group=" + testGroup + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, resp.StatusCode)
		}
	}
	one := serve(t, &Handler{Store: web})
	if _, err := (&Client{URLs: []string{one.URL}, App: "db"}).Find(ctx, idLow, testGroup); !errors.Is(err, ErrUnknownApp) {
		t.Errorf("a one-app endpoint asked for app db: %v, want ErrUnknownApp", err)
	}
	if a, err := (&Client{URLs: []string{one.URL}}).Find(ctx, idLow, testGroup); err != nil || a.Version != v2 {
		t.Errorf("a one-app endpoint without app: %+v %v", a, err)
	}
	if _, err := (&Client{URLs: []string{srv.URL}, App: "Bad App"}).Find(ctx, idLow, testGroup); err == nil {
		t.Error("a Client with a bad app asked anyway")
	}
}
