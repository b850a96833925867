package rollout

import (
	"fmt"
	"strings"
	"time"
)

// A group may start only inside its window: the hour that begins at
// start_hour (in the config's time zone) on one of its days. The window gates
// the start only; a started group keeps going outside it. Waiting for a
// window is visible in the group status and never counts as a failure or
// towards alert_after, which runs from the group's start.

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
// are invalid. A start hour that a daylight-saving jump skips opens at the
// first instant after the jump (time.Date's rule) and lasts one hour.
func (g GroupConfig) NextWindow(t time.Time, loc *time.Location) time.Time {
	set, err := parseDays(g.Days)
	if err != nil || g.StartHour < 0 || g.StartHour > 23 {
		return time.Time{}
	}
	if loc == nil {
		loc = time.UTC
	}
	lt := t.In(loc)
	y, m, d := lt.Date()
	for i := -1; i <= 8; i++ {
		open := time.Date(y, m, d+i, g.StartHour, 0, 0, 0, loc)
		if !set[open.Weekday()] {
			continue
		}
		if t.Before(open.Add(time.Hour)) {
			return open
		}
	}
	return time.Time{}
}

// InWindow reports whether t is inside one of the group's start windows.
func (g GroupConfig) InWindow(t time.Time, loc *time.Location) bool {
	open := g.NextWindow(t, loc)
	return !open.IsZero() && !open.After(t)
}

// longestGap is the longest time between two consecutive window openings:
// 24h when every day is allowed, 168h when one day is.
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

func describeWindow(g GroupConfig, loc *time.Location) string {
	days := strings.Join(g.Days, ",")
	return fmt.Sprintf("%s %02d:00-%02d:00 %s", days, g.StartHour, (g.StartHour+1)%24, loc)
}
