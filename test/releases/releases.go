// Package releases builds release tarballs of a stand-in app on the fly and
// serves them the way a release site does (<base>/<version>/app.tar.gz, with
// .sha256 and, when a key is given, .sig). The demo and the end-to-end tests
// use it; it is not part of the product.
package releases

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
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

// Tarball builds a .tar.gz release with bin/app and a VERSION file.
func Tarball(version string, b Behaviour) ([]byte, error) {
	return TarballScript(version, Script(version, b))
}

// TarballScript is Tarball with script as bin/app.
func TarballScript(version, script string) ([]byte, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	mod := time.Unix(1_700_000_000, 0)
	files := []struct {
		hdr  tar.Header
		body string
	}{
		{tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mod}, ""},
		{tar.Header{Name: "bin/app", Typeflag: tar.TypeReg, Mode: 0o755, ModTime: mod}, script},
		{tar.Header{Name: "VERSION", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: mod}, version + "\n"},
	}
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
	tarballs map[string][]byte
	key      ed25519.PrivateKey
	requests map[string]int
	// failing, when not 0, is the status every request gets (an outage).
	failing int
	refused int
}

// NewServer returns an empty release site; key may be nil (no .sig).
func NewServer(key ed25519.PrivateKey) *Server {
	return &Server{tarballs: map[string][]byte{}, key: key, requests: map[string]int{}}
}

// Add publishes version with behaviour b.
func (s *Server) Add(version string, b Behaviour) error {
	tb, err := Tarball(version, b)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.tarballs[version] = tb
	s.mu.Unlock()
	return nil
}

// AddScript publishes version with script as its bin/app.
func (s *Server) AddScript(version, script string) error {
	tb, err := TarballScript(version, script)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.tarballs[version] = tb
	s.mu.Unlock()
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

// ServeHTTP serves /<version>/app.tar.gz[.sha256|.sig].
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	version, file, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	s.mu.Lock()
	if code := s.failing; code != 0 {
		s.refused++
		s.mu.Unlock()
		http.Error(w, "release site unavailable", code)
		return
	}
	tb, known := s.tarballs[version]
	key := s.key
	if known && file == "app.tar.gz" && r.Method == http.MethodGet {
		s.requests[version]++
	}
	s.mu.Unlock()
	if !ok || !known {
		http.NotFound(w, r)
		return
	}
	sum := sha256.Sum256(tb)
	sumFile := []byte(hex.EncodeToString(sum[:]) + "  app.tar.gz\n")
	var body []byte
	switch file {
	case "app.tar.gz":
		body = tb
	case "app.tar.gz.sha256":
		body = sumFile
	case "app.tar.gz.sig":
		if key == nil {
			http.NotFound(w, r)
			return
		}
		body = ed25519.Sign(key, sumFile)
	default:
		http.NotFound(w, r)
		return
	}
	http.ServeContent(w, r, file, time.Unix(1_700_000_000, 0), bytes.NewReader(body))
}
