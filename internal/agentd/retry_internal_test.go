package agentd

import (
	"testing"
	"time"
)

// TestRetrySchedule: 30s doubling to a 10-minute cap, each wait within
// ±20% of its value.
func TestRetrySchedule(t *testing.T) {
	t.Parallel()
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	for i, w := range want {
		if got := retryDelay(i+1, DefaultRetryBase, DefaultRetryMax); got != w {
			t.Errorf("retryDelay(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := retryDelay(1000, DefaultRetryBase, DefaultRetryMax); got != DefaultRetryMax {
		t.Errorf("retryDelay(1000, DefaultRetryBase, DefaultRetryMax) = %v, want the cap %v", got, DefaultRetryMax)
	}
	// --retry-base 1s --retry-max 3s: 1s, 2s, 3s, 3s.
	for i, w := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		if got := retryDelay(i+1, time.Second, 3*time.Second); got != w {
			t.Errorf("retryDelay(%d, 1s, 3s) = %v, want %v", i+1, got, w)
		}
	}
	for _, tc := range []struct {
		r    float64
		want time.Duration
	}{{0, 8 * time.Minute}, {0.5, 10 * time.Minute}, {0.999999, 12 * time.Minute}} {
		if got := jittered(10*time.Minute, tc.r); got.Round(time.Second) != tc.want {
			t.Errorf("jittered(10m, %v) = %v, want %v", tc.r, got, tc.want)
		}
	}
}
