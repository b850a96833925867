package agentd

import (
	"log/slog"

	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// An operator's retry request (fleetctl retry, rollout.RetryRequest in the
// group status) lets a host that rolled back from the group's target try it
// once more. The host honours a request at most once: it records the
// request's token in update.yaml's status.retry_token in the same atomic
// write that clears its rollback, before the install begins, so a restart
// (or a kill at any point) never retries twice, and a kill before the
// install began leaves a host that simply installs the target at its next
// decision. A host that is not rolled back from the target when it first
// sees a request records the token too: a request is for the hosts that
// failed before it, not for those that fail later.

// retryVerdict is what a retry request means to this host now.
type retryVerdict int

const (
	// retryNone: no request, one already taken into account, or one that
	// does not name this host.
	retryNone retryVerdict = iota
	// retryPass: the host is not rolled back from the target: the request
	// is not for it, now or later.
	retryPass
	// retryWait: the request is for this host, but the plan does not tell
	// it to update now (paused, halted, its turn not come) or updates are
	// disabled: it waits.
	retryWait
	// retryHonour: the host retries the target now.
	retryHonour
)

// retryVerdictOf judges d's retry request for a host with status st and id.
func retryVerdictOf(st install.Status, id rollout.AgentID, d decision, enabled bool) retryVerdict {
	r := d.retry
	switch {
	case r.Token == "" || r.Token == st.RetryToken || !r.Includes(id):
		return retryNone
	case !st.Rollback || st.RollbackFrom != d.retryOf:
		return retryPass
	case !enabled || d.version != d.retryOf || !rollout.Act(st.ActiveVersion, d.version, d.update):
		return retryWait
	}
	return retryHonour
}

// passRetry records d's retry request as taken into account when it is not
// for this host (retryPass), so that a later rollback does not use it. The
// write is not heartbeated: the heartbeat does not carry the token.
func (a *Agent) passRetry(d decision) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.update.Status
	switch retryVerdictOf(st, a.id, d, a.update.Spec.Enabled) {
	case retryPass:
	case retryNone:
		if d.retry.Token != "" && d.retry.Token != st.RetryToken {
			a.o.Log.Debug("an operator retry request names other hosts", slog.String("token", d.retry.Token))
		}
		return
	default:
		return
	}
	a.update.Status.RetryToken = d.retry.Token
	if err := a.update.Save(a.dir()); err != nil {
		a.update.Status = st
		a.o.Log.Warn("recording an operator retry request failed", slog.String("token", d.retry.Token), slog.Any("err", err))
		return
	}
	a.o.Log.Debug("an operator retry request is not for this host: it did not roll back from the target",
		slog.String("token", d.retry.Token), slog.String("target", d.retryOf))
}

// beginRetry is called before installing target. When the host rolled back
// from target, the install is a retry, and it goes ahead only if d's
// request is honoured now: the token is recorded and the rollback cleared
// in one write. It reports whether the install may go ahead.
func (a *Agent) beginRetry(d decision, target string) bool {
	st := a.Status()
	if !st.Rollback || st.RollbackFrom != target {
		return true // not a retry
	}
	if retryVerdictOf(st, a.id, d, a.enabled()) != retryHonour {
		return false
	}
	st.Rollback, st.RollbackFrom, st.RetryToken = false, "", d.retry.Token
	st.SetError("", nil)
	if err := a.SetStatus(st); err != nil {
		a.o.Log.Error("recording an operator retry request failed; not retrying", slog.String("version", target),
			slog.String("token", d.retry.Token), slog.Any("err", err))
		return false
	}
	a.skipLogged = "" // if the retry fails, say again that the version is not retried
	a.o.Log.Info("retrying a version this host rolled back from, once, as an operator asked (fleetctl retry)",
		slog.String("version", target), slog.String("token", d.retry.Token), slog.String("note", d.retry.Note))
	return true
}
