package agentd

import (
	"log/slog"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// settle clears what the last failed install left in the status once the
// plan wants the version that is installed: an install interrupted (or
// blocked, or refused as a bad artifact) on its way to a target the plan
// has since moved away from is over, and the host is where it should be.
// Left alone, update.yaml and every heartbeat would say "blocked:
// interrupted" for ever although installed equals desired. A rollback is
// kept (rollback_from is the version's verdict, and what keeps it from
// being retried automatically): only its error goes when a later,
// non-release failure replaced it. It reports whether it cleared anything;
// the heartbeat goes out at once (SetStatus).
func (a *Agent) settle(desired string) bool {
	a.mu.Lock()
	st := a.update.Status
	a.mu.Unlock()
	if desired == "" || desired != st.ActiveVersion {
		return false
	}
	a.setBlocked(blockedNote{})
	if a.retry.target != "" && a.retry.target != desired {
		a.retry = retryState{} // for a target no longer wanted
	}
	if st.Error == "" || st.Rollback && st.ErrorClass == install.ClassRelease {
		return false
	}
	if st.Rollback && st.ErrorClass == "" {
		return false // an older agentd's rollback record: its error is the rollback's
	}
	a.o.Log.Info("installed equals desired; clearing the last install's error", slog.String("version", desired),
		slog.String("error", st.Error), slog.String("class", string(st.ErrorClass)))
	st.SetError("", nil)
	if err := a.SetStatus(st); err != nil {
		a.o.Log.Warn("clearing the last install's error failed", slog.Any("err", err))
		return false
	}
	return true
}
