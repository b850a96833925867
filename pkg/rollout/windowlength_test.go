package rollout

import (
	"strings"
	"testing"
	"time"
)

// TestWindowLength: window_length sets how long each window stays open;
// a window that crosses midnight belongs to the day it opens on; across a
// daylight-saving change in a named zone it lasts window_length of elapsed
// time from the instant it opens (the wall-clock end moves by the jump).
func TestWindowLength(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		tz       string
		days     []string
		hour     int
		length   time.Duration
		at       string
		want     string // NextWindow, RFC 3339; "" for the zero time
		inWindow bool
	}{
		{name: "3h window, inside its last minute", tz: "UTC", days: []string{"*"}, hour: 3, length: 3 * time.Hour, at: "2024-03-04T05:59:00Z", want: "2024-03-04T03:00:00Z", inWindow: true},
		{name: "3h window, closed at its end", tz: "UTC", days: []string{"*"}, hour: 3, length: 3 * time.Hour, at: "2024-03-04T06:00:00Z", want: "2024-03-05T03:00:00Z"},
		{name: "15m window", tz: "UTC", days: []string{"*"}, hour: 3, length: 15 * time.Minute, at: "2024-03-04T03:15:00Z", want: "2024-03-05T03:00:00Z"},
		{name: "1h default unchanged", tz: "UTC", days: []string{"*"}, hour: 3, at: "2024-03-04T03:59:59Z", want: "2024-03-04T03:00:00Z", inWindow: true},
		// Mon 22:00 + 4h: open until Tue 02:00, although Tuesday is not
		// one of its days.
		{name: "midnight: Monday before midnight", tz: "UTC", days: []string{"Mon"}, hour: 22, length: 4 * time.Hour, at: "2024-03-04T23:30:00Z", want: "2024-03-04T22:00:00Z", inWindow: true},
		{name: "midnight: Tuesday after midnight", tz: "UTC", days: []string{"Mon"}, hour: 22, length: 4 * time.Hour, at: "2024-03-05T01:59:00Z", want: "2024-03-04T22:00:00Z", inWindow: true},
		{name: "midnight: Tuesday at the end", tz: "UTC", days: []string{"Mon"}, hour: 22, length: 4 * time.Hour, at: "2024-03-05T02:00:00Z", want: "2024-03-11T22:00:00Z"},
		{name: "midnight: Monday 01:00 is Sunday's window, not Monday's", tz: "UTC", days: []string{"Mon"}, hour: 22, length: 4 * time.Hour, at: "2024-03-04T01:00:00Z", want: "2024-03-04T22:00:00Z"},
		{name: "midnight: Sunday's window open Monday morning", tz: "UTC", days: []string{"Sun"}, hour: 22, length: 4 * time.Hour, at: "2024-03-04T01:00:00Z", want: "2024-03-03T22:00:00Z", inWindow: true},
		{name: "midnight in a zone", tz: "America/New_York", days: []string{"Fri"}, hour: 23, length: 2 * time.Hour, at: "2024-03-09T05:30:00Z", want: "2024-03-09T04:00:00Z", inWindow: true},
		{name: "24h window every day is always open", tz: "UTC", days: []string{"*"}, hour: 12, length: 24 * time.Hour, at: "2024-03-04T11:59:59Z", want: "2024-03-03T12:00:00Z", inWindow: true},
		{name: "24h window one day a week", tz: "UTC", days: []string{"Sat"}, hour: 0, length: 24 * time.Hour, at: "2024-03-10T00:00:00Z", want: "2024-03-16T00:00:00Z"},
		// Berlin springs forward on Sun 2024-03-31 at 01:00Z (02:00 CET →
		// 03:00 CEST). A Saturday 23:00 CET (22:00Z) 5h window lasts 5h
		// of elapsed time: until 03:00Z, 05:00 CEST on the wall.
		{name: "DST spring forward: open at 03:30 CEST", tz: "Europe/Berlin", days: []string{"Sat"}, hour: 23, length: 5 * time.Hour, at: "2024-03-31T01:30:00Z", want: "2024-03-30T22:00:00Z", inWindow: true},
		{name: "DST spring forward: closed 5h after it opened", tz: "Europe/Berlin", days: []string{"Sat"}, hour: 23, length: 5 * time.Hour, at: "2024-03-31T03:00:00Z", want: "2024-04-06T21:00:00Z"},
		// Berlin falls back on Sun 2024-10-27 at 01:00Z (03:00 CEST →
		// 02:00 CET). A Saturday 23:00 CEST (21:00Z) 5h window closes at
		// 02:00Z, 03:00 CET on the wall.
		{name: "DST fall back: open at 02:30 CET", tz: "Europe/Berlin", days: []string{"Sat"}, hour: 23, length: 5 * time.Hour, at: "2024-10-27T01:30:00Z", want: "2024-10-26T21:00:00Z", inWindow: true},
		{name: "DST fall back: closed 5h after it opened", tz: "Europe/Berlin", days: []string{"Sat"}, hour: 23, length: 5 * time.Hour, at: "2024-10-27T02:00:00Z", want: "2024-11-02T22:00:00Z"},
		// Start hour 2 does not exist on the spring-forward day: the
		// window opens at 03:00 CEST (01:00Z) and lasts its 3h.
		{name: "DST skipped start hour lasts its length", tz: "Europe/Berlin", days: []string{"Sun"}, hour: 2, length: 3 * time.Hour, at: "2024-03-31T03:59:00Z", want: "2024-03-31T01:00:00Z", inWindow: true},
		{name: "DST skipped start hour ends on time", tz: "Europe/Berlin", days: []string{"Sun"}, hour: 2, length: 3 * time.Hour, at: "2024-03-31T04:00:00Z", want: "2024-04-07T00:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := DefaultGroup("g")
			g.Days, g.StartHour, g.WindowLength = tt.days, tt.hour, Duration(tt.length)
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

// TestWindowLengthElapsedAcrossDST counts the minutes a 5h Saturday 23:00
// window is open on the nights Berlin changes its clocks: always 300, so
// the wall clock says 6h in spring and 4h in autumn.
func TestWindowLengthElapsedAcrossDST(t *testing.T) {
	t.Parallel()
	g := DefaultGroup("g")
	g.Days, g.StartHour, g.WindowLength = []string{"Sat"}, 23, Duration(5*time.Hour)
	loc := mustLoc(t, "Europe/Berlin")
	for _, night := range []struct{ from, firstWall, lastWall string }{
		{"2024-03-30T18:00:00Z", "23:00 CET", "04:59 CEST"},
		{"2024-10-26T18:00:00Z", "23:00 CEST", "02:59 CET"},
	} {
		var open []time.Time
		from := mustTime(t, night.from)
		for at := from; at.Before(from.Add(10 * time.Hour)); at = at.Add(time.Minute) {
			if g.InWindow(at, loc) {
				open = append(open, at)
			}
		}
		if len(open) != 300 {
			t.Fatalf("%s: open %d minutes, want 300", night.from, len(open))
		}
		first, last := open[0].In(loc).Format("15:04 MST"), open[len(open)-1].In(loc).Format("15:04 MST")
		if first != night.firstWall || last != night.lastWall {
			t.Errorf("%s: open %s to %s, want %s to %s", night.from, first, last, night.firstWall, night.lastWall)
		}
	}
}

// TestWindowLengthNextStart: Next starts a group in the later part of a
// long window, and waits after it, naming the length.
func TestWindowLengthNextStart(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Groups[0].StartHour, cfg.Groups[0].Days, cfg.Groups[0].WindowLength = 22, []string{"Mon"}, Duration(4*time.Hour)
	agents := onVersion(spreadIDs(10, 0.5), v1)
	in := Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Agents: agents, Counts: CountAgents(agents)}

	in.Now = mustTime(t, "2024-03-05T01:30:00Z") // Tue 01:30: Monday's window
	st, _ := Next(in)
	if st.State != StateCanary || st.Waiting != "" {
		t.Errorf("in Monday's window after midnight: %s, waiting %q", st.State, st.Waiting)
	}
	in.Now = mustTime(t, "2024-03-05T02:00:00Z")
	st, _ = Next(in)
	want := "window: next opens Mon 2024-03-11 22:00 UTC (Mon 22:00-02:00 next day UTC (window_length 4h))"
	if st.State != StateUnstarted || st.Waiting != want || !st.WaitingUntil.Equal(mustTime(t, "2024-03-11T22:00:00Z")) {
		t.Errorf("after the window: %s, waiting %q until %s; want %q", st.State, st.Waiting, st.WaitingUntil, want)
	}
}

func TestDescribeWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		days   []string
		hour   int
		length time.Duration
		want   string
	}{
		{[]string{"*"}, 3, 0, "* 03:00-04:00 UTC"},
		{[]string{"*"}, 23, time.Hour, "* 23:00-00:00 UTC"},
		{[]string{"Mon"}, 22, 4 * time.Hour, "Mon 22:00-02:00 next day UTC (window_length 4h)"},
		{[]string{"Mon", "Fri"}, 9, 90 * time.Minute, "Mon,Fri 09:00-10:30 UTC (window_length 1h30m)"},
		{[]string{"*"}, 0, 24 * time.Hour, "* 00:00-00:00 next day UTC (window_length 24h)"},
		{[]string{"Sat"}, 10, 15 * time.Minute, "Sat 10:00-10:15 UTC (window_length 15m)"},
	} {
		g := DefaultGroup("g")
		g.Days, g.StartHour, g.WindowLength = tc.days, tc.hour, Duration(tc.length)
		if got := describeWindow(g, time.UTC); got != tc.want {
			t.Errorf("describeWindow(%v %d %s) = %q, want %q", tc.days, tc.hour, tc.length, got, tc.want)
		}
	}
}

// TestChainDelayWindowLength: a longer window shortens what a group adds
// to its chain (it waits at most the gap less its window), so a weekly
// group after a daily one fits the week with wait_hours when its window
// is long enough; the default hour counts as before.
func TestChainDelayWindowLength(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		length time.Duration
		wait   int
		delay  time.Duration
		valid  bool
	}{
		{"default hour, as before", 0, 1, 169 * time.Hour, false},
		{"explicit hour, as before", time.Hour, 1, 169 * time.Hour, false},
		{"4h window takes 3h off", 4 * time.Hour, 1, 166 * time.Hour, true},
		{"4h window, 4h wait", 4 * time.Hour, 4, 169 * time.Hour, false},
		{"24h window", 24 * time.Hour, 24, 169 * time.Hour, false},
		{"24h window, 23h wait", 24 * time.Hour, 23, 168 * time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			staging, prod := DefaultGroup("staging"), DefaultGroup("prod")
			prod.Days, prod.WaitHours, prod.WindowLength = []string{"Tue"}, tc.wait, Duration(tc.length)
			c := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{staging, prod}}
			delay, _, err := c.ChainDelay()
			if err != nil {
				t.Fatal(err)
			}
			if delay != tc.delay {
				t.Errorf("delay %s, want %s", delay, tc.delay)
			}
			err = c.Validate()
			if tc.valid != (err == nil) {
				t.Errorf("Validate() = %v, want valid %v", err, tc.valid)
			}
			if err != nil && !strings.Contains(err.Error(), "less its window_length beyond one hour") {
				t.Errorf("error does not explain window_length: %v", err)
			}
		})
	}
}
