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
	// ErrUnprintable reports a name holding a rune that does not show as
	// itself (ValidatePrintable): a control, bidirectional or other
	// invisible character, or invalid UTF-8.
	ErrUnprintable = errors.New("unprintable character in a name")
	// ErrBadSite reports a site name that breaks ValidateSite.
	ErrBadSite = errors.New("invalid site name")
	// ErrBadConfig reports a fleet_config value that breaks a rule of §3.1.
	ErrBadConfig = errors.New("invalid config")
	// ErrBadSpec reports a fleet_plan spec that breaks a rule of §3.2.
	ErrBadSpec = errors.New("invalid plan spec")
	// ErrBadStatus reports a group status no controller could have written
	// (GroupStatus.Validate).
	ErrBadStatus = errors.New("invalid group status")
	// ErrConfigChange reports a config change that would alter a group while
	// it is rolling out.
	ErrConfigChange = errors.New("config change rejected")
	// ErrBadAction reports an operator action that the group's state does not
	// allow (for example rolling back a group that never started).
	ErrBadAction = errors.New("action not allowed")
)

// ErrStatusTooLarge reports a group status whose JSON stays at or over
// MaxStatusBytes even with its free text cut (GroupStatus.Bounded).
var ErrStatusTooLarge = errors.New("group status too large")
