// Package tuftest builds real release repositories (pkg/release) for
// tests: keys in files, a repository on disk, served by httptest.
package tuftest

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/release"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// Repo is a repository with one key per role (thresholds 1), all keys in
// KeyDir.
type Repo struct {
	T      testing.TB
	Repo   *release.Repo
	KeyDir string
	// Root, Targets, Snapshot and Timestamp are the roles' signers.
	Root, Targets, Snapshot, Timestamp *release.Signer
	// Server serves Repo.Dir (nil until Serve).
	Server *httptest.Server
}

// New initialises and publishes an empty repository under a temp dir.
// now may be nil (the wall clock).
func New(t testing.TB, now func() time.Time) *Repo {
	t.Helper()
	base := t.TempDir()
	r := &Repo{T: t, Repo: &release.Repo{Dir: filepath.Join(base, "repo"), Now: now}, KeyDir: filepath.Join(base, "keys")}
	if err := os.MkdirAll(r.KeyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	r.Root, r.Targets, r.Snapshot, r.Timestamp = r.Key("root"), r.Key("targets"), r.Key("snapshot"), r.Key("timestamp")
	one := func(s *release.Signer) release.RoleKeys {
		return release.RoleKeys{Keys: []*metadata.Key{s.Key}, Threshold: 1}
	}
	if err := r.Repo.Init(release.InitOptions{Root: one(r.Root), Targets: one(r.Targets), Snapshot: one(r.Snapshot), Timestamp: one(r.Timestamp)}); err != nil {
		t.Fatal(err)
	}
	r.Sign(r.Root, r.Targets)
	r.Publish()
	return r
}

// Key generates KeyDir/name.key and loads it.
func (r *Repo) Key(name string) *release.Signer {
	r.T.Helper()
	p := filepath.Join(r.KeyDir, name+".key")
	if _, err := release.GenerateKey(p); err != nil {
		r.T.Fatal(err)
	}
	s, err := release.LoadSigner(p)
	if err != nil {
		r.T.Fatal(err)
	}
	return s
}

// Sign signs what is staged with each signer.
func (r *Repo) Sign(signers ...*release.Signer) {
	r.T.Helper()
	for _, s := range signers {
		if _, err := r.Repo.Sign(s); err != nil {
			r.T.Fatal(err)
		}
	}
}

// Publish publishes what is staged with the snapshot and timestamp keys.
func (r *Repo) Publish() {
	r.T.Helper()
	if err := r.Repo.Publish(r.Snapshot, r.Timestamp); err != nil {
		r.T.Fatal(err)
	}
}

// Add writes content to a file named file and adds it as app's version
// for goos/goarch with c's flags, signed by the targets key and published.
func (r *Repo) Add(c release.Custom, file string, content []byte) string {
	r.T.Helper()
	src := filepath.Join(r.T.TempDir(), file)
	if err := os.WriteFile(src, content, 0o644); err != nil {
		r.T.Fatal(err)
	}
	p, err := r.Repo.AddTarget(src, c)
	if err != nil {
		r.T.Fatal(err)
	}
	r.Sign(r.Targets)
	r.Publish()
	return p
}

// Serve serves the repository over HTTP and returns its URL.
func (r *Repo) Serve() string {
	r.T.Helper()
	if r.Server == nil {
		r.Server = httptest.NewServer(http.FileServer(http.Dir(r.Repo.Dir)))
		r.T.Cleanup(r.Server.Close)
	}
	return r.Server.URL
}

// RootBytes is the newest published root: what a host is given to trust.
func (r *Repo) RootBytes() []byte {
	r.T.Helper()
	b, err := os.ReadFile(filepath.Join(r.Repo.Dir, release.MetadataDir, "root.json"))
	if err != nil {
		r.T.Fatal(err)
	}
	return b
}

// Client is a client of the served repository that trusts its current
// root, keeping its state in a new temp dir.
func (r *Repo) Client(now func() time.Time) *release.Client {
	r.T.Helper()
	dir := filepath.Join(r.T.TempDir(), "trust")
	if err := release.TrustRoot(dir, r.RootBytes()); err != nil {
		r.T.Fatal(err)
	}
	return &release.Client{URL: r.Serve(), Dir: dir, Now: now}
}

// Files reads every file under dir (path relative to dir, slash-separated
// → mode and content): compare two readings to prove a command that
// failed changed nothing.
func Files(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[filepath.ToSlash(rel)+"/"] = info.Mode().String()
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = info.Mode().String() + " " + string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
