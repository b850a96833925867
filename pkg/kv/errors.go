package kv

import "errors"

// Sentinel errors, checked with errors.Is.
var (
	// ErrConflict: the key changed between read and write (CAS failed), or
	// a create found the key already there. Re-read and retry.
	ErrConflict = errors.New("changed under you; re-read and retry")
	// ErrNotFound: the key does not exist (or was deleted).
	ErrNotFound = errors.New("not found")
	// ErrCorrupt: the stored value is not the JSON we expect.
	ErrCorrupt = errors.New("stored value is not valid")
)
