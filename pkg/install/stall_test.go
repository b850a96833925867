package install_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// TestPace: the stall rule on explicit times. The response headers, then
// every MinProgress bytes, restart the window; the rest only counts.
func TestPace(t *testing.T) {
	t.Parallel()
	const window, min = time.Minute, 1024
	type event struct {
		at      time.Duration
		headers bool
		n       int64
	}
	every := func(from, step, to time.Duration, n int64) []event {
		var evs []event
		for at := from; at <= to; at += step {
			evs = append(evs, event{at: at, n: n})
		}
		return evs
	}
	headers := event{headers: true}
	tests := []struct {
		name    string
		events  []event
		wantDue time.Duration
		wantErr string
	}{
		{name: "no response", wantDue: time.Minute, wantErr: "stalled: no response within 1m0s"},
		{name: "headers late", events: []event{{at: 50 * time.Second, headers: true}}, wantDue: 110 * time.Second,
			wantErr: "stalled: nothing received for 1m0s"},
		{
			// 2 B/s never goes quiet for long, and never restarts the window.
			name:    "trickle of 2 B/s",
			events:  append([]event{headers}, every(time.Second, time.Second, 59*time.Second, 2)...),
			wantDue: time.Minute, wantErr: "stalled: 118 bytes in 1m0s, want at least 1024",
		},
		{name: "steady 1 KiB/s", events: append([]event{headers}, every(time.Second, time.Second, 3*time.Second, 1024)...),
			wantDue: 63 * time.Second, wantErr: "stalled: nothing received for 1m0s"},
		{name: "small reads add up", events: []event{headers, {at: 10 * time.Second, n: 600}, {at: 20 * time.Second, n: 600}},
			wantDue: 80 * time.Second, wantErr: "stalled: nothing received for 1m0s"},
		{name: "burst then silence", events: []event{headers, {at: 2 * time.Second, n: 1 << 20}}, wantDue: 62 * time.Second,
			wantErr: "stalled: nothing received for 1m0s"},
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := install.NewPace(window, min, t0)
			for _, e := range tc.events {
				if e.headers {
					p.GotHeaders(t0.Add(e.at))
				} else {
					p.Add(e.n, t0.Add(e.at))
				}
			}
			if got := p.Due().Sub(t0); got != tc.wantDue {
				t.Errorf("due after %v, want %v", got, tc.wantDue)
			}
			err := p.Err()
			if !errors.Is(err, install.ErrStalled) || err.Error() != tc.wantErr {
				t.Errorf("Err() = %v, want %q (ErrStalled)", err, tc.wantErr)
			}
		})
	}
}

// trickle answers with the whole Content-Length and then sends body n bytes
// every gap, until the client goes away.
func trickle(body []byte, n int, gap time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		tick := time.NewTicker(gap)
		defer tick.Stop()
		for off := 0; off < len(body); off += n {
			if _, err := w.Write(body[off:min(off+n, len(body))]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	}
}

// sendThenHang sends the first n bytes of body and then nothing, until the
// client goes away.
func sendThenHang(body []byte, n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body[:n])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
}

// fetchLimitCase is a server that stalls or crawls, and how Fetch must
// fail on it.
type fetchLimitCase struct {
	name    string
	hang    string           // request never answered
	tarball http.HandlerFunc // GET of the tarball
	key     bool             // a signature is required (and fetched)
	stall   time.Duration    // Fetcher.StallTimeout; 0: 300ms
	limit   time.Duration    // Fetcher.Deadline; 0: the default
	want    string           // the error, a regexp; {url} is the tarball's
	wantIs  error
	part    bool // a prefix of the tarball stays in .part for a resume
}

func runFetchLimitCase(t *testing.T, body []byte, tc fetchLimitCase) {
	t.Helper()
	s := newFetchServer(t, body)
	s.hang, s.tarball = tc.hang, tc.tarball
	f := s.fetcher()
	f.StallTimeout, f.MinProgress, f.Deadline = tc.stall, 1024, tc.limit
	if f.StallTimeout == 0 {
		f.StallTimeout = 300 * time.Millisecond
	}
	if tc.key {
		pub, priv, _ := ed25519.GenerateKey(nil)
		f.PublicKey, s.sig = pub, ed25519.Sign(priv, s.sum)
	}
	// A generous bound: without the limits, these servers would hold Fetch
	// for minutes (the trickles) or forever (the hangs).
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	_, err := f.Fetch(ctx, fetchVersion, dir)
	if !errors.Is(err, install.ErrDownload) || !errors.Is(err, tc.wantIs) {
		t.Fatalf("Fetch = %v, want ErrDownload and %v", err, tc.wantIs)
	}
	want := regexp.MustCompile("^" + regexp.QuoteMeta("fetch "+fetchVersion+": download failed: ") +
		regexp.MustCompile(`\{url\}`).ReplaceAllLiteralString(tc.want, regexp.QuoteMeta(s.url())) + "$")
	if !want.MatchString(err.Error()) {
		t.Errorf("Fetch error\n  %s\ndoes not match\n  %s", err, want)
	}
	part, perr := os.ReadFile(filepath.Join(dir, ".download-"+fetchVersion+".part"))
	switch {
	case tc.part && (perr != nil || len(part) == 0 || string(part) != string(body[:len(part)])):
		t.Errorf(".part holds %d bytes (%v), want a prefix of the release kept for a resume", len(part), perr)
	case !tc.part && perr == nil:
		t.Errorf(".part holds %d bytes, want none", len(part))
	}
}

// TestFetchStalled: a server that does not answer, goes quiet, or only
// trickles fails the download within about StallTimeout, naming the request;
// what arrived stays for a resume.
func TestFetchStalled(t *testing.T) {
	t.Parallel()
	body := fetchRelease(128 << 10)
	path := fetchTarballPath()
	tests := []fetchLimitCase{
		{name: "HEAD never answered", hang: "HEAD " + path, want: `HEAD {url}: stalled: no response within 300ms`},
		{name: ".sha256 never answered", hang: "GET " + path + ".sha256", want: `GET {url}\.sha256: stalled: no response within 300ms`},
		{name: ".sig never answered", hang: "GET " + path + ".sig", key: true, want: `GET {url}\.sig: stalled: no response within 300ms`},
		{name: "tarball never answered", hang: "GET " + path, want: `GET {url}: stalled: no response within 300ms`},
		{
			// How the 4 KiB are read decides whether a few bytes count
			// towards the window that stalls.
			name: "quiet after 4 KiB", tarball: sendThenHang(body, 4096), part: true,
			want: `GET {url}: after 4096 of 131072 bytes: stalled: (nothing received for 300ms|\d+ bytes in 300ms, want at least 1024)`,
		},
		{name: "trickle of 2 B/s", tarball: trickle(body, 1, 500*time.Millisecond), stall: time.Second, part: true,
			want: `GET {url}: after \d+ of 131072 bytes: stalled: \d+ bytes in 1s, want at least 1024`},
		{
			// Never quiet for even 10ms: only the byte count catches it.
			name: "trickle of 800 B/s", tarball: trickle(body, 8, 10*time.Millisecond), part: true,
			want: `GET {url}: after \d+ of 131072 bytes: stalled: \d+ bytes in 300ms, want at least 1024`,
		},
	}
	for _, tc := range tests {
		tc.wantIs = install.ErrStalled
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runFetchLimitCase(t, body, tc)
		})
	}
}

// TestFetchDeadline: a download that moves, but too slowly, fails at the
// Deadline, which also bounds the requests before the tarball's.
func TestFetchDeadline(t *testing.T) {
	t.Parallel()
	body := fetchRelease(4 << 20)
	tests := []fetchLimitCase{
		{
			// About 100 KiB/s: never stalled, 40s for the whole release.
			name: "slow download", tarball: trickle(body, 1024, 10*time.Millisecond), part: true,
			stall: install.DefaultStallTimeout, limit: 300 * time.Millisecond,
			want: `GET {url}: after \d+ of 4194304 bytes: download deadline passed: not finished within 300ms`,
		},
		{
			name: "HEAD never answered, no stall check", hang: "HEAD " + fetchTarballPath(),
			stall: -1, limit: 300 * time.Millisecond,
			want: `HEAD {url}: download deadline passed: not finished within 300ms`,
		},
	}
	for _, tc := range tests {
		tc.wantIs = install.ErrDeadline
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runFetchLimitCase(t, body, tc)
		})
	}
}
