package rollout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RateConfig caps how many agents of a group may be told to start updating
// per period, on top of max_in_flight (Nebraska's updates per period, AWS
// IoT Jobs' rollout rate with an exponential ramp): Start per period at
// first, multiplied by Factor after each period in which every agent
// started succeeded, up to Max. {"start": "10/min", "factor": 2, "max":
// "500/min"}. Factor omitted or 1 and Max omitted: a flat rate.
type RateConfig struct {
	Start  RatePer `json:"start"`
	Factor float64 `json:"factor,omitempty"`
	Max    RatePer `json:"max,omitzero"`
}

// RatePer is a count per period, written "10/min": N starts per Per.
type RatePer struct {
	N   int
	Per time.Duration
}

// Limits of a rate.
const (
	MaxRateFactor = 10
	maxRateN      = 1_000_000
)

var ratePeriods = map[string]time.Duration{"s": time.Second, "sec": time.Second, "min": time.Minute, "m": time.Minute, "h": time.Hour, "hour": time.Hour}

// ParseRatePer reads "N/s", "N/min" or "N/h".
func ParseRatePer(s string) (RatePer, error) {
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	d, known := ratePeriods[strings.TrimSpace(per)]
	v, err := strconv.Atoi(strings.TrimSpace(n))
	if !ok || !known || err != nil || v < 1 || v > maxRateN {
		return RatePer{}, fmt.Errorf("rate %q: write a count of 1-%d per s, min or h, like \"10/min\"", truncate(s, 40), maxRateN)
	}
	return RatePer{N: v, Per: d}, nil
}

// String writes r as ParseRatePer reads it.
func (r RatePer) String() string {
	if r.N == 0 {
		return ""
	}
	unit := "min"
	switch r.Per {
	case time.Second:
		unit = "s"
	case time.Hour:
		unit = "h"
	}
	return strconv.Itoa(r.N) + "/" + unit
}

// PerMinute is r as a count per minute.
func (r RatePer) PerMinute() float64 {
	if r.Per <= 0 {
		return 0
	}
	return float64(r.N) * float64(time.Minute) / float64(r.Per)
}

// IsZero reports an unset rate (for omitzero).
func (r RatePer) IsZero() bool { return r.N == 0 }

func (r RatePer) MarshalJSON() ([]byte, error) { return json.Marshal(r.String()) }

func (r *RatePer) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("rate %s: write it as a string like \"10/min\"", truncate(string(b), 40))
	}
	v, err := ParseRatePer(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

func (c *RateConfig) validate() error {
	if c == nil {
		return nil
	}
	switch {
	case c.Start.N == 0:
		return fmt.Errorf(`rate: start is required, like {"start": "10/min", "factor": 2, "max": "500/min"}`)
	case c.Factor != 0 && (c.Factor < 1 || c.Factor > MaxRateFactor):
		return fmt.Errorf("rate: factor %g must be 1-%d", c.Factor, MaxRateFactor)
	case c.Factor > 1 && c.Max.N == 0:
		return fmt.Errorf("rate: a factor above 1 needs a max, like \"500/min\"")
	case c.Max.N != 0 && c.Max.PerMinute() < c.Start.PerMinute():
		return fmt.Errorf("rate: max %s is below start %s", c.Max, c.Start)
	}
	return nil
}

// Issue 28, rate: how a group's starts per period are counted.
//
// The rule. A period of the rate's own length (Start.Per) begins when the
// group enters active; in it, progress lets at most Allowance more waiting
// agents go (a start is a pending agent, not a canary, whose id fraction
// progress passes: Decide then tells it to update), on top of the
// max_in_flight bound (the two are a min: neither is ever exceeded). When a
// period ends (the first step at or after its end; the next one begins at
// the end of the last whole period, so a slow controller never gets a
// longer period), the allowance is judged:
//
//   - it is multiplied by Factor (rounded up, at most Max converted to
//     Start's period) if at least one agent started in the period and no
//     new failure was counted during it (failed_count did not rise: the
//     failures of the agents started in it, and conservatively also those
//     of agents started before);
//   - a new failure resets the allowance to Start at once, mid-period (the
//     period's starts so far still count against it, so a reset never
//     lets more go), and that period does not ramp;
//   - a period with no start holds the allowance where it is.
//
// Canaries are not counted (canary_count bounds them), nor are agents that
// join or come back with an id already below progress (progress never goes
// back, so nothing could stop them; the in-flight bound counts them).

// RateStatus is where a group's rate stands in this rollout
// (GroupStatus.Rate): absent without a rate, and before the group is
// active.
type RateStatus struct {
	// Allowance is how many agents the current period lets start; Started
	// how many progress let go in it so far.
	Allowance int `json:"allowance"`
	Started   int `json:"started"`
	// PeriodStart is when the current period began (it lasts the rate's
	// period: start's "/min" is a minute).
	PeriodStart time.Time `json:"period_start"`
	// FailedMark is failed_count when the last failure was taken into
	// account; a rise above it is a new failure.
	FailedMark int `json:"failed_mark"`
	// FailedInPeriod: a new failure reset the allowance in this period,
	// so it does not ramp at its end.
	FailedInPeriod bool `json:"failed_in_period,omitempty"`
	// Reason says why the allowance last changed.
	Reason string `json:"reason,omitempty"`
}

// Left is how many more agents the current period lets start.
func (r *RateStatus) Left() int { return max(r.Allowance-r.Started, 0) }

// MaxAllowance is the most agents one period of c (Start's period) lets
// start: Max converted to Start's period, rounded down (Start when Max is
// unset or smaller).
func (c *RateConfig) MaxAllowance() int {
	if c.Max.N == 0 || c.Start.Per <= 0 {
		return c.Start.N
	}
	n := int(math.Floor(c.Max.PerMinute()*float64(c.Start.Per)/float64(time.Minute) + 1e-9))
	return max(n, c.Start.N)
}

// String is the rate as the config writes it: "10/min ×2 up to 500/min",
// or "10/min" when flat.
func (c *RateConfig) String() string {
	if c == nil {
		return ""
	}
	if c.Factor <= 1 || c.Max.N == 0 {
		return c.Start.String()
	}
	return fmt.Sprintf("%s ×%s up to %s", c.Start, strconv.FormatFloat(c.Factor, 'g', -1, 64), c.Max)
}

// ramped is the allowance after a successful period of allowance n.
func (c *RateConfig) ramped(n int) int {
	f := c.Factor
	if f <= 1 {
		return min(n, c.MaxAllowance())
	}
	return min(int(math.Ceil(float64(n)*f-1e-9)), c.MaxAllowance())
}

// rateStep rolls the group's rate over to the current period and takes
// new failures into account (see the rule above), before progress moves.
// It returns how many agents may start in this step, and false when the
// group has no rate.
func (m *machine) rateStep() (left int, limited bool) {
	rc, st := m.gc.Rate, &m.st
	if rc == nil || rc.Start.N == 0 || rc.Start.Per <= 0 {
		st.Rate = nil
		return 0, false
	}
	r := st.Rate
	if r == nil {
		r = &RateStatus{Allowance: rc.Start.N, PeriodStart: m.now, FailedMark: st.FailedCount,
			Reason: fmt.Sprintf("rate %s: %d per %s to start with", rc, rc.Start.N, Duration(rc.Start.Per))}
		st.Rate = r
		return r.Left(), true
	}
	r.Allowance = min(max(r.Allowance, rc.Start.N), rc.MaxAllowance())
	if st.FailedCount < r.FailedMark {
		r.FailedMark = st.FailedCount // a failed agent retried and succeeded
	}
	per := rc.Start.Per
	if elapsed := m.now.Sub(r.PeriodStart); elapsed >= per {
		switch {
		case r.FailedInPeriod || st.FailedCount > r.FailedMark:
			// Judged below (a failure in the new period resets it).
		case r.Started > 0 && r.Allowance < rc.MaxAllowance() && rc.Factor > 1:
			was := r.Allowance
			r.Allowance = rc.ramped(r.Allowance)
			r.Reason = fmt.Sprintf("ramped from %d to %d per %s: %d agents started in the last period and no failure was counted", was, r.Allowance, Duration(per), r.Started)
		}
		r.PeriodStart = r.PeriodStart.Add(elapsed / per * per)
		r.Started, r.FailedInPeriod = 0, false
	}
	if st.FailedCount > r.FailedMark {
		r.Reason = fmt.Sprintf("reset to %d per %s: failed_count rose from %d to %d", rc.Start.N, Duration(per), r.FailedMark, st.FailedCount)
		r.Allowance, r.FailedMark, r.FailedInPeriod = rc.Start.N, st.FailedCount, true
	}
	return r.Left(), true
}

// rateCount records the starts this step's progress let go: the pending
// agents (sorted) whose fractions are in [from, to).
func (m *machine) rateCount(pending []float64, from, to float64) {
	r := m.st.Rate
	if r == nil || to <= from {
		return
	}
	lo, _ := slices.BinarySearch(pending, from)
	hi, _ := slices.BinarySearch(pending, to)
	r.Started += hi - lo
}

func (r *RateStatus) validate() error {
	switch {
	case r == nil:
		return nil
	case r.Allowance < 0 || r.Allowance > maxRateN*MaxRateFactor*3600:
		return fmt.Errorf("rate: allowance %d out of range", r.Allowance)
	case r.Started < 0 || r.FailedMark < 0:
		return fmt.Errorf("rate: started %d and failed_mark %d must not be negative", r.Started, r.FailedMark)
	}
	return ValidatePrintable(r.Reason)
}

// UnmarshalJSON reads a rate as {"start": "10/min", "factor": 2, "max":
// "500/min"}, refusing unknown fields as the rest of the config does (a
// typo such as "facter" must not silently make the rate flat), or as a
// bare "10/min": a flat rate.
func (c *RateConfig) UnmarshalJSON(b []byte) error {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '"' {
		var start RatePer
		if err := start.UnmarshalJSON(t); err != nil {
			return err
		}
		*c = RateConfig{Start: start}
		return nil
	}
	var d RateConfig
	if err := decodeObject(b, map[string]any{"start": &d.Start, "factor": &d.Factor, "max": &d.Max}, true); err != nil {
		return fmt.Errorf(`%w; write {"start": "10/min", "factor": 2, "max": "500/min"} or "10/min"`, err)
	}
	*c = d
	return nil
}
