package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Options configure a controller.
type Options struct {
	// ID names this controller in fleet_stats keys. Two controllers must
	// not share one.
	ID string
	// StatsInterval is how often counts are written to fleet_stats.
	StatsInterval time.Duration
	// HeartbeatInterval is the agents' heartbeat interval: an agent counts
	// once known for this long.
	HeartbeatInterval time.Duration
	// AgentExpiry drops agents not heard from for this long.
	AgentExpiry time.Duration
	// ReconcileInterval is how often the rollout loop runs.
	ReconcileInterval time.Duration
	// LeaseTTL is how long leadership outlives a silent leader; it must be
	// longer than ReconcileInterval, which renews it.
	LeaseTTL time.Duration
	// Notify lists the webhooks the leader POSTs rollout events to
	// (webhook.go); none: no POST.
	Notify Notify
	// AttributionGrace is how long a revision of the plan spec or the
	// config may wait for its audit record before the leader raises it as
	// an unattributed change (attribution.go). Default
	// DefaultAttributionGrace.
	AttributionGrace time.Duration
	// Releases is the release repository the leader reads into
	// fleet_stats/releases (releases.go); nil: none (--release-repo not
	// given), and no release metrics.
	Releases *ReleaseRepo
	Clock    clock.Clock
	Log      *slog.Logger
}

// Defaults.
const (
	DefaultStatsInterval     = 10 * time.Second
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultReconcileInterval = 10 * time.Second
	DefaultLeaseTTL          = 30 * time.Second
)

// Controller aggregates heartbeats and publishes counts.
type Controller struct {
	fleet *kv.Fleet
	o     Options
	// agg is the default app's inventory (apps.go): the one Inventory
	// returns, kept whatever the default app is named.
	agg *heartbeat.Aggregator
	// apps are the apps of the last good config read, each with its
	// inventory (apps.go); appsMu serialises their replacement.
	apps   atomic.Pointer[appSet]
	appsMu sync.Mutex
	// rescanWanted: an app was added, so the heartbeat stream is read
	// again (its hosts' heartbeats were rejected until then);
	// appsChanged wakes Run for it.
	rescanWanted atomic.Bool
	appsChanged  chan struct{}

	ready     chan struct{}
	readyOnce sync.Once

	received atomic.Uint64
	rejected atomic.Uint64
	lastWarn atomic.Int64 // unix nanos of the last bad-heartbeat log line

	statsRev map[string]statsWritten // fleet_stats key → our last write there
	views    []rollout.AgentView     // the rollout pass's views of one group, reused (reconcile only)

	lease   *kv.Lease
	leader  bool        // last Campaign won (for logging changes only)
	leading atomic.Bool // the same, for the metrics

	m      *metrics
	wm     *webhookMetrics            // nil without webhooks
	mirror atomic.Pointer[PlanMirror] // the plan the group metrics read
	an     *analyzer                  // metric analysis queries (analysis.go)
	attr   *attribution               // the unattributed-change check (attribution.go)
	// releases reads the release repository (releases.go); nil without
	// one. catalog is the release catalog as last read (nil: none yet).
	releases *releaseLoop
	catalog  atomic.Pointer[kv.ReleaseCatalog]

	// badValues maps bucket/key of each stored value the last rollout pass
	// skipped to its revision, so that each is logged once, not every pass.
	badValues map[string]uint64
	// quarantineErr is, per app (its quarantine key), the last failure
	// to write its quarantine list, logged once, not every pass.
	quarantineErr map[string]string
	// groupsPubs is, per groups key, what the leader knows of it
	// (groups.go; reconcile only).
	groupsPubs map[string]*groupsPub
	// writeErrs is, per group status key, the last failure to write it,
	// logged once, not every pass (reconcile only).
	writeErrs map[string]string

	// Issue 28, adaptive in flight: the heartbeat lag (lag.go); feed is
	// the running inventory feed (nil outside Run).
	lag  lagMeter
	feed atomic.Pointer[inventoryFeed]
	// caughtOver is, per app (its key), the groups not in the config
	// with hosts that the catch-all group does not follow (past
	// rollout.MaxCaughtGroups), as last logged (reconcile only).
	caughtOver map[string][]string
}

// New returns a controller over fleet. Zero options take their defaults.
func New(fleet *kv.Fleet, o Options) (*Controller, error) {
	if o.ID == "" {
		return nil, errors.New("controller: an id is required")
	}
	if o.StatsInterval == 0 {
		o.StatsInterval = DefaultStatsInterval
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.AgentExpiry == 0 {
		o.AgentExpiry = kv.DefaultAgentExpiry
	}
	if o.ReconcileInterval == 0 {
		o.ReconcileInterval = DefaultReconcileInterval
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = max(DefaultLeaseTTL, 3*o.ReconcileInterval)
	}
	if o.LeaseTTL <= o.ReconcileInterval {
		return nil, fmt.Errorf("controller: lease TTL %v must be longer than the reconcile interval %v", o.LeaseTTL, o.ReconcileInterval)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.AttributionGrace <= 0 {
		o.AttributionGrace = DefaultAttributionGrace
	}
	if err := o.Notify.validate(); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	o.Notify = o.Notify.withDefaults()
	c := &Controller{
		lease:    &kv.Lease{Bucket: fleet.Stats, JS: fleet.JS, Key: kv.KeyLeader, Holder: o.ID, TTL: o.LeaseTTL},
		fleet:    fleet,
		o:        o,
		agg:      heartbeat.NewAggregator(o.HeartbeatInterval, o.AgentExpiry),
		ready:    make(chan struct{}),
		statsRev: make(map[string]statsWritten),

		appsChanged: make(chan struct{}, 1),
	}
	apps, _ := c.appsOf(&appSet{}, rollout.DefaultConfig())
	c.apps.Store(apps)
	if o.Releases != nil {
		l, err := newReleaseLoop(c, *o.Releases)
		if err != nil {
			return nil, fmt.Errorf("controller: %w", err)
		}
		c.releases = l
	}
	c.m = newMetrics(c)
	if len(o.Notify.Webhooks) > 0 {
		c.wm = newWebhookMetrics(c.m.reg, o.Notify.Webhooks)
	}
	c.an = newAnalyzer(c)
	c.attr = newAttribution(c)
	return c, nil
}

// Ready is closed once the inventory holds every agent that was in the
// stream when the controller started.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Inventory is the controller's live inventory of the default app
// (AppInventory("")).
func (c *Controller) Inventory() *heartbeat.Aggregator { return c.agg }

// Counters reports heartbeats received and rejected since start.
func (c *Controller) Counters() (received, rejected uint64) {
	return c.received.Load(), c.rejected.Load()
}

// Run follows the heartbeat stream and writes stats until ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	feed := &inventoryFeed{nc: c.fleet.JS.Conn(), c: c}
	if err := feed.start(); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	defer feed.stop()
	c.feed.Store(feed)
	defer c.feed.Store(nil)
	c.an.start(ctx)
	defer c.an.stop()
	// The apps first: the scan takes the heartbeats of configured apps.
	if err := c.refreshApps(ctx); err != nil && ctx.Err() == nil {
		c.o.Log.Warn("reading the config's apps failed; the default app's inventory is read, the others' once the config is read", slog.Any("err", err))
	}
	c.rescanWanted.Store(false) // the scan below reads them
	// Counts are written only once the inventory is recovered: a partial
	// count after a restart would look like agents vanishing.
	if err := feed.scan(ctx, true); err != nil {
		return fmt.Errorf("controller: read the inventory: %w", err)
	}
	c.markReady()
	c.o.Log.Info("inventory recovered from the stream", slog.Int("agents", c.agg.Len()))

	defer func() {
		// Hand leadership over at once instead of after the TTL.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := c.lease.Release(rctx); err != nil {
			c.o.Log.Warn("releasing the leader lease failed; another controller takes over after its TTL", slog.Any("err", err))
		}
	}()
	if len(c.o.Notify.Webhooks) > 0 {
		// The webhook senders run beside the rollout loop, never in it, and
		// stop before the lease is released (deferred above), so that
		// the next leader does not start while this one still sends.
		wctx, stopWebhooks := context.WithCancel(ctx)
		webhooksDone := make(chan struct{})
		go func() {
			defer close(webhooksDone)
			c.runWebhooks(wctx)
		}()
		defer func() {
			stopWebhooks()
			<-webhooksDone
		}()
	}

	if c.releases != nil {
		// Beside the rollout loop, as the webhooks: a slow repository
		// never delays a pass.
		rctx, stopReleases := context.WithCancel(ctx)
		releasesDone := make(chan struct{})
		go func() {
			defer close(releasesDone)
			c.releases.run(rctx)
		}()
		defer func() {
			stopReleases()
			<-releasesDone
		}()
	}

	stats := c.o.Clock.NewTimer(c.o.StatsInterval)
	defer stats.Stop()
	reconcile := c.o.Clock.NewTimer(0)
	defer reconcile.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-feed.staleCh:
			pctx, cancel := c.passContext(ctx)
			feed.rescan(pctx)
			cancel()
		case <-c.appsChanged:
			pctx, cancel := c.passContext(ctx)
			feed.rescan(pctx)
			cancel()
		case <-stats.C():
			pctx, cancel := c.passContext(ctx)
			if err := c.refreshApps(pctx); err != nil && ctx.Err() == nil {
				c.o.Log.Warn("reading the config's apps failed; retrying next interval", slog.Any("err", err))
			}
			feed.rescan(pctx)
			start := time.Now()
			err := c.WriteStats(pctx)
			c.m.statsWrite.Observe(time.Since(start).Seconds())
			if err != nil && ctx.Err() == nil {
				c.o.Log.Warn("writing stats failed; retrying next interval", slog.Any("err", err))
			}
			cancel()
			stats.Reset(c.o.StatsInterval)
		case <-reconcile.C():
			pctx, cancel := c.passContext(ctx)
			start := time.Now()
			err := c.Reconcile(pctx)
			c.m.rolloutPass.Observe(time.Since(start).Seconds())
			if err != nil && ctx.Err() == nil {
				c.o.Log.Warn("rollout pass failed; retrying next interval", slog.Any("err", err))
			}
			cancel()
			reconcile.Reset(c.o.ReconcileInterval)
		}
	}
}

// passTimeout bounds one stats write or rollout pass. A JetStream request
// can go unanswered (a cluster electing a new leader drops it), and a pass
// waiting forever would stop the rollout for good; a bounded one fails, is
// logged, and the next pass starts afresh.
func (c *Controller) passTimeout() time.Duration {
	return max(2*c.o.ReconcileInterval, 10*time.Second)
}

// passContext is the context of one pass: bounded by passTimeout, and not
// cancelled when the controller is told to stop. A pass that has written a
// group status must also publish its events; cut off between the two, the
// transition would be stored but never announced (and a write whose ack was
// cut off would be reported as failed although it landed). Stopping waits
// for the pass instead.
func (c *Controller) passContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.passTimeout())
}

func (c *Controller) markReady() { c.readyOnce.Do(func() { close(c.ready) }) }

// reject counts a bad heartbeat and logs it, at most one line every 10s so
// that a misbehaving agent cannot flood the log.
func (c *Controller) reject(subject, reason string, err error) {
	n := c.rejected.Add(1)
	c.m.rejected.WithLabelValues(reason).Inc()
	now := c.o.Clock.Now().UnixNano()
	last := c.lastWarn.Load()
	if now-last < int64(10*time.Second) && last != 0 {
		return
	}
	if c.lastWarn.CompareAndSwap(last, now) {
		c.o.Log.Warn("rejected heartbeat", slog.String("subject", subject), slog.Any("err", err), slog.Uint64("rejected_total", n))
	}
}

// statsWritten is one fleet_stats entry this controller wrote: its
// revision, and whose count it is.
type statsWritten struct {
	rev   uint64
	app   string // the app's name
	group string
}

// WriteStats expires silent agents and writes, for every app, one
// fleet_stats entry per group with established agents (the app's key:
// kv.AppNS.Stats); a group that has none left, or of an app no longer
// configured, loses its entry.
func (c *Controller) WriteStats(ctx context.Context) error {
	now := c.o.Clock.Now()
	var errs []error
	written := make(map[string]bool, len(c.statsRev))
	for _, app := range c.apps.Load().list {
		if n := app.agg.Expire(now); n > 0 {
			c.o.Log.Info("agents expired", slog.String("app", app.ns.Name), slog.Int("count", n))
		}
		counts, sites := app.agg.CountsWithSites(now)
		for group, vc := range counts {
			key := app.ns.Stats(group, c.o.ID)
			written[key] = true
			s := kv.Stats{V: 1, ControllerID: c.o.ID, Group: group, At: now.UTC(), Agents: vc.Total(), Versions: vc, Sites: sites[group], App: app.ns.Key()}
			if err := c.saveStats(ctx, key, app.ns.Name, s); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for key, w := range c.statsRev {
		if written[key] {
			continue
		}
		err := c.fleet.Stats.Delete(ctx, key, jetstream.LastRevision(w.rev))
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			errs = append(errs, fmt.Errorf("delete %s/%s: %w", kv.BucketStats, key, err))
			continue
		}
		delete(c.statsRev, key)
		c.o.Log.Info("group has no agents left", slog.String("app", w.app), slog.String("group", w.group))
	}
	return errors.Join(errs...)
}

func (c *Controller) saveStats(ctx context.Context, key, app string, s kv.Stats) error {
	w, known := c.statsRev[key]
	rev := w.rev
	if !known {
		c.o.Log.Info("counting group", slog.String("app", app), slog.String("group", s.Group), slog.Int("agents", s.Agents))
		// First write of this process: take over whatever an earlier run
		// with the same id left.
		// The stream's own sequence: a foreign message's headers would
		// forge the revision jetstream's Get reports.
		cur, err := kv.DirectGetLast(ctx, c.fleet.JS.Conn(), kv.StreamOf(kv.BucketStats), kv.KeySubject(kv.BucketStats, key))
		if err == nil && !cur.Deleted {
			rev = cur.Sequence
		}
	}
	next, err := kv.Save(ctx, c.fleet.Stats, key, s, rev)
	if errors.Is(err, kv.ErrConflict) {
		// Someone else writes our key: two controllers share an id.
		delete(c.statsRev, key)
		return fmt.Errorf("%w (is another controller running with --id %q?)", err, c.o.ID)
	}
	if err != nil {
		return err
	}
	c.statsRev[key] = statsWritten{rev: next, app: app, group: s.Group}
	return nil
}
