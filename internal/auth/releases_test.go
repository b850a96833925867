package auth_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/release"
)

// TestControllerWritesTheReleaseCatalog (issue 27): in operator mode the
// real controller, with its minted creds and --release-repo, writes
// fleet_stats/releases (its grants already cover fleet_stats writes, and
// kv.WriteReleaseCatalog's TTL header is allowed), and the admin (fleetctl
// releases ls) reads it. An agent may neither write nor read it: the
// denials of TestAgentPermissions.
func TestControllerWritesTheReleaseCatalog(t *testing.T) {
	e := newFleetEnv(t)
	repo := tuftest.New(t, nil)
	repo.Add(release.Custom{App: "default", Version: "1.0.0", OS: "linux", Arch: "amd64", EndOfLife: true}, "app.tar.gz", []byte("one"))
	root := filepath.Join(t.TempDir(), "root.json")
	if err := os.WriteFile(root, repo.RootBytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	log := &natstest.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(ctx, &controller.RunOptions{
			NATSURL: e.srv.URL(), Creds: filepath.Join(e.dir.Path, auth.CredsFile(auth.UserController)), ID: "c1",
			StatsInterval: 100 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, AgentExpiry: time.Minute,
			ReconcileInterval: 100 * time.Millisecond, LeaseTTL: 2 * time.Second, Replicas: 1,
			ReleaseRepo: repo.Serve(), ReleaseRoot: root, ReleaseRefresh: time.Second, ReleaseTrustDir: filepath.Join(t.TempDir(), "trust"),
		}, slog.New(slog.NewTextHandler(log, nil)))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
		if t.Failed() {
			t.Logf("controller log:\n%s", log.String())
		}
	})
	admin := e.conn(auth.CredsFile(auth.UserAdmin))
	natstest.Eventually(t, 20*time.Second, func() error {
		cat, err := kv.ReadReleaseCatalog(e.ctx, admin)
		if err != nil {
			return err
		}
		if cat.By != "c1" || cat.Error != "" || len(cat.Releases) != 1 || !cat.Releases[0].EndOfLife {
			return fmt.Errorf("catalog %+v", cat)
		}
		return nil
	})
	if strings.Contains(log.String(), "writing the release catalog failed") {
		t.Errorf("the controller failed a write of the catalog:\n%s", log.String())
	}
}
