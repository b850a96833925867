// Package releases builds release tarballs of a stand-in app on the fly and
// serves them the way a release site does (<base>/<version>/app.tar.gz, with
// .sha256 and, when a key is given, .sig and .statement, as
// scripts/release.sh publishes them). It can also serve what an attacker
// holding the site can: one version's signed files under another version
// (Replay), or a release signed the old way (SignOldStyle). The demo and
// the end-to-end tests use it; it is not part of the product.
package releases

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// Behaviour is how a release's app behaves once started.
type Behaviour string

const (
	// Good stays up until stopped.
	Good Behaviour = "good"
	// Crash exits with status 3 at once: a release that does not start.
	Crash Behaviour = "crash"
)

// Script is the app's bin/app for a behaviour.
func Script(version string, b Behaviour) string {
	switch b {
	case Crash:
		return fmt.Sprintf("#!/bin/sh\necho \"app %s: cannot start (simulated broken release)\" >&2\nexit 3\n", version)
	default:
		// exec so that stopping the app stops sleep, not just the shell.
		return fmt.Sprintf("#!/bin/sh\necho \"app %s running\"\nexec sleep 1000000\n", version)
	}
}

// App is the stand-in app's name, which signatures name: the one its file
// name, app.tar.gz, implies.
const App = "app"

// File is the release file's name.
const File = "app.tar.gz"

// Tarball builds a .tar.gz release with bin/app and a VERSION file.
func Tarball(version string, b Behaviour) ([]byte, error) {
	return TarballScript(version, Script(version, b))
}

// TarballScript is Tarball with script as bin/app.
func TarballScript(version, script string) ([]byte, error) {
	return TarballBin(version, map[string]string{"app": script})
}

// TarballBin builds a release whose bin/ holds each name with its script
// (executable), and a VERSION file.
func TarballBin(version string, bin map[string]string) ([]byte, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	mod := time.Unix(1_700_000_000, 0)
	type file struct {
		hdr  tar.Header
		body string
	}
	files := []file{{tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mod}, ""}}
	for _, name := range slices.Sorted(maps.Keys(bin)) {
		files = append(files, file{tar.Header{Name: "bin/" + name, Typeflag: tar.TypeReg, Mode: 0o755, ModTime: mod}, bin[name]})
	}
	files = append(files, file{tar.Header{Name: "VERSION", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: mod}, version + "\n"})
	for _, f := range files {
		hdr := f.hdr
		hdr.Size = int64(len(f.body))
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
}

// Server serves releases.
type Server struct {
	mu       sync.Mutex
	tarballs map[string]release
	key      ed25519.PrivateKey
	requests map[string]int
	// failing, when not 0, is the status every request gets (an outage).
	failing int
	refused int
}

// release is what the site serves under a version.
type release struct {
	tarball []byte
	// signedFor is the version its signature and statement name: the
	// version itself, unless replayed from another.
	signedFor string
	// oldStyle: the signature covers the .sha256 file (no statement).
	oldStyle bool
}

// NewServer returns an empty release site; key may be nil (no .sig).
func NewServer(key ed25519.PrivateKey) *Server {
	return &Server{tarballs: map[string]release{}, key: key, requests: map[string]int{}}
}

// Add publishes version with behaviour b.
func (s *Server) Add(version string, b Behaviour) error {
	return s.AddScript(version, Script(version, b))
}

// AddScript publishes version with script as its bin/app.
func (s *Server) AddScript(version, script string) error {
	return s.AddBin(version, map[string]string{"app": script})
}

// AddBin publishes version with bin/ holding each name's script.
func (s *Server) AddBin(version string, bin map[string]string) error {
	tb, err := TarballBin(version, bin)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.tarballs[version] = release{tarball: tb, signedFor: version}
	s.mu.Unlock()
	return nil
}

// Replay serves version from's files (tarball, .sha256, .sig and
// .statement: all genuine, signed for from) as version as, as a release
// site in an attacker's hands can.
func (s *Server) Replay(as, from string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.tarballs[from]
	if !ok {
		return fmt.Errorf("replay %s as %s: %s is not published", from, as, from)
	}
	s.tarballs[as] = r
	return nil
}

// SignOldStyle makes version's .sig a signature of its .sha256 file, as
// releases were signed before statements (and no .statement).
func (s *Server) SignOldStyle(version string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.tarballs[version]
	if !ok {
		return fmt.Errorf("%s is not published", version)
	}
	r.oldStyle = true
	s.tarballs[version] = r
	return nil
}

// Fail makes every request answer code (503: the site is down) until
// Fail(0).
func (s *Server) Fail(code int) {
	s.mu.Lock()
	s.failing = code
	s.mu.Unlock()
}

// Refused is how many requests Fail turned away.
func (s *Server) Refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// Downloads is how many times version's tarball was fetched (GET).
func (s *Server) Downloads(version string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[version]
}

// URLTemplate is the agentd --url-template for a server at base.
func URLTemplate(base string) string {
	return strings.TrimSuffix(base, "/") + "/{{.Version}}/app.tar.gz"
}

// ServeHTTP serves /<version>/app.tar.gz[.sha256|.sig|.statement].
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	version, file, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	s.mu.Lock()
	if code := s.failing; code != 0 {
		s.refused++
		s.mu.Unlock()
		http.Error(w, "release site unavailable", code)
		return
	}
	rel, known := s.tarballs[version]
	tb := rel.tarball
	key := s.key
	if known && file == File && r.Method == http.MethodGet {
		s.requests[version]++
	}
	s.mu.Unlock()
	if !ok || !known {
		http.NotFound(w, r)
		return
	}
	sum := sha256.Sum256(tb)
	sumFile := []byte(hex.EncodeToString(sum[:]) + "  " + File + "\n")
	statement := install.Statement{App: App, Version: rel.signedFor, File: File, Size: int64(len(tb)), SHA256: hex.EncodeToString(sum[:])}.Bytes()
	var body []byte
	switch file {
	case File:
		body = tb
	case File + ".sha256":
		body = sumFile
	case File + ".statement":
		if key == nil || rel.oldStyle {
			http.NotFound(w, r)
			return
		}
		body = statement
	case File + ".sig":
		switch {
		case key == nil:
			http.NotFound(w, r)
			return
		case rel.oldStyle:
			body = ed25519.Sign(key, sumFile)
		default:
			body = ed25519.Sign(key, statement)
		}
	default:
		http.NotFound(w, r)
		return
	}
	http.ServeContent(w, r, file, time.Unix(1_700_000_000, 0), bytes.NewReader(body))
}
