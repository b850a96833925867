package sim

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// tracker is the simulator's own knowledge of the fleet, shared by shards.
type tracker struct {
	beats   atomic.Uint64
	churned atomic.Uint64

	mu        sync.Mutex
	specAt    time.Time // when the test wrote the spec (zero before)
	notifyLat []time.Duration
	groups    []groupTrack
}

type groupTrack struct {
	status          rollout.GroupStatus
	rev             uint64
	inFlight        int
	maxCanary       int // max agents installing at once while the group was in canary
	maxActive       int // ... in active (or done)
	starts          int // install attempts of the target
	badStarts       map[rollout.AgentID]struct{}
	startsAfterHalt int
	failed          int
	stuck           int // hosts whose install never ends (still in inFlight)
	haltSeen        time.Time
	blocked         int // attempts blocked on infrastructure
	blockedHosts    map[rollout.AgentID]struct{}
	maxBlocked      int  // the controller's blocked count, at most
	heldSeen        bool // the controller held the group
	// onTarget counts the hosts on the target now; onTargetAtHalt when
	// the halt was seen.
	onTarget         int
	onTargetAtHalt   int
	inconclusiveSeen bool // a check of the group was inconclusive
	// Issue 28: the adaptive bound and the rate as the statuses said.
	adaptive      AdaptiveReport
	adaptiveSince time.Time
	rate          RateReport
	// win is a windowed run's record of the group (timebased.go).
	win windowTrack
}

func newTracker(groups int) *tracker {
	t := &tracker{groups: make([]groupTrack, groups)}
	for i := range t.groups {
		t.groups[i].badStarts = map[rollout.AgentID]struct{}{}
		t.groups[i].blockedHosts = map[rollout.AgentID]struct{}{}
	}
	return t
}

func (t *tracker) setSpecAt(at time.Time) {
	t.mu.Lock()
	t.specAt = at
	t.mu.Unlock()
}

// notified records n agents that saw the spec by now.
func (t *tracker) notified(now time.Time, n int) {
	t.mu.Lock()
	if !t.specAt.IsZero() {
		d := now.Sub(t.specAt)
		for range n {
			t.notifyLat = append(t.notifyLat, d)
		}
	}
	t.mu.Unlock()
}

// observeStatus records a group status read at revision rev, and reports
// whether it is new.
func (t *tracker) observeStatus(g int, st rollout.GroupStatus, rev uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	gt := &t.groups[g]
	if rev <= gt.rev {
		return false
	}
	gt.win.observeTransition(gt.status, st, gt.onTarget)
	gt.status, gt.rev = st, rev
	gt.maxBlocked = max(gt.maxBlocked, st.Blocked)
	gt.heldSeen = gt.heldSeen || st.Held != ""
	for _, c := range st.Analysis {
		gt.inconclusiveSeen = gt.inconclusiveSeen || c.Inconclusive > 0
	}
	if a := st.Adaptive; a != nil {
		ar := &gt.adaptive
		if ar.Start == 0 {
			ar.Start, ar.Min, ar.Max, ar.Moves = a.Bound, a.Bound, a.Bound, map[string]int{}
		}
		if !a.Since.Equal(gt.adaptiveSince) {
			ar.Moves[a.Cause]++
			gt.adaptiveSince = a.Since
		}
		ar.Min, ar.Max, ar.Last, ar.Window = min(ar.Min, a.Bound), max(ar.Max, a.Bound), a.Bound, a.Max
	}
	if r := st.Rate; r != nil {
		if n := len(gt.rate.Allowances); n == 0 || gt.rate.Allowances[n-1] != r.Allowance {
			gt.rate.Allowances = append(gt.rate.Allowances, r.Allowance)
		}
		gt.rate.MaxStarted = max(gt.rate.MaxStarted, r.Started)
	}
	if st.Halted && gt.haltSeen.IsZero() {
		gt.haltSeen = time.Now()
		gt.onTargetAtHalt = gt.onTarget
	}
	return true
}

// onTargetChanged adds d to the group's hosts on the target.
func (t *tracker) onTargetChanged(g, d int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.groups[g].onTarget += d
}

// sample records in-flight maxima; called on every install start and end.
func (t *tracker) sample(g int, st rollout.GroupStatus) {
	gt := &t.groups[g]
	if st.State == rollout.StateCanary {
		gt.maxCanary = max(gt.maxCanary, gt.inFlight)
	} else {
		gt.maxActive = max(gt.maxActive, gt.inFlight)
	}
}

func (t *tracker) installStarted(g int, id rollout.AgentID, version string, st rollout.GroupStatus, bad bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	gt := &t.groups[g]
	gt.inFlight++
	gt.starts++
	if bad {
		gt.badStarts[id] = struct{}{}
	}
	if !gt.haltSeen.IsZero() {
		gt.startsAfterHalt++
	}
	t.sample(g, st)
}

func (t *tracker) installFinished(g int, failed bool, st rollout.GroupStatus) {
	t.mu.Lock()
	defer t.mu.Unlock()
	gt := &t.groups[g]
	gt.inFlight--
	if failed {
		gt.failed++
	}
	t.sample(g, st)
}

// installBlocked records an install attempt that ended blocked on
// infrastructure (installFinished records its end).
func (t *tracker) installBlocked(g int, id rollout.AgentID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.groups[g].blocked++
	t.groups[g].blockedHosts[id] = struct{}{}
}

// installStuck records that an install just started will never end.
func (t *tracker) installStuck(g int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.groups[g].stuck++
}

type stuckCount struct{ n, inFlight int }

// stuckCounts are, per group, the stuck hosts and all installs in flight.
func (t *tracker) stuckCounts() []stuckCount {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]stuckCount, len(t.groups))
	for i, g := range t.groups {
		out[i] = stuckCount{g.stuck, g.inFlight}
	}
	return out
}

func (t *tracker) installAborted(g int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.groups[g].inFlight--
}

func (t *tracker) snapshot() (statuses []rollout.GroupStatus, inFlight int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.groups {
		statuses = append(statuses, t.groups[i].status)
		inFlight += t.groups[i].inFlight
	}
	return statuses, inFlight
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func sortDurations(d []time.Duration) []time.Duration {
	out := append([]time.Duration(nil), d...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
