package fleetctl

import (
	"encoding/json"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Read commands print a table (or YAML) for people and -o json for scripts;
// write commands print a few lines of text, or with -o json one WriteResult.
var (
	readFormats  = []string{"table", "json"}
	writeFormats = []string{"text", "json"}
)

// WriteResult is the JSON every write command prints with -o json: one
// object saying what was written, the same fields for every command. A
// command's own details go in Value or, for commands that had -o json
// before (auth agent, auth upgrade), beside these fields. Stable: fields
// are only ever added.
type WriteResult struct {
	// Command is the command without "fleetctl": "plan set", "pause".
	Command string `json:"command"`
	// Written is false when the command wrote nothing because what was
	// asked is what is stored (pause of a paused plan).
	Written bool `json:"written"`
	// Bucket and Key name the key written; absent for commands that write
	// no key (auth, bus ensure, edge init).
	Bucket string `json:"bucket,omitempty"`
	Key    string `json:"key,omitempty"`
	// Revision is the key's revision after the command: the new one, or
	// the current one when nothing was written.
	Revision uint64 `json:"revision,omitempty"`
	// PreviousRevision is the revision the command read and replaced
	// (compare-and-swap); absent when the key did not exist.
	PreviousRevision uint64 `json:"previous_revision,omitempty"`
	// Deleted: the command deleted the key instead of writing a value
	// (reset of a group status that is not valid).
	Deleted bool `json:"deleted,omitempty"`
	// Value is what the key now holds (the config, the plan spec, the
	// group status), or the command's own report.
	Value any `json:"value,omitempty"`
	// Changes are the changes made, one line each, as the text output says.
	Changes []string `json:"changes,omitempty"`
	// Event is the rollout event the command published.
	Event *rollout.Event `json:"event,omitempty"`
	// Files are the files the command wrote.
	Files []string `json:"files,omitempty"`
	// Agents are the agents the command concerns: for retry, those that
	// rolled back from the target and will try it once more.
	Agents []rollout.AgentID `json:"agents,omitempty"`
}

// writeJSON writes v as indented JSON, with every rune a terminal would
// act on (DEL, C1 and bidirectional controls, which encoding/json leaves
// raw) as a \u escape: jq and people read the same data.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(escape.NewJSONWriter(w))
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// formatFlag registers -o/--output on cmd with formats, the first the
// default, and completes its values.
func formatFlag(cmd *cobra.Command, dst *string, formats ...string) {
	usage := "output format: " + strings.Join(formats[:len(formats)-1], ", ") + " or " + formats[len(formats)-1]
	cmd.Flags().StringVarP(dst, "output", "o", formats[0], usage)
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp))
}

// outputFlag registers -o/--output on a read command: table or json.
func outputFlag(cmd *cobra.Command, dst *string) { formatFlag(cmd, dst, readFormats...) }

// writeOutputFlag registers -o/--output on a write command: text or json.
func writeOutputFlag(cmd *cobra.Command, dst *string) { formatFlag(cmd, dst, writeFormats...) }

func checkOutput(o string) error { return checkFormat(o, readFormats...) }

// checkWriteOutput also takes "table" for text: auth agent and auth upgrade
// took it before, and a script may pass -o table to every command.
func checkWriteOutput(o string) error {
	if o == "table" {
		return nil
	}
	return checkFormat(o, writeFormats...)
}

func checkFormat(o string, formats ...string) error {
	for _, f := range formats {
		if o == f {
			return nil
		}
	}
	return cliutil.Usagef("--output %q: want %s", o, strings.Join(formats, " or "))
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// age renders how long ago t was, for people (view.Age).
func age(now, t time.Time) string { return view.Age(now, t) }

// cell is s escaped for a table cell (escape.Text: a peer's tab, newline
// or control is shown as \t, \n, \x1b…, never laid out or obeyed) and
// cut to n columns.
func cell(s string, n int) string { return shorten(escape.Text(s), n) }

// shorten cuts s to n columns (runes), marking the cut with "…".
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
