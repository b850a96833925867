// Package clock is the injected time source of fleetwave's loops: Real in
// production, Manual in tests, so schedules, intervals and expiries are tested
// without sleeping.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the loops use.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration)
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Stop() bool            { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }

// Manual is a clock that moves only when told to. Timers fire, in deadline
// order, when Advance passes their deadline.
type Manual struct {
	mu      sync.Mutex
	now     time.Time
	timers  map[*manualTimer]struct{}
	changed chan struct{} // closed and replaced whenever the timer set changes
}

// NewManual returns a manual clock reading start.
func NewManual(start time.Time) *Manual {
	return &Manual{now: start, timers: make(map[*manualTimer]struct{}), changed: make(chan struct{})}
}

// Now returns the clock's current reading.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// NewTimer returns a timer that fires once the clock reaches now+d.
func (m *Manual) NewTimer(d time.Duration) Timer {
	t := &manualTimer{m: m, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d, firing every timer whose deadline is
// reached, earliest first.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
	var due []*manualTimer
	for t := range m.timers {
		if !t.when.After(m.now) {
			due = append(due, t)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].when.Before(due[j].when) })
	for _, t := range due {
		delete(m.timers, t)
		select {
		case t.c <- t.when:
		default:
		}
	}
	m.notify()
}

// Pending is the number of armed timers.
func (m *Manual) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}

// WaitPending blocks until at least n timers are armed or done is closed, and
// reports whether the count was reached. Tests use it to know that every loop
// has re-armed before they Advance.
func (m *Manual) WaitPending(n int, done <-chan struct{}) bool {
	for {
		m.mu.Lock()
		ok, ch := len(m.timers) >= n, m.changed
		m.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

func (m *Manual) notify() {
	close(m.changed)
	m.changed = make(chan struct{})
}

type manualTimer struct {
	m    *Manual
	c    chan time.Time
	when time.Time
}

func (t *manualTimer) C() <-chan time.Time { return t.c }

func (t *manualTimer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	_, armed := t.m.timers[t]
	delete(t.m.timers, t)
	t.m.notify()
	return armed
}

func (t *manualTimer) Reset(d time.Duration) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	// Drain a fired-but-unread value so Reset behaves like time.Timer in
	// Go 1.23+: no stale tick after a reset.
	select {
	case <-t.c:
	default:
	}
	t.when = t.m.now.Add(d)
	if d <= 0 {
		t.c <- t.when
		delete(t.m.timers, t)
	} else {
		t.m.timers[t] = struct{}{}
	}
	t.m.notify()
}
