// Package tuftest builds real release repositories (pkg/release) for
// tests: keys in files, a repository on disk, served by httptest.
package tuftest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/release"
)

// Repo is a repository with one key per role (thresholds 1, unless made
// with NewWith), all keys in KeyDir.
type Repo struct {
	T      testing.TB
	Repo   *release.Repo
	KeyDir string
	// Root, Targets, Snapshot and Timestamp are the roles' signers (the
	// first of Roots and of TargetsKeys).
	Root, Targets, Snapshot, Timestamp *release.Signer
	// Roots and TargetsKeys are every key of the root and targets roles
	// (root-1.key, root-2.key, ... with NewWith), and RootThreshold and
	// TargetsThreshold how many must sign: Add signs with Targets and
	// the first others of TargetsKeys the threshold takes.
	Roots, TargetsKeys              []*release.Signer
	RootThreshold, TargetsThreshold int
	// Server serves Repo.Dir (nil until Serve).
	Server *httptest.Server
}

// New initialises and publishes an empty repository under a temp dir,
// one key per role (root.key, targets.key, snapshot.key, timestamp.key).
// now may be nil (the wall clock).
func New(t testing.TB, now func() time.Time) *Repo {
	t.Helper()
	return NewWith(t, Options{Now: now})
}

// Options shape a repository made by NewWith.
type Options struct {
	// Now is the repository's clock (nil: the wall clock).
	Now func() time.Time
	// RootKeys and RootThreshold, TargetsKeys and TargetsThreshold: how
	// many keys the root and targets roles have and how many must sign
	// (0: 1). With more than one key, the files are root-1.key, root-2.key
	// ... and targets-1.key, ...
	RootKeys, RootThreshold       int
	TargetsKeys, TargetsThreshold int
}

// NewWith is New with thresholds: e.g. root and targets 2-of-3, as a
// production repository is set up.
func NewWith(t testing.TB, o Options) *Repo {
	t.Helper()
	base := t.TempDir()
	r := &Repo{T: t, Repo: &release.Repo{Dir: filepath.Join(base, "repo"), Now: o.Now}, KeyDir: filepath.Join(base, "keys"),
		RootThreshold: max(o.RootThreshold, 1), TargetsThreshold: max(o.TargetsThreshold, 1)}
	if err := os.MkdirAll(r.KeyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	keys := func(role string, n int) []*release.Signer {
		if n <= 1 {
			return []*release.Signer{r.Key(role)}
		}
		var out []*release.Signer
		for i := 1; i <= n; i++ {
			out = append(out, r.Key(fmt.Sprintf("%s-%d", role, i)))
		}
		return out
	}
	r.Roots, r.TargetsKeys = keys("root", o.RootKeys), keys("targets", o.TargetsKeys)
	r.Root, r.Targets, r.Snapshot, r.Timestamp = r.Roots[0], r.TargetsKeys[0], r.Key("snapshot"), r.Key("timestamp")
	role := func(threshold int, ss ...*release.Signer) release.RoleKeys {
		rk := release.RoleKeys{Threshold: threshold}
		for _, s := range ss {
			rk.Keys = append(rk.Keys, s.Key)
		}
		return rk
	}
	if err := r.Repo.Init(release.InitOptions{Root: role(r.RootThreshold, r.Roots...), Targets: role(r.TargetsThreshold, r.TargetsKeys...),
		Snapshot: role(1, r.Snapshot), Timestamp: role(1, r.Timestamp)}); err != nil {
		t.Fatal(err)
	}
	r.Sign(r.Roots[:r.RootThreshold]...)
	r.Sign(r.TargetsKeys[:r.TargetsThreshold]...)
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
	r.Sign(r.targetsSigners()...)
	r.Publish()
	return p
}

// targetsSigners are Targets and as many more of TargetsKeys as the
// threshold takes (a test that rotates the targets key sets Targets).
func (r *Repo) targetsSigners() []*release.Signer {
	out := []*release.Signer{r.Targets}
	for _, s := range r.TargetsKeys {
		if len(out) >= r.TargetsThreshold {
			break
		}
		if s != r.Targets {
			out = append(out, s)
		}
	}
	return out
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
