package rollout

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration written in JSON as a Go duration string such as
// "4h", "90s" or "1h30m". Numbers are refused: a bare 90 could mean seconds or
// nanoseconds, and an operator editing a bucket by hand should not guess.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String writes d without zero units: "4h", "1h30m", "1m30s", "0s".
func (d Duration) String() string {
	td := time.Duration(d)
	if td == 0 {
		return "0s"
	}
	if td%time.Second != 0 || td < 0 {
		return td.String()
	}
	var b strings.Builder
	if h := td / time.Hour; h > 0 {
		b.WriteString(strconv.FormatInt(int64(h), 10) + "h")
	}
	if m := td % time.Hour / time.Minute; m > 0 {
		b.WriteString(strconv.FormatInt(int64(m), 10) + "m")
	}
	if s := td % time.Minute / time.Second; s > 0 {
		b.WriteString(strconv.FormatInt(int64(s), 10) + "s")
	}
	return b.String()
}

// MarshalJSON writes d as a string, see String.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.String())
}

// UnmarshalJSON reads a duration string accepted by time.ParseDuration.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: write it as a string like \"90s\" or \"4h\"", truncate(string(b), 40))
	}
	td, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("duration %q: write it like \"90s\", \"30m\" or \"4h\"", truncate(s, 40))
	}
	*d = Duration(td)
	return nil
}
