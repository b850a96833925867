package tuf

import (
	"bytes"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// mirror serves a repository directory as any static web server would,
// until the test gives it an attack: then every request goes to the attack
// first, and what it does not handle is served genuinely.
type mirror struct {
	files http.Handler
	srv   *httptest.Server

	mu     sync.Mutex
	attack attack
}

// attack handles a request the hostile way and says so, or leaves it to
// the genuine files (false).
type attack func(w http.ResponseWriter, r *http.Request) bool

func newMirror(t *testing.T, dir string) *mirror {
	m := &mirror{files: http.FileServer(http.Dir(dir))}
	m.srv = httptest.NewServer(m)
	t.Cleanup(m.srv.Close)
	return m
}

func (m *mirror) URL() string { return m.srv.URL }

func (m *mirror) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	a := m.attack
	m.mu.Unlock()
	if a != nil && a(w, r) {
		return
	}
	m.files.ServeHTTP(w, r)
}

// set makes the mirror hostile (several attacks: the first that handles a
// request); stop makes it genuine again.
func (m *mirror) set(as ...attack) {
	m.mu.Lock()
	m.attack = func(w http.ResponseWriter, r *http.Request) bool {
		for _, a := range as {
			if a(w, r) {
				return true
			}
		}
		return false
	}
	m.mu.Unlock()
}

func (m *mirror) stop() {
	m.mu.Lock()
	m.attack = nil
	m.mu.Unlock()
}

// replace serves body instead of the files match accepts.
func replace(match func(path string) bool, body []byte) attack {
	return func(w http.ResponseWriter, r *http.Request) bool {
		if !match(r.URL.Path) {
			return false
		}
		http.ServeContent(w, r, filepath.Base(r.URL.Path), time.Unix(1_700_000_000, 0), bytes.NewReader(body))
		return true
	}
}

// is matches one path.
func is(path string) func(string) bool { return func(p string) bool { return p == path } }

// stream is what an endless or trickling attack served: how many requests
// it had, how many bytes it wrote, and how many of its requests ended (the
// client hung up).
type stream struct {
	requests, ended atomic.Int64
	bytes           atomic.Int64
}

// endless serves, for the files match accepts, the genuine file followed
// by bytes that never end (no Content-Length), until the client hangs up.
func (m *mirror) endless(match func(string) bool, s *stream) attack {
	return func(w http.ResponseWriter, r *http.Request) bool {
		if !match(r.URL.Path) || r.Method != http.MethodGet {
			return false
		}
		s.requests.Add(1)
		defer s.ended.Add(1)
		genuine := m.genuine(r)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		fl := w.(http.Flusher)
		n, err := w.Write(genuine)
		s.bytes.Add(int64(n))
		junk := bytes.Repeat([]byte("{"), 32<<10)
		for err == nil {
			n, err = w.Write(junk)
			s.bytes.Add(int64(n))
			fl.Flush()
		}
		return true
	}
}

// trickle serves the files match accepts one byte every interval, until
// the client hangs up: a server too slow to be useful but never silent.
func (m *mirror) trickle(match func(string) bool, every time.Duration, s *stream) attack {
	return func(w http.ResponseWriter, r *http.Request) bool {
		if !match(r.URL.Path) || r.Method != http.MethodGet {
			return false
		}
		s.requests.Add(1)
		defer s.ended.Add(1)
		genuine := m.genuine(r)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		fl := w.(http.Flusher)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; i < len(genuine); i++ {
			if _, err := w.Write(genuine[i : i+1]); err != nil {
				return true
			}
			s.bytes.Add(1)
			fl.Flush()
			select {
			case <-r.Context().Done():
				return true
			case <-tick.C:
			}
		}
		return true
	}
}

// genuine is what the mirror would serve for r.
func (m *mirror) genuine(r *http.Request) []byte {
	rec := httptest.NewRecorder()
	m.files.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, r.URL.Path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return b
}

// serveDir serves what dir holds (a copy of the repository taken earlier)
// for every path under one of prefixes.
func serveDir(dir string, prefixes ...string) attack {
	h := http.FileServer(http.Dir(dir))
	return func(w http.ResponseWriter, r *http.Request) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(r.URL.Path, p) {
				h.ServeHTTP(w, r)
				return true
			}
		}
		return false
	}
}

// copyDir copies the regular files of src to dst (a repository as it is
// now, for a mirror to replay later).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
