package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

func newQuarantineCmd(g *Global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quarantine",
		Short: "List, add and lift fleet-wide quarantines of bad versions",
		Long: `A quarantined version is never rolled out: every group rolling it out
(unstarted, canary or active) halts, no group holds it, so new and unstarted
hosts get the last good version instead, and "fleetctl plan set" refuses it
as a target or start version unless --force.

The controller quarantines a version by itself when quarantine_after
distinct agents (config, default 3, 0 turns the rule off), in any groups,
canaries included, rolled back from it with a release failure (the app did
not start or stay healthy; a bad download or a full disk does not count).
An operator can quarantine a version before anyone installs it, and lift a
quarantine. The list is fleet_plan/quarantine; every change is in
"fleetctl history".`,
	}
	cmd.AddCommand(newQuarantineLsCmd(g), newQuarantineAddCmd(g), newQuarantineRmCmd(g))
	return cmd
}

// QuarantineOptions are the flags of the quarantine commands.
type QuarantineOptions struct {
	*Global
	// Version is the version to add or lift.
	Version string
	// Output is table or json for ls, text or json for add and rm.
	Output string
}

func newQuarantineLsCmd(g *Global) *cobra.Command {
	o := &QuarantineOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the quarantined versions, who quarantined them and why",
		Long: `List the quarantined versions: when, by whom (the controller or an
operator), how many agents rolled back from each (with their ids), the
reason, and the groups it halted. -o json prints the stored list
({"v":1,"versions":[{"version","reason","agents","agent_count","at","by"}],
"lifted":[{"version","at","by","reason"}]}) and its revision.`,
		Example: `  fleetctl quarantine ls
  fleetctl quarantine ls -o json | jq -r '.versions[].version'`,
		Aliases: []string{"list"},
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			return RunQuarantineLs(cmd.Context(), o)
		},
	}
	outputFlag(cmd, &o.Output)
	appFlag(cmd, g)
	return cmd
}

func newQuarantineAddCmd(g *Global) *cobra.Command {
	o := &QuarantineOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "add VERSION --reason TEXT",
		Short: "Quarantine a version: no group rolls it out, new hosts never get it",
		Long: `Quarantine VERSION fleet-wide, before anyone installs it or after it went
wrong. Groups rolling it out halt at the controller's next step; no group
offers it to new or unstarted hosts; "fleetctl plan set" refuses it unless
--force. Groups that already completed it keep it (roll them back with
"fleetctl rollback --group G"). --reason is required: it is the
quarantine's reason and goes into the audit trail.`,
		Example: `  fleetctl quarantine add 1.4.2 --reason "CVE-2026-1234 in the bundled libfoo"
  fleetctl quarantine add 1.4.2 --reason "leaks memory" -o json | jq .revision`,
		Args: versionArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			o.Version = args[0]
			return RunQuarantineAdd(cmd.Context(), o)
		},
	}
	writeOutputFlag(cmd, &o.Output)
	appFlag(cmd, g)
	return cmd
}

func newQuarantineRmCmd(g *Global) *cobra.Command {
	o := &QuarantineOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "rm VERSION",
		Short: "Lift the quarantine of a version",
		Long: `Lift the quarantine of VERSION. Groups it halted stay halted until an
operator resets them ("fleetctl reset --group G --force --reason …"): lifting says the version
may be rolled out again, not that it goes on by itself. The controller
quarantines it again only if quarantine_after agents roll back from it in
update attempts that begin after the lift.`,
		Example: `  fleetctl quarantine rm 1.4.2 --reason "the failures were a bad config, fixed"
  fleetctl quarantine rm 1.4.2 && fleetctl reset --group prod --force --reason "1.4.2 fixed"`,
		Aliases: []string{"lift"},
		Args:    versionArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			o.Version = args[0]
			return RunQuarantineRm(cmd.Context(), o)
		},
	}
	writeOutputFlag(cmd, &o.Output)
	appFlag(cmd, g)
	return cmd
}

// QuarantineReport is "fleetctl quarantine ls -o json": the stored list and
// its revision (0: none written).
type QuarantineReport struct {
	rollout.QuarantineList
	Revision uint64 `json:"revision"`
}

// RunQuarantineLs is "fleetctl quarantine ls".
func RunQuarantineLs(ctx context.Context, o *QuarantineOptions) error {
	ctx, f, done, err := o.appSession(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := f.ReadState(ctx)
	if err != nil {
		return err
	}
	if p, bad := st.Problem(kv.BucketPlan, kv.KeyQuarantine); bad {
		return p
	}
	l := st.Quarantine.Value
	if o.Output == "json" {
		if l.Versions == nil {
			l.Versions = []rollout.Quarantine{}
		}
		return writeJSON(o.Out, QuarantineReport{QuarantineList: l, Revision: st.Quarantine.Revision})
	}
	if len(l.Versions) == 0 {
		_, err := fmt.Fprintln(o.Out, "No version is quarantined.")
		return err
	}
	now := o.Now()
	// The reason gets what the other columns leave of 100.
	rows := [][]string{{"VERSION", "SINCE", "BY", "AGENTS", "HALTED"}}
	for _, q := range l.Versions {
		halted := haltedBy(st, q.Version)
		hg := "-"
		if len(halted) > 0 {
			hg = strings.Join(halted, ",")
		}
		rows = append(rows, []string{cell(q.Version, 40), age(now, q.At), cell(q.By, 20), fmt.Sprint(q.AgentCount), cell(hg, 20)})
	}
	used := 0
	for c := range rows[0] {
		w := 0
		for _, r := range rows {
			w = max(w, utf8.RuneCountInString(r[c]))
		}
		used += w + 2
	}
	room := max(100-used, 20)
	tw := newTable(o.Out)
	fmt.Fprintln(tw, strings.Join(rows[0], "\t")+"\tREASON")
	for i, q := range l.Versions {
		fmt.Fprintln(tw, strings.Join(rows[i+1], "\t")+"\t"+cell(q.Reason, room))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, q := range l.Versions {
		if len(q.Agents) == 0 {
			continue
		}
		fmt.Fprintf(o.Out, "\n%s rolled back on:\n", escape.Text(q.Version))
		for _, id := range q.Agents {
			fmt.Fprintf(o.Out, "  %s\n", escape.Text(string(id)))
		}
		if q.AgentCount > len(q.Agents) {
			fmt.Fprintf(o.Out, "  and %d more\n", q.AgentCount-len(q.Agents))
		}
	}
	return nil
}

// versionArg wants exactly the VERSION argument.
func versionArg(cmd *cobra.Command, args []string) error {
	switch len(args) {
	case 1:
		return nil
	case 0:
		return cliutil.Usagef("%s: give the VERSION (e.g. 1.4.2)", strings.TrimPrefix(cmd.CommandPath(), "fleetctl "))
	}
	return cliutil.Usagef("%s: one VERSION only, got %d arguments", strings.TrimPrefix(cmd.CommandPath(), "fleetctl "), len(args))
}

// haltedBy names, sorted, the groups halted with target v by a quarantine.
func haltedBy(st *kv.State, v string) []string {
	var out []string
	for name, e := range st.Groups {
		gs := e.Value
		if gs.TargetVersion == v && gs.Halted && strings.HasPrefix(gs.HaltReason, "quarantined:") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// rolling names, sorted, the groups rolling v out (unstarted, canary or
// active, its target).
func rolling(st *kv.State, v string) []string {
	var out []string
	for name, e := range st.Groups {
		gs := e.Value
		if gs.TargetVersion == v && (gs.State == rollout.StateUnstarted || gs.State.InProgress()) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// quarantineVersion checks and normalizes the VERSION argument.
func quarantineVersion(v string) (string, error) {
	v = stripV(v)
	if err := rollout.ValidateVersion(v); err != nil {
		return "", cliutil.Usagef("VERSION: %v", err)
	}
	return v, nil
}

// RunQuarantineAdd is "fleetctl quarantine add".
func RunQuarantineAdd(ctx context.Context, o *QuarantineOptions) error {
	v, err := quarantineVersion(o.Version)
	if err != nil {
		return err
	}
	reason := strings.TrimSpace(o.Reason)
	if reason == "" {
		return cliutil.Usagef("quarantine add %s: --reason is required: say why the version must not be rolled out; nothing written", v)
	}
	ctx, f, done, err := o.appSession(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := f.ReadState(ctx)
	if err != nil {
		return err
	}
	cur := st.Quarantine
	var before any = cur.Value
	replacing := false
	if p, bad := st.Problem(kv.BucketPlan, kv.KeyQuarantine); bad {
		// Like plan set over a bad spec: replace it, compare-and-swap on
		// its revision, and say what was lost.
		fmt.Fprintf(o.ErrOut, "warning: %v\nIt is replaced by a list holding %s alone: add the other quarantined versions again.\n", p.Err, v)
		cur, before, replacing = kv.Entry[rollout.QuarantineList]{Value: rollout.QuarantineList{V: rollout.SchemaVersion}, Revision: p.Revision}, nil, true
	} else if cur.Revision == 0 {
		before = nil
	}
	if old, ok := cur.Value.Lookup(v); ok {
		return fmt.Errorf("quarantine add %s: %s is already quarantined (since %s, by %s: %s); nothing written",
			v, v, old.At.UTC().Format("2006-01-02 15:04 MST"), old.By, shorten(old.Reason, 120))
	}
	q := rollout.Quarantine{Version: v, Reason: truncateText(reason, 300), At: o.Now().UTC(), By: truncateText(o.actor(), 300)}
	next, err := cur.Value.Add(q)
	if err != nil {
		return fmt.Errorf("quarantine add %s: %w; nothing written", v, err)
	}
	rev, err := save(ctx, o.Global, f.Fleet, f.Plan, f.NS.Quarantine(), next, cur.Revision, change{Command: "quarantine add", Before: before})
	if err != nil {
		return err
	}
	groups := rolling(st, v)
	change := fmt.Sprintf("%s quarantined by %s: %s", v, q.By, q.Reason)
	if o.Output == "json" {
		return writeJSON(o.Out, WriteResult{Command: "quarantine add", Written: true, Bucket: kv.BucketPlan, Key: f.NS.Quarantine(),
			Revision: rev, PreviousRevision: cur.Revision, Value: next, Changes: []string{change}})
	}
	what := "written"
	if replacing {
		what = "replaced"
	}
	fmt.Fprintf(o.Out, "%s (%s %s, revision %d)\n", change, f.where(f.NS.Quarantine()), what, rev)
	if len(groups) > 0 {
		fmt.Fprintf(o.Out, "Groups rolling it out halt at the controller's next step: %s.\n", strings.Join(groups, ", "))
	}
	_, err = fmt.Fprintf(o.Out, "No group offers %s to new or unstarted hosts; fleetctl plan set refuses it without --force. Lift with: fleetctl quarantine rm%s %s\n", v, f.appArg(), v)
	return err
}

// RunQuarantineRm is "fleetctl quarantine rm".
func RunQuarantineRm(ctx context.Context, o *QuarantineOptions) error {
	v, err := quarantineVersion(o.Version)
	if err != nil {
		return err
	}
	ctx, f, done, err := o.appSession(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := f.ReadState(ctx)
	if err != nil {
		return err
	}
	if p, bad := st.Problem(kv.BucketPlan, kv.KeyQuarantine); bad {
		return fmt.Errorf("quarantine rm %s: %w", v, p)
	}
	cur := st.Quarantine
	next, old, err := cur.Value.Lift(v, o.actor(), strings.TrimSpace(o.Reason), o.Now().UTC())
	if errors.Is(err, rollout.ErrBadQuarantine) && !cur.Value.Quarantined(v) {
		names := make([]string, 0, len(cur.Value.Versions))
		for _, q := range cur.Value.Versions {
			names = append(names, q.Version)
		}
		list := "no version is quarantined"
		if len(names) > 0 {
			list = "quarantined: " + strings.Join(names, ", ")
		}
		return fmt.Errorf("quarantine rm %s: %s is not quarantined (%s; see fleetctl quarantine ls); nothing written", v, v, list)
	}
	if err != nil {
		return fmt.Errorf("quarantine rm %s: %w; nothing written", v, err)
	}
	rev, err := save(ctx, o.Global, f.Fleet, f.Plan, f.NS.Quarantine(), next, cur.Revision, change{Command: "quarantine rm", Before: cur.Value})
	if err != nil {
		return err
	}
	halted := haltedBy(st, v)
	change := fmt.Sprintf("%s no longer quarantined (it was since %s, by %s: %s)", v, old.At.UTC().Format("2006-01-02 15:04 MST"), old.By, old.Reason)
	if o.Output == "json" {
		return writeJSON(o.Out, WriteResult{Command: "quarantine rm", Written: true, Bucket: kv.BucketPlan, Key: f.NS.Quarantine(),
			Revision: rev, PreviousRevision: cur.Revision, Value: next, Changes: []string{change}})
	}
	fmt.Fprintf(o.Out, "%s (%s written, revision %d)\n", change, f.where(f.NS.Quarantine()), rev)
	if len(halted) > 0 {
		fmt.Fprintf(o.Out, "Groups it halted stay halted until you reset them:\n")
		for _, g := range halted {
			fmt.Fprintf(o.Out, "  fleetctl reset%s --group %s --force --reason \"…\"\n", f.appArg(), g)
		}
	} else {
		fmt.Fprintln(o.Out, "No group is halted by it now (a group it halted stays halted until fleetctl reset --group G --force --reason \"…\").")
	}
	return nil
}

// truncateText cuts s to n bytes at a rune boundary, marking the cut.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// checkQuarantined refuses a plan whose target or start version is
// quarantined, unless forced: groups would halt at once on the target, and
// new hosts of groups with no history would install the start.
func checkQuarantined(f appFleet, st *kv.State, next, prev rollout.Spec, hadSpec, force bool) error {
	if _, bad := st.Problem(kv.BucketPlan, kv.KeyQuarantine); bad && !force {
		return fmt.Errorf("the stored quarantine list (%s) is not valid, so whether the versions are quarantined is not known; fix it (fleetctl quarantine ls%s says how) or add --force; nothing written", f.where(f.NS.Quarantine()), f.appArg())
	}
	for _, c := range []struct {
		flag, v string
		changed bool
	}{
		{"--target", next.TargetVersion, !hadSpec || next.TargetVersion != prev.TargetVersion},
		{"--start", next.StartVersion, !hadSpec || next.StartVersion != prev.StartVersion},
	} {
		q, ok := st.Quarantine.Value.Lookup(c.v)
		if !ok || !c.changed || force {
			continue
		}
		return fmt.Errorf("%s %s is quarantined (since %s, by %s: %s): no group rolls it out and new hosts never get it; lift the quarantine first (fleetctl quarantine rm%s %s), or add --force to write the plan anyway (groups rolling a quarantined target halt at once); nothing written",
			c.flag, c.v, q.At.UTC().Format("2006-01-02 15:04 MST"), q.By, shorten(q.Reason, 200), f.appArg(), c.v)
	}
	return nil
}
