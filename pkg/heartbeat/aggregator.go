package heartbeat

import (
	"math"
	"slices"
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
	// app is the app whose agents this inventory holds (Heartbeat.App:
	// "" for the fleet's default app); a controller keeps one Aggregator
	// per app (NewAppAggregator), so that a host running three apps is
	// three agents, one in each app's inventory, and no pass over one
	// app's groups reads another's agents.
	app string

	mu       sync.Mutex
	where    map[rollout.AgentID]place // every agent held
	groups   map[string]*members       // each group's agents
	versions versions
	labels   labelTable
}

// members are one group's agents, in one slice of entries (and one of their
// ids), so that a pass over a million agents reads memory in order rather
// than chasing a pointer per agent, and a group can be read alone.
type members struct {
	group string
	ids   []rollout.AgentID
	e     []entry
}

// place is where an agent's entry is.
type place struct {
	m *members
	i int32
}

// entry is one agent, kept small, for a controller holds a million of
// them: 80 bytes, its id and group kept by its members, its versions as
// numbers in the Aggregator's table of versions, times as UTC nanoseconds,
// and whatever a steady agent does not send (an error, a rollback, an
// install under way, a site, a time in another zone) in an allocation only
// agents with such a field have. set and heartbeat convert exactly, both
// ways (TestAggregatorKeepsHeartbeatsExactly).
type entry struct {
	host                   string
	active, start, updater uint32 // versions.strs; 0: ""
	installer              uint8  // installerCodes; in the padding before at
	labels                 uint16 // labelTable.sets; 0: none; in the padding too
	at, startTime          int64  // UTC unix nanoseconds; startTime noTime: zero
	seq                    uint64
	odd                    *oddFields
	firstSeen, lastSeen    int64 // unix nanoseconds
}

// versions numbers the version strings agents report, so that an entry
// holds three numbers where it would hold three strings. It only grows, up
// to maxVersions; a version past that is kept in the agent's oddFields.
type versions struct {
	ids  map[string]uint32
	strs []string // strs[0] is ""
}

const maxVersions = 1 << 16

func (v *versions) id(s string) (uint32, bool) {
	if s == "" {
		return 0, true
	}
	if i, ok := v.ids[s]; ok {
		return i, true
	}
	if len(v.strs) >= maxVersions {
		return 0, false
	}
	if v.ids == nil {
		v.ids, v.strs = make(map[string]uint32), []string{""}
	}
	v.strs = append(v.strs, s)
	i := uint32(len(v.strs) - 1)
	v.ids[s] = i
	return i, true
}

// oddFields are the fields of a heartbeat most agents leave empty, and the
// times that UTC nanoseconds do not hold exactly.
type oddFields struct {
	v                                                             int
	rollback                                                      bool
	rollbackFrom, error, errorClass, errorCause, updatingTo, site string
	errorOutput                                                   string
	at, startTime                                                 time.Time
	otherV, oddAt, oddStart                                       bool
	// ownVersions: the versions table was full; these are the active,
	// start and updater versions.
	ownVersions bool
	versions    [3]string
	// labels: the label table was full; these are the agent's labels.
	labels LabelSet
}

// labelTable numbers the label sets agents report, as versions numbers
// versions: a fleet has few distinct sets (os, arch, kernel, a rack or
// two), so an entry holds a number where it would hold a string. It only
// grows, up to maxLabelSets; a set past that is kept in the agent's
// oddFields.
type labelTable struct {
	ids  map[LabelSet]uint16
	sets []LabelSet // sets[0] is the zero set
}

const maxLabelSets = 1<<16 - 1

func (t *labelTable) id(s LabelSet) (uint16, bool) {
	if s.IsZero() {
		return 0, true
	}
	if i, ok := t.ids[s]; ok {
		return i, true
	}
	if len(t.sets) >= maxLabelSets {
		return 0, false
	}
	if t.ids == nil {
		t.ids, t.sets = make(map[LabelSet]uint16), []LabelSet{{}}
	}
	t.sets = append(t.sets, s)
	i := uint16(len(t.sets) - 1)
	t.ids[s] = i
	return i, true
}

// installerCodes are the values of entry.installer: Heartbeat.Installer,
// which Validate holds to these.
var installerCodes = [...]string{"", rollout.InstallerTarball, rollout.InstallerScript}

func installerCode(s string) uint8 {
	for i, v := range installerCodes {
		if v == s {
			return uint8(i)
		}
	}
	return 0
}

// noTime is entry.startTime for the zero time.
const noTime = math.MinInt64

// utcNanos is t as UTC nanoseconds, if that gives back t exactly (same
// instant, same zone).
func utcNanos(t time.Time) (int64, bool) {
	if t.Location() != time.UTC {
		return 0, false
	}
	n := t.UnixNano()
	return n, n != noTime && time.Unix(0, n).UTC() == t
}

// set stores hb in e (keeping e's host name when it is equal to hb's, so
// that a million agents hold one copy of each, not one per heartbeat
// waiting for the collector).
func (a *Aggregator) set(e *entry, hb *Heartbeat) {
	if e.host != hb.Hostname {
		e.host = hb.Hostname
	}
	e.seq = hb.Seq
	e.installer = installerCode(hb.Installer)
	var odd oddFields
	var ok [3]bool
	e.active, ok[0] = a.versions.id(hb.ActiveVersion)
	e.start, ok[1] = a.versions.id(hb.StartVersion)
	e.updater, ok[2] = a.versions.id(hb.UpdaterVersion)
	if ok != [3]bool{true, true, true} {
		e.active, e.start, e.updater = 0, 0, 0
		odd.ownVersions, odd.versions = true, [3]string{hb.ActiveVersion, hb.StartVersion, hb.UpdaterVersion}
	}
	var exact bool
	if e.at, exact = utcNanos(hb.At); !exact {
		odd.at, odd.oddAt = hb.At, true
	}
	if hb.StartTime.IsZero() && hb.StartTime.Location() == time.UTC {
		e.startTime = noTime
	} else if e.startTime, exact = utcNanos(hb.StartTime); !exact {
		odd.startTime, odd.oddStart = hb.StartTime, true
	}
	if hb.V != SchemaVersion {
		odd.v, odd.otherV = hb.V, true
	}
	odd.rollback, odd.rollbackFrom, odd.error = hb.Rollback, hb.RollbackFrom, hb.Error
	odd.errorClass, odd.errorCause, odd.updatingTo, odd.site = hb.ErrorClass, hb.ErrorCause, hb.UpdatingTo, hb.Site
	odd.errorOutput = hb.ErrorOutput
	if id, ok := a.labels.id(hb.Labels); ok {
		e.labels = id
	} else {
		e.labels, odd.labels = 0, hb.Labels
	}
	switch {
	case odd == oddFields{}:
		e.odd = nil
	case e.odd != nil && *e.odd == odd:
	default:
		e.odd = &odd
	}
}

// activeVersion is e's active version.
func (a *Aggregator) activeVersion(e *entry) string {
	if e.odd != nil && e.odd.ownVersions {
		return e.odd.versions[0]
	}
	return a.versions.strs[e.active]
}

// heartbeat writes the heartbeat e holds, of agent id in group, into hb.
func (a *Aggregator) heartbeat(e *entry, id rollout.AgentID, group string, hb *Heartbeat) {
	*hb = Heartbeat{
		V: SchemaVersion, AgentID: id, Hostname: e.host, Group: group,
		At: time.Unix(0, e.at).UTC(), Seq: e.seq, App: a.app, Installer: installerCodes[e.installer],
	}
	if e.odd == nil || !e.odd.ownVersions {
		hb.ActiveVersion, hb.StartVersion, hb.UpdaterVersion = a.versions.strs[e.active], a.versions.strs[e.start], a.versions.strs[e.updater]
	}
	if e.startTime != noTime {
		hb.StartTime = time.Unix(0, e.startTime).UTC()
	}
	if e.labels != 0 {
		hb.Labels = a.labels.sets[e.labels]
	}
	if o := e.odd; o != nil {
		if !o.labels.IsZero() {
			hb.Labels = o.labels
		}
		if o.otherV {
			hb.V = o.v
		}
		if o.ownVersions {
			hb.ActiveVersion, hb.StartVersion, hb.UpdaterVersion = o.versions[0], o.versions[1], o.versions[2]
		}
		hb.Rollback, hb.RollbackFrom, hb.Error = o.rollback, o.rollbackFrom, o.error
		hb.ErrorClass, hb.ErrorCause, hb.UpdatingTo, hb.Site = o.errorClass, o.errorCause, o.updatingTo, o.site
		hb.ErrorOutput = o.errorOutput
		if o.oddAt {
			hb.At = o.at
		}
		if o.oddStart {
			hb.StartTime = o.startTime
		}
	}
}

func (e *entry) site() string {
	if e.odd == nil {
		return ""
	}
	return e.odd.site
}

// nanos is a time the Aggregator was given, as nanoseconds (the zone and
// the monotonic reading do not matter to it), and seenAt that time back.
func nanos(t time.Time) int64  { return t.UnixNano() }
func seenAt(n int64) time.Time { return time.Unix(0, n) }

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
	return NewAppAggregator("", interval, expiry)
}

// NewAppAggregator is NewAggregator for the agents of one app: app is the
// app's token in heartbeats (Heartbeat.App; "" for the fleet's default
// app). Heartbeats of another app are not taken (Observe ignores them), so
// two apps' inventories never mix.
func NewAppAggregator(app string, interval, expiry time.Duration) *Aggregator {
	return &Aggregator{app: app, interval: interval, expiry: expiry,
		where: make(map[rollout.AgentID]place), groups: make(map[string]*members)}
}

// App is the app whose agents a holds ("" for the default app).
func (a *Aggregator) App() string { return a.app }

// Observe records hb as received at t. recovered marks a heartbeat replayed
// from the stream at start-up; such an agent counts at once (see Aggregator).
// A later heartbeat replaces an earlier one, including a move to another
// group; an agent that had expired starts its first-seen clock again. A
// heartbeat with Left removes the agent; one of another app than a's is
// ignored.
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

// observe is Observe with a.mu held. A heartbeat of another app is not
// taken; one that says the host left the app (Left) removes the agent.
func (a *Aggregator) observe(hb *Heartbeat, t time.Time, recovered bool) {
	if hb.App != a.app {
		return
	}
	if hb.Left {
		// The host no longer runs the app: it is in none of the app's
		// groups until it heartbeats again without left (DESIGN §9).
		if p, ok := a.where[hb.AgentID]; ok {
			a.remove(p)
		}
		return
	}
	if p, ok := a.where[hb.AgentID]; ok {
		e := &p.m.e[p.i]
		if !a.expired(e, t) {
			if n := nanos(t); n > e.lastSeen {
				e.lastSeen = n
			}
			if p.m.group == hb.Group {
				a.set(e, hb)
				return
			}
			moved := *e // to another group, with its clocks
			id := p.m.ids[p.i]
			a.remove(p)
			a.set(&moved, hb)
			a.insert(id, hb.Group, moved)
			return
		}
		a.remove(p) // expired: it starts over
	}
	first := t
	if recovered {
		first = t.Add(-a.interval)
	}
	e := entry{firstSeen: nanos(first), lastSeen: nanos(t)}
	a.set(&e, hb)
	// The id and the host name in one allocation: one size class for both.
	both := string(hb.AgentID) + hb.Hostname
	id := rollout.AgentID(both[:len(hb.AgentID)])
	e.host = both[len(hb.AgentID):]
	a.insert(id, hb.Group, e)
}

func (a *Aggregator) insert(id rollout.AgentID, group string, e entry) {
	m := a.groups[group]
	if m == nil {
		m = &members{group: group}
		a.groups[group] = m
	}
	m.e, m.ids = append(m.e, e), append(m.ids, id)
	a.where[id] = place{m: m, i: int32(len(m.e) - 1)}
}

// remove takes the agent at p out: the group's last agent moves into its
// place.
func (a *Aggregator) remove(p place) {
	m, last := p.m, len(p.m.e)-1
	delete(a.where, m.ids[p.i])
	if int(p.i) != last {
		m.e[p.i], m.ids[p.i] = m.e[last], m.ids[last]
		a.where[m.ids[p.i]] = p
	}
	m.e[last], m.ids[last] = entry{}, "" // nothing kept alive
	m.e, m.ids = m.e[:last], m.ids[:last]
	switch {
	case last == 0:
		delete(a.groups, m.group)
	case cap(m.e) > 1024 && last < cap(m.e)/4: // most expired: give the memory back
		m.e, m.ids = slices.Clip(slices.Clone(m.e)), slices.Clip(slices.Clone(m.ids))
		for i, id := range m.ids {
			a.where[id] = place{m: m, i: int32(i)}
		}
	}
}

// Expire forgets agents not heard from for the expiry time and returns how
// many it removed.
func (a *Aggregator) Expire(now time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, m := range a.groups {
		for i := len(m.e) - 1; i >= 0; i-- { // what moves into i was checked
			if a.expired(&m.e[i], now) {
				a.remove(place{m: m, i: int32(i)})
				n++
			}
		}
	}
	return n
}

func (a *Aggregator) expired(e *entry, now time.Time) bool {
	return nanos(now)-e.lastSeen >= int64(a.expiry)
}

func (a *Aggregator) established(e *entry, now time.Time) bool {
	return nanos(now)-e.firstSeen >= int64(a.interval)
}

// counted: established and not expired at now (the agents Counts counts).
func (a *Aggregator) counted(e *entry, now time.Time) bool {
	return !a.expired(e, now) && a.established(e, now)
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
// engine sees them, from one pass over that group alone.
func (a *Aggregator) Views(group string, now time.Time) []rollout.AgentView {
	if v := a.AppendViews(nil, group, now); len(v) > 0 {
		return v
	}
	return nil
}

// AppendViews appends Views(group, now) to dst and returns it: a controller
// passes the slice of its last group back in, so that its passes over a
// million agents allocate nothing.
func (a *Aggregator) AppendViews(dst []rollout.AgentView, group string, now time.Time) []rollout.AgentView {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.groups[group]
	if m == nil {
		return dst
	}
	if cap(dst)-len(dst) < len(m.e) {
		dst = slices.Grow(dst, len(m.e))
	}
	for i := range m.e {
		if e := &m.e[i]; a.counted(e, now) {
			dst = append(dst, a.view(m.ids[i], e, now))
		}
	}
	return dst
}

// ViewsByGroup returns, per group, the established, unexpired agents of that
// group as the rollout engine sees them (what Views returns for it), from one
// pass over the inventory under one lock, so every group's views are of the
// same instant. A group with no such agent has no entry. At a million agents
// that is a million views at once: a controller reads one group at a time
// (Views) instead.
func (a *Aggregator) ViewsByGroup(now time.Time) map[string][]rollout.AgentView {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string][]rollout.AgentView)
	for _, m := range a.groups {
		for i := range m.e {
			if e := &m.e[i]; a.counted(e, now) {
				out[m.group] = append(out[m.group], a.view(m.ids[i], e, now))
			}
		}
	}
	return out
}

// RolledBack returns the views of the established, unexpired agents, of
// every group, that report a rollback: all the quarantine rule
// (rollout.QuarantineFrom) looks at, without a view of every agent.
func (a *Aggregator) RolledBack(now time.Time) []rollout.AgentView {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []rollout.AgentView
	for _, m := range a.groups {
		for i := range m.e {
			if e := &m.e[i]; e.odd != nil && e.odd.rollback && a.counted(e, now) {
				out = append(out, a.view(m.ids[i], e, now))
			}
		}
	}
	return out
}

func (a *Aggregator) view(id rollout.AgentID, e *entry, now time.Time) rollout.AgentView {
	v := rollout.AgentView{
		ID: id, Hostname: e.host, ActiveVersion: a.activeVersion(e),
		Unreachable: rollout.Unreachable(seenAt(e.lastSeen), now, a.interval),
	}
	if e.startTime != noTime {
		v.StartTime = time.Unix(0, e.startTime).UTC()
	}
	if o := e.odd; o != nil {
		v.Rollback, v.RollbackFrom, v.Error, v.UpdatingTo = o.rollback, o.rollbackFrom, o.error, o.updatingTo
		v.ErrorOutput = o.errorOutput
		v.ErrorClass, v.ErrorCause, v.Site = o.errorClass, o.errorCause, o.site
		if o.oddStart {
			v.StartTime = o.startTime
		}
	}
	return v
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
	for _, m := range a.groups {
		var c rollout.Counts
		for i := range m.e {
			e := &m.e[i]
			if !a.counted(e, now) {
				continue
			}
			if c == nil {
				c = rollout.Counts{}
			}
			c.Add(a.view(m.ids[i], e, now))
			if e.site() != "" {
				if sited == nil {
					sited = map[string]bool{}
				}
				sited[m.group] = true
			}
		}
		if c != nil {
			out[m.group] = c
		}
	}
	return out, sited
}

// siteCounts is SiteCounts for the sited groups (a.mu held).
func (a *Aggregator) siteCounts(now time.Time, sited map[string]bool) map[string]rollout.SiteCounts {
	out := make(map[string]rollout.SiteCounts)
	for g := range sited {
		m := a.groups[g]
		sc := rollout.SiteCounts{}
		for i := range m.e {
			if e := &m.e[i]; a.counted(e, now) {
				sc.Add(a.view(m.ids[i], e, now))
			}
		}
		if sc = sc.Done(); sc != nil {
			out[g] = sc
		}
	}
	return out
}

// agent is the inventory row of the agent at p (a.mu held).
func (a *Aggregator) agent(p place, now time.Time) Agent {
	e := &p.m.e[p.i]
	r := Agent{FirstSeen: seenAt(e.firstSeen), LastSeen: seenAt(e.lastSeen), Established: a.established(e, now)}
	a.heartbeat(e, p.m.ids[p.i], p.m.group, &r.Heartbeat)
	return r
}

// Agents lists the inventory (expired agents excluded), optionally only one
// group, sorted by group then agent id.
func (a *Aggregator) Agents(group string, now time.Time) []Agent {
	a.mu.Lock()
	var out []Agent
	for _, m := range a.groups {
		if group != "" && m.group != group {
			continue
		}
		for i := range m.e {
			if !a.expired(&m.e[i], now) {
				out = append(out, a.agent(place{m: m, i: int32(i)}, now))
			}
		}
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
	return len(a.where)
}

// EachCounted calls fn, under the inventory's lock, with the latest
// heartbeat and last-seen time of every agent that counts at now
// (established and not expired: the agents Counts tallies), in no order. fn
// must not call the Aggregator nor keep hb (it is reused). It allocates
// nothing, for readers that only tally (the controller's metrics at a
// scrape).
func (a *Aggregator) EachCounted(now time.Time, fn func(hb *Heartbeat, lastSeen time.Time)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var hb Heartbeat
	for _, m := range a.groups {
		for i := range m.e {
			if e := &m.e[i]; a.counted(e, now) {
				a.heartbeat(e, m.ids[i], m.group, &hb)
				fn(&hb, seenAt(e.lastSeen))
			}
		}
	}
}

// EachAgent calls fn, under the inventory's lock, with every agent not
// expired at now, in no order: its latest heartbeat, when it was last
// heard from, and whether it counts yet (established). fn must not call
// the Aggregator nor keep hb (it is reused). It allocates nothing, for
// readers that pick a few agents out of many (the dashboard's agents
// table).
func (a *Aggregator) EachAgent(now time.Time, fn func(hb *Heartbeat, lastSeen time.Time, established bool)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var hb Heartbeat
	for _, m := range a.groups {
		for i := range m.e {
			if e := &m.e[i]; !a.expired(e, now) {
				a.heartbeat(e, m.ids[i], m.group, &hb)
				fn(&hb, seenAt(e.lastSeen), a.established(e, now))
			}
		}
	}
}

// Lookup returns the agent with id, if it is held and not expired at now.
func (a *Aggregator) Lookup(id rollout.AgentID, now time.Time) (Agent, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.where[id]
	if !ok || a.expired(&p.m.e[p.i], now) {
		return Agent{}, false
	}
	return a.agent(p, now), true
}

// GroupSizes returns, for every group that want accepts, how many of its
// agents count at now (established, not expired: the agents Views
// returns); a group with none is left out. Only the groups want accepts
// are read: the controller asks it for the groups that are not in the
// config (the catch-all's), not for the whole fleet.
func (a *Aggregator) GroupSizes(want func(group string) bool, now time.Time) map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out map[string]int
	for g, m := range a.groups {
		if !want(g) {
			continue
		}
		n := 0
		for i := range m.e {
			if a.counted(&m.e[i], now) {
				n++
			}
		}
		if n > 0 {
			if out == nil {
				out = map[string]int{}
			}
			out[g] = n
		}
	}
	return out
}
