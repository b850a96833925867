package fleetctl

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Column widths of the rollout table, so that it fits 80 columns with up
// to 9999 agents a group and group names of up to 9 characters (longer
// names widen it up to groupWidth).
const (
	groupWidth = 12
	noteWidth  = 100
)

// writeRolloutTable prints the plan header, one row per group, notes on the
// groups that need them, and agents per version.
func writeRolloutTable(w io.Writer, rep StatusReport, now time.Time) error {
	h := view.Header(rep)
	fmt.Fprintf(w, "Mode:      %s\n", escape.Text(h.Mode))
	fmt.Fprintf(w, "Version:   %s\n", escape.Text(h.Version))
	fmt.Fprintf(w, "Holds:     %s\n", escape.Text(h.Holds))
	fmt.Fprintf(w, "Strategy:  %s   Schedule: %s   Critical: %s\n", escape.Text(h.Strategy), escape.Text(h.Schedule), escape.Text(h.Critical))
	for _, l := range quarantineLines(rep, now) {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)

	lines, notes := rolloutRows(rep, now)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			for _, l := range wrap(n, noteWidth, "    ") {
				fmt.Fprintln(w, l)
			}
		}
	}
	if lines := failureLines(rep); len(lines) > 0 {
		fmt.Fprintln(w, "\nFailed agents:")
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
	fmt.Fprintln(w, "\nAgents by version:")
	return writeVersionTable(w, rep, now)
}

// rolloutRows renders the group table (header first) and the notes on the
// groups that need them (one unwrapped line each), from view.Rows.
func rolloutRows(rep StatusReport, now time.Time) (rows, notes []string) {
	var buf strings.Builder
	tw := newTable(&buf)
	fmt.Fprintln(tw, "GROUP\tSTATE\tSINCE\tUPDATED\tUPDATING\tWAITING\tFAILED\tALLOWED")
	for _, r := range view.Rows(rep, nil, now) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(r.Group, groupWidth), cell(r.State, 40), cell(r.Since, 40),
			cell(r.Updated, 40), cell(r.Updating, 40), cell(r.Waiting, 40), cell(r.Failed, 40), cell(r.Allowed, 40))
		for _, n := range r.Notes {
			// A note quotes halt reasons, Prometheus series and
			// operators' notes: one line, its controls escaped.
			notes = append(notes, escape.Text(r.Group+": "+n))
		}
	}
	_ = tw.Flush() // a strings.Builder does not fail
	return strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"), notes
}

// wrap breaks s into lines of at most width columns at spaces, indenting
// the continuation lines; a word longer than a line is cut.
func wrap(s string, width int, indent string) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= width:
			line += " " + word
		default:
			lines = append(lines, shorten(line, width))
			line = indent + word
		}
	}
	if line != "" {
		lines = append(lines, shorten(line, width))
	}
	return lines
}

// quarantineLines say each quarantined version once, with why, the groups
// it halted and what lifts it (the groups' notes only point here).
func quarantineLines(rep StatusReport, now time.Time) []string {
	var out []string
	for _, q := range rep.Quarantined {
		by := "by " + q.By
		if q.By == rollout.QuarantineByController {
			by = "by the controller"
		}
		line := fmt.Sprintf("Quarantined: %s, %s %s ago: %s", q.Version, by, view.Age(now, q.At), q.Reason)
		out = append(out, wrap(escape.Text(line), noteWidth, "             ")...)
		fix := "never rolled out while quarantined; to go on anyway: fleetctl quarantine rm " + q.Version
		if len(q.Halts) > 0 {
			fix = "halts " + strings.Join(q.Halts, ", ") + "; " + fix + ", then fleetctl reset --group G --force --reason TEXT for each"
		}
		for _, l := range wrap(escape.Text(fix), noteWidth-13, "") {
			out = append(out, "             "+l)
		}
	}
	return out
}

// failureLines list each group's failed agents (view.GroupFailures): the
// host and id, the state and why, and the last line of the app's output;
// then how many more there are and where to see them all.
func failureLines(rep StatusReport) []string {
	var out []string
	for _, g := range rep.Groups {
		for _, a := range g.Failures {
			who := a.Hostname
			if who == "" {
				who = "-"
			}
			line := fmt.Sprintf("  %s: %s (%s) %s", g.Name, who, a.ID, a.State)
			if a.Reason != "" {
				line += ": " + a.Reason
			}
			out = append(out, shorten(escape.Text(line), 2*noteWidth))
			if last := lastLine(a.Output); last != "" {
				out = append(out, shorten("      last output: "+escape.Text(last), noteWidth))
			}
		}
		if n := g.FailuresTotal - len(g.Failures); n > 0 {
			out = append(out, fmt.Sprintf("  %s: and %d more (fleetctl agents ls --group %s)", g.Name, n, g.Name))
		}
	}
	if len(out) > 0 {
		out = append(out, "  (an agent's error and its app's last lines in full: fleetctl agents ls --id ID)")
	}
	return out
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	s = strings.TrimRight(s, " \t\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}
