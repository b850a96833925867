package sim

import (
	"runtime"
	"time"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Progress is what a run looks like at one moment (Options.Progress).
type Progress struct {
	// Phase is "warm-up" (agents starting, until the controller counts
	// them all) or "rollout" (from the spec write); Elapsed is since the
	// start of the phase.
	Phase   string
	Elapsed time.Duration
	Groups  []GroupProgress
	// HeartbeatsPerSec is what the controller received since the last
	// Progress, per second.
	HeartbeatsPerSec float64
	// Inventory is how many agents the controller holds (every app's:
	// a host running N apps is N entries).
	Inventory  int
	RSSBytes   int64
	Goroutines int
	// RolloutPass and StatsWrite are the controller's own timings of its
	// passes since the last Progress.
	RolloutPass, StatsWrite PassTimes
}

// GroupProgress is one group at that moment: the controller's status as
// the simulator last read it, and the simulator's own counts.
type GroupProgress struct {
	Name     string        `json:"name"`
	State    rollout.State `json:"state"`
	Halted   bool          `json:"halted"`
	Initial  int           `json:"initial_count"`
	OnTarget int           `json:"on_target"`
	InFlight int           `json:"in_flight"`
}

// PassTimes sum up the controller's passes of one kind, from its own
// histograms (fleetwave_rollout_pass_duration_seconds and
// fleetwave_stats_write_duration_seconds): how many, their mean, and the
// upper bound of the histogram bucket the slowest fell in (the buckets are
// 1 ms × 4^k, so "at most").
type PassTimes struct {
	Count   uint64        `json:"count"`
	Mean    time.Duration `json:"mean_ns"`
	AtMost  time.Duration `json:"at_most_ns"`
	sum     float64
	buckets []uint64 // cumulative counts per upper bound in bounds
	bounds  []float64
}

// passTimes reads both histograms from the controller's registry.
func passTimes(ctrl *controller.Controller) (rollout, stats PassTimes) {
	fams, err := ctrl.Registry().Gather()
	if err != nil {
		return
	}
	for _, f := range fams {
		var p *PassTimes
		switch f.GetName() {
		case "fleetwave_rollout_pass_duration_seconds":
			p = &rollout
		case "fleetwave_stats_write_duration_seconds":
			p = &stats
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			p.Count, p.sum = h.GetSampleCount(), h.GetSampleSum()
			for _, b := range h.GetBucket() {
				p.buckets = append(p.buckets, b.GetCumulativeCount())
				p.bounds = append(p.bounds, b.GetUpperBound())
			}
		}
	}
	return rollout, stats
}

// since is p minus an earlier reading of the same histogram.
func (p PassTimes) since(prev PassTimes) PassTimes {
	d := PassTimes{Count: p.Count - prev.Count, sum: p.sum - prev.sum}
	if d.Count > 0 {
		d.Mean = time.Duration(d.sum / float64(d.Count) * float64(time.Second))
	}
	// The slowest is in the first bucket that holds them all; -1: beyond
	// the last bound.
	d.AtMost, d.bounds = -1, p.bounds
	for i, c := range p.buckets {
		var before uint64
		if i < len(prev.buckets) {
			before = prev.buckets[i]
		}
		if c-before == d.Count {
			d.AtMost = time.Duration(p.bounds[i] * float64(time.Second))
			break
		}
	}
	if d.Count == 0 {
		d.AtMost = 0
	}
	return d
}

// inventory is the size of every app's inventory in the controller.
func inventory(ctrl *controller.Controller, apps int) int {
	n := 0
	for _, app := range appNames(apps) {
		if agg := ctrl.AppInventory(app); agg != nil {
			n += agg.Len()
		}
	}
	return n
}

func (s *Sim) progress(ctrl *controller.Controller, phase string, start time.Time, prev *progressMark) Progress {
	now := time.Now()
	recv, _ := ctrl.Counters()
	rp, sw := passTimes(ctrl)
	p := Progress{
		Phase:            phase,
		Elapsed:          now.Sub(start),
		HeartbeatsPerSec: float64(recv-prev.recv) / now.Sub(prev.at).Seconds(),
		Inventory:        inventory(ctrl, s.o.Apps),
		RSSBytes:         rss(),
		Goroutines:       runtime.NumGoroutine(),
		RolloutPass:      rp.since(prev.rollout),
		StatsWrite:       sw.since(prev.stats),
	}
	*prev = progressMark{at: now, recv: recv, rollout: rp, stats: sw}
	s.stats.mu.Lock()
	for i, gt := range s.stats.groups {
		p.Groups = append(p.Groups, GroupProgress{
			Name: s.groups[i], State: gt.status.State, Halted: gt.status.Halted,
			Initial: gt.status.InitialCount, OnTarget: gt.onTarget, InFlight: gt.inFlight,
		})
	}
	s.stats.mu.Unlock()
	return p
}

type progressMark struct {
	at             time.Time
	recv           uint64
	rollout, stats PassTimes
}
