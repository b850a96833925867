package auth

import "errors"

var (
	// ErrExists is returned when auth init would overwrite an existing
	// operator: that would lock every issued credential out.
	ErrExists = errors.New("already initialised")
	// ErrNoKey is returned when an operation needs a seed that is not in
	// the directory (kept offline, or never written).
	ErrNoKey = errors.New("signing key not available")
	// ErrUnknown is returned for an agent or user the directory has no
	// record of.
	ErrUnknown = errors.New("no record")
	// ErrLegacy is returned when a directory was minted before the AGENTS
	// account existed and needs "fleetctl auth upgrade".
	ErrLegacy = errors.New("auth directory needs an upgrade")
	// ErrEdgeRole is returned when a leaf user is asked of "auth user":
	// a leaf user is one edge site's, minted by "edge add" (IssueEdge).
	ErrEdgeRole = errors.New("leaf users are minted per edge site")
	// ErrAppGrant is returned for an agent's apps that cannot be granted
	// (AppGrant.Validate).
	ErrAppGrant = errors.New("invalid apps for an agent")
)
