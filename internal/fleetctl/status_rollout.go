package fleetctl

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave/internal/view"
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
	h := view.Header(rep.Plan)
	fmt.Fprintf(w, "Mode:      %s\n", h.Mode)
	fmt.Fprintf(w, "Version:   %s\n", h.Version)
	fmt.Fprintf(w, "Holds:     %s\n", h.Holds)
	fmt.Fprintf(w, "Strategy:  %s   Schedule: %s   Critical: %s\n\n", h.Strategy, h.Schedule, h.Critical)

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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shorten(r.Group, groupWidth), r.State, r.Since,
			r.Updated, r.Updating, r.Waiting, r.Failed, r.Allowed)
		for _, n := range r.Notes {
			notes = append(notes, r.Group+": "+n)
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
