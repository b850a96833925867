package release

import "errors"

// Errors of the repository side (Repo). The client side's are in
// client.go; a bad target path or custom metadata is ErrBadTarget
// (target.go).
var (
	// ErrNoRepository: the directory holds no repository (or, for Init,
	// already holds one).
	ErrNoRepository = errors.New("no release repository")
	// ErrKeyNotInRole: a key was given for something its role may not
	// sign (a key no role of the root names, a targets key as the
	// timestamp key, a key with nothing staged for it to sign).
	ErrKeyNotInRole = errors.New("key not in role")
	// ErrShortOfSignatures: what is staged lacks signatures (a threshold
	// not met); nothing was published.
	ErrShortOfSignatures = errors.New("short of signatures")
	// ErrExpired: published metadata clients would refuse as expired.
	ErrExpired = errors.New("expired")
	// ErrNoRelease: no target of that app and version in the repository.
	ErrNoRelease = errors.New("no such release")
	// ErrBadKeyChange: a rotation that cannot be made (an unknown role, a
	// key to revoke the role lacks, a threshold the keys cannot meet).
	ErrBadKeyChange = errors.New("bad key change")
	// ErrLocked: another command held the repository longer than
	// Repo.LockWait.
	ErrLocked = errors.New("release repository busy")
)
