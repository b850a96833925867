package rollout

import (
	"fmt"
	"strings"
	"time"
)

// A group may start only inside its window: window_length (one hour unless
// set, 15m-24h) from start_hour (in the config's time zone) on one of its
// days. Under the regular schedule the window gates the start only; a
// started group keeps going outside it. Under the time-based schedule
// (timebased.go) a group updates only inside its windows. Waiting for a
// window is visible in the group status and never counts as a failure or
// towards alert_after, which runs from the group's start.
//
// A window belongs to the day it opens on: days ["Mon"] with start_hour 22
// and window_length 4h is open Monday 22:00 to Tuesday 02:00. Its length is
// elapsed time from the instant it opens, not wall-clock time: on the night
// a daylight-saving change falls inside it, that window ends an hour later
// (spring forward: 22:00 CET + 4h is 03:00 CEST) or earlier (fall back:
// 22:00 CEST + 4h is 01:00 CET) on the wall clock, and is always exactly
// window_length long. A start hour the spring-forward jump skips opens at
// the first instant after the jump (time.Date's rule); a start hour that
// exists twice in the fall-back night opens at its first occurrence (the
// one time.Date returns). Either way the window lasts window_length once.

var dayNames = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// weekdays is a set of allowed days, indexed by time.Weekday.
type weekdays [7]bool

// parseDays reads a days list: "Sun".."Sat" in any letter case, or "*"
// alone for every day.
func parseDays(days []string) (weekdays, error) {
	var set weekdays
	if len(days) == 0 {
		return set, fmt.Errorf(`days: empty; list days like ["Mon","Tue"] or use ["*"] for every day`)
	}
	for _, d := range days {
		if d == "*" {
			if len(days) != 1 {
				return set, fmt.Errorf(`days %q: "*" means every day and must be alone`, days)
			}
			for i := range set {
				set[i] = true
			}
			return set, nil
		}
		found := false
		for i, name := range dayNames {
			if strings.EqualFold(d, name) {
				set[i], found = true, true
			}
		}
		if !found {
			return set, fmt.Errorf(`days: %q is not a day; use Sun, Mon, Tue, Wed, Thu, Fri, Sat or "*"`, truncate(d, 20))
		}
	}
	return set, nil
}

// NextWindow returns the start of the window that is open at t, or else of
// the next one after t, in loc. It returns the zero time when the group's days
// are invalid. A window that opened the day before and is still open at t
// (one that crosses midnight) is the one open at t.
func (g GroupConfig) NextWindow(t time.Time, loc *time.Location) time.Time {
	set, err := parseDays(g.Days)
	if err != nil || g.StartHour < 0 || g.StartHour > 23 {
		return time.Time{}
	}
	if loc == nil {
		loc = time.UTC
	}
	length := g.EffectiveWindowLength().D()
	lt := t.In(loc)
	y, m, d := lt.Date()
	// A window is at most 24h (25h of wall clock on a fall-back night):
	// only yesterday's can still be open today.
	for i := -1; i <= 8; i++ {
		open := time.Date(y, m, d+i, g.StartHour, 0, 0, 0, loc)
		if !set[open.Weekday()] {
			continue
		}
		if t.Before(open.Add(length)) {
			return open
		}
	}
	return time.Time{}
}

// WindowEnd is when the group's window that opens at open closes:
// window_length of elapsed time later, whatever the wall clock does.
func (g GroupConfig) WindowEnd(open time.Time) time.Time {
	return open.Add(g.EffectiveWindowLength().D())
}

// InWindow reports whether t is inside one of the group's start windows.
func (g GroupConfig) InWindow(t time.Time, loc *time.Location) bool {
	open := g.NextWindow(t, loc)
	return !open.IsZero() && !open.After(t)
}

// longestGap is the longest time between two consecutive window openings:
// 24h when every day is allowed, 168h when one day is. A group waiting for
// its window waits at most longestGap minus window_length (it just missed
// one); see chainStep.
func (w weekdays) longestGap() time.Duration {
	var days []int
	for i, ok := range w {
		if ok {
			days = append(days, i)
		}
	}
	if len(days) == 0 {
		return 0
	}
	longest := 0
	for i, d := range days {
		next := days[(i+1)%len(days)]
		gap := (next - d + 7) % 7
		if gap == 0 {
			gap = 7
		}
		longest = max(longest, gap)
	}
	return time.Duration(longest) * 24 * time.Hour
}

// chainStep is what a group after the first adds to a dependency chain's
// delay (Config.ChainDelay): its wait_hours plus the longest wait for its
// window, longestGap minus window_length, plus one hour of slack. The
// slack keeps the one-hour window's count exactly what it was before
// window_length existed (the whole gap), so no config that was refused
// before is accepted now; a longer window shortens the step by as much as
// it is longer than an hour.
func (g GroupConfig) chainStep() time.Duration {
	set, _ := parseDays(g.Days)
	gap := set.longestGap()
	wait := max(gap-g.EffectiveWindowLength().D()+time.Hour, 0)
	return time.Duration(g.WaitHours)*time.Hour + wait
}

// describeWindow says when the group's windows are open, for people:
// "Mon,Fri 14:00-15:00 Europe/Berlin" for the default one hour (as before
// window_length existed), and with the length and the day the window
// closes when it is set: "Mon 22:00-02:00 next day Europe/Berlin
// (window_length 4h)". The end is the wall-clock end on a night without a
// daylight-saving change.
func describeWindow(g GroupConfig, loc *time.Location) string {
	days := strings.Join(g.Days, ",")
	length := g.EffectiveWindowLength()
	if length == DefaultWindowLength {
		return fmt.Sprintf("%s %02d:00-%02d:00 %s", days, g.StartHour, (g.StartHour+1)%24, loc)
	}
	endMin := g.StartHour*60 + int(length.D()/time.Minute)
	end := fmt.Sprintf("%02d:%02d", endMin/60%24, endMin%60)
	if endMin >= 24*60 {
		end += " next day"
	}
	return fmt.Sprintf("%s %02d:00-%s %s (window_length %s)", days, g.StartHour, end, loc, length)
}
