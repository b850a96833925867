package agentd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/renameio/v2"
	"github.com/theupdateframework/go-tuf/v2/metadata"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/release"
)

// Repository mode (issue 27): an app whose update.yaml names a release
// repository (spec.release_repo, agentd --release-repo) installs only what
// the repository's TUF metadata, verified by go-tuf through pkg/release
// against the root the host was given (--release-root), names for the app,
// the version and this host's OS and architecture. The trust lives under
// the app's tree in tuf/: root.json (the trusted root; a refresh replaces
// it only with a root the previous one signed, so root rotation needs no
// re-enrolment), the last verified timestamp, snapshot and targets (what
// makes a rollback or a freeze detectable), and refresh.json, the last
// refresh's outcome for 'agentd status'. Every failure of the repository
// is install.ErrRepository: infrastructure, retried with backoff, the
// group held, never counted against the version.

// tufDirName is the directory of an app's tree that holds its trust.
const tufDirName = "tuf"

// refreshFileName is the last refresh's outcome in the tuf dir.
const refreshFileName = "refresh.json"

// tufDir is the app's trust directory.
func (a *Agent) tufDir() string { return filepath.Join(a.dir(), tufDirName) }

// maxRootFileBytes bounds --release-root, as release.TrustRoot does.
const maxRootFileBytes = release.MaxRootBytes

// readRootFile reads and checks --release-root: a TUF root signed by its
// own threshold (release.CheckRoot: nothing of the host is written before
// every flag is checked). It returns the
// bytes and the root's version.
func readRootFile(path string) ([]byte, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, cliutil.UsageError{Err: fmt.Errorf("--release-root: %w", err)}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRootFileBytes+1))
	if err != nil {
		return nil, 0, cliutil.UsageError{Err: fmt.Errorf("--release-root: %w", err)}
	}
	if err := release.CheckRoot(b); err != nil {
		return nil, 0, cliutil.UsageError{Err: fmt.Errorf("--release-root %s: %w (want the repository's metadata/root.json, e.g. from 'fleetctl repo init')", path, err)}
	}
	v, _, err := rootInfo(b)
	if err != nil {
		return nil, 0, cliutil.UsageError{Err: fmt.Errorf("--release-root %s: %w", path, err)}
	}
	return b, v, nil
}

// rootInfo reads a root's version and expiry, for decisions and display;
// it verifies nothing (release.TrustRoot and go-tuf do).
func rootInfo(b []byte) (int64, time.Time, error) {
	r, err := metadata.Root().FromBytes(b)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("not a TUF root: %w", err)
	}
	return r.Signed.Version, r.Signed.Expires, nil
}

// planRoot decides what --release-root does on a host whose tuf dir may
// already trust a root: nil when it trusts that root or a newer one (a
// rotation it followed: giving the first root again, as a unit or a
// provisioning script does at every start, must not undo it), the bytes
// to trust otherwise.
func planRoot(dir string, given []byte, givenVersion int64) ([]byte, error) {
	have, err := os.ReadFile(filepath.Join(dir, "root.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return given, nil
	}
	if err != nil {
		return nil, err
	}
	if bytes.Equal(have, given) {
		return nil, nil
	}
	haveVersion, _, err := rootInfo(have)
	if err != nil {
		// A trusted root that cannot be read: the one given replaces it.
		return given, nil //nolint:nilerr // replaced
	}
	switch {
	case givenVersion < haveVersion:
		return nil, nil
	case givenVersion == haveVersion:
		return nil, cliutil.Usagef("--release-root is root version %d, which this host already trusts with other contents (%s): two roots of one version; remove %s to start over with the given one", givenVersion, filepath.Join(dir, "root.json"), dir)
	}
	return given, nil
}

// resolveRelease is the Fetcher's Resolve in repository mode: refresh the
// repository's metadata (go-tuf: rotation, signatures, thresholds,
// versions, expiry, consistency), then look up the one target of the
// app's version for this host. Every failure is install.ErrRepository.
func (a *Agent) resolveRelease(ctx context.Context, version string) (install.ResolvedTarget, error) {
	t, err := a.repo.Refresh(ctx)
	a.noteRefresh(t, err)
	if err != nil {
		return install.ResolvedTarget{}, repoError(err)
	}
	tg, err := t.Target(a.appName(), version, runtime.GOOS, runtime.GOARCH)
	if err != nil {
		return install.ResolvedTarget{}, repoError(err)
	}
	return install.ResolvedTarget{URL: tg.URL, Length: tg.Length, SHA256: tg.SHA256}, nil
}

// repoError makes a pkg/release error install.ErrRepository, with a
// reason fit for error_cause.
func repoError(err error) error {
	reason := "refused"
	switch {
	case errors.Is(err, &metadata.ErrExpiredMetadata{}):
		reason = "expired"
	case errors.Is(err, release.ErrNoTarget):
		reason = "no such release"
	case errors.Is(err, release.ErrUnavailable):
		reason = "unavailable"
	}
	// The reason says what pkg/release's sentinel says: keep its detail
	// only, so that the error reads "release repository: no such release:
	// app 3.0.0 for linux-amd64 (…)" (the chain keeps the sentinel).
	msg := err.Error()
	for _, s := range []error{release.ErrUnavailable, release.ErrUntrusted, release.ErrNoTarget} {
		msg = strings.TrimPrefix(msg, s.Error()+": ")
	}
	return &install.RepositoryError{Reason: reason, Err: &detailError{msg: msg, err: err}}
}

// detailError is err with a shorter text.
type detailError struct {
	msg string
	err error
}

func (e *detailError) Error() string { return e.msg }
func (e *detailError) Unwrap() error { return e.err }

// RepoStatus is an app's release repository trust state ('agentd status'):
// the repository, the trusted root's version and expiry (root.json in the
// tuf dir, after any rotation followed), and what the last refresh found.
type RepoStatus struct {
	URL string `json:"url"`
	// RootVersion and RootExpires are the trusted root's.
	RootVersion int64     `json:"root_version,omitempty"`
	RootExpires time.Time `json:"root_expires,omitzero"`
	// TargetsVersion and Expires (the earliest expiry of the trusted
	// metadata) are the last successful refresh's, at RefreshedAt.
	TargetsVersion int64     `json:"targets_version,omitempty"`
	Expires        time.Time `json:"expires,omitzero"`
	RefreshedAt    time.Time `json:"refreshed_at,omitzero"`
	// LastError is the last refresh's error, at LastErrorAt; "" when it
	// succeeded.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// TrustError says why the trust state could not be read.
	TrustError string `json:"trust_error,omitempty"`
}

// refreshRecord is refresh.json.
type refreshRecord struct {
	RootVersion    int64     `json:"root_version,omitempty"`
	TargetsVersion int64     `json:"targets_version,omitempty"`
	Expires        time.Time `json:"expires,omitzero"`
	RefreshedAt    time.Time `json:"refreshed_at,omitzero"`
	LastError      string    `json:"last_error,omitempty"`
	LastErrorAt    time.Time `json:"last_error_at,omitzero"`
}

// noteRefresh records a refresh's outcome in refresh.json, keeping the
// last good versions on error. A record that cannot be written is logged:
// it is for status only.
func (a *Agent) noteRefresh(t *release.Trusted, err error) {
	path := filepath.Join(a.tufDir(), refreshFileName)
	var rec refreshRecord
	if b, rerr := os.ReadFile(path); rerr == nil {
		_ = json.Unmarshal(b, &rec)
	}
	now := a.o.Clock.Now().UTC()
	if err != nil {
		rec.LastError, rec.LastErrorAt = err.Error(), now
		a.o.Log.Warn("release repository refresh failed", slog.String("repo", a.repo.URL), slog.Any("err", err))
	} else {
		rec = refreshRecord{RootVersion: t.RootVersion, TargetsVersion: t.TargetsVersion, Expires: t.Expires.UTC(), RefreshedAt: now}
		a.o.Log.Debug("release repository refreshed", slog.String("repo", a.repo.URL),
			slog.Int64("root_version", t.RootVersion), slog.Int64("targets_version", t.TargetsVersion))
	}
	b, _ := json.MarshalIndent(rec, "", "  ")
	if werr := renameio.WriteFile(path, append(b, '\n'), 0o644); werr != nil {
		a.o.Log.Debug("recording the release repository refresh failed", slog.Any("err", werr))
	}
}

// repoStatus is the app's trust state, nil when it has no repository.
func (a *Agent) repoStatus() *RepoStatus {
	a.mu.Lock()
	u := a.update.Spec.ReleaseRepo
	a.mu.Unlock()
	if u == "" {
		return nil
	}
	st := &RepoStatus{URL: u}
	root, err := release.TrustedRoot(a.tufDir())
	if err != nil {
		st.TrustError = err.Error()
	} else if v, exp, err := rootInfo(root); err != nil {
		st.TrustError = "trusted root: " + err.Error()
	} else {
		st.RootVersion, st.RootExpires = v, exp.UTC()
	}
	b, err := os.ReadFile(filepath.Join(a.tufDir(), refreshFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return st
	}
	var rec refreshRecord
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		st.TrustError = refreshFileName + ": " + err.Error()
		return st
	}
	st.TargetsVersion, st.Expires, st.RefreshedAt = rec.TargetsVersion, rec.Expires, rec.RefreshedAt
	st.LastError, st.LastErrorAt = rec.LastError, rec.LastErrorAt
	return st
}

// trustRoot writes the root --release-root gave (pendingRoot) as the app's
// trusted root, dropping the last refresh's record with the trust it
// described.
func (a *Agent) trustRoot() error {
	if a.pendingRoot == nil {
		return nil
	}
	if err := release.TrustRoot(a.tufDir(), a.pendingRoot); err != nil {
		return fmt.Errorf("--release-root: %w", err)
	}
	if err := os.Remove(filepath.Join(a.tufDir(), refreshFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	a.pendingRoot = nil
	return nil
}
