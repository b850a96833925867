package install

import "errors"

// Sentinel errors, checked with errors.Is.
var (
	// ErrCorrupt: a state file exists but cannot be read as what it should
	// be. It is reported, never silently replaced: the operator decides.
	ErrCorrupt = errors.New("corrupt state file")
)
