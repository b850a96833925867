package install_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/install"
)

const fetchVersion = "1.2.3"

// fetchServer serves one release the way a release bucket does, and
// records what it was asked.
type fetchServer struct {
	*httptest.Server
	body []byte
	// sum, sig and statement are the .sha256, .sig and .statement files;
	// nil answers 404.
	sum, sig, statement []byte
	// tarball, when set, answers GET (not HEAD) of the tarball instead of
	// http.ServeContent.
	tarball http.HandlerFunc
	// hang is a request ("HEAD /app-….tar.gz") never answered: the handler
	// waits until the client goes away.
	hang string

	mu       sync.Mutex
	requests []string // "HEAD /app-….tar.gz"
	sent     int64    // tarball bytes sent in GET bodies
	encoding []string // Accept-Encoding of each tarball request
}

var fetchModTime = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)

func fetchTarballPath() string {
	return fmt.Sprintf("/app-%s-%s-%s.tar.gz", fetchVersion, runtime.GOOS, runtime.GOARCH)
}

// fetchRelease is size deterministic pseudo-random bytes.
func fetchRelease(size int) []byte {
	r := rand.New(rand.NewChaCha8([32]byte{1}))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func fetchSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// newFetchServer serves body with a correct "hex  name" checksum file and
// no signature; tests change the fields before the first request.
func newFetchServer(t *testing.T, body []byte) *fetchServer {
	t.Helper()
	s := &fetchServer{body: body, sum: []byte(fetchSum(body) + "  " + strings.TrimPrefix(fetchTarballPath(), "/") + "\n")}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *fetchServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
	if r.Method+" "+r.URL.Path == s.hang {
		<-r.Context().Done()
		return
	}
	switch r.URL.Path {
	case fetchTarballPath():
		s.mu.Lock()
		s.encoding = append(s.encoding, r.Header.Get("Accept-Encoding"))
		s.mu.Unlock()
		if s.tarball != nil && r.Method == http.MethodGet {
			s.tarball(w, r)
			return
		}
		http.ServeContent(&fetchCountingWriter{ResponseWriter: w, s: s}, r, "", fetchModTime, bytes.NewReader(s.body))
	case fetchTarballPath() + ".sha256":
		s.serveSmall(w, s.sum)
	case fetchTarballPath() + ".sig":
		s.serveSmall(w, s.sig)
	case fetchTarballPath() + ".statement":
		s.serveSmall(w, s.statement)
	default:
		http.NotFound(w, r)
	}
}

func (s *fetchServer) serveSmall(w http.ResponseWriter, b []byte) {
	if b == nil {
		http.Error(w, "no such object", http.StatusNotFound)
		return
	}
	_, _ = w.Write(b)
}

func (s *fetchServer) tarballGETs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.requests {
		if r == "GET "+fetchTarballPath() {
			n++
		}
	}
	return n
}

func (s *fetchServer) log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

func (s *fetchServer) bytesSent() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent
}

type fetchCountingWriter struct {
	http.ResponseWriter
	s *fetchServer
}

func (w *fetchCountingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.s.mu.Lock()
	w.s.sent += int64(n)
	w.s.mu.Unlock()
	return n, err
}

// fetcher is a Fetcher for s with plenty of free space.
func (s *fetchServer) fetcher() *install.Fetcher {
	return &install.Fetcher{
		Client:      s.Client(),
		URLTemplate: s.URL + "/app-{{.Version}}-{{.OS}}-{{.Arch}}.tar.gz",
		FreeSpace:   func(string) (uint64, error) { return 1 << 40, nil },
		// The file name carries the version: the app is named.
		App: "app",
	}
}

func (s *fetchServer) url() string { return s.URL + fetchTarballPath() }

func TestFetcherURL(t *testing.T) {
	t.Parallel()
	osArch := runtime.GOOS + "-" + runtime.GOARCH
	tests := []struct {
		name     string
		template string
		version  string
		want     string
		wantErr  string
	}{
		{
			name:     "all fields",
			template: "https://releases.example.net/app-{{.Version}}-{{.OS}}-{{.Arch}}.tar.gz",
			version:  "1.2.3",
			want:     "https://releases.example.net/app-1.2.3-" + osArch + ".tar.gz",
		},
		{
			name:     "prerelease and build",
			template: "http://mirror.internal:8080/{{.OS}}/{{.Arch}}/app_{{.Version}}.tgz",
			version:  "2.0.0-rc.1+build.5",
			want:     "http://mirror.internal:8080/" + runtime.GOOS + "/" + runtime.GOARCH + "/app_2.0.0-rc.1+build.5.tgz",
		},
		{name: "no fields", template: "https://example.net/latest.tar.gz", version: "1.2.3", want: "https://example.net/latest.tar.gz"},
		{name: "traversal version", template: "https://example.net/{{.Version}}.tar.gz", version: "../x", wantErr: "../x"},
		{name: "version with v", template: "https://example.net/{{.Version}}.tar.gz", version: "v1.2.3", wantErr: "leading"},
		{name: "short version", template: "https://example.net/{{.Version}}.tar.gz", version: "1.2", wantErr: "MAJOR.MINOR.PATCH"},
		{name: "empty version", template: "https://example.net/{{.Version}}.tar.gz", version: "", wantErr: "empty"},
		{name: "unknown field", template: "https://example.net/{{.Edition}}-{{.Version}}.tar.gz", version: "1.2.3", wantErr: "Edition"},
		{name: "bad template", template: "https://example.net/{{.Version", version: "1.2.3", wantErr: "url_template"},
		{name: "file URL", template: "file:///srv/{{.Version}}.tar.gz", version: "1.2.3", wantErr: "want an http:// or https:// URL"},
		{name: "relative", template: "releases/{{.Version}}.tar.gz", version: "1.2.3", wantErr: "want an http:// or https:// URL"},
		{name: "no host", template: "https:///{{.Version}}.tar.gz", version: "1.2.3", wantErr: "want an http:// or https:// URL"},
		{name: "empty", template: "", version: "1.2.3", wantErr: "want an http:// or https:// URL"},
		{
			name:     "password not echoed",
			template: "ftp://user:hunter2@example.net/{{.Version}}.tar.gz",
			version:  "1.2.3",
			wantErr:  "ftp://user:xxxxx@example.net/1.2.3.tar.gz",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &install.Fetcher{URLTemplate: tc.template}
			got, err := f.URL(tc.version)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("URL = %q, %v; want an error saying %q", got, err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("URL: %v", err)
			}
			if got != tc.want {
				t.Errorf("URL = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestFetchBadVersion: a version from the network never reaches a request
// or a path.
func TestFetchBadVersion(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"../x", "../../etc/passwd", "1.2.3/../../x", "", "v1.2.3"} {
		s := newFetchServer(t, fetchRelease(1024))
		dir := t.TempDir()
		if dl, err := s.fetcher().Fetch(t.Context(), v, dir); err == nil {
			t.Errorf("Fetch(%q) = %+v, want an error", v, dl)
		}
		if got := s.log(); len(got) != 0 {
			t.Errorf("Fetch(%q) made requests: %v", v, got)
		}
		if diff := cmp.Diff([]string{}, dirNames(t, dir)); diff != "" {
			t.Errorf("Fetch(%q) wrote (-want +got):\n%s", v, diff)
		}
	}
}

func TestFetch(t *testing.T) {
	t.Parallel()
	body := fetchRelease(300 << 10)
	s := newFetchServer(t, body)
	dir := filepath.Join(t.TempDir(), "downloads") // created by Fetch

	got, err := s.fetcher().Fetch(t.Context(), fetchVersion, dir)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	want := install.Download{
		Path:   filepath.Join(dir, ".download-"+fetchVersion+".tar.gz"),
		SHA256: fetchSum(body),
		Size:   int64(len(body)),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Download (-want +got):\n%s", diff)
	}
	if b, err := os.ReadFile(got.Path); err != nil || !bytes.Equal(b, body) {
		t.Errorf("downloaded file differs from the release (%d bytes, %v)", len(b), err)
	}
	if diff := cmp.Diff([]string{".download-" + fetchVersion + ".tar.gz"}, dirNames(t, dir)); diff != "" {
		t.Errorf("download dir (-want +got):\n%s", diff)
	}
	wantLog := []string{"HEAD " + fetchTarballPath(), "GET " + fetchTarballPath() + ".sha256", "GET " + fetchTarballPath()}
	if diff := cmp.Diff(wantLog, s.log()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	// The client must not ask for, and transparently undo, a gzip encoding.
	if diff := cmp.Diff([]string{"identity", "identity"}, s.encoding); diff != "" {
		t.Errorf("Accept-Encoding of the tarball requests (-want +got):\n%s", diff)
	}
}

// TestFetchThenExtract: the two halves fit together.
func TestFetchThenExtract(t *testing.T) {
	t.Parallel()
	s := newFetchServer(t, extractGzip(t, extractTar(t, extractGoodRelease()...)))
	base := t.TempDir()
	dl, err := s.fetcher().Fetch(t.Context(), fetchVersion, base)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	tree := install.Tree{Root: filepath.Join(base, "root")}
	if err := install.Extract(dl.Path, tree, fetchVersion, dl.SHA256, install.Limits{}); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	if got := string(readFile(t, tree.MarkerPath(fetchVersion))); got != dl.SHA256+"\n" {
		t.Errorf("marker = %q, want %q", got, dl.SHA256+"\n")
	}
}

func TestFetchChecksumFile(t *testing.T) {
	t.Parallel()
	body := fetchRelease(10 << 10)
	sum := fetchSum(body)
	tests := []struct {
		name string
		file string
		ok   bool
	}{
		{name: "bare", file: sum, ok: true},
		{name: "bare with newline", file: sum + "\n", ok: true},
		{name: "sha256sum text mode", file: sum + "  app.tar.gz\n", ok: true},
		{name: "sha256sum binary mode", file: sum + " *app.tar.gz\n", ok: true},
		{name: "uppercase", file: strings.ToUpper(sum) + "\n", ok: true},
		{name: "CRLF", file: sum + "  app.tar.gz\r\n", ok: true},
		{name: "empty", file: ""},
		{name: "short", file: sum[:63] + "\n"},
		{name: "long", file: sum + "0\n"},
		{name: "not hex", file: strings.Repeat("g", 64) + "\n"},
		{name: "two lines", file: sum + "  app.tar.gz\n" + sum + "  other.tar.gz\n"},
		{name: "one space then name", file: sum + " app.tar.gz\n"},
		{name: "HTML", file: "<html><body>Sign in to the Wi-Fi</body></html>\n"},
		{name: "too big", file: sum + "  " + strings.Repeat("a", 5000) + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFetchServer(t, body)
			s.sum = []byte(tc.file)
			dir := t.TempDir()
			dl, err := s.fetcher().Fetch(t.Context(), fetchVersion, dir)
			if tc.ok {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				if dl.SHA256 != sum {
					t.Errorf("SHA256 = %q, want %q", dl.SHA256, sum)
				}
				return
			}
			if !errors.Is(err, install.ErrDownload) || !strings.Contains(err.Error(), s.url()+".sha256") {
				t.Fatalf("Fetch = %v; want ErrDownload naming %s.sha256", err, s.url())
			}
			if n := s.tarballGETs(); n != 0 {
				t.Errorf("tarball downloaded %d times with an unusable checksum", n)
			}
			if diff := cmp.Diff([]string{}, dirNames(t, dir)); diff != "" {
				t.Errorf("download dir (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFetchBadChecksum(t *testing.T) {
	t.Parallel()
	body := fetchRelease(64 << 10)
	s := newFetchServer(t, body)
	s.sum = []byte(fetchSum(append([]byte("tampered"), body...)) + "\n")
	dir := t.TempDir()
	_, err := s.fetcher().Fetch(t.Context(), fetchVersion, dir)
	if !errors.Is(err, install.ErrBadChecksum) {
		t.Fatalf("Fetch = %v, want ErrBadChecksum", err)
	}
	if !strings.Contains(err.Error(), fetchSum(body)) || !strings.Contains(err.Error(), s.url()) {
		t.Errorf("error %q does not name the URL and the checksum computed", err)
	}
	if diff := cmp.Diff([]string{}, dirNames(t, dir)); diff != "" {
		t.Errorf("download dir after a mismatch (-want +got):\n%s", diff)
	}
}

// fetchStatement is the statement of body published as version under the
// test server's file name.
func fetchStatement(version string, body []byte) install.Statement {
	return install.Statement{App: "app", Version: version, File: strings.TrimPrefix(fetchTarballPath(), "/"), Size: int64(len(body)), SHA256: fetchSum(body)}
}

// TestFetchSignature: the signature must cover the statement of exactly
// this app, version, file, size and sha256, which Fetch builds itself. A
// genuine signature of anything else (another version: a replay; the
// checksum file alone: the old way) is refused, with an error that says
// what it was signed for; what the site publishes beside it never makes a
// signature acceptable.
func TestFetchSignature(t *testing.T) {
	t.Parallel()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, otherPriv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	body := fetchRelease(32 << 10)
	sumFile := []byte(fetchSum(body) + "  app.tar.gz\n")
	right := fetchStatement(fetchVersion, body)
	statement := right.Bytes()
	good := ed25519.Sign(priv, statement)
	with := func(edit func(*install.Statement)) []byte {
		s := right
		edit(&s)
		return s.Bytes()
	}
	older := with(func(s *install.Statement) { s.Version = "1.0.0" })
	otherApp := with(func(s *install.Statement) { s.App = "billing" })
	otherFile := with(func(s *install.Statement) { s.File = "app-1.2.3-linux-arm64.tar.gz" })
	otherSize := with(func(s *install.Statement) { s.Size++ })
	tests := []struct {
		name      string
		sig       []byte
		published []byte // the .statement served (nil: 404)
		wantIs    []error
		wantText  string // in the error
	}{
		{name: "raw", sig: good},
		{name: "base64", sig: []byte(base64.StdEncoding.EncodeToString(good))},
		{name: "base64 with newline", sig: []byte(base64.StdEncoding.EncodeToString(good) + "\n")},
		{name: "published statement served", sig: good, published: statement},
		{name: "other key", sig: ed25519.Sign(otherPriv, statement), published: statement, wantIs: []error{install.ErrBadSignature},
			wantText: "signed with another key, or for another app, version or file"},
		{name: "over other bytes", sig: ed25519.Sign(priv, bytes.TrimSpace(statement)), wantIs: []error{install.ErrBadSignature}},
		{name: "one bit flipped", sig: append([]byte{good[0] ^ 1}, good[1:]...), wantIs: []error{install.ErrBadSignature}},
		{name: "truncated", sig: good[:63], wantIs: []error{install.ErrBadSignature}},
		{name: "base64 of too little", sig: []byte(base64.StdEncoding.EncodeToString(good[:32])), wantIs: []error{install.ErrBadSignature}},
		{name: "garbage", sig: []byte("not a signature"), wantIs: []error{install.ErrBadSignature}},
		{name: "empty", sig: []byte{}, wantIs: []error{install.ErrBadSignature}},
		{name: "missing", sig: nil, wantIs: []error{install.ErrDownload}},
		// Made the old way: over the checksum file, which names no version.
		{name: "old way", sig: ed25519.Sign(priv, sumFile), wantIs: []error{install.ErrBadSignature, install.ErrOldSignature},
			wantText: "re-sign the release: scripts/release.sh --key KEY.pem --resign " + fetchVersion + " SITEDIR"},
		// Genuine signatures of another release, replayed here.
		{name: "another version", sig: ed25519.Sign(priv, older), published: older, wantIs: []error{install.ErrBadSignature, install.ErrOtherRelease},
			wantText: "signed for version 1.0.0, want " + fetchVersion},
		{name: "another app", sig: ed25519.Sign(priv, otherApp), published: otherApp, wantIs: []error{install.ErrBadSignature, install.ErrOtherRelease},
			wantText: "signed for app billing, want app"},
		{name: "another file", sig: ed25519.Sign(priv, otherFile), published: otherFile, wantIs: []error{install.ErrBadSignature, install.ErrOtherRelease},
			wantText: "signed for file app-1.2.3-linux-arm64.tar.gz, want " + strings.TrimPrefix(fetchTarballPath(), "/")},
		{name: "another size", sig: ed25519.Sign(priv, otherSize), published: otherSize, wantIs: []error{install.ErrBadSignature, install.ErrOtherRelease},
			wantText: fmt.Sprintf("signed for size %d, want %d", len(body)+1, len(body))},
		// Replayed with no statement, or with one that claims to be this
		// release (it does not verify): refused all the same.
		{name: "another version, no statement", sig: ed25519.Sign(priv, older), wantIs: []error{install.ErrBadSignature},
			wantText: "for app app, version " + fetchVersion},
		{name: "another version, lying statement", sig: ed25519.Sign(priv, older), published: statement, wantIs: []error{install.ErrBadSignature},
			wantText: "for app app, version " + fetchVersion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFetchServer(t, body)
			s.sum, s.sig, s.statement = sumFile, tc.sig, tc.published
			f := s.fetcher()
			f.PublicKey = pub
			dir := t.TempDir()
			dl, err := f.Fetch(t.Context(), fetchVersion, dir)
			if tc.wantIs == nil {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				if b, err := os.ReadFile(dl.Path); err != nil || !bytes.Equal(b, body) {
					t.Errorf("downloaded file differs from the release (%v)", err)
				}
				return
			}
			for _, want := range tc.wantIs {
				if !errors.Is(err, want) {
					t.Fatalf("Fetch = %v, want %v", err, want)
				}
			}
			if tc.name == "another version, lying statement" && errors.Is(err, install.ErrOtherRelease) {
				t.Errorf("Fetch = %v: a statement that does not verify was believed", err)
			}
			if !strings.Contains(err.Error(), s.url()+".sig") || !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %q does not name %s.sig and say %q", err, s.url(), tc.wantText)
			}
			// Nothing unsigned is downloaded, or written.
			if n := s.tarballGETs(); n != 0 {
				t.Errorf("tarball downloaded %d times despite the signature", n)
			}
			if diff := cmp.Diff([]string{}, dirNames(t, dir)); diff != "" {
				t.Errorf("download dir (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFetchSignatureNamesTheApp: without App, the app is the one the file
// name implies; a file name that implies none is an error before any
// request, naming the fix.
func TestFetchSignatureNamesTheApp(t *testing.T) {
	t.Parallel()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	body := fetchRelease(1024)
	s := newFetchServer(t, body)
	s.sig = ed25519.Sign(priv, fetchStatement(fetchVersion, body).Bytes())
	f := s.fetcher()
	f.PublicKey, f.App = pub, ""
	if _, err := f.Fetch(t.Context(), fetchVersion, t.TempDir()); err == nil || !strings.Contains(err.Error(), "--app-name") {
		t.Fatalf("Fetch of %s with no app name = %v, want an error naming --app-name", fetchTarballPath(), err)
	}
	// HEAD and .sha256 come first (the statement names the size and the
	// checksum); nothing after.
	if diff := cmp.Diff([]string{"HEAD " + fetchTarballPath(), "GET " + fetchTarballPath() + ".sha256"}, s.log()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	for file, want := range map[string]struct {
		app string
		ok  bool
	}{
		"app.tar.gz": {"app", true}, "billing-api.tgz": {"billing-api", true}, "web": {"web", true},
		"app-1.2.3.tar.gz": {"app-1.2.3", false}, "App.tar.gz": {"App", false}, "app.zip": {"app.zip", false},
		"9lives.tar.gz": {"9lives", false}, "a" + strings.Repeat("b", 32) + ".tar.gz": {"a" + strings.Repeat("b", 32), false},
	} {
		app, ok := install.AppNameFromFile(file)
		if app != want.app || ok != want.ok {
			t.Errorf("AppNameFromFile(%q) = %q, %v; want %q, %v", file, app, ok, want.app, want.ok)
		}
	}
}

// TestFetchBadPublicKey: a misconfigured key is an error, not a panic in
// ed25519.Verify, and never means "no signature needed".
func TestFetchBadPublicKey(t *testing.T) {
	t.Parallel()
	s := newFetchServer(t, fetchRelease(1024))
	f := s.fetcher()
	f.PublicKey = ed25519.PublicKey{}
	if _, err := f.Fetch(t.Context(), fetchVersion, t.TempDir()); err == nil || !strings.Contains(err.Error(), "public key has 0 bytes") {
		t.Fatalf("Fetch with an empty key = %v", err)
	}
	if got := s.log(); len(got) != 0 {
		t.Errorf("requests made with a bad key: %v", got)
	}
}

// TestFetchTruncated: the server promises more than it sends. The part
// already received is kept, and the next attempt resumes from it.
func TestFetchTruncated(t *testing.T) {
	t.Parallel()
	body := fetchRelease(256 << 10)
	half := len(body) / 2
	s := newFetchServer(t, body)
	var truncate sync.Mutex // held while the server truncates
	truncating := true
	s.tarball = func(w http.ResponseWriter, r *http.Request) {
		truncate.Lock()
		cut := truncating
		truncate.Unlock()
		if !cut {
			http.ServeContent(&fetchCountingWriter{ResponseWriter: w, s: s}, r, "", fetchModTime, bytes.NewReader(body))
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body[:half])
		// Returning short of Content-Length makes net/http close the
		// connection: the client sees the body end early.
	}
	dir := t.TempDir()
	_, err := s.fetcher().Fetch(t.Context(), fetchVersion, dir)
	if !errors.Is(err, install.ErrDownload) || !strings.Contains(err.Error(), s.url()) {
		t.Fatalf("Fetch = %v, want ErrDownload naming the URL", err)
	}
	part := filepath.Join(dir, ".download-"+fetchVersion+".part")
	got, err := os.ReadFile(part)
	if err != nil {
		t.Fatalf("the partial download was not kept: %v", err)
	}
	if len(got) == 0 || len(got) > half || !bytes.Equal(got, body[:len(got)]) {
		t.Fatalf(".part holds %d bytes that are not a prefix of the first %d", len(got), half)
	}
	if diff := cmp.Diff([]string{".download-" + fetchVersion + ".part"}, dirNames(t, dir)); diff != "" {
		t.Errorf("download dir (-want +got):\n%s", diff)
	}

	truncate.Lock()
	truncating = false
	truncate.Unlock()
	dl, err := s.fetcher().Fetch(t.Context(), fetchVersion, dir)
	if err != nil {
		t.Fatalf("second Fetch: %v", err)
	}
	if b, err := os.ReadFile(dl.Path); err != nil || !bytes.Equal(b, body) {
		t.Errorf("resumed file differs from the release (%v)", err)
	}
	if sent, want := s.bytesSent(), int64(len(body)-len(got)); sent != want {
		t.Errorf("resumed download sent %d bytes, want the missing %d", sent, want)
	}
}

// TestFetchTooLong: a body longer than HEAD announced is not the release.
func TestFetchTooLong(t *testing.T) {
	t.Parallel()
	body := fetchRelease(64 << 10)
	longer := append(append([]byte(nil), body...), "trailing junk"...)
	tests := []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request)
		want    string
	}{
		{
			name: "Content-Length says so",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(longer)))
				_, _ = w.Write(longer)
			},
			want: "Content-Length " + strconv.Itoa(len(longer)),
		},
		{
			name: "chunked",
			handler: func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write(longer[:1000])
				w.(http.Flusher).Flush() // no Content-Length from here on
				_, _ = w.Write(longer[1000:])
			},
			want: "body longer than the " + strconv.Itoa(len(body)) + " bytes announced",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFetchServer(t, body)
			s.tarball = tc.handler
			dir := t.TempDir()
			_, err := s.fetcher().Fetch(t.Context(), fetchVersion, dir)
			if !errors.Is(err, install.ErrDownload) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Fetch = %v, want ErrDownload saying %q", err, tc.want)
			}
			for _, name := range dirNames(t, dir) {
				t.Errorf("left in the download dir: %s", name)
			}
		})
	}
}

func TestFetchNoSpace(t *testing.T) {
	t.Parallel()
	body := fetchRelease(100 << 10)
	size := uint64(len(body))
	const margin = 1 << 20
	need := 3*size + margin
	tests := []struct {
		name string
		free uint64
		ok   bool
	}{
		{name: "exactly enough", free: need, ok: true},
		{name: "one byte short", free: need - 1},
		{name: "room for the tarball only", free: size},
		{name: "none", free: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFetchServer(t, body)
			f := s.fetcher()
			f.SpaceMargin = margin
			var asked []string
			f.FreeSpace = func(dir string) (uint64, error) {
				asked = append(asked, dir)
				return tc.free, nil
			}
			dir := t.TempDir()
			_, err := f.Fetch(t.Context(), fetchVersion, dir)
			if diff := cmp.Diff([]string{dir}, asked); diff != "" {
				t.Errorf("FreeSpace asked about (-want +got):\n%s", diff)
			}
			if tc.ok {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				return
			}
			if !errors.Is(err, install.ErrNoSpace) {
				t.Fatalf("Fetch = %v, want ErrNoSpace", err)
			}
			for _, n := range []uint64{tc.free, need} {
				if !strings.Contains(err.Error(), strconv.FormatUint(n, 10)+" ") {
					t.Errorf("error %q does not give the number %d", err, n)
				}
			}
			// Decided on HEAD alone: nothing else fetched, nothing written.
			if diff := cmp.Diff([]string{"HEAD " + fetchTarballPath()}, s.log()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{}, dirNames(t, dir)); diff != "" {
				t.Errorf("download dir (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFetchFreeSpaceError(t *testing.T) {
	t.Parallel()
	s := newFetchServer(t, fetchRelease(1024))
	f := s.fetcher()
	f.FreeSpace = func(string) (uint64, error) { return 0, errors.New("statfs: input/output error") }
	_, err := f.Fetch(t.Context(), fetchVersion, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("Fetch = %v, want the statfs error", err)
	}
}

// TestFetchStatfs uses the real statfs: a temp dir has room for 1 KiB.
func TestFetchStatfs(t *testing.T) {
	t.Parallel()
	s := newFetchServer(t, fetchRelease(1024))
	f := s.fetcher()
	f.FreeSpace = nil
	f.SpaceMargin = 1
	if _, err := f.Fetch(t.Context(), fetchVersion, t.TempDir()); err != nil {
		t.Fatalf("Fetch: %v", err)
	}
}

func TestFetchResume(t *testing.T) {
	t.Parallel()
	body := fetchRelease(200 << 10)
	const have = 150 << 10
	tests := []struct {
		name     string
		part     []byte
		noRange  bool // the server ignores Range
		badSum   bool // the server publishes a wrong checksum
		wantSent int64
		wantGETs int
		wantIs   error
	}{
		{name: "server honours Range", part: body[:have], wantSent: int64(len(body) - have), wantGETs: 1},
		{name: "server ignores Range", part: body[:have], noRange: true, wantSent: int64(len(body)), wantGETs: 1},
		{name: "one byte", part: body[:1], wantSent: int64(len(body) - 1), wantGETs: 1},
		{name: "all but one byte", part: body[:len(body)-1], wantSent: 1, wantGETs: 1},
		{name: "complete", part: body, wantSent: 0, wantGETs: 0},
		{name: "longer than the release", part: append(append([]byte(nil), body...), 'x'), wantSent: int64(len(body)), wantGETs: 1},
		{name: "empty", part: []byte{}, wantSent: int64(len(body)), wantGETs: 1},
		// A bad prefix costs one more download, from zero.
		{name: "corrupt prefix", part: append([]byte("garbage!"), body[8:have]...), wantSent: int64(2*len(body) - have), wantGETs: 2},
		// And no more than one: a wrong checksum stays wrong.
		{name: "wrong checksum", part: body[:have], badSum: true, wantSent: int64(2*len(body) - have), wantGETs: 2, wantIs: install.ErrBadChecksum},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFetchServer(t, body)
			if tc.badSum {
				s.sum = []byte(strings.Repeat("0", 64) + "\n")
			}
			if tc.noRange {
				s.tarball = func(w http.ResponseWriter, r *http.Request) {
					r.Header.Del("Range")
					http.ServeContent(&fetchCountingWriter{ResponseWriter: w, s: s}, r, "", fetchModTime, bytes.NewReader(body))
				}
			}
			dir := t.TempDir()
			part := filepath.Join(dir, ".download-"+fetchVersion+".part")
			if err := os.WriteFile(part, tc.part, 0o644); err != nil {
				t.Fatal(err)
			}
			dl, err := s.fetcher().Fetch(t.Context(), fetchVersion, dir)
			if sent := s.bytesSent(); sent != tc.wantSent {
				t.Errorf("server sent %d tarball bytes, want %d", sent, tc.wantSent)
			}
			if n := s.tarballGETs(); n != tc.wantGETs {
				t.Errorf("tarball GETs = %d, want %d", n, tc.wantGETs)
			}
			if tc.wantIs != nil {
				if !errors.Is(err, tc.wantIs) {
					t.Fatalf("Fetch = %v, want %v", err, tc.wantIs)
				}
				// A bad download is not resumed from.
				if diff := cmp.Diff([]string{}, dirNames(t, dir)); diff != "" {
					t.Errorf("download dir (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			if b, err := os.ReadFile(dl.Path); err != nil || !bytes.Equal(b, body) {
				t.Errorf("resumed file differs from the release (%v)", err)
			}
			if diff := cmp.Diff([]string{".download-" + fetchVersion + ".tar.gz"}, dirNames(t, dir)); diff != "" {
				t.Errorf("download dir (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFetchResumeChangedFile: when the file behind the URL changed since
// the partial download, If-Range makes the server send all of it.
func TestFetchResumeChangedFile(t *testing.T) {
	t.Parallel()
	old := fetchRelease(100 << 10)
	body := append([]byte("new release "), old...)
	s := newFetchServer(t, body)
	dir := t.TempDir()
	// Pretend the part came from an older file: If-Range carries HEAD's
	// Last-Modified, and the GET answers with another one.
	s.tarball = func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(&fetchCountingWriter{ResponseWriter: w, s: s}, r, "", fetchModTime.Add(time.Hour), bytes.NewReader(body))
	}
	if err := os.WriteFile(filepath.Join(dir, ".download-"+fetchVersion+".part"), old[:50<<10], 0o644); err != nil {
		t.Fatal(err)
	}
	dl, err := s.fetcher().Fetch(t.Context(), fetchVersion, dir)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if b, err := os.ReadFile(dl.Path); err != nil || !bytes.Equal(b, body) {
		t.Errorf("file differs from the release (%v)", err)
	}
	if sent := s.bytesSent(); sent != int64(len(body)) {
		t.Errorf("server sent %d bytes, want the whole %d", sent, len(body))
	}
}

func TestFetchHTTPErrors(t *testing.T) {
	t.Parallel()
	body := fetchRelease(4 << 10)
	status := func(code int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", code) }
	}
	tests := []struct {
		name   string
		setup  func(s *fetchServer, f *install.Fetcher)
		what   string // the URL suffix and status the error names
		status string
	}{
		{
			name:   "tarball 404",
			setup:  func(s *fetchServer, f *install.Fetcher) { f.URLTemplate = s.URL + "/missing-{{.Version}}.tar.gz" },
			what:   "HEAD " + "/missing-" + fetchVersion + ".tar.gz",
			status: "404 Not Found",
		},
		{name: "checksum 404", setup: func(s *fetchServer, f *install.Fetcher) { s.sum = nil }, what: "GET " + fetchTarballPath() + ".sha256", status: "404 Not Found"},
		{name: "GET 503", setup: func(s *fetchServer, f *install.Fetcher) { s.tarball = status(503) }, what: "GET " + fetchTarballPath(), status: "503 Service Unavailable"},
		{name: "GET 403", setup: func(s *fetchServer, f *install.Fetcher) { s.tarball = status(403) }, what: "GET " + fetchTarballPath(), status: "403 Forbidden"},
		{
			name: "206 not asked for",
			setup: func(s *fetchServer, f *install.Fetcher) {
				s.tarball = func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusPartialContent) }
			},
			what:   "GET " + fetchTarballPath(),
			status: "206 Partial Content",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFetchServer(t, body)
			f := s.fetcher()
			tc.setup(s, f)
			dir := t.TempDir()
			_, err := f.Fetch(t.Context(), fetchVersion, dir)
			if !errors.Is(err, install.ErrDownload) {
				t.Fatalf("Fetch = %v, want ErrDownload", err)
			}
			method, path, _ := strings.Cut(tc.what, " ")
			for _, want := range []string{method + " " + s.URL + path, tc.status} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if diff := cmp.Diff([]string{}, dirNames(t, dir)); diff != "" {
				t.Errorf("download dir (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFetchNoContentLength(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "chunked") // what a dynamic handler does
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	f := &install.Fetcher{Client: srv.Client(), URLTemplate: srv.URL + "/{{.Version}}.tar.gz", FreeSpace: func(string) (uint64, error) { return 1 << 40, nil }}
	_, err := f.Fetch(t.Context(), fetchVersion, t.TempDir())
	if !errors.Is(err, install.ErrDownload) || !strings.Contains(err.Error(), "no Content-Length") {
		t.Fatalf("Fetch = %v, want ErrDownload for a missing Content-Length", err)
	}
}

func TestFetchCanceled(t *testing.T) {
	t.Parallel()
	body := fetchRelease(128 << 10)
	s := newFetchServer(t, body)
	started := make(chan struct{})
	s.tarball = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body[:1000])
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done() // until the client goes away
	}
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-started
		cancel()
	}()
	_, err := s.fetcher().Fetch(ctx, fetchVersion, t.TempDir())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Fetch = %v, want context.Canceled", err)
	}

	// Canceled before it starts: no request at all.
	s2 := newFetchServer(t, body)
	ctx2, cancel2 := context.WithCancel(t.Context())
	cancel2()
	if _, err := s2.fetcher().Fetch(ctx2, fetchVersion, t.TempDir()); !errors.Is(err, context.Canceled) {
		t.Errorf("Fetch with a canceled ctx = %v, want context.Canceled", err)
	}
	if got := s2.log(); len(got) != 0 {
		t.Errorf("requests with a canceled ctx: %v", got)
	}
}

func TestFetchProgressOutput(t *testing.T) {
	t.Parallel()
	body := fetchRelease(64 << 10)
	s := newFetchServer(t, body)
	f := s.fetcher()
	var out bytes.Buffer
	f.Progress = &out
	if _, err := f.Fetch(t.Context(), fetchVersion, t.TempDir()); err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	// However fast the download, it ends with a complete line.
	last := out.String()[strings.LastIndex(out.String(), "\r")+1:]
	name := strings.TrimPrefix(fetchTarballPath(), "/")
	if !strings.HasPrefix(last, name+": 0.1 MiB/0.1 MiB (100%) ") || !strings.HasSuffix(last, " MiB/s\n") {
		t.Errorf("last progress line %q", last)
	}
}

// TestFetchProgressClock drives the progress writer with a clock that advances
// 100ms per reading: a line at most every 500ms, and a last one at the end.
func TestFetchProgressClock(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	tests := []struct {
		name  string
		start int64
		total int64
		want  string
	}{
		{
			name:  "fresh",
			total: 10 * mib,
			// A shorter line blanks what the longer one before it left.
			want: "\rapp.tar.gz: 5.0 MiB/10.0 MiB (50%) 10.0 MiB/s ETA 1s" +
				"\rapp.tar.gz: 10.0 MiB/10.0 MiB (100%) 10.0 MiB/s     " +
				"\rapp.tar.gz: 10.0 MiB/10.0 MiB (100%) 9.1 MiB/s \n",
		},
		{
			// The rate counts this transfer, not what was on disk before.
			name:  "resumed",
			start: 10 * mib,
			total: 20 * mib,
			want: "\rapp.tar.gz: 15.0 MiB/20.0 MiB (75%) 10.0 MiB/s ETA 1s" +
				"\rapp.tar.gz: 20.0 MiB/20.0 MiB (100%) 10.0 MiB/s      " +
				"\rapp.tar.gz: 20.0 MiB/20.0 MiB (100%) 9.1 MiB/s \n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			ticks := 0
			now := func() time.Time {
				defer func() { ticks++ }()
				return t0.Add(time.Duration(ticks) * 100 * time.Millisecond)
			}
			var out bytes.Buffer
			write, done := install.NewProgress(&out, "app.tar.gz", tc.start, tc.total, now)
			chunk := make([]byte, mib)
			for range 10 {
				write(chunk)
			}
			done()
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("progress output (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFetchLogProgress drives Fetcher.Log's and OnProgress's record with a
// clock that advances step per reading: a line at the start, one every
// ProgressEvery with the bytes, the rate and the time left (unless a
// terminal shows them), and one at the end; the figures go to OnProgress
// at the start, every ProgressEvery and at the end.
func TestFetchLogProgress(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name   string
		start  int64
		step   time.Duration
		writes int
		lines  bool
		want   []string
		record []install.DownloadProgress
	}{
		{
			name: "every 5s", step: time.Second, writes: 10, lines: true,
			want: []string{
				"msg=downloading url=http://dl/app.tar.gz bytes=104857600",
				`msg=downloading received=52428800 bytes=104857600 percent=50 rate="10.0 MiB/s" eta=5s`,
				`msg=downloading received=104857600 bytes=104857600 percent=100 rate="10.0 MiB/s"`,
				`msg=downloaded bytes=104857600 took=11s rate="9.1 MiB/s"`,
			},
			record: []install.DownloadProgress{
				{Received: 0, Bytes: 100 * mib, At: at(0)},
				{Received: 50 * mib, Bytes: 100 * mib, BytesPerSecond: 10 * mib, ETASeconds: 5, At: at(5)},
				{Received: 100 * mib, Bytes: 100 * mib, BytesPerSecond: 10 * mib, At: at(10)},
				{Received: 100 * mib, Bytes: 100 * mib, BytesPerSecond: 100 * mib / 11, At: at(11)},
			},
		},
		{
			// The rate counts this transfer, not what was on disk before;
			// on a terminal the progress line shows the figures.
			name: "resumed on a terminal", start: 40 * mib, step: 2 * time.Second, writes: 6, lines: false,
			want: []string{
				"msg=downloading url=http://dl/app.tar.gz bytes=104857600 resumed_at=41943040",
				`msg=downloaded bytes=104857600 took=14s rate="4.3 MiB/s"`,
			},
			record: []install.DownloadProgress{
				{Received: 40 * mib, Bytes: 100 * mib, At: at(0)},
				{Received: 70 * mib, Bytes: 100 * mib, BytesPerSecond: 5 * mib, ETASeconds: 6, At: at(6)},
				{Received: 100 * mib, Bytes: 100 * mib, BytesPerSecond: 5 * mib, At: at(12)},
				{Received: 100 * mib, Bytes: 100 * mib, BytesPerSecond: 60 * mib / 14, At: at(14)},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ticks := 0
			now := func() time.Time {
				defer func() { ticks++ }()
				return t0.Add(time.Duration(ticks) * tc.step)
			}
			var out bytes.Buffer
			var got []install.DownloadProgress
			write, done := install.NewLogProgress(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: dropTimeAndLevel})),
				func(p install.DownloadProgress) { got = append(got, p) }, "http://dl/app.tar.gz", tc.start, 100*mib, 5*time.Second, tc.lines, now)
			for range tc.writes {
				write(make([]byte, 10*mib))
			}
			done()
			if diff := cmp.Diff(tc.want, strings.Split(strings.TrimSpace(out.String()), "\n")); diff != "" {
				t.Errorf("log (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.record, got); diff != "" {
				t.Errorf("OnProgress figures (-want +got):\n%s", diff)
			}
		})
	}

	// A real download logs its start with the version.
	s := newFetchServer(t, fetchRelease(64<<10))
	f := s.fetcher()
	var out bytes.Buffer
	f.Log = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: dropTimeAndLevel}))
	if _, err := f.Fetch(t.Context(), fetchVersion, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	if want := "msg=downloading version=" + fetchVersion + " url=" + s.url() + " bytes=65536"; first != want {
		t.Errorf("first log line %q, want %q", first, want)
	}
}

func dropTimeAndLevel(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey || a.Key == slog.LevelKey {
		return slog.Attr{}
	}
	return a
}
