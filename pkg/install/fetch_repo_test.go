package install_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// Repository mode (Fetcher.Resolve): the URL, length and sha256 come from
// a repository's verified metadata; no HEAD, .sha256 or .sig is asked
// for, and a file other than the one named is the repository's fault.

// repoFetcher is a Fetcher in repository mode whose Resolve names s's
// tarball with length n and sha256 sum, counting its calls.
func (s *fetchServer) repoFetcher(n int64, sum string, calls *int) *install.Fetcher {
	f := s.fetcher()
	f.URLTemplate, f.App = "", ""
	f.Resolve = func(_ context.Context, version string) (install.ResolvedTarget, error) {
		if calls != nil {
			*calls++
		}
		if version != fetchVersion {
			return install.ResolvedTarget{}, &install.RepositoryError{Reason: "no such release", Err: errors.New(version)}
		}
		return install.ResolvedTarget{URL: s.url(), Length: n, SHA256: sum}, nil
	}
	return f
}

func TestFetchRepository(t *testing.T) {
	t.Parallel()
	body := fetchRelease(100 << 10)
	s := newFetchServer(t, body)
	s.sum = nil // no .sha256 published: not asked for
	var calls int
	dir := t.TempDir()
	dl, err := s.repoFetcher(int64(len(body)), strings.ToUpper(fetchSum(body)), &calls).Fetch(t.Context(), fetchVersion, dir)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if dl.SHA256 != fetchSum(body) || dl.Size != int64(len(body)) {
		t.Errorf("Download %+v, want sha256 %s size %d", dl, fetchSum(body), len(body))
	}
	if b, err := os.ReadFile(dl.Path); err != nil || !bytes.Equal(b, body) {
		t.Errorf("downloaded file differs (%v)", err)
	}
	if diff := cmp.Diff([]string{"GET " + fetchTarballPath()}, s.log()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if calls != 1 {
		t.Errorf("Resolve called %d times, want 1", calls)
	}
}

// TestFetchRepositoryWrongFile: a file whose bytes, length or announced
// length differ from the verified metadata is ErrRepository (class
// infrastructure, cause "release repository: wrong file"), never
// ErrBadChecksum, and nothing of it is kept; an endless body is read no
// further than one byte past the length.
func TestFetchRepositoryWrongFile(t *testing.T) {
	t.Parallel()
	body := fetchRelease(64 << 10)
	n := int64(len(body))
	endless := func(w http.ResponseWriter, _ *http.Request) {
		chunk := bytes.Repeat([]byte{7}, 32<<10)
		for range 1 << 15 { // 1 GiB if nothing stops reading
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}
	tests := []struct {
		name    string
		tarball http.HandlerFunc
		length  int64
		sum     string
	}{
		{name: "other bytes", sum: fetchSum(append([]byte{1}, body[1:]...)), length: n},
		{name: "shorter than named", sum: fetchSum(body[:n-1]), length: n - 1},
		{name: "longer than named", sum: fetchSum(append(body, 'x')), length: n + 1},
		{name: "endless", tarball: endless, sum: fetchSum(body), length: n},
		{name: "endless, no Content-Length", sum: fetchSum(body), length: n, tarball: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			endless(w, r)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFetchServer(t, body)
			if tc.tarball != nil {
				s.tarball = func(w http.ResponseWriter, r *http.Request) {
					tc.tarball(&fetchCountingWriter{ResponseWriter: w, s: s}, r)
				}
			}
			dir := t.TempDir()
			_, err := s.repoFetcher(tc.length, tc.sum, nil).Fetch(t.Context(), fetchVersion, dir)
			if !errors.Is(err, install.ErrRepository) || errors.Is(err, install.ErrBadChecksum) {
				t.Fatalf("Fetch = %v, want ErrRepository and not ErrBadChecksum", err)
			}
			if c, cause := install.ClassOf(err), install.Cause(err); c != install.ClassInfrastructure || cause != "release repository: wrong file" {
				t.Errorf("class %q cause %q, want infrastructure, release repository: wrong file", c, cause)
			}
			if diff := cmp.Diff([]string{}, dirNames(t, dir)); diff != "" {
				t.Errorf("download dir (-want +got):\n%s", diff)
			}
			// Whatever the server pushed, at most a socket buffer beyond
			// the length was taken from it.
			if sent := s.bytesSent(); sent > n+4<<20 {
				t.Errorf("server sent %d bytes for a %d-byte target: the client kept reading", sent, n)
			}
		})
	}
}

// TestFetchRepositoryResume: a cut-off download resumes from its .part
// file with a Range request, as in the plain mode; a bad prefix costs one
// more download from zero.
func TestFetchRepositoryResume(t *testing.T) {
	t.Parallel()
	body := fetchRelease(200 << 10)
	const have = 150 << 10
	for _, tc := range []struct {
		name     string
		part     []byte
		wantSent int64
		wantGETs int
	}{
		{"prefix", body[:have], int64(len(body) - have), 1},
		{"corrupt prefix", append([]byte("garbage!"), body[8:have]...), int64(2*len(body) - have), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFetchServer(t, body)
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, ".download-"+fetchVersion+".part"), tc.part, 0o644); err != nil {
				t.Fatal(err)
			}
			dl, err := s.repoFetcher(int64(len(body)), fetchSum(body), nil).Fetch(t.Context(), fetchVersion, dir)
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			if sent, gets := s.bytesSent(), s.tarballGETs(); sent != tc.wantSent || gets != tc.wantGETs {
				t.Errorf("sent %d bytes in %d GETs, want %d in %d", sent, gets, tc.wantSent, tc.wantGETs)
			}
			if b, err := os.ReadFile(dl.Path); err != nil || !bytes.Equal(b, body) {
				t.Errorf("resumed file differs (%v)", err)
			}
		})
	}
}

// TestFetchRepositoryResolveErrors: Resolve's errors come through as they
// are (the repository's: infrastructure, "release repository: <reason>"),
// except when the fetch was cut off, which says so; a target Resolve
// names badly is refused before any request; the free-space check uses
// the verified length.
func TestFetchRepositoryResolveErrors(t *testing.T) {
	t.Parallel()
	body := fetchRelease(1 << 10)
	s := newFetchServer(t, body)

	_, err := s.repoFetcher(int64(len(body)), fetchSum(body), nil).Fetch(t.Context(), "9.9.9", t.TempDir())
	if c, cause := install.ClassOf(err), install.Cause(err); c != install.ClassInfrastructure || cause != "release repository: no such release" {
		t.Errorf("unknown version: %v: class %q cause %q", err, c, cause)
	}

	f := s.repoFetcher(0, "", nil)
	ctx, cancel := context.WithCancel(t.Context())
	f.Resolve = func(ctx context.Context, _ string) (install.ResolvedTarget, error) {
		cancel()
		<-ctx.Done()
		return install.ResolvedTarget{}, &install.RepositoryError{Reason: "unavailable", Err: ctx.Err()}
	}
	if _, err := f.Fetch(ctx, fetchVersion, t.TempDir()); !errors.Is(err, context.Canceled) {
		t.Errorf("cut off: %v, want context.Canceled", err)
	}

	for name, rt := range map[string]install.ResolvedTarget{
		"no length": {URL: s.url(), SHA256: fetchSum(body)},
		"no sha256": {URL: s.url(), Length: 10},
		"file URL":  {URL: "file:///etc/passwd", Length: 10, SHA256: fetchSum(body)},
	} {
		f := s.fetcher()
		f.Resolve = func(context.Context, string) (install.ResolvedTarget, error) { return rt, nil }
		if _, err := f.Fetch(t.Context(), fetchVersion, t.TempDir()); !errors.Is(err, install.ErrRepository) {
			t.Errorf("%s: %v, want ErrRepository", name, err)
		}
	}
	if n := len(s.log()); n != 0 {
		t.Errorf("%d requests for badly named targets, want none", n)
	}

	f = s.repoFetcher(1<<40, fetchSum(body), nil)
	f.FreeSpace = func(string) (uint64, error) { return 1 << 30, nil }
	if _, err := f.Fetch(t.Context(), fetchVersion, t.TempDir()); !errors.Is(err, install.ErrNoSpace) {
		t.Errorf("a 1 TiB target on 1 GiB free: %v, want ErrNoSpace", err)
	}
}
