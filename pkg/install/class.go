package install

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
)

// FailureClass says whose fault a failed install is, which decides what is
// done about it (docs/agent.md "Failure classes"): only a release failure
// counts against the version; an artifact failure stops until the target
// changes or an operator acts; an infrastructure failure is retried with
// backoff and never marks the version bad.
type FailureClass string

// The failure classes, as update.yaml's error_class and the heartbeat's.
const (
	// ClassRelease: the version itself failed on this host: the app did not
	// start, exited, failed its health check or min_healthy_time, or the
	// release tree is invalid or ships a program agentd runs.
	ClassRelease FailureClass = "release"
	// ClassArtifact: what the release site served is not what was
	// published: checksum or signature mismatch (a signature of another
	// release, or one made the old way, included), or a hostile archive.
	// The site is broken or attacked.
	ClassArtifact FailureClass = "artifact"
	// ClassInfrastructure: the host or the network, not the version:
	// download errors (network, HTTP status, stalls, deadlines), a release
	// repository that cannot be read or does not verify, or serves a file
	// other than its verified metadata describes (ErrRepository), a full
	// disk, the root lock held, a database backup that cannot be made, an
	// install cut short by a crash or by agentd stopping.
	ClassInfrastructure FailureClass = "infrastructure"
)

// FailureClasses are the classes, in the order docs list them.
var FailureClasses = []FailureClass{ClassRelease, ClassArtifact, ClassInfrastructure}

// Valid reports whether c is one of the classes.
func (c FailureClass) Valid() bool {
	switch c {
	case ClassRelease, ClassArtifact, ClassInfrastructure:
		return true
	}
	return false
}

// ClassOf classifies an install error (nil: ""). The most specific cause
// wins: an invalid release tree is a release failure although it is
// reported as a rejected archive. An error ClassOf does not know is a
// release failure: it then counts against the version and can halt a
// rollout, which an operator resumes, rather than letting a defect it cannot
// explain roll on through the fleet as "infrastructure".
func ClassOf(err error) FailureClass {
	c, _ := classify(err)
	return c
}

// Cause is a short reason for err, fit for a status column: "disk full",
// "download failed (HTTP 503)", "checksum mismatch". "" for nil.
func Cause(err error) string {
	_, cause := classify(err)
	return cause
}

// MaxCauseLen bounds Cause's result.
const MaxCauseLen = 64

func classify(err error) (FailureClass, string) {
	var se *StatusError
	var ne net.Error
	var re *RepositoryError
	switch {
	case err == nil:
		return "", ""
	case errors.Is(err, ErrInvalidRelease):
		return ClassRelease, "invalid release tree"
	case errors.Is(err, ErrUnhealthy):
		return ClassRelease, "unhealthy"
	case errors.As(err, &re):
		// Before the download errors it may wrap: the repository (or its
		// mirror) is at fault, whatever the transport said.
		return ClassInfrastructure, clipCause("release repository: " + re.Reason)
	case errors.Is(err, ErrRepository):
		return ClassInfrastructure, "release repository"
	case errors.Is(err, ErrBadChecksum):
		return ClassArtifact, "checksum mismatch"
	case errors.Is(err, ErrShadowsTool):
		return ClassRelease, "ships a program agentd runs"
	case errors.Is(err, ErrOldSignature):
		return ClassArtifact, "signed the old way (re-sign)"
	case errors.Is(err, ErrOtherRelease):
		return ClassArtifact, "signed for another release"
	case errors.Is(err, ErrBadSignature):
		return ClassArtifact, "bad signature"
	case errors.Is(err, ErrHostileArchive):
		return ClassArtifact, "archive rejected"
	case errors.Is(err, ErrScriptTempFail):
		return ClassInfrastructure, "install command: temporary failure"
	case errors.Is(err, ErrScriptTimeout):
		return ClassInfrastructure, "install command timed out"
	case errors.Is(err, ErrScriptVersion):
		return ClassRelease, "installed another version"
	case errors.Is(err, ErrScriptFailed):
		return ClassRelease, "install command failed"
	case errors.Is(err, ErrVersionCommand):
		return ClassRelease, "version command failed"
	case errors.Is(err, ErrNoSpace), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return ClassInfrastructure, "disk full"
	case errors.Is(err, ErrLocked):
		return ClassInfrastructure, "root lock held"
	case errors.Is(err, ErrStalled):
		return ClassInfrastructure, "download stalled"
	case errors.Is(err, ErrDeadline):
		return ClassInfrastructure, "download deadline passed"
	case errors.As(err, &se):
		return ClassInfrastructure, fmt.Sprintf("download failed (HTTP %d)", se.Code)
	case errors.Is(err, ErrAbandoned):
		return ClassInfrastructure, "abandoned (target changed)"
	case errors.Is(err, ErrDownload):
		return ClassInfrastructure, "download failed"
	case errors.Is(err, ErrBackup):
		return ClassInfrastructure, "database backup"
	case errors.Is(err, ErrNotOurs):
		return ClassInfrastructure, "bin dir entry not ours"
	case errors.Is(err, ErrCorrupt):
		return ClassInfrastructure, "corrupt state file"
	case errors.As(err, new(*StoppedError)):
		return ClassInfrastructure, "interrupted (agentd stopping)"
	case errors.Is(err, ErrInterrupted):
		return ClassInfrastructure, "interrupted"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return ClassInfrastructure, "interrupted"
	case errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EIO):
		return ClassInfrastructure, "disk error"
	case errors.As(err, &ne):
		return ClassInfrastructure, "network error"
	}
	return ClassRelease, "failed"
}

// clipCause bounds a cause to MaxCauseLen bytes.
func clipCause(s string) string {
	if len(s) <= MaxCauseLen {
		return s
	}
	return s[:MaxCauseLen]
}

// StatusError is a download request answered with a status other than the
// one expected. It is ErrDownload.
type StatusError struct {
	Method, URL string
	// Code and Status are the response's (503, "503 Service Unavailable").
	Code   int
	Status string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%v: %s %s: %s", ErrDownload, e.Method, e.URL, e.Status)
}

// Is makes errors.Is(err, ErrDownload) true.
func (e *StatusError) Is(target error) bool { return target == ErrDownload }
