package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"io"
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

func newPlanCmd(g *Global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show and set what is rolled out: start and target version, schedule, strategy",
		Long: `The plan spec (fleet_plan/spec) says what to roll out: the start and target
versions, the schedule (regular, immediate or time-based), the strategy
(backpressure or grouped), whether the release is critical, and the plan's
mode (see pause and resume). Agents read it directly. "plan forecast" simulates when each group
would start and be done.`,
	}
	cmd.AddCommand(newPlanShowCmd(g), newPlanSetCmd(g), newPlanForecastCmd(g))
	return cmd
}

// PlanShowOptions are the flags of "fleetctl plan show".
type PlanShowOptions struct {
	*Global
	Output string
}

func newPlanShowCmd(g *Global) *cobra.Command {
	o := &PlanShowOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print the plan spec and what each group holds until its turn",
		Example: `  fleetctl plan show
  fleetctl plan show --app db
  fleetctl plan show -o json | jq -r .target_version`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			return RunPlanShow(cmd.Context(), o)
		},
	}
	outputFlag(cmd, &o.Output)
	appFlag(cmd, g)
	return cmd
}

// errNoPlan is returned by commands that need a plan spec when there is none.
var errNoPlan = errors.New("no plan: nothing is being rolled out (create one with: fleetctl plan set --start VERSION --target VERSION)")

// RunPlanShow is "fleetctl plan show". -o json prints the spec as stored.
func RunPlanShow(ctx context.Context, o *PlanShowOptions) error {
	ctx, f, done, err := o.appSession(ctx)
	if err != nil {
		return err
	}
	defer done()
	e, err := f.ReadSpec(ctx)
	if errors.Is(err, kv.ErrNotFound) {
		return f.noPlan()
	}
	if err != nil {
		return err // a spec that is not valid names the fix
	}
	if o.Output == "json" {
		return writeJSON(o.Out, e.Value)
	}
	cfg, _, err := f.ReadConfig(ctx)
	var bad *kv.Problem
	switch {
	case errors.As(err, &bad):
		fmt.Fprintf(o.ErrOut, "warning: %v\n", bad)
	case err != nil:
		return err
	}
	effective := view.DescribeMode(cfg.Value.Mode, e.Value.Mode)
	if bad != nil {
		effective = "unknown: the stored config is not valid, and no group moves until it is replaced"
	}
	s := e.Value
	tw := newTable(o.Out)
	if f.Multi {
		fmt.Fprintf(tw, "app\t%s\n", f.NS.Name)
	}
	fmt.Fprintf(tw, "start_version\t%s\n", s.StartVersion)
	fmt.Fprintf(tw, "target_version\t%s\n", s.TargetVersion)
	fmt.Fprintf(tw, "schedule\t%s\n", s.Schedule)
	fmt.Fprintf(tw, "strategy\t%s\n", s.Strategy)
	fmt.Fprintf(tw, "critical\t%t\n", s.Critical)
	fmt.Fprintf(tw, "mode\t%s\n", s.Mode)
	fmt.Fprintf(tw, "effective mode\t%s\n", effective)
	fmt.Fprintf(tw, "revision\t%d\n", e.Revision)
	if err := tw.Flush(); err != nil {
		return err
	}
	st, err := f.ReadState(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(o.Out)
	writeHolds(o.Out, st, s)
	return nil
}

// PlanSetOptions are the flags of "fleetctl plan set"; nil settings are left
// as they are.
type PlanSetOptions struct {
	*Global
	Target   *string
	Start    *string
	Strategy *string
	Schedule *string
	Critical *bool
	// Output is text or json (a WriteResult).
	Output string
	// Force accepts a start version that a group halted on or was rolled
	// back from.
	Force bool
}

func newPlanSetCmd(g *Global) *cobra.Command {
	o := &PlanSetOptions{Global: g}
	var target, start, strategy, schedule string
	var critical bool
	cmd := &cobra.Command{
		Use:   "set",
		Short: "Create or change the plan spec",
		Long: `Create the plan spec, or change it. Only the flags you give change.

A new --target restarts the rollout: the controller resets every group to
unstarted for the new target. Until its turn, each group holds the last
version it completed (its unstarted and new hosts get that), never one it
halted on or was rolled back from; the start version is what groups with no
history and new groups hold. --start defaults to the current target if a
group completed it and none halted on it or was rolled back from it, else to
the current start; when there is no plan yet it is required. A --start that
a group halted on or was rolled back from is refused unless --force, and so
is a quarantined --target or --start (see fleetctl quarantine).
Versions are semver without a leading "v" (a leading "v" you type is dropped).

When a controller reads a release repository (controller --release-repo;
fleetctl releases ls), a new --target is checked against what it lists for
the app: a version it lacks, or one it flags end of life, is refused (exit
2, nothing written, naming the versions it has, newest first) unless
--force and --reason are given; the audit record then says "plan set
--force". A list whose last refresh failed is still used, and the message
says it may be stale. With no release repository configured there is no
check, and none for an app the repository lists no release of (its hosts
do not install through it).

--schedule: regular (the default) starts each group in its window once
the groups it depends on are done and its wait_hours passed; immediate
starts every group at once; time-based lets every group update during its
own windows, independently (no depends_on, no wait_hours): a group is done
when its window closes (agents not on the target by then are not told to
update), and active again when its next window opens while agents are off
the target. Each window lasts the group's window_length (fleetctl config
set --window-length; one hour by default).

What no flag names is kept from the previous plan, and plan set lists it
("Carried over …"); a kept critical or immediate schedule gets a WARNING line
with the command that undoes it. It then says when each group starts (the
forecast's first line per group: without --critical, a group without days
or start_hour starts only 00:00-01:00 in the config's time zone).`,
		Example: `  fleetctl plan set --start 1.3.2 --target 1.4.0
  fleetctl plan set --target 1.4.1
  fleetctl plan set --target 1.4.2 --critical --schedule immediate
  fleetctl plan set --strategy grouped
  fleetctl plan set --target 1.4.1 --schedule time-based
  fleetctl plan set --target 1.4.3 -o json | jq .revision
  fleetctl plan set --target 1.4.3 --start 1.4.1 --force
  fleetctl plan set --target 1.2.0 --force   # quarantined: groups halt until it is lifted
  fleetctl plan set --target 1.5.0-rc.1 --force --reason "INC-7: test build, not published"
  fleetctl plan set --app db --start 14.1 --target 14.2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			fs := cmd.Flags()
			if fs.Changed("target") {
				o.Target = &target
			}
			if fs.Changed("start") {
				o.Start = &start
			}
			if fs.Changed("strategy") {
				o.Strategy = &strategy
			}
			if fs.Changed("schedule") {
				o.Schedule = &schedule
			}
			if fs.Changed("critical") {
				o.Critical = &critical
			}
			return RunPlanSet(cmd.Context(), o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&target, "target", "", "version to roll out")
	fs.StringVar(&start, "start", "", "version groups with no history run before their turn (default: see above)")
	fs.StringVar(&strategy, "strategy", "", "backpressure or grouped")
	fs.StringVar(&schedule, "schedule", "", "regular (windows and dependencies), immediate (all at once) or time-based (each group in its own windows, no dependencies)")
	fs.BoolVar(&critical, "critical", false, "start groups outside their windows (--critical=false to undo)")
	writeOutputFlag(cmd, &o.Output)
	fs.BoolVar(&o.Force, "force", false, "accept a --start that a group halted on or was rolled back from, a quarantined --target or --start, or (with --reason) a --target the release repository lacks or flags end of life")
	appFlag(cmd, g)
	return cmd
}

// RunPlanSet is "fleetctl plan set".
func RunPlanSet(ctx context.Context, o *PlanSetOptions) error {
	if o.Target == nil && o.Start == nil && o.Strategy == nil && o.Schedule == nil && o.Critical == nil {
		return cliutil.Usagef("nothing to set: give --target, --start, --strategy, --schedule or --critical")
	}
	if o.Force && o.Start == nil && o.Target == nil {
		return cliutil.Usagef("--force only goes with --start or --target: it accepts a start version that a group halted on or was rolled back from, a quarantined version, and (with --reason) a --target the release repository lacks or flags end of life")
	}
	for _, v := range []struct {
		flag string
		v    *string
	}{{"--target", o.Target}, {"--start", o.Start}} {
		if v.v == nil {
			continue
		}
		*v.v = stripV(*v.v)
		if err := rollout.ValidateVersion(*v.v); err != nil {
			return cliutil.Usagef("%s: %v", v.flag, err)
		}
	}
	if o.Schedule != nil {
		// Checked before connecting: a mistyped schedule is a usage
		// error whether or not the bus answers.
		switch rollout.Schedule(*o.Schedule) {
		case rollout.ScheduleRegular, rollout.ScheduleImmediate, rollout.ScheduleTimeBased:
		default:
			return cliutil.Usagef("--schedule: schedule %q must be regular, immediate or time-based", truncateText(*o.Schedule, 40))
		}
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
	specKeyName := f.specName()
	// The spec as the stream stores it: a watch hides a message's headers,
	// and a JetStream response stored as the spec is foreign even when its
	// body reads as a spec. A spec that is not valid is replaced like a
	// missing one, with compare-and-swap on its revision: it has nothing to
	// keep, so both versions must be given.
	spec, err := f.ReadSpec(ctx)
	var bad *kv.Problem
	replacing := errors.As(err, &bad)
	switch {
	case replacing:
		st.Spec, st.HasSpec = kv.Entry[rollout.Spec]{Revision: bad.Revision}, false
	case errors.Is(err, kv.ErrNotFound):
		st.Spec, st.HasSpec = kv.Entry[rollout.Spec]{}, false
	case err != nil:
		return err
	default:
		st.Spec, st.HasSpec = spec, true
	}
	prev := st.Spec.Value
	var next rollout.Spec
	startDefaulted := false
	noPlan := "no plan yet"
	if replacing {
		noPlan = fmt.Sprintf("the stored plan spec is not valid (%v); to replace it", bad.Err)
	}
	if !st.HasSpec {
		switch {
		case o.Target == nil:
			return cliutil.Usagef("%s: --target is required (the version to roll out)", noPlan)
		case o.Start == nil:
			return cliutil.Usagef("%s: --start is required (the version the fleet runs now)", noPlan)
		}
		next = rollout.DefaultSpec(*o.Start, *o.Target)
	} else {
		next = prev
		if o.Target != nil && *o.Target != prev.TargetVersion {
			next.TargetVersion = *o.Target
			if o.Start == nil {
				next.StartVersion, startDefaulted = rollout.DefaultStart(prev, st.Plan().Groups), true
			}
		}
		if o.Start != nil {
			next.StartVersion = *o.Start
		}
	}
	if o.Strategy != nil {
		next.Strategy = rollout.Strategy(*o.Strategy)
	}
	if o.Schedule != nil {
		next.Schedule = rollout.Schedule(*o.Schedule)
	}
	if o.Critical != nil {
		next.Critical = *o.Critical
	}
	if err := next.Validate(); err != nil {
		return cliutil.UsageError{Err: err}
	}
	if st.HasSpec && next == prev {
		if o.Output == "json" {
			return writeJSON(o.Out, f.specResult("plan set", false, next, st.Spec.Revision, st.Spec.Revision))
		}
		_, err := fmt.Fprintf(o.Out, "%s unchanged (revision %d): the values given are the current ones; nothing written\n", specKeyName, st.Spec.Revision)
		return err
	}
	if o.Start != nil || startDefaulted {
		if err := checkStart(next.StartVersion, st, o.Start != nil, o.Force); err != nil {
			return err
		}
	}
	if err := checkQuarantined(f, st, next, prev, st.HasSpec, o.Force); err != nil {
		return err
	}
	// A new target is checked against the release repository's catalog
	// (none: nothing to check). A refusal is exit 2; --force passes it
	// with a reason, and the audit record says "plan set --force".
	var rc releaseCheck
	command := "plan set"
	if !st.HasSpec || next.TargetVersion != prev.TargetVersion {
		if rc, err = checkRelease(ctx, f, next.TargetVersion, o.Now()); err != nil {
			return err
		}
		if rc.refusal != "" {
			switch {
			case !o.Force && rc.unread:
				return errors.New(rc.refusal)
			case !o.Force:
				return cliutil.ExitError{Code: cliutil.ExitUsage, Err: errors.New(rc.refusal)}
			}
			if strings.TrimSpace(o.Reason) == "" {
				return cliutil.Usagef("--target %s --force: --reason is required to force past the release repository (%s): say why (it is recorded in the audit trail); nothing written", next.TargetVersion, rc.short)
			}
			command = "plan set --force"
		}
	}
	var before any
	if st.HasSpec {
		before = prev
	}
	rev, err := save(ctx, o.Global, f.Fleet, f.Plan, f.NS.Spec(), next, st.Spec.Revision, change{Command: command, Before: before})
	if err != nil {
		return err
	}
	retarget := !st.HasSpec || next.TargetVersion != prev.TargetVersion
	// Notes go to stderr with -o json, which keeps stdout one object.
	notes := o.Out
	if o.Output == "json" {
		r := f.specResult("plan set", true, next, rev, st.Spec.Revision)
		if st.HasSpec {
			r.Changes = describeSpecChange(prev, next)
		}
		if err := writeJSON(o.Out, r); err != nil {
			return err
		}
		notes = o.ErrOut
	} else if replacing {
		fmt.Fprintf(o.Out, "%s replaced (revision %d, was %d, which was not valid): %s → %s, %s, %s\n",
			specKeyName, rev, st.Spec.Revision, next.StartVersion, next.TargetVersion, next.Schedule, next.Strategy)
	} else if !st.HasSpec {
		fmt.Fprintf(o.Out, "%s created (revision %d): %s → %s, %s, %s", specKeyName, rev, next.StartVersion, next.TargetVersion, next.Schedule, next.Strategy)
		if next.Critical {
			fmt.Fprint(o.Out, ", critical")
		}
		fmt.Fprintln(o.Out)
	} else {
		fmt.Fprintf(o.Out, "%s written (revision %d, was %d):\n", specKeyName, rev, st.Spec.Revision)
		for _, c := range describeSpecChange(prev, next) {
			fmt.Fprintf(o.Out, "  %s\n", c)
		}
	}
	if rc.refusal != "" {
		fmt.Fprintf(notes, "FORCED past the release repository: %s (reason: %s)\n", rc.short, escape.Text(o.Reason))
	}
	for _, n := range rc.notes {
		fmt.Fprintln(notes, n)
	}
	if st.HasSpec && !replacing {
		writeCarriedOver(notes, o, prev, next, f.appArg())
	}
	if retarget {
		fmt.Fprintln(notes, "New target: groups restart from unstarted (the controller resets them at its next step).")
	}
	if q, ok := st.Quarantine.Value.Lookup(next.TargetVersion); ok && retarget {
		fmt.Fprintf(notes, "Warning: %s is quarantined (--force): groups rolling it out halt at once until it is lifted (fleetctl quarantine rm%s %s) and they are reset. Reason: %s\n", q.Version, f.appArg(), q.Version, escape.Text(q.Reason))
	}
	if next.Downgrade() {
		fmt.Fprintf(notes, "Note: %s → %s is a downgrade; agents apply the database downgrade rules.\n", next.StartVersion, next.TargetVersion)
	}
	if retarget || o.Start != nil {
		writeHolds(notes, st, next)
	}
	o.writeStarts(ctx, f, notes)
	return nil
}

// writeCarriedOver says which settings of the spec were kept from the
// previous plan because no flag named them: a plan set --target after a
// plan set --critical keeps critical, and the rollout then ignores every
// window. Critical is said loudly, on its own line.
func writeCarriedOver(w io.Writer, o *PlanSetOptions, prev, next rollout.Spec, appArg string) {
	a, b := fieldsOf(prev), fieldsOf(next)
	given := map[string]bool{
		"target_version": o.Target != nil, "start_version": o.Start != nil,
		"schedule": o.Schedule != nil, "strategy": o.Strategy != nil, "critical": o.Critical != nil,
	}
	var kept []string
	for _, k := range []string{"start_version", "target_version", "schedule", "strategy", "critical", "mode"} {
		if !given[k] && string(a[k]) == string(b[k]) {
			kept = append(kept, fmt.Sprintf("%s %s", k, show(b[k])))
		}
	}
	if len(kept) == 0 {
		return
	}
	fmt.Fprintf(w, "Carried over from the previous plan (no flag given): %s\n", strings.Join(kept, ", "))
	if o.Critical == nil && next.Critical {
		fmt.Fprintln(w, "WARNING: critical is still true (carried over): groups start outside their windows and wait_hours. Undo: fleetctl plan set"+appArg+" --critical=false")
	}
	if o.Schedule == nil && next.Schedule == rollout.ScheduleImmediate {
		fmt.Fprintln(w, "WARNING: schedule is still immediate (carried over): every group starts at once, ignoring windows and dependencies. Undo: fleetctl plan set"+appArg+" --schedule regular")
	}
	if next.Mode == rollout.ModePaused {
		fmt.Fprintln(w, "Note: the plan is paused (carried over): nothing moves until fleetctl resume"+appArg)
	}
}

// writeStarts says when each group starts under the plan just written:
// the first lines of "fleetctl plan forecast", so that a plan whose groups
// wait for a window (without critical, a group without days and start_hour
// starts only 00:00-01:00 in the config's zone) says so at once. A
// forecast that cannot be made is a note, not a failure: the plan is
// written.
func (o *PlanSetOptions) writeStarts(ctx context.Context, f appFleet, w io.Writer) {
	po := &PlanForecastOptions{Global: &Global{Out: io.Discard, ErrOut: io.Discard, Now: o.Now}, InstallTime: rollout.DefaultInstallTime}
	now := o.Now()
	in, _, err := forecastInput(ctx, f, po, now)
	if err != nil {
		fmt.Fprintf(w, "When groups start: not known (%v)\n", err)
		return
	}
	fc := rollout.Simulate(in)
	loc, err := in.Config.Location()
	if err != nil {
		loc = time.UTC
	}
	fmt.Fprintf(w, "When each group starts (forecast; fleetctl plan forecast has the rest):\n")
	tw := newTable(w)
	for _, g := range fc.Groups {
		var when string
		switch {
		case g.Outcome == rollout.OutcomeDone:
			when = "done already"
		case !g.Start.IsZero() && !g.Start.After(now.Add(time.Minute)):
			when = "now (" + g.Start.In(loc).Format(forecastTime) + ")"
		case !g.Start.IsZero():
			when = fmt.Sprintf("%s, in %s", g.Start.In(loc).Format(forecastTime), span(g.Start.Sub(now)))
		default:
			when = "not within the forecast: " + g.Reason
		}
		var waits []string
		for _, wt := range g.Waits {
			if !slices.Contains(waits, string(wt.Kind)) {
				waits = append(waits, string(wt.Kind))
			}
		}
		if len(waits) > 0 && g.Outcome != rollout.OutcomeDone {
			when += " (waits for: " + strings.Join(waits, ", ") + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", cell(g.Group, groupWidth), escape.Text(when))
	}
	_ = tw.Flush()
}

// describeSpecChange lists the settings next changes in prev, one a line.
func describeSpecChange(prev, next rollout.Spec) []string {
	var out []string
	a, b := fieldsOf(prev), fieldsOf(next)
	for _, k := range []string{"start_version", "target_version", "schedule", "strategy", "critical", "mode"} {
		if string(a[k]) != string(b[k]) {
			out = append(out, fmt.Sprintf("%s %s → %s", k, show(a[k]), show(b[k])))
		}
	}
	return out
}

// specResult is the WriteResult of a command that writes the app's plan
// spec.
func (f appFleet) specResult(command string, written bool, spec rollout.Spec, rev, prev uint64) WriteResult {
	return WriteResult{Command: command, Written: written, Bucket: kv.BucketPlan, Key: f.NS.Spec(),
		Revision: rev, PreviousRevision: prev, Value: spec}
}

// checkStart refuses a start version that a group halted on or was rolled
// back from: groups with no history and new hosts would install it. An
// explicit --start passes with --force.
func checkStart(start string, st *kv.State, explicit, force bool) error {
	groups := rollout.RejectedBy(st.Plan().Groups, start)
	if len(groups) == 0 || (explicit && force) {
		return nil
	}
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = fmt.Sprintf("%q", g)
	}
	what := fmt.Sprintf("group %s halted on %s or was rolled back from it", strings.Join(names, ", "), start)
	if len(groups) > 1 {
		what = fmt.Sprintf("groups %s halted on %s or were rolled back from it", strings.Join(names, ", "), start)
	}
	if !explicit {
		return fmt.Errorf("--start defaulted to %s, but %s: give --start with a version known to work; nothing written", start, what)
	}
	return fmt.Errorf("--start %s: %s, and groups with no history and new hosts would install it; give another --start, or add --force to use it anyway; nothing written", start, what)
}

// writeHolds says what each group holds until its turn under spec: the
// configured groups and those with a status, then new groups.
func writeHolds(w io.Writer, st *kv.State, spec rollout.Spec) {
	fmt.Fprintln(w, "Until their turn, groups hold (their unstarted and new hosts get):")
	tw := newTable(w)
	for _, h := range groupHolds(st, spec) {
		fmt.Fprintf(tw, "  %s\t%s\n", h.Group, h.describe())
	}
	fmt.Fprintf(tw, "  (new groups)\t%s\n", spec.StartVersion)
	_ = tw.Flush()
}

// groupHold is what one group holds under a spec.
type groupHold struct {
	Group    string
	Hold     string
	Rejected []string
}

func (h groupHold) describe() string {
	v := h.Hold
	if v == "" {
		v = "nothing: it rejected every version it could hold; agents keep what they have"
	}
	if len(h.Rejected) > 0 {
		v += " (rejected " + strings.Join(h.Rejected, ", ") + ")"
	}
	return v
}

// groupHolds are the holds of the configured groups, in config order, then
// of the other groups with a status, by name.
func groupHolds(st *kv.State, spec rollout.Spec) []groupHold {
	var names []string
	seen := map[string]bool{}
	for _, g := range st.Config.Value.Groups {
		names, seen[g.Name] = append(names, g.Name), true
	}
	var rest []string
	for n := range st.Groups {
		if !seen[n] {
			rest = append(rest, n)
		}
	}
	slices.Sort(rest)
	var out []groupHold
	for _, n := range append(names, rest...) {
		gs := st.Groups[n].Value
		out = append(out, groupHold{Group: n, Hold: gs.Hold(spec), Rejected: gs.RejectedVersions})
	}
	return out
}

// PauseOptions are the flags of "fleetctl pause" and "fleetctl resume".
type PauseOptions struct {
	*Global
	// Output is text or json (a WriteResult).
	Output string
}

func newPauseCmd(g *Global) *cobra.Command {
	o := &PauseOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "pause",
		Short: "Pause the rollout: no group moves and no agent starts an update",
		Long: `Set the plan's mode to paused. Agents read the plan directly, so none starts
an update from now on; the controller moves no group and judges nothing.
Progress is kept: "fleetctl resume" carries on from where it stopped.`,
		Example: `  fleetctl pause
  fleetctl pause --app db --reason "db migration"
  fleetctl pause -o json | jq .revision`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			return RunPause(cmd.Context(), o)
		},
	}
	writeOutputFlag(cmd, &o.Output)
	appFlag(cmd, g)
	return cmd
}

func newResumeCmd(g *Global) *cobra.Command {
	o := &PauseOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Resume a paused rollout",
		Long: `Set the plan's mode back to enabled. The rollout carries on with the progress it
had. If the config's mode is paused or disabled, that still applies: the
effective mode is the lower of the two.`,
		Example: `  fleetctl resume
  fleetctl resume -o json | jq .revision`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			return RunResume(cmd.Context(), o)
		},
	}
	writeOutputFlag(cmd, &o.Output)
	appFlag(cmd, g)
	return cmd
}

// RunPause is "fleetctl pause".
func RunPause(ctx context.Context, o *PauseOptions) error {
	return setPlanMode(ctx, o, rollout.ModePaused)
}

// RunResume is "fleetctl resume".
func RunResume(ctx context.Context, o *PauseOptions) error {
	return setPlanMode(ctx, o, rollout.ModeEnabled)
}

func setPlanMode(ctx context.Context, o *PauseOptions, mode rollout.Mode) error {
	g := o.Global
	verb := map[rollout.Mode]string{rollout.ModePaused: "pause", rollout.ModeEnabled: "resume"}[mode]
	ctx, f, done, err := g.appSession(ctx)
	if err != nil {
		return err
	}
	defer done()
	specKeyName := f.specName()
	e, err := f.ReadSpec(ctx)
	if errors.Is(err, kv.ErrNotFound) {
		return fmt.Errorf("no plan%s to %s: nothing is being rolled out (fleetctl plan set%s creates one)", f.appNote(), verb, f.appArg())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", verb, err) // a spec that is not valid names the fix
	}
	// Pausing must work whatever the config holds: a config that is not
	// valid only loses the note below.
	cfg, _, cfgErr := f.ReadConfig(ctx)
	if cfgErr != nil && !errors.Is(cfgErr, kv.ErrCorrupt) {
		return cfgErr
	}
	if view.OrEnabled(e.Value.Mode) == mode {
		if o.Output == "json" {
			err = writeJSON(g.Out, f.specResult(verb, false, e.Value, e.Revision, e.Revision))
		} else {
			_, err = fmt.Fprintf(g.Out, "plan%s already %s; nothing written\n", f.appNote(), mode)
		}
		if err != nil {
			return err
		}
	} else {
		next := e.Value
		next.Mode = mode
		rev, err := save(ctx, g, f.Fleet, f.Plan, f.NS.Spec(), next, e.Revision, change{Command: verb, Before: e.Value})
		if err != nil {
			return err
		}
		if o.Output == "json" {
			r := f.specResult(verb, true, next, rev, e.Revision)
			r.Changes = describeSpecChange(e.Value, next)
			if err := writeJSON(g.Out, r); err != nil {
				return err
			}
		} else if mode == rollout.ModePaused {
			fmt.Fprintf(g.Out, "plan%s paused (%s revision %d): agents start no update from now on and groups hold their progress; \"fleetctl resume%s\" carries on\n", f.appNote(), specKeyName, rev, f.appArg())
		} else {
			fmt.Fprintf(g.Out, "plan%s resumed (%s revision %d): groups carry on from their progress\n", f.appNote(), specKeyName, rev)
		}
	}
	if cfgErr != nil {
		fmt.Fprintf(g.ErrOut, "warning: %v\n", cfgErr)
	} else if mode == rollout.ModeEnabled && rollout.EffectiveMode(cfg.Value.Mode, mode) != rollout.ModeEnabled {
		fmt.Fprintf(g.ErrOut, "note: the config's mode is %s, so the rollout stays %s: fleetctl config set --mode enabled\n",
			cfg.Value.Mode, rollout.EffectiveMode(cfg.Value.Mode, mode))
	}
	return nil
}
