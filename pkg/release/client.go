package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/renameio/v2"
	"github.com/theupdateframework/go-tuf/v2/metadata"
	"github.com/theupdateframework/go-tuf/v2/metadata/config"
	"github.com/theupdateframework/go-tuf/v2/metadata/updater"
)

// The client side of a release repository: every check of TUF's client
// workflow (root rotation, signatures and thresholds, versions, expiry,
// snapshot and timestamp consistency, metadata lengths and hashes) is
// go-tuf's updater. This file only feeds it bytes, bounded, and reads the
// verified targets it leaves.

// Errors a refresh or a lookup returns. Unavailable and Untrusted are the
// repository's fault and never the release's (an agent holds, it does not
// count a failure against the version); NoTarget means the verified
// metadata names no such release.
var (
	// ErrUnavailable: the repository could not be read (network, HTTP
	// status, a stall, a deadline, a local I/O error).
	ErrUnavailable = errors.New("release repository unavailable")
	// ErrUntrusted: what the repository served did not verify against the
	// trusted root (bad or too few signatures, a version older than one
	// already trusted, expired metadata, metadata longer or other than
	// snapshot/timestamp say).
	ErrUntrusted = errors.New("release repository metadata refused")
	// ErrNoTarget: the verified targets name no release for that app,
	// version and platform.
	ErrNoTarget = errors.New("no such release in the repository")
)

// Metadata size bounds. go-tuf's defaults are for public repositories of
// thousands of packages; these still leave room for ~10,000 targets.
const (
	MaxRootBytes      = 64 << 10
	MaxTimestampBytes = 16 << 10
	MaxSnapshotBytes  = 64 << 10
	MaxTargetsBytes   = 8 << 20
	// DefaultRequestTimeout bounds each metadata request: a server that
	// trickles bytes (slow retrieval) fails within it.
	DefaultRequestTimeout = 30 * time.Second
)

// Client reads a release repository served at URL (metadata under
// URL/metadata/, targets under URL/targets/) through a trusted root kept
// in Dir.
type Client struct {
	// URL is the repository's base URL.
	URL string
	// Dir keeps the trusted metadata: root.json (the trusted root, written
	// by TrustRoot and replaced only by a root the previous one signed),
	// and the last verified timestamp, snapshot and targets (what makes a
	// rollback detectable).
	Dir string
	// Root, used when Dir is "", is the trusted root for a client that
	// keeps nothing: every refresh starts from Root, follows rotations
	// in memory and writes no file (a read-only command's mode: fleetctl
	// repo ls URL). Rollback is then caught only within one refresh.
	Root []byte
	// HTTP makes the requests; nil means http.DefaultClient. Redirects to
	// another host are the caller's to refuse (its CheckRedirect).
	HTTP *http.Client
	// RequestTimeout bounds each metadata request; 0 means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Now is the reference time for expiry; nil means time.Now.
	Now func() time.Time

	mu sync.Mutex
}

// Trusted is the verified state of a repository after a refresh.
type Trusted struct {
	// RootVersion, TargetsVersion, SnapshotVersion and TimestampVersion
	// are the trusted metadata's versions.
	RootVersion, TargetsVersion, SnapshotVersion, TimestampVersion int64
	// Expires is the earliest expiry of the trusted metadata: past it, a
	// refresh that finds nothing newer fails.
	Expires time.Time
	// TargetsExpires and TimestampExpires are those roles' own expiries.
	TargetsExpires, TimestampExpires time.Time

	targetsURL string
	consistent bool
	targets    map[string]*metadata.TargetFiles
}

// Target is one verified release file.
type Target struct {
	// Path is the target's path in the repository.
	Path string
	// URL is where to download it (hash-prefixed when the repository
	// uses consistent snapshots).
	URL string
	// Length and SHA256 are what the download must be, from verified
	// metadata.
	Length int64
	SHA256 string
	Custom Custom
}

// TrustRoot checks that root is a root metadata document signed by its own
// threshold and writes it as dir's trusted root, replacing whatever dir
// held (the timestamp, snapshot and targets trusted under an older root
// go too). It is how a host is given its root of trust: out of band, once.
func TrustRoot(dir string, root []byte) error {
	if err := CheckRoot(root); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	for _, role := range []string{metadata.TIMESTAMP, metadata.SNAPSHOT, metadata.TARGETS} {
		if err := os.Remove(filepath.Join(dir, role+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	return writeFileAtomic(filepath.Join(dir, metadata.ROOT+".json"), root)
}

// CheckRoot checks that root is a TUF root metadata document (as a
// repository's metadata/root.json is) signed by its own threshold.
func CheckRoot(root []byte) error {
	if len(root) > MaxRootBytes {
		return fmt.Errorf("%w: the root is %d bytes, more than %d", ErrUntrusted, len(root), MaxRootBytes)
	}
	r, err := metadata.Root().FromBytes(root)
	if err != nil {
		return fmt.Errorf("%w: not a TUF root (want a repository's metadata/root.json): %v", ErrUntrusted, err)
	}
	if err := r.VerifyDelegate(metadata.ROOT, r); err != nil {
		return fmt.Errorf("%w: the root is not signed by its own threshold: %v", ErrUntrusted, err)
	}
	return nil
}

// TrustedRoot returns the root dir trusts now (after any rotation a
// refresh followed).
func TrustedRoot(dir string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(dir, metadata.ROOT+".json"))
	if err != nil {
		return nil, fmt.Errorf("%w: no trusted root in %s (give one with --release-root): %v", ErrUntrusted, dir, err)
	}
	return b, nil
}

// Refresh brings the trusted metadata up to date with the repository,
// following root rotations, and returns it verified. Refreshes of one
// Client run one at a time.
func (c *Client) Refresh(ctx context.Context) (*Trusted, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	root, err := c.Root, error(nil)
	if c.Dir != "" {
		root, err = TrustedRoot(c.Dir)
	} else if len(root) == 0 {
		err = fmt.Errorf("%w: a client with neither Dir nor Root", ErrUntrusted)
	} else {
		err = CheckRoot(root)
	}
	if err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(c.URL, "/")
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: release repository %q: want an http:// or https:// URL", ErrUnavailable, clip(c.URL))
	}
	cfg, err := config.New(base+"/metadata", root)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	cfg.RemoteTargetsURL = base + "/targets"
	cfg.LocalMetadataDir = c.Dir
	cfg.LocalTargetsDir = filepath.Join(c.Dir, "targets") // unused: targets are downloaded by the caller
	if c.Dir == "" {
		// go-tuf still tries to read a cached timestamp, snapshot and
		// targets from LocalMetadataDir ("" would be the working
		// directory): point it where no file can be.
		cfg.DisableLocalCache = true
		cfg.LocalMetadataDir = filepath.Join(os.DevNull, "no-cache")
		cfg.LocalTargetsDir = cfg.LocalMetadataDir
	}
	cfg.RootMaxLength, cfg.TimestampMaxLength = MaxRootBytes, MaxTimestampBytes
	cfg.SnapshotMaxLength, cfg.TargetsMaxLength = MaxSnapshotBytes, MaxTargetsBytes
	cfg.MaxDelegations = 0
	cfg.Fetcher = &boundedFetcher{ctx: ctx, client: c.HTTP, timeout: c.RequestTimeout}
	up, err := updater.New(cfg)
	if err != nil {
		return nil, classifyTUF(err)
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	up.UnsafeSetRefTime(now().UTC())
	if err := up.Refresh(); err != nil {
		return nil, classifyTUF(err)
	}
	tm := up.GetTrustedMetadataSet()
	t := &Trusted{
		RootVersion:      tm.Root.Signed.Version,
		TargetsVersion:   tm.Targets[metadata.TARGETS].Signed.Version,
		SnapshotVersion:  tm.Snapshot.Signed.Version,
		TimestampVersion: tm.Timestamp.Signed.Version,
		TargetsExpires:   tm.Targets[metadata.TARGETS].Signed.Expires,
		TimestampExpires: tm.Timestamp.Signed.Expires,
		targetsURL:       cfg.RemoteTargetsURL,
		consistent:       tm.Root.Signed.ConsistentSnapshot,
		targets:          up.GetTopLevelTargets(),
	}
	t.Expires = slices.MinFunc([]time.Time{tm.Root.Signed.Expires, t.TargetsExpires, tm.Snapshot.Signed.Expires, t.TimestampExpires}, time.Time.Compare)
	return t, nil
}

// Target returns the one verified target of app's version for goos/goarch.
func (t *Trusted) Target(app, version, goos, goarch string) (Target, error) {
	prefix := app + "/" + version + "/" + Platform(goos, goarch) + "/"
	var found []Target
	for p, tf := range t.targets {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		tg, err := t.target(p, tf)
		if err != nil {
			return Target{}, err
		}
		found = append(found, tg)
	}
	switch len(found) {
	case 0:
		return Target{}, fmt.Errorf("%w: %s %s for %s (targets v%d: %s)", ErrNoTarget, app, version, Platform(goos, goarch), t.TargetsVersion, t.versionsOf(app))
	case 1:
		return found[0], nil
	}
	return Target{}, fmt.Errorf("%w: %d files for %s %s %s: want one", ErrUntrusted, len(found), app, version, Platform(goos, goarch))
}

func (t *Trusted) target(p string, tf *metadata.TargetFiles) (Target, error) {
	c, hexSum, err := checkTarget(p, tf)
	if err != nil {
		return Target{}, fmt.Errorf("%w: %v", ErrUntrusted, err)
	}
	remote := p
	if t.consistent {
		dir, file := path.Split(p)
		remote = dir + hexSum + "." + file
	}
	return Target{Path: p, URL: t.targetsURL + "/" + remote, Length: tf.Length, SHA256: hexSum, Custom: c}, nil
}

// Releases lists the verified releases, by app then version (semver
// order), and the targets it skipped because they name no release.
func (t *Trusted) Releases() ([]Release, []error) {
	rs, bad := releasesOf(t.targets)
	for i, err := range bad {
		bad[i] = fmt.Errorf("%w: %v", ErrUntrusted, err)
	}
	return rs, bad
}

func (t *Trusted) versionsOf(app string) string {
	rs, _ := t.Releases()
	var vs []string
	for _, r := range rs {
		if r.App == app {
			vs = append(vs, r.Version+" ("+strings.Join(r.Platforms, ", ")+")")
		}
	}
	if len(vs) == 0 {
		var apps []string
		for _, r := range rs {
			if !slices.Contains(apps, r.App) {
				apps = append(apps, r.App)
			}
		}
		if len(apps) == 0 {
			return "it has no release of " + app + ", nor of any app"
		}
		return "it has no release of " + app + "; it has releases of " + strings.Join(apps, ", ") + " (is the app named otherwise in the repository? agentd --app-name NAME)"
	}
	return "it has " + strings.Join(vs, ", ")
}

// classifyTUF maps go-tuf's errors to ours, keeping its text.
func classifyTUF(err error) error {
	var dl *metadata.ErrDownloadHTTP
	switch {
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrUntrusted):
		return err
	case errors.As(err, &dl), errors.Is(err, &metadata.ErrDownload{}):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// go-tuf's error stays in the chain: a caller may tell an expired
	// role (metadata.ErrExpiredMetadata) from other refusals.
	return fmt.Errorf("%w: %w", ErrUntrusted, err)
}

// boundedFetcher is go-tuf's window on the network: one GET per file,
// bounded in size by what go-tuf expects and in time by timeout, under the
// refresh's ctx.
type boundedFetcher struct {
	ctx     context.Context
	client  *http.Client
	timeout time.Duration
}

func (f *boundedFetcher) DownloadFile(rawURL string, maxLength int64, _ time.Duration) ([]byte, error) {
	timeout := f.timeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	ctx, cancel := context.WithTimeout(f.ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	req.Header.Set("Accept-Encoding", "identity")
	client := f.client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: %v", ErrUnavailable, rawURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// go-tuf stops looking for a newer root at a 404: the type matters.
		return nil, &metadata.ErrDownloadHTTP{StatusCode: resp.StatusCode, URL: rawURL}
	}
	if resp.ContentLength > maxLength {
		return nil, fmt.Errorf("%w: GET %s: %d bytes, more than the %d expected", ErrUntrusted, rawURL, resp.ContentLength, maxLength)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxLength+1))
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: %v", ErrUnavailable, rawURL, err)
	}
	if int64(len(b)) > maxLength {
		return nil, fmt.Errorf("%w: GET %s: more than the %d bytes expected", ErrUntrusted, rawURL, maxLength)
	}
	return b, nil
}

// writeFileAtomic writes b to name through a synced temporary file and a
// rename.
func writeFileAtomic(name string, b []byte) error {
	if err := renameio.WriteFile(name, b, 0o600); err != nil {
		return fmt.Errorf("%w: write %s: %v", ErrUnavailable, name, err)
	}
	return nil
}
