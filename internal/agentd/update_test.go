package agentd_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/releases"
)

// setPlan makes group "blue" done on target (from start): every agent of
// the group is told to update to it now.
func setPlan(t *testing.T, ctx context.Context, fleet *kv.Fleet, start, target string) {
	t.Helper()
	spec := rollout.DefaultSpec(start, target)
	var rev uint64
	if e, err := kv.Get[rollout.Spec](ctx, fleet.Plan, kv.KeySpec); err == nil {
		rev = e.Revision
	}
	if _, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, rev); err != nil {
		t.Fatal(err)
	}
	st := rollout.GroupStatus{V: 1, Group: "blue", State: rollout.StateDone, TargetVersion: target, StartVersion: start,
		Progress: 1, Mode: rollout.ModeEnabled, HealthTimeout: rollout.Duration(10 * time.Second), MinHealthyTime: rollout.Duration(300 * time.Millisecond)}
	rev = 0
	if e, err := kv.Get[rollout.GroupStatus](ctx, fleet.Plan, kv.GroupKey("blue")); err == nil {
		rev = e.Revision
	}
	if _, err := kv.Save(ctx, fleet.Plan, kv.GroupKey("blue"), st, rev); err != nil {
		t.Fatal(err)
	}
}

// lastHeartbeat is the last heartbeat of the only agent of group "blue".
func lastHeartbeat(ctx context.Context, fleet *kv.Fleet) (*heartbeat.Heartbeat, error) {
	msgs, err := fleet.LastHeartbeats(ctx, "blue")
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("%d heartbeats, %v", len(msgs), err)
	}
	return heartbeat.DecodeFrom(msgs[0].Subject, msgs[0].Data)
}

// stallingRelease serves releases, except that a GET of path answers with
// the tarball's length and its first bytes, and then nothing until the
// client goes away. asked is closed at the first such GET, gone once its
// client went away.
type stallingRelease struct {
	http.Handler
	path        string
	tarball     []byte
	asked, gone chan struct{}
	onceAsked   sync.Once
	onceGone    sync.Once
}

func (s *stallingRelease) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != s.path {
		s.Handler.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(s.tarball)))
	_, _ = w.Write(s.tarball[:100])
	w.(http.Flusher).Flush()
	s.onceAsked.Do(func() { close(s.asked) })
	<-r.Context().Done()
	s.onceGone.Do(func() { close(s.gone) })
}

// TestAgentAbandonsOutdatedDownload: the agent is downloading 2.0.0 from a
// server that stalls when the plan moves to 3.0.0. The agent gives up the
// download at once (not after the stall timeout), hangs up on the server,
// and installs 3.0.0.
func TestAgentAbandonsOutdatedDownload(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	rs := releases.NewServer(nil)
	for _, v := range []string{"2.0.0", "3.0.0"} {
		if err := rs.Add(v, releases.Good); err != nil {
			t.Fatal(err)
		}
	}
	tarball, err := releases.Tarball("2.0.0", releases.Good)
	if err != nil {
		t.Fatal(err)
	}
	stalling := &stallingRelease{Handler: rs, path: "/2.0.0/app.tar.gz", tarball: tarball,
		asked: make(chan struct{}), gone: make(chan struct{})}
	rel := httptest.NewServer(stalling)
	t.Cleanup(rel.Close)
	setPlan(t, ctx, fleet, "1.0.0", "2.0.0")

	// The default stall timeout (a minute) is far beyond this test's
	// patience: only the plan change can end the download in time.
	_, _, logs, done := runEnabledAgent(t, ctx, srv.URL(), rel.URL)
	natstest.Eventually(t, 30*time.Second, func() error {
		select {
		case <-stalling.asked:
			return nil
		default:
			return fmt.Errorf("the agent has not started downloading 2.0.0")
		}
	})

	setPlan(t, ctx, fleet, "1.0.0", "3.0.0")
	natstest.Eventually(t, 20*time.Second, func() error {
		hb, err := lastHeartbeat(ctx, fleet)
		if err != nil {
			return err
		}
		if hb.ActiveVersion != "3.0.0" || hb.Rollback || hb.Error != "" {
			return fmt.Errorf("heartbeat %+v, want 3.0.0 installed", hb)
		}
		return nil
	})
	natstest.Eventually(t, 10*time.Second, func() error {
		select {
		case <-stalling.gone:
			return nil
		default:
			return fmt.Errorf("the stalled download of 2.0.0 is still open")
		}
	})
	// The plan moves through "unstarted" (new spec, old status) to 3.0.0:
	// either cancels the download.
	if want := `msg="the plan moved on; cancelled the download of an outdated target" version=2.0.0 plan_version=`; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, logs.String())
	}
	cancel()
	<-done
}
