package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// A halt is the rollout's stop sign, and a quarantine says a version must
// not reach more hosts. A group action that would push a group past either
// (run, reset or mark-done of a halted group; run, reset, mark-done or
// retry of a group whose target is quarantined; run or mark-done of an
// unstarted group below a group halted on or rolled back from its target;
// mark-done of a rolled back group, issue 28) is refused unless the
// operator gives --force and --reason: the refusal says what the action
// would do, and the forced action is recorded as "<verb> --force" with the
// reason in the audit trail, and "forced past …" in the group status and
// the event. rollback never needs it: it is the safe direction.
//
// fleetctl writes the group status itself (compare-and-swap on the
// bucket); no controller stands between it and the bus, so this check is
// where it is enforced. The bus's permissions decide who may write at all.

// override is what a forced action pushes past.
type override struct {
	// what: "the group is halted (…)" and/or "its target … is quarantined (…)".
	what string
	// short names it in the status reason: "a halt", "the quarantine of 1.4.0".
	short string
	// effect says what the action does, for people.
	effect string
}

// checkOverride refuses name on st unless forced, when it would push the
// group past a halt or a quarantined target; it returns what a forced
// action overrides (nil: nothing, the action needs no --force).
func (o *GroupActionOptions) checkOverride(ctx context.Context, f appFleet, name string, st rollout.GroupStatus) (*override, error) {
	if !forceVerbs[name] {
		return nil, nil
	}
	var quarantine rollout.QuarantineList
	q, err := f.ReadQuarantine(ctx)
	switch {
	case err == nil:
		quarantine = q.Value
	case errors.Is(err, kv.ErrNotFound):
	default:
		// Not knowing is not a reason to refuse a halted group's
		// reset; the halt check below still holds.
		fmt.Fprintf(o.ErrOut, "warning: could not read %s/%s, so whether %s is quarantined is not known: %v\n",
			kv.BucketPlan, f.NS.Quarantine(), st.TargetVersion, err)
	}
	over := overrideOf(o.verb(name), st, quarantine, o.stoppedAbove(ctx, f, name, st), f.appArg())
	if over == nil {
		if o.Force {
			fmt.Fprintf(o.ErrOut, "note: --force: nothing to force (group %q is not halted and %s is not quarantined)\n", o.Group, st.TargetVersion)
		}
		return nil, nil
	}
	if o.Force {
		return over, nil
	}
	verb := o.verb(name)
	return nil, fmt.Errorf("%s --group %s refused: %s.\n%s.\nIf that is what you want, say why: fleetctl %s%s --group %s --force --reason \"…\"\nnothing written",
		verb, o.Group, escape.Text(over.what), over.effect, verb, f.appArg(), o.Group)
}

// stoppedAbove is, for run and mark-done of a group that has not started
// its target, the group above it in the depends_on chain that halted on
// that target or was rolled back from it ("" when none, or when it cannot
// be read: the halt and quarantine checks still hold). The controller keeps
// such a group from starting (no group after a rolled-back or halted group
// starts); run or mark-done would push the target past that stop.
func (o *GroupActionOptions) stoppedAbove(ctx context.Context, f appFleet, name string, st rollout.GroupStatus) string {
	if (name != "run" && name != "mark-done") || st.State != rollout.StateUnstarted {
		return ""
	}
	cfg, _, err := f.ReadConfig(ctx)
	if err != nil {
		return ""
	}
	appCfg, err := cfg.Value.ForApp(f.NS.Name)
	if err != nil {
		return ""
	}
	for _, a := range appCfg.Ancestors(o.Group) {
		e, err := f.ReadGroupStatus(ctx, a)
		if err != nil || e.Value.TargetVersion != st.TargetVersion {
			continue
		}
		switch {
		case e.Value.State == rollout.StateRolledBack:
			return fmt.Sprintf("group %q, above it in depends_on, was rolled back from %s", a, st.TargetVersion)
		case e.Value.Halted:
			return fmt.Sprintf("group %q, above it in depends_on, halted on %s: %s", a, st.TargetVersion, shorten(e.Value.HaltReason, 200))
		}
	}
	return ""
}

// overrideOf is what name pushes st past, or nil. above is stoppedAbove's
// answer.
func overrideOf(name string, st rollout.GroupStatus, quarantine rollout.QuarantineList, above, appArg string) *override {
	target := st.TargetVersion
	var what, short []string
	if above != "" {
		what, short = append(what, above), append(short, "a stop above it ("+shorten(above, 80)+")")
	}
	// retry refuses a halted group by itself (rollout.Retry).
	halted := st.Halted && name != "retry"
	if halted {
		w := "the group is halted"
		if !st.HaltedAt.IsZero() {
			w += " since " + st.HaltedAt.UTC().Format("2006-01-02 15:04 MST")
		}
		if st.HaltReason != "" {
			w += ": " + shorten(st.HaltReason, 200)
		}
		what, short = append(what, w), append(short, "a halt ("+shorten(st.HaltReason, 80)+")")
	}
	// Issue 28: a rolled back group is marked done only forced: every
	// host of it would install the version it was rolled back from.
	rolledBack := name == "mark-done" && st.State == rollout.StateRolledBack
	if rolledBack {
		w := "the group was rolled back"
		if !st.Since.IsZero() {
			w += " at " + st.Since.UTC().Format("2006-01-02 15:04 MST")
		}
		if st.Reason != "" {
			w += " (" + shorten(st.Reason, 200) + ")"
		}
		what, short = append(what, w), append(short, "a rollback ("+shorten(st.Reason, 80)+")")
	}
	q, quarantined := quarantine.Lookup(target)
	if quarantined {
		what = append(what, fmt.Sprintf("its target %s is quarantined (by %s: %s)", target, q.By, shorten(q.Reason, 200)))
		short = append(short, "the quarantine of "+target)
	}
	if !halted && !quarantined && above == "" && !rolledBack {
		return nil
	}
	var effect string
	switch {
	case name == "run --skip-canaries":
		effect = skipCanariesEffect(st)
	case rolledBack:
		effect = fmt.Sprintf("mark-done tells every agent of the group to install %s, the version it was rolled back from, at once (no canaries, no failure threshold), and lets the groups that depend on it start", target)
	case name == "mark-done":
		effect = fmt.Sprintf("mark-done tells every agent of the group to install %s at once (no canaries, no failure threshold) and lets the groups that depend on it start", target)
	case name == "retry":
		effect = fmt.Sprintf("retry tells the group's agents that rolled back from %s to install it once more", target)
	case st.State == rollout.StateCanary:
		effect = fmt.Sprintf("%s clears the halt and restarts the canary phase: fresh canaries install %s", name, target)
	case st.State == rollout.StateActive:
		effect = fmt.Sprintf("%s clears the halt and %s goes on to the group's remaining agents, its failures so far forgiven", name, target)
	case name == "run":
		effect = fmt.Sprintf("run starts the group on %s at once, ignoring its window, wait and predecessors", target)
	default:
		effect = fmt.Sprintf("%s clears the halt: the group starts %s when its turn comes", name, target)
	}
	if quarantined && name != "mark-done" && st.State != rollout.StateDone {
		effect += fmt.Sprintf(" (while %s is quarantined, the controller halts a group rolling it out again at its next step unless it is done: lift it first with fleetctl quarantine rm%s %s)", target, appArg, target)
	}
	return &override{what: strings.Join(what, "; "), short: strings.Join(short, " and "), effect: effect}
}

// skipCanariesEffect says what run --skip-canaries does to st, for a
// refusal that asks for --force.
func skipCanariesEffect(st rollout.GroupStatus) string {
	if st.State == rollout.StateCanary {
		return fmt.Sprintf("run --skip-canaries clears the halt and ends the canary phase: the group starts again straight in active, without canaries, and its agents install %s as max_in_flight allows", st.TargetVersion)
	}
	return fmt.Sprintf("run --skip-canaries starts the group on %s at once, straight in active without canaries, ignoring its window, wait and predecessors", st.TargetVersion)
}
