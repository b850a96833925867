package fleetctl

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// PlanForecastOptions are the flags of "fleetctl plan forecast".
type PlanForecastOptions struct {
	*Global
	// Target forecasts another target than the plan's ("": the plan's).
	Target string
	// Schedule and Critical, when set, forecast the plan with another
	// schedule or critical flag (what plan set --schedule/--critical
	// would make it), before an operator writes it.
	Schedule string
	Critical *bool
	// InstallTime is how long one agent takes from being told to update
	// until the app runs the new version.
	InstallTime time.Duration
	// At is when the simulation starts, RFC 3339 ("": now).
	At     string
	Output string
	// Local is the operator's time zone, the second line of times (nil:
	// time.Local, which honours TZ).
	Local *time.Location
}

func newPlanForecastCmd(g *Global) *cobra.Command {
	o := &PlanForecastOptions{Global: g}
	var critical bool
	cmd := &cobra.Command{
		Use:   "forecast",
		Short: "Simulate the rollout: when each group would start and be done, and what it waits for",
		Long: `Run the controller's own rollout rules over simulated time, from now (or
--at), against the stored config, plan, group statuses and the agent counts
of fleet_stats, and print per group when it would start and be done, in the
config's time zone and in yours (TZ), what it waited for before it started
(its window, wait_hours, a group it depends on, an approval), and warnings:
a window that never opens, a rollout longer than the one-week limit, fewer
agents than canary_count, no agents. Windows last each group's
window_length. Under the time-based schedule every group starts in its own
window (no wait_hours, no depends_on), and the notes list each window a
group updates in: when it closes, and how many agents are on the target
then (a group done as its window closes is active again in the next).

Assumed: every counted agent stays present and every install succeeds,
taking --install-time, then the group's min_healthy_time before the agent
reports the new version (canaries are then watched min_healthy_time more);
nobody intervenes, except that an approval is assumed given the moment it is
asked; a paused rollout is assumed resumed now. The forecast stops two weeks
after its start. It writes nothing.`,
		Example: `  fleetctl plan forecast
  fleetctl plan forecast --target 1.5.0 --install-time 5m
  fleetctl plan forecast --target 1.5.0 --schedule time-based   # before plan set --schedule time-based
  fleetctl plan forecast --app db
  fleetctl plan forecast --at 2026-11-27T15:00:00+01:00
  TZ=America/New_York fleetctl plan forecast
  fleetctl plan forecast -o json | jq -r '.groups[] | "\(.group) \(.done)"'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("critical") {
				o.Critical = &critical
			}
			return RunPlanForecast(cmd.Context(), o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Target, "target", "", "forecast this target version instead of the plan's")
	fs.StringVar(&o.Schedule, "schedule", "", "forecast with this schedule instead of the plan's: regular, immediate or time-based")
	fs.BoolVar(&critical, "critical", false, "forecast with critical set (--critical) or cleared (--critical=false) instead of the plan's")
	fs.DurationVar(&o.InstallTime, "install-time", rollout.DefaultInstallTime, "how long one agent takes to install (before min_healthy_time)")
	fs.StringVar(&o.At, "at", "", "start the simulation at this RFC 3339 time instead of now")
	outputFlag(cmd, &o.Output)
	appFlag(cmd, g)
	return cmd
}

// RunPlanForecast is "fleetctl plan forecast". It only reads.
func RunPlanForecast(ctx context.Context, o *PlanForecastOptions) error {
	if err := checkOutput(o.Output); err != nil {
		return err
	}
	if o.InstallTime <= 0 {
		return cliutil.Usagef("--install-time %s: must be positive, like 2m or 90s", o.InstallTime)
	}
	if o.Target != "" {
		o.Target = stripV(o.Target)
		if err := rollout.ValidateVersion(o.Target); err != nil {
			return cliutil.Usagef("--target: %v", err)
		}
	}
	if o.Schedule != "" {
		probe := rollout.DefaultSpec("1.0.0", "1.0.0")
		probe.Schedule = rollout.Schedule(o.Schedule)
		if err := probe.Validate(); err != nil {
			return cliutil.Usagef("--schedule %q: use regular, immediate or time-based", o.Schedule)
		}
	}
	from := o.Now()
	if o.At != "" {
		at, err := time.Parse(time.RFC3339, o.At)
		if err != nil {
			return cliutil.Usagef("--at %q: want an RFC 3339 time like 2026-11-27T15:00:00+01:00", o.At)
		}
		from = at
	}
	local := o.Local
	if local == nil {
		local = time.Local
	}
	ctx, f, done, err := o.appSession(ctx)
	if err != nil {
		return err
	}
	defer done()
	in, notes, err := forecastInput(ctx, f, o, from)
	if err != nil {
		return err
	}
	fc := rollout.Simulate(in)
	fc.Warnings = append(fc.Warnings, notes...)
	if o.Output == "json" {
		return writeJSON(o.Out, fc)
	}
	cfgLoc, err := in.Config.Location()
	if err != nil {
		cfgLoc = time.UTC
	}
	return writeForecast(o.Out, fc, cfgLoc, local)
}

// forecastInput reads what the forecast starts from: config, spec (with
// --target), group statuses, quarantine and fresh agent counts. notes are
// warnings about what it read.
func forecastInput(ctx context.Context, f appFleet, o *PlanForecastOptions, from time.Time) (rollout.ForecastInput, []string, error) {
	var in rollout.ForecastInput
	st, err := f.ReadState(ctx)
	if err != nil {
		return in, nil, err
	}
	if p, bad := st.Problem(kv.BucketConfig, kv.KeyConfig); bad {
		return in, nil, fmt.Errorf("cannot forecast: %w (no group moves until it is replaced)", p)
	}
	spec := st.Spec.Value
	switch {
	case !st.HasSpec && o.Target == "":
		if p, bad := st.Problem(kv.BucketPlan, kv.KeySpec); bad {
			return in, nil, fmt.Errorf("cannot forecast: %w; or give --target VERSION to forecast a rollout of VERSION", f.stored(p))
		}
		return in, nil, fmt.Errorf("no plan%s: nothing is being rolled out; give --target VERSION to forecast a rollout of VERSION (fleetctl plan set%s --start VERSION --target VERSION creates a plan)", f.appNote(), f.appArg())
	case !st.HasSpec:
		// The start version does not change the schedule: groups hold
		// what they hold until their turn.
		spec = rollout.DefaultSpec(o.Target, o.Target)
	case o.Target != "" && o.Target != spec.TargetVersion:
		// As plan set --target would make it.
		spec.StartVersion, spec.TargetVersion = rollout.DefaultStart(spec, st.Plan().Groups), o.Target
	}
	if o.Schedule != "" {
		spec.Schedule = rollout.Schedule(o.Schedule)
	}
	if o.Critical != nil {
		spec.Critical = *o.Critical
	}
	var notes []string
	entries, skipped, err := f.ReadValidStats(ctx)
	if err != nil {
		return in, nil, err
	}
	warnProblems(o.ErrOut, problemsOf(skipped))
	counts := map[string]rollout.Counts{}
	for _, gs := range kv.MergeStats(entries, o.Now()) {
		counts[gs.Group] = gs.Versions
	}
	if note, err := selectorCounts(ctx, f, st.Config.Value, counts); err != nil {
		return in, nil, err
	} else if note != "" {
		notes = append(notes, note)
	}
	if len(counts) == 0 {
		notes = append(notes, fmt.Sprintf("no agent counts younger than %s in %s: is a controller running? Every group is forecast with no agents", kv.StatsFreshness, kv.BucketStats))
	}
	in = rollout.ForecastInput{
		Config:      st.Config.Value,
		Spec:        spec,
		Groups:      st.Plan().Groups,
		Counts:      counts,
		Quarantine:  st.Quarantine.Value,
		Now:         from,
		InstallTime: o.InstallTime,
	}
	return in, notes, nil
}

// sameClock reports whether a and b show the same wall clock at every
// hour from from to until: TZ unset on a UTC host is "Local", not "UTC",
// and printing each time twice would say nothing.
func sameClock(a, b *time.Location, from, until time.Time) bool {
	if a.String() == b.String() {
		return true
	}
	for t := from; !t.After(until); t = t.Add(time.Hour) {
		if t.In(a).Format("MST -0700") != t.In(b).Format("MST -0700") {
			return false
		}
	}
	return !from.IsZero()
}

// zoneName names loc for people: "Local" (TZ unset) by its abbreviation at t.
func zoneName(loc *time.Location, t time.Time) string {
	if loc.String() == "Local" {
		return t.In(loc).Format("MST")
	}
	return loc.String()
}

// forecastTime is the layout of times in the forecast table: the year is
// in the header.
const forecastTime = "Mon 01-02 15:04 MST"

// writeForecast prints the forecast: a header, one row per group (times
// in the config's zone, and below in local when that differs), then the
// waits, halts and warnings of each group, wrapped to 100 columns.
func writeForecast(w io.Writer, fc rollout.Forecast, cfgLoc, local *time.Location) error {
	twoZones := !sameClock(cfgLoc, local, fc.From, fc.Until)
	at := func(t time.Time) string {
		s := t.In(cfgLoc).Format(forecastTime)
		if twoZones {
			s += " (" + t.In(local).Format(forecastTime) + ")"
		}
		return s
	}
	version := fc.TargetVersion
	if fc.StartVersion != "" && fc.StartVersion != fc.TargetVersion {
		version = fc.StartVersion + " → " + fc.TargetVersion
	}
	fmt.Fprintf(w, "Forecast:  %s from %s\n", version, fc.From.In(cfgLoc).Format("Mon 2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "Install:   %s per agent, then the group's min_healthy_time\n", fc.InstallTime)
	zones := fmt.Sprintf("%s (the config's)", cfgLoc)
	if twoZones {
		zones += fmt.Sprintf("; %s (local: second lines and in parentheses)", zoneName(local, fc.From))
	} else if cfgLoc.String() != local.String() {
		zones = fmt.Sprintf("%s (the config's, and local)", cfgLoc)
	}
	for i, l := range wrap(zones, noteWidth-11, "") {
		if i == 0 {
			fmt.Fprintf(w, "Zones:     %s\n", l)
		} else {
			fmt.Fprintf(w, "           %s\n", l)
		}
	}
	if !fc.Done.IsZero() {
		fmt.Fprintf(w, "Done:      %s, %s after the first group started\n", at(fc.Done), span(fc.Span.D()))
	} else {
		fmt.Fprintf(w, "Done:      never: not every group is done in the forecast (see below)\n")
	}
	fmt.Fprintln(w)

	var table strings.Builder
	tw := newTable(&table)
	fmt.Fprintln(tw, "GROUP\tAGENTS\tSTART\tDONE\tWAITED FOR")
	var notes []string
	for _, g := range fc.Groups {
		start, end := "-", "-"
		var start2, end2 string
		if !g.Start.IsZero() {
			start, start2 = g.Start.In(cfgLoc).Format(forecastTime), g.Start.In(local).Format(forecastTime)
		}
		var kinds []string
		for _, wt := range g.Waits {
			kinds = append(kinds, string(wt.Kind))
			switch {
			case wt.Kind == rollout.WaitApproval:
				notes = append(notes, fmt.Sprintf("%s: %s", g.Group, wt.Reason))
			case !wt.Until.IsZero():
				notes = append(notes, fmt.Sprintf("%s: waits until %s: %s", g.Group, at(wt.Until), wt.Reason))
			}
		}
		switch g.Outcome {
		case rollout.OutcomeDone:
			end, end2 = g.Done.In(cfgLoc).Format(forecastTime)+" *", g.Done.In(local).Format(forecastTime)
		case rollout.OutcomeFinishes:
			end, end2 = g.Done.In(cfgLoc).Format(forecastTime), g.Done.In(local).Format(forecastTime)
		case rollout.OutcomeHalted:
			end = "halted"
			notes = append(notes, fmt.Sprintf("%s: halted at %s: %s", g.Group, at(g.HaltedAt), g.Reason))
		case rollout.OutcomeRolledBack:
			end = "rolled back"
			notes = append(notes, fmt.Sprintf("%s: rolled back: %s", g.Group, g.Reason))
		default:
			end = "never"
			notes = append(notes, fmt.Sprintf("%s: never done: %s", g.Group, g.Reason))
		}
		if g.SkipsCanaries != "" {
			notes = append(notes, fmt.Sprintf("%s: no canary phase: %s", g.Group, g.SkipsCanaries))
		}
		if g.Caught > 0 {
			notes = append(notes, fmt.Sprintf("%s: catch-all: %d of its %d agents are hosts of groups not in the config, rolled out with it: %s",
				g.Group, g.Caught, g.Agents, strings.Join(g.CaughtGroups, ", ")))
		}
		for i, win := range g.Windows {
			notes = append(notes, forecastWindowNote(g, i, win, fc.TargetVersion, at))
		}
		for _, warn := range g.Warnings {
			notes = append(notes, fmt.Sprintf("%s: warning: %s", g.Group, warn))
		}
		for _, n := range g.Notes {
			notes = append(notes, fmt.Sprintf("%s: %s", g.Group, n))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", shorten(g.Group, groupWidth), g.Agents, start, end, shorten(strings.Join(kinds, ", "), 32))
		if twoZones && (start2 != "" || end2 != "") {
			fmt.Fprintf(tw, "\t\t%s\t%s\t\n", start2, end2)
		}
	}
	_ = tw.Flush() // a strings.Builder does not fail
	for _, l := range strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n") {
		fmt.Fprintln(w, strings.TrimRight(l, " "))
	}
	for _, g := range fc.Groups {
		if g.Outcome == rollout.OutcomeDone {
			fmt.Fprintln(w, "* done before the forecast's start")
			break
		}
	}
	for _, warn := range fc.Warnings {
		notes = append(notes, "warning: "+warn)
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			for _, l := range wrap(n, noteWidth, "    ") {
				fmt.Fprintln(w, l)
			}
		}
	}
	return nil
}

// forecastWindowNote says what a group reached in one of its windows under
// the time-based schedule.
func forecastWindowNote(g rollout.GroupForecast, i int, win rollout.ForecastWindow, target string, at func(time.Time) string) string {
	s := fmt.Sprintf("%s: window %d from %s", g.Group, i+1, at(win.From))
	if !win.Closes.IsZero() {
		s += ", closes " + at(win.Closes)
	}
	switch {
	case win.Done.IsZero():
		return s + ": not done when the forecast ends"
	case !win.Closes.IsZero() && !win.Done.Before(win.Closes):
		return s + fmt.Sprintf(": done as it closes with %d of %d agents on %s (those installing finish; the rest update in its next window)", win.OnTarget, g.Agents, target)
	}
	return s + fmt.Sprintf(": done %s with %d of %d agents on %s", at(win.Done), win.OnTarget, g.Agents, target)
}

// span writes d for people, in days beyond two: "5d1h47m", "26m".
func span(d time.Duration) string {
	d = d.Truncate(time.Minute)
	days := d / (24 * time.Hour)
	if days < 2 {
		return rollout.Duration(d).String()
	}
	s := fmt.Sprintf("%dd", days)
	if rest := d - days*24*time.Hour; rest > 0 {
		s += rollout.Duration(rest).String()
	}
	return s
}
