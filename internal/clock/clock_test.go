package clock_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/clock"
)

var start = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fired reports the value waiting on t's channel, if any, without blocking.
func fired(t clock.Timer) (time.Time, bool) {
	select {
	case v := <-t.C():
		return v, true
	default:
		return time.Time{}, false
	}
}

// Compile-time checks that both clocks satisfy the interface.
var (
	_ clock.Clock = clock.Real{}
	_ clock.Clock = (*clock.Manual)(nil)
)

func TestManualNowAndAdvance(t *testing.T) {
	t.Parallel()
	m := clock.NewManual(start)
	if got := m.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v, want %v", got, start)
	}
	m.Advance(90 * time.Second)
	m.Advance(time.Nanosecond)
	if got, want := m.Now(), start.Add(90*time.Second+time.Nanosecond); !got.Equal(want) {
		t.Errorf("Now after Advance = %v, want %v", got, want)
	}
}

func TestManualTimersFireInDeadlineOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		delays   []time.Duration // one timer per delay, created in this order
		advances []time.Duration
		// wantFired[i] lists the timers (by index) that fire on advance i.
		wantFired [][]int
	}{
		{
			name:      "one big step fires everything due",
			delays:    []time.Duration{3 * time.Second, time.Second, 2 * time.Second},
			advances:  []time.Duration{5 * time.Second},
			wantFired: [][]int{{0, 1, 2}},
		},
		{
			name:      "small steps fire each timer at its deadline, not before",
			delays:    []time.Duration{3 * time.Second, time.Second, 2 * time.Second},
			advances:  []time.Duration{time.Second - time.Nanosecond, time.Nanosecond, time.Second, 999 * time.Millisecond, time.Millisecond},
			wantFired: [][]int{nil, {1}, {2}, nil, {0}},
		},
		{
			name:      "equal deadlines fire together",
			delays:    []time.Duration{time.Minute, time.Minute, time.Hour},
			advances:  []time.Duration{time.Minute, time.Hour},
			wantFired: [][]int{{0, 1}, {2}},
		},
		{
			name:      "zero advance fires nothing pending",
			delays:    []time.Duration{time.Nanosecond},
			advances:  []time.Duration{0, time.Nanosecond},
			wantFired: [][]int{nil, {0}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := clock.NewManual(start)
			timers := make([]clock.Timer, len(tc.delays))
			for i, d := range tc.delays {
				timers[i] = m.NewTimer(d)
			}
			if got := m.Pending(); got != len(tc.delays) {
				t.Fatalf("Pending = %d, want %d", got, len(tc.delays))
			}
			pending := len(tc.delays)
			for step, d := range tc.advances {
				m.Advance(d)
				var got []int
				for i, tm := range timers {
					v, ok := fired(tm)
					if !ok {
						continue
					}
					got = append(got, i)
					// A timer's value is its deadline, as time.Timer's is.
					if want := start.Add(tc.delays[i]); !v.Equal(want) {
						t.Errorf("step %d: timer %d delivered %v, want its deadline %v", step, i, v, want)
					}
				}
				if diff := cmp.Diff(tc.wantFired[step], got); diff != "" {
					t.Errorf("step %d (advance %v): fired timers (-want +got):\n%s", step, d, diff)
				}
				pending -= len(tc.wantFired[step])
				if got := m.Pending(); got != pending {
					t.Errorf("step %d: Pending = %d, want %d", step, got, pending)
				}
			}
		})
	}
}

func TestManualStop(t *testing.T) {
	t.Parallel()
	m := clock.NewManual(start)
	a := m.NewTimer(time.Second)
	b := m.NewTimer(time.Second)
	if !a.Stop() {
		t.Error("Stop of an armed timer returned false")
	}
	if a.Stop() {
		t.Error("second Stop returned true")
	}
	if got := m.Pending(); got != 1 {
		t.Errorf("Pending after Stop = %d, want 1", got)
	}
	m.Advance(time.Hour)
	if _, ok := fired(a); ok {
		t.Error("stopped timer fired")
	}
	if _, ok := fired(b); !ok {
		t.Error("the other timer did not fire")
	}
	if b.Stop() {
		t.Error("Stop of a fired timer returned true")
	}
}

func TestManualReset(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(t *testing.T, m *clock.Manual)
	}{
		{
			name: "re-arm after firing",
			run: func(t *testing.T, m *clock.Manual) {
				tm := m.NewTimer(time.Second)
				m.Advance(time.Second)
				if _, ok := fired(tm); !ok {
					t.Fatal("did not fire")
				}
				tm.Reset(time.Minute)
				m.Advance(time.Minute - time.Nanosecond)
				if _, ok := fired(tm); ok {
					t.Fatal("fired before the new deadline")
				}
				m.Advance(time.Nanosecond)
				if v, ok := fired(tm); !ok || !v.Equal(start.Add(time.Second+time.Minute)) {
					t.Fatalf("after the new deadline: %v, %v; want the deadline %v", v, ok, start.Add(time.Second+time.Minute))
				}
			},
		},
		{
			name: "re-arm after Stop",
			run: func(t *testing.T, m *clock.Manual) {
				tm := m.NewTimer(time.Second)
				tm.Stop()
				tm.Reset(2 * time.Second)
				m.Advance(2 * time.Second)
				if _, ok := fired(tm); !ok {
					t.Fatal("did not fire after Reset")
				}
			},
		},
		{
			name: "postpone an armed timer",
			run: func(t *testing.T, m *clock.Manual) {
				tm := m.NewTimer(time.Second)
				tm.Reset(time.Hour)
				if got := m.Pending(); got != 1 {
					t.Fatalf("Pending = %d, want 1 (Reset re-arms, never duplicates)", got)
				}
				m.Advance(time.Minute)
				if _, ok := fired(tm); ok {
					t.Fatal("fired at the old deadline")
				}
				m.Advance(time.Hour)
				if _, ok := fired(tm); !ok {
					t.Fatal("did not fire at the new deadline")
				}
			},
		},
		{
			name: "reset drops a fired but unread value",
			run: func(t *testing.T, m *clock.Manual) {
				tm := m.NewTimer(time.Second)
				m.Advance(time.Second) // fired, nobody read it
				tm.Reset(time.Minute)
				if v, ok := fired(tm); ok {
					t.Fatalf("stale value %v still readable after Reset", v)
				}
			},
		},
		{
			name: "zero and negative durations fire at once",
			run: func(t *testing.T, m *clock.Manual) {
				for _, d := range []time.Duration{0, -time.Second} {
					tm := m.NewTimer(d)
					if _, ok := fired(tm); !ok {
						t.Fatalf("NewTimer(%v) did not fire at once", d)
					}
					if got := m.Pending(); got != 0 {
						t.Fatalf("NewTimer(%v): Pending = %d, want 0", d, got)
					}
					tm.Reset(d)
					if _, ok := fired(tm); !ok {
						t.Fatalf("Reset(%v) did not fire at once", d)
					}
				}
			},
		},
		{
			name: "reset to zero of an armed timer disarms it",
			run: func(t *testing.T, m *clock.Manual) {
				tm := m.NewTimer(time.Hour)
				tm.Reset(0)
				if _, ok := fired(tm); !ok {
					t.Fatal("Reset(0) did not fire at once")
				}
				if got := m.Pending(); got != 0 {
					t.Fatalf("Pending = %d, want 0", got)
				}
				m.Advance(2 * time.Hour)
				if _, ok := fired(tm); ok {
					t.Fatal("fired again at the old deadline")
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, clock.NewManual(start))
		})
	}
}

func TestManualWaitPending(t *testing.T) {
	t.Parallel()
	t.Run("already armed", func(t *testing.T) {
		t.Parallel()
		m := clock.NewManual(start)
		m.NewTimer(time.Second)
		if !m.WaitPending(1, nil) {
			t.Error("WaitPending(1) = false with one timer armed")
		}
		if !m.WaitPending(0, nil) {
			t.Error("WaitPending(0) = false")
		}
	})
	t.Run("returns when another goroutine arms timers", func(t *testing.T) {
		t.Parallel()
		m := clock.NewManual(start)
		got := make(chan bool, 1)
		go func() { got <- m.WaitPending(3, t.Context().Done()) }()
		for i := range 3 {
			select {
			case v := <-got:
				t.Fatalf("WaitPending returned %v with only %d timers armed", v, i)
			default:
			}
			m.NewTimer(time.Duration(i+1) * time.Second)
		}
		select {
		case v := <-got:
			if !v {
				t.Error("WaitPending = false, want true")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WaitPending did not return after 3 timers were armed")
		}
	})
	t.Run("re-armed after firing", func(t *testing.T) {
		t.Parallel()
		m := clock.NewManual(start)
		tm := m.NewTimer(time.Second)
		m.Advance(time.Second)
		got := make(chan bool, 1)
		go func() { got <- m.WaitPending(1, t.Context().Done()) }()
		<-tm.C()
		tm.Reset(time.Second)
		select {
		case v := <-got:
			if !v {
				t.Error("WaitPending = false, want true")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WaitPending did not see the timer re-armed by Reset")
		}
	})
	t.Run("false when done is closed", func(t *testing.T) {
		t.Parallel()
		m := clock.NewManual(start)
		m.NewTimer(time.Second)
		done := make(chan struct{})
		got := make(chan bool, 1)
		go func() { got <- m.WaitPending(2, done) }()
		close(done)
		select {
		case v := <-got:
			if v {
				t.Error("WaitPending = true with one timer armed, want false")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WaitPending did not return after done was closed")
		}
	})
	t.Run("false when done was closed before the call", func(t *testing.T) {
		t.Parallel()
		m := clock.NewManual(start)
		done := make(chan struct{})
		close(done)
		if m.WaitPending(1, done) {
			t.Error("WaitPending = true with no timer armed")
		}
	})
}

func TestRealTimer(t *testing.T) {
	t.Parallel()
	c := clock.Real{}
	before := time.Now()
	if now := c.Now(); now.Before(before) {
		t.Errorf("Real.Now = %v, before time.Now %v", now, before)
	}
	tm := c.NewTimer(time.Millisecond)
	select {
	case v := <-tm.C():
		if v.Before(before) {
			t.Errorf("timer delivered %v, before it was created at %v", v, before)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("real timer did not fire")
	}
	tm.Reset(time.Hour)
	if !tm.Stop() {
		t.Error("Stop of a re-armed real timer returned false")
	}
	if tm.Stop() {
		t.Error("second Stop returned true")
	}
}
