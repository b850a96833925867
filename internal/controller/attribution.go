package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The leader checks that every revision of the plan spec and the config has
// fleetctl's audit record (kv.AttributedKeys; pkg/kv/attribution.go): once a
// revision is AttributionGrace old by the controller's clock (fleetctl
// publishes the record right after the write), a revision that no record
// names is an unattributed change: an event on fleet.events._fleet (the
// timeline, fleetctl history and watch, webhooks), a warning in the log,
// fleetwave_unattributed_changes_total{key} counted and, while the key's
// newest revision is one, fleetwave_unattributed_change{key} at 1 (the alert
// FleetwaveUnattributedChange). The rollout follows the value all the same:
// refusing it would let anyone who can write a stray revision stop the
// fleet; a human decides.
//
// With apps (DESIGN §9) every app's plan spec is checked too: the default
// app's is fleet_plan/spec, each other configured app's <app>.spec (its
// key label, and its event's app, name it).
//
// Revisions stored before the audit trail reaches (kv.Fleet.AuditReach: the
// stream is younger, or its oldest records have aged out) are passed
// without a word: their records may have existed. What was checked is kept
// on the bus (kv.AttributionState), so a restart or a new leader raises no
// second alarm for one write and misses nothing written while no
// controller led.

// DefaultAttributionGrace is how long a revision may wait for its audit
// record.
const DefaultAttributionGrace = 30 * time.Second

// attribution is the leader's check. Only Reconcile uses it, from one
// goroutine.
type attribution struct {
	c *Controller

	loaded bool
	state  kv.AttributionState
	rev    uint64 // of the state in fleet_stats
	dirty  bool

	lastErr string // logged once

	changes *prometheus.CounterVec
	current *prometheus.GaugeVec
}

func newAttribution(c *Controller) *attribution {
	a := &attribution{
		c: c,
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetwave_unattributed_changes_total",
			Help: "Revisions of the plan spec or the config without an audit record (written by something other than fleetctl) this controller found while leading, by key.",
		}, []string{"key"}),
		current: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetwave_unattributed_change",
			Help: "1 while the key's newest revision has no audit record (the fleet follows a value nobody signed for), on the leading controller; else 0.",
		}, []string{"key"}),
	}
	for _, k := range kv.AttributedKeys {
		a.changes.WithLabelValues(k.String())
		a.current.WithLabelValues(k.String())
	}
	c.m.reg.MustRegister(a.changes, a.current)
	return a
}

// pass checks the revisions written since the last check, while leading.
// Its failures are logged (once each) and never stop the rollout pass.
func (a *attribution) pass(ctx context.Context, now time.Time, leading bool) {
	if !leading {
		a.loaded = false
		a.current.Reset()
		for _, k := range kv.AttributedKeys {
			a.current.WithLabelValues(k.String())
		}
		return
	}
	if err := a.check(ctx, now); err != nil {
		if ctx.Err() == nil && err.Error() != a.lastErr {
			a.lastErr = err.Error()
			a.c.o.Log.Warn("cannot check the plan spec's and the config's revisions against the audit trail; retrying every pass",
				slog.Any("err", err), slog.String("fix", "an auth directory minted before the check: fleetctl auth upgrade; a bus without FLEET_AUDIT: fleetctl bus ensure"))
		}
		return
	}
	a.lastErr = ""
}

func (a *attribution) check(ctx context.Context, now time.Time) error {
	f := a.c.fleet
	if !a.loaded {
		st, rev, err := kv.ReadAttribution(ctx, f.JS.Conn())
		switch {
		case err == nil:
		case errors.Is(err, kv.ErrNotFound), errors.Is(err, kv.ErrCorrupt), errors.Is(err, kv.ErrForeign):
			if !errors.Is(err, kv.ErrNotFound) {
				a.c.o.Log.Error("the attribution check's state is not valid; checking every revision still in the buckets' history again", slog.Any("err", err))
			}
			st = kv.AttributionState{V: 1}
		default:
			return err
		}
		if st.Keys == nil {
			st.Keys = map[string]kv.AttributionKey{}
		}
		a.state, a.rev, a.loaded, a.dirty = st, rev, true, false
	}
	grace := a.c.o.AttributionGrace
	type pending struct {
		k    kv.BucketKey
		revs []kv.StoredMsg
	}
	var todo []pending
	var oldest time.Time
	var errs []error // one key's history unreadable: the other is checked
	keys := a.keys()
	for _, k := range keys {
		revs, err := f.Revisions(ctx, k, a.state.Keys[k.String()].Checked)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(revs) == 0 {
			continue
		}
		todo = append(todo, pending{k, revs})
		if oldest.IsZero() || revs[0].Time.Before(oldest) {
			oldest = revs[0].Time
		}
	}
	if len(todo) > 0 {
		reach, err := f.AuditReach(ctx)
		if err != nil {
			return err
		}
		// A record is stored after its write; a minute's margin for the
		// clocks of a cluster's stream leaders.
		audited, err := f.AuditedRevisions(ctx, oldest.Add(-time.Minute))
		if err != nil {
			return err
		}
		for _, p := range todo {
			a.judge(p.k, p.revs, audited[p.k.String()], reach, now, grace)
		}
	}
	for _, k := range keys {
		st := a.state.Keys[k.String()]
		v := 0.0
		if st.Unattributed != 0 && st.Unattributed == st.Checked {
			v = 1
		}
		a.current.WithLabelValues(k.String()).Set(v)
	}
	return errors.Join(append(errs, a.save(ctx))...)
}

// keys are the keys checked: kv.AttributedKeys (the config, the default
// app's spec) and the spec of every other app the controller drives.
func (a *attribution) keys() []kv.BucketKey {
	keys := slices.Clone(kv.AttributedKeys)
	for _, app := range a.c.apps.Load().list {
		if !app.ns.IsDefault() {
			keys = append(keys, kv.BucketKey{Bucket: kv.BucketPlan, Key: app.ns.Spec()})
		}
	}
	return keys
}

// judge checks the revisions of k, oldest first, up to the first one still
// within its grace.
func (a *attribution) judge(k kv.BucketKey, revs []kv.StoredMsg, audited map[uint64]bool, reach, now time.Time, grace time.Duration) {
	st := a.state.Keys[k.String()]
	for _, m := range revs {
		switch {
		case m.Time.Before(reach):
			// Its record may have left the audit trail, or predate it.
		case audited[m.Sequence]:
		case now.Sub(m.Time) < grace:
			a.state.Keys[k.String()] = st
			return // its record may still be on its way; so may later ones'
		default:
			a.raise(k, m, now)
			st.Unattributed = m.Sequence
		}
		st.Checked = m.Sequence
		a.dirty = true
	}
	a.state.Keys[k.String()] = st
}

func (a *attribution) raise(k kv.BucketKey, m kv.StoredMsg, now time.Time) {
	what := "written"
	if m.Deleted {
		what = "deleted"
	}
	reason := fmt.Sprintf("%s revision %d (%s, stored %s) has no audit record: it was not made by fleetctl "+
		"(a raw KV write, an edge site's leaf, a stolen credential), and the rollout follows it; check it, and write it again with fleetctl to sign for it",
		k, m.Sequence, what, m.Time.UTC().Format(time.RFC3339))
	a.changes.WithLabelValues(k.String()).Inc()
	a.c.o.Log.Warn("unattributed change: "+reason, slog.String("key", k.String()), slog.Uint64("revision", m.Sequence))
	ev := rollout.Event{V: rollout.SchemaVersion, Kind: rollout.EventUnattributed, Reason: reason, At: now.UTC()}
	if k.Bucket == kv.BucketPlan {
		// A plan spec is one app's: the event says whose.
		if pk := kv.ParsePlanKey(k.Key); pk.App != "" {
			ev.App = pk.App
		} else {
			ev.App = a.c.apps.Load().list[0].ns.Name
		}
	}
	if err := a.c.fleet.PublishEvent(ev); err != nil {
		a.c.o.Log.Warn("publishing event failed", slog.String("key", k.String()), slog.Any("err", err))
	}
}

// save writes the state if it moved. A write someone else's came before
// (another controller leads, or led since) makes it be read again.
func (a *attribution) save(ctx context.Context) error {
	if !a.dirty {
		return nil
	}
	a.state.V, a.state.At, a.state.By = 1, a.c.o.Clock.Now().UTC(), a.c.o.ID
	rev, err := kv.SaveAttribution(ctx, a.c.fleet.JS, a.state, a.rev)
	if errors.Is(err, kv.ErrConflict) {
		a.loaded = false
		return nil
	}
	if err != nil {
		return err
	}
	a.rev, a.dirty = rev, false
	return nil
}
