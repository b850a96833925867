package agentd_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/release"
	"github.com/fleetwave/fleetwave/test/releases"
)

// repoApp is the app name the repository's targets name for the default
// app (agentd's appName: no --app, no --app-name).
const repoApp = "default"

// addRelease adds the stand-in app's version v with behaviour b to the
// repository, for this host's platform.
func addRelease(t *testing.T, r *tuftest.Repo, v string, b releases.Behaviour) []byte {
	t.Helper()
	tarball, err := releases.Tarball(v, b)
	if err != nil {
		t.Fatal(err)
	}
	r.Add(release.Custom{App: repoApp, Version: v, OS: runtime.GOOS, Arch: runtime.GOARCH}, "app.tar.gz", tarball)
	return tarball
}

// writeRoot writes the repository's root where an operator would keep
// the file given to --release-root.
func writeRoot(t *testing.T, r *tuftest.Repo) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "root.json")
	if err := os.WriteFile(p, r.RootBytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runRepoAgent runs an agent of group blue with updates enabled, in
// repository mode (the repository at repoURL, its root in rootFile), which
// supervises bin/app, until ctx ends; retries of blocked installs come
// after 50ms.
func runRepoAgent(t *testing.T, ctx context.Context, natsURL, repoURL, rootFile string, clk func(o *agentd.Options)) (*agentd.Agent, string, *natstest.Buffer, chan error) {
	t.Helper()
	root := t.TempDir()
	uf := install.NewUpdateFile("blue")
	uf.Spec.Enabled = true
	if err := uf.Save(root); err != nil {
		t.Fatal(err)
	}
	logs := &natstest.Buffer{}
	o := agentd.Options{
		Root: root, NATSURL: natsURL, Interval: time.Hour, Log: slog.New(slog.NewTextHandler(logs, nil)),
		RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		App: agentd.AppOptions{ReleaseRepo: repoURL, ReleaseRootFile: rootFile, BinDir: filepath.Join(root, "bin"), Process: "app"},
	}
	if clk != nil {
		clk(&o)
	}
	a, err := agentd.New(o)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return a, root, logs, done
}

// TestRepoAgentInstallsVerifiedTarget: an agent in repository mode
// installs the target the repository's verified metadata names for its
// app, the plan's version and its platform; update.yaml keeps the URL
// (not a url_template) and the trusted root is under the app's tree.
func TestRepoAgentInstallsVerifiedTarget(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	repo := tuftest.New(t, nil)
	addRelease(t, repo, "2.0.0", releases.Good)
	setPlan(t, ctx, fleet, "1.0.0", "2.0.0")

	a, root, _, done := runRepoAgent(t, ctx, srv.URL(), repo.Serve(), writeRoot(t, repo), nil)
	natstest.Eventually(t, 30*time.Second, func() error {
		hb, err := lastHeartbeat(ctx, fleet)
		if err != nil {
			return err
		}
		if hb.ActiveVersion != "2.0.0" || hb.Error != "" {
			return fmt.Errorf("heartbeat %+v, want 2.0.0 installed", hb)
		}
		return nil
	})
	if target, err := os.Readlink(filepath.Join(root, "bin", "app")); err != nil || !strings.Contains(target, "2.0.0") {
		t.Fatalf("bin/app -> %q (%v), want the 2.0.0 release", target, err)
	}
	uf, err := install.LoadUpdateFile(root)
	if err != nil {
		t.Fatal(err)
	}
	if uf.Spec.ReleaseRepo != repo.Serve() || uf.Spec.URLTemplate != "" {
		t.Errorf("update.yaml release_repo %q url_template %q, want the repository only", uf.Spec.ReleaseRepo, uf.Spec.URLTemplate)
	}
	if _, err := os.Stat(filepath.Join(root, "tuf", "root.json")); err != nil {
		t.Errorf("trusted root not under the tree: %v", err)
	}
	_ = a
	cancel()
	<-done
}
