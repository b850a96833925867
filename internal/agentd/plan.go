package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

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

// DecideAt is Decide for an agent whose clock reads now: under the
// time-based schedule, an agent is not told to update once its group's
// window has closed (rollout.UpdateAllowed), even before the controller
// wrote the group done. Every place agentd acts on the plan uses it.
func (p Plan) DecideAt(id rollout.AgentID, now time.Time) (version string, update bool) {
	v, update := p.Decide(id)
	if update && !rollout.UpdateAllowed(p.Spec, p.Status, now) {
		update = false
	}
	return v, update
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
// message) is caught up. The revision in each message (Nats-Sequence)
// decides which of two values is newer.
//
// Nothing arriving on those subjects is taken on trust. Any agent of the
// account can make a request whose reply subject is fleet.plan.group.<g>,
// so a message is accepted only when the server's own headers say it is a
// stored value of this agent's keys ($KV.fleet_plan.spec or
// $KV.fleet_plan.group.<own group>) in the plan bucket's stream, the value is
// not foreign (kv.StoredMsg.Foreign), and a group status names this agent's
// group and the spec's target. Anything else is logged and ignored.
type PlanFollower struct {
	NC *nats.Conn
	// Group is the group whose status it follows; SetGroup changes it
	// while it runs (read it with CurrentGroup then).
	Group string
	// NS is the app whose plan keys it follows (ns.Spec(), ns.Group(g));
	// the zero value is the default app's: spec and group.<g>.
	NS    kv.AppNS
	Clock clock.Clock
	Log   *slog.Logger
	// OnRead, if set, is called with the plan after every full read
	// (Run's: at start, after a reconnect, every DefaultRefreshInterval).
	OnRead func(Plan)
	// FollowGroups follows the app's groups key too (kv.AppNS.Groups:
	// the groups and their selectors, selector.go), read with the plan
	// but never failing its read: credentials that may not read it (an
	// agent minted before label selectors) never set it.
	FollowGroups bool

	mu       sync.Mutex
	plan     Plan
	changed  chan struct{}
	refresh  chan struct{}
	lastWarn time.Time // of the last "ignored" warning, to bound the log
	// groups is the groups key's value at groupsRev; groupsKnown once
	// read (a missing key is known: no selectors). groupsChanged
	// signals (coalesced) a change. groupsErr is the last read error
	// logged.
	groups        rollout.GroupList
	groupsRev     uint64
	groupsKnown   bool
	groupsChanged chan struct{}
	groupsErr     string
	// subMu guards groupSub, the subscription of the group status.
	subMu    sync.Mutex
	groupSub *nats.Subscription
}

// DefaultRefreshInterval is how often an agent re-reads the plan as a safety
// net behind the republished updates.
const DefaultRefreshInterval = 3 * time.Minute

// retryInterval is how soon a failed or inconsistent read is retried.
const retryInterval = 5 * time.Second

// errStale is a group status computed for another target than the spec the
// agent knows: the controller has not caught up yet, or the read raced a
// change. It is not applied; the follower reads again shortly.
var errStale = errors.New("group status is for another target than the plan spec")

func (f *PlanFollower) init() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed == nil {
		f.changed = make(chan struct{}, 1)
		f.refresh = make(chan struct{}, 1)
		f.groupsChanged = make(chan struct{}, 1)
	}
}

// CurrentGroup is the group whose status f follows.
func (f *PlanFollower) CurrentGroup() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Group
}

// GroupsChanged signals (coalesced) whenever the groups key's value is
// read anew and differs, or is first known.
func (f *PlanFollower) GroupsChanged() <-chan struct{} {
	f.init()
	return f.groupsChanged
}

// Groups is the groups key's value, and whether it is known yet.
func (f *PlanFollower) Groups() (rollout.GroupList, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.groups, f.groupsKnown
}

// SetGroup makes f follow group's status instead: what it knew of the
// old group's is dropped (a decision waits for the new group's status,
// read at once), and the old group's subject is no longer followed.
func (f *PlanFollower) SetGroup(group string) error {
	f.init()
	f.subMu.Lock()
	defer f.subMu.Unlock()
	f.mu.Lock()
	if f.Group == group {
		f.mu.Unlock()
		return nil
	}
	f.Group = group
	f.plan.Status, f.plan.StatusRev = rollout.GroupStatus{}, 0
	f.mu.Unlock()
	if f.groupSub != nil {
		_ = f.groupSub.Unsubscribe()
		sub, err := f.NC.Subscribe(kv.PlanRepublish+f.NS.Group(group), f.onMessage)
		if err != nil {
			f.groupSub = nil
			return fmt.Errorf("follow group %s: %w", group, err)
		}
		f.groupSub = sub
	}
	f.signal()
	f.Refresh()
	return nil
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
	keys := []string{f.NS.Spec()}
	if f.FollowGroups {
		keys = append(keys, f.NS.Groups())
	}
	for _, key := range keys {
		sub, err := f.NC.Subscribe(kv.PlanRepublish+key, f.onMessage)
		if err != nil {
			return fmt.Errorf("follow plan: %w", err)
		}
		defer sub.Unsubscribe()
	}
	f.subMu.Lock()
	sub, err := f.NC.Subscribe(kv.PlanRepublish+f.NS.Group(f.CurrentGroup()), f.onMessage)
	if err == nil {
		f.groupSub = sub
	}
	f.subMu.Unlock()
	if err != nil {
		return fmt.Errorf("follow plan: %w", err)
	}
	defer func() {
		f.subMu.Lock()
		if f.groupSub != nil {
			_ = f.groupSub.Unsubscribe()
			f.groupSub = nil
		}
		f.subMu.Unlock()
	}()
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
			next = retryInterval
		} else if err == nil && f.OnRead != nil {
			f.OnRead(f.Plan())
		}
		timer.Reset(next)
	}
}

// keys are the plan keys this agent may read: the spec and its group's.
func (f *PlanFollower) keys() []string { return []string{f.NS.Spec(), f.NS.Group(f.CurrentGroup())} }

// read does the direct gets of both keys.
func (f *PlanFollower) read(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	changed := false
	// Both keys first, then one signal: a decision must not see the new
	// spec with the old (or no) group status.
	defer func() {
		if changed {
			f.signal()
		}
	}()
	for _, key := range f.keys() {
		m, err := kv.DirectGetLast(ctx, f.NC, kv.PlanStream, kv.KeySubject(kv.BucketPlan, key))
		switch {
		case errors.Is(err, kv.ErrNotFound):
			if key == f.NS.Group(f.Group) && f.dropFollowed(0) {
				changed = true
			}
			continue
		case err != nil:
			return err
		}
		ok, err := f.accept(m)
		changed = changed || ok
		if err != nil {
			return err
		}
	}
	if f.FollowGroups {
		f.readGroups(ctx)
	}
	return nil
}

// readGroups reads the groups key; a failure is logged (once per error)
// and keeps what was known: membership waits, the plan does not.
func (f *PlanFollower) readGroups(ctx context.Context) {
	key := f.NS.Groups()
	m, err := kv.DirectGetLast(ctx, f.NC, kv.PlanStream, kv.KeySubject(kv.BucketPlan, key))
	switch {
	case errors.Is(err, kv.ErrNotFound):
		f.mu.Lock()
		first := !f.groupsKnown
		f.groupsKnown, f.groupsErr = true, ""
		f.mu.Unlock()
		if first {
			f.signalGroups()
		}
		return
	case err != nil:
		f.mu.Lock()
		logIt := err.Error() != f.groupsErr
		f.groupsErr = err.Error()
		f.mu.Unlock()
		if logIt {
			f.Log.Warn("cannot read the groups key; membership by labels waits for it", slog.String("key", key), slog.Any("err", err))
		}
		return
	}
	f.mu.Lock()
	f.groupsErr = ""
	f.mu.Unlock()
	if _, err := f.accept(m); err != nil {
		f.Log.Debug("groups key not applied", slog.Any("err", err))
	}
}

func (f *PlanFollower) signalGroups() {
	select {
	case f.groupsChanged <- struct{}{}:
	default:
	}
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
	sm, err := kv.ParseStored(m.Header, m.Data)
	if err != nil {
		f.ignore(m.Subject, err)
		return
	}
	before := f.Plan().Status.Follows
	ok, err := f.accept(sm)
	if ok {
		f.signal()
		// A group newly followed by the catch-all is said at once, not
		// at the next full read (OnRead asks nothing of the find
		// endpoint while the group has a status).
		if p := f.Plan(); f.OnRead != nil && p.Status.Follows != "" && p.Status.Follows != before {
			f.OnRead(p)
		}
	}
	if errors.Is(err, errStale) {
		f.Refresh()
	}
}

// accept applies a stored plan value if it is one of this agent's keys and
// newer than what is known, and reports whether it did. A value that is not
// for this agent is logged (bounded) and ignored.
func (f *PlanFollower) accept(m kv.StoredMsg) (bool, error) {
	key, _ := kv.KeyOfSubject(kv.BucketPlan, m.Subject)
	group := f.CurrentGroup()
	var err error
	switch {
	case m.Stream != kv.PlanStream:
		err = fmt.Errorf("from stream %q, not %s", m.Stream, kv.PlanStream)
	case f.FollowGroups && key == f.NS.Groups():
	case key != f.NS.Spec() && key != f.NS.Group(group):
		err = fmt.Errorf("for key %q, not %s or %s", key, f.NS.Spec(), f.NS.Group(group))
	case m.Foreign:
		err = fmt.Errorf("key %s at revision %d is not a plan value (it carries JetStream's own headers): repair it with fleetctl", key, m.Sequence)
	}
	if err != nil {
		f.ignore(m.Subject, err)
		return false, nil
	}
	if f.FollowGroups && key == f.NS.Groups() {
		f.applyGroups(m)
		return false, nil // not the plan: membership's (GroupsChanged)
	}
	if m.Deleted {
		// A delete or purge: keep the last known plan, unless it is a
		// copy of the catch-all group's status the controller withdrew.
		return key == f.NS.Group(f.Group) && f.dropFollowed(m.Sequence), nil
	}
	return f.apply(key, m.Data, m.Sequence)
}

// dropFollowed forgets the group status when it is a copy of the catch-all
// group's (rollout.GroupStatus.Follows) and rev (the delete's revision; 0
// for a read that found none) is not older than it: the controller deletes
// the copy when the catch-all no longer follows this host's group (catch_all
// "-", or the group is followed no more), and the host then waits, as a
// host of a group not in the config did before catch-all groups. Any
// other status outlives a delete, as before. It reports whether it forgot.
func (f *PlanFollower) dropFollowed(rev uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.plan.Status.Follows == "" || rev != 0 && rev <= f.plan.StatusRev {
		return false
	}
	f.Log.Info("this host's group no longer follows the catch-all group: it waits until its group is in the config or followed again",
		slog.String("group", f.Group), slog.String("followed", f.plan.Status.Follows))
	f.plan.Status, f.plan.StatusRev = rollout.GroupStatus{}, 0
	return true
}

// applyGroups takes a newer value of the groups key: a delete or purge
// is a list without selectors (every host back to its own group), a value
// that does not validate is logged and ignored.
func (f *PlanFollower) applyGroups(m kv.StoredMsg) {
	var l rollout.GroupList
	if !m.Deleted {
		var err error
		if l, err = rollout.DecodeGroupList(m.Data); err != nil {
			f.Log.Warn("groups key unreadable; keeping the last good one", slog.Uint64("revision", m.Sequence), slog.Any("err", err))
			return
		}
	}
	f.mu.Lock()
	if f.groupsKnown && m.Sequence <= f.groupsRev {
		f.mu.Unlock()
		return
	}
	changed := !f.groupsKnown || !f.groups.Equal(l)
	f.groups, f.groupsRev, f.groupsKnown = l, m.Sequence, true
	f.mu.Unlock()
	if changed {
		f.signalGroups()
	}
}

// ignore logs a plan message the agent will not act on, at most one line
// every ignoredLogEvery: anyone in the account can aim replies at the plan
// subjects, and every agent of the group would log each one.
func (f *PlanFollower) ignore(subject string, err error) {
	now := time.Now()
	if f.Clock != nil {
		now = f.Clock.Now()
	}
	f.mu.Lock()
	quiet := !f.lastWarn.IsZero() && now.Sub(f.lastWarn) < ignoredLogEvery
	if !quiet {
		f.lastWarn = now
	}
	f.mu.Unlock()
	if !quiet {
		f.Log.Warn("ignored a message on a plan subject", slog.String("subject", subject), slog.Any("err", err))
	}
}

// ignoredLogEvery bounds the "ignored" warnings.
const ignoredLogEvery = 10 * time.Second

// apply takes value at rev for key if it is newer than what is known, and
// reports whether it did.
func (f *PlanFollower) apply(key string, value []byte, rev uint64) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch key {
	case f.NS.Spec():
		if rev <= f.plan.SpecRev {
			return false, nil
		}
		var s rollout.Spec
		if err := json.Unmarshal(value, &s); err != nil {
			f.Log.Warn("plan spec unreadable; keeping the last good one", slog.Uint64("revision", rev), slog.Any("err", err))
			return false, nil
		}
		f.plan.Spec, f.plan.SpecRev = s, rev
	default:
		if rev <= f.plan.StatusRev {
			return false, nil
		}
		var st rollout.GroupStatus
		if err := json.Unmarshal(value, &st); err != nil {
			f.Log.Warn("group status unreadable; keeping the last good one", slog.Uint64("revision", rev), slog.Any("err", err))
			return false, nil
		}
		if st.Group != f.Group { // f.mu is held
			f.Log.Warn("ignored a group status that names another group", slog.String("key", key),
				slog.String("group", st.Group), slog.Uint64("revision", rev))
			return false, nil
		}
		if f.plan.SpecRev != 0 && st.TargetVersion != f.plan.Spec.TargetVersion {
			f.Log.Debug("group status not applied: computed for another target", slog.String("status_target", st.TargetVersion),
				slog.String("spec_target", f.plan.Spec.TargetVersion), slog.Uint64("revision", rev))
			return false, errStale
		}
		f.plan.Status, f.plan.StatusRev = st, rev
	}
	return true, nil
}
