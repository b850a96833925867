package sim

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// agent is one virtual host. It is owned by its shard and only touched under
// the shard's lock.
type agent struct {
	id       rollout.AgentID
	hostname string
	group    int
	gen      uint32 // bumped when the slot is reused by churn; stale events are dropped

	active       string
	startVersion string
	startTime    time.Time
	rollback     bool
	rollbackFrom string
	badVersion   string // rolled back from; never retried automatically (as agentd)
	seq          uint64

	installing bool
	installTo  string
	notified   bool // saw the spec of the current run

	// An install blocked on infrastructure: the error it reports until
	// its next attempt, when that is due, and until when its attempts of
	// installTo are blocked (zero before its first).
	blockedErr   string
	retryAt      time.Time
	blockedUntil time.Time
}

type eventKind uint8

const (
	evBeat eventKind = iota
	evInstallDone
	evRetry // a blocked install's retry is due
)

type event struct {
	at   time.Time
	idx  int
	gen  uint32
	kind eventKind
}

type eventHeap []event

func (h eventHeap) Len() int           { return len(h) }
func (h eventHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h eventHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)        { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// planView is what one connection knows of fleet_plan.
type planView struct {
	spec     rollout.Spec
	specRev  uint64
	status   []rollout.GroupStatus
	stRev    []uint64
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
	rng    *rand.Rand
	idsrc  *rand.ChaCha8
	wake   chan struct{}
	churn  float64 // fractional agents owed to churn
}

func newShard(s *Sim, n int, count int) *shard {
	var seed [32]byte
	copy(seed[:], strconv.FormatInt(s.o.Seed, 10)+"/"+strconv.Itoa(n))
	src := rand.NewChaCha8(seed)
	sh := &shard{
		s: s, n: n,
		agents: make([]agent, count),
		rng:    rand.New(src),
		idsrc:  src,
		wake:   make(chan struct{}, 1),
	}
	g := len(s.groups)
	sh.plan.status = make([]rollout.GroupStatus, g)
	sh.plan.stRev = make([]uint64, g)
	sh.plan.dirty = make([]bool, g)
	now := time.Now()
	for i := range sh.agents {
		sh.initAgent(i, (n*s.o.AgentsPerConn+i)%g)
		// Spread the first beats over one interval.
		sh.push(event{at: now.Add(time.Duration(sh.rng.Int64N(int64(s.o.HeartbeatInterval)))), idx: i, kind: evBeat})
	}
	return sh
}

func (sh *shard) initAgent(i, group int) {
	id, err := rollout.NewAgentID(sh.idsrc)
	if err != nil {
		panic(err) // ChaCha8 never fails
	}
	a := &sh.agents[i]
	gen := a.gen + 1
	*a = agent{id: id, hostname: "sim-" + strconv.Itoa(sh.n) + "-" + strconv.Itoa(i), group: group, gen: gen, active: sh.s.o.StartVersion}
}

func (sh *shard) push(e event) {
	if e.gen == 0 {
		e.gen = sh.agents[e.idx].gen
	}
	heap.Push(&sh.events, e)
}

func (sh *shard) nextBeat(now time.Time) time.Time {
	iv := float64(sh.s.o.HeartbeatInterval)
	j := sh.s.o.HeartbeatJitter
	return now.Add(time.Duration(iv * (1 + j*(2*sh.rng.Float64()-1))))
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
	keys := []string{kv.KeySpec}
	for _, g := range sh.s.groups {
		keys = append(keys, kv.GroupKey(g))
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
	if key == kv.KeySpec {
		var sp rollout.Spec
		if rev > sh.plan.specRev && json.Unmarshal(value, &sp) == nil {
			sh.plan.spec, sh.plan.specRev, sh.plan.allDirty, changed = sp, rev, true, true
		}
	} else if gi, ok := sh.s.groupIndex[key]; ok {
		var st rollout.GroupStatus
		if rev > sh.plan.stRev[gi] && json.Unmarshal(value, &st) == nil {
			sh.plan.status[gi], sh.plan.stRev[gi], sh.plan.dirty[gi], changed = st, rev, true, true
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
			sh.refresh(ctx)
		case <-sh.wake:
			sh.step(ctx, time.Now())
		case <-tick.C:
			sh.step(ctx, time.Now())
		}
	}
}

func (sh *shard) step(ctx context.Context, now time.Time) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.decideDirty(now)
	sh.doChurn(now)
	for len(sh.events) > 0 && !sh.events[0].at.After(now) {
		e := heap.Pop(&sh.events).(event)
		a := &sh.agents[e.idx]
		if e.gen != a.gen {
			continue
		}
		switch e.kind {
		case evBeat:
			sh.beat(e.idx, now)
			sh.push(event{at: sh.nextBeat(now), idx: e.idx, kind: evBeat})
		case evInstallDone:
			sh.finishInstall(e.idx, now)
		case evRetry:
			sh.decide(e.idx, now)
		}
	}
}

func (sh *shard) decideDirty(now time.Time) {
	p := &sh.plan
	if !p.allDirty && !anyTrue(p.dirty) {
		return
	}
	for i := range sh.agents {
		a := &sh.agents[i]
		if p.allDirty || p.dirty[a.group] {
			if !a.notified && p.spec.TargetVersion == sh.s.o.TargetVersion && p.spec.TargetVersion != "" {
				a.notified = true
				sh.s.stats.notified(time.Now())
			}
			sh.decide(i, now)
		}
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

// decide is agentd's decision: rollout.Decide on the plan it knows.
func (sh *shard) decide(i int, now time.Time) {
	a := &sh.agents[i]
	if a.installing {
		return
	}
	st := sh.plan.status[a.group]
	version, update := rollout.Decide(a.id, sh.plan.spec, st, st.Mode)
	if !rollout.Act(a.active, version, update) || version == a.badVersion || now.Before(a.retryAt) {
		return
	}
	if version != a.installTo {
		a.blockedUntil = time.Time{}
	}
	if a.blockedUntil.IsZero() {
		a.blockedUntil = now.Add(sh.s.o.InfraFor)
	}
	a.installing, a.installTo, a.retryAt = true, version, time.Time{}
	if !sh.infraBlocked(a, now) {
		// As agentd: a retry's heartbeats say blocked until its download
		// starts, which it does once the outage is over.
		a.blockedErr = ""
	}
	a.startVersion, a.startTime = a.active, now
	a.rollback, a.rollbackFrom = false, ""
	sh.s.stats.installStarted(a.group, a.id, version, st, sh.s.o.FailRate[version] > 0)
	if a.id.Fraction() < sh.s.o.Stuck[version] {
		// Stuck in its health wait: no end event, updating_to forever.
		sh.s.stats.installStuck(a.group)
		sh.beat(i, now)
		return
	}
	d := sh.s.o.InstallMin
	if span := sh.s.o.InstallMax - sh.s.o.InstallMin; span > 0 {
		d += time.Duration(sh.rng.Int64N(int64(span)))
	}
	sh.push(event{at: now.Add(d), idx: i, kind: evInstallDone})
	sh.beat(i, now) // at once after a state change
}

func (sh *shard) finishInstall(i int, now time.Time) {
	a := &sh.agents[i]
	if !a.installing {
		return
	}
	failed := failsOn(a.id, a.installTo, sh.s.o.FailRate[a.installTo])
	a.installing = false
	if sh.infraBlocked(a, now) {
		// The release site answered 503: nothing changed on the host;
		// it retries InfraRetry later, as agentd does (with backoff).
		a.blockedErr, a.retryAt = "download "+a.installTo+": release site: HTTP 503", now.Add(sh.s.o.InfraRetry)
		sh.s.stats.installBlocked(a.group, a.id)
		sh.s.stats.installFinished(a.group, false, sh.plan.status[a.group])
		sh.push(event{at: a.retryAt, idx: i, gen: a.gen, kind: evRetry})
		sh.beat(i, now)
		return
	}
	a.blockedErr = ""
	if failed {
		a.rollback, a.rollbackFrom, a.badVersion = true, a.installTo, a.installTo
	} else {
		sh.setActive(a, a.installTo)
	}
	sh.s.stats.installFinished(a.group, failed, sh.plan.status[a.group])
	sh.beat(i, now)
	sh.decide(i, now) // e.g. a rolled back group sends it back
}

// infraBlocked reports whether a's install of installTo meets the release
// site down at now (InfraFail of its hosts, for InfraFor from their first
// attempt).
func (sh *shard) infraBlocked(a *agent, now time.Time) bool {
	return now.Before(a.blockedUntil) && failsOn(a.id, "infrastructure "+a.installTo, sh.s.o.InfraFail[a.installTo])
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

func (sh *shard) beat(i int, now time.Time) {
	a := &sh.agents[i]
	a.seq++
	hb := heartbeat.Heartbeat{
		V: heartbeat.SchemaVersion, AgentID: a.id, Hostname: a.hostname, Group: sh.s.groups[a.group],
		ActiveVersion: a.active, StartVersion: a.startVersion, StartTime: a.startTime,
		Rollback: a.rollback, RollbackFrom: a.rollbackFrom, At: now, Seq: a.seq,
	}
	if a.installing {
		hb.UpdatingTo = a.installTo // as agentd, for as long as the install runs
	}
	if a.blockedErr != "" {
		hb.Error, hb.ErrorClass, hb.ErrorCause = a.blockedErr, heartbeat.ClassInfrastructure, "download failed (HTTP 503)"
	}
	data, err := heartbeat.Encode(&hb)
	if err != nil {
		sh.s.log.Warn("encode heartbeat", "err", err)
		return
	}
	if err := sh.nc.Publish(heartbeat.SubjectFor(hb.Group, a.id), data); err != nil {
		return // the connection is closing: not sent
	}
	sh.s.stats.beats.Add(1)
}

// doChurn replaces agents at the configured rate: the old host goes silent
// (the controller expires it), a new one with a fresh id joins on the start
// version.
func (sh *shard) doChurn(now time.Time) {
	rate := sh.s.churnOn.Load()
	if rate == 0 || len(sh.agents) == 0 {
		return
	}
	per := float64(rate) / 1000 * float64(len(sh.agents)) / float64(sh.s.o.Agents) // this shard's share, agents/s
	sh.churn += per * sh.s.o.Tick.Seconds()
	for ; sh.churn >= 1; sh.churn-- {
		i := sh.rng.IntN(len(sh.agents))
		a := &sh.agents[i]
		if a.installing {
			sh.s.stats.installAborted(a.group)
		}
		sh.setActive(a, "") // the host leaves
		sh.initAgent(i, sh.rng.IntN(len(sh.s.groups)))
		sh.s.stats.churned.Add(1)
		sh.push(event{at: now.Add(time.Duration(sh.rng.Int64N(int64(sh.s.o.HeartbeatInterval)))), idx: i, kind: evBeat})
		sh.agents[i].notified = true // a new host is not counted in notify latency
		sh.decide(i, now)
	}
}

// setActive makes v a's active version, keeping the tracker's count of
// hosts on the target ("" : the host leaves).
func (sh *shard) setActive(a *agent, v string) {
	target := sh.s.o.TargetVersion
	switch {
	case a.active != target && v == target:
		sh.s.stats.onTargetChanged(a.group, 1)
	case a.active == target && v != target:
		sh.s.stats.onTargetChanged(a.group, -1)
	}
	a.active = v
}

// versions reports, under the lock, how many agents of each group are on v.
func (sh *shard) countOn(v string, out []int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i := range sh.agents {
		if sh.agents[i].active == v {
			out[sh.agents[i].group]++
		}
	}
}

func (sh *shard) close() {
	if sh.nc != nil {
		sh.nc.Close()
	}
}
