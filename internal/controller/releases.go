package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/release"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The release repository (issue 27, RFD 90's version controller): with
// --release-repo the leader reads the repository's verified targets through
// pkg/release every Refresh and writes what it found to fleet_stats/releases
// (kv.ReleaseCatalog), for fleetctl releases ls, plan set's check, status,
// the dashboard and the metrics. The catalog is a listing, never a grant:
// agents verify every install through the repository themselves.
//
// Only the leader reads the repository and writes the catalog; the other
// controllers read the catalog from the bucket on the same period, so that
// every controller serves the same figures. A failed read writes the error
// and when it was tried, and keeps the last good releases: a repository
// outage does not empty the listing.

// DefaultReleaseRefresh is how often the leader reads the release
// repository.
const DefaultReleaseRefresh = time.Minute

// maxCatalogError bounds the error text the catalog keeps.
const maxCatalogError = 1024

// ReleaseRepo is the release repository a controller reads
// (--release-repo).
type ReleaseRepo struct {
	// Client reads the repository through the trusted root in its Dir
	// (TrustReleaseRoot). Its Now, when nil, is set to the controller's
	// clock.
	Client *release.Client
	// Refresh is how often the leader reads it (and the others read the
	// catalog); default DefaultReleaseRefresh.
	Refresh time.Duration
	// Ticker paces the reads; default the controller's clock.
	Ticker clock.Clock
}

// releaseLoop is the controller's side of the release repository.
type releaseLoop struct {
	c    *Controller
	r    ReleaseRepo
	wake chan struct{}
	// lastErr is the last error logged (the repository's or the
	// bucket's), so that a lasting outage is logged once, not every
	// refresh. Run's goroutine only.
	lastErr string
	logged  bool // a good read was logged since the last error
}

func newReleaseLoop(c *Controller, r ReleaseRepo) (*releaseLoop, error) {
	if r.Client == nil || r.Client.URL == "" || r.Client.Dir == "" {
		return nil, errors.New("release repository: a client with a URL and a trust dir is required")
	}
	if r.Refresh <= 0 {
		r.Refresh = DefaultReleaseRefresh
	}
	if r.Ticker == nil {
		r.Ticker = c.o.Clock
	}
	if r.Client.Now == nil {
		r.Client.Now = c.o.Clock.Now
	}
	return &releaseLoop{c: c, r: r, wake: make(chan struct{}, 1)}, nil
}

// leading wakes the loop: this controller just became the leader, and
// reads the repository now rather than at the next refresh.
func (l *releaseLoop) leading() {
	if l == nil {
		return
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run reads the repository (leading) or the catalog (not leading) at once,
// then every Refresh and whenever this controller becomes the leader,
// until ctx ends.
func (l *releaseLoop) run(ctx context.Context) {
	t := l.r.Ticker.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-l.wake:
		}
		// Stopping cancels a read of the repository; each of its
		// requests is bounded by the client's RequestTimeout.
		pctx, cancel := context.WithTimeout(ctx, max(l.r.Refresh, time.Minute))
		l.pass(pctx)
		cancel()
		t.Reset(l.r.Refresh)
	}
}

// pass is one refresh.
func (l *releaseLoop) pass(ctx context.Context) {
	c := l.c
	if !c.leading.Load() {
		cat, err := kv.ReadReleaseCatalog(ctx, c.fleet.JS.Conn())
		switch {
		case err == nil:
			c.catalog.Store(&cat)
		case errors.Is(err, kv.ErrNotFound):
			// The leader has not written one yet.
		default:
			l.warn("reading the release catalog failed; keeping the one read before", err)
		}
		return
	}
	cat := l.refresh(ctx)
	c.catalog.Store(&cat) // this controller's figures, written or not
	if err := kv.WriteReleaseCatalog(ctx, c.fleet.JS, cat); err != nil {
		l.warn("writing the release catalog failed; retrying at the next refresh", err)
	}
}

// refresh reads the repository and returns the catalog to write: what it
// read, or, when the read failed, the error with the last good releases.
func (l *releaseLoop) refresh(ctx context.Context) kv.ReleaseCatalog {
	c := l.c
	cat := kv.ReleaseCatalog{URL: l.r.Client.URL, By: c.o.ID, Checked: c.o.Clock.Now().UTC()}
	tr, err := l.r.Client.Refresh(ctx)
	if err != nil {
		c.m.releaseFailures.Inc()
		cat.Error = rollout.ClipText(err.Error(), maxCatalogError)
		if prev := l.lastGood(ctx); prev != nil && prev.URL == cat.URL {
			cat.At, cat.RootVersion, cat.TargetsVersion, cat.Expires = prev.At, prev.RootVersion, prev.TargetsVersion, prev.Expires
			cat.Releases, cat.Skipped, cat.SkippedExample = prev.Releases, prev.Skipped, prev.SkippedExample
		}
		if cat.Releases == nil {
			cat.Releases = []rollout.Release{}
		}
		l.warn("reading the release repository failed; the catalog keeps the last good releases", err, slog.String("url", cat.URL))
		return cat
	}
	rs, bad := tr.Releases()
	cat.At, cat.RootVersion, cat.TargetsVersion, cat.Expires = cat.Checked, tr.RootVersion, tr.TargetsVersion, tr.Expires.UTC()
	cat.Releases = rs
	if cat.Releases == nil {
		cat.Releases = []rollout.Release{}
	}
	if cat.Skipped = len(bad); cat.Skipped > 0 {
		cat.SkippedExample = rollout.ClipText(bad[0].Error(), maxCatalogError)
	}
	if l.lastErr != "" || !l.logged {
		c.o.Log.Info("release repository read", slog.String("url", cat.URL), slog.Int("releases", len(rs)),
			slog.Int64("targets_version", tr.TargetsVersion), slog.Int64("root_version", tr.RootVersion), slog.Int("skipped_targets", cat.Skipped))
		l.lastErr, l.logged = "", true
	}
	return cat
}

// lastGood is the catalog as this controller last knew it, else as the
// bucket has it (a controller that leads from its start has read none).
func (l *releaseLoop) lastGood(ctx context.Context) *kv.ReleaseCatalog {
	if cat := l.c.catalog.Load(); cat != nil {
		return cat
	}
	cat, err := kv.ReadReleaseCatalog(ctx, l.c.fleet.JS.Conn())
	if err != nil {
		return nil
	}
	return &cat
}

// warn logs err once until it changes or a good read comes between.
func (l *releaseLoop) warn(msg string, err error, attrs ...any) {
	if err.Error() == l.lastErr {
		return
	}
	l.lastErr, l.logged = err.Error(), false
	l.c.o.Log.Warn(msg, append([]any{slog.Any("err", err)}, attrs...)...)
}

// ReleaseCatalog is the release catalog as this controller knows it now
// (leading: what it read last; else what it read from fleet_stats); false
// without --release-repo, or before the first read.
func (c *Controller) ReleaseCatalog() (kv.ReleaseCatalog, bool) {
	cat := c.catalog.Load()
	if cat == nil {
		return kv.ReleaseCatalog{}, false
	}
	return *cat, true
}

// givenRootFile, in a trust dir, is the sha256 of the root the operator
// gave (--release-root) that the dir's trust started from.
const givenRootFile = "given-root.sha256"

// ReadReleaseRoot reads and checks the root in file (--release-root): a
// TUF root signed by its own threshold, or an error that says what the
// file is instead.
func ReadReleaseRoot(file string) ([]byte, error) {
	root, err := readRoot(file)
	if err != nil {
		return nil, err
	}
	// go-tuf checks it; nothing is written, so that a controller that
	// stops on a later error has changed nothing.
	if err := release.CheckRoot(root); err != nil {
		return nil, fmt.Errorf("--release-root %s: %w (give the root.json the repository's owner published, DIR/metadata/root.json)", file, err)
	}
	return root, nil
}

// TrustReleaseRoot makes dir the trust dir of a release repository client
// given root (ReadReleaseRoot). When dir's trust started from this same
// root, it is kept as it is: the newer roots a refresh followed and the
// versions it saw (what makes a rollback detectable) survive a restart.
// Another root replaces it.
func TrustReleaseRoot(dir string, root []byte) error {
	sum := sha256.Sum256(root)
	want := hex.EncodeToString(sum[:])
	if got, err := os.ReadFile(filepath.Join(dir, givenRootFile)); err == nil && strings.TrimSpace(string(got)) == want {
		if _, err := release.TrustedRoot(dir); err == nil {
			return nil
		}
	}
	if err := release.TrustRoot(dir, root); err != nil {
		return fmt.Errorf("release trust dir %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, givenRootFile), []byte(want+"\n"), 0o600); err != nil {
		return fmt.Errorf("release trust dir %s: %w", dir, err)
	}
	return nil
}

func readRoot(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("--release-root: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, release.MaxRootBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--release-root %s: %w", name, err)
	}
	if len(b) > release.MaxRootBytes {
		return nil, fmt.Errorf("--release-root %s: more than %d bytes: not a TUF root", name, release.MaxRootBytes)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("--release-root %s: the file is empty: give the repository's root.json", name)
	}
	return b, nil
}

// checkReleaseURL checks --release-repo: an http(s) URL with a host.
func checkReleaseURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--release-repo %q: want the repository's base URL, http:// or https://, e.g. https://releases.example.com/fleet (metadata is read from URL/metadata/)", raw)
	}
	return nil
}

// releaseHTTPClient is the controller's HTTP client for the repository:
// it follows redirects only on the repository's own host.
func releaseHTTPClient(base string) *http.Client {
	host := ""
	if u, err := url.Parse(base); err == nil {
		host = u.Host
	}
	return &http.Client{CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if req.URL.Host != host {
			return fmt.Errorf("release repository: redirect to another host (%s) refused", req.URL.Host)
		}
		if len(via) >= 5 {
			return errors.New("release repository: too many redirects")
		}
		return nil
	}}
}
