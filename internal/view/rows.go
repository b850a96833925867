package view

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// GroupNotes are the things about a group that do not fit a column.
func GroupNotes(g GroupReport, p *PlanReport, now time.Time) []string {
	r := g.Rollout
	var out []string
	switch {
	case r.InConfig:
	case r.Follows != "":
		// The rest is the catch-all's status, said on its own row.
		who := fmt.Sprintf("its %d agents follow", g.Agents)
		if g.Agents == 1 {
			who = "its agent follows"
		}
		return append(out, fmt.Sprintf("not in the config: %s catch-all group %s (rolled out with it, counted in it)", who, r.Follows))
	case r.Unfollowed != "":
		out = append(out, "not in the config: its agents wait: "+r.Unfollowed)
	default:
		out = append(out, "not in the config: its agents are not rolled out")
	}
	if c := r.Caught; c != nil {
		names := c.Groups
		more := ""
		if len(names) > 10 {
			names, more = names[:10], fmt.Sprintf(" and %d more", len(c.Groups)-10)
		}
		out = append(out, fmt.Sprintf("catch-all: also rolls out %s of %s not in the config: %s%s", plural(c.Agents, "agent"),
			plural(len(c.Groups), "group"), strings.Join(names, ", "), more))
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
	out = append(out, canaryNotes(r)...)
	if r.TimedOut != nil && *r.TimedOut > 0 {
		out = append(out, fmt.Sprintf("%d of %d canaries missing for longer than health_timeout", *r.TimedOut, r.Canaries))
	}
	if n := r.Agents.Unreachable; n > 0 {
		out = append(out, fmt.Sprintf("%s unreachable (no heartbeat for %d intervals): in no column, not counted by the rollout until heard again",
			plural(n, "agent"), rollout.UnreachableIntervals))
	}
	if r.Held != "" && r.State.InProgress() {
		out = append(out, "held: "+r.Held)
	} else if n := r.Agents.Blocked; n > 0 && r.State != rollout.StateUnstarted {
		out = append(out, fmt.Sprintf("%s blocked on infrastructure, retrying by themselves (not failed): fleetctl agents ls --group %s shows the causes",
			plural(n, "agent"), g.Name))
	}
	if n := r.UpdatesTimedOut; n > 0 && r.State.InProgress() {
		out = append(out, fmt.Sprintf("%s timed out (updating longer than update_timeout): failed for the threshold, out of the window",
			plural(n, "update")))
	}
	switch {
	case r.Halted && r.TargetQuarantined:
		// The quarantine is said once, above the groups: here, only that
		// it halted this one.
		out = append(out, fmt.Sprintf("halted %s ago: its target %s is quarantined (see Quarantined)", Age(now, r.HaltedAt), p.TargetVersion))
	case r.Halted:
		out = append(out, fmt.Sprintf("halted %s ago: %s", Age(now, r.HaltedAt), r.HaltReason))
	}
	out = append(out, approvalNotes(g, now)...)
	out = append(out, AnalysisNotes(r, now)...)
	if hold := holdNote(r, p); hold != "" {
		out = append(out, hold)
	}
	if r.Waiting != "" && !awaitingApprovalText(r.Waiting) {
		if strings.HasPrefix(r.Waiting, "waiting") {
			out = append(out, r.Waiting)
		} else {
			out = append(out, "waiting: "+r.Waiting)
		}
	}
	if n := windowNote(r, now); n != "" {
		out = append(out, n)
	}
	if r.Frozen != "" {
		out = append(out, "frozen: "+r.Frozen)
	}
	out = append(out, rateNotes(r, now)...)
	switch {
	case r.DoneHeld != "" && r.State.InProgress():
		out = append(out, "not done: "+r.DoneHeld)
	case r.Vanished > 0 && (r.State.InProgress() || r.State == rollout.StateDone):
		out = append(out, fmt.Sprintf("%d of the %d initial agents vanished since the group started (net of agents that joined)", r.Vanished, r.InitialCount))
	}
	if n := r.DoneFailed; n > 0 {
		out = append(out, fmt.Sprintf("done with failures: %s failed the target (rolled back from it or reporting an error): fleetctl agents ls --group %s shows them, fleetctl retry --group %s asks them to try again",
			plural(n, "agent"), g.Name, g.Name))
	}
	switch {
	case r.RunRequested && r.SkipCanaries != "":
		out = append(out, "run requested without canaries: starts straight in active at the controller's next step ("+r.SkipCanaries+")")
	case r.RunRequested:
		out = append(out, "run requested: starts at the controller's next step")
	case r.SkipCanaries != "" && r.State != rollout.StateUnstarted:
		out = append(out, "started without canaries by an operator: "+r.SkipCanaries)
	}
	if q := r.Retry; q != nil {
		who := "every agent that rolled back from the target"
		switch {
		case len(q.Agents) == 1:
			who = "agent " + string(q.Agents[0])
		case len(q.Agents) > 1:
			who = plural(len(q.Agents), "named agent")
		}
		note := fmt.Sprintf("retry asked %s ago for %s", Age(now, q.At), who)
		if q.Note != "" {
			note += ": " + q.Note
		}
		out = append(out, note)
	}
	if r.Alerted && !r.Halted && r.State.InProgress() {
		out = append(out, fmt.Sprintf("alert raised: not done within alert_after (started %s ago)", Age(now, r.StartedAt)))
	}
	return out
}

// windowNote says, for a group of a time-based plan rolling out, when its
// window closes (the group is done then), or that it closed: no agent
// starts an update until the window reopens.
func windowNote(r *GroupRollout, now time.Time) string {
	if r.WindowCloses.IsZero() || !r.State.InProgress() || r.Halted {
		return ""
	}
	at := r.WindowCloses.UTC().Format("Mon 15:04 MST")
	if now.Before(r.WindowCloses) {
		return fmt.Sprintf("time-based: its window closes in %s (%s); the group is done then, and no agent starts an update after", Age(r.WindowCloses, now), at)
	}
	return fmt.Sprintf("time-based: its window closed %s ago (%s); no agent starts an update until it reopens", Age(now, r.WindowCloses), at)
}

// holdNote says what the group holds when it is not the plan's start
// version, or what it never holds; "" when neither.
func holdNote(r *GroupRollout, p *PlanReport) string {
	var note string
	// A group done with the target holds it: its turn is past.
	finished := r.State == rollout.StateDone && !r.Stale
	if r.Hold != p.StartVersion && !finished {
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

// GroupRow is one group's line of the rollout table, as the terminal and the
// dashboard show it: the cells as text, and the numbers the page draws.
type GroupRow struct {
	Group string `json:"group"`
	// State is the state as a cell: "canary", "active (halted)", "done*"
	// (stale), "done (1 failed)" (done with failures), "invalid", "-" (no status yet).
	State string `json:"state"`
	// Since is how long the group has been in its state ("3m"); "-".
	Since string `json:"since"`
	// Updated, Updating, Waiting and Failed are the AgentSplit as cells
	// ("28 93%" for Updated; Waiting counts the blocked agents too, as
	// "7 (2 blocked)"); "-" when the group has no agents counted.
	Updated  string `json:"updated"`
	Updating string `json:"updating"`
	Waiting  string `json:"waiting"`
	Failed   string `json:"failed"`
	// Allowed is the share of the group let update so far ("25%"); "-".
	Allowed string `json:"allowed"`
	// Notes are what does not fit a column (halts with their reasons,
	// waits, holds, timed out canaries), one line each.
	Notes []string `json:"notes"`
	// Agents is the group's counted agents; Split divides them.
	Agents int        `json:"agents"`
	Split  AgentSplit `json:"split"`
	// AllowedFraction is Progress, and UpdatedFraction the share on the
	// target, both in [0,1], for progress bars; InFlightBound is how many
	// may install at once (0: not known).
	AllowedFraction float64 `json:"allowed_fraction"`
	UpdatedFraction float64 `json:"updated_fraction"`
	InFlightBound   int     `json:"in_flight_bound,omitempty"`
	// FailureLimit is how many failed agents the group's failure_threshold
	// tolerates (more halt it; absent: not known); FailedCount is the
	// controller's count towards it.
	FailureLimit *float64 `json:"failure_limit,omitempty"`
	FailedCount  int      `json:"failed_count"`
	Halted       bool     `json:"halted"`
	HaltReason   string   `json:"halt_reason,omitempty"`
	// WaitingUntil is when the group's wait ends (a window opens,
	// wait_hours pass), when known.
	WaitingUntil time.Time `json:"waiting_until,omitzero"`
	// RawState is the rollout state itself ("" with no status).
	RawState rollout.State `json:"raw_state,omitempty"`
	// DoneFailed, for a group done on the target, is how many of its
	// agents failed it (GroupRollout.DoneFailed): done with failures, the
	// State cell "done (1 failed)". Vanished is how many of its initial
	// agents are gone (GroupRollout.Vanished). Absent when 0.
	DoneFailed int `json:"done_failed,omitempty"`
	Vanished   int `json:"vanished,omitempty"`
	// Sites are the group's counts by site (GroupReport.Sites), as cells;
	// absent when no agent names a site.
	Sites []SiteRow `json:"sites,omitempty"`
	// AwaitingApproval is the stage the group awaits an operator's
	// approval at, since AwaitingSince; Approved: it has been given, the
	// controller's next step consumes it. Absent when it awaits none.
	AwaitingApproval rollout.ApprovalStage `json:"awaiting_approval,omitempty"`
	AwaitingSince    time.Time             `json:"awaiting_since,omitzero"`
	Approved         bool                  `json:"approved,omitempty"`
}

// SiteRow is one site's line under its group: the AgentSplit as cells, as
// the group's row has them, and the share updated for a bar.
type SiteRow struct {
	Site            string  `json:"site"`
	Agents          int     `json:"agents"`
	Updated         string  `json:"updated"`
	Updating        string  `json:"updating"`
	Waiting         string  `json:"waiting"`
	Failed          string  `json:"failed"`
	Unreachable     string  `json:"unreachable"`
	UpdatedFraction float64 `json:"updated_fraction"`
}

// SiteRows are g's sites as rows (g.Sites need their Split: a report with
// a plan).
func SiteRows(g GroupReport) []SiteRow {
	var out []SiteRow
	for _, sr := range g.Sites {
		if sr.Split == nil {
			continue
		}
		sp := sr.Split
		row := SiteRow{Site: sr.Site, Agents: sr.Agents, Updated: Share(sp.Updated, sr.Agents),
			Updating: fmt.Sprint(sp.Updating), Waiting: waitingCell(*sp), Failed: fmt.Sprint(sp.Failed), Unreachable: fmt.Sprint(sp.Unreachable)}
		if sr.Agents > 0 {
			row.UpdatedFraction = float64(sp.Updated) / float64(sr.Agents)
		}
		out = append(out, row)
	}
	return out
}

// Rows are the rollout table's rows, one per group with a rollout, in the
// report's order. cfg, when not nil, gives the in-flight bounds and the
// failure thresholds.
func Rows(rep StatusReport, cfg *rollout.Config, now time.Time) []GroupRow {
	rows := make([]GroupRow, 0, len(rep.Groups))
	for _, g := range rep.Groups {
		r := g.Rollout
		if r == nil {
			continue
		}
		row := GroupRow{Group: g.Name, State: "-", Since: "-", Allowed: "-", Updating: "-", Waiting: "-", Failed: "-",
			Agents: g.Agents, Split: r.Agents, FailedCount: r.FailedCount, Halted: r.Halted, HaltReason: r.HaltReason,
			RawState: r.State, WaitingUntil: r.WaitingUntil, Notes: GroupNotes(g, rep.Plan, now), Sites: SiteRows(g),
			DoneFailed: r.DoneFailed, Vanished: r.Vanished}
		if row.Notes == nil {
			row.Notes = []string{}
		}
		if r.StatusInvalid {
			row.State = "invalid"
		}
		if r.State != "" {
			row.State = string(r.State)
			switch {
			case r.Stale:
				row.State += "*"
			case r.Halted:
				row.State += " (halted)"
			case r.AwaitingApproval != nil:
				row.State += " (awaiting approval)"
				row.AwaitingApproval, row.AwaitingSince, row.Approved = r.AwaitingApproval.Stage, r.AwaitingApproval.Since, r.AwaitingApproval.Approved != nil
			case r.DoneFailed > 0:
				row.State += fmt.Sprintf(" (%d failed)", r.DoneFailed)
			}
			switch {
			case r.Stale:
			case r.State == rollout.StateRolledBack:
				// Its agents are told to go back: none may update to the
				// target, whatever progress it had reached.
				row.Allowed, row.AllowedFraction = "0%", 0
			default:
				// Rounded down (with slack for float error), so 100% means
				// the whole group may update.
				row.Allowed = fmt.Sprintf("%d%%", int(math.Floor(r.Progress*100+1e-9)))
				row.AllowedFraction = r.Progress
			}
			if !r.Since.IsZero() {
				row.Since = Age(now, r.Since)
			}
		}
		if g.Agents > 0 {
			row.Updating, row.Waiting, row.Failed = fmt.Sprint(r.Agents.Updating), waitingCell(r.Agents), fmt.Sprint(r.Agents.Failed)
			row.UpdatedFraction = float64(r.Agents.Updated) / float64(g.Agents)
		}
		row.Updated = Share(r.Agents.Updated, g.Agents)
		if cfg != nil {
			if gc, ok := cfg.Group(g.Name); ok {
				if r.InitialCount > 0 {
					limit := gc.FailureThreshold.Of(r.InitialCount)
					row.FailureLimit = &limit
					row.InFlightBound = rollout.InFlightWindow(gc.MaxInFlight, r.InitialCount)
					if a := r.Adaptive; a != nil && a.Bound > 0 {
						row.InFlightBound = min(a.Bound, row.InFlightBound)
					}
				}
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// waitingCell is the WAITING cell: the agents waiting, and those blocked
// on infrastructure (not failed, not updating: waiting for their own
// retry), as "7 (2 blocked)".
func waitingCell(sp AgentSplit) string {
	if sp.Blocked > 0 {
		return fmt.Sprintf("%d (%d blocked)", sp.Waiting+sp.Blocked, sp.Blocked)
	}
	return fmt.Sprint(sp.Waiting)
}

// Share renders n of total as "28 93%" (rounded down, so 100% means all).
func Share(n, total int) string {
	if total <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d %d%%", n, n*100/total)
}

// Age renders how long ago t was, for people: "5s", "3m", "2h", "3d".
func Age(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// PlanHeader is the plan as the lines above the rollout table say it.
type PlanHeader struct {
	Mode     string `json:"mode"`
	Version  string `json:"version"`
	Holds    string `json:"holds"`
	Strategy string `json:"strategy"`
	Schedule string `json:"schedule"`
	Critical string `json:"critical"`
}

// Header describes the plan of rep (which must have one) for people.
func Header(rep StatusReport) PlanHeader {
	p := rep.Plan
	version := p.StartVersion + " → " + p.TargetVersion
	if (rollout.Spec{StartVersion: p.StartVersion, TargetVersion: p.TargetVersion}).Downgrade() {
		version += " (downgrade)"
	}
	critical := "no"
	if p.Critical {
		critical = "yes (starts outside windows)"
	}
	return PlanHeader{
		Mode:     DescribeMode(p.ConfigMode, p.PlanMode),
		Version:  version,
		Holds:    holdsLine(rep),
		Strategy: string(p.Strategy),
		Schedule: string(p.Schedule),
		Critical: critical,
	}
}

// holdsLine is the Holds line: what the groups that have not finished the
// target hold until their turn (what their new hosts install). Once every
// group in the config finished the target, it is the target.
func holdsLine(rep StatusReport) string {
	p := rep.Plan
	var holds []string // of the groups yet to finish the target, distinct
	groups, done := 0, 0
	for _, g := range rep.Groups {
		r := g.Rollout
		if r == nil || !r.InConfig {
			continue
		}
		groups++
		if r.State == rollout.StateDone && !r.Stale && !r.StatusInvalid {
			done++
			continue
		}
		if !slices.Contains(holds, r.Hold) {
			holds = append(holds, r.Hold)
		}
	}
	if groups > 0 && done == groups {
		return p.TargetVersion + ": every group finished it (new hosts install it)"
	}
	var line string
	switch {
	case len(holds) == 0:
		line = orNothing(p.StartVersion) + " until a group's turn (new hosts install it)"
	case len(holds) == 1:
		line = orNothing(holds[0]) + " until a group's turn (new hosts install it)"
	case slices.Contains(holds, p.StartVersion):
		// holdNote names the groups that hold another version
		line = orNothing(p.StartVersion) + " until a group's turn (new hosts install it), unless noted below"
	default:
		slices.SortFunc(holds, func(a, b string) int {
			if VersionLess(a, b) {
				return 1
			}
			return -1
		})
		for i, h := range holds {
			holds[i] = orNothing(h)
		}
		line = "per group until its turn, as noted below: " + strings.Join(holds, ", ")
	}
	if done > 0 {
		line += "; " + plural(done, "group") + " done"
	}
	return line
}

// DescribeMode is the effective mode and where it comes from.
func DescribeMode(config, plan rollout.Mode) string {
	return fmt.Sprintf("%s (config %s, plan %s)", rollout.EffectiveMode(config, plan), OrEnabled(config), OrEnabled(plan))
}

// plural is "1 agent", "2 agents".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// rateNotes say where a group's rate and adaptive in-flight bound stand
// (issue 28), while it rolls out: the bound and why it last moved, the
// period's starts and why the allowance last changed.
func rateNotes(r *GroupRollout, now time.Time) []string {
	if !r.State.InProgress() || r.Halted {
		return nil
	}
	var out []string
	if a := r.Adaptive; a != nil {
		out = append(out, fmt.Sprintf("in-flight bound %d of %d (adaptive), moved %s ago: %s", a.Bound, a.Max, Age(now, a.Since), a.Reason))
	}
	if q := r.Rate; q != nil {
		n := fmt.Sprintf("rate: %d of %d started this period (since %s ago)", q.Started, q.Allowance, Age(now, q.PeriodStart))
		if q.Reason != "" {
			n += ": " + q.Reason
		}
		out = append(out, n)
	}
	return out
}

// canaryNotes say that the group skipped its canary phase, and which lost
// canaries were replaced (issue 28).
func canaryNotes(r *GroupRollout) []string {
	var out []string
	if r.CanariesSkipped != "" && r.State != rollout.StateUnstarted {
		out = append(out, "no canary phase: "+r.CanariesSkipped)
	}
	if n := len(r.ReplacedCanaries); n > 0 {
		var each []string
		for _, c := range r.ReplacedCanaries {
			each = append(each, fmt.Sprintf("%s by %s", (rollout.AgentView{ID: c.ID, Hostname: c.Hostname}).Name(), c.By))
		}
		what := "1 lost canary"
		if n > 1 {
			what = fmt.Sprintf("%d lost canaries", n)
		}
		out = append(out, fmt.Sprintf("%s replaced (vanished before reporting on the target): %s", what, strings.Join(each, ", ")))
	}
	return out
}
