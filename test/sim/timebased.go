package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Windowed runs (issue 28): a rollout that follows the groups' windows
// (Options.Windows, with any schedule, time-based included) over days of
// simulated time, on a compressed clock (Options.TimeScale). The
// controller and the virtual agents both read that clock, so every time
// they compare (heartbeat ages, update_timeout, windows, the status's
// times) is simulated time; the simulator hands them their durations in
// simulated time too (Options' durations times the scale), so the run
// paces in real time exactly as an uncompressed one does.

// Window is a group's start window in a windowed run.
type Window struct {
	Days      []string      // ["*"] when empty
	StartHour int           // 0-23, in Options.Timezone
	Length    time.Duration // window_length; 0: one hour
	// MaxInFlight is the group's max_in_flight (0: Options.MaxInFlight).
	MaxInFlight rollout.Percent
}

// Transition is one state change of a group as the simulator read it, at
// the status's Since (simulated time).
type Transition struct {
	At       time.Time     `json:"at"`
	From     rollout.State `json:"from"`
	To       rollout.State `json:"to"`
	Reason   string        `json:"reason"`
	OnTarget int           `json:"on_target"`
}

// scaledClock is a clock.Clock that runs scale times faster than the wall
// clock from start: Now is start + scale × (real time since real0), and a
// timer of d fires after d / scale of real time.
type scaledClock struct {
	start, real0 time.Time
	scale        float64
}

func newScaledClock(start time.Time, scale float64) *scaledClock {
	return &scaledClock{start: start, real0: time.Now(), scale: scale}
}

func (c *scaledClock) Now() time.Time {
	return c.start.Add(time.Duration(float64(time.Since(c.real0)) * c.scale))
}

func (c *scaledClock) NewTimer(d time.Duration) clock.Timer {
	return &scaledTimer{t: time.NewTimer(c.real(d)), c: c}
}

// real is the real duration of simulated d.
func (c *scaledClock) real(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.scale)
}

type scaledTimer struct {
	t *time.Timer
	c *scaledClock
}

func (t *scaledTimer) C() <-chan time.Time   { return t.t.C }
func (t *scaledTimer) Stop() bool            { return t.t.Stop() }
func (t *scaledTimer) Reset(d time.Duration) { t.t.Reset(t.c.real(d)) }

// scaled reports whether the run is on a compressed clock.
func (s *Sim) scaled() bool { return s.clk != nil }

// now is the agents' and the controller's time: simulated on a windowed
// run, else the wall clock.
func (s *Sim) now() time.Time {
	if s.clk != nil {
		return s.clk.Now()
	}
	return time.Now()
}

// simDur is d (an Options duration, in real time) as the agents and the
// controller count it: d × TimeScale on a compressed clock.
func (s *Sim) simDur(d time.Duration) time.Duration {
	if s.clk == nil {
		return d
	}
	return time.Duration(float64(d) * s.clk.scale)
}

// windowed reports whether the groups follow their windows (Options.Windows).
func (o Options) windowed() bool { return len(o.Windows) > 0 }

// applyWindow gives group i its window (Options.Windows, cycled).
func (o Options) applyWindow(i int, g *rollout.GroupConfig) {
	if !o.windowed() {
		return
	}
	w := o.Windows[i%len(o.Windows)]
	g.Days = w.Days
	if len(g.Days) == 0 {
		g.Days = []string{"*"}
	}
	g.StartHour, g.WindowLength = w.StartHour, rollout.Duration(w.Length)
	if w.MaxInFlight > 0 {
		g.MaxInFlight = w.MaxInFlight
	}
	if o.Schedule == rollout.ScheduleTimeBased {
		// No chain: the config's one-week chain limit knows nothing of
		// the schedule (docs/rollout.md).
		g.DependsOn = []string{}
	}
}

// windowTrack is what a windowed run records of a group, in its
// groupTrack (under the tracker's lock).
type windowTrack struct {
	// transitions, and the counts of Teleport's two time-based cases.
	transitions []Transition
	closes      int // active → done as the window closed
	reopens     int // done → active as the window reopened
	// startsOutside counts installs of the target begun while the
	// group's window was closed (time-based: must stay 0).
	startsOutside int
}

// observeTransition records st when it is a new state (or the same state
// entered again, a later Since), with the hosts on the target then.
func (w *windowTrack) observeTransition(prev, st rollout.GroupStatus, onTarget int) {
	if st.Since.IsZero() || (st.State == prev.State && st.Since.Equal(prev.Since)) {
		return
	}
	if n := len(w.transitions); n > 0 && w.transitions[n-1].At.Equal(st.Since) && w.transitions[n-1].To == st.State {
		return
	}
	w.transitions = append(w.transitions, Transition{At: st.Since, From: prev.State, To: st.State, Reason: st.Reason, OnTarget: onTarget})
	switch {
	case st.State == rollout.StateDone && strings.HasPrefix(st.Reason, "window closed"):
		w.closes++
	case st.State == rollout.StateActive && strings.HasPrefix(st.Reason, "window reopened"):
		w.reopens++
	}
}

// startOutside reports whether an install of the target by an agent of
// group g at now begins outside the group's window, under a time-based
// plan (where a group updates only in its windows), and counts it.
func (s *Sim) startOutside(g int, spec rollout.Spec, version string, now time.Time) {
	if !s.o.windowed() || spec.Schedule != rollout.ScheduleTimeBased || spec.Critical || version != s.o.TargetVersion {
		return
	}
	gc, ok := s.cfg.Group(s.groups[g])
	if !ok {
		return
	}
	loc, err := s.cfg.Location()
	if err != nil || gc.InWindow(now, loc) {
		return
	}
	s.stats.mu.Lock()
	s.stats.groups[g].win.startsOutside++
	s.stats.mu.Unlock()
}

// groupSize is how many agents group g has (agents are dealt to groups
// in turn; churn keeps the count).
func (s *Sim) groupSize(g int) int {
	n := s.o.Agents / len(s.groups)
	if g < s.o.Agents%len(s.groups) {
		n++
	}
	return n
}

// windowedEnded is ended for a windowed run: done when every group is
// done with all its agents on the target (a time-based group is done when
// a window closes, whatever it reached), "sim-end" after SimFor of
// simulated time, "halted" as in ended.
func (s *Sim) windowedEnded() bool {
	sts, inFlight := s.stats.snapshot()
	done, halted := true, false
	s.stats.mu.Lock()
	for i, st := range sts {
		if st.TargetVersion != s.o.TargetVersion || st.State != rollout.StateDone || s.stats.groups[i].onTarget < s.groupSize(i) {
			done = false
		}
		if st.TargetVersion == s.o.TargetVersion && st.Halted {
			halted = true
		}
	}
	s.stats.mu.Unlock()
	switch {
	case done:
		s.outcome = "done"
		return true
	case !s.specSimAt.IsZero() && !s.now().Before(s.specSimAt.Add(s.o.SimFor)):
		s.outcome = "sim-end"
		return true
	case halted && inFlight == 0:
		s.outcome = "halted"
		return true
	}
	return false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ParseWindow reads a --window flag: DAYS@HOUR[+LENGTH][/MAX_IN_FLIGHT],
// as "Mon,Wed@22+4h/5%" (Mondays and Wednesdays 22:00 for 4h, 5% in
// flight), "*@3+2h" or "Sat@23". Days are checked as the config checks
// them, when the run writes it.
func ParseWindow(s string) (Window, error) {
	var w Window
	days, rest, ok := strings.Cut(s, "@")
	if !ok || days == "" {
		return w, fmt.Errorf("window %q: want DAYS@HOUR[+LENGTH][/MAX_IN_FLIGHT], e.g. Mon,Wed@22+4h/5%%", s)
	}
	w.Days = strings.Split(days, ",")
	if r, mif, ok := strings.Cut(rest, "/"); ok {
		p, err := rollout.ParsePercent(mif)
		if err != nil {
			return w, fmt.Errorf("window %q: max_in_flight: %w", s, err)
		}
		w.MaxInFlight, rest = p, r
	}
	hour, length, hasLength := strings.Cut(rest, "+")
	h, err := strconv.Atoi(hour)
	if err != nil || h < 0 || h > 23 {
		return w, fmt.Errorf("window %q: hour %q: want 0-23", s, hour)
	}
	w.StartHour = h
	if hasLength {
		d, err := time.ParseDuration(length)
		if err != nil || d <= 0 {
			return w, fmt.Errorf("window %q: length %q: want a duration like 4h", s, length)
		}
		w.Length = d
	}
	return w, nil
}
