package install_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// TestMain lets the test binary play the app: a release's bin/app is a
// script that execs this binary with FLEETWAVE_TEST_APP set.
func TestMain(m *testing.M) {
	if mode := os.Getenv("FLEETWAVE_TEST_APP"); mode != "" {
		os.Exit(testApp(mode, os.Getenv("APP_VERSION"), os.Getenv("APP_DB"), os.Getenv("APP_ADDR")))
	}
	os.Exit(m.Run())
}

// testApp is one version of the app. It "migrates" the database by recording
// its version once (a restart of the same version writes nothing), then:
// good serves 200 on /healthz until killed, unhealthy serves 500, crash exits.
func testApp(mode, version, dbPath, addr string) int {
	db, err := sql.Open("sqlite", dbPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var n int
	_, err = db.Exec(`CREATE TABLE IF NOT EXISTS migrations (version TEXT PRIMARY KEY)`)
	if err == nil {
		err = db.QueryRow(`SELECT count(*) FROM migrations WHERE version = ?`, version).Scan(&n)
	}
	if err == nil && n == 0 {
		_, err = db.Exec(`INSERT INTO migrations (version) VALUES (?)`, version)
	}
	db.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if mode == "crash" {
		return 3
	}
	if mode == "crashloud" {
		// An app that says why it cannot start, as most do, more than
		// ten lines and with an escape sequence of its own.
		for i := range 14 {
			fmt.Fprintf(os.Stdout, "starting step %d\n", i)
		}
		fmt.Fprintln(os.Stderr, "\x1b[31mpanic: open /etc/app/app.conf: no such file or directory\x1b[0m")
		return 3
	}
	status := http.StatusOK
	if mode == "unhealthy" {
		status = http.StatusServiceUnavailable
	}
	err = http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	fmt.Fprintln(os.Stderr, err)
	return 2
}

// installRelease is a release the test server offers.
type installRelease struct {
	mode string // how its app behaves
	// tarball overrides the built archive (hostile releases).
	tarball []byte
	// extra entries go into the built archive beside bin/app.
	extra []extractEntry
}

// installServer serves releases at /r/<v>/app.tar.gz with .sha256 and .sig.
type installServer struct {
	*httptest.Server
	mu       sync.Mutex
	releases map[string]installRelease
	key      ed25519.PrivateKey
	// damage, when set, changes what is served for a path; nil: the
	// site answers 503.
	damage func(path string, body []byte) []byte
}

func newInstallServer(t *testing.T, key ed25519.PrivateKey, releases map[string]installRelease) *installServer {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := &installServer{releases: map[string]installRelease{}, key: key}
	for v, r := range releases {
		if r.tarball == nil {
			script := fmt.Sprintf("#!/bin/sh\nFLEETWAVE_TEST_APP=%s APP_VERSION=%s exec %q -test.run='^$'\n", r.mode, v, self)
			r.tarball = extractGzip(t, extractTar(t, append([]extractEntry{
				{Name: "bin/", Type: '5'},
				{Name: "bin/app", Mode: 0o755, Body: script},
				{Name: "README", Body: "release " + v},
			}, r.extra...)...))
		}
		s.releases[v] = r
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *installServer) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/r/"), "/")
	if len(parts) != 2 {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	rel, ok := s.releases[parts[0]]
	damage := s.damage
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	sum := sha256.Sum256(rel.tarball)
	sumFile := []byte(hex.EncodeToString(sum[:]) + "  app.tar.gz\n")
	statement := install.Statement{App: "app", Version: parts[0], File: "app.tar.gz", Size: int64(len(rel.tarball)), SHA256: hex.EncodeToString(sum[:])}.Bytes()
	var body []byte
	switch parts[1] {
	case "app.tar.gz":
		body = rel.tarball
	case "app.tar.gz.sha256":
		body = sumFile
	case "app.tar.gz.statement":
		body = statement
	case "app.tar.gz.sig":
		body = ed25519.Sign(s.key, statement)
	default:
		http.NotFound(w, r)
		return
	}
	if damage != nil {
		if body = damage(r.URL.Path, body); body == nil {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
	}
	http.ServeContent(w, r, parts[1], time.Unix(1_700_000_000, 0), strings.NewReader(string(body)))
}

// installHost is one host: its tree, app database, app runner and installer.
type installHost struct {
	t      *testing.T
	tree   install.Tree
	db     string
	addr   string
	runner *install.ProcessRunner
	in     *install.Installer
	status install.Status
	saved  []install.Status
}

func newInstallHost(t *testing.T, srv *installServer, pub ed25519.PublicKey) *installHost {
	t.Helper()
	root := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	h := &installHost{t: t, tree: install.Tree{Root: root, BinDir: filepath.Join(root, "bin")}, db: filepath.Join(root, "app.db"), addr: addr}
	h.runner = &install.ProcessRunner{
		Path:        filepath.Join(h.tree.BinDir, "app"),
		Env:         append(os.Environ(), "APP_DB="+h.db, "APP_ADDR="+addr),
		StopTimeout: 5 * time.Second,
	}
	t.Cleanup(func() { _ = h.runner.Stop(context.Background()) })
	h.in = &install.Installer{
		Tree:    h.tree,
		Fetcher: &install.Fetcher{Client: srv.Client(), URLTemplate: srv.URL + "/r/{{.Version}}/app.tar.gz", PublicKey: pub},
		Runner:  h.runner,
		Health:  install.Health{URL: "http://" + addr + "/healthz", Interval: 20 * time.Millisecond},
		DBPath:  h.db,
		Log:     slog.New(slog.NewTextHandler(t.Output(), nil)),
		Save: func(st install.Status) error {
			h.saved = append(h.saved, st)
			return nil
		},
	}
	return h
}

func (h *installHost) install(v string) error {
	h.t.Helper()
	st, err := h.in.Install(context.Background(), h.status, v, 10*time.Second, 300*time.Millisecond)
	h.status = st
	return err
}

// migrations lists the versions recorded in the app database.
func (h *installHost) migrations() []string {
	h.t.Helper()
	db, err := sql.Open("sqlite", h.db)
	if err != nil {
		h.t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT version FROM migrations ORDER BY version`)
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func (h *installHost) versionDirs() []string {
	h.t.Helper()
	var out []string
	entries, _ := os.ReadDir(h.tree.VersionsDir())
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

func installKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func TestInstallUpgradesKeepLastGoodAndPruneOlder(t *testing.T) {
	pub, priv := installKey(t)
	srv := newInstallServer(t, priv, map[string]installRelease{
		"1.0.0": {mode: "good"}, "1.1.0": {mode: "good"}, "1.2.0": {mode: "good"},
	})
	h := newInstallHost(t, srv, pub)
	for _, v := range []string{"1.0.0", "1.1.0", "1.2.0"} {
		if err := h.install(v); err != nil {
			t.Fatalf("install %s: %v", v, err)
		}
	}
	want := install.Status{ActiveVersion: "1.2.0", StartVersion: "1.1.0", VersionHistory: []string{"1.1.0", "1.0.0"}}
	if diff := cmp.Diff(want, h.status, cmpIgnoreStart); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if got := h.versionDirs(); !slices.Equal(got, []string{"1.1.0", "1.2.0"}) {
		t.Errorf("versions kept: %v, want the current and the last good [1.1.0 1.2.0]", got)
	}
	if v, err := h.tree.LinkedVersion(); err != nil || v != "1.2.0" {
		t.Errorf("links point into %q (%v), want 1.2.0", v, err)
	}
	if err := h.runner.Alive(context.Background()); err != nil {
		t.Errorf("app not running after the upgrade: %v", err)
	}
	if got := h.migrations(); !slices.Equal(got, []string{"1.0.0", "1.1.0", "1.2.0"}) {
		t.Errorf("database migrations %v", got)
	}
	// Installing the active version again is a no-op.
	n := len(h.saved)
	if err := h.install("1.2.0"); err != nil || len(h.saved) != n {
		t.Errorf("re-installing the active version: %v, %d new statuses", err, len(h.saved)-n)
	}
}

var cmpIgnoreStart = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".StartTime" }, cmp.Ignore())

func TestInstallRollsBackExactly(t *testing.T) {
	for _, mode := range []string{"crash", "unhealthy"} {
		t.Run(mode, func(t *testing.T) {
			pub, priv := installKey(t)
			srv := newInstallServer(t, priv, map[string]installRelease{"1.0.0": {mode: "good"}, "2.0.0": {mode: mode}})
			h := newInstallHost(t, srv, pub)
			if err := h.install("1.0.0"); err != nil {
				t.Fatal(err)
			}
			links := linkSnapshot(t, h.tree.BinDir)
			db := readFile(t, h.db)

			err := h.install("2.0.0")
			if !errors.Is(err, install.ErrUnhealthy) {
				t.Fatalf("install of a %s release: %v, want ErrUnhealthy", mode, err)
			}
			if diff := cmp.Diff(links, linkSnapshot(t, h.tree.BinDir)); diff != "" {
				t.Errorf("links after rollback (-before +after):\n%s", diff)
			}
			if got := readFile(t, h.db); string(got) != string(db) {
				t.Errorf("database not byte-identical after rollback (%d vs %d bytes); migrations now %v", len(got), len(db), h.migrations())
			}
			st := h.status
			if st.ActiveVersion != "1.0.0" || !st.Rollback || st.RollbackFrom != "2.0.0" || st.Error == "" ||
				st.ErrorClass != install.ClassRelease || st.ErrorCause != "unhealthy" {
				t.Errorf("status after rollback: %+v", st)
			}
			// The rollback reached Save (update.yaml, heartbeat) at once.
			if last := h.saved[len(h.saved)-1]; !last.Rollback {
				t.Errorf("last saved status is not the rollback: %+v", last)
			}
			if err := h.runner.Alive(context.Background()); err != nil {
				t.Errorf("previous version not running after the rollback: %v", err)
			}

			// Not retried automatically.
			n := len(h.saved)
			if err := h.install("2.0.0"); !errors.Is(err, install.ErrSkipped) || len(h.saved) != n {
				t.Errorf("second attempt at 2.0.0: %v (%d new statuses), want ErrSkipped and nothing done", err, len(h.saved)-n)
			}
		})
	}
}

func TestInstallBadReleaseChangesNothing(t *testing.T) {
	cases := []struct {
		name    string
		damage  func(path string, body []byte) []byte
		tarball []byte // hostile release
		space   uint64 // FreeSpace answer, 0 = real
		noKey   bool   // no signature required
		wantErr error
		// wantClass and wantCause: what update.yaml records (default
		// artifact: the site served something wrong).
		wantClass install.FailureClass
		wantCause string
	}{
		// Without a key: with one, the signature over the changed checksum
		// file fails first (ErrBadSignature), which the next case covers.
		{name: "wrong checksum", noKey: true, wantErr: install.ErrBadChecksum, wantCause: "checksum mismatch", damage: func(p string, b []byte) []byte {
			if strings.HasSuffix(p, ".sha256") {
				return []byte(strings.Repeat("0", 64) + "\n")
			}
			return b
		}},
		{name: "bad signature", wantErr: install.ErrBadSignature, wantCause: "bad signature", damage: func(p string, b []byte) []byte {
			if strings.HasSuffix(p, ".sig") {
				_, other := installKey(t)
				return ed25519.Sign(other, []byte("something else"))
			}
			return b
		}},
		{name: "tampered tarball", wantErr: install.ErrBadChecksum, wantCause: "checksum mismatch", damage: func(p string, b []byte) []byte {
			if strings.HasSuffix(p, ".tar.gz") {
				c := slices.Clone(b)
				c[len(c)/2] ^= 0xff
				return c
			}
			return b
		}},
		{name: "full disk", space: 1024, wantErr: install.ErrNoSpace, wantClass: install.ClassInfrastructure, wantCause: "disk full"},
		{name: "site down", wantErr: install.ErrDownload, wantClass: install.ClassInfrastructure, wantCause: "download failed (HTTP 503)",
			damage: func(string, []byte) []byte { return nil }},
		{name: "no bin", wantErr: install.ErrInvalidRelease, wantClass: install.ClassRelease, wantCause: "invalid release tree",
			tarball: extractGzip(t, extractTar(t, extractEntry{Name: "share/readme", Body: "x"}))},
		{name: "path traversal", wantErr: install.ErrHostileArchive, wantCause: "archive rejected", tarball: extractGzip(t, extractTar(t,
			extractEntry{Name: "bin/app", Mode: 0o755, Body: "#!/bin/sh\n"},
			extractEntry{Name: "../../evil", Body: "pwned"}))},
		{name: "symlink escape", wantErr: install.ErrHostileArchive, wantCause: "archive rejected", tarball: extractGzip(t, extractTar(t,
			extractEntry{Name: "bin/app", Mode: 0o755, Body: "#!/bin/sh\n"},
			extractEntry{Name: "bin/esc", Type: '2', Link: "../../../../etc"},
			extractEntry{Name: "bin/esc/passwd", Body: "pwned"}))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pub, priv := installKey(t)
			releases := map[string]installRelease{"1.0.0": {mode: "good"}, "2.0.0": {mode: "good", tarball: tc.tarball}}
			srv := newInstallServer(t, priv, releases)
			if tc.noKey {
				pub = nil
			}
			h := newInstallHost(t, srv, pub)
			if err := h.install("1.0.0"); err != nil {
				t.Fatal(err)
			}
			pid := h.runner.Pid()
			before := extractSnapshot(t, filepath.Dir(h.tree.Root))
			srv.damage = tc.damage
			if tc.space != 0 {
				h.in.Fetcher.FreeSpace = func(string) (uint64, error) { return tc.space, nil }
			}

			err := h.install("2.0.0")
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("install: %v, want %v", err, tc.wantErr)
			}
			after := extractSnapshot(t, filepath.Dir(h.tree.Root))
			for _, snap := range []map[string]string{before, after} {
				for p := range snap {
					// The lock file names its last holder; everything else
					// must be as it was.
					if strings.HasSuffix(p, "/lock") {
						delete(snap, p)
					}
				}
			}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("host changed by a rejected release (-before +after):\n%s", diff)
			}
			if h.runner.Pid() != pid || h.runner.Alive(context.Background()) != nil {
				t.Errorf("app restarted or stopped by a rejected release")
			}
			if h.status.ActiveVersion != "1.0.0" || h.status.Error == "" || h.status.Rollback {
				t.Errorf("status: %+v, want still 1.0.0 with the error recorded", h.status)
			}
			if tc.wantClass == "" {
				tc.wantClass = install.ClassArtifact
			}
			if h.status.ErrorClass != tc.wantClass || h.status.ErrorCause != tc.wantCause {
				t.Errorf("status error_class %q error_cause %q, want %q %q", h.status.ErrorClass, h.status.ErrorCause, tc.wantClass, tc.wantCause)
			}
		})
	}
}

// restartHook runs onRestart before each restart of the app.
type restartHook struct {
	install.Runner
	onRestart func()
}

func (r restartHook) Restart(ctx context.Context) error {
	r.onRestart()
	return r.Runner.Restart(ctx)
}

// TestInstallAbandon: closing Installer.Abandon stops an install whose
// download has not finished, with nothing changed on the host; once the
// release is downloaded, it no longer matters.
func TestInstallAbandon(t *testing.T) {
	cases := []struct {
		name string
		// setup returns when to close Abandon.
		setup func(t *testing.T, srv *installServer, h *installHost) (closeAt <-chan struct{})
		want  error
	}{
		{name: "before the download", want: install.ErrAbandoned, setup: func(*testing.T, *installServer, *installHost) <-chan struct{} {
			now := make(chan struct{})
			close(now)
			return now
		}},
		{name: "while the server does not answer", want: install.ErrAbandoned, setup: func(t *testing.T, srv *installServer, _ *installHost) <-chan struct{} {
			asked, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			srv.damage = func(p string, b []byte) []byte {
				if strings.HasSuffix(p, "/2.0.0/app.tar.gz") {
					once.Do(func() { close(asked) })
					<-release
				}
				return b
			}
			t.Cleanup(func() { close(release) }) // before the server closes
			return asked
		}},
		{name: "after the download", setup: func(_ *testing.T, _ *installServer, h *installHost) <-chan struct{} {
			restarting := make(chan struct{})
			var once sync.Once
			h.in.Runner = restartHook{Runner: h.in.Runner, onRestart: func() { once.Do(func() { close(restarting) }) }}
			return restarting
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pub, priv := installKey(t)
			srv := newInstallServer(t, priv, map[string]installRelease{"1.0.0": {mode: "good"}, "2.0.0": {mode: "good"}})
			h := newInstallHost(t, srv, pub)
			if err := h.install("1.0.0"); err != nil {
				t.Fatal(err)
			}
			before := extractSnapshot(t, filepath.Dir(h.tree.Root))
			closeAt := tc.setup(t, srv, h)
			abandon := make(chan struct{})
			h.in.Abandon = abandon
			go func() {
				<-closeAt
				close(abandon)
			}()

			err := h.install("2.0.0")
			if !errors.Is(err, tc.want) {
				t.Fatalf("install: %v, want %v", err, tc.want)
			}
			if tc.want == nil {
				if h.status.ActiveVersion != "2.0.0" {
					t.Errorf("status %+v, want 2.0.0 installed", h.status)
				}
				return
			}
			after := extractSnapshot(t, filepath.Dir(h.tree.Root))
			for _, snap := range []map[string]string{before, after} {
				for p := range snap {
					if strings.HasSuffix(p, "/lock") {
						delete(snap, p)
					}
				}
			}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("host changed by an abandoned install (-before +after):\n%s", diff)
			}
			if st := h.status; st.ActiveVersion != "1.0.0" || st.Rollback || !strings.HasPrefix(st.Error, "install 2.0.0: fetch: ") {
				t.Errorf("status %+v, want 1.0.0 with the abandoned fetch recorded", st)
			}
		})
	}
}

// failNextRestart fails the next Restart with err, without restarting.
type failNextRestart struct {
	install.Runner
	mu  sync.Mutex
	err error
}

func (r *failNextRestart) Restart(ctx context.Context) error {
	r.mu.Lock()
	err := r.err
	r.err = nil
	r.mu.Unlock()
	if err != nil {
		return err
	}
	return r.Runner.Restart(ctx)
}

// TestInstallInfrastructureFailureAfterSwap: the host, not the version,
// fails after the links were swapped (the disk is full when the app is
// restarted). The host is restored exactly as for a bad release, but the
// version is not remembered as rolled back from: the failure is recorded
// as infrastructure, and the next attempt installs it.
func TestInstallInfrastructureFailureAfterSwap(t *testing.T) {
	pub, priv := installKey(t)
	srv := newInstallServer(t, priv, map[string]installRelease{"1.0.0": {mode: "good"}, "2.0.0": {mode: "good"}})
	h := newInstallHost(t, srv, pub)
	if err := h.install("1.0.0"); err != nil {
		t.Fatal(err)
	}
	links := linkSnapshot(t, h.tree.BinDir)
	runner := &failNextRestart{Runner: h.in.Runner, err: &fs.PathError{Op: "write", Path: "/run/app/pid", Err: syscall.ENOSPC}}
	h.in.Runner = runner

	err := h.install("2.0.0")
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("install with a full disk at restart: %v, want ENOSPC", err)
	}
	st := h.status
	if st.ActiveVersion != "1.0.0" || st.Rollback || st.RollbackFrom != "" || st.ErrorClass != install.ClassInfrastructure || st.ErrorCause != "disk full" {
		t.Errorf("status after the failure: %+v, want 1.0.0 active, no rollback memory, infrastructure / disk full", st)
	}
	if diff := cmp.Diff(links, linkSnapshot(t, h.tree.BinDir)); diff != "" {
		t.Errorf("links not restored (-before +after):\n%s", diff)
	}
	if err := h.runner.Alive(context.Background()); err != nil {
		t.Errorf("previous version not running again: %v", err)
	}
	// The space is back: the version is tried again, and installs.
	if err := h.install("2.0.0"); err != nil {
		t.Fatalf("second attempt at 2.0.0: %v, want installed", err)
	}
	if h.status.ActiveVersion != "2.0.0" || h.status.Error != "" || h.status.ErrorClass != "" || h.status.ErrorCause != "" {
		t.Errorf("status after the second attempt: %+v", h.status)
	}
}

// TestInstallRefusesBeforeTouching: a release that a check refuses after
// its download (it ships a program agentd runs, or a bin name the bin dir
// holds for someone else) never touches the running app: not stopped or
// restarted, its database neither backed up nor restored, the links as
// they were; the refusal is recorded, and nothing is marked rolled back.
// A signed release may ship agentd (self-update).
func TestInstallRefusesBeforeTouching(t *testing.T) {
	// Each shipped program records that it ran.
	const ran = "#!/bin/sh\ntouch \"$(readlink -f \"$0\").ran\"\n"
	cases := []struct {
		name      string
		extra     []extractEntry
		unsigned  bool
		foreign   string // a regular file put in the bin dir under this name
		duringRun bool   // ... once the install reached the swap
		wantErr   error
		wantClass install.FailureClass
	}{
		{name: "ships bin/systemctl", extra: []extractEntry{{Name: "bin/systemctl", Mode: 0o755, Body: ran}},
			wantErr: install.ErrShadowsTool, wantClass: install.ClassRelease},
		{name: "ships bin/sh", extra: []extractEntry{{Name: "bin/sh", Mode: 0o755, Body: ran}},
			wantErr: install.ErrShadowsTool, wantClass: install.ClassRelease},
		{name: "ships bin/agentd unsigned", unsigned: true, extra: []extractEntry{{Name: "bin/agentd", Mode: 0o755, Body: ran}},
			wantErr: install.ErrShadowsTool, wantClass: install.ClassRelease},
		{name: "bin name not ours", extra: []extractEntry{{Name: "bin/tool", Mode: 0o755, Body: ran}}, foreign: "tool",
			wantErr: install.ErrNotOurs, wantClass: install.ClassInfrastructure},
		{name: "bin name not ours since the check", extra: []extractEntry{{Name: "bin/tool", Mode: 0o755, Body: ran}}, foreign: "tool", duringRun: true,
			wantErr: install.ErrNotOurs, wantClass: install.ClassInfrastructure},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pub, priv := installKey(t)
			srv := newInstallServer(t, priv, map[string]installRelease{"1.0.0": {mode: "good"}, "2.0.0": {mode: "good", extra: tc.extra}})
			if tc.unsigned {
				pub = nil
			}
			h := newInstallHost(t, srv, pub)
			if err := h.install("1.0.0"); err != nil {
				t.Fatal(err)
			}
			foreign := filepath.Join(h.tree.BinDir, tc.foreign)
			putForeign := func() {
				if err := os.WriteFile(foreign, []byte("#!/bin/sh\necho the operator's\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tc.foreign != "" && !tc.duringRun {
				putForeign()
			}
			if tc.duringRun {
				defer install.SetTestHookStep(func(s install.Step) {
					if s == install.StepSwap {
						putForeign()
					}
				})()
			}
			pid := h.runner.Pid()
			db := readFile(t, h.db)
			links := linkSnapshot(t, h.tree.BinDir)
			delete(links, tc.foreign) // checked below

			err := h.install("2.0.0")
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("install: %v, want %v", err, tc.wantErr)
			}
			if h.runner.Pid() != pid || h.runner.Alive(context.Background()) != nil {
				t.Errorf("app stopped or restarted (pid %d, was %d)", h.runner.Pid(), pid)
			}
			if got := readFile(t, h.db); !slices.Equal(got, db) {
				t.Errorf("database changed")
			}
			after := linkSnapshot(t, h.tree.BinDir)
			delete(after, tc.foreign)
			if diff := cmp.Diff(links, after); diff != "" {
				t.Errorf("links changed (-before +after):\n%s", diff)
			}
			if _, err := os.Stat(filepath.Join(h.tree.VersionDir("1.0.0"), "backup")); tc.duringRun == errors.Is(err, fs.ErrNotExist) {
				t.Errorf("backup of 1.0.0: %v; want one only when the refusal came at the swap", err)
			}
			if tc.foreign != "" {
				if b := readFile(t, foreign); !strings.Contains(string(b), "the operator's") {
					t.Errorf("%s replaced: %q", foreign, b)
				}
			}
			for _, e := range tc.extra {
				if _, err := os.Stat(filepath.Join(h.tree.VersionDir("2.0.0"), e.Name+".ran")); err == nil {
					t.Errorf("the release's %s was run", e.Name)
				}
			}
			st := h.status
			if st.ActiveVersion != "1.0.0" || st.Rollback || st.ErrorClass != tc.wantClass || !strings.Contains(st.Error, "install 2.0.0: ") {
				t.Errorf("status %+v, want 1.0.0 with a %s error and no rollback", st, tc.wantClass)
			}
			if j, err := install.LoadJournal(h.tree); err != nil || j != nil {
				t.Errorf("journal left: %+v, %v", j, err)
			}
		})
	}

	// Signed, a release may ship agentd: self-update runs it.
	pub, priv := installKey(t)
	srv := newInstallServer(t, priv, map[string]installRelease{"1.0.0": {mode: "good"},
		"2.0.0": {mode: "good", extra: []extractEntry{{Name: "bin/agentd", Mode: 0o755, Body: "#!/bin/sh\necho agentd version 9.9.9\n"}}}})
	h := newInstallHost(t, srv, pub)
	for _, v := range []string{"1.0.0", "2.0.0"} {
		if err := h.install(v); err != nil {
			t.Fatalf("install %s (signed): %v", v, err)
		}
	}
}

// TestInstallKeepsTheAppsLastLines: a release that fails keeps what its
// app printed last (its stdout and stderr, as agentd supervises it), or
// the failing health command's output when the app printed nothing, in
// status.error_output: the last OutputLines lines, as the host printed
// them (the agent cleans them for its heartbeat). A good install keeps
// none, and clears the last failure's.
func TestInstallKeepsTheAppsLastLines(t *testing.T) {
	pub, priv := installKey(t)
	srv := newInstallServer(t, priv, map[string]installRelease{
		"1.0.0": {mode: "good"}, "2.0.0": {mode: "crashloud"}, "2.1.0": {mode: "good"}, "2.2.0": {mode: "good"},
	})
	h := newInstallHost(t, srv, pub)
	if err := h.install("1.0.0"); err != nil {
		t.Fatal(err)
	}
	if err := h.install("2.0.0"); !errors.Is(err, install.ErrUnhealthy) {
		t.Fatalf("install of a crashing release: %v, want ErrUnhealthy", err)
	}
	want := "starting step 5\nstarting step 6\nstarting step 7\nstarting step 8\nstarting step 9\nstarting step 10\n" +
		"starting step 11\nstarting step 12\nstarting step 13\n\x1b[31mpanic: open /etc/app/app.conf: no such file or directory\x1b[0m"
	if got := h.status.ErrorOutput; got != want {
		t.Errorf("error_output after the crash:\n%q\nwant\n%q", got, want)
	}
	if !h.status.Rollback || h.saved[len(h.saved)-1].ErrorOutput != want {
		t.Errorf("the rollback's saved status does not carry the output: %+v", h.saved[len(h.saved)-1])
	}

	// The app printed nothing: the failing health command's output.
	h.in.Health = install.Health{Command: []string{"/bin/sh", "-c", "echo checking; echo 'db: connection refused' >&2; exit 1"},
		Interval: 20 * time.Millisecond}
	st, err := h.in.Install(context.Background(), h.status, "2.1.0", 300*time.Millisecond, 100*time.Millisecond)
	h.status = st
	if !errors.Is(err, install.ErrUnhealthy) {
		t.Fatalf("install with a failing health command: %v", err)
	}
	if got := h.status.ErrorOutput; got != "checking\ndb: connection refused" {
		t.Errorf("error_output of a failing health command: %q", got)
	}

	// A good install clears it.
	h.in.Health = install.Health{URL: "http://" + h.addr + "/healthz", Interval: 20 * time.Millisecond}
	if err := h.install("2.2.0"); err != nil {
		t.Fatal(err)
	}
	if h.status.ErrorOutput != "" || h.status.Error != "" {
		t.Errorf("after a good install: error %q, output %q", h.status.Error, h.status.ErrorOutput)
	}
}

// TestLastLines: the end of an app's output, bounded.
func TestLastLines(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 3000)
	tests := []struct{ name, in, want string }{
		{"nothing", "", ""},
		{"white space", "\n \n", ""},
		{"one line", "boom\n", "boom"},
		{"eleven lines", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n", "2\n3\n4\n5\n6\n7\n8\n9\n10\n11"},
		{"a long last line", "a\n" + long, "..." + long[len(long)-(install.OutputBytes-3):]},
	}
	for _, tc := range tests {
		if got := install.LastLines(tc.in); got != tc.want {
			t.Errorf("%s: LastLines = %.60q, want %.60q", tc.name, got, tc.want)
		}
	}
}
