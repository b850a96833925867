package httpfind

import "errors"

// Sentinel errors; wrapped errors say which URL or field and why.
var (
	// ErrNoPlan reports that no plan spec has been loaded yet: there is no
	// version to tell anyone, and guessing one would hand out a release that
	// may not exist.
	ErrNoPlan = errors.New("no plan yet")
	// ErrBadAnswer reports a 200 response that is not a find answer (a
	// captive portal, a proxy's error page, a garbled or oversized body).
	ErrBadAnswer = errors.New("invalid find answer")
	// ErrNoURL reports a Client with no URL to ask.
	ErrNoURL = errors.New("no find URL configured")
	// ErrUnknownGroup reports a group the rollout config does not name: a
	// typo in the agent's update.yaml, or a group not added yet. Its agents
	// are never updated, so the endpoint says so (404) rather than answer
	// "no update" as if all were well.
	ErrUnknownGroup = errors.New("unknown group")
	// ErrUnknownApp reports an app the rollout config does not list (the
	// find request's app parameter): a host's agentd config naming an app
	// the fleet has not added, or a typo. The endpoint says so (404)
	// rather than answer another app's plan.
	ErrUnknownApp = errors.New("unknown app")
)
