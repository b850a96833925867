package fleetctl

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// BuildRolloutStatus is BuildStatus plus the rollout: when st has a plan
// spec, the report gets the plan and every group its rollout, in config
// order, then groups with a status (or a status that is not valid) but no
// config, then groups with only agents (each set by name). A config that is
// not valid (in st.Problems) leaves the rollout out, as no spec does: the
// controller moves nothing then, and the report has no config to place the
// groups by. The caller adds st.Problems to the report.
func BuildRolloutStatus(entries []kv.Stats, st *kv.State, now time.Time) StatusReport {
	rep := BuildStatus(entries, now)
	if st == nil || !st.HasSpec {
		return rep
	}
	if _, bad := st.Problem(kv.BucketConfig, kv.KeyConfig); bad {
		return rep
	}
	cfg, spec := st.Config.Value, st.Spec.Value
	rep.Plan = &PlanReport{
		Mode:          rollout.EffectiveMode(cfg.Mode, spec.Mode),
		ConfigMode:    orEnabled(cfg.Mode),
		PlanMode:      orEnabled(spec.Mode),
		StartVersion:  spec.StartVersion,
		TargetVersion: spec.TargetVersion,
		Strategy:      spec.Strategy,
		Schedule:      spec.Schedule,
		Critical:      spec.Critical,
	}
	counted := map[string]GroupReport{}
	for _, g := range rep.Groups {
		counted[g.Name] = g
	}
	var names []string
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, g := range cfg.Groups {
		add(g.Name)
	}
	withStatus := make([]string, 0, len(st.Groups))
	for n := range st.Groups {
		withStatus = append(withStatus, n)
	}
	invalid := map[string]bool{}
	for _, p := range st.Problems {
		if n, ok := kv.GroupFromKey(p.Key); ok && p.Bucket == kv.BucketPlan {
			invalid[n] = true
			withStatus = append(withStatus, n)
		}
	}
	sort.Strings(withStatus)
	for _, n := range withStatus {
		add(n)
	}
	for _, g := range rep.Groups { // sorted by name
		add(g.Name)
	}
	groups := make([]GroupReport, 0, len(names))
	for _, n := range names {
		gr, ok := counted[n]
		if !ok {
			gr = GroupReport{Name: n, Versions: map[string]VersionReport{}}
		}
		e, hasStatus := st.Groups[n]
		gr.Rollout = groupRollout(gr, cfg, spec, e.Value, hasStatus, now)
		gr.Rollout.StatusInvalid = invalid[n]
		groups = append(groups, gr)
	}
	rep.Groups = groups
	return rep
}

func groupRollout(gr GroupReport, cfg rollout.Config, spec rollout.Spec, s rollout.GroupStatus, hasStatus bool, now time.Time) *GroupRollout {
	gc, inConfig := cfg.Group(gr.Name)
	r := &GroupRollout{InConfig: inConfig, Requires: []string{}}
	if inConfig {
		r.Requires = append(r.Requires, cfg.Dependencies(gr.Name)...)
	}
	for v, c := range gr.Versions {
		if v == spec.TargetVersion {
			r.Agents.Updated += c.Count
		} else {
			r.Agents.Failed += c.Failed
			r.Agents.Updating += c.Updating
		}
	}
	r.Agents.Unchanged = max(gr.Agents-r.Agents.Updated-r.Agents.Failed, 0)
	r.Hold, r.RejectedVersions = s.Hold(spec), s.RejectedVersions
	// An agent installing is not failed (its error is cleared as it starts).
	r.Agents.Updating = min(r.Agents.Updating, r.Agents.Unchanged)
	r.Agents.Waiting = r.Agents.Unchanged - r.Agents.Updating
	if !hasStatus {
		return r
	}
	r.State, r.Reason, r.Since = s.State, s.Reason, s.Since
	if s.TargetVersion != spec.TargetVersion {
		r.Stale, r.StatusTarget = true, s.TargetVersion
	}
	r.Halted, r.HaltReason, r.HaltedAt = s.Halted, s.HaltReason, s.HaltedAt
	r.Waiting, r.WaitingUntil, r.Frozen = s.Waiting, s.WaitingUntil, s.Frozen
	r.Alerted, r.RunRequested = s.Alerted, s.RunRequested
	r.Progress, r.InitialCount, r.FailedCount = s.Progress, s.InitialCount, s.FailedCount
	r.StartedAt, r.DoneAt, r.Canaries = s.StartedAt, s.DoneAt, len(s.Canaries)
	if s.State == rollout.StateCanary && !r.Stale {
		timeout := s.HealthTimeout.D()
		if timeout <= 0 && inConfig {
			timeout = gc.HealthTimeout.D()
		}
		if timeout > 0 {
			n := 0
			for _, c := range s.Canaries {
				if !c.MissingSince.IsZero() && now.Sub(c.MissingSince) >= timeout {
					n++
				}
			}
			r.TimedOut = &n
		}
	}
	return r
}

// Column widths of the rollout table, so that it fits 80 columns with up
// to 9999 agents a group and group names of up to 9 characters (longer
// names widen it up to groupWidth).
const (
	groupWidth = 12
	noteWidth  = 100
)

// writeRolloutTable prints the plan header, one row per group, notes on the
// groups that need them, and agents per version.
func writeRolloutTable(w io.Writer, rep StatusReport, now time.Time) error {
	p := rep.Plan
	version := p.StartVersion + " → " + p.TargetVersion
	if (rollout.Spec{StartVersion: p.StartVersion, TargetVersion: p.TargetVersion}).Downgrade() {
		version += " (downgrade)"
	}
	critical := "no"
	if p.Critical {
		critical = "yes (starts outside windows)"
	}
	fmt.Fprintf(w, "Mode:      %s\n", describeMode(p.ConfigMode, p.PlanMode))
	fmt.Fprintf(w, "Version:   %s\n", version)
	fmt.Fprintf(w, "Holds:     %s until a group's turn (new hosts install it), unless noted below\n", orNothing(p.StartVersion))
	fmt.Fprintf(w, "Strategy:  %s   Schedule: %s   Critical: %s\n\n", p.Strategy, p.Schedule, critical)

	lines, notes := rolloutRows(rep, now)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			for _, l := range wrap(n, noteWidth, "    ") {
				fmt.Fprintln(w, l)
			}
		}
	}
	fmt.Fprintln(w, "\nAgents by version:")
	return writeVersionTable(w, rep, now)
}

// rolloutRows renders the group table (header first) and the notes on the
// groups that need them (one unwrapped line each).
func rolloutRows(rep StatusReport, now time.Time) (rows, notes []string) {
	var buf strings.Builder
	tw := newTable(&buf)
	fmt.Fprintln(tw, "GROUP\tSTATE\tSINCE\tUPDATED\tUPDATING\tWAITING\tFAILED\tALLOWED")
	for _, g := range rep.Groups {
		r := g.Rollout
		if r == nil {
			continue
		}
		state, since, allowed := "-", "-", "-"
		if r.StatusInvalid {
			state = "invalid"
		}
		if r.State != "" {
			state = string(r.State)
			switch {
			case r.Stale:
				state += "*"
			case r.Halted:
				state += " (halted)"
			}
			if !r.Stale {
				// Rounded down (with slack for float error), so 100% means
				// the whole group may update.
				allowed = fmt.Sprintf("%d%%", int(math.Floor(r.Progress*100+1e-9)))
			}
			if !r.Since.IsZero() {
				since = age(now, r.Since)
			}
		}
		updating, waiting, failed := "-", "-", "-"
		if g.Agents > 0 {
			updating, waiting, failed = fmt.Sprint(r.Agents.Updating), fmt.Sprint(r.Agents.Waiting), fmt.Sprint(r.Agents.Failed)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shorten(g.Name, groupWidth), state, since,
			share(r.Agents.Updated, g.Agents), updating, waiting, failed, allowed)
		for _, n := range groupNotes(g, rep.Plan, now) {
			notes = append(notes, g.Name+": "+n)
		}
	}
	_ = tw.Flush() // a strings.Builder does not fail
	return strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"), notes
}

// groupNotes are the things about a group that do not fit a column.
func groupNotes(g GroupReport, p *PlanReport, now time.Time) []string {
	r := g.Rollout
	var out []string
	if !r.InConfig {
		out = append(out, "not in the config: its agents are not rolled out")
	}
	if r.StatusInvalid {
		return append(out, fmt.Sprintf("its stored status (%s/%s) is not valid: the controller does not move the group until it is replaced: fleetctl reset --group %s",
			kv.BucketPlan, kv.GroupKey(g.Name), g.Name))
	}
	switch {
	case r.State == "":
		if r.InConfig {
			out = append(out, "no rollout status yet: is a controller running?")
		}
		return out
	case r.Stale:
		out = append(out, fmt.Sprintf("* status is for target %s; the controller has not caught up with %s (agents treat the group as unstarted)", r.StatusTarget, p.TargetVersion))
		if hold := holdNote(r, p); hold != "" {
			out = append(out, hold)
		}
		return out
	}
	if len(r.Requires) > 0 && r.State == rollout.StateUnstarted && r.Waiting == "" {
		out = append(out, "starts after "+strings.Join(r.Requires, ", "))
	}
	if r.TimedOut != nil && *r.TimedOut > 0 {
		out = append(out, fmt.Sprintf("%d of %d canaries missing for longer than health_timeout", *r.TimedOut, r.Canaries))
	}
	if r.Halted {
		out = append(out, fmt.Sprintf("halted %s ago: %s", age(now, r.HaltedAt), r.HaltReason))
	}
	if hold := holdNote(r, p); hold != "" {
		out = append(out, hold)
	}
	if r.Waiting != "" {
		if strings.HasPrefix(r.Waiting, "waiting") {
			out = append(out, r.Waiting)
		} else {
			out = append(out, "waiting: "+r.Waiting)
		}
	}
	if r.Frozen != "" {
		out = append(out, "frozen: "+r.Frozen)
	}
	if r.RunRequested {
		out = append(out, "run requested: starts at the controller's next step")
	}
	if r.Alerted && !r.Halted && r.State.InProgress() {
		out = append(out, fmt.Sprintf("alert raised: not done within alert_after (started %s ago)", age(now, r.StartedAt)))
	}
	return out
}

// holdNote says what the group holds when it is not the plan's start
// version, or what it never holds; "" when neither.
func holdNote(r *GroupRollout, p *PlanReport) string {
	var note string
	if r.Hold != p.StartVersion {
		note = "holds " + orNothing(r.Hold) + " until its turn (new hosts install it)"
	}
	if len(r.RejectedVersions) > 0 {
		if note != "" {
			note += "; "
		}
		note += "never holds " + strings.Join(r.RejectedVersions, ", ") + " (halted on or rolled back from)"
	}
	return note
}

func orNothing(v string) string {
	if v == "" {
		return "nothing (agents keep what they have)"
	}
	return v
}

// share renders n of total as "28 93%" (rounded down, so 100% means all).
func share(n, total int) string {
	if total <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d %d%%", n, n*100/total)
}

// wrap breaks s into lines of at most width columns at spaces, indenting
// the continuation lines; a word longer than a line is cut.
func wrap(s string, width int, indent string) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= width:
			line += " " + word
		default:
			lines = append(lines, shorten(line, width))
			line = indent + word
		}
	}
	if line != "" {
		lines = append(lines, shorten(line, width))
	}
	return lines
}
