package agentd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/theupdateframework/go-tuf/v2/metadata"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/release"
	"github.com/fleetwave/fleetwave/test/releases"
)

// Repository mode (issue 27 point 2): real agents, a real NATS server, a
// real TUF repository (internal/tuftest: keys in files, go-tuf metadata)
// served over HTTP through a mirror the test can break.

// repoApp is the app name the repository's targets name for the default
// app (agentd's appName: no --app, no --app-name).
const repoApp = "default"

// otherArch is a platform this host is not.
func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

// addRelease adds the stand-in app's version v with behaviour b to the
// repository for goarch ("": this host's), signed and published.
func addRelease(t *testing.T, r *tuftest.Repo, v string, b releases.Behaviour, goarch string) []byte {
	t.Helper()
	tarball, err := releases.Tarball(v, b)
	if err != nil {
		t.Fatal(err)
	}
	if goarch == "" {
		goarch = runtime.GOARCH
	}
	r.Add(release.Custom{App: repoApp, Version: v, OS: runtime.GOOS, Arch: goarch}, "app.tar.gz", tarball)
	return tarball
}

// writeRoot writes the repository's current root where an operator would
// keep the file given to --release-root.
func writeRoot(t *testing.T, r *tuftest.Repo) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "root.json")
	if err := os.WriteFile(p, r.RootBytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// mirror serves a repository's directory, and can be down (503), serve a
// timestamp whose signature does not verify, or serve other bytes for a
// version's target: the same length with one byte changed, or endless.
type mirror struct {
	h  http.Handler
	mu sync.Mutex
	// down, badTimestamp: as said; wrong[version] is "flip" or "endless".
	down         bool
	badTimestamp bool
	wrong        map[string]string
	// gets counts GETs of a version's target.
	gets map[string]int
}

func (m *mirror) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	down, badTS := m.down, m.badTimestamp
	var version, wrong string
	if parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/"); len(parts) == 5 && parts[0] == release.TargetsDir {
		version = parts[2]
		wrong = m.wrong[version]
		if r.Method == http.MethodGet {
			m.gets[version]++
		}
	}
	m.mu.Unlock()
	switch {
	case down:
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	case badTS && r.URL.Path == "/metadata/timestamp.json":
		rec := &bufferedResponse{header: http.Header{}}
		m.h.ServeHTTP(rec, r)
		var md map[string]any
		if err := json.Unmarshal(rec.body.Bytes(), &md); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		// Another expiry under the same signature: a mirror's edit.
		md["signed"].(map[string]any)["expires"] = "2099-01-01T00:00:00Z"
		b, _ := json.Marshal(md)
		_, _ = w.Write(b)
	case wrong == "flip":
		rec := &bufferedResponse{header: http.Header{}}
		m.h.ServeHTTP(rec, r)
		b := rec.body.Bytes()
		b[len(b)/2] ^= 0xff
		_, _ = w.Write(b)
	case wrong == "endless":
		chunk := bytes.Repeat([]byte{0x1f}, 64<<10)
		for range 1 << 14 { // 1 GiB at most, if nothing stopped reading
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	default:
		m.h.ServeHTTP(w, r)
	}
}

func (m *mirror) set(f func(m *mirror)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

func (m *mirror) targetGets(version string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gets[version]
}

// bufferedResponse records what a handler writes.
type bufferedResponse struct {
	header http.Header
	body   bytes.Buffer
	code   int
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferedResponse) WriteHeader(code int)        { b.code = code }

// repoEnv is an agent of group blue in repository mode on a manual clock
// (the repository signs on the same clock), its repository served through
// a mirror.
type repoEnv struct {
	*classEnv
	repo   *tuftest.Repo
	mirror *mirror
	url    string
}

func startRepoEnv(t *testing.T) *repoEnv {
	t.Helper()
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Now())
	repo := tuftest.New(t, clk.Now)
	m := &mirror{h: http.FileServer(http.Dir(repo.Repo.Dir)), wrong: map[string]string{}, gets: map[string]int{}}
	repo.Server = httptest.NewServer(m)
	t.Cleanup(repo.Server.Close)
	root := t.TempDir()
	uf := install.NewUpdateFile("blue")
	uf.Spec.Enabled = true
	if err := uf.Save(root); err != nil {
		t.Fatal(err)
	}
	e := &repoEnv{classEnv: &classEnv{t: t, ctx: ctx, fleet: fleet, clk: clk, root: root, logs: &natstest.Buffer{}, srv: srv},
		repo: repo, mirror: m, url: repo.Server.URL}
	e.a, err = agentd.New(agentd.Options{
		Root: root, NATSURL: srv.URL(), Interval: time.Hour, Clock: clk,
		Log: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		App: agentd.AppOptions{ReleaseRepo: e.url, ReleaseRootFile: writeRoot(t, repo), BinDir: filepath.Join(root, "bin"), Process: "app"},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("agent ended with %v", err)
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", e.logs.String())
		}
	})
	return e
}

// untouched checks that the host is as it was before version v was
// asked for: nothing of v under versions/ (no download left either), and
// bin/app still pointing at active ("" : no link).
func (e *repoEnv) untouched(v, active string) {
	e.t.Helper()
	ents, err := os.ReadDir(filepath.Join(e.root, "versions"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		e.t.Fatal(err)
	}
	for _, ent := range ents {
		if strings.Contains(ent.Name(), v) {
			e.t.Errorf("versions/%s exists: the refused release reached the host", ent.Name())
		}
	}
	target, err := os.Readlink(filepath.Join(e.root, "bin", "app"))
	switch {
	case active == "" && err == nil:
		e.t.Errorf("bin/app -> %s, want no link", target)
	case active != "" && !strings.Contains(target, active):
		e.t.Errorf("bin/app -> %q (%v), want %s", target, err, active)
	}
	if st := e.updateFile(); st.ActiveVersion != active || st.Rollback {
		e.t.Errorf("update.yaml status %+v, want %q active and no rollback", st, active)
	}
}

// status runs 'agentd status' on the agent's root (it works beside 'agentd
// run') and returns the app's release repository state.
func (e *repoEnv) status() agentd.RepoStatus {
	e.t.Helper()
	out, code := runAgentd(e.t, "status", "--root", e.root)
	if code != 0 {
		e.t.Fatalf("agentd status: exit %d: %s", code, out)
	}
	var rep agentd.StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		e.t.Fatalf("agentd status: %v\n%s", err, out)
	}
	if rep.ReleaseRepo == nil {
		e.t.Fatalf("agentd status has no release_repo:\n%s", out)
	}
	return *rep.ReleaseRepo
}

// TestRepoAgentInstallsVerifiedTarget: an agent in repository mode
// installs the target the repository's verified metadata names for its
// app, the plan's version and its platform; update.yaml keeps the URL
// (not a url_template), the trusted root is under the app's tree, and
// 'agentd status' shows the trust state.
func TestRepoAgentInstallsVerifiedTarget(t *testing.T) {
	e := startRepoEnv(t)
	addRelease(t, e.repo, "2.0.0", releases.Good, "")
	// The other platform's build of the same version is not this host's.
	addRelease(t, e.repo, "2.0.0", releases.Crash, otherArch())
	setPlan(t, e.ctx, e.fleet, "1.0.0", "2.0.0")
	e.installed("2.0.0")
	if target, err := os.Readlink(filepath.Join(e.root, "bin", "app")); err != nil || !strings.Contains(target, "2.0.0") {
		t.Fatalf("bin/app -> %q (%v), want the 2.0.0 release", target, err)
	}
	uf, err := install.LoadUpdateFile(e.root)
	if err != nil {
		t.Fatal(err)
	}
	if uf.Spec.ReleaseRepo != e.url || uf.Spec.URLTemplate != "" {
		t.Errorf("update.yaml release_repo %q url_template %q, want the repository only", uf.Spec.ReleaseRepo, uf.Spec.URLTemplate)
	}
	if _, err := os.Stat(filepath.Join(e.root, "tuf", "root.json")); err != nil {
		t.Errorf("trusted root not under the tree: %v", err)
	}
	st := e.status()
	if st.URL != e.url || st.RootVersion != 1 || st.TargetsVersion < 2 || st.LastError != "" || st.Expires.IsZero() {
		t.Errorf("status release_repo %+v, want %s, root v1, targets v2+, no error, an expiry", st, e.url)
	}
}

// TestRepoFailuresAreInfrastructure: whatever the repository or its mirror
// does wrong (down, frozen past its timestamp's expiry, metadata that does
// not verify, a target of wrong bytes or endless, no target for this
// host's platform), the agent installs nothing, leaves the host as it was,
// reports class infrastructure with a cause "release repository: ...",
// never remembers the version as bad, and installs it once the repository
// is right again (it retried with its backoff).
func TestRepoFailuresAreInfrastructure(t *testing.T) {
	for _, c := range []struct {
		name, cause string
		breakIt     func(e *repoEnv)
		fix         func(e *repoEnv)
	}{
		{"unreachable", "release repository: unavailable",
			func(e *repoEnv) { e.mirror.set(func(m *mirror) { m.down = true }) },
			func(e *repoEnv) { e.mirror.set(func(m *mirror) { m.down = false }) }},
		{"frozen", "release repository: expired",
			// No timer re-signed the timestamp: a day later it has expired.
			func(e *repoEnv) { e.clk.Advance(25 * time.Hour) },
			func(e *repoEnv) {
				if err := e.repo.Repo.Timestamp(e.repo.Timestamp); err != nil {
					e.t.Fatal(err)
				}
			}},
		{"unverifiable", "release repository: refused",
			func(e *repoEnv) { e.mirror.set(func(m *mirror) { m.badTimestamp = true }) },
			func(e *repoEnv) { e.mirror.set(func(m *mirror) { m.badTimestamp = false }) }},
		{"wrong bytes", "release repository: wrong file",
			func(e *repoEnv) { e.mirror.set(func(m *mirror) { m.wrong["2.0.0"] = "flip" }) },
			func(e *repoEnv) { e.mirror.set(func(m *mirror) { delete(m.wrong, "2.0.0") }) }},
		{"endless data", "release repository: wrong file",
			func(e *repoEnv) { e.mirror.set(func(m *mirror) { m.wrong["2.0.0"] = "endless" }) },
			func(e *repoEnv) { e.mirror.set(func(m *mirror) { delete(m.wrong, "2.0.0") }) }},
		{"other arch only", "release repository: no such release",
			nil,
			func(e *repoEnv) { addRelease(e.t, e.repo, "2.0.0", releases.Good, "") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := startRepoEnv(t)
			if c.breakIt != nil {
				addRelease(t, e.repo, "2.0.0", releases.Good, "")
				c.breakIt(e)
			} else {
				addRelease(t, e.repo, "2.0.0", releases.Good, otherArch())
			}
			setPlan(t, e.ctx, e.fleet, "1.0.0", "2.0.0")
			hb := e.failedBeat(heartbeat.ClassInfrastructure, c.cause)
			if !strings.Contains(hb.Error, "release repository") {
				t.Errorf("heartbeat error %q does not name the repository", hb.Error)
			}
			e.untouched("2.0.0", "")
			// The metadata's own failures are the refresh's, which status
			// shows; a wrong file or a missing target come after a good
			// refresh.
			refreshFails := c.cause != "release repository: wrong file" && c.cause != "release repository: no such release"
			if st := e.status(); refreshFails != strings.Contains(st.LastError, "release repository") {
				t.Errorf("status release_repo last_error %q, want the refresh's error: %v", st.LastError, refreshFails)
			}
			// Still refused at the next retry: nothing changed in between.
			e.clk.Advance(e.retryIn(1))
			e.retryIn(2)
			e.failedBeat(heartbeat.ClassInfrastructure, c.cause)
			e.untouched("2.0.0", "")
			c.fix(e)
			e.clk.Advance(retryCapForTest)
			e.installed("2.0.0")
			if st := e.status(); st.LastError != "" {
				t.Errorf("status release_repo last_error %q after a good refresh", st.LastError)
			}
		})
	}
}

// rotate stages root v+1 with a new root key and a new targets key (the
// old ones revoked), signed by the old root key and the new one, adds
// app's version v signed by the new targets key, and publishes: what
// 'fleetctl repo rotate-key' does for the root and targets roles.
func rotate(t *testing.T, r *tuftest.Repo, v string) (oldTargets *release.Signer) {
	t.Helper()
	root, err := r.Repo.PublishedRoot()
	if err != nil {
		t.Fatal(err)
	}
	newRoot, newTargets := r.Key("root-2"), r.Key("targets-2")
	for _, c := range []struct {
		role     string
		old, new *release.Signer
	}{{metadata.ROOT, r.Root, newRoot}, {metadata.TARGETS, r.Targets, newTargets}} {
		if err := root.Signed.RevokeKey(c.old.ID, c.role); err != nil {
			t.Fatal(err)
		}
		if err := root.Signed.AddKey(c.new.Key, c.role); err != nil {
			t.Fatal(err)
		}
	}
	root.Signed.Version++
	root.Signatures = nil
	b, err := root.ToBytes(true)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.Repo.Dir, release.StagedDir, "root.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	r.Sign(r.Root, newRoot)
	oldTargets = r.Targets
	r.Root, r.Targets = newRoot, newTargets
	addRelease(t, r, v, releases.Good, "") // signs with the new targets key, publishes
	return oldTargets
}

// TestRepoRunningAgentFollowsRotation: the repository rotates its root
// and targets keys while an agent runs; the agent (given root v1 at
// enable, never again) follows to root v2 and installs a release signed
// by the new targets key. A targets version signed afterwards by the
// revoked targets key alone is refused (infrastructure), and the host
// keeps what it runs.
func TestRepoRunningAgentFollowsRotation(t *testing.T) {
	e := startRepoEnv(t)
	addRelease(t, e.repo, "2.0.0", releases.Good, "")
	setPlan(t, e.ctx, e.fleet, "1.0.0", "2.0.0")
	e.installed("2.0.0")

	oldTargets := rotate(t, e.repo, "3.0.0")
	setPlan(t, e.ctx, e.fleet, "2.0.0", "3.0.0")
	e.installed("3.0.0")
	trusted, err := os.ReadFile(filepath.Join(e.root, "tuf", "root.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(trusted, e.repo.RootBytes()) {
		t.Errorf("the host trusts another root than the repository's v2")
	}
	if st := e.status(); st.RootVersion != 2 || st.LastError != "" {
		t.Errorf("status release_repo %+v, want root v2 and no error", st)
	}

	// The revoked targets key signs 4.0.0 (a thief of the old key).
	tarball, err := releases.Tarball("4.0.0", releases.Good)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "app.tar.gz")
	if err := os.WriteFile(src, tarball, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.repo.Repo.AddTarget(src, release.Custom{App: repoApp, Version: "4.0.0", OS: runtime.GOOS, Arch: runtime.GOARCH}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.repo.Repo.Sign(oldTargets); err == nil {
		// The repository tool refuses it: write the signature as a thief
		// would, straight into what the mirror serves.
		t.Log("the repository signed with a revoked key")
	}
	forgeTargets(t, e.repo, oldTargets)
	setPlan(t, e.ctx, e.fleet, "3.0.0", "4.0.0")
	e.failedBeat(heartbeat.ClassInfrastructure, "release repository: refused")
	e.untouched("4.0.0", "3.0.0")
	if got := e.updateFile().Error; !strings.Contains(got, "not enough signatures") {
		t.Errorf("update.yaml error %q, want the revoked key's signature refused (not enough signatures)", got)
	}
	if e.mirror.targetGets("4.0.0") != 0 {
		t.Errorf("the agent downloaded 4.0.0, which only a revoked key signed")
	}
}

// forgeTargets publishes the staged targets signed by s alone (a revoked
// key), with a snapshot and timestamp the repository's online keys sign:
// a compromised old targets key and a mirror that serves what it made.
func forgeTargets(t *testing.T, r *tuftest.Repo, s *release.Signer) {
	t.Helper()
	staged, err := r.Repo.StagedTargets()
	if err != nil || staged == nil {
		t.Fatalf("staged targets: %v", err)
	}
	staged.Signatures = nil
	if _, err := staged.Sign(loadKey(t, s)); err != nil {
		t.Fatal(err)
	}
	b, err := staged.ToBytes(true)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.Repo.Dir, release.StagedDir, "targets.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// Publish checks the targets signatures against the root: write the
	// forged targets, snapshot and timestamp by hand as an attacker with
	// the online keys would.
	md := filepath.Join(r.Repo.Dir, release.MetadataDir)
	if err := os.WriteFile(filepath.Join(md, fmt.Sprintf("%d.targets.json", staged.Signed.Version)), b, 0o644); err != nil {
		t.Fatal(err)
	}
	snapOld, err := r.Repo.PublishedSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	snap := metadata.Snapshot(snapOld.Signed.Expires)
	snap.Signed.Version = snapOld.Signed.Version + 1
	snap.Signed.Meta["targets.json"] = metadata.MetaFile(staged.Signed.Version)
	if _, err := snap.Sign(loadKey(t, r.Snapshot)); err != nil {
		t.Fatal(err)
	}
	sb, _ := snap.ToBytes(true)
	if err := os.WriteFile(filepath.Join(md, fmt.Sprintf("%d.snapshot.json", snap.Signed.Version)), sb, 0o644); err != nil {
		t.Fatal(err)
	}
	tsOld, err := r.Repo.PublishedTimestamp()
	if err != nil {
		t.Fatal(err)
	}
	ts := metadata.Timestamp(tsOld.Signed.Expires)
	ts.Signed.Version = tsOld.Signed.Version + 1
	ts.Signed.Meta["snapshot.json"] = metadata.MetaFile(snap.Signed.Version)
	if _, err := ts.Sign(loadKey(t, r.Timestamp)); err != nil {
		t.Fatal(err)
	}
	tb, _ := ts.ToBytes(true)
	if err := os.WriteFile(filepath.Join(md, "timestamp.json"), tb, 0o644); err != nil {
		t.Fatal(err)
	}
}

// loadKey is s as go-tuf signs with it.
func loadKey(t *testing.T, s *release.Signer) signature.Signer {
	t.Helper()
	return s.Sign()
}
