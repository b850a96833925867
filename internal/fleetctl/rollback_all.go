package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Issue 28, point 5: "fleetctl rollback --all" rolls back every started
// group of the app at once. There is no transaction over several keys in a
// KV bucket, so it is one compare-and-swap write per group (with its event
// and its audit record), in config order; a write that fails does not stop
// the others (rolling back is the safe direction, and the operator asked
// for all of them), and the report says exactly which groups moved and
// which did not. Run again, it skips those already rolled back.

// Outcomes of one group in rollback --all.
const (
	OutcomeRolledBack = "rolledback"
	OutcomeSkipped    = "skipped"
	OutcomeFailed     = "failed"
)

// RollbackAllReport is the Value of "fleetctl rollback --all -o json".
type RollbackAllReport struct {
	App string `json:"app"`
	// TargetVersion is the plan's target: the version rolled back from.
	TargetVersion string `json:"target_version"`
	// RolledBack, Skipped and Failed count Groups by outcome.
	RolledBack int `json:"rolled_back"`
	Skipped    int `json:"skipped"`
	Failed     int `json:"failed"`
	// Groups are the app's groups in config order, then the groups with
	// a status that the config lacks (never written to: skipped).
	Groups []RollbackAllGroup `json:"groups"`
}

// RollbackAllGroup is what rollback --all did to one group.
type RollbackAllGroup struct {
	Group string `json:"group"`
	// Outcome is rolledback (written), skipped (nothing to roll back:
	// nothing written) or failed (it should have been rolled back and was
	// not, or its event was not published: Detail says which).
	Outcome string `json:"outcome"`
	// From is the group's state when read (absent without a status).
	From rollout.State `json:"from,omitempty"`
	// Detail is the transition's reason, or why the group was skipped or
	// failed.
	Detail string `json:"detail"`
	// Key is the group's status key in fleet_plan; Revision and
	// PreviousRevision are the write's (absent when nothing was written).
	Key              string `json:"key"`
	Revision         uint64 `json:"revision,omitempty"`
	PreviousRevision uint64 `json:"previous_revision,omitempty"`
	// Written: the status was written (a group whose event failed is
	// written and failed).
	Written bool           `json:"written,omitempty"`
	Event   *rollout.Event `json:"event,omitempty"`
}

// RunRollbackAll is "fleetctl rollback --all".
func RunRollbackAll(ctx context.Context, o *GroupActionOptions) error {
	const command = "rollback --all"
	if o.Note != "" {
		fmt.Fprintf(o.ErrOut, "note: --note is deprecated: use --reason (it is recorded in the group status, the event and the audit trail)\n")
	}
	o.Reason, o.Note = o.why(), ""
	if o.Reason == "" {
		return cliutil.Usagef("%s: --reason is required: say why every started group goes back (it is recorded in each group's status, event and audit record); nothing written", command)
	}
	ctx, f, done, err := o.appSession(ctx)
	if err != nil {
		return err
	}
	defer done()
	if len(f.cfg.Groups) == 0 {
		return fmt.Errorf("%s: the stored config is not valid, so its groups are not known (fleetctl config show says why): roll groups back one at a time with fleetctl rollback%s --group G; nothing written", command, f.appArg())
	}
	spec, err := f.ReadSpec(ctx)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		return fmt.Errorf("%s: %w", command, f.noPlan())
	case err != nil:
		return fmt.Errorf("%s: %w", command, err)
	}
	target := spec.Value.TargetVersion
	rep := RollbackAllReport{App: f.NS.Name, TargetVersion: target}
	var names []string
	for _, g := range f.cfg.Groups {
		names = append(names, g.Name)
	}
	for _, name := range names {
		rep.Groups = append(rep.Groups, o.rollbackOne(ctx, f, name, target))
	}
	rep.Groups = append(rep.Groups, o.unconfigured(ctx, f, names)...)
	for _, g := range rep.Groups {
		switch g.Outcome {
		case OutcomeRolledBack:
			rep.RolledBack++
		case OutcomeSkipped:
			rep.Skipped++
		case OutcomeFailed:
			rep.Failed++
		}
	}
	lines := rollbackAllLines(rep, f.appNote())
	if o.Output == "json" {
		err = writeJSON(o.Out, WriteResult{Command: command, Written: slices.ContainsFunc(rep.Groups, func(g RollbackAllGroup) bool { return g.Written }),
			Bucket: kv.BucketPlan, Value: rep, Changes: lines})
	} else {
		for _, l := range lines {
			if _, err = fmt.Fprintln(o.Out, escape.Text(l)); err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	if rep.Failed > 0 {
		return rollbackAllError(rep, f.appArg())
	}
	return nil
}

// rollbackOne rolls back group name if it started target.
func (o *GroupActionOptions) rollbackOne(ctx context.Context, f appFleet, name, target string) RollbackAllGroup {
	key := f.NS.Group(name)
	r := RollbackAllGroup{Group: name, Key: key}
	failed := func(format string, args ...any) RollbackAllGroup {
		r.Outcome, r.Detail = OutcomeFailed, fmt.Sprintf(format, args...)
		return r
	}
	skipped := func(format string, args ...any) RollbackAllGroup {
		r.Outcome, r.Detail = OutcomeSkipped, fmt.Sprintf(format, args...)
		return r
	}
	e, err := f.ReadGroupStatus(ctx, name)
	var bad *kv.Problem
	switch {
	case errors.Is(err, kv.ErrNotFound):
		return skipped("no status yet: it has not started (is a controller running?)")
	case errors.As(err, &bad):
		return failed("its stored status is not valid (%v): fleetctl reset%s --group %s removes it", bad.Err, f.appArg(), name)
	case err != nil:
		return failed("read %s/%s: %v", kv.BucketPlan, key, err)
	}
	st := e.Value
	r.From = st.State
	switch {
	case st.TargetVersion != target:
		// Agents ignore a status for another target, and the
		// controller resets it to unstarted for this one at its next
		// step: nothing to roll back, and a write would be undone.
		return skipped("its status is for %s, not the plan's target %s: the controller resets it to unstarted at its next step", versionOr(st.TargetVersion), target)
	case st.State == rollout.StateUnstarted:
		return skipped("nothing to roll back")
	case st.State == rollout.StateRolledBack:
		return skipped("already rolled back")
	}
	next, ev, err := rollout.Rollback(st, o.Reason, o.Now())
	if err != nil {
		return failed("%v", err)
	}
	ev.App = f.NS.Name
	rev, err := save(ctx, o.Global, f.Fleet, f.Plan, key, next, e.Revision, change{Command: "rollback --all", Group: name, Before: st})
	if err != nil {
		return failed("NOT rolled back: %v", err)
	}
	r.Written, r.Revision, r.PreviousRevision, r.Event = true, rev, e.Revision, &ev
	err = f.PublishEvent(ev)
	if err == nil {
		err = f.JS.Conn().FlushWithContext(ctx)
	}
	if err != nil {
		return failed("rolled back (%s/%s revision %d), but its event was not published: %v", kv.BucketPlan, key, rev, err)
	}
	r.Outcome, r.Detail = OutcomeRolledBack, eventChange(ev)
	return r
}

// unconfigured lists the app's group statuses whose group the config
// lacks, skipped: the controller holds such a group (or, with a catch-all
// group, keeps it a copy of that group's), and rollback --all writes only
// the config's groups.
func (o *GroupActionOptions) unconfigured(ctx context.Context, f appFleet, names []string) []RollbackAllGroup {
	state, err := f.ReadState(ctx)
	if err != nil {
		fmt.Fprintf(o.ErrOut, "warning: could not list the statuses of groups the config lacks: %v\n", err)
		return nil
	}
	var extra []string
	for name := range state.Groups {
		if !slices.Contains(names, name) {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	var out []RollbackAllGroup
	for _, name := range extra {
		st := state.Groups[name].Value
		detail := fmt.Sprintf("not in the config: rollback --all writes the config's groups only (fleetctl rollback%s --group %s rolls it back)", f.appArg(), name)
		if st.Follows != "" {
			// The controller rewrites this copy from the catch-all's
			// status at its next pass: it moves with it.
			detail = fmt.Sprintf("not in the config: its hosts follow catch-all group %s and go where it goes", escape.Text(st.Follows))
		}
		out = append(out, RollbackAllGroup{Group: name, Outcome: OutcomeSkipped, From: st.State, Key: f.NS.Group(name), Detail: detail})
	}
	return out
}

// rollbackAllLines is the text output of rollback --all, one line per
// group and a summary; -o json carries them as changes.
func rollbackAllLines(rep RollbackAllReport, appNote string) []string {
	var lines []string
	for _, g := range rep.Groups {
		switch g.Outcome {
		case OutcomeRolledBack:
			lines = append(lines, fmt.Sprintf("group %q%s: %s (%s/%s revision %d; event on %s)", g.Group, appNote, g.Detail, kv.BucketPlan, g.Key, g.Revision, kv.EventSubject(g.Group)))
		case OutcomeSkipped:
			what := "skipped"
			if g.From != "" {
				what += " (" + string(g.From) + ")"
			}
			lines = append(lines, fmt.Sprintf("group %q%s: %s: %s", g.Group, appNote, what, g.Detail))
		default:
			lines = append(lines, fmt.Sprintf("group %q%s: FAILED: %s", g.Group, appNote, g.Detail))
		}
	}
	summary := fmt.Sprintf("rolled back %d of %d groups from %s, %d skipped", rep.RolledBack, len(rep.Groups), rep.TargetVersion, rep.Skipped)
	if rep.Failed > 0 {
		summary += fmt.Sprintf(", %d FAILED", rep.Failed)
	}
	if rep.RolledBack == 0 && rep.Failed == 0 {
		summary = fmt.Sprintf("nothing to roll back: no group%s has started %s (%d skipped)", appNote, rep.TargetVersion, rep.Skipped)
	}
	return append(lines, summary)
}

// rollbackAllError says which groups moved and which did not.
func rollbackAllError(rep RollbackAllReport, appArg string) error {
	var moved, not []string
	for _, g := range rep.Groups {
		switch {
		case g.Written:
			moved = append(moved, g.Group)
		case g.Outcome == OutcomeFailed:
			not = append(not, g.Group)
		}
	}
	movedText := "none"
	if len(moved) > 0 {
		movedText = strings.Join(moved, ", ")
	}
	msg := fmt.Sprintf("rollback --all: %d of the started groups failed. Rolled back: %s. NOT rolled back: %s", rep.Failed, movedText, strings.Join(not, ", "))
	if len(not) == 0 {
		msg = fmt.Sprintf("rollback --all: every started group was rolled back (%s), but %d events were not published (see above)", movedText, rep.Failed)
	} else {
		msg += fmt.Sprintf(" (see above; run fleetctl rollback%s --all --reason \"…\" again to roll back the rest: those rolled back are skipped)", appArg)
	}
	return errors.New(msg)
}

// versionOr is v, or "no version" when empty.
func versionOr(v string) string {
	if v == "" {
		return "no version"
	}
	return v
}
