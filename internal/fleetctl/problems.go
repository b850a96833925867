package fleetctl

import (
	"fmt"
	"io"

	"github.com/fleetwave/fleetwave/pkg/kv"
)

// Problem is a stored value a read command skipped because it is not what
// its key should hold (it does not decode or validate, belongs under another
// key, or is a JetStream response stored by mistake). It is the JSON of the
// "problems" lists of status and agents ls.
type Problem struct {
	// Key is bucket/key ("fleet_stats/prod.c1"), or FLEET_HB/subject for a
	// heartbeat.
	Key string `json:"key"`
	// Revision is the stream sequence of the bad value.
	Revision uint64 `json:"revision,omitempty"`
	// Error says what is wrong with it.
	Error string `json:"error"`
	// Fix is the command that repairs it, or how it goes away.
	Fix string `json:"fix"`
}

func problemOf(p *kv.Problem) Problem {
	return Problem{Key: p.Where(), Revision: p.Revision, Error: p.Err.Error(), Fix: p.Fix()}
}

func problemsOf(ps []kv.Problem) []Problem {
	var out []Problem
	for i := range ps {
		out = append(out, problemOf(&ps[i]))
	}
	return out
}

// maxWarnings bounds the problems printed on stderr; -o json lists them all.
const maxWarnings = 10

// warnProblems prints one warning per skipped value on w (at most
// maxWarnings), naming the key, what is wrong and the fix.
func warnProblems(w io.Writer, ps []Problem) {
	for i, p := range ps {
		if i == maxWarnings {
			fmt.Fprintf(w, "warning: and %d more values skipped (-o json lists them all under \"problems\")\n", len(ps)-i)
			return
		}
		rev := ""
		if p.Revision != 0 {
			rev = fmt.Sprintf(" (revision %d)", p.Revision)
		}
		fmt.Fprintf(w, "warning: skipped %s%s: %s\n    to repair: %s\n", p.Key, rev, p.Error, p.Fix)
	}
}
