package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Plan is what an agent knows of the plan: the spec and its group's status,
// each with the revision it was read at (0: not known).
type Plan struct {
	Spec      rollout.Spec
	SpecRev   uint64
	Status    rollout.GroupStatus
	StatusRev uint64
}

// Decide is rollout.Decide on this plan for agent id.
func (p Plan) Decide(id rollout.AgentID) (version string, update bool) {
	if p.SpecRev == 0 {
		return "", false
	}
	return rollout.Decide(id, p.Spec, p.Status, p.Status.Mode)
}

// HealthTimes are the group's health_timeout and min_healthy_time, or the
// defaults when the group has no status yet.
func (p Plan) HealthTimes() (timeout, minHealthy time.Duration) {
	timeout, minHealthy = p.Status.HealthTimeout.D(), p.Status.MinHealthyTime.D()
	if timeout == 0 {
		timeout = rollout.DefaultHealthTimeout.D()
	}
	if minHealthy == 0 && p.StatusRev == 0 {
		minHealthy = rollout.DefaultMinHealthyTime.D()
	}
	return timeout, minHealthy
}

// PlanFollower keeps an agent's view of the plan current without a JetStream
// consumer: the plan bucket republishes every change on fleet.plan.<key>, the
// follower holds plain subscriptions on its two keys, and re-reads both with
// direct gets at start, after every reconnect and every
// DefaultRefreshInterval, so a change missed while disconnected (or a lost
// message) is caught up. The revision in each republished message
// (Nats-Sequence) decides which of two values is newer.
type PlanFollower struct {
	NC    *nats.Conn
	JS    jetstream.JetStream
	Group string
	Clock clock.Clock
	Log   *slog.Logger

	// bucket is the plan bucket, opened by the first successful read; only
	// read uses it, from one goroutine (Run's, or readPlan's).
	bucket jetstream.KeyValue

	mu      sync.Mutex
	plan    Plan
	changed chan struct{}
	refresh chan struct{}
}

// DefaultRefreshInterval is how often an agent re-reads the plan as a safety
// net behind the republished updates.
const DefaultRefreshInterval = 3 * time.Minute

func (f *PlanFollower) init() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed == nil {
		f.changed = make(chan struct{}, 1)
		f.refresh = make(chan struct{}, 1)
	}
}

// Changed signals (coalesced) whenever the plan view changes.
func (f *PlanFollower) Changed() <-chan struct{} {
	f.init()
	return f.changed
}

// Plan returns the current view.
func (f *PlanFollower) Plan() Plan {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.plan
}

// Refresh asks for a re-read now (the agent calls it on reconnect).
func (f *PlanFollower) Refresh() {
	f.init()
	select {
	case f.refresh <- struct{}{}:
	default:
	}
}

// Run follows the plan until ctx ends.
func (f *PlanFollower) Run(ctx context.Context) error {
	f.init()
	for _, key := range []string{kv.KeySpec, kv.GroupKey(f.Group)} {
		sub, err := f.NC.Subscribe(kv.PlanRepublish+key, f.onMessage)
		if err != nil {
			return fmt.Errorf("follow plan: %w", err)
		}
		defer sub.Unsubscribe()
	}
	timer := f.Clock.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C():
		case <-f.refresh:
		}
		next := DefaultRefreshInterval
		if err := f.read(ctx); err != nil && ctx.Err() == nil {
			f.Log.Debug("reading the plan failed; retrying", slog.Any("err", err))
			next = 5 * time.Second
		}
		timer.Reset(next)
	}
}

// read does the direct gets of both keys.
func (f *PlanFollower) read(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if f.bucket == nil {
		b, err := f.JS.KeyValue(ctx, kv.BucketPlan)
		if err != nil {
			return err
		}
		f.bucket = b
	}
	changed := false
	// Both keys first, then one signal: a decision must not see the new
	// spec with the old (or no) group status.
	defer func() {
		if changed {
			f.signal()
		}
	}()
	for _, key := range []string{kv.KeySpec, kv.GroupKey(f.Group)} {
		e, err := f.bucket.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
			continue
		case err != nil:
			return err
		}
		changed = f.apply(key, e.Value(), e.Revision()) || changed
	}
	return nil
}

// signal is safe before init: a send on the nil channel is never ready, so
// the default case is taken.
func (f *PlanFollower) signal() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

func (f *PlanFollower) onMessage(m *nats.Msg) {
	rev, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		f.Refresh() // no revision: cannot order it, read the truth instead
		return
	}
	if op := m.Header.Get("KV-Operation"); op != "" {
		return // a delete or purge: keep the last known plan
	}
	key := m.Subject[len(kv.PlanRepublish):]
	if f.apply(key, m.Data, rev) {
		f.signal()
	}
}

// apply takes value at rev for key if it is newer than what is known, and
// reports whether it did.
func (f *PlanFollower) apply(key string, value []byte, rev uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch key {
	case kv.KeySpec:
		if rev <= f.plan.SpecRev {
			return false
		}
		var s rollout.Spec
		if err := json.Unmarshal(value, &s); err != nil {
			f.Log.Warn("plan spec unreadable; keeping the last good one", slog.Uint64("revision", rev), slog.Any("err", err))
			return false
		}
		f.plan.Spec, f.plan.SpecRev = s, rev
	default:
		if rev <= f.plan.StatusRev {
			return false
		}
		var st rollout.GroupStatus
		if err := json.Unmarshal(value, &st); err != nil {
			f.Log.Warn("group status unreadable; keeping the last good one", slog.Uint64("revision", rev), slog.Any("err", err))
			return false
		}
		f.plan.Status, f.plan.StatusRev = st, rev
	}
	return true
}
