package fleetctl

import (
	"fmt"
	"io"

	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// Problem is a stored value a read command skipped (view.Problem).
type Problem = view.Problem

func problemOf(p *kv.Problem) Problem { return view.ProblemOf(p) }

func problemsOf(ps []kv.Problem) []Problem { return view.ProblemsOf(ps) }

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
		fmt.Fprintf(w, "warning: skipped %s%s: %s\n    to repair: %s\n", escape.Text(p.Key), rev, escape.Text(p.Error), escape.Text(p.Fix))
	}
}
