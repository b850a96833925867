// Package view turns what the bus holds (counts, the plan, group statuses,
// heartbeats, the audit trail) into what people read: the reports of
// fleetctl status and the rows of fleetctl watch and the controller's
// dashboard. One package, so that the terminal and the page never disagree.
package view

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// StatusReport is the JSON of "fleetctl status -o json" and of the
// dashboard's /api/v1/status. Stable: fields are only ever added.
type StatusReport struct {
	// Plan is the plan spec and the effective mode; absent when there is no
	// plan (then groups carry no rollout either).
	Plan   *PlanReport   `json:"plan,omitempty"`
	Groups []GroupReport `json:"groups"`
	// Problems are the stored values that were skipped because they are
	// not what their key should hold: a bad count leaves its group's counts
	// out, a bad config or spec leaves the plan out, a bad group status
	// marks the group's rollout status_invalid. Absent when there are none.
	Problems []Problem `json:"problems,omitempty"`
	// Quarantined are the versions quarantined fleet-wide
	// (fleet_plan/quarantine), each once: the groups it halts say so in
	// one line (GroupRollout.TargetQuarantined). Absent when none are.
	Quarantined []QuarantineReport `json:"quarantined,omitempty"`
}

// QuarantineReport is one quarantined version in a StatusReport, and the
// groups whose rollout of it halted.
type QuarantineReport struct {
	rollout.Quarantine
	// Halts are the groups halted on it, in the report's order.
	Halts []string `json:"halts"`
}

// PlanReport is the plan part of a StatusReport.
type PlanReport struct {
	// Mode is the effective mode, the lower of ConfigMode and PlanMode.
	Mode          rollout.Mode     `json:"mode"`
	ConfigMode    rollout.Mode     `json:"config_mode"`
	PlanMode      rollout.Mode     `json:"plan_mode"`
	StartVersion  string           `json:"start_version"`
	TargetVersion string           `json:"target_version"`
	Strategy      rollout.Strategy `json:"strategy"`
	Schedule      rollout.Schedule `json:"schedule"`
	Critical      bool             `json:"critical"`
}

// GroupReport is one group in a StatusReport.
type GroupReport struct {
	Name   string `json:"name"`
	Agents int    `json:"agents"`
	Failed int    `json:"failed"`
	// Unreachable counts the agents, also in Agents, with no heartbeat for
	// three intervals (rollout.Unreachable); absent when none are.
	Unreachable int `json:"unreachable,omitempty"`
	// Blocked counts the agents, also in Agents and in none of Failed and
	// Unreachable, blocked on infrastructure (retrying by themselves);
	// absent when none are.
	Blocked  int                      `json:"blocked,omitempty"`
	Versions map[string]VersionReport `json:"versions"`
	// Controllers is how many controllers report the group; At is when the
	// entry shown was written (absent when no controller counted the group).
	Controllers int       `json:"controllers"`
	At          time.Time `json:"at,omitzero"`
	// Rollout is the group's rollout; absent when there is no plan.
	Rollout *GroupRollout `json:"rollout,omitempty"`
	// Failures are the group's failed agents (GroupFailures: at most
	// MaxGroupFailures, by id), FailuresTotal how many there are; filled
	// by fleetctl status from the agents' heartbeats, absent when none
	// failed.
	Failures      []AgentFailure `json:"failures,omitempty"`
	FailuresTotal int            `json:"failures_total,omitempty"`
	// Sites break the group's agents down by the site their heartbeats
	// name, by name ("(none)": agents naming none, "(other)": sites past
	// the 100 kept, both last); absent when no agent names a site.
	Sites []SiteReport `json:"sites,omitempty"`
}

// SiteReport counts one site's agents in one group.
type SiteReport struct {
	Site        string                   `json:"site"`
	Agents      int                      `json:"agents"`
	Failed      int                      `json:"failed"`
	Unreachable int                      `json:"unreachable,omitempty"`
	Versions    map[string]VersionReport `json:"versions"`
	// Split divides the site's agents as the group's rollout.agents does
	// (timed_out is not known per site: 0); absent when there is no plan.
	Split *AgentSplit `json:"split,omitempty"`
}

// GroupRollout is where one group stands in the rollout of the plan's target.
type GroupRollout struct {
	// InConfig: the group is in fleet_config. Agents of a group that is not
	// are not rolled out.
	InConfig bool `json:"in_config"`
	// Requires are the groups that must be done before this one starts.
	Requires []string `json:"requires"`
	// Hold is the version the group holds until its turn (what its
	// unstarted and new hosts get, and what a rollback returns to): the
	// last version it completed, or the plan's start version for a group
	// with no history (rollout.GroupStatus.Hold). Empty: none, agents keep
	// what they have.
	Hold string `json:"hold"`
	// RejectedVersions are the versions the group halted on or was rolled
	// back from; it never holds one.
	RejectedVersions []string `json:"rejected_versions,omitempty"`
	// State and the fields after it are the controller's group status;
	// State is absent when it has written none yet, or when the stored
	// status is not valid (StatusInvalid).
	State rollout.State `json:"state,omitempty"`
	// StatusInvalid: the stored status is not valid (see the report's
	// problems); the controller does not move the group until it is
	// replaced (fleetctl reset --group G).
	StatusInvalid bool      `json:"status_invalid,omitempty"`
	Reason        string    `json:"reason,omitempty"`
	Since         time.Time `json:"since,omitzero"`
	// Stale: the status is about StatusTarget, not the plan's target; the
	// controller has not caught up, and agents treat the group as unstarted.
	Stale        bool      `json:"stale,omitempty"`
	StatusTarget string    `json:"status_target,omitempty"`
	Halted       bool      `json:"halted"`
	HaltReason   string    `json:"halt_reason,omitempty"`
	HaltedAt     time.Time `json:"halted_at,omitzero"`
	// TargetQuarantined: the group halted because its target is
	// quarantined fleet-wide (the report's Quarantined says why, once).
	TargetQuarantined bool      `json:"target_quarantined,omitempty"`
	Waiting           string    `json:"waiting,omitempty"`
	WaitingUntil      time.Time `json:"waiting_until,omitzero"`
	Frozen            string    `json:"frozen,omitempty"`
	// Held says why progress is held: agents in flight blocked on
	// infrastructure (rollout.GroupStatus.Held); nothing is failed.
	Held string `json:"held,omitempty"`
	// Vanished is how many of the group's initial agents are gone
	// (rollout.GroupStatus.Vanished); DoneHeld says why a group whose
	// present agents all finished is not done: more vanished than its
	// vanished_limit. Absent when none vanished / it is not held.
	Vanished     int    `json:"vanished,omitempty"`
	DoneHeld     string `json:"done_held,omitempty"`
	Alerted      bool   `json:"alerted"`
	RunRequested bool   `json:"run_requested,omitempty"`
	// SkipCanaries is the operator's reason for starting the group
	// without canaries (fleetctl run --skip-canaries): with RunRequested
	// a request, otherwise the record of a group that started so.
	SkipCanaries string `json:"skip_canaries,omitempty"`
	// Retry is the operator's last retry request (fleetctl retry), absent
	// when there is none.
	Retry *rollout.RetryRequest `json:"retry,omitempty"`
	// AwaitingApproval is the group's wait for an operator's approval
	// (fleetctl approve), absent when it awaits none; Approvals are the
	// approvals given for the target (who approved which stage).
	AwaitingApproval *ApprovalReport    `json:"awaiting_approval,omitempty"`
	Approvals        []rollout.Approval `json:"approvals,omitempty"`
	// Progress in [0,1] (DESIGN §3.4).
	Progress     float64 `json:"progress"`
	InitialCount int     `json:"initial_count"`
	// FailedCount is the controller's count of agents failing the target
	// that counts towards failure_threshold.
	FailedCount int `json:"failed_count"`
	// UpdatesTimedOut is how many of FailedCount are agents still updating
	// to the target longer than update_timeout (absent when none are).
	UpdatesTimedOut int       `json:"updates_timed_out,omitempty"`
	StartedAt       time.Time `json:"started_at,omitzero"`
	DoneAt          time.Time `json:"done_at,omitzero"`
	Canaries        int       `json:"canaries"`
	// TimedOut counts canaries missing for longer than health_timeout. It
	// is only known in the canary state; absent otherwise.
	TimedOut *int `json:"timed_out,omitempty"`
	// Agents splits the group's counted agents.
	Agents AgentSplit `json:"agents"`
	// DoneFailed, for a group done on the plan's target, is how many of
	// its agents failed the target (Agents.Failed: not on it, rolled back
	// from it or reporting an error): the group is done with failures,
	// and status --wait exits 4. Absent otherwise.
	DoneFailed int `json:"done_failed,omitempty"`
	// Analysis is where each of the group's metric analysis checks
	// stands (rollout.CheckStatus); absent without checks.
	Analysis []rollout.CheckStatus `json:"analysis,omitempty"`
	// Issue 28: the group's rate and adaptive in-flight bound
	// (rollout.GroupStatus.Rate, .Adaptive); absent without them.
	Rate     *rollout.RateStatus     `json:"rate,omitempty"`
	Adaptive *rollout.AdaptiveStatus `json:"adaptive,omitempty"`

	// Issue 28, canaries: CanariesSkipped says why the group started with
	// no canary phase (small_group); ReplacedCanaries are the canaries that
	// vanished before they reported on the target and were replaced.
	// Absent when none.
	CanariesSkipped  string                   `json:"canaries_skipped,omitempty"`
	ReplacedCanaries []rollout.ReplacedCanary `json:"replaced_canaries,omitempty"`

	// Issue 28, catch-all (docs/rollout.md, "Catch-all group").
	// CatchAll: the group is the config's catch-all; Caught, on it, the
	// counted agents of the groups not in the config that follow it
	// (rolled out with its own: in its initial count), absent when none.
	CatchAll bool          `json:"catch_all,omitempty"`
	Caught   *CaughtReport `json:"caught,omitempty"`
	// Follows, on a group not in the config, is the catch-all group its
	// agents follow (the controller copied its status under the group's
	// key: the fields above are that copy). Unfollowed, on a group not in
	// the config with counted agents that follows none, says why its
	// agents wait.
	Follows    string `json:"follows,omitempty"`
	Unfollowed string `json:"unfollowed,omitempty"`

	// Issue 28, time-based: WindowCloses is when the window a group of a
	// time-based plan updates in closes (rollout.GroupStatus.WindowCloses);
	// absent otherwise.
	WindowCloses time.Time `json:"window_closes,omitzero"`
}

// CaughtReport counts the hosts of groups not in the config that the
// catch-all group rolls out: their counted agents, and their groups by
// name.
type CaughtReport struct {
	Agents int      `json:"agents"`
	Groups []string `json:"groups"`
}

// AgentSplit divides a group's counted agents (GroupReport.Agents) in four:
// unreachable (no heartbeat for three intervals: what they run now is not
// known), and of the others on the target, failed (not on the target, and
// rolled back or reporting an error), and unchanged (the rest). Unchanged
// splits further into updating (installing a version right now:
// downloading, or waiting for the new version to prove healthy) and waiting
// (the rest: not told to update yet), and blocked (their last attempt hit
// an infrastructure failure, a release site down or a full disk, that they
// retry by themselves: neither failed nor waiting). TimedOut are the updating ones the
// controller counts as timed out (longer than update_timeout): failed for
// failure_threshold, out of the max_in_flight window.
type AgentSplit struct {
	Updated     int `json:"updated"`
	Unchanged   int `json:"unchanged"`
	Failed      int `json:"failed"`
	Updating    int `json:"updating"`
	Waiting     int `json:"waiting"`
	Blocked     int `json:"blocked"`
	Unreachable int `json:"unreachable"`
	TimedOut    int `json:"timed_out"`
}

// VersionReport counts one version in one group.
type VersionReport struct {
	Count  int `json:"count"`
	Failed int `json:"failed"`
	// Updating counts the agents at this version installing another one
	// right now (also in Count); absent when none are.
	Updating int             `json:"updating,omitempty"`
	LowestID rollout.AgentID `json:"lowest_id,omitempty"`
	// Unreachable counts the agents at this version with no heartbeat for
	// three intervals (also in Count, in neither Failed nor Updating);
	// absent when none are.
	Unreachable int `json:"unreachable,omitempty"`
	// Blocked counts the agents at this version blocked on
	// infrastructure (also in Count, not in Failed); absent when none are.
	Blocked int `json:"blocked,omitempty"`
}

// BuildStatus turns fleet_stats entries into the report at now.
func BuildStatus(entries []kv.Stats, now time.Time) StatusReport {
	rep := StatusReport{Groups: []GroupReport{}}
	for _, gs := range kv.MergeStats(entries, now) {
		gr := GroupReport{Name: gs.Group, Versions: map[string]VersionReport{}, Controllers: gs.Reporting, At: gs.At}
		for v, c := range gs.Versions {
			gr.Versions[v] = VersionReport{Count: c.Count, Failed: c.FailedCount, Updating: c.Updating, LowestID: c.LowestID, Unreachable: c.Unreachable,
				Blocked: c.Blocked}
			gr.Agents += c.Count
			gr.Failed += c.FailedCount
			gr.Unreachable += c.Unreachable
			gr.Blocked += c.Blocked
		}
		gr.Sites = siteReports(gs.Sites)
		rep.Groups = append(rep.Groups, gr)
	}
	return rep
}

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
		ConfigMode:    OrEnabled(cfg.Mode),
		PlanMode:      OrEnabled(spec.Mode),
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
		started := StartedOnTarget(gr.Rollout)
		if !started {
			gr.Rollout.Agents = failedEarlier(gr.Rollout.Agents)
		}
		for i := range gr.Sites {
			split := splitAgents(gr.Sites[i].Versions, gr.Sites[i].Agents, spec.TargetVersion)
			if !started {
				split = failedEarlier(split)
			}
			gr.Sites[i].Split = &split
		}
		groups = append(groups, gr)
	}
	catchAllReport(groups, cfg, st)
	rep.Groups = groups
	rep.Quarantined = quarantineReports(st.Quarantine.Value, groups, spec.TargetVersion)
	return rep
}

// catchAllReport marks the config's catch-all group with the hosts it
// catches, each group not in the config with the group it follows, and
// the ones with agents that follow none with why (issue 28).
func catchAllReport(groups []GroupReport, cfg rollout.Config, st *kv.State) {
	catchAll, ok := cfg.CatchAllGroup()
	followed := 0
	for _, e := range st.Groups {
		if _, configured := cfg.Group(e.Value.Group); !configured && e.Value.Follows != "" {
			followed++
		}
	}
	caught := &CaughtReport{Groups: []string{}}
	var at *GroupRollout
	for i := range groups {
		g := &groups[i]
		r := g.Rollout
		if r.InConfig {
			if ok && g.Name == catchAll {
				r.CatchAll, at = true, r
			}
			continue
		}
		e, has := st.Groups[g.Name]
		switch {
		case has && e.Value.Follows != "":
			r.Follows = e.Value.Follows
			if ok && r.Follows == catchAll {
				caught.Agents += g.Agents
				caught.Groups = append(caught.Groups, g.Name)
			}
		case g.Agents == 0 || !ok:
		case followed >= rollout.MaxCaughtGroups:
			r.Unfollowed = fmt.Sprintf("catch-all group %s follows at most %d groups, and follows that many (add this group to the config, or enroll its hosts in one that is)", catchAll, rollout.MaxCaughtGroups)
		default:
			r.Unfollowed = fmt.Sprintf("catch-all group %s does not follow it yet (the leading controller does at its next pass: is one running?)", catchAll)
		}
	}
	if at != nil && len(caught.Groups) > 0 {
		sort.Strings(caught.Groups)
		at.Caught = caught
	}
}

// quarantineReports are the quarantined versions of l, each with the
// groups halted on it because it is their target (and marks those
// groups' rollouts).
func quarantineReports(l rollout.QuarantineList, groups []GroupReport, target string) []QuarantineReport {
	var out []QuarantineReport
	for _, q := range l.Versions {
		qr := QuarantineReport{Quarantine: q, Halts: []string{}}
		for _, g := range groups {
			r := g.Rollout
			if r != nil && r.Follows == "" && r.Halted && !r.Stale && q.Version == target && strings.HasPrefix(r.HaltReason, "quarantined: ") {
				r.TargetQuarantined = true
				qr.Halts = append(qr.Halts, g.Name)
			}
		}
		out = append(out, qr)
	}
	return out
}

func groupRollout(gr GroupReport, cfg rollout.Config, spec rollout.Spec, s rollout.GroupStatus, hasStatus bool, now time.Time) *GroupRollout {
	gc, inConfig := cfg.Group(gr.Name)
	r := &GroupRollout{InConfig: inConfig, Requires: []string{}}
	if inConfig {
		r.Requires = append(r.Requires, cfg.Dependencies(gr.Name)...)
	}
	r.Agents = splitAgents(gr.Versions, gr.Agents, spec.TargetVersion)
	r.Hold, r.RejectedVersions = s.Hold(spec), s.RejectedVersions
	if !hasStatus {
		return r
	}
	r.State, r.Reason, r.Since = s.State, s.Reason, s.Since
	if s.TargetVersion != spec.TargetVersion {
		r.Stale, r.StatusTarget = true, s.TargetVersion
	}
	r.Halted, r.HaltReason, r.HaltedAt = s.Halted, s.HaltReason, s.HaltedAt
	r.Waiting, r.WaitingUntil, r.Frozen, r.Held = s.Waiting, s.WaitingUntil, s.Frozen, s.Held
	r.Vanished, r.DoneHeld = s.Vanished, s.DoneHeld
	c := s.Clone()
	r.Rate, r.Adaptive = c.Rate, c.Adaptive
	if spec.Schedule == rollout.ScheduleTimeBased && !spec.Critical {
		r.WindowCloses = s.WindowCloses
	}
	r.Alerted, r.RunRequested, r.SkipCanaries = s.Alerted, s.RunRequested, s.SkipCanaries
	if s.Retry.Token != "" {
		r.Retry = &s.Retry
	}
	if !r.Stale {
		approvalRollout(r, s, now)
	}
	r.Progress, r.InitialCount, r.FailedCount, r.UpdatesTimedOut = s.Progress, s.InitialCount, s.FailedCount, s.TimedOutCount
	if !r.Stale {
		r.Agents.TimedOut = min(s.TimedOutCount, r.Agents.Updating)
		if s.State == rollout.StateDone {
			r.DoneFailed = r.Agents.Failed
		}
	}
	r.StartedAt, r.DoneAt, r.Canaries = s.StartedAt, s.DoneAt, len(s.Canaries)
	r.Analysis = s.Analysis
	if !r.Stale {
		r.CanariesSkipped, r.ReplacedCanaries = s.CanariesSkipped, s.ReplacedCanaries
	}
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

// splitAgents divides agents, counted per version in versions, for a
// rollout to target (see AgentSplit; TimedOut is the caller's).
func splitAgents(versions map[string]VersionReport, agents int, target string) AgentSplit {
	var a AgentSplit
	for v, c := range versions {
		a.Unreachable += c.Unreachable
		if v == target {
			a.Updated += c.Count - c.Unreachable
		} else {
			a.Failed += c.Failed
			a.Updating += c.Updating
			a.Blocked += c.Blocked
		}
	}
	a.Unchanged = max(agents-a.Updated-a.Failed-a.Unreachable, 0)
	// An agent installing is not failed (its error is cleared as it starts).
	a.Updating = min(a.Updating, a.Unchanged)
	a.Blocked = min(a.Blocked, a.Unchanged-a.Updating)
	a.Waiting = a.Unchanged - a.Updating - a.Blocked
	return a
}

// StartedOnTarget reports whether the group has started its rollout of the
// plan's target: a valid status for the target in a state other than
// unstarted. A group that has not started has told no agent to install the
// target.
func StartedOnTarget(r *GroupRollout) bool {
	return r.State != "" && r.State != rollout.StateUnstarted && !r.Stale && !r.StatusInvalid
}

// failedEarlier is sp for a group that has not started on the target: none
// of its agents failed the target (none was told to install it), so the
// agents still flagged failed (a rollback from an earlier target stays in
// the heartbeat until the next install) are waiting, as the rollout counts
// them (failure_threshold counts only failures of the target).
func failedEarlier(sp AgentSplit) AgentSplit {
	sp.Unchanged += sp.Failed
	sp.Waiting += sp.Failed
	sp.Failed = 0
	return sp
}

// siteReports are the SiteReports of sc, by name, "(none)" and "(other)"
// last; nil for none.
func siteReports(sc rollout.SiteCounts) []SiteReport {
	if len(sc) == 0 {
		return nil
	}
	out := make([]SiteReport, 0, len(sc))
	for site, counts := range sc {
		sr := SiteReport{Site: site, Versions: map[string]VersionReport{}}
		for v, c := range counts {
			sr.Versions[v] = VersionReport{Count: c.Count, Failed: c.FailedCount, Updating: c.Updating, Unreachable: c.Unreachable, Blocked: c.Blocked}
			sr.Agents += c.Count
			sr.Failed += c.FailedCount
			sr.Unreachable += c.Unreachable
		}
		out = append(out, sr)
	}
	rank := func(s string) int {
		switch s {
		case rollout.NoSite:
			return 1
		case rollout.OtherSites:
			return 2
		}
		return 0
	}
	sort.Slice(out, func(i, j int) bool {
		if ri, rj := rank(out[i].Site), rank(out[j].Site); ri != rj {
			return ri < rj
		}
		return out[i].Site < out[j].Site
	})
	return out
}

// OrEnabled is m, or enabled when m is unset (what an unset mode means).
func OrEnabled(m rollout.Mode) rollout.Mode {
	if m == "" {
		return rollout.ModeEnabled
	}
	return m
}

// Problem is a stored value a reader skipped because it is not what its key
// should hold (it does not decode or validate, belongs under another key,
// or is a JetStream response stored by mistake). It is the JSON of the
// "problems" lists of status, agents ls and history.
type Problem struct {
	// Key is bucket/key ("fleet_stats/prod.c1"), or FLEET_HB/subject for a
	// heartbeat.
	Key string `json:"key"`
	// Revision is the stream sequence of the bad value.
	Revision uint64 `json:"revision,omitempty"`
	// Error says what is wrong with it.
	Error string `json:"error"`
	// Fix is the command that repairs it, or how it goes away.
	Fix string `json:"fix"`
}

// ProblemOf is p as a report's Problem.
func ProblemOf(p *kv.Problem) Problem {
	return Problem{Key: p.Where(), Revision: p.Revision, Error: p.Err.Error(), Fix: p.Fix()}
}

// ProblemsOf is ProblemOf of each.
func ProblemsOf(ps []kv.Problem) []Problem {
	var out []Problem
	for i := range ps {
		out = append(out, ProblemOf(&ps[i]))
	}
	return out
}

// VersionRow is one version's count in a group.
type VersionRow struct {
	Version string `json:"version"`
	VersionReport
}

// VersionRows are g's versions, newest first, "none" last.
func VersionRows(g GroupReport) []VersionRow {
	out := make([]VersionRow, 0, len(g.Versions))
	for v, c := range g.Versions {
		out = append(out, VersionRow{Version: v, VersionReport: c})
	}
	sort.Slice(out, func(i, j int) bool { return VersionLess(out[i].Version, out[j].Version) })
	return out
}

// VersionLess orders newest version first, "none" last.
func VersionLess(a, b string) bool {
	switch {
	case a == rollout.NoVersion:
		return false
	case b == rollout.NoVersion:
		return true
	}
	return rollout.CompareVersions(a, b) > 0
}
