package install

import (
	"errors"
	"fmt"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrCorrupt: a state file exists but cannot be read as what it should
	// be. It is reported, never silently replaced: the operator decides.
	ErrCorrupt = errors.New("corrupt state file")
	// ErrBadChecksum: the download does not match its published sha256.
	ErrBadChecksum = errors.New("checksum mismatch")
	// ErrBadSignature: the checksum's Ed25519 signature does not verify.
	ErrBadSignature = errors.New("signature does not verify")
	// ErrOldSignature: the signature covers the .sha256 file, as releases
	// were signed before signatures named the app and the version. It
	// comes with ErrBadSignature; the fix is to re-sign the release with
	// scripts/release.sh.
	ErrOldSignature = errors.New("signed the old way")
	// ErrOtherRelease: the signature is genuine but made for another app,
	// version or file (a release replayed under another name). It comes
	// with ErrBadSignature.
	ErrOtherRelease = errors.New("signature is for another release")
	// ErrShadowsTool: the release ships, in bin/, a program agentd runs
	// (Tools). Linked into the bin dir, which is often early in root's
	// PATH, it would stand in for that program. The release's fault.
	ErrShadowsTool = errors.New("release ships a program agentd runs")
	// ErrNoSpace: not enough free disk space for the release.
	ErrNoSpace = errors.New("not enough free space")
	// ErrDownload: the release could not be fetched.
	ErrDownload = errors.New("download failed")
	// ErrStalled: a response did not come, or came too slowly (Fetcher's
	// StallTimeout and MinProgress). It comes with ErrDownload.
	ErrStalled = errors.New("stalled")
	// ErrDeadline: a download did not finish within Fetcher.Deadline. It
	// comes with ErrDownload.
	ErrDeadline = errors.New("download deadline passed")
	// ErrAbandoned: the caller gave up a download (Installer.Abandon)
	// because the version is no longer wanted.
	ErrAbandoned = errors.New("abandoned: no longer the target")
	// ErrHostileArchive: the tarball tries to write outside its directory,
	// links out of it, holds device files, or is a size or file-count bomb.
	ErrHostileArchive = errors.New("archive rejected")
	// ErrLocked: another process holds the root lock (LockedError says
	// who).
	ErrLocked = errors.New("another updater is running")
	// ErrInvalidRelease: the archive is safe but not a release agentd can
	// run (no bin/, nothing executable in it). It comes with
	// ErrHostileArchive, and is the release's fault (ClassOf).
	ErrInvalidRelease = errors.New("invalid release tree")
	// ErrInterrupted: an install was cut short by a crash or by agentd
	// stopping, not by anything the version did.
	ErrInterrupted = errors.New("install interrupted")
	// ErrUnhealthy: the new version did not come up healthy.
	ErrUnhealthy = errors.New("new version unhealthy")
	// ErrBackup: the database backup could not be made or is unusable.
	ErrBackup = errors.New("database backup")
	// ErrRepository: in repository mode (Fetcher.Resolve), the release
	// repository or a mirror is at fault: it could not be read, what it
	// served did not verify (expired, rolled back, badly signed), it names
	// no such release for this host, or the file it served is not the one
	// its verified metadata describes. Never the release's fault: an
	// infrastructure failure (ClassOf), retried with backoff. A
	// RepositoryError says which.
	ErrRepository = errors.New("release repository")
	// ErrNotOurs: a bin dir entry agentd did not create (links.yaml does not
	// list it, or it no longer points into versions/) is where a link of
	// ours should go. It is never replaced or removed: the operator decides.
	ErrNotOurs = errors.New("not created by agentd")
)

// LockedError is AcquireLock's error when another process holds the lock.
// It is ErrLocked.
type LockedError struct {
	Path string
	// Holder is what the holder wrote into the lock file: "agentd run
	// (pid 1234, started 2026-01-02T03:04:05Z)"; "" when it has not yet.
	Holder string
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("%v: %s is held by %s", ErrLocked, e.Path, e.Who())
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Who is the holder, or "another process" when it has not said.
func (e *LockedError) Who() string {
	if e.Holder == "" {
		return "another process"
	}
	return e.Holder
}

// RepositoryError is a repository mode failure (Fetcher.Resolve): Reason
// is short ("unavailable", "expired", "refused", "no such release", "wrong
// file") and becomes the Cause, "release repository: <reason>". It is
// ErrRepository.
type RepositoryError struct {
	Reason string
	Err    error
}

func (e *RepositoryError) Error() string {
	if e.Err == nil {
		return "release repository: " + e.Reason
	}
	return "release repository: " + e.Reason + ": " + e.Err.Error()
}

// Unwrap is the underlying error.
func (e *RepositoryError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrRepository) true.
func (e *RepositoryError) Is(target error) bool { return target == ErrRepository }
