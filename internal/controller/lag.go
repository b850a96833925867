package controller

import (
	"slices"
	"sync"
	"time"
)

// Issue 28, adaptive in flight: how far behind the controller's view of
// its agents is, for adaptive_in_flight (rollout.Input.HeartbeatLag).
//
// Two parts. The age of the heartbeats it reads: when it reads one off the
// subscription, minus the time the agent stamped on it (heartbeat "at"),
// so time spent anywhere between the agent and the controller counts: a
// backed-up leaf node, a slow stream, the controller's own queue. Agents'
// clocks may be off, so the age is the median of the last lagSamples
// heartbeats: a few hosts with a wrong clock do not move it (all of them
// wrong by the same amount would). And the backlog: heartbeats received
// and not read yet (the subscription's queue, and what a scan holds),
// converted to time at the rate the fleet heartbeats (agents per
// heartbeat interval), because a queue that grows is lag before its
// messages are old.

// lagSamples is how many recent heartbeat ages the median is over.
const lagSamples = 511

// lagMeter keeps the ages of the last lagSamples heartbeats read live.
type lagMeter struct {
	mu   sync.Mutex
	ages []time.Duration // a ring of at most lagSamples
	next int
}

// observe records a heartbeat stamped at by its agent and read at now.
// Ages below zero (an agent's clock ahead) count as zero.
func (l *lagMeter) observe(at, now time.Time) {
	if at.IsZero() {
		return
	}
	age := max(now.Sub(at), 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ages) < lagSamples {
		l.ages = append(l.ages, age)
		return
	}
	l.ages[l.next] = age
	l.next = (l.next + 1) % lagSamples
}

// median is the median age of the recent heartbeats, 0 with none.
func (l *lagMeter) median() time.Duration {
	l.mu.Lock()
	ages := slices.Clone(l.ages)
	l.mu.Unlock()
	if len(ages) == 0 {
		return 0
	}
	slices.Sort(ages)
	return ages[len(ages)/2]
}

// heartbeatLag is the lag the rollout pass hands to every group: the
// median age plus the backlog's time to drain at the fleet's heartbeat
// rate, and the backlog.
func (c *Controller) heartbeatLag() (lag time.Duration, backlog int) {
	if f := c.feed.Load(); f != nil {
		backlog = f.backlog()
	}
	lag = c.lag.median()
	if backlog > 0 {
		agents := 0
		for _, app := range c.apps.Load().list {
			agents += app.agg.Len()
		}
		lag += time.Duration(float64(backlog) / float64(max(agents, 1)) * float64(c.o.HeartbeatInterval))
	}
	c.m.heartbeatLag.Set(lag.Seconds())
	c.m.heartbeatBacklog.Set(float64(backlog))
	return lag, backlog
}

// backlog is how many heartbeats the feed received and has not read: the
// subscription's queue, and what it holds while a scan runs.
func (f *inventoryFeed) backlog() int {
	f.mu.Lock()
	held := len(f.held)
	f.mu.Unlock()
	return len(f.ch) + held
}
