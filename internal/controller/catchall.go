package controller

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The catch-all group (docs/rollout.md, "Catch-all group"): hosts whose
// heartbeats name a group that is not in the config are rolled out with the
// config's catch-all group (rollout.Config.CatchAllGroup). The engine counts
// them in (rollout.Input.Caught); their agents, whose credentials read their
// own group's plan key only, learn what to do from a copy of the catch-all's
// status the leader writes under that key (rollout.FollowStatus, marked
// follows). At most rollout.MaxCaughtGroups groups are followed: one key
// each, written when the catch-all's status changes, never one per host.
// The groups past the bound wait, as every such host did before; they are
// logged once per change, counted by fleetwave_catch_all_unfollowed_groups
// and shown by fleetctl status and the dashboard. A copy whose group no
// longer has a counted host (all expired, or left), or that no group
// follows any more (catch_all "-"), is deleted; agentd drops a deleted
// copy, so its host waits again as before.

// catchAll is one pass's catch-all plan for an app.
type catchAll struct {
	group  string   // the catch-all group; "" for none
	follow []string // the groups followed, sorted
	over   []string // the groups with hosts past the bound, sorted
}

// catchAllPlan works out, for one app's pass, which groups not in cfg the
// catch-all follows: those whose agents count now, the ones already
// followed first (rollout.Config.CatchAllFollow). Group names come from
// heartbeats (validated there, and again by CatchAllFollow before a key is
// named after one).
func (c *Controller) catchAllPlan(app *appInv, st *kv.State, cfg rollout.Config, now time.Time) catchAll {
	group, ok := cfg.CatchAllGroup()
	if !ok {
		c.noteOver(app.ns, nil)
		return catchAll{}
	}
	sizes := app.agg.GroupSizes(func(g string) bool {
		_, configured := cfg.Group(g)
		return !configured
	}, now)
	present := make([]string, 0, len(sizes))
	for g := range sizes {
		present = append(present, g)
	}
	var following []string
	for g, e := range st.Groups {
		if _, configured := cfg.Group(g); !configured && e.Value.Follows != "" {
			following = append(following, g)
		}
	}
	follow, over := cfg.CatchAllFollow(present, following)
	c.noteOver(app.ns, over)
	return catchAll{group: group, follow: follow, over: over}
}

// caught are the agents of the followed groups, as the engine takes them.
func (ca catchAll) caught(app *appInv, now time.Time) []rollout.CaughtGroup {
	out := make([]rollout.CaughtGroup, 0, len(ca.follow))
	for _, g := range ca.follow {
		out = append(out, rollout.CaughtGroup{Group: g, Agents: app.agg.Views(g, now)})
	}
	return out
}

// noteOver logs the groups left out past the bound when they change (not
// every pass). Only Reconcile calls it, from one goroutine.
func (c *Controller) noteOver(ns kv.AppNS, over []string) {
	key := ns.Key()
	last := c.caughtOver[key]
	if slices.Equal(last, over) {
		return
	}
	if c.caughtOver == nil {
		c.caughtOver = map[string][]string{}
	}
	c.caughtOver[key] = over
	if len(over) == 0 {
		if len(last) > 0 {
			c.o.Log.Info("every group not in the config that has hosts follows the catch-all group again", slog.String("app", ns.Name))
		}
		return
	}
	shown := over
	if len(shown) > 10 {
		shown = shown[:10]
	}
	c.o.Log.Warn("hosts of groups not in the config wait: the catch-all group follows at most this many groups",
		slog.String("app", ns.Name), slog.Int("max", rollout.MaxCaughtGroups), slog.Int("groups", len(over)),
		slog.String("first", strings.Join(shown, ",")),
		slog.String("fix", "add the groups to the config (fleetctl config add-group --group G), or enroll the hosts in a configured group (agentd enable --group G)"))
}

// writeFollowers writes, under the key of every group the catch-all
// follows, the copy of the catch-all's status as this pass stored it (or
// as it was stored, when this pass could not write it), and deletes the
// copies no group follows any more. Each write and delete is a
// compare-and-swap on the revision read; one that loses is retried next
// pass, and never stops the others. A key whose stored value is not valid
// is left alone (as the groups' own are). Nothing is written while the
// catch-all has no status.
func (c *Controller) writeFollowers(ctx context.Context, ns kv.AppNS, st *kv.State, plan rollout.Plan, ca catchAll) error {
	followed := make(map[string]bool, len(ca.follow))
	if ca.group != "" {
		if src, ok := plan.Groups[ca.group]; ok && src.V != 0 {
			for _, g := range ca.follow {
				followed[g] = true
				if err := c.writeFollower(ctx, ns, st, src, g); err != nil {
					return err
				}
			}
		} else {
			for _, g := range ca.follow {
				followed[g] = true // kept as it is until the catch-all has a status
			}
		}
	}
	for g, e := range st.Groups {
		if e.Value.Follows == "" || followed[g] {
			continue
		}
		if _, configured := st.Config.Value.Group(g); configured {
			continue // Next makes it the group's own status
		}
		key := ns.Group(g)
		err := c.fleet.Plan.Delete(ctx, key, jetstream.LastRevision(e.Revision))
		switch {
		case err == nil:
			c.o.Log.Info("group not in the config no longer follows the catch-all group; its hosts wait (none counted, or catch_all is \"-\")",
				slog.String("app", ns.Name), slog.String("group", g), slog.String("followed", e.Value.Follows))
		case ctx.Err() != nil:
			return err
		default:
			c.noteWrite(ns, g, err)
		}
	}
	return nil
}

// writeFollower writes the copy of src (the catch-all's status) for group g
// when it differs from what is stored.
func (c *Controller) writeFollower(ctx context.Context, ns kv.AppNS, st *kv.State, src rollout.GroupStatus, g string) error {
	if rollout.ValidateGroupName(g) != nil {
		return nil // not reached: CatchAllFollow names none
	}
	if _, bad := st.Problem(kv.BucketPlan, kv.GroupKey(g)); bad {
		return nil // noteProblems logs it; an operator replaces it
	}
	next := rollout.FollowStatus(src, g)
	if bounded, _, err := next.Bounded(); err == nil {
		next = bounded
	}
	prev, had := st.Groups[g]
	if had && sameJSON(prev.Value, next) {
		c.noteWrite(ns, g, nil)
		return nil
	}
	_, err := kv.Save(ctx, c.fleet.Plan, ns.Group(g), next, prev.Revision)
	switch {
	case err == nil:
		c.noteWrite(ns, g, nil)
		if !had || prev.Value.Follows != src.Group {
			c.o.Log.Info("hosts of a group not in the config follow the catch-all group", slog.String("app", ns.Name),
				slog.String("group", g), slog.String("catch_all", src.Group))
		}
	case errors.Is(err, kv.ErrConflict):
		c.o.Log.Info("status of a group following the catch-all changed while deciding; writing it again next pass",
			slog.String("app", ns.Name), slog.String("group", g))
	case ctx.Err() != nil:
		return err
	default:
		c.noteWrite(ns, g, err)
	}
	return nil
}
