package agentd

import (
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// The retry schedule of infrastructure failures (docs/agent.md "Failure
// classes"): Options.RetryBase (--retry-base, default DefaultRetryBase)
// after the first failure, doubling up to Options.RetryMax (--retry-max,
// default DefaultRetryMax), each delay drawn within ±retryJitter of its
// value so that a fleet whose release site went down does not come back
// all at once.
const (
	DefaultRetryBase = 30 * time.Second
	DefaultRetryMax  = 10 * time.Minute
	retryJitter      = 0.2
)

// retryDelay is the nominal wait after the n-th infrastructure failure in a
// row (n ≥ 1), before jitter: base doubled n-1 times, at most max.
func retryDelay(n int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// jittered spreads d over [d×(1-retryJitter), d×(1+retryJitter)] by r in
// [0, 1).
func jittered(d time.Duration, r float64) time.Duration {
	return time.Duration(float64(d) * (1 - retryJitter + 2*retryJitter*r))
}

// retryState is what the agent remembers of failed installs of one target,
// in memory: a restarted agentd tries once more at once.
type retryState struct {
	target string
	class  install.FailureClass
	// failures counts infrastructure failures of target in a row; at is
	// when the next attempt is due.
	failures int
	at       time.Time
	// logged: the artifact block was logged for this target.
	logged bool
}

// blockedNote is the infrastructure failure of target an agent retries:
// the error and cause its heartbeats carry while a retry runs (see
// Agent.blocked).
type blockedNote struct{ target, err, cause string }

// setBlocked records what heartbeats say while a retry of an
// infrastructure failure runs (the zero note: nothing).
func (a *Agent) setBlocked(b blockedNote) {
	a.mu.Lock()
	a.blocked = b
	a.mu.Unlock()
}

// transferStarted is called as a download moves: the release site answered
// and the disk had room, so a retry has got past what blocked it.
func (a *Agent) transferStarted() {
	a.mu.Lock()
	a.blocked = blockedNote{}
	a.mu.Unlock()
}

// failed records how an install of target ended (err nil: installed) and
// says when to try again: zero time for "as today" (the next plan change
// or recheck), or the time an infrastructure retry is due.
func (a *Agent) failed(target string, err error) time.Time {
	if err == nil {
		a.retry = retryState{}
		a.setBlocked(blockedNote{})
		return time.Time{}
	}
	class, cause := install.ClassOf(err), install.Cause(err)
	prev := a.retry
	if prev.target != target {
		prev = retryState{}
	}
	switch class {
	case install.ClassInfrastructure:
		n := prev.failures + 1
		wait := jittered(retryDelay(n, a.o.RetryBase, a.o.RetryMax), rand.Float64())
		a.retry = retryState{target: target, class: class, failures: n, at: a.o.Clock.Now().Add(wait)}
		a.setBlocked(blockedNote{target: target, err: err.Error(), cause: cause})
		a.o.Log.Warn("install blocked by an infrastructure failure; retrying later", slog.String("version", target),
			slog.String("cause", cause), slog.Int("attempt", n), slog.Duration("retry_in", wait))
		return a.retry.at
	case install.ClassArtifact:
		a.retry = retryState{target: target, class: class}
		a.setBlocked(blockedNote{})
		a.o.Log.Error("the release site served a bad artifact; not retrying until the target changes or agentd restarts",
			slog.String("version", target), slog.String("cause", cause))
	default:
		a.retry = retryState{}
		a.setBlocked(blockedNote{})
	}
	return time.Time{}
}

// retryBlocks reports whether what the last failures of v say keeps the
// agent from installing v now. A decision for another version forgets
// them: the target changed.
func (a *Agent) retryBlocks(v string) bool {
	r := &a.retry
	switch {
	case r.target == "":
		return false
	case r.target != v:
		*r = retryState{}
		return false
	case r.class == install.ClassArtifact:
		if !r.logged {
			r.logged = true
			a.o.Log.Info("not retrying a release that failed verification; move the target or restart agentd to try again",
				slog.String("version", v))
		} else {
			a.o.Log.Debug("still not retrying a release that failed verification", slog.String("version", v))
		}
		return true
	case r.class == install.ClassInfrastructure && a.o.Clock.Now().Before(r.at):
		a.o.Log.Debug("retry after an infrastructure failure not due yet", slog.String("version", v),
			slog.Duration("due_in", r.at.Sub(a.o.Clock.Now())))
		return true
	}
	return false
}
