package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// PlanMirror keeps an httpfind.Store equal to the fleet_plan bucket with one
// KV watch, so the find endpoint answers from memory and never reads the
// bucket per request.
type PlanMirror struct {
	Plan   jetstream.KeyValue
	NC     *nats.Conn
	Store  *httpfind.Store
	Log    *slog.Logger
	loaded atomic.Bool
}

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

// Run follows the bucket until ctx ends. The watcher is an ordered consumer:
// after a reconnect it resumes where it was.
func (m *PlanMirror) Run(ctx context.Context) error {
	w, err := m.Plan.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", kv.BucketPlan, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("watch %s: closed", kv.BucketPlan)
			}
			if e == nil {
				m.loaded.Store(true)
				m.Log.Info("find endpoint has the plan")
				continue
			}
			m.apply(e)
		}
	}
}

// apply takes one change of the bucket. A value that is not what its key
// should hold (kv.DecodeSpec, kv.DecodeGroupStatus: undecodable, invalid, a
// JetStream response, another group's status) is logged and skipped: find
// keeps answering from the last good value of that key, as agents keep
// theirs. The watch delivers each revision once, so each bad value is
// logged once.
func (m *PlanMirror) apply(e jetstream.KeyValueEntry) {
	deleted := e.Operation() != jetstream.KeyValuePut
	key := e.Key()
	name, isGroup := kv.GroupFromKey(key)
	skip := func(err error) {
		p := &kv.Problem{Bucket: kv.BucketPlan, Key: key, Revision: e.Revision(), Err: err}
		m.Log.Warn("find skips a stored value that is not valid and keeps the last good one",
			slog.String("key", p.Where()), slog.Uint64("revision", p.Revision), slog.String("err", err.Error()), slog.String("fix", p.Fix()))
	}
	switch {
	case key == kv.KeySpec && deleted:
		m.Store.DeleteSpec()
	case key == kv.KeySpec:
		s, err := kv.DecodeSpec(e.Value())
		if err != nil {
			skip(err)
			return
		}
		m.Store.SetSpec(s)
	case isGroup:
		if deleted {
			m.Store.DeleteGroup(name)
			return
		}
		st, err := kv.DecodeGroupStatus(key, e.Value())
		if err != nil {
			skip(err)
			return
		}
		m.Store.SetGroup(name, st)
	}
}
