package heartbeat

import "errors"

// Sentinel errors returned (wrapped) by Decode and Aggregator.Observe.
var (
	// ErrMalformed: the payload is not a valid heartbeat.
	ErrMalformed = errors.New("malformed heartbeat")
	// ErrTooLarge: the payload exceeds MaxSize.
	ErrTooLarge = errors.New("heartbeat too large")
	// ErrUnsupportedVersion: the "v" field names a schema we do not know.
	ErrUnsupportedVersion = errors.New("unsupported heartbeat schema version")
	// ErrBadLabels: the labels are not an object of strings, or break
	// rollout.ValidateLabel or rollout.MaxLabels. It comes wrapped in
	// ErrMalformed.
	ErrBadLabels = errors.New("labels")
	// ErrSubjectMismatch: the subject's group or agent id disagrees with the body.
	ErrSubjectMismatch = errors.New("heartbeat subject does not match body")
)
