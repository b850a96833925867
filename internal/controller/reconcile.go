package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Reconcile is one pass of the rollout loop: campaign for the leader lease,
// and if this controller holds it, read config, spec and group statuses,
// compute every group's next status with rollout.Next (in dependency order,
// so a group that finishes lets its successors start in the same pass), and
// write the ones that changed, each with compare-and-swap on the revision
// read, then publish their events. Counts and agents come from this
// controller's own inventory, computed once at one instant, so the engine
// never sees counts and agent lists that disagree.
//
// A write that loses its compare-and-swap (an operator acted, or another
// controller wrote after losing the lease unnoticed) stops the pass: the next
// pass re-reads and decides again. Nothing is overwritten blind. Any other
// failure to write a group's status (one that cannot be stored, a denied
// write) is that group's: it is logged, its dependants decide on its stored
// status, and the pass goes on with the other groups. A status is stored as
// rollout.GroupStatus.Bounded cuts it (kv does), and compared so, so a
// status carrying a peer's long text is written once, not every pass.
//
// A stored value that is not what its key should hold (kv.State.Problems) is
// never acted on and never overwritten: a bad config or spec stops the whole
// pass (no group moves until an operator replaces it), a bad group status
// skips that group only (replacing it with a fresh status would erase what
// it held, a halt for one), and its dependants wait for it as for a group
// that is not done. Each is logged once per bad value, not every pass.
func (c *Controller) Reconcile(ctx context.Context) error {
	now := c.o.Clock.Now()
	held, err := c.lease.Campaign(ctx, now)
	if err != nil {
		return err
	}
	c.leading.Store(held)
	c.attr.pass(ctx, now, held)
	if held != c.leader {
		c.leader = held
		if held {
			c.o.Log.Info("leading: this controller now drives the rollout")
			c.groupsPubs = nil // read again: another leader may have written them
			c.releases.leading()
		} else {
			c.o.Log.Info("not leading: another controller holds the lease")
		}
	}
	if !held {
		c.an.drop()
		return nil
	}
	st, err := c.fleet.ReadState(ctx)
	if err != nil {
		return err
	}
	_, badConfig := st.Problem(kv.BucketConfig, kv.KeyConfig)
	if !badConfig {
		c.setApps(st.Config.Value)
	}
	c.noteProblems(st.Problems)
	if badConfig {
		return nil
	}
	// Every app of the config, each on its own plan and inventory: one
	// app's bad value, lost compare-and-swap or failed write stops that
	// app's pass, never another's.
	apps := c.apps.Load()
	for _, app := range apps.list {
		view, err := st.AppView(app.ns)
		if err != nil {
			// Not reached: a config whose overrides do not apply is
			// not valid (in Problems above).
			c.o.Log.Error("app skipped: its config does not apply", slog.String("app", app.ns.Name), slog.Any("err", err))
			continue
		}
		if err := c.reconcileApp(ctx, app, view, now); err != nil {
			if ctx.Err() != nil {
				return err
			}
			c.o.Log.Warn("rollout pass of the app failed; retrying next interval", slog.String("app", app.ns.Name), slog.Any("err", err))
		}
	}
	return nil
}

// reconcileApp is one app's part of the pass: view is the app's plan in
// the shape of a fleet before apps (kv.State.AppView: its keys unprefixed,
// Config with the app's overrides), written back under the app's keys.
func (c *Controller) reconcileApp(ctx context.Context, app *appInv, st *kv.State, now time.Time) error {
	ns := app.ns
	if _, bad := st.Problem(kv.BucketPlan, kv.KeySpec); bad {
		return nil
	}
	if _, bad := st.Problem(kv.BucketPlan, kv.KeyQuarantine); bad {
		return nil // which versions are quarantined is not known: nothing moves
	}
	// Only the agents that rolled back matter to quarantine; each group's
	// views are read when it is decided, one group at a time, so that a
	// million agents are never all viewed at once.
	quarantine, err := c.quarantine(ctx, ns, st.Quarantine, st.Config.Value.QuarantineAfter, app.agg.RolledBack(now), now)
	if err != nil {
		return err
	}
	c.publishGroups(ctx, ns, st.Config.Value, now)
	if !st.HasSpec {
		return nil // no plan: nothing to roll out
	}
	cfg, spec := st.Config.Value, st.Spec.Value
	plan := st.Plan()
	lag, backlog := c.heartbeatLag()
	ca := c.catchAllPlan(app, st, cfg, now)
	for _, group := range cfg.EvalOrder() {
		if _, bad := st.Problem(kv.BucketPlan, kv.GroupKey(group)); bad {
			continue
		}
		key := ns.Group(group)
		// The views of the group before are not needed any more: their
		// slice takes this group's (a pass allocates no views).
		c.views = app.agg.AppendViews(c.views[:0], group, now)
		views := c.views
		prev, had := st.Groups[group]
		measured := c.an.take(ns, group)
		var caught []rollout.CaughtGroup
		if group == ca.group {
			caught = ca.caught(app, now)
		}
		next, events := rollout.Next(rollout.Input{
			Config:       cfg,
			Group:        group,
			Spec:         spec,
			Prev:         prev.Value,
			Predecessors: plan.Predecessors(cfg, group),
			Counts:       rollout.CountAgents(views),
			Agents:       views,
			Now:          now,
			Quarantine:   quarantine,
			Measurements: measured,
			// Issue 28: for adaptive_in_flight.
			HeartbeatLag:      lag,
			HeartbeatBacklog:  backlog,
			HeartbeatInterval: c.o.HeartbeatInterval,
			Caught:            caught,
		})
		if bounded, _, err := next.Bounded(); err == nil {
			next = bounded
		}
		plan.Groups[group] = next
		if had && sameJSON(prev.Value, next) {
			c.noteWrite(ns, group, nil)
			c.an.schedule(ns, cfg, group, next, now)
			continue
		}
		if _, err := kv.Save(ctx, c.fleet.Plan, key, next, prev.Revision); err != nil {
			c.an.putBack(ns, group, measured) // not judged for good: the next pass judges them again
			if errors.Is(err, kv.ErrConflict) {
				c.o.Log.Info("group status changed while deciding; deciding again next pass", slog.String("app", ns.Name), slog.String("group", group))
				return nil
			}
			if ctx.Err() != nil {
				return err
			}
			// The dependants decide on what is stored, not on what
			// could not be.
			if had {
				plan.Groups[group] = prev.Value
			} else {
				delete(plan.Groups, group)
			}
			c.noteWrite(ns, group, err)
			continue
		}
		c.noteWrite(ns, group, nil)
		c.an.schedule(ns, cfg, group, next, now)
		for _, ev := range events {
			ev.App = ns.Name
			c.logEvent(ev)
			if err := c.fleet.PublishEvent(ev); err != nil {
				c.o.Log.Warn("publishing event failed", slog.String("app", ns.Name), slog.String("group", group), slog.Any("err", err))
			}
		}
	}
	return c.writeFollowers(ctx, ns, st, plan, ca)
}

// quarantine applies the quarantine rule (rollout.QuarantineFrom) to the
// app's whole inventory: a version it finds is added to the app's
// quarantine list (fleet_plan/quarantine, or <app>.quarantine)
// with compare-and-swap on the revision read, logged, and announced as a
// fleet-wide event (which the audit trail stores). It returns the list the
// groups' steps use. A lost compare-and-swap (an operator changed the list)
// is not an error: this pass uses what it read, the next one decides again.
func (c *Controller) quarantine(ctx context.Context, ns kv.AppNS, e kv.Entry[rollout.QuarantineList], after int, rolledBack []rollout.AgentView, now time.Time) (rollout.QuarantineList, error) {
	found := rollout.QuarantineFrom(rolledBack, after, e.Value, now.UTC())
	if len(found) == 0 {
		return e.Value, nil
	}
	next := e.Value
	var added []rollout.Quarantine
	for _, q := range found {
		l, err := next.Add(q)
		if err != nil {
			c.o.Log.Error("cannot quarantine a version", slog.String("app", ns.Name), slog.String("version", q.Version), slog.String("reason", q.Reason), slog.Any("err", err))
			continue
		}
		next, added = l, append(added, q)
	}
	if len(added) == 0 {
		return e.Value, nil
	}
	qkey := ns.Quarantine()
	if _, err := kv.Save(ctx, c.fleet.Plan, qkey, next, e.Revision); err != nil {
		if errors.Is(err, kv.ErrConflict) {
			c.o.Log.Info("quarantine list changed while deciding; deciding again next pass", slog.String("app", ns.Name))
			return e.Value, nil
		}
		if ctx.Err() != nil {
			return e.Value, err
		}
		// Not stored (credentials minted before the controller could
		// write the list, a full bucket): the groups still halt on what
		// the rule found, and every pass tries again.
		if msg := err.Error(); msg != c.quarantineErr[qkey] {
			if c.quarantineErr == nil {
				c.quarantineErr = map[string]string{}
			}
			c.quarantineErr[qkey] = msg
			c.o.Log.Error("cannot write the quarantine list; groups rolling the version halt anyway, and the write is retried every pass",
				slog.String("app", ns.Name), slog.Any("err", err), slog.String("fix", "if the controller's credentials predate fleet_plan/quarantine: fleetctl auth upgrade, then issue the controller new credentials (fleetctl auth user --name NAME --role controller)"))
		}
		return next, nil
	}
	delete(c.quarantineErr, qkey)
	for _, q := range added {
		c.o.Log.Warn("version quarantined: groups rolling it out halt, and no group offers it to new hosts",
			slog.String("app", ns.Name), slog.String("version", q.Version), slog.Int("agents", q.AgentCount), slog.String("reason", q.Reason))
		ev := rollout.QuarantineEvent(q)
		ev.App = ns.Name
		ev.Agents = rollout.QuarantineAgents(q, rolledBack)
		if err := c.fleet.PublishEvent(ev); err != nil {
			c.o.Log.Warn("publishing event failed", slog.String("version", q.Version), slog.Any("err", err))
		}
	}
	return next, nil
}

// noteWrite logs a failure to write group's status when it is new, and
// that the group's status is written again after one. Only Reconcile
// calls it, from one goroutine.
func (c *Controller) noteWrite(ns kv.AppNS, group string, err error) {
	key := ns.Group(group)
	last, failed := c.writeErrs[key]
	if err == nil {
		if failed {
			delete(c.writeErrs, key)
			c.o.Log.Info("group status written again", slog.String("app", ns.Name), slog.String("group", group))
		}
		return
	}
	if c.writeErrs == nil {
		c.writeErrs = map[string]string{}
	}
	if msg := err.Error(); msg != last {
		c.writeErrs[key] = msg
		c.o.Log.Error("cannot write the group's status; the group does not move until it can, the other groups go on (retried every pass)",
			slog.String("app", ns.Name), slog.String("group", group), slog.Any("err", err))
	}
}

// noteProblems logs each bad value the first time a pass sees it (a new
// revision is a new value), and that it is gone once a pass no longer sees
// it; the plan keys of an app the config does not list are not the
// rollout's, and not logged. Only Reconcile calls it, from one goroutine.
func (c *Controller) noteProblems(problems []kv.Problem) {
	seen := make(map[string]uint64, len(problems))
	apps := c.apps.Load()
	for _, p := range problems {
		if p.Bucket == kv.BucketPlan {
			if _, ours := apps.byKey[kv.ParsePlanKey(p.Key).App]; !ours {
				continue
			}
		}
		where := p.Where()
		seen[where] = p.Revision
		if rev, known := c.badValues[where]; known && rev == p.Revision {
			continue
		}
		attrs := []any{slog.String("key", where), slog.Uint64("revision", p.Revision), slog.String("err", p.Err.Error()), slog.String("fix", p.Fix())}
		pk := kv.ParsePlanKey(p.Key)
		if p.Bucket == kv.BucketPlan {
			app := pk.App
			if app == "" {
				app = "the default app"
			}
			attrs = append(attrs, slog.String("app", app))
		}
		switch {
		case p.Bucket == kv.BucketConfig:
			c.o.Log.Error("rollout stopped: the stored config is not valid; no group of any app moves until it is replaced", attrs...)
		case pk.Kind == kv.KeySpec:
			c.o.Log.Error("rollout stopped: the app's stored plan spec is not valid; none of its groups moves until it is replaced (the other apps go on)", attrs...)
		case pk.Kind == kv.KeyQuarantine:
			c.o.Log.Error("rollout stopped: the app's stored quarantine list is not valid; none of its groups moves until it is replaced (the other apps go on)", attrs...)
		default:
			c.o.Log.Warn("group skipped: its stored status is not valid; it does not move until it is replaced",
				append(attrs, slog.String("group", pk.Group))...)
		}
	}
	for where := range c.badValues {
		if _, still := seen[where]; !still {
			c.o.Log.Info("the bad value was replaced; acting on the key again", slog.String("key", where))
		}
	}
	c.badValues = seen
}

func (c *Controller) logEvent(ev rollout.Event) {
	attrs := []any{slog.String("app", ev.App), slog.String("group", ev.Group), slog.String("kind", string(ev.Kind)), slog.String("reason", ev.Reason)}
	if ev.From != ev.To {
		attrs = append(attrs, slog.String("from", string(ev.From)), slog.String("to", string(ev.To)))
	}
	switch ev.Kind {
	case rollout.EventHalt, rollout.EventAlert:
		c.o.Log.Warn("rollout "+string(ev.Kind), attrs...)
	default:
		c.o.Log.Info("rollout "+string(ev.Kind), attrs...)
	}
}

func sameJSON(a, b rollout.GroupStatus) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}
