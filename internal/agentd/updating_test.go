package agentd_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/test/releases"
)

// gatedRelease serves releases, but holds a GET of path until gate is
// closed; asked is closed at the first such GET.
type gatedRelease struct {
	http.Handler
	path        string
	asked, gate chan struct{}
}

func (g *gatedRelease) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == g.path {
		select {
		case <-g.asked:
		default:
			close(g.asked)
		}
		select {
		case <-g.gate:
		case <-r.Context().Done():
			return
		}
	}
	g.Handler.ServeHTTP(w, r)
}

// While an install runs, the heartbeat says which version the agent is
// updating to (and since when: start_time); once it is installed, it no
// longer does.
func TestHeartbeatSaysUpdatingToDuringAnInstall(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	rs := releases.NewServer(nil)
	if err := rs.Add("2.0.0", releases.Good); err != nil {
		t.Fatal(err)
	}
	g := &gatedRelease{Handler: rs, path: "/2.0.0/app.tar.gz", asked: make(chan struct{}), gate: make(chan struct{})}
	rel := httptest.NewServer(g)
	t.Cleanup(rel.Close)
	setPlan(t, ctx, fleet, "1.0.0", "2.0.0")
	_, _, _, done := runEnabledAgent(t, ctx, srv.URL(), rel.URL)

	select {
	case <-g.asked:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not start downloading 2.0.0")
	}
	natstest.Eventually(t, 10*time.Second, func() error {
		hb, err := lastHeartbeat(ctx, fleet)
		if err != nil {
			return err
		}
		if hb.UpdatingTo != "2.0.0" || hb.StartTime.IsZero() || hb.ActiveVersion != "" {
			return fmt.Errorf("heartbeat during the download: updating_to %q, start_time %v, active %q; want 2.0.0, set, none",
				hb.UpdatingTo, hb.StartTime, hb.ActiveVersion)
		}
		return nil
	})
	close(g.gate)
	natstest.Eventually(t, 30*time.Second, func() error {
		hb, err := lastHeartbeat(ctx, fleet)
		if err != nil {
			return err
		}
		if hb.ActiveVersion != "2.0.0" || hb.UpdatingTo != "" {
			return fmt.Errorf("heartbeat after the install: active %q, updating_to %q; want 2.0.0 and none", hb.ActiveVersion, hb.UpdatingTo)
		}
		return nil
	})
	cancel()
	<-done
}
