package rollout

import (
	"encoding/json"
	"fmt"
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
