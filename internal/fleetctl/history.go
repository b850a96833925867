package fleetctl

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

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
	Group  string
	Since  time.Duration
	Output string
}

// HistoryRecord is one entry of "fleetctl history -o json": an operator's
// write (kind "audit", with the audit record's fields) or a rollout event
// (kind "event", with the event).
type HistoryRecord struct {
	// Seq is the entry's sequence in FLEET_AUDIT: the timeline's order.
	Seq  uint64    `json:"seq"`
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// Group is the group the entry is about; absent for fleet-wide writes.
	Group string          `json:"group,omitempty"`
	Audit *kv.AuditRecord `json:"audit,omitempty"`
	Event *rollout.Event  `json:"event,omitempty"`
}

// HistoryReport is the JSON of "fleetctl history -o json".
type HistoryReport struct {
	Records []HistoryRecord `json:"records"`
	// Problems are the stored messages that are not an audit record or an
	// event fleetwave wrote; absent when there are none.
	Problems []Problem `json:"problems,omitempty"`
}

func newHistoryCmd(g *Global) *cobra.Command {
	o := &HistoryOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "history",
		Short: "Who changed what, and what the rollout did next (the audit trail)",
		Long: `Show the audit trail, FLEET_AUDIT, oldest first: every write fleetctl made
(config, plan, pause, resume, run, rollback, mark-done, reset, quarantine) with who made
it (--actor, else the credentials' user name, else $USER@hostname), why
(--reason or --note) and what changed, interleaved with the controller's
rollout events (transitions, halts, alerts, quarantines), in the order the bus stored them.

--group G shows G's entries and the fleet-wide ones (config, plan spec),
which move every group. Read-only.`,
		Example: `  fleetctl history
  fleetctl history --group prod --since 24h
  fleetctl history -o json | jq -r '.records[] | select(.kind=="audit") | .audit.actor'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			if err := checkGroupFilter(o.Group); err != nil {
				return err
			}
			if o.Since < 0 {
				return cliutil.Usagef("--since %v: must be positive (how far back)", o.Since)
			}
			return RunHistory(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Group, "group", "", "only this group's entries and the fleet-wide ones")
	cmd.Flags().DurationVar(&o.Since, "since", 0, "only entries of this long ago and later (24h); default: all the stream holds")
	outputFlag(cmd, &o.Output)
	return cmd
}

// RunHistory is "fleetctl history".
func RunHistory(ctx context.Context, o *HistoryOptions) error {
	ctx, f, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	var since time.Time
	if o.Since > 0 {
		since = o.Now().Add(-o.Since)
	}
	entries, problems, err := f.ReadTimeline(ctx, since)
	if err != nil {
		return o.refused("history", err)
	}
	rep := HistoryReport{Records: []HistoryRecord{}}
	for _, e := range entries {
		if o.Group != "" && e.Group() != "" && e.Group() != o.Group {
			continue
		}
		r := HistoryRecord{Seq: e.Seq, At: e.At(), Group: e.Group(), Audit: e.Audit, Event: e.Event, Kind: "audit"}
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
		p.Fix = "ages out of " + kv.StreamAudit + " with its max age"
		rep.Problems = append(rep.Problems, p)
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
	tw := newTable(o.Out)
	fmt.Fprintln(tw, "TIME\tACTOR\tWHAT\tGROUP\tCHANGE\tREASON")
	for _, r := range rep.Records {
		group := r.Group
		if group == "" {
			group = "(fleet)"
		}
		row := view.TimelineRowOf(kv.TimelineEntry{Seq: r.Seq, Audit: r.Audit, Event: r.Event})
		actor, what, changed, reason := row.Actor, row.What, row.Change, row.Reason
		// 100 columns: -o json has every field in full.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.At.Local().Format("01-02 15:04:05"), cell(actor, 10), cell(what, 14),
			cell(group, 10), cell(changed, 26), cell(strings.ReplaceAll(reason, "\n", " "), 14))
	}
	return tw.Flush()
}
