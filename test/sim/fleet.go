package sim

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// agent is one virtual host. It is owned by its shard and only touched under
// the shard's lock.
//
// It is kept small, for a fleet of a million in one process (64 bytes,
// and 36 for its id): versions are indices in the shard's table of the
// versions it has seen (ver), times are Unix nanoseconds (0: none), flags
// are bits, and what a heartbeat says that follows from the rest (the
// hostname, the text of an infrastructure error) is written when it is
// sent.
type agent struct {
	// id is a slice of the shard's block of ids (one string for all the
	// shard's first agents), or a string of its own once churn replaced
	// the host.
	id rollout.AgentID

	startTime int64 // when its last install started
	// A blocked install (flBlocked): when its next attempt is due, and
	// until when its attempts of installTo are blocked (0 before its
	// first).
	retryAt      int64
	blockedUntil int64

	seq   uint32
	gen   uint32 // bumped when the slot is reused by churn; stale events are dropped
	group uint16

	active       ver
	startVersion ver
	rollbackFrom ver
	badVersion   ver // rolled back from; never retried automatically (as agentd)
	installTo    ver

	flags agentFlags
}

// ver is an index in the shard's version table (shard.vers); 0 is "".
type ver uint16

type agentFlags uint8

const (
	flRollback   agentFlags = 1 << iota
	flInstalling            // an install (or a blocked attempt) runs
	flNotified              // saw the spec of the current run
	flBlocked               // its last attempt met the release site down (HTTP 503)
)

func (a *agent) has(f agentFlags) bool { return a.flags&f != 0 }

func (a *agent) set(f agentFlags, on bool) {
	if on {
		a.flags |= f
	} else {
		a.flags &^= f
	}
}

type eventKind uint8

const (
	evBeat eventKind = iota
	evInstallDone
	evRetry // a blocked install's retry is due
)

// event is something due for one agent at a time (Unix nanoseconds).
type event struct {
	at   int64
	idx  int32
	gen  uint32
	kind eventKind
}

// eventHeap is a min-heap of events by time, typed (container/heap would
// box every event pushed: one allocation per heartbeat).
type eventHeap []event

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if q[p].at <= q[i].at {
			break
		}
		q[p], q[i] = q[i], q[p]
		i = p
	}
}

func (h *eventHeap) pop() event {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && q[l].at < q[m].at {
			m = l
		}
		if r := l + 1; r < n && q[r].at < q[m].at {
			m = r
		}
		if m == i {
			break
		}
		q[m], q[i] = q[i], q[m]
		i = m
	}
	*h = q
	return top
}

// planView is what one connection knows of fleet_plan.
type planView struct {
	spec     rollout.Spec
	specRev  uint64
	status   []rollout.GroupStatus
	stRev    []uint64
	decider  []rollout.Decider // per group, for spec and status
	allDirty bool
	dirty    []bool
}

// shard is one NATS connection and the agents that share it: one core
// subscription on fleet.plan.>, one scheduler goroutine.
type shard struct {
	s   *Sim
	n   int
	nc  *nats.Conn
	kvp jetstream.KeyValue

	mu     sync.Mutex
	agents []agent
	events eventHeap
	plan   planView
	vers   []string       // version table: vers[0] is ""
	verIdx map[string]ver // and back
	rng    *rand.Rand
	idsrc  *rand.ChaCha8
	wake   chan struct{}
	churn  float64 // fractional agents owed to churn
	buf    []byte  // the heartbeat being sent
	// refreshing: a periodic plan refresh runs (at most one at a time).
	refreshing atomic.Bool
}

func newShard(s *Sim, n int, count int) *shard {
	var seed [32]byte
	copy(seed[:], strconv.FormatInt(s.o.Seed, 10)+"/"+strconv.Itoa(n))
	src := rand.NewChaCha8(seed)
	sh := &shard{
		s: s, n: n,
		agents: make([]agent, count),
		events: make(eventHeap, 0, count+count/4),
		vers:   []string{""},
		verIdx: map[string]ver{"": 0},
		rng:    rand.New(src),
		idsrc:  src,
		wake:   make(chan struct{}, 1),
	}
	g := len(s.groups)
	sh.plan.status = make([]rollout.GroupStatus, g)
	sh.plan.stRev = make([]uint64, g)
	sh.plan.dirty = make([]bool, g)
	sh.plan.decider = make([]rollout.Decider, g)
	// The first ids in one string; each agent draws its id and then the
	// time of its first beat, spread over one interval.
	var ids strings.Builder
	ids.Grow(count * 36)
	first := make([]int64, count)
	now := s.now().UnixNano()
	for i := range count {
		ids.WriteString(string(sh.newID()))
		first[i] = now + sh.rng.Int64N(int64(s.simDur(s.o.HeartbeatInterval)))
	}
	block := ids.String()
	start := sh.ver(s.o.StartVersion)
	for i := range sh.agents {
		sh.agents[i] = agent{id: rollout.AgentID(block[36*i : 36*i+36]), group: uint16((n*s.o.AgentsPerConn + i) % g), gen: 1, active: start}
		sh.push(event{at: first[i], idx: int32(i), kind: evBeat})
	}
	return sh
}

func (sh *shard) newID() rollout.AgentID {
	id, err := rollout.NewAgentID(sh.idsrc)
	if err != nil {
		panic(err) // ChaCha8 never fails
	}
	return id
}

// initAgent makes slot i a new host of group on the start version (churn).
func (sh *shard) initAgent(i, group int) {
	a := &sh.agents[i]
	*a = agent{id: sh.newID(), group: uint16(group), gen: a.gen + 1, active: sh.ver(sh.s.o.StartVersion)}
}

// ver is v's index in the version table, added if new.
func (sh *shard) ver(v string) ver {
	if x, ok := sh.verIdx[v]; ok {
		return x
	}
	x := ver(len(sh.vers))
	sh.vers = append(sh.vers, v)
	sh.verIdx[v] = x
	return x
}

func (sh *shard) push(e event) {
	if e.gen == 0 {
		e.gen = sh.agents[e.idx].gen
	}
	sh.events.push(e)
}

func (sh *shard) nextBeat(now int64) int64 {
	iv := float64(sh.s.simDur(sh.s.o.HeartbeatInterval))
	j := sh.s.o.HeartbeatJitter
	return now + int64(iv*(1+j*(2*sh.rng.Float64()-1)))
}

// start connects, subscribes and reads the plan once.
func (sh *shard) start(ctx context.Context) error {
	nc, err := nats.Connect(sh.s.url, nats.Name("fleetwave-sim-"+strconv.Itoa(sh.n)), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	sh.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if sh.kvp, err = js.KeyValue(ctx, kv.BucketPlan); err != nil {
		return err
	}
	if _, err := nc.Subscribe(kv.PlanRepublish+">", sh.onMessage); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	sh.refresh(ctx)
	return nil
}

// refresh does the direct gets of spec and every group key, as agents do at
// start, on reconnect and periodically.
func (sh *shard) refresh(ctx context.Context) {
	keys := []string{sh.s.ns.Spec()}
	for _, g := range sh.s.groups {
		keys = append(keys, sh.s.ns.Group(g))
	}
	for _, k := range keys {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		e, err := sh.kvp.Get(gctx, k)
		cancel()
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyNotFound) && ctx.Err() == nil {
				sh.s.log.Debug("plan direct get failed", "key", k, "err", err)
			}
			continue
		}
		sh.apply(k, e.Value(), e.Revision())
	}
}

func (sh *shard) onMessage(m *nats.Msg) {
	if m.Header.Get("KV-Operation") != "" {
		return
	}
	rev, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		go sh.refresh(context.Background())
		return
	}
	sh.apply(m.Subject[len(kv.PlanRepublish):], m.Data, rev)
}

func (sh *shard) apply(key string, value []byte, rev uint64) {
	sh.mu.Lock()
	changed := false
	var fresh *rollout.GroupStatus
	p := &sh.plan
	if key == sh.s.ns.Spec() {
		var sp rollout.Spec
		if rev > p.specRev && json.Unmarshal(value, &sp) == nil {
			p.spec, p.specRev, p.allDirty, changed = sp, rev, true, true
			for gi := range p.decider {
				p.decider[gi] = rollout.NewDecider(sp, p.status[gi], p.status[gi].Mode)
			}
		}
	} else if gi, ok := sh.s.groupIndex[key]; ok {
		var st rollout.GroupStatus
		if rev > p.stRev[gi] && json.Unmarshal(value, &st) == nil {
			p.status[gi], p.stRev[gi], p.dirty[gi], changed = st, rev, true, true
			p.decider[gi] = rollout.NewDecider(p.spec, st, st.Mode)
			if sh.s.stats.observeStatus(gi, st, rev) {
				fresh = &st
			}
		}
	}
	sh.mu.Unlock()
	if fresh != nil && sh.s.o.OnStatus != nil {
		sh.s.o.OnStatus(fresh.Group, *fresh)
	}
	if changed {
		select {
		case sh.wake <- struct{}{}:
		default:
		}
	}
}

// run is the shard's scheduler: heartbeats spread over the interval,
// install completions, plan decisions, churn, periodic plan refresh.
func (sh *shard) run(ctx context.Context) {
	tick := time.NewTicker(sh.s.o.Tick)
	defer tick.Stop()
	refresh := time.NewTicker(sh.s.o.PlanRefresh)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-refresh.C:
			// Off the scheduler, as agentd's plan reads are off its
			// heartbeats: a slow server must not stop the shard's beats.
			if sh.refreshing.CompareAndSwap(false, true) {
				go func() {
					defer sh.refreshing.Store(false)
					sh.refresh(ctx)
				}()
			}
		case <-sh.wake:
			sh.step(sh.s.now())
		case <-tick.C:
			sh.step(sh.s.now())
		}
	}
}

// step does what is due at now: decisions on a new plan, churn, then every
// event due, in time order.
func (sh *shard) step(t time.Time) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := t.UnixNano()
	sh.decideDirty(now)
	sh.doChurn(now)
	for len(sh.events) > 0 && sh.events[0].at <= now {
		e := sh.events.pop()
		a := &sh.agents[e.idx]
		if e.gen != a.gen {
			continue
		}
		i := int(e.idx)
		switch e.kind {
		case evBeat:
			sh.beat(i, now)
			sh.push(event{at: sh.nextBeat(now), idx: e.idx, kind: evBeat})
		case evInstallDone:
			sh.finishInstall(i, now)
		case evRetry:
			sh.decide(i, now)
		}
	}
}

func (sh *shard) decideDirty(now int64) {
	p := &sh.plan
	if !p.allDirty && !anyTrue(p.dirty) {
		return
	}
	notified := 0
	for i := range sh.agents {
		a := &sh.agents[i]
		if p.allDirty || p.dirty[a.group] {
			if !a.has(flNotified) && p.spec.TargetVersion == sh.s.o.TargetVersion && p.spec.TargetVersion != "" {
				a.set(flNotified, true)
				notified++
			}
			sh.decide(i, now)
		}
	}
	if notified > 0 {
		// Each decision above ran by now: a few hundred microseconds
		// for a shard of thousands.
		sh.s.stats.notified(time.Now(), notified)
	}
	p.allDirty = false
	clear(p.dirty)
}

func anyTrue(b []bool) bool {
	for _, v := range b {
		if v {
			return true
		}
	}
	return false
}

// decide is agentd's decision: rollout.Decide on the plan it knows (its
// group's Decider, worked out once per plan change).
func (sh *shard) decide(i int, now int64) {
	a := &sh.agents[i]
	if a.has(flInstalling) {
		return
	}
	version, update := sh.plan.decider[a.group].Decide(a.id)
	if update && !rollout.UpdateAllowed(sh.plan.spec, sh.plan.status[a.group], time.Unix(0, now)) {
		update = false // as agentd: not after a time-based window closed
	}
	if !rollout.Act(sh.vers[a.active], version, update) || version == sh.vers[a.badVersion] || now < a.retryAt {
		return
	}
	to := sh.ver(version)
	if to != a.installTo {
		a.blockedUntil = 0
	}
	if a.blockedUntil == 0 {
		a.blockedUntil = now + int64(sh.s.simDur(sh.s.o.InfraFor))
	}
	a.installTo, a.retryAt = to, 0
	a.set(flInstalling, true)
	if !sh.infraBlocked(a, now) {
		// As agentd: a retry's heartbeats say blocked until its download
		// starts, which it does once the outage is over.
		a.set(flBlocked, false)
	}
	a.startVersion, a.startTime = a.active, now
	a.rollbackFrom = 0
	a.set(flRollback, false)
	st := sh.plan.status[a.group]
	sh.s.startOutside(int(a.group), sh.plan.spec, version, time.Unix(0, now))
	sh.s.stats.installStarted(int(a.group), a.id, version, st, sh.s.o.FailRate[version] > 0)
	if a.id.Fraction() < sh.s.o.Stuck[version] {
		// Stuck in its health wait: no end event, updating_to forever.
		sh.s.stats.installStuck(int(a.group))
		sh.beat(i, now)
		return
	}
	d := sh.s.o.InstallMin
	if span := sh.s.o.InstallMax - sh.s.o.InstallMin; span > 0 {
		d += time.Duration(sh.rng.Int64N(int64(span)))
	}
	d = sh.s.simDur(d)
	sh.push(event{at: now + int64(d), idx: int32(i), kind: evInstallDone})
	sh.beat(i, now) // at once after a state change
}

func (sh *shard) finishInstall(i int, now int64) {
	a := &sh.agents[i]
	if !a.has(flInstalling) {
		return
	}
	to := sh.vers[a.installTo]
	failed := failsOn(a.id, to, sh.s.o.FailRate[to])
	a.set(flInstalling, false)
	g := int(a.group)
	if sh.infraBlocked(a, now) {
		// The release site answered 503: nothing changed on the host;
		// it retries InfraRetry later, as agentd does (with backoff).
		a.retryAt = now + int64(sh.s.simDur(sh.s.o.InfraRetry))
		a.set(flBlocked, true)
		sh.s.stats.installBlocked(g, a.id)
		sh.s.stats.installFinished(g, false, sh.plan.status[g])
		sh.push(event{at: a.retryAt, idx: int32(i), gen: a.gen, kind: evRetry})
		sh.beat(i, now)
		return
	}
	a.set(flBlocked, false)
	if failed {
		a.rollbackFrom, a.badVersion = a.installTo, a.installTo
		a.set(flRollback, true)
	} else {
		sh.setActive(a, a.installTo)
	}
	sh.s.stats.installFinished(g, failed, sh.plan.status[g])
	sh.beat(i, now)
	sh.decide(i, now) // e.g. a rolled back group sends it back
}

// infraBlocked reports whether a's install of installTo meets the release
// site down at now (InfraFail of its hosts, for InfraFor from their first
// attempt).
func (sh *shard) infraBlocked(a *agent, now int64) bool {
	to := sh.vers[a.installTo]
	return now < a.blockedUntil && failsOn(a.id, "infrastructure "+to, sh.s.o.InfraFail[to])
}

// failsOn reports whether an install of version fails on agent id: a fixed
// subset (fraction rate) of the hosts, as a real bad release fails on the
// same hosts whenever it is tried, and the same hosts for a given seed.
func failsOn(id rollout.AgentID, version string, rate float64) bool {
	if rate <= 0 {
		return false
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(version))
	return float64(h.Sum64()>>11)/(1<<53) < rate
}

// heartbeat is what agent i reports at now.
func (sh *shard) heartbeat(i int, now int64) heartbeat.Heartbeat {
	a := &sh.agents[i]
	hb := heartbeat.Heartbeat{
		V: heartbeat.SchemaVersion, AgentID: a.id, Hostname: "sim-" + strconv.Itoa(sh.n) + "-" + strconv.Itoa(i),
		Group: sh.s.groups[a.group], ActiveVersion: sh.vers[a.active], StartVersion: sh.vers[a.startVersion],
		Rollback: a.has(flRollback), RollbackFrom: sh.vers[a.rollbackFrom], At: time.Unix(0, now), Seq: uint64(a.seq),
		App: sh.s.ns.Key(),
	}
	if a.startTime != 0 {
		hb.StartTime = time.Unix(0, a.startTime)
	}
	if from := sh.s.lagFrom.Load(); from != 0 && now >= from {
		if until := sh.s.lagUntil.Load(); until == 0 || now < until {
			hb.At = hb.At.Add(-sh.s.o.HeartbeatLag) // injected lag (Options.HeartbeatLag)
		}
	}
	if a.has(flInstalling) {
		hb.UpdatingTo = sh.vers[a.installTo] // as agentd, for as long as the install runs
	}
	if a.has(flBlocked) {
		hb.Error, hb.ErrorClass, hb.ErrorCause = "download "+sh.vers[a.installTo]+": release site: HTTP 503", heartbeat.ClassInfrastructure, "download failed (HTTP 503)"
	}
	return hb
}

func (sh *shard) beat(i int, now int64) {
	sh.agents[i].seq++
	hb := sh.heartbeat(i, now)
	// heartbeat.Encode's bytes, into a buffer the shard reuses (Publish
	// copies them).
	sh.buf = appendHeartbeat(sh.buf[:0], &hb)
	if err := sh.nc.Publish(sh.s.ns.HBSubject(hb.Group, hb.AgentID), sh.buf); err != nil {
		return // the connection is closing: not sent
	}
	sh.s.stats.beats.Add(1)
}

// doChurn replaces agents at the configured rate: the old host goes silent
// (the controller expires it), a new one with a fresh id joins on the start
// version.
func (sh *shard) doChurn(now int64) {
	rate := sh.s.churnOn.Load()
	if rate == 0 || len(sh.agents) == 0 {
		return
	}
	per := float64(rate) / 1000 * float64(len(sh.agents)) / float64(sh.s.o.Agents) // this shard's share, agents/s
	sh.churn += per * sh.s.o.Tick.Seconds()
	for ; sh.churn >= 1; sh.churn-- {
		i := sh.rng.IntN(len(sh.agents))
		a := &sh.agents[i]
		if a.has(flInstalling) {
			sh.s.stats.installAborted(int(a.group))
		}
		sh.setActive(a, 0) // the host leaves
		sh.initAgent(i, sh.rng.IntN(len(sh.s.groups)))
		sh.s.stats.churned.Add(1)
		sh.push(event{at: now + sh.rng.Int64N(int64(sh.s.simDur(sh.s.o.HeartbeatInterval))), idx: int32(i), kind: evBeat})
		sh.agents[i].set(flNotified, true) // a new host is not counted in notify latency
		sh.decide(i, now)
	}
}

// setActive makes v a's active version, keeping the tracker's count of
// hosts on the target (0, "": the host leaves).
func (sh *shard) setActive(a *agent, v ver) {
	target := sh.s.o.TargetVersion
	was, is := sh.vers[a.active], sh.vers[v]
	switch {
	case was != target && is == target:
		sh.s.stats.onTargetChanged(int(a.group), 1)
	case was == target && is != target:
		sh.s.stats.onTargetChanged(int(a.group), -1)
	}
	a.active = v
}

// countOn adds, under the lock, how many agents of each group are on v.
func (sh *shard) countOn(v string, out []int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	x, ok := sh.verIdx[v]
	if !ok {
		return
	}
	for i := range sh.agents {
		if sh.agents[i].active == x {
			out[sh.agents[i].group]++
		}
	}
}

func (sh *shard) close() {
	if sh.nc != nil {
		sh.nc.Close()
	}
}
