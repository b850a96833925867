package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"

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
// pass re-reads and decides again. Nothing is overwritten blind.
func (c *Controller) Reconcile(ctx context.Context) error {
	now := c.o.Clock.Now()
	held, err := c.lease.Campaign(ctx, now)
	if err != nil {
		return err
	}
	if held != c.leader {
		c.leader = held
		if held {
			c.o.Log.Info("leading: this controller now drives the rollout")
		} else {
			c.o.Log.Info("not leading: another controller holds the lease")
		}
	}
	if !held {
		return nil
	}
	st, err := c.fleet.ReadState(ctx)
	if err != nil {
		return err
	}
	if !st.HasSpec {
		return nil // no plan: nothing to roll out
	}
	cfg, spec := st.Config.Value, st.Spec.Value
	plan := st.Plan()
	byGroup := c.agg.ViewsByGroup(now)
	for _, group := range cfg.EvalOrder() {
		views := byGroup[group]
		prev, had := st.Groups[group]
		next, events := rollout.Next(rollout.Input{
			Config:       cfg,
			Group:        group,
			Spec:         spec,
			Prev:         prev.Value,
			Predecessors: plan.Predecessors(cfg, group),
			Counts:       rollout.CountAgents(views),
			Agents:       views,
			Now:          now,
		})
		plan.Groups[group] = next
		if had && sameJSON(prev.Value, next) {
			continue
		}
		if _, err := kv.Save(ctx, c.fleet.Plan, kv.GroupKey(group), next, prev.Revision); err != nil {
			if errors.Is(err, kv.ErrConflict) {
				c.o.Log.Info("group status changed while deciding; deciding again next pass", slog.String("group", group))
				return nil
			}
			return err
		}
		for _, ev := range events {
			c.logEvent(ev)
			if err := c.fleet.PublishEvent(ev); err != nil {
				c.o.Log.Warn("publishing event failed", slog.String("group", group), slog.Any("err", err))
			}
		}
	}
	return nil
}

func (c *Controller) logEvent(ev rollout.Event) {
	attrs := []any{slog.String("group", ev.Group), slog.String("kind", string(ev.Kind)), slog.String("reason", ev.Reason)}
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
