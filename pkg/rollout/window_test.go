package rollout

import (
	"testing"
	"time"
)

func TestNextWindow(t *testing.T) {
	tests := []struct {
		name     string
		tz       string
		days     []string
		hour     int
		at       string
		want     string // RFC 3339; "" for the zero time
		inWindow bool
	}{
		{name: "before the hour", tz: "UTC", days: []string{"*"}, hour: 3, at: "2024-03-04T02:59:59Z", want: "2024-03-04T03:00:00Z"},
		{name: "window opens", tz: "UTC", days: []string{"*"}, hour: 3, at: "2024-03-04T03:00:00Z", want: "2024-03-04T03:00:00Z", inWindow: true},
		{name: "inside the hour", tz: "UTC", days: []string{"*"}, hour: 3, at: "2024-03-04T03:59:59Z", want: "2024-03-04T03:00:00Z", inWindow: true},
		{name: "after the hour", tz: "UTC", days: []string{"*"}, hour: 3, at: "2024-03-04T04:00:00Z", want: "2024-03-05T03:00:00Z"},
		{name: "hour 23", tz: "UTC", days: []string{"*"}, hour: 23, at: "2024-03-04T23:30:00Z", want: "2024-03-04T23:00:00Z", inWindow: true},
		{name: "next allowed day", tz: "UTC", days: []string{"Sat"}, hour: 0, at: "2024-03-04T12:00:00Z", want: "2024-03-09T00:00:00Z"},
		{name: "one week ahead", tz: "UTC", days: []string{"Mon"}, hour: 3, at: "2024-03-04T04:00:00Z", want: "2024-03-11T03:00:00Z"},
		{name: "zone shifts the hour", tz: "Europe/Berlin", days: []string{"*"}, hour: 3, at: "2024-01-10T01:30:00Z", want: "2024-01-10T02:00:00Z"},
		{name: "zone shifts the day", tz: "America/Los_Angeles", days: []string{"Mon"}, hour: 20, at: "2024-03-05T03:30:00Z", want: "2024-03-05T04:00:00Z"},
		{name: "zone day inside window", tz: "America/Los_Angeles", days: []string{"Mon"}, hour: 20, at: "2024-03-05T04:10:00Z", want: "2024-03-05T04:00:00Z", inWindow: true},
		{name: "summer time", tz: "Europe/Berlin", days: []string{"*"}, hour: 3, at: "2024-07-01T00:00:00Z", want: "2024-07-01T01:00:00Z"},
		// 02:00 does not exist in Berlin on 2024-03-31: the window opens at
		// the first instant after the jump, 03:00 CEST.
		{name: "skipped hour", tz: "Europe/Berlin", days: []string{"*"}, hour: 2, at: "2024-03-31T00:30:00Z", want: "2024-03-31T01:00:00Z"},
		{name: "skipped hour still one hour", tz: "Europe/Berlin", days: []string{"*"}, hour: 2, at: "2024-03-31T01:59:00Z", want: "2024-03-31T01:00:00Z", inWindow: true},
		{name: "invalid days", tz: "UTC", days: []string{"Someday"}, hour: 3, at: "2024-03-04T03:00:00Z", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := DefaultGroup("g")
			g.Days, g.StartHour = tt.days, tt.hour
			loc := mustLoc(t, tt.tz)
			at := mustTime(t, tt.at)
			got := g.NextWindow(at, loc)
			var want time.Time
			if tt.want != "" {
				want = mustTime(t, tt.want)
			}
			if !got.Equal(want) {
				t.Errorf("NextWindow(%s) = %s, want %s", tt.at, got.UTC().Format(time.RFC3339), tt.want)
			}
			if in := g.InWindow(at, loc); in != tt.inWindow {
				t.Errorf("InWindow(%s) = %v, want %v", tt.at, in, tt.inWindow)
			}
		})
	}
}

// TestWindowRepeatedHour: on the night clocks go back, start hour 2 exists
// twice; the window is still one hour long, once.
func TestWindowRepeatedHour(t *testing.T) {
	g := DefaultGroup("g")
	g.StartHour = 2
	loc := mustLoc(t, "Europe/Berlin")
	var open []string
	for at := mustTime(t, "2024-10-26T22:00:00Z"); at.Before(mustTime(t, "2024-10-27T04:00:00Z")); at = at.Add(time.Minute) {
		if g.InWindow(at, loc) {
			open = append(open, at.Format(time.RFC3339))
		}
	}
	if len(open) != 60 {
		t.Fatalf("window open %d minutes, want 60: %v … %v", len(open), open[:1], open[len(open)-1:])
	}
}

func TestLongestGap(t *testing.T) {
	tests := []struct {
		days []string
		want time.Duration
	}{
		{[]string{"*"}, 24 * time.Hour},
		{[]string{"Mon"}, 168 * time.Hour},
		{[]string{"Mon", "Tue"}, 144 * time.Hour},
		{[]string{"Mon", "Wed", "Fri"}, 72 * time.Hour},
		{[]string{"Mon", "Tue", "Wed", "Thu", "Fri"}, 72 * time.Hour},
		{[]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}, 24 * time.Hour},
	}
	for _, tt := range tests {
		set, err := parseDays(tt.days)
		if err != nil {
			t.Fatal(err)
		}
		if got := set.longestGap(); got != tt.want {
			t.Errorf("longestGap(%v) = %v, want %v", tt.days, got, tt.want)
		}
	}
}
