package rollout

import "errors"

// Sentinel errors; wrapped errors carry the offending value and the fix.
var (
	// ErrBadVersion reports a version string that is not semantic versioning.
	ErrBadVersion = errors.New("invalid version")
	// ErrBadAgentID reports an agent id that is not a canonical UUID.
	ErrBadAgentID = errors.New("invalid agent id")
	// ErrBadGroupName reports a group name unusable as a subject token and key.
	ErrBadGroupName = errors.New("invalid group name")
)
