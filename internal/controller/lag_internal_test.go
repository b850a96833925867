package controller

import (
	"testing"
	"time"
)

// The heartbeat lag is a median: a minority of hosts whose clocks are off
// (or which stamp their heartbeats as they like) does not move it either
// way, and a stamp from the future counts as no lag, never as negative.
func TestLagMeterMedian(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var l lagMeter
	if got := l.median(); got != 0 {
		t.Fatalf("median of nothing %v, want 0", got)
	}
	for i := range 2 * lagSamples {
		at := now.Add(-200 * time.Millisecond)
		switch i % 5 {
		case 0:
			at = now.Add(-time.Hour) // a clock an hour behind
		case 1:
			at = now.Add(time.Hour) // an hour ahead: age 0
		}
		l.observe(at, now)
	}
	if got := l.median(); got != 200*time.Millisecond {
		t.Errorf("median %v with 2 in 5 skewed clocks, want 200ms", got)
	}
	if len(l.ages) != lagSamples {
		t.Errorf("%d samples kept, want %d", len(l.ages), lagSamples)
	}
	// Once most recent heartbeats are late, it is lag.
	for range lagSamples/2 + 1 {
		l.observe(now.Add(-3*time.Second), now)
	}
	if got := l.median(); got != 3*time.Second {
		t.Errorf("median %v after a majority of late heartbeats, want 3s", got)
	}
	l.observe(time.Time{}, now) // no stamp: not a sample
	if got := l.median(); got != 3*time.Second {
		t.Errorf("a heartbeat without at moved the median to %v", got)
	}
}
