package fleetctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// HistoryOptions are the flags of "fleetctl history".
type HistoryOptions struct {
	*Global
	Group string
	Since time.Duration
	// Limit shows the newest Limit entries (0: kv.DefaultTimelineLimit).
	Limit int
	// Output is table, wide (the table with every cell in full) or json.
	Output string
	// Width is the terminal's width the table is fitted to, CHANGE and
	// REASON cut with "…"; 0 (not a terminal: a pipe, a file) prints
	// every cell in full, as -o wide does.
	Width int
}

// historyFormats are history's -o values.
var historyFormats = []string{"table", "wide", "json"}

// HistoryRecord is one entry of "fleetctl history -o json": an operator's
// write (kind "audit", with the audit record's fields) or a rollout event
// (kind "event", with the event).
type HistoryRecord struct {
	// Stream and Seq say where the entry is stored: FLEET_AUDIT (an
	// operator's write; events of before FLEET_EVENTS) or FLEET_EVENTS.
	Stream string `json:"stream"`
	Seq    uint64 `json:"seq"`
	// Stored is when the bus stored it: the timeline's order.
	Stored time.Time `json:"stored"`
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	// Group is the group the entry is about; absent for fleet-wide writes.
	Group string `json:"group,omitempty"`
	// App is the app the entry is about (an event's, or the app whose
	// plan key a write changed; entries made before apps are the default
	// app's); absent for fleet-wide writes (the config).
	App   string          `json:"app,omitempty"`
	Audit *kv.AuditRecord `json:"audit,omitempty"`
	Event *rollout.Event  `json:"event,omitempty"`
}

// HistoryReport is the JSON of "fleetctl history -o json".
type HistoryReport struct {
	Records []HistoryRecord `json:"records"`
	// More: older entries were left out (--limit); absent when none were.
	More bool `json:"more,omitempty"`
	// Problems are the stored messages that are not an audit record or an
	// event fleetwave wrote; absent when there are none.
	Problems []Problem `json:"problems,omitempty"`
}

func newHistoryCmd(g *Global) *cobra.Command {
	o := &HistoryOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "history",
		Short: "Who changed what, and what the rollout did next (the audit trail)",
		Long: `Show the audit trail, oldest first: every write fleetctl made (config, plan,
pause, resume, run, rollback, mark-done, reset, quarantine; stored in FLEET_AUDIT) with
who made it (--actor, else the credentials' user name, else $USER@hostname), why
(--reason or --note) and what changed, interleaved with the rollout events
(transitions, halts, alerts, quarantines, unattributed changes; stored in
FLEET_EVENTS), in the order the bus stored them.

Only the newest --limit operator records and the newest --limit events (default
200 of each) are read and shown, however many the streams hold, so a flood of
events never hides a record: a note on stderr (and "more": true in JSON) says
when older ones were left out; --since or a larger --limit shows more.

--group G shows G's entries and the fleet-wide ones (config, plan spec),
which move every group. --app NAME shows that app's entries and the config's
(entries made before the fleet had apps are its default app's); without it,
every app's, with an APP column when the config has several. Read-only.

On a terminal the table is fitted to its width (COLUMNS, else the window's),
CHANGE and REASON cut with "…" and a note on stderr; piped or redirected, and
with -o wide, every cell is printed in full. A forced action (--force past a
halt or a quarantine) shows as "mark-done --force", "reset --force", …`,
		Example: `  fleetctl history
  fleetctl history --group prod --since 24h
  fleetctl history --app db
  fleetctl history --limit 1000 --since 168h
  fleetctl history -o wide
  fleetctl history | grep -- --force
  fleetctl history -o json | jq -r '.records[] | select(.kind=="audit") | .audit.actor'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(o.Output, historyFormats...); err != nil {
				return err
			}
			if w, _, ok := termSize(cmd.OutOrStdout()); ok && o.Output == "table" {
				o.Width = w
				if c, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && c > 0 {
					o.Width = c
				}
				if o.Width <= 0 {
					o.Width = defaultWidth
				}
			}
			if err := checkGroupFilter(o.Group); err != nil {
				return err
			}
			if o.Since < 0 {
				return cliutil.Usagef("--since %v: must be positive (how far back)", o.Since)
			}
			if o.Limit < 1 || o.Limit > maxHistoryLimit {
				return cliutil.Usagef("--limit %d: must be 1-%d (the newest records and events shown)", o.Limit, maxHistoryLimit)
			}
			return RunHistory(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Group, "group", "", "only this group's entries and the fleet-wide ones")
	cmd.Flags().DurationVar(&o.Since, "since", 0, "only entries of this long ago and later (24h); default: all the streams hold, within --limit")
	cmd.Flags().IntVar(&o.Limit, "limit", kv.DefaultTimelineLimit, fmt.Sprintf("show the newest this many operator records and this many events (1-%d)", maxHistoryLimit))
	formatFlag(cmd, &o.Output, historyFormats...)
	cmd.Flags().StringVar(&o.App, "app", cliutil.Env("", "FLEETCTL_APP"), "only this app's entries and the config's (env FLEETCTL_APP); default: every app's")
	return cmd
}

// maxHistoryLimit bounds --limit: what one command reads stays bounded
// (FLEET_EVENTS holds small messages only; an operator's record is at most
// 256 KiB).
const maxHistoryLimit = 100000

// RunHistory is "fleetctl history".
func RunHistory(ctx context.Context, o *HistoryOptions) error {
	ctx, f, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	q := kv.TimelineQuery{Group: o.Group, Limit: o.Limit}
	if q.Limit <= 0 {
		q.Limit = kv.DefaultTimelineLimit
	}
	if o.Since > 0 {
		q.Since = o.Now().Add(-o.Since)
	}
	// The apps: to filter by --app, and to name each entry's app.
	var cfg rollout.Config
	if e, _, err := f.ReadConfig(ctx); err == nil {
		cfg = e.Value
	} else if o.App != "" {
		return fmt.Errorf("--app %s: %w", o.App, err)
	}
	var only *kv.AppNS
	if o.App != "" {
		ns, err := resolveNS(cfg, o.App)
		if err != nil {
			return err
		}
		only = &ns
	}
	multi := len(cfg.AppList()) > 1
	tl, err := f.ReadTimelineQuery(ctx, q)
	if err != nil {
		return o.refused("history", err)
	}
	problems := tl.Problems
	rep := HistoryReport{Records: []HistoryRecord{}, More: tl.More}
	for _, e := range tl.Entries {
		if o.Group != "" && e.Group() != "" && e.Group() != o.Group {
			continue
		}
		if only != nil && (e.Event != nil && !eventOfApp(e.Event, *only, cfg) || e.Audit != nil && !auditOfApp(e.Audit, *only, cfg)) {
			continue
		}
		r := HistoryRecord{Stream: e.Stream, Seq: e.Seq, Stored: e.Stored, At: e.At(), Group: e.Group(), Audit: e.Audit, Event: e.Event, Kind: "audit",
			App: entryApp(e, cfg)}
		if e.Event != nil {
			r.Kind = "event"
		}
		rep.Records = append(rep.Records, r)
	}
	if o.Group != "" && !slices.ContainsFunc(rep.Records, func(r HistoryRecord) bool { return r.Group == o.Group }) {
		// A typo shows the fleet-wide entries alone: say so. (A group no
		// longer in the config may still have entries: no refusal.)
		fmt.Fprintf(o.ErrOut, "note: no entry names group %q; only the fleet-wide entries are shown\n", o.Group)
	}
	for i := range problems {
		p := problemOf(&problems[i])
		p.Fix = "ages out of " + problems[i].Bucket + " with its max age"
		rep.Problems = append(rep.Problems, p)
	}
	if tl.LegacyAudit {
		fmt.Fprintf(o.ErrOut, "warning: %s still stores the rollout events beside the operators' records, so a flood of events can evict those records: run 'fleetctl bus ensure' with admin credentials (it moves the events to %s)\n",
			kv.StreamAudit, kv.StreamEvents)
	}
	if tl.More {
		since := ""
		if o.Since > 0 {
			since = fmt.Sprintf(" of the last %v", o.Since)
		}
		fmt.Fprintf(o.ErrOut, "note: showing the newest %d records and %d events%s; older ones were left out (--limit, --since)\n", q.Limit, q.Limit, since)
	}
	if o.Output == "json" {
		return writeJSON(o.Out, rep)
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(o.ErrOut, "warning: skipped %s (sequence %d): %s\n", escape.Text(p.Key), p.Revision, escape.Text(p.Error))
	}
	if len(rep.Records) == 0 {
		_, err := fmt.Fprintln(o.Out, "no entries")
		return err
	}
	if multi && only == nil {
		// Every app's entries: the app goes before the group.
		for i := range rep.Records {
			r := &rep.Records[i]
			app := r.App
			if app == "" {
				app = "(fleet)"
			}
			if r.Group == "" {
				r.Group = app
			} else {
				r.Group = app + "/" + r.Group
			}
		}
		fmt.Fprintln(o.ErrOut, "note: GROUP is APP/GROUP (every app's entries; --app NAME shows one app's)")
	}
	if o.Width <= 0 {
		return writeHistoryFull(o.Out, rep.Records)
	}
	tw := newTable(o.Out)
	fmt.Fprintln(tw, "TIME\tACTOR\tWHAT\tGROUP\tCHANGE\tREASON")
	changeWidth, reasonWidth := historyWidths(o.Width)
	cut := false
	fit := func(s string, n int) string {
		s = escape.Text(s)
		if n <= 0 {
			return s
		}
		t := shorten(s, n)
		cut = cut || t != s
		return t
	}
	for _, r := range rep.Records {
		group := r.Group
		if group == "" {
			group = "(fleet)"
		}
		row := view.TimelineRowOf(kv.TimelineEntry{Stream: r.Stream, Seq: r.Seq, Audit: r.Audit, Event: r.Event})
		actor, what, changed, reason := row.Actor, row.What, row.Change, row.Reason
		narrow := func(n int) int { // the fixed columns, only on a terminal
			if o.Width <= 0 {
				return 0
			}
			return n
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.At.Local().Format("01-02 15:04:05"), fit(actor, narrow(10)), fit(what, narrow(16)),
			fit(group, narrow(10)), fit(changed, changeWidth), fit(strings.ReplaceAll(reason, "\n", " "), reasonWidth))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if cut {
		fmt.Fprintf(o.ErrOut, "note: cells cut to the terminal's %d columns: fleetctl history -o wide (or piped) prints them in full\n", o.Width)
	}
	return nil
}

// fullChangeColumn is the most CHANGE is padded to in the full table: a
// longer change pushes its row's REASON right rather than every row's.
const fullChangeColumn = 40

// writeHistoryFull is the history table with every cell in full (piped,
// -o wide): the short columns aligned, CHANGE padded to at most
// fullChangeColumn, REASON last.
func writeHistoryFull(w io.Writer, records []HistoryRecord) error {
	rows := [][]string{{"TIME", "ACTOR", "WHAT", "GROUP", "CHANGE", "REASON"}}
	for _, r := range records {
		group := r.Group
		if group == "" {
			group = "(fleet)"
		}
		row := view.TimelineRowOf(kv.TimelineEntry{Stream: r.Stream, Seq: r.Seq, Audit: r.Audit, Event: r.Event})
		rows = append(rows, []string{r.At.Local().Format("01-02 15:04:05"), escape.Text(row.Actor), escape.Text(row.What),
			escape.Text(group), escape.Text(row.Change), escape.Text(strings.ReplaceAll(row.Reason, "\n", " "))})
	}
	widths := make([]int, 5)
	for _, row := range rows {
		for i := range widths {
			widths[i] = max(widths[i], utf8.RuneCountInString(row[i]))
		}
	}
	widths[4] = min(widths[4], fullChangeColumn)
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row[:5] {
			b.WriteString(c)
			if pad := widths[i] - utf8.RuneCountInString(c); pad > 0 {
				b.WriteString(strings.Repeat(" ", pad))
			}
			b.WriteString("  ")
		}
		b.WriteString(row[5])
		if _, err := fmt.Fprintln(w, strings.TrimRight(b.String(), " ")); err != nil {
			return err
		}
	}
	return nil
}

// historyWidths are the widths of CHANGE and REASON in a table fitted to
// width columns (0: not cut). The other columns take 14+10+16+10 and 2
// between each; CHANGE gets two thirds of the rest, at least 26 (at 100
// columns: 26 and 14, as before).
func historyWidths(width int) (change, reason int) {
	if width <= 0 {
		return 0, 0
	}
	rest := width - (14 + 10 + 16 + 10 + 5*2)
	change = max(26, rest*2/3)
	return change, max(14, rest-change)
}

// entryApp names the app a timeline entry is about: an event's app, or the
// app whose plan key a write changed; "" for a fleet-wide write. Entries
// made before apps carry none and are the default app's (so are events a
// fleet without apps published as "default" before it named its app).
func entryApp(e kv.TimelineEntry, cfg rollout.Config) string {
	named := func(app string) string {
		if app == "" || app == rollout.DefaultAppName {
			if _, ok := cfg.App(rollout.DefaultAppName); !ok {
				return cfg.DefaultApp()
			}
		}
		return app
	}
	switch {
	case e.Event != nil:
		return named(e.Event.App)
	case e.Audit == nil || e.Audit.Bucket != kv.BucketPlan:
		return ""
	case e.Audit.App != "":
		return named(e.Audit.App)
	}
	if pk := kv.ParsePlanKey(e.Audit.Key); pk.App != "" {
		return pk.App
	}
	return cfg.DefaultApp()
}
