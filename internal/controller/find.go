package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// PlanMirror keeps an httpfind.Store equal to the fleet_plan bucket, so the
// find endpoint answers from memory and never reads the bucket per request.
// Like an agent, and with no consumer (the controller's account may create
// none): it follows the bucket's republished changes (fleet.plan.>) with a
// core subscription, and reads every key again (one batched direct get) at
// start, after a reconnect and every Refresh, so a change missed while
// disconnected is caught up. The revision decides which of two values of a
// key is newer.
type PlanMirror struct {
	NC    *nats.Conn
	Store *httpfind.Store
	Log   *slog.Logger
	// Refresh is how often the whole bucket is read again behind the
	// changes. Default DefaultPlanRefresh.
	Refresh time.Duration
	// Clock paces the re-reads. Default the real one.
	Clock clock.Clock

	loaded atomic.Bool
	mu     sync.Mutex
	revs   map[string]uint64 // per key, the revision taken (or skipped)
}

// DefaultPlanRefresh is PlanMirror's default Refresh.
const DefaultPlanRefresh = 3 * time.Minute

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
	refresh, clk := m.Refresh, m.Clock
	if refresh <= 0 {
		refresh = DefaultPlanRefresh
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
	var readAt time.Time
	reconnects := m.NC.Stats().Reconnects
	for {
		if n := m.NC.Stats().Reconnects; !m.loaded.Load() || n != reconnects || clk.Now().Sub(readAt) >= refresh {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := m.reload(rctx)
			cancel()
			if err == nil {
				reconnects, readAt = n, clk.Now()
				if !m.loaded.Swap(true) {
					m.Log.Info("find endpoint has the plan")
				}
			} else if ctx.Err() == nil {
				m.Log.Warn("find: reading the plan failed; retrying", slog.Any("err", err))
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

// take applies one stored value of key if it is newer than what was taken.
// A value that is not what its key should hold (foreign, kv.DecodeSpec,
// kv.DecodeGroupStatus: undecodable, invalid, a JetStream response, another
// group's status) is logged once and skipped: find keeps answering from the
// last good value of that key, as agents keep theirs.
func (m *PlanMirror) take(key string, sm kv.StoredMsg) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revs == nil {
		m.revs = map[string]uint64{}
	}
	if sm.Sequence <= m.revs[key] {
		return
	}
	m.revs[key] = sm.Sequence
	name, isGroup := kv.GroupFromKey(key)
	skip := func(err error) {
		p := &kv.Problem{Bucket: kv.BucketPlan, Key: key, Revision: sm.Sequence, Err: err}
		m.Log.Warn("find skips a stored value that is not valid and keeps the last good one",
			slog.String("key", p.Where()), slog.Uint64("revision", p.Revision), slog.String("err", err.Error()), slog.String("fix", p.Fix()))
	}
	switch {
	case key != kv.KeySpec && !isGroup:
	case sm.Deleted && key == kv.KeySpec:
		m.Store.DeleteSpec()
	case sm.Deleted:
		m.Store.DeleteGroup(name)
	case sm.Foreign:
		skip(kv.ErrForeign)
	case key == kv.KeySpec:
		s, err := kv.DecodeSpec(sm.Data)
		if err != nil {
			skip(err)
			return
		}
		m.Store.SetSpec(s)
	default:
		st, err := kv.DecodeGroupStatus(key, sm.Data)
		if err != nil {
			skip(err)
			return
		}
		m.Store.SetGroup(name, st)
	}
}
