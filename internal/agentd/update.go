package agentd

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// recheckInterval bounds how long the agent goes without re-deciding, even
// when no plan change arrives (a jitter wait that was cut short, a failed
// install of a version that is still the target).
const recheckInterval = time.Minute

// decision is what to run and whether to move to it now, from the plan on
// the bus or, during an outage, from a controller's find endpoint.
type decision struct {
	version string
	update  bool
	jitter  int
	source  string
	// retry is the group status's operator retry request (bus decisions
	// only), and retryOf the target it is about.
	retry   rollout.RetryRequest
	retryOf string
}

func (a *Agent) busDecision(f *PlanFollower) decision {
	return a.planDecision(f.Plan())
}

// planDecision is the decision p gives this agent.
func (a *Agent) planDecision(p Plan) decision {
	if p.StatusRev == 0 {
		// No status for the group yet (the controller writes one within a
		// pass once the plan exists): without it the agent would not know
		// the group's health_timeout, min_healthy_time or jitter.
		return decision{source: "bus"}
	}
	v, update := p.DecideAt(a.id, a.o.Clock.Now())
	d := decision{version: v, update: update, jitter: p.Status.JitterSeconds, source: "bus"}
	if p.SpecRev != 0 && p.Status.TargetVersion == p.Spec.TargetVersion {
		d.retry, d.retryOf = p.Status.Retry, p.Spec.TargetVersion
	}
	return d
}

// updateLoop acts on the plan: whenever it changes (or every
// recheckInterval), it asks rollout.Decide what to run and installs it when
// told to, after a random wait of up to the group's jitter so that a group
// does not download at once. While the bus is unreachable (fallback), the
// find endpoint's answers take the plan's place.
func (a *Agent) updateLoop(ctx context.Context, f *PlanFollower, answers <-chan decision) error {
	recheck := a.o.Clock.NewTimer(recheckInterval)
	defer recheck.Stop()
	// retry fires when an infrastructure failure's backoff is over
	// (retry.go); stopped while none is due.
	retry := a.o.Clock.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	// later holds the last decision that arrived during an install (the
	// install watched the plan meanwhile), to be acted on next.
	later := make(chan decision, 1)
	for {
		var d decision
		select {
		case <-ctx.Done():
			return ctx.Err()
		case d = <-later:
		case <-f.Changed():
			d = a.busDecision(f)
		case <-recheck.C():
			recheck.Reset(recheckInterval)
			if a.fallback.Load() {
				continue // the stale bus plan does not overrule the find endpoint
			}
			d = a.busDecision(f)
		case <-retry.C():
			if a.fallback.Load() {
				continue // the find endpoint's next answer decides
			}
			d = a.busDecision(f)
		case d = <-answers:
		case g := <-a.member.moves:
			// Between installs: a move by labels (selector.go) never
			// happens during one.
			a.moveGroup(f, g)
			continue
		}
		a.passRetry(d)
		a.settle(d.version)
		target, ok := a.wants(d)
		if !ok {
			continue
		}
		if d.jitter > 0 {
			wait := time.Duration(rand.Int64N(int64(d.jitter) * int64(time.Second)))
			a.o.Log.Info("update due; waiting out the group's jitter", slog.String("version", target),
				slog.Duration("wait", wait), slog.String("source", d.source))
			t := a.o.Clock.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C():
			}
			// The plan may have moved on (paused, halted) while waiting.
			if d.source == "bus" {
				d = a.busDecision(f)
				if target, ok = a.wants(d); !ok {
					continue
				}
			}
		}
		if !a.beginRetry(d, target) {
			continue
		}
		next, due := a.install(ctx, f, answers, target)
		if next != nil {
			later <- *next
		}
		if !due.IsZero() {
			retry.Reset(due.Sub(a.o.Clock.Now()))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// wants reports the version a decision tells this agent to move to now, if
// any and if the agent may act on it.
func (a *Agent) wants(d decision) (string, bool) {
	v := d.version
	a.mu.Lock()
	st, enabled := a.update.Status, a.update.Spec.Enabled
	a.mu.Unlock()
	switch {
	case !rollout.Act(st.ActiveVersion, v, d.update):
		return "", false
	case !enabled:
		return "", false
	case a.retryBlocks(v):
		return "", false // an artifact failure, or an infrastructure one not yet due (retry.go)
	case st.Rollback && st.RollbackFrom == v && retryVerdictOf(st, a.id, d, enabled) == retryHonour:
		return v, true // an operator's retry request (opretry.go): beginRetry records it
	case st.Rollback && st.RollbackFrom == v:
		if a.skipLogged != v {
			a.skipLogged = v
			a.o.Log.Info("not retrying a version this host rolled back from; an operator can ask for one more try with fleetctl retry, or run 'agentd update --force' on the host",
				slog.String("version", v), slog.String("retry", "fleetctl retry --group "+a.Group()+" --agent "+string(a.id)))
		}
		return "", false // never retried automatically
	}
	return v, true
}

// install installs target. Meanwhile it keeps deciding on plan changes and
// find answers: the first that no longer moves this host to target abandons
// the download (install.Installer.Abandon; once the release is downloaded,
// the install runs to its end). It returns the last decision that arrived
// during the install, for the update loop to act on, or nil, and when an
// infrastructure failure's retry is due (zero: none is).
func (a *Agent) install(ctx context.Context, f *PlanFollower, answers <-chan decision, target string) (*decision, time.Time) {
	a.mu.Lock()
	cur := a.update.Status
	a.mu.Unlock()
	a.o.Log.Info("installing", slog.String("version", target), slog.String("from", cur.ActiveVersion))
	timeout, minHealthy := f.Plan().HealthTimes()

	abandon, stop := make(chan struct{}), make(chan struct{})
	type watched struct{ last, moved *decision }
	result := make(chan watched, 1)
	go func() {
		last, moved := a.watchPlan(f, answers, cur.ActiveVersion, target, abandon, stop)
		result <- watched{last, moved}
	}()
	// One app installs at a time on a host (apps.go): waiting for another
	// app's install is neither a failure nor an install under way.
	if err := a.gate.acquire(ctx, abandon, func() {
		a.o.Log.Info("waiting for another app's install on this host to end", slog.String("version", target))
	}); err != nil {
		close(stop)
		w := <-result
		if errors.Is(err, install.ErrAbandoned) {
			a.o.Log.Info("the plan moved on while waiting for another app's install; not installing", slog.String("version", target),
				slog.String("plan_version", w.moved.version), slog.String("source", w.moved.source))
		}
		return w.last, time.Time{}
	}
	defer a.gate.release()
	in := *a.installer // a copy, for this install's own Abandon
	in.Abandon = abandon
	// Heartbeats say "updating to target" for as long as the install runs.
	a.setUpdatingTo(target)
	a.metrics.startInstall()
	began := a.o.Clock.Now()
	_, err := in.Install(ctx, cur, target, timeout, minHealthy)
	a.setUpdatingTo("")
	a.kickMembership() // a move that waited for the install's end
	if result, ran := installResult(err); ran {
		st := a.Status()
		end := a.o.Clock.Now()
		a.metrics.installed(result, end.Sub(began), end, err != nil && st.Rollback && st.RollbackFrom == target)
		a.kickTextfile()
	}
	close(stop)
	w := <-result

	switch {
	case err == nil:
		if w.moved != nil {
			a.o.Log.Info("the plan moved on after the release was downloaded; finished installing it first", slog.String("version", target),
				slog.String("plan_version", w.moved.version), slog.Bool("update", w.moved.update), slog.String("source", w.moved.source))
		}
		if a.o.SelfUpdate && a.o.Name == "" {
			// Only the default app's release may carry the host's
			// agentd (apps.go: one agentd for every app).
			a.selfUpdate(ctx)
		}
	case errors.Is(err, install.ErrAbandoned):
		a.o.Log.Info("the plan moved on; cancelled the download of an outdated target", slog.String("version", target),
			slog.String("plan_version", w.moved.version), slog.Bool("update", w.moved.update), slog.String("source", w.moved.source))
		a.retry = retryState{} // not a failure: the target changed
		a.setBlocked(blockedNote{})
		return w.last, time.Time{}
	case errors.Is(err, install.ErrSkipped), errors.Is(err, context.Canceled):
		return w.last, time.Time{}
	default:
		a.o.Log.Warn("install failed", slog.String("version", target), slog.Any("err", err),
			slog.String("class", string(install.ClassOf(err))))
	}
	return w.last, a.failed(target, err)
}

// setUpdatingTo records the version being installed, or "" when the
// install ended, which it heartbeats at once. The start is heartbeated by
// the install's first status save, which also sets start_time: a heartbeat
// sent before it would pair the new target with the last install's time.
func (a *Agent) setUpdatingTo(v string) {
	a.mu.Lock()
	a.updatingTo = v
	a.mu.Unlock()
	if v == "" && a.pub != nil {
		a.pub.Kick()
	}
}

// watchPlan decides on every plan change and find answer until stop is
// closed, and closes abandon the first time a decision does not move this
// host from from to target (keepsTarget). It returns the last decision and
// the one that abandoned target (nil: none). It takes the plan's change
// signals that the update loop, busy installing, is not reading; the loop
// gets the last decision back instead.
func (a *Agent) watchPlan(f *PlanFollower, answers <-chan decision, from, target string, abandon chan<- struct{}, stop <-chan struct{}) (last, moved *decision) {
	for {
		var d decision
		select {
		case <-stop:
			return last, moved
		case <-f.Changed():
			d = a.busDecision(f)
		case d = <-answers:
		}
		last = &d
		if moved != nil {
			continue
		}
		if !keepsTarget(d, from, target) {
			moved = &d
			close(abandon)
		}
	}
}

// keepsTarget reports whether d, decided during an install from from to
// target, still moves the host to target: a new target, a rollback to the
// start version, a pause or a halt do not, and abandon a download that
// has not finished (it changed nothing on the host yet). It judges against
// from, not the live status, which the install itself changes as it ends. A decision without a version (no plan
// known yet) changes nothing.
func keepsTarget(d decision, from, target string) bool {
	return d.version == "" || d.version == target && rollout.Act(from, d.version, d.update)
}

// installResult names how an install ended for the metrics; ran is false
// when it did not run (skipped, or agentd is stopping).
func installResult(err error) (result string, ran bool) {
	switch {
	case err == nil:
		return installOK, true
	case errors.Is(err, install.ErrAbandoned):
		return installAbandoned, true
	case errors.Is(err, install.ErrSkipped), errors.Is(err, context.Canceled):
		return "", false
	}
	return installFailed, true
}
