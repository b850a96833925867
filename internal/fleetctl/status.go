package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// StatusOptions are the flags of "fleetctl status".
type StatusOptions struct {
	*Global
	Output string
	// Group limits the report to one group.
	Group string
	// Wait re-reads the status until every group is done (nil) or one
	// halts or is rolled back (an ExitError with cliutil.ExitHalted).
	Wait bool
	// WaitInterval is how often Wait re-reads; default 2s.
	WaitInterval time.Duration
	// BySite shows the table of agents by site even when no agent names
	// a site (it is shown whenever one does).
	BySite bool
}

// The report types are the view package's: the dashboard shows the same.
type (
	StatusReport  = view.StatusReport
	PlanReport    = view.PlanReport
	GroupReport   = view.GroupReport
	GroupRollout  = view.GroupRollout
	AgentSplit    = view.AgentSplit
	VersionReport = view.VersionReport
)

// BuildStatus turns fleet_stats entries into the report at now.
func BuildStatus(entries []kv.Stats, now time.Time) StatusReport {
	return view.BuildStatus(entries, now)
}

// BuildRolloutStatus is view.BuildRolloutStatus.
func BuildRolloutStatus(entries []kv.Stats, st *kv.State, now time.Time) StatusReport {
	return view.BuildRolloutStatus(entries, st, now)
}

func newStatusCmd(g *Global) *cobra.Command {
	o := &StatusOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the rollout and the agents per group and version",
		Long: `Show the rollout: the effective mode, start and target version, and per group
its state, how long it has been in it, how many of its agents are updated (on
the target), updating (installing it right now: downloading, or waiting for
it to prove healthy), waiting (not told to update yet, or blocked on
infrastructure: a release site down or a full disk, which the agent retries
by itself) or failed (not on the target, rolled back or reporting another
error), and ALLOWED: the share of the
group the controller lets update so far (not a share done). Notes below the
table give the groups a group requires before it starts, canaries timed out
(missing longer than health_timeout), agents unreachable (no heartbeat for
three intervals: in none of the columns, and not counted by the rollout),
updates timed out (longer than update_timeout: failed for the threshold),
agents blocked on infrastructure (not failed) and a hold on them (progress
held while more than infrastructure_hold of those in flight are blocked; it
ends by itself), halts and waits. A version quarantined fleet-wide is one
"Quarantined:" entry under the header (why, the groups it halts, how to go
on); the groups it halts only point at it. "Failed agents:" lists, for each
group counting failures, up to 5 failed agents with host, id, reason and
the last line their app printed (fleetctl agents ls --id ID shows all of
it). Below that, how many agents run each
version, and, when any agent's heartbeat names a site (agentd --site, or the
JetStream domain of the NATS server it connects to), the same columns per
group and site (--by-site shows that table even when none does).

The counts are the controllers' fleet_stats entries younger than one minute;
agents count once they have heartbeated for one interval, and drop out after
the agent expiry.

A group done with agents that failed the target (rolled back from it, or
reporting an error) shows as "done (N failed)", with a note.

--wait re-reads every 2s until every configured group is done on the target
or one halts or is rolled back, then prints the status and exits:
  0  every group done, and no agent of a done group failed the target
  3  a group halted or was rolled back
  4  every group done, but agents of a done group failed the target
     ("done with failures": fleetctl agents ls --group G shows them)`,
		Example: `  fleetctl status
  fleetctl status --group prod
  fleetctl status --app db
  fleetctl status --wait && echo "rolled out everywhere"
  fleetctl status --wait; [ $? -eq 4 ] && echo "done, but some hosts rolled back"
  fleetctl status --by-site --group prod
  fleetctl status -o json | jq '.groups[] | {name, sites: [.sites[]? | {site, agents, failed}]}'
  fleetctl status -o json | jq '.groups[] | {name, agents, state: .rollout.state}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			if err := checkGroupFilter(o.Group); err != nil {
				return err
			}
			return RunStatus(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Group, "group", "", "only this group")
	cmd.Flags().BoolVar(&o.Wait, "wait", false, "wait until every group is done (exit 0; 4 when agents failed) or one halts (exit 3)")
	cmd.Flags().BoolVar(&o.BySite, "by-site", false, "show agents by site even when no agent names one (shown whenever one does)")
	outputFlag(cmd, &o.Output)
	appFlag(cmd, g)
	return cmd
}

// RunStatus is "fleetctl status".
func RunStatus(ctx context.Context, o *StatusOptions) error {
	if o.Wait {
		return runStatusWait(ctx, o)
	}
	ctx, f, done, err := o.appSession(ctx)
	if err != nil {
		return err
	}
	defer done()
	rep, err := readStatus(ctx, f, o.ErrOut, o.Now())
	if err != nil {
		return err
	}
	if rep, err = filterGroup(rep, o.Group); err != nil {
		return err
	}
	if err := addFailures(ctx, f, &rep, o.Now()); err != nil {
		fmt.Fprintf(o.ErrOut, "warning: cannot read the failed agents' heartbeats: %s\n", escape.Text(err.Error()))
	}
	warnProblems(o.ErrOut, rep.Problems)
	return o.print(rep, f, o.standing(ctx, f, rep))
}

// standing is what the release catalog says of the versions rep's hosts
// run (nil: no catalog). A catalog that cannot be read is a warning: the
// status is still shown.
func (o *StatusOptions) standing(ctx context.Context, f appFleet, rep StatusReport) *ReleaseStanding {
	c, ok, err := readCatalog(ctx, f.Fleet)
	if err != nil {
		fmt.Fprintf(o.ErrOut, "warning: cannot read the release catalog, so hosts on end-of-life versions or behind a security release are not shown: %s\n", escape.Text(err.Error()))
		return nil
	}
	if !ok {
		return nil
	}
	return releaseStanding(c, f.NS.Name, rep, o.Now())
}

// addFailures fills the failures of every group of rep that counts a
// failed agent, from the last heartbeats of that group's agents (only
// those groups are read: a fleet at peace costs nothing).
func addFailures(ctx context.Context, f appFleet, rep *StatusReport, now time.Time) error {
	for i := range rep.Groups {
		g := &rep.Groups[i]
		if g.Failed == 0 && (g.Rollout == nil || g.Rollout.Agents.Failed == 0 && g.Rollout.FailedCount == 0) {
			continue
		}
		stored, err := f.LastHeartbeats(ctx, g.Name)
		if err != nil {
			return err
		}
		hbs, seen := make([]heartbeat.Heartbeat, 0, len(stored)), make([]time.Time, 0, len(stored))
		for _, s := range stored {
			hb, err := s.Decode()
			if err != nil {
				continue // agents ls lists what is wrong with it
			}
			hbs, seen = append(hbs, *hb), append(seen, s.Stored)
		}
		// Interval 0: a failure is a fact of the past, shown whether or
		// not the agent is still heard.
		g.Failures, g.FailuresTotal = view.GroupFailures(hbs, seen, now, 0)
	}
	return nil
}

// statusJSON is status -o json: the report, and what the release
// repository says of the versions its hosts run (absent without a
// catalog).
type statusJSON struct {
	StatusReport
	Releases *ReleaseStanding `json:"releases,omitempty"`
}

func (o *StatusOptions) print(rep StatusReport, f appFleet, rs *ReleaseStanding) error {
	if o.Output == "json" {
		return writeJSON(o.Out, statusJSON{StatusReport: rep, Releases: rs})
	}
	if f.Multi {
		fmt.Fprintf(o.Out, "App: %s\n", f.NS.Name)
	}
	if err := writeStatusTable(o.Out, rep, o.Now()); err != nil {
		return err
	}
	if err := writeSiteTable(o.Out, rep, o.BySite); err != nil {
		return err
	}
	writeStanding(o.Out, rs, rep.Plan, f.appArg())
	return nil
}

// readStatus reads counts, config, spec and group statuses. Stored values
// that are not what their key should hold are skipped and listed in the
// report's Problems. When warn is not nil, a rollout state that cannot be
// read from the bus is a warning on it and the counts are still shown;
// otherwise it is an error.
func readStatus(ctx context.Context, f appFleet, warn io.Writer, now time.Time) (StatusReport, error) {
	entries, skipped, err := f.ReadValidStats(ctx)
	if err != nil {
		return StatusReport{}, err
	}
	st, err := f.ReadState(ctx)
	if err != nil {
		if warn == nil {
			return StatusReport{}, err
		}
		fmt.Fprintf(warn, "warning: cannot read the rollout state, showing agent counts only: %s\n", escape.Text(err.Error()))
		st = nil
	}
	rep := BuildRolloutStatus(entries, st, now)
	rep.Problems = problemsOf(skipped)
	if st != nil {
		rep.Problems = append(rep.Problems, f.problems(st.Problems)...)
	}
	return rep, nil
}

// filterGroup keeps only group in rep ("" keeps all).
func filterGroup(rep StatusReport, group string) (StatusReport, error) {
	if group == "" {
		return rep, nil
	}
	for _, g := range rep.Groups {
		if g.Name == group {
			rep.Groups = []GroupReport{g}
			return rep, nil
		}
	}
	names := make([]string, len(rep.Groups))
	for i, g := range rep.Groups {
		names[i] = g.Name
	}
	msg := fmt.Sprintf("group %q: not in the config, no rollout status and no agents counted", group)
	if len(names) > 0 {
		msg += "; the groups are: " + strings.Join(names, ", ")
	}
	if near, ok := rollout.ClosestGroupName(group, names); ok {
		msg += fmt.Sprintf("\ndid you mean --group %s?", near)
	}
	return rep, errors.New(msg)
}

// runStatusWait is "fleetctl status --wait".
func runStatusWait(ctx context.Context, o *StatusOptions) error {
	f, closeFn, err := o.openApp(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	interval := o.WaitInterval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		rctx, cancel := o.withTimeout(ctx)
		rep, err := readStatus(rctx, f, nil, o.Now())
		cancel()
		if err != nil {
			return err
		}
		if err := rolloutProblem(rep.Problems); err != nil {
			return err
		}
		if rep.Plan == nil {
			return fmt.Errorf("nothing to wait for: %w", f.noPlan())
		}
		if rep, err = filterGroup(rep, o.Group); err != nil {
			return err
		}
		done, verdict := waitVerdict(rep)
		if done {
			if err := addFailures(ctx, f, &rep, o.Now()); err != nil {
				fmt.Fprintf(o.ErrOut, "warning: cannot read the failed agents' heartbeats: %s\n", escape.Text(err.Error()))
			}
			rctx, cancel := o.withTimeout(ctx)
			rs := o.standing(rctx, f, rep)
			cancel()
			if err := o.print(rep, f, rs); err != nil {
				return err
			}
			return verdict
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("status --wait: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// rolloutProblem is the error for waiting on a rollout that cannot finish:
// the config, the spec or a group status is not valid, and the controller
// moves nothing (or not that group) until an operator replaces it. Bad
// counts do not stop a rollout and are not an error here.
func rolloutProblem(ps []Problem) error {
	for _, p := range ps {
		if strings.HasPrefix(p.Key, kv.BucketConfig+"/") || strings.HasPrefix(p.Key, kv.BucketPlan+"/") {
			return fmt.Errorf("status --wait: %s is not valid, so the rollout does not finish until it is replaced: %s; to repair: %s",
				p.Key, p.Error, p.Fix)
		}
	}
	return nil
}

// waitVerdict says whether waiting is over: every configured group done on
// the target (nil, or exit 4 when agents of a done group failed the target:
// done with failures), or one halted or rolled back (exit 3).
func waitVerdict(rep StatusReport) (done bool, err error) {
	all := true
	var failed []string
	for _, g := range rep.Groups {
		r := g.Rollout
		if r == nil || !r.InConfig {
			continue
		}
		switch {
		case r.State == "" || r.Stale:
			all = false
		case r.Halted:
			return true, cliutil.ExitError{Code: cliutil.ExitHalted, Err: fmt.Errorf("group %q halted: %s", g.Name, r.HaltReason)}
		case r.State == rollout.StateRolledBack:
			return true, cliutil.ExitError{Code: cliutil.ExitHalted, Err: fmt.Errorf("group %q was rolled back: %s", g.Name, r.Reason)}
		case r.State != rollout.StateDone:
			all = false
		case r.DoneFailed > 0:
			failed = append(failed, fmt.Sprintf("group %q: %d of %d agents failed %s", g.Name, r.DoneFailed, g.Agents, rep.Plan.TargetVersion))
		}
	}
	if all && len(failed) > 0 {
		return true, cliutil.ExitError{Code: cliutil.ExitDoneWithFailures,
			Err: fmt.Errorf("done with failures: %s (rolled back from it or reporting an error; fleetctl agents ls --group G shows them)", strings.Join(failed, "; "))}
	}
	return all, nil
}

// writeStatusTable prints the rollout table when there is a plan, else
// agents per group and version.
func writeStatusTable(w io.Writer, rep StatusReport, now time.Time) error {
	if rep.Plan != nil {
		return writeRolloutTable(w, rep, now)
	}
	return writeVersionTable(w, rep, now)
}

// writeVersionTable prints agents per group and version.
func writeVersionTable(w io.Writer, rep StatusReport, now time.Time) error {
	var counted []GroupReport
	for _, g := range rep.Groups {
		if g.Controllers > 0 {
			counted = append(counted, g)
		}
	}
	rep.Groups = counted
	if len(rep.Groups) == 0 {
		_, err := fmt.Fprintln(w, "No agents counted. Is a controller running, and have agents heartbeated for one interval?")
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "GROUP\tAGENTS\tFAILED\tVERSION\tCOUNT\tFAILED\tAS OF")
	for _, g := range rep.Groups {
		versions := make([]string, 0, len(g.Versions))
		for v := range g.Versions {
			versions = append(versions, v)
		}
		sort.Slice(versions, func(i, j int) bool { return versionLess(versions[i], versions[j]) })
		for i, v := range versions {
			vr := g.Versions[v]
			if i == 0 {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%s ago\n", cell(g.Name, 64), g.Agents, g.Failed, cell(v, 40), vr.Count, vr.Failed, age(now, g.At))
			} else {
				fmt.Fprintf(tw, "\t\t\t%s\t%d\t%d\t\n", cell(v, 40), vr.Count, vr.Failed)
			}
		}
	}
	return tw.Flush()
}

// versionLess orders newest version first, "none" last.
func versionLess(a, b string) bool { return view.VersionLess(a, b) }
