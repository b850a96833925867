package rollout

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Percent is a percentage written in JSON as a string with a percent sign:
// "20%", "2.5%". The value is in percent (Percent(20) is 20%), so that what an
// operator reads in the bucket is what the program holds.
type Percent float64

// Of returns p percent of n, computed as p*n/100 so that whole percentages of
// whole counts are exact (5% of 100 is 5, not 5.000000000000001).
func (p Percent) Of(n int) float64 { return float64(p) * float64(n) / 100 }

// Fraction returns p as a fraction: 20% is 0.2.
func (p Percent) Fraction() float64 { return float64(p) / 100 }

// String writes p with a percent sign and no superfluous digits: "20%".
func (p Percent) String() string {
	return strconv.FormatFloat(float64(p), 'f', -1, 64) + "%"
}

// MarshalJSON writes p as a string, see String.
func (p Percent) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(p)) || math.IsInf(float64(p), 0) {
		return nil, fmt.Errorf("percent %v: not a number", float64(p))
	}
	return json.Marshal(p.String())
}

// UnmarshalJSON reads a string such as "20%". Ranges are checked by the
// owner's Validate, which can name the field.
func (p *Percent) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("percent %s: write it as a string like \"20%%\"", truncate(string(b), 40))
	}
	v, err := ParsePercent(s)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// ParsePercent reads "20%" (the sign is required, spaces around are ignored).
func ParsePercent(s string) (Percent, error) {
	t := strings.TrimSpace(s)
	num, ok := strings.CutSuffix(t, "%")
	if !ok {
		return 0, fmt.Errorf("percent %q: write it with a percent sign, like \"20%%\"", truncate(s, 40))
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("percent %q: write it as a number and a percent sign, like \"20%%\"", truncate(s, 40))
	}
	return Percent(v), nil
}
