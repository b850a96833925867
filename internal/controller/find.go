package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// PlanMirror keeps an httpfind.Store equal to the fleet_plan bucket, so the
// find endpoint answers from memory and never reads the bucket per request.
// Like an agent, and with no consumer (the controller's account may create
// none): it follows the bucket's republished changes (fleet.plan.>) with a
// core subscription, and reads every key again (one batched direct get) at
// start, after a reconnect and every Refresh, so a change missed while
// disconnected is caught up. The revision decides which of two values of a
// key is newer.
//
// It mirrors every app's plan (DESIGN §9): Store is the default app's (the
// unprefixed keys), and each other app's keys (<app>.spec, <app>.group.<g>,
// <app>.quarantine) go to a store of its own; FindApp picks the one a find
// request names.
//
// It also reads the rollout config's group names (fleet_config/config, one
// direct get) with every full read and every ConfigRefresh, so that find
// answers a group the config does not name with 404 instead of "no update".
// The controller may not subscribe to the config bucket, hence the polling.
type PlanMirror struct {
	NC    *nats.Conn
	Store *httpfind.Store
	Log   *slog.Logger
	// Refresh is how often the whole bucket is read again behind the
	// changes. Default DefaultPlanRefresh.
	Refresh time.Duration
	// ConfigRefresh is how often the config's groups are read again: the
	// longest a newly added group is answered 404. Default
	// DefaultConfigRefresh.
	ConfigRefresh time.Duration
	// Clock paces the re-reads. Default the real one.
	Clock clock.Clock

	loaded atomic.Bool
	config atomic.Pointer[rollout.Config] // the last good config read (metrics)
	mu     sync.Mutex
	revs   map[string]uint64 // per key, the revision taken (or skipped)

	// quarantine is the last good fleet_plan/quarantine taken (metrics);
	// nil when there is none.
	quarantine atomic.Pointer[rollout.QuarantineList]
	// apps are the other apps' plans, by app name; replaced, never
	// changed, under mu, so that a find request reads it without a lock.
	apps atomic.Pointer[map[string]*appPlan]
	// tooMany: an app's key was skipped because maxMirroredApps apps are
	// mirrored already (logged once).
	tooMany bool

	// Only Run's goroutine uses these.
	badConfigRev uint64 // revision of the bad config last logged
	configErr    string // last failure to read the config, logged once
}

// appPlan is the mirror of one app's plan other than the default app's.
type appPlan struct {
	store      *httpfind.Store
	quarantine atomic.Pointer[rollout.QuarantineList]
}

// maxMirroredApps bounds the apps whose keys the mirror holds: the apps of
// any config (rollout.MaxApps), with room for apps removed from it whose
// keys are still in the bucket. A key of one more app is skipped.
const maxMirroredApps = 4 * rollout.MaxApps

// appPlanOf is the mirror of the app with key token app ("" the default
// app: nil), created when create is set (with m.mu held) and nil when it
// is not mirrored.
func (m *PlanMirror) appPlanOf(app string, create bool) *appPlan {
	var cur map[string]*appPlan
	if p := m.apps.Load(); p != nil {
		cur = *p
	}
	if a, ok := cur[app]; ok || !create {
		return a
	}
	if len(cur) >= maxMirroredApps {
		if !m.tooMany {
			m.tooMany = true
			m.Log.Warn("find: the plan bucket holds keys of more apps than any config may list; the keys of the others are skipped",
				slog.Int("mirrored", len(cur)), slog.String("app", app))
		}
		return nil
	}
	a := &appPlan{store: &httpfind.Store{}}
	if cfg := m.config.Load(); cfg != nil {
		a.store.SetConfigured(groupNames(*cfg))
	}
	next := make(map[string]*appPlan, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[app] = a
	m.apps.Store(&next)
	return a
}

// FindApp is httpfind.Handler.Apps: the store of the named app ("" and the
// default app's name: Store), or the config's apps when it lists no such
// app.
func (m *PlanMirror) FindApp(app string) (*httpfind.Store, []string, bool) {
	cfg := m.config.Load()
	if cfg == nil {
		// No config read yet (find is not ready then): the default app
		// alone is known.
		return m.Store, nil, app == ""
	}
	a, ok := cfg.App(app)
	if !ok {
		return nil, cfg.AppNames(), false
	}
	if cfg.IsDefaultApp(a.Name) {
		return m.Store, cfg.AppNames(), true
	}
	if p := m.appPlanOf(a.Name, false); p != nil {
		return p.store, cfg.AppNames(), true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.appPlanOf(a.Name, true); p != nil {
		return p.store, cfg.AppNames(), true
	}
	return nil, cfg.AppNames(), false
}

// AppPlan is the mirrored plan and quarantine list of the app with key
// token app ("" the default app): what the metrics read. plan is nil when
// nothing of the app was read.
func (m *PlanMirror) AppPlan(app string) (plan *httpfind.Plan, quarantine *rollout.QuarantineList) {
	if app == "" {
		return m.Store.Get(), m.quarantine.Load()
	}
	a := m.appPlanOf(app, false)
	if a == nil {
		return nil, nil
	}
	return a.store.Get(), a.quarantine.Load()
}

// Config is the last good config read, nil before one.
func (m *PlanMirror) Config() *rollout.Config { return m.config.Load() }

func groupNames(cfg rollout.Config) []string {
	names := make([]string, len(cfg.Groups))
	for i, g := range cfg.Groups {
		names[i] = g.Name
	}
	return names
}

// Defaults of PlanMirror.
const (
	DefaultPlanRefresh   = 3 * time.Minute
	DefaultConfigRefresh = 5 * time.Second
)

// Ready is nil once the whole bucket has been read and while the bus is
// connected: a controller cut off from the bus must not answer from a plan
// that may have moved on.
func (m *PlanMirror) Ready() error {
	switch {
	case !m.loaded.Load():
		return errors.New("plan not loaded yet")
	case m.NC != nil && !m.NC.IsConnected():
		return errors.New("not connected to NATS")
	}
	return nil
}

// Run follows the bucket until ctx ends.
func (m *PlanMirror) Run(ctx context.Context) error {
	refresh, configRefresh, clk := m.Refresh, m.ConfigRefresh, m.Clock
	if refresh <= 0 {
		refresh = DefaultPlanRefresh
	}
	if configRefresh <= 0 {
		configRefresh = DefaultConfigRefresh
	}
	if clk == nil {
		clk = clock.Real{}
	}
	sub, err := m.NC.Subscribe(kv.PlanRepublish+">", m.onMessage)
	if err != nil {
		return fmt.Errorf("follow %s: %w", kv.BucketPlan, err)
	}
	defer sub.Unsubscribe()
	// Reconnects are seen by polling the connection's count, often enough
	// that a reconnected controller catches up within a second.
	poll := clk.NewTimer(time.Second)
	defer poll.Stop()
	var readAt, configAt time.Time
	reconnects := m.NC.Stats().Reconnects
	for {
		if n := m.NC.Stats().Reconnects; !m.loaded.Load() || n != reconnects || clk.Now().Sub(readAt) >= refresh {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := m.reload(rctx)
			if err == nil {
				err = m.readConfig(rctx)
			}
			cancel()
			if err == nil {
				reconnects, readAt, configAt = n, clk.Now(), clk.Now()
				if !m.loaded.Swap(true) {
					m.Log.Info("find endpoint has the plan")
				}
			} else if ctx.Err() == nil {
				m.Log.Warn("find: reading the plan failed; retrying", slog.Any("err", err))
			}
		} else if clk.Now().Sub(configAt) >= configRefresh {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := m.readConfig(rctx)
			cancel()
			switch {
			case err == nil:
				configAt, m.configErr = clk.Now(), ""
			case ctx.Err() == nil && err.Error() != m.configErr:
				m.configErr = err.Error()
				m.Log.Warn("find: reading the config's groups failed; retrying", slog.Any("err", err))
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-poll.C():
			poll.Reset(time.Second)
		}
	}
}

// reload reads every key and drops from the store what the bucket no
// longer holds.
func (m *PlanMirror) reload(ctx context.Context) error {
	seen := map[string]bool{}
	err := kv.ReadLatest(ctx, m.NC, kv.BucketPlan, func(key string, sm kv.StoredMsg) error {
		seen[key] = true
		m.take(key, sm)
		return nil
	})
	if err != nil {
		return err
	}
	p := m.Store.Get()
	if p.HasSpec && !seen[kv.KeySpec] {
		m.Store.DeleteSpec()
	}
	for name := range p.Groups {
		if !seen[kv.GroupKey(name)] {
			m.Store.DeleteGroup(name)
		}
	}
	if !seen[kv.KeyQuarantine] {
		m.quarantine.Store(nil)
	}
	if p := m.apps.Load(); p != nil {
		for app, a := range *p {
			ns := kv.OtherNS(app)
			ap := a.store.Get()
			if ap.HasSpec && !seen[ns.Spec()] {
				a.store.DeleteSpec()
			}
			for name := range ap.Groups {
				if !seen[ns.Group(name)] {
					a.store.DeleteGroup(name)
				}
			}
			if !seen[ns.Quarantine()] {
				a.quarantine.Store(nil)
			}
		}
	}
	return nil
}

// readConfig puts the config's group names in the store: the default
// config's when none was written. A stored config that is not valid is
// logged once and its groups are not taken (find keeps the last good ones,
// or checks no group when it never had any); only a failure of the bus is
// an error.
func (m *PlanMirror) readConfig(ctx context.Context) error {
	e, err := kv.GetLast(ctx, m.NC, kv.BucketConfig, kv.KeyConfig, kv.DecodeConfig)
	var p *kv.Problem
	switch {
	case errors.Is(err, kv.ErrNotFound):
		e.Value = rollout.DefaultConfig()
	case errors.As(err, &p):
		if p.Revision != m.badConfigRev {
			m.badConfigRev = p.Revision
			m.Log.Warn("find keeps the groups of the last good config: the stored config is not valid",
				slog.String("key", p.Where()), slog.Uint64("revision", p.Revision), slog.String("err", p.Err.Error()), slog.String("fix", p.Fix()))
		}
		return nil
	case err != nil:
		return err
	}
	cfg := e.Value
	m.config.Store(&cfg)
	names := groupNames(cfg)
	if !slices.Equal(names, m.Store.Get().Configured) {
		m.Store.SetConfigured(names)
		m.Log.Info("find answers the config's groups; others get 404", slog.Any("groups", names), slog.Any("apps", cfg.AppNames()))
	}
	if p := m.apps.Load(); p != nil {
		for _, a := range *p {
			if !slices.Equal(names, a.store.Get().Configured) {
				a.store.SetConfigured(names)
			}
		}
	}
	return nil
}

func (m *PlanMirror) onMessage(msg *nats.Msg) {
	sm, err := kv.ParseStored(msg.Header, msg.Data)
	if err != nil || sm.Stream != kv.PlanStream {
		return // not the bucket's republish: nothing to take
	}
	if key, ok := kv.KeyOfSubject(kv.BucketPlan, sm.Subject); ok {
		m.take(key, sm)
	}
}

// take applies one stored value of key if it is newer than what was taken:
// the spec and the group statuses for find, the quarantine list for the
// metrics, each into its app's mirror (kv.ParsePlanKey). A value that is
// not what its key should hold (foreign, kv.DecodeSpec,
// kv.DecodeGroupStatus, kv.DecodeQuarantine: undecodable, invalid, a
// JetStream response, another group's status) is logged once and skipped:
// find keeps answering from the last good value of that key, as agents keep
// theirs.
func (m *PlanMirror) take(key string, sm kv.StoredMsg) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revs == nil {
		m.revs = map[string]uint64{}
	}
	if sm.Sequence <= m.revs[key] {
		return
	}
	pk := kv.ParsePlanKey(key)
	if pk.Kind == "" {
		m.revs[key] = sm.Sequence
		return
	}
	store, quarantine := m.Store, &m.quarantine
	if pk.App != "" {
		a := m.appPlanOf(pk.App, true)
		if a == nil {
			return // not taken: taken once the app is mirrored
		}
		store, quarantine = a.store, &a.quarantine
	}
	m.revs[key] = sm.Sequence
	skip := func(err error) {
		p := &kv.Problem{Bucket: kv.BucketPlan, Key: key, Revision: sm.Sequence, Err: err}
		m.Log.Warn("find skips a stored value that is not valid and keeps the last good one",
			slog.String("key", p.Where()), slog.Uint64("revision", p.Revision), slog.String("err", err.Error()), slog.String("fix", p.Fix()))
	}
	switch {
	case pk.Kind == kv.KeyQuarantine && sm.Deleted:
		quarantine.Store(nil)
	case pk.Kind == kv.KeyQuarantine && sm.Foreign:
		skip(kv.ErrForeign)
	case pk.Kind == kv.KeyQuarantine:
		q, err := kv.DecodeQuarantine(sm.Data)
		if err != nil {
			skip(err)
			return
		}
		quarantine.Store(&q)
	case sm.Deleted && pk.Kind == kv.KeySpec:
		store.DeleteSpec()
	case sm.Deleted:
		store.DeleteGroup(pk.Group)
	case sm.Foreign:
		skip(kv.ErrForeign)
	case pk.Kind == kv.KeySpec:
		s, err := kv.DecodeSpec(sm.Data)
		if err != nil {
			skip(err)
			return
		}
		store.SetSpec(s)
	default:
		st, err := kv.DecodeGroupStatus(key, sm.Data)
		if err != nil {
			skip(err)
			return
		}
		store.SetGroup(pk.Group, st)
	}
}
