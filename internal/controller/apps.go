package controller

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Apps (DESIGN §9). The controller drives every app of the config at once:
// each app has its own inventory (one heartbeat.Aggregator per app, fed by
// the app's heartbeats), its own counts in fleet_stats, and its own pass of
// the rollout loop over its own plan (kv.State.AppView), so that one app's
// halt, bad value or failed write stops that app alone.
//
// Why one Aggregator per app rather than one keyed by app: the hot paths
// (ingest, a group's views, the counts, a scrape) stay exactly what they
// were for one app, each app's passes lock and read only its own agents,
// and an entry stays 80 bytes; a host that runs three apps costs three
// entries (its id and host name are held once per app, tens of bytes), the
// same as one inventory holding three (app, agent) rows would.
//
// Only the apps the config lists have an inventory. A heartbeat of any
// other app is rejected (reason unknown_app), so that no peer can make the
// controller hold an inventory per name it makes up; when the config gains
// an app, the controller reads the heartbeat stream again, so that the
// hosts that heartbeated for it before it was added are counted at once.

// appInv is one configured app: its namespace and its inventory.
type appInv struct {
	ns  kv.AppNS
	agg *heartbeat.Aggregator
}

// appSet is the apps of the last good config read, the default app first.
// It is replaced, never changed.
type appSet struct {
	list  []*appInv
	byKey map[string]*appInv // by kv.AppNS.Key ("" the default app)
}

func (s *appSet) byName(name string) *appInv {
	for _, a := range s.list {
		if a.ns.Name == name {
			return a
		}
	}
	return nil
}

// names are the apps' names, the default app first.
func (s *appSet) names() []string {
	out := make([]string, len(s.list))
	for i, a := range s.list {
		out[i] = a.ns.Name
	}
	return out
}

// appsOf is the set of cfg's apps, keeping the inventories of cur's that
// stay (the default app's always: its heartbeats carry no app name, so its
// inventory is the same whatever the app is named). added reports an app
// that cur did not have.
func (c *Controller) appsOf(cur *appSet, cfg rollout.Config) (next *appSet, added bool) {
	next = &appSet{byKey: map[string]*appInv{}}
	for _, a := range cfg.AppList() {
		ns, err := kv.NS(cfg, a.Name)
		if err != nil {
			continue // not reached: a.Name is one of cfg's
		}
		inv := &appInv{ns: ns}
		if ns.IsDefault() {
			inv.agg = c.agg
		} else if old, ok := cur.byKey[ns.Key()]; ok {
			inv.agg = old.agg
		} else {
			inv.agg = heartbeat.NewAppAggregator(ns.Key(), c.o.HeartbeatInterval, c.o.AgentExpiry)
			added = true
		}
		next.list = append(next.list, inv)
		next.byKey[ns.Key()] = inv
	}
	return next, added
}

// setApps takes cfg's apps. A new app makes the inventory be read again
// (at the next stats tick at the latest: rescan), so that its hosts'
// heartbeats rejected before it was configured are taken.
func (c *Controller) setApps(cfg rollout.Config) {
	c.appsMu.Lock()
	defer c.appsMu.Unlock()
	cur := c.apps.Load()
	if slices.Equal(cur.names(), cfg.AppNames()) {
		return
	}
	next, added := c.appsOf(cur, cfg)
	c.apps.Store(next)
	c.o.Log.Info("apps of the config", slog.Any("apps", next.names()))
	if added {
		c.rescanWanted.Store(true)
		select {
		case c.appsChanged <- struct{}{}:
		default:
		}
	}
}

// refreshApps reads the config and takes its apps. A config that is not
// valid keeps the apps of the last good one; only the bus's failure is an
// error.
func (c *Controller) refreshApps(ctx context.Context) error {
	e, _, err := c.fleet.ReadConfig(ctx)
	var p *kv.Problem
	switch {
	case errors.As(err, &p):
		return nil // the rollout pass logs it
	case err != nil:
		return err
	}
	c.setApps(e.Value)
	return nil
}

// AppInventory is the live inventory of the named app ("" the default
// app), or nil when the config does not list it.
func (c *Controller) AppInventory(app string) *heartbeat.Aggregator {
	s := c.apps.Load()
	if app == "" {
		return s.list[0].agg
	}
	if a := s.byName(app); a != nil {
		return a.agg
	}
	return nil
}

// Apps are the names of the apps the controller drives, the default app
// first.
func (c *Controller) Apps() []string { return c.apps.Load().names() }
