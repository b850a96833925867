package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// GroupActionOptions are the flags of the operator actions on one group:
// run, rollback, mark-done and reset.
type GroupActionOptions struct {
	*Global
	Group string
	// Note is the deprecated --note: the reason is Global.Reason (--reason),
	// recorded in the status, the event and the audit trail. A Note is
	// joined to it (scripts written for --note keep working).
	Note string
	// Force lets run, reset, mark-done and retry push past a halt or a
	// quarantined target (with a reason); see overrideOf.
	Force bool
	// Output is text or json (a WriteResult).
	Output string
	// SkipCanaries is run's --skip-canaries: start the group straight in
	// active, without canaries (rollout.RunSkipCanaries); needs --reason.
	SkipCanaries bool
	// All is rollback's --all: every started group of the app
	// (RunRollbackAll); needs --reason, excludes --group.
	All bool
}

// verb is the command as the audit trail, the output and the suggested
// commands name it: "run --skip-canaries" for run with that flag.
func (o *GroupActionOptions) verb(name string) string {
	if o.SkipCanaries && name == "run" {
		return name + " --skip-canaries"
	}
	return name
}

// why is the operator's reason: --reason, and the deprecated --note joined
// to it when both are given and differ.
func (o *GroupActionOptions) why() string {
	r, n := strings.TrimSpace(o.Reason), strings.TrimSpace(o.Note)
	switch {
	case n == "" || n == r:
		return r
	case r == "":
		return n
	}
	return r + "; " + n
}

// groupAction is one of rollout's operator actions.
type groupAction func(st rollout.GroupStatus, note string, now time.Time) (rollout.GroupStatus, rollout.Event, error)

func newGroupActionCmd(g *Global, use, short, long, example string, run func(context.Context, *GroupActionOptions) error) *cobra.Command {
	cmd, _ := groupActionCmd(g, use, short, long, example, run)
	return cmd
}

// groupActionCmd is newGroupActionCmd, also returning the options its
// flags are bound to, for a verb that adds flags of its own.
func groupActionCmd(g *Global, use, short, long, example string, run func(context.Context, *GroupActionOptions) error) (*cobra.Command, *GroupActionOptions) {
	o := &GroupActionOptions{Global: g}
	cmd := &cobra.Command{
		Use:     use + " --group G",
		Short:   short,
		Long:    long,
		Example: example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			return run(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Group, "group", "", "the group to act on")
	noteFlag(cmd, &o.Note)
	if forceVerbs[use] {
		forceFlag(cmd, &o.Force)
	}
	writeOutputFlag(cmd, &o.Output)
	appFlag(cmd, g)
	return cmd, o
}

// noteFlag registers the deprecated --note of a group action, hidden from
// --help: --reason (global) is the one flag for why; scripts written for
// --note keep working, told on stderr (runGroupActionChecked) to move on.
// (Not cobra's MarkDeprecated: it prints to the command's output, which
// may be stdout, and -o json keeps stdout one object.)
func noteFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "note", "", "deprecated: use --reason")
	_ = cmd.Flags().MarkHidden("note")
}

// forceVerbs are the group actions that can push a group past a halt or
// its quarantined target, so take --force.
var forceVerbs = map[string]bool{"run": true, "reset": true, "mark-done": true, "retry": true}

func forceFlag(cmd *cobra.Command, dst *bool) {
	cmd.Flags().BoolVar(dst, "force", false, "act on a halted group or a quarantined target (with --reason, recorded in the audit trail)")
}

func newRunCmd(g *Global) *cobra.Command {
	cmd, o := groupActionCmd(g, "run", "Start a group now (--skip-canaries: straight in active), ignoring its window",
		`Start a group at the controller's next step, regardless of its window,
wait_hours and predecessors. A rolled back group starts again (fresh canaries
and initial count). A halted group is reset (see reset). A group that is
running or done is refused.

--skip-canaries starts it straight in active, without its canary phase: no
canaries are picked, and its agents update as max_in_flight allows from the
first step (failure_threshold and the rest of active still hold). It needs
--reason, which the group status keeps (skip_canaries), the controller's
transition unstarted → active names, and the audit trail records as
"run --skip-canaries" (fleetctl history). Allowed for an unstarted or rolled
back group, and (with --force) a halted canary group; refused for a group in
active (past its canaries), one running its canaries, and done. An approval
the config asks after the canaries (approval: after_canary) is still asked:
the group waits for it in unstarted.

A halted group, or a group whose target is quarantined, is refused unless
--force and --reason are given: the refusal says what run would do. The
forced run is recorded as "run --force" with the reason in the audit trail
(fleetctl history), the group status and the event.`,
		`  fleetctl run --group staging
  fleetctl run --group prod --reason "hotfix, approved by on-call"
  fleetctl run --group prod --skip-canaries --reason "INC-42: the fix must reach every host today"
  fleetctl run --group prod --force --reason "halt was a monitoring glitch, INC-42"`, RunRun)
	cmd.Use = "run --group G [--skip-canaries]"
	cmd.Flags().BoolVar(&o.SkipCanaries, "skip-canaries", false, "start the group straight in active, without canaries (needs --reason)")
	return cmd
}

func newRollbackCmd(g *Global) *cobra.Command {
	cmd, o := groupActionCmd(g, "rollback", "Send a group (--all: every started group) back to the start version",
		`Roll a group back: every agent of it is told to go back to the start version.
Allowed from canary, active and done; clears a halt. Never needs --force: it
is the safe direction.

--all rolls back every group of the app that started the plan's target
(canary, active or done), one compare-and-swap write, one event and one
audit record ("rollback --all") per group, and needs --reason. Unstarted and
already rolled back groups are listed as skipped. If a write fails (another
writer got there first, the bus went away), the other groups are still
rolled back; the output says which groups moved and which did not, and the
command exits 1: run it again to roll back the rest (those rolled back are
skipped). --all and --group are exclusive.`,
		`  fleetctl rollback --group prod --reason "500s on checkout"
  fleetctl rollback --all --reason "INC-51: 1.4.0 corrupts the cache"
  fleetctl rollback --all --reason "INC-51" -o json | jq '.value.groups[] | select(.outcome=="failed")'`, RunRollback)
	cmd.Use = "rollback {--group G | --all}"
	cmd.Flags().BoolVar(&o.All, "all", false, "roll back every started group of the app (needs --reason; not with --group)")
	return cmd
}

func newMarkDoneCmd(g *Global) *cobra.Command {
	return newGroupActionCmd(g, "mark-done", "Force a group to done (its agents all update at once)",
		`Mark a group done: every agent of it is told to update to the target at once
(no canaries, no failure threshold), and the groups depending on it may
start. Allowed from unstarted (skips the group), canary and active; from
rolledback only with --force and --reason: every agent of it installs the
version it was rolled back from.

A halted group, or a group whose target is quarantined, is refused unless
--force and --reason are given: every host of it would install the version
it halted on. The forced action is recorded as "mark-done --force" with the
reason in the audit trail (fleetctl history), the group status and the
event.`,
		`  fleetctl mark-done --group empty-lab --reason "no hosts there yet"
  fleetctl mark-done --group prod --force --reason "halt was the probe, not the app: INC-42"
  fleetctl mark-done --group prod --force --reason "INC-60: the 500s were the load balancer, not 1.4.0"   # a rolled back group`, RunMarkDone)
}

func newResetCmd(g *Global) *cobra.Command {
	return newGroupActionCmd(g, "reset", "Clear a group's halt and forgive its failures so far",
		`Reset a group. An active group keeps its progress, its halt is cleared and only
failures of update attempts that begin from now on count towards
failure_threshold. A group in canary restarts its canary phase with fresh
canaries.

Clearing a halt sends the version the group halted on to more hosts, so a
halted group (or one whose target is quarantined) is refused unless --force
and --reason are given; the refusal says what reset would do. The forced
reset is recorded as "reset --force" with the reason in the audit trail.`,
		`  fleetctl reset --group prod --reason "canary restarted"
  fleetctl reset --group prod --force --reason "bad host replaced, INC-42"`, RunReset)
}

// RunRun is "fleetctl run" (with SkipCanaries, "run --skip-canaries").
func RunRun(ctx context.Context, o *GroupActionOptions) error {
	if !o.SkipCanaries {
		return runGroupAction(ctx, o, "run", rollout.Run)
	}
	if strings.TrimSpace(o.Reason) == "" && strings.TrimSpace(o.Note) == "" {
		return cliutil.Usagef("run --skip-canaries: --reason is required: say why the group starts without canaries (it is recorded in the group status, the transition and the audit trail); nothing written")
	}
	return runGroupAction(ctx, o, "run", rollout.RunSkipCanaries)
}

// RunRollback is "fleetctl rollback" (with All, "rollback --all":
// RunRollbackAll).
func RunRollback(ctx context.Context, o *GroupActionOptions) error {
	switch {
	case o.All && o.Group != "":
		return cliutil.Usagef("rollback: --all and --group %s are exclusive: --group G rolls back one group, --all every started group of the app; nothing written", o.Group)
	case o.All:
		return RunRollbackAll(ctx, o)
	case o.Group == "":
		return cliutil.Usagef("rollback: say which group (--group G), or --all for every started group of the app")
	}
	return runGroupAction(ctx, o, "rollback", rollout.Rollback)
}

// RunMarkDone is "fleetctl mark-done". A rolled back group is marked done
// only forced (checkOverride refuses it otherwise): rollout.MarkDoneForced.
func RunMarkDone(ctx context.Context, o *GroupActionOptions) error {
	return runGroupAction(ctx, o, "mark-done", func(st rollout.GroupStatus, note string, now time.Time) (rollout.GroupStatus, rollout.Event, error) {
		if o.Force && st.State == rollout.StateRolledBack {
			return rollout.MarkDoneForced(st, note, now)
		}
		return rollout.MarkDone(st, note, now)
	})
}

// RunReset is "fleetctl reset".
func RunReset(ctx context.Context, o *GroupActionOptions) error {
	return runGroupAction(ctx, o, "reset", rollout.Reset)
}

// runGroupAction reads the group's status with its revision, applies the
// action, writes the result with that revision and publishes the event.
func runGroupAction(ctx context.Context, o *GroupActionOptions, name string, action groupAction) error {
	return runGroupActionChecked(ctx, o, name, action, nil)
}

// actionCheck looks at the fleet before an action's result is written: an
// error refuses the action (nothing written); report is added to the
// command's output.
type actionCheck func(ctx context.Context, f appFleet, next rollout.GroupStatus) (report actionReport, err error)

// actionReport is what an actionCheck adds to the output: lines for the
// text output, and the agents concerned (WriteResult.Agents).
type actionReport struct {
	lines  []string
	agents []rollout.AgentID
}

// runGroupActionChecked is runGroupAction with check run between the
// action and the write (nil: none).
func runGroupActionChecked(ctx context.Context, o *GroupActionOptions, name string, action groupAction, check actionCheck) error {
	if err := checkGroupFlag(o.Group); err != nil {
		return err
	}
	// One reason from here on: --reason, with a deprecated --note.
	if o.Note != "" {
		fmt.Fprintf(o.ErrOut, "note: --note is deprecated: use --reason (it is recorded in the group status, the event and the audit trail)\n")
	}
	o.Reason, o.Note = o.why(), ""
	verb := o.verb(name)
	if o.Force && o.Reason == "" {
		return cliutil.Usagef("%s --group %s --force: --reason is required with --force: say why (it is recorded in the group status, the event and the audit trail); nothing written", verb, o.Group)
	}
	ctx, f, done, err := o.appSession(ctx)
	if err != nil {
		return err
	}
	defer done()
	key := f.NS.Group(o.Group)
	e, err := f.ReadGroupStatus(ctx, o.Group)
	var bad *kv.Problem
	switch {
	case errors.Is(err, kv.ErrNotFound):
		if cfg, isDefault, cerr := f.ReadConfig(ctx); cerr == nil && !inConfig(o.Group, cfg.Value) {
			return cliutil.Usagef("%s\nnothing written", notInConfig(o.Group, cfg.Value, isDefault))
		}
		return fmt.Errorf("group %q%s has no rollout status yet: is a controller running (it writes one for every configured group)?", o.Group, f.appNote())
	case errors.As(err, &bad) && name == "reset":
		return removeBadStatus(ctx, o, f, bad)
	case errors.As(err, &bad):
		return fmt.Errorf("%s --group %s: %w", name, o.Group, err) // names the fix: reset
	case err != nil:
		return err
	}
	spec, err := f.ReadSpec(ctx)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		return fmt.Errorf("%s --group %s: %w", name, o.Group, f.noPlan())
	case err != nil:
		return fmt.Errorf("%s --group %s: %w", name, o.Group, err)
	case e.Value.TargetVersion != spec.Value.TargetVersion:
		// The controller resets a stale status for the new target at its
		// next step, and would silently undo this action.
		return fmt.Errorf("%s --group %s: the group's status is for target %s but the plan targets %s: the controller has not caught up yet; retry in a moment",
			name, o.Group, e.Value.TargetVersion, spec.Value.TargetVersion)
	}
	over, err := o.checkOverride(ctx, f, name, e.Value)
	if err != nil {
		return err
	}
	note, command := o.Reason, verb
	if over != nil {
		note, command = "forced past "+over.short+": "+o.Reason, verb+" --force"
	}
	next, ev, err := action(e.Value, note, o.Now())
	if err != nil {
		return err // rollout.ErrBadAction: says what is allowed
	}
	var report actionReport
	if check != nil {
		if report, err = check(ctx, f, next); err != nil {
			return err
		}
	}
	ev.App = f.NS.Name
	rev, err := save(ctx, o.Global, f.Fleet, f.Plan, key, next, e.Revision, change{Command: command, Group: o.Group, Before: e.Value})
	if err != nil {
		return err
	}
	err = f.PublishEvent(ev)
	if err == nil {
		err = f.JS.Conn().FlushWithContext(ctx)
	}
	if err != nil {
		return fmt.Errorf("group %q: status written (%s/%s revision %d) but the event was not published: %w", o.Group, kv.BucketPlan, key, rev, err)
	}
	if o.Output == "json" {
		changes := []string{eventChange(ev)}
		if over != nil {
			changes = append(changes, "forced past "+over.what+": "+over.effect)
		}
		return writeJSON(o.Out, WriteResult{Command: command, Written: true, Bucket: kv.BucketPlan, Key: key,
			Revision: rev, PreviousRevision: e.Revision, Value: next, Changes: changes, Event: &ev, Agents: report.agents})
	}
	if over != nil {
		fmt.Fprintf(o.Out, "FORCED past %s: %s\n", escape.Text(over.what), over.effect)
	}
	if ev.From != ev.To {
		fmt.Fprintf(o.Out, "group %q%s: %s → %s: %s\n", o.Group, f.appNote(), ev.From, ev.To, escape.Text(ev.Reason))
	} else {
		fmt.Fprintf(o.Out, "group %q%s (still %s): %s\n", o.Group, f.appNote(), ev.To, escape.Text(ev.Reason))
	}
	for _, line := range report.lines {
		fmt.Fprintln(o.Out, line)
	}
	_, err = fmt.Fprintf(o.Out, "written to %s/%s (revision %d); event on %s\n", kv.BucketPlan, key, rev, kv.EventSubject(o.Group))
	return err
}

// eventChange is an operator event as one line: "canary → active: reason".
func eventChange(ev rollout.Event) string {
	if ev.From != ev.To {
		return fmt.Sprintf("%s → %s: %s", ev.From, ev.To, ev.Reason)
	}
	return fmt.Sprintf("still %s: %s", ev.To, ev.Reason)
}

// removeBadStatus is "fleetctl reset" of a group whose stored status is not
// valid: nothing can be reset in it, and the controller leaves it alone (a
// fresh status would erase what it held, a halt for one), so the operator's
// reset deletes it, compare-and-swap on its true revision. The controller
// then writes a fresh unstarted status at its next pass and the group starts
// over by its window and predecessors.
func removeBadStatus(ctx context.Context, o *GroupActionOptions, f appFleet, bad *kv.Problem) error {
	if err := o.checkReason(ctx, f.Fleet, change{Command: "reset"}); err != nil {
		return err
	}
	if o.beforeWrite != nil {
		o.beforeWrite()
	}
	err := f.Plan.Delete(ctx, bad.Key, jetstream.LastRevision(bad.Revision))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return &ConflictError{Key: bad.Where(), Revision: bad.Revision, Err: kv.ErrConflict}
	}
	if err != nil {
		return fmt.Errorf("reset --group %s: delete %s: %w", o.Group, bad.Where(), err)
	}
	o.record(ctx, f.Fleet, kv.BucketPlan, bad.Key, change{Command: "reset", Group: o.Group}, nil, true, 0, bad.Revision)
	reason := "operator reset: removed a status that was not valid (" + bad.Err.Error() + ")"
	if o.Reason != "" {
		reason = "operator reset: " + o.Reason + "; removed a status that was not valid (" + bad.Err.Error() + ")"
	}
	ev := rollout.Event{V: rollout.SchemaVersion, App: f.NS.Name, Group: o.Group, Kind: rollout.EventOperator, Reason: reason, At: o.Now().UTC()}
	err = f.PublishEvent(ev)
	if err == nil {
		err = f.JS.Conn().FlushWithContext(ctx)
	}
	if err != nil {
		return fmt.Errorf("group %q: the invalid status %s was removed but the event was not published: %w", o.Group, bad.Where(), err)
	}
	if o.Output == "json" {
		return writeJSON(o.Out, WriteResult{Command: "reset", Written: true, Bucket: kv.BucketPlan, Key: bad.Key,
			PreviousRevision: bad.Revision, Deleted: true, Changes: []string{reason}, Event: &ev})
	}
	fmt.Fprintf(o.Out, "group %q: removed %s (revision %d), which was not valid: %s\n", o.Group, bad.Where(), bad.Revision, escape.Text(bad.Err.Error()))
	_, err = fmt.Fprintf(o.Out, "the controller writes a fresh unstarted status at its next step; the group starts over by its window and predecessors (fleetctl pause first to hold it); event on %s\n",
		kv.EventSubject(o.Group))
	return err
}
