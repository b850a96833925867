package heartbeat

import (
	"sort"
	"sync"
	"time"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Aggregator is the controller's in-memory inventory: the last heartbeat of
// every agent, keyed by agent id, and the per-group per-version counts derived
// from it. It is safe for concurrent use.
//
// Two rules decide who is counted at time now:
//   - an agent not heard from for Expiry is gone (and is pruned by Expire);
//   - an agent is counted only once it has been known for one heartbeat
//     Interval (now - first seen >= Interval), so a host that flaps in and out
//     or a burst of new hosts does not move rollout counts at once. Agents
//     recovered from the stream when the controller starts are counted at
//     once: an earlier controller already watched them arrive, and waiting
//     would make every restart look like the fleet vanished.
//
// And one decides how it is counted: an agent not heard from for
// rollout.UnreachableAfter(Interval) is unreachable (its view says so, and
// its counts say it in VersionCount.Unreachable) until its next heartbeat.
type Aggregator struct {
	interval time.Duration
	expiry   time.Duration

	mu     sync.Mutex
	agents map[rollout.AgentID]*entry
}

type entry struct {
	hb        Heartbeat
	firstSeen time.Time
	lastSeen  time.Time
}

// Agent is one inventory row, as reported by Agents.
type Agent struct {
	Heartbeat   Heartbeat `json:"heartbeat"`
	FirstSeen   time.Time `json:"first_seen"`
	LastSeen    time.Time `json:"last_seen"`
	Established bool      `json:"established"`
}

// NewAggregator returns an empty inventory for agents that heartbeat every
// interval and expire after expiry without one.
func NewAggregator(interval, expiry time.Duration) *Aggregator {
	return &Aggregator{interval: interval, expiry: expiry, agents: make(map[rollout.AgentID]*entry)}
}

// Observe records hb as received at t. recovered marks a heartbeat replayed
// from the stream at start-up; such an agent counts at once (see Aggregator).
// A later heartbeat replaces an earlier one, including a move to another
// group; an agent that had expired starts its first-seen clock again.
func (a *Aggregator) Observe(hb *Heartbeat, t time.Time, recovered bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.observe(hb, t, recovered)
}

// Observation is one heartbeat for ObserveBatch: Observe's arguments.
type Observation struct {
	Heartbeat Heartbeat
	At        time.Time
	Recovered bool
}

// ObserveBatch is Observe for each of obs in order, under one lock: what a
// controller does with the heartbeats that arrived together.
func (a *Aggregator) ObserveBatch(obs []Observation) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range obs {
		a.observe(&obs[i].Heartbeat, obs[i].At, obs[i].Recovered)
	}
}

// observe is Observe with a.mu held. An agent's id and host name rarely
// change: the entry keeps the strings it holds when they are equal, so that
// a million agents' inventory holds one copy of each, not one per heartbeat
// still waiting for the collector.
func (a *Aggregator) observe(hb *Heartbeat, t time.Time, recovered bool) {
	e, ok := a.agents[hb.AgentID]
	if !ok || t.Sub(e.lastSeen) >= a.expiry {
		first := t
		if recovered {
			first = t.Add(-a.interval)
		}
		a.agents[hb.AgentID] = &entry{hb: *hb, firstSeen: first, lastSeen: t}
		return
	}
	id, host := e.hb.AgentID, e.hb.Hostname
	e.hb = *hb
	e.hb.AgentID = id // equal: the map key
	if hb.Hostname == host {
		e.hb.Hostname = host
	}
	if t.After(e.lastSeen) {
		e.lastSeen = t
	}
}

// Expire forgets agents not heard from for the expiry time and returns how
// many it removed.
func (a *Aggregator) Expire(now time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for id, e := range a.agents {
		if a.expired(e, now) {
			delete(a.agents, id)
			n++
		}
	}
	return n
}

func (a *Aggregator) expired(e *entry, now time.Time) bool {
	return now.Sub(e.lastSeen) >= a.expiry
}

func (a *Aggregator) established(e *entry, now time.Time) bool {
	return now.Sub(e.firstSeen) >= a.interval
}

// Counts returns, per group, the counts of the agents that count at now:
// established and not expired. The tally is rollout.Counts.Add, the same
// rule the rollout engine applies.
func (a *Aggregator) Counts(now time.Time) map[string]rollout.Counts {
	a.mu.Lock()
	defer a.mu.Unlock()
	out, _ := a.counts(now)
	return out
}

// Views returns the established, unexpired agents of group as the rollout
// engine sees them. To read every group, use ViewsByGroup: one pass, one
// lock.
func (a *Aggregator) Views(group string, now time.Time) []rollout.AgentView {
	return a.ViewsByGroup(now)[group]
}

// ViewsByGroup returns, per group, the established, unexpired agents of that
// group as the rollout engine sees them (what Views returns for it), from one
// pass over the inventory under one lock, so every group's views are of the
// same instant. A group with no such agent has no entry.
func (a *Aggregator) ViewsByGroup(now time.Time) map[string][]rollout.AgentView {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string][]rollout.AgentView)
	for _, e := range a.agents {
		if !a.expired(e, now) && a.established(e, now) {
			out[e.hb.Group] = append(out[e.hb.Group], a.view(e, now))
		}
	}
	return out
}

func (a *Aggregator) view(e *entry, now time.Time) rollout.AgentView {
	h := &e.hb
	return rollout.AgentView{
		ID: h.AgentID, ActiveVersion: h.ActiveVersion, Rollback: h.Rollback,
		RollbackFrom: h.RollbackFrom, Error: h.Error, StartTime: h.StartTime, UpdatingTo: h.UpdatingTo,
		Unreachable: rollout.Unreachable(e.lastSeen, now, a.interval),
		ErrorClass:  h.ErrorClass, ErrorCause: h.ErrorCause, Site: h.Site,
	}
}

// SiteCounts returns, per group, the counts of the agents Counts counts,
// broken down by site (rollout.CountSites): a group none of whose agents
// names a site has no entry.
func (a *Aggregator) SiteCounts(now time.Time) map[string]rollout.SiteCounts {
	_, sites := a.CountsWithSites(now)
	return sites
}

// CountsWithSites is Counts and SiteCounts in one go: one pass over the
// inventory for a fleet that names no site, two for one that does.
func (a *Aggregator) CountsWithSites(now time.Time) (map[string]rollout.Counts, map[string]rollout.SiteCounts) {
	a.mu.Lock()
	defer a.mu.Unlock()
	counts, sited := a.counts(now)
	return counts, a.siteCounts(now, sited)
}

// counts is Counts, and the groups with an agent that names a site (a.mu
// held).
func (a *Aggregator) counts(now time.Time) (map[string]rollout.Counts, map[string]bool) {
	out := make(map[string]rollout.Counts)
	var sited map[string]bool
	for _, e := range a.agents {
		if a.expired(e, now) || !a.established(e, now) {
			continue
		}
		c := out[e.hb.Group]
		if c == nil {
			c = rollout.Counts{}
			out[e.hb.Group] = c
		}
		c.Add(a.view(e, now))
		if e.hb.Site != "" {
			if sited == nil {
				sited = map[string]bool{}
			}
			sited[e.hb.Group] = true
		}
	}
	return out, sited
}

// siteCounts is SiteCounts for the sited groups (a.mu held).
func (a *Aggregator) siteCounts(now time.Time, sited map[string]bool) map[string]rollout.SiteCounts {
	out := make(map[string]rollout.SiteCounts)
	if len(sited) == 0 {
		return out
	}
	for _, e := range a.agents {
		if !sited[e.hb.Group] || a.expired(e, now) || !a.established(e, now) {
			continue
		}
		sc := out[e.hb.Group]
		if sc == nil {
			sc = rollout.SiteCounts{}
			out[e.hb.Group] = sc
		}
		sc.Add(a.view(e, now))
	}
	for g, sc := range out {
		if sc = sc.Done(); sc == nil {
			delete(out, g)
		} else {
			out[g] = sc
		}
	}
	return out
}

// Agents lists the inventory (expired agents excluded), optionally only one
// group, sorted by group then agent id.
func (a *Aggregator) Agents(group string, now time.Time) []Agent {
	a.mu.Lock()
	out := make([]Agent, 0, len(a.agents))
	for _, e := range a.agents {
		if a.expired(e, now) || group != "" && e.hb.Group != group {
			continue
		}
		out = append(out, Agent{Heartbeat: e.hb, FirstSeen: e.firstSeen, LastSeen: e.lastSeen, Established: a.established(e, now)})
	}
	a.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Heartbeat.Group != out[j].Heartbeat.Group {
			return out[i].Heartbeat.Group < out[j].Heartbeat.Group
		}
		return out[i].Heartbeat.AgentID < out[j].Heartbeat.AgentID
	})
	return out
}

// Len is the number of agents held, expired or not.
func (a *Aggregator) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.agents)
}

// EachCounted calls fn, under the inventory's lock, with the latest
// heartbeat and last-seen time of every agent that counts at now
// (established and not expired: the agents Counts tallies), in no order. fn
// must not call the Aggregator. It copies nothing, for readers that only
// tally (the controller's metrics at a scrape).
func (a *Aggregator) EachCounted(now time.Time, fn func(hb *Heartbeat, lastSeen time.Time)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.agents {
		if !a.expired(e, now) && a.established(e, now) {
			fn(&e.hb, e.lastSeen)
		}
	}
}

// EachAgent calls fn, under the inventory's lock, with every agent not
// expired at now, in no order: its latest heartbeat, when it was last
// heard from, and whether it counts yet (established). fn must not call
// the Aggregator nor keep hb. It copies nothing, for readers that pick a
// few agents out of many (the dashboard's agents table).
func (a *Aggregator) EachAgent(now time.Time, fn func(hb *Heartbeat, lastSeen time.Time, established bool)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.agents {
		if !a.expired(e, now) {
			fn(&e.hb, e.lastSeen, a.established(e, now))
		}
	}
}

// Lookup returns the agent with id, if it is held and not expired at now.
func (a *Aggregator) Lookup(id rollout.AgentID, now time.Time) (Agent, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.agents[id]
	if !ok || a.expired(e, now) {
		return Agent{}, false
	}
	return Agent{Heartbeat: e.hb, FirstSeen: e.firstSeen, LastSeen: e.lastSeen, Established: a.established(e, now)}, true
}
