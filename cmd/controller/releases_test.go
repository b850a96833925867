package main_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/release"
)

// TestReleaseFlagsRefuseBadInput (issue 27 point 3): what a tired operator
// types for the release repository fails the start at once, exit code 2,
// naming the flag, with nothing created: a root file that is missing,
// empty, a key instead of a root, a root changed after signing; one flag
// without the other; a URL that is not one; a refresh of 0.
func TestReleaseFlagsRefuseBadInput(t *testing.T) {
	repo := tuftest.New(t, nil)
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("root.json", string(repo.RootBytes()))
	changed := file("changed.json", strings.Replace(string(repo.RootBytes()), `"consistent_snapshot": true`, `"consistent_snapshot": false`, 1))
	pub, err := os.ReadFile(filepath.Join(repo.KeyDir, "root.key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	key := file("root.pub", string(pub))
	empty := file("empty.json", "")
	url := "https://releases.example.com/fleet"
	cases := map[string]struct {
		args []string
		want string
	}{
		"missing root file":    {[]string{"--release-repo", url, "--release-root", filepath.Join(dir, "nope.json")}, "--release-root: open"},
		"empty root file":      {[]string{"--release-repo", url, "--release-root", empty}, "the file is empty"},
		"a key, not a root":    {[]string{"--release-repo", url, "--release-root", key}, "not a TUF root"},
		"root changed":         {[]string{"--release-repo", url, "--release-root", changed}, "not signed by its own threshold"},
		"repo without root":    {[]string{"--release-repo", url}, "--release-repo needs --release-root"},
		"root without repo":    {[]string{"--release-root", good}, "--release-root without --release-repo"},
		"no scheme":            {[]string{"--release-repo", "releases.example.com", "--release-root", good}, "want the repository's base URL"},
		"ftp":                  {[]string{"--release-repo", "ftp://releases.example.com/", "--release-root", good}, "want the repository's base URL"},
		"refresh 0":            {[]string{"--release-repo", url, "--release-root", good, "--release-refresh", "0"}, "--release-refresh 0s: must be at least 1s"},
		"trust dir, no repo":   {[]string{"--release-trust-dir", dir}, "--release-trust-dir without --release-repo"},
		"user info in the URL": {[]string{"--release-repo", "https://u:p@releases.example.com/", "--release-root", good}, "want the repository's base URL"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			store := filepath.Join(t.TempDir(), "nats")
			t0 := time.Now()
			p := startController(t, nil, runArgs(store, natstest.FreePort(t), tc.args...)...)
			code, took := p.exited(t, 20*time.Second, t0)
			if code != 2 {
				t.Errorf("exit code %d, want 2 (usage)", code)
			}
			if took > 5*time.Second {
				t.Errorf("took %v to fail, want at once", took)
			}
			if !strings.Contains(p.out.String(), tc.want) {
				t.Errorf("error does not say %q:\n%s", tc.want, p.out.String())
			}
			if _, err := os.Stat(store); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused start left %s behind (stat: %v)", store, err)
			}
		})
	}
}

// TestReleaseRepoFromTheBinary: the controller binary, as an operator
// starts it, with a served repository and its root: the catalog lands in
// fleet_stats/releases with the repository's releases and flags, the
// trusted metadata under <store-dir>/release-trust, and /metrics says the
// catalog read fine.
func TestReleaseRepoFromTheBinary(t *testing.T) {
	repo := tuftest.New(t, nil)
	repo.Add(release.Custom{App: "default", Version: "1.0.0", OS: "linux", Arch: "amd64", EndOfLife: true}, "app.tar.gz", []byte("one"))
	repo.Add(release.Custom{App: "default", Version: "1.1.0", OS: "linux", Arch: "amd64", Security: true}, "app.tar.gz", []byte("two"))
	url := repo.Serve()
	root := filepath.Join(t.TempDir(), "root.json")
	if err := os.WriteFile(root, repo.RootBytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(t.TempDir(), "nats")
	port, httpPort := natstest.FreePort(t), natstest.FreePort(t)
	p := startController(t, nil, runArgs(store, port, "--release-repo", url, "--release-root", root, "--release-refresh", "1s",
		"--http-addr", listen(httpPort))...)
	waitReady(t, port)
	var cat kv.ReleaseCatalog
	natstest.Eventually(t, 30*time.Second, func() error {
		nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), Log: natstest.Logger(t)})
		if err != nil {
			return err
		}
		defer nc.Close()
		cat, err = kv.ReadReleaseCatalog(context.Background(), nc)
		return err
	})
	if cat.Error != "" || cat.URL != url || cat.By != "c1" || len(cat.Releases) != 2 ||
		!cat.Releases[0].EndOfLife || cat.Releases[0].Version != "1.0.0" || !cat.Releases[1].Security {
		t.Errorf("catalog: %+v", cat)
	}
	if _, err := os.Stat(filepath.Join(store, "release-trust", "root.json")); err != nil {
		t.Errorf("no trusted root under the store dir: %v", err)
	}
	natstest.Eventually(t, 30*time.Second, func() error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", httpPort))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), "\nfleetwave_release_catalog_error 0\n") || !strings.Contains(string(b), `fleetwave_release_catalog_releases{app="default"} 2`) {
			return fmt.Errorf("metrics lack the catalog's figures")
		}
		return nil
	})
	if !strings.Contains(p.out.String(), "release repository: "+url) {
		t.Errorf("the log does not say which repository it reads:\n%s", p.out.String())
	}
}
