package controller

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Label selectors (issue 28, point 8): agents decide their group from their
// labels, and cannot read fleet_config. The leader publishes each app's
// groups in config order with their selectors on the app's groups key
// (kv.AppNS.Groups), a plan key agents may read; agentd takes the first
// group whose selector matches its labels (rollout.GroupList.Member).
//
// The key is written only when it would change: at the first pass of a
// leader (read, compared), then when the config changes. A fleet none of
// whose groups has a selector never gets the key (nothing changes for it);
// once it had one, the key stays and lists the groups without selectors,
// so agents go back to the groups they were given.

// groupsRetry is how long the leader waits before it tries a failed write
// of a groups key again: a write the controller's credentials do not allow
// shows as a timeout, which must not slow every pass.
const groupsRetry = time.Minute

// groupsPub is what the leader knows of one app's groups key.
type groupsPub struct {
	list     rollout.GroupList // as stored (known: true)
	known    bool
	absent   bool      // the key does not exist
	failedAt time.Time // of the last failed read or write
	lastErr  string
}

// publishGroups writes ns's groups key from cfg (the app's view of the
// config) when it differs from what is stored.
func (c *Controller) publishGroups(ctx context.Context, ns kv.AppNS, cfg rollout.Config, now time.Time) {
	want := rollout.GroupListOf(cfg)
	key := ns.Groups()
	if c.groupsPubs == nil {
		c.groupsPubs = map[string]*groupsPub{}
	}
	p := c.groupsPubs[key]
	if p == nil {
		p = &groupsPub{}
		c.groupsPubs[key] = p
	}
	switch {
	case p.known && p.absent && !want.HasSelectors():
		return
	case p.known && !p.absent && p.list.Equal(want):
		return
	case !p.failedAt.IsZero() && now.Sub(p.failedAt) < groupsRetry:
		return
	}
	fail := func(what string, err error) {
		p.known, p.failedAt = false, now
		if msg := err.Error(); msg != p.lastErr {
			p.lastErr = msg
			c.o.Log.Error("cannot "+what+" the groups key agents choose their group from by their labels; retrying every minute",
				slog.String("app", ns.Name), slog.String("key", key), slog.Any("err", err),
				slog.String("fix", "if the controller's credentials predate label selectors: fleetctl auth upgrade, then issue the controller new credentials (fleetctl auth user --name NAME --role controller)"))
		}
	}
	cur, err := kv.GetLast(ctx, c.fleet.JS.Conn(), kv.BucketPlan, key, rollout.DecodeGroupList)
	var prob *kv.Problem
	switch {
	case errors.Is(err, kv.ErrNotFound):
		cur = kv.Entry[rollout.GroupList]{}
		p.absent = true
	case errors.As(err, &prob):
		p.absent = false // a bad value: replaced, with compare-and-swap on its revision
	case err != nil:
		fail("read", err)
		return
	default:
		p.absent = false
	}
	if p.absent && !want.HasSelectors() {
		p.known, p.failedAt, p.lastErr = true, time.Time{}, ""
		return
	}
	if !p.absent && prob == nil && cur.Value.Equal(want) {
		p.known, p.list, p.failedAt, p.lastErr = true, cur.Value, time.Time{}, ""
		return
	}
	if _, err := kv.Save(ctx, c.fleet.Plan, key, want, cur.Revision); err != nil {
		if errors.Is(err, kv.ErrConflict) {
			p.known = false // read again next pass
			return
		}
		fail("write", err)
		return
	}
	p.known, p.absent, p.list, p.failedAt, p.lastErr = true, false, want, time.Time{}, ""
	c.o.Log.Info("published the groups and their selectors for agents", slog.String("app", ns.Name), slog.String("key", key),
		slog.Int("groups", len(want.Groups)), slog.Bool("selectors", want.HasSelectors()))
}
