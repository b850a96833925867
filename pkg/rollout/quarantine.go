package rollout

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Fleet-wide quarantine (fleet_plan/quarantine): a version that failed as a
// release on quarantine_after distinct agents, in any groups, canaries
// included, is quarantined. Every group rolling it out halts (Next), no
// group holds it (it joins the group's RejectedVersions), so Decide never
// offers it to new or unstarted hosts, and fleetctl refuses it as a target
// or start version unless forced. An operator may quarantine a version
// before anyone installs it, and lift a quarantine.

// Quarantine settings and limits.
const (
	// DefaultQuarantineAfter is Config.QuarantineAfter when the config
	// does not set it.
	DefaultQuarantineAfter = 3
	// MaxQuarantineAfter bounds Config.QuarantineAfter.
	MaxQuarantineAfter = 1000
	// MaxQuarantined bounds the versions quarantined at once: adding one
	// more is refused (never drop a quarantine silently).
	MaxQuarantined = 100
	// MaxQuarantineAgents bounds the agent ids kept with one quarantine;
	// AgentCount has the full count.
	MaxQuarantineAgents = 20
	// MaxLifted bounds the lift records kept; the oldest is dropped.
	MaxLifted = 100
	// maxQuarantineText bounds a reason and a by.
	maxQuarantineText = 300
	// reasonAgents is how many ids a reason names.
	reasonAgents = 5
	// QuarantineByController is Quarantine.By when the rule fired.
	QuarantineByController = "controller"
)

// ErrBadQuarantine reports a fleet_plan/quarantine value no controller or
// fleetctl could have written, or a quarantine change that is not allowed.
var ErrBadQuarantine = errors.New("invalid quarantine")

// Quarantine is one quarantined version.
type Quarantine struct {
	Version string `json:"version"`
	// Reason says why: the rule's count and agents, or the operator's words.
	Reason string `json:"reason"`
	// Agents are the (lowest, at most MaxQuarantineAgents) ids of the
	// agents that rolled back from Version; AgentCount is how many did
	// (0 for an operator's quarantine before anyone installed it).
	Agents     []AgentID `json:"agents,omitempty"`
	AgentCount int       `json:"agent_count"`
	At         time.Time `json:"at"`
	// By is QuarantineByController, or the operator (fleetctl's actor).
	By string `json:"by"`
}

// Lift records that an operator lifted the quarantine of Version at At:
// only rollbacks from update attempts that begin after it count towards a
// new quarantine of that version.
type Lift struct {
	Version string    `json:"version"`
	At      time.Time `json:"at"`
	By      string    `json:"by"`
	Reason  string    `json:"reason,omitempty"`
}

// QuarantineList is the value of fleet_plan/quarantine.
type QuarantineList struct {
	V        int          `json:"v"`
	Versions []Quarantine `json:"versions"`
	Lifted   []Lift       `json:"lifted,omitempty"`
}

// Lookup returns the quarantine of v.
func (l QuarantineList) Lookup(v string) (Quarantine, bool) {
	for _, q := range l.Versions {
		if q.Version == v {
			return q, true
		}
	}
	return Quarantine{}, false
}

// Quarantined reports whether v is quarantined.
func (l QuarantineList) Quarantined(v string) bool {
	_, ok := l.Lookup(v)
	return ok
}

// liftedAt is when the quarantine of v was last lifted (zero: never).
func (l QuarantineList) liftedAt(v string) time.Time {
	var at time.Time
	for _, x := range l.Lifted {
		if x.Version == v && x.At.After(at) {
			at = x.At
		}
	}
	return at
}

// clone returns a copy of l that shares no memory with it.
func (l QuarantineList) clone() QuarantineList {
	l.Versions = slices.Clone(l.Versions)
	for i := range l.Versions {
		l.Versions[i].Agents = slices.Clone(l.Versions[i].Agents)
	}
	l.Lifted = slices.Clone(l.Lifted)
	return l
}

// Add quarantines q.Version. It is refused when the version is already
// quarantined or the list is full; a lift record of the version is
// forgotten (a new quarantine supersedes it).
func (l QuarantineList) Add(q Quarantine) (QuarantineList, error) {
	if l.V == 0 {
		l.V = SchemaVersion
	}
	if err := q.validate(); err != nil {
		return l, err
	}
	if old, ok := l.Lookup(q.Version); ok {
		return l, fmt.Errorf("%w: %s is already quarantined (by %s at %s)", ErrBadQuarantine, q.Version, old.By, old.At.UTC().Format(time.RFC3339))
	}
	if len(l.Versions) >= MaxQuarantined {
		return l, fmt.Errorf("%w: %d versions are quarantined already, at most %d: lift one first (fleetctl quarantine rm VERSION)", ErrBadQuarantine, len(l.Versions), MaxQuarantined)
	}
	l = l.clone()
	l.Versions = append(l.Versions, q)
	l.Lifted = slices.DeleteFunc(l.Lifted, func(x Lift) bool { return x.Version == q.Version })
	if len(l.Lifted) == 0 {
		l.Lifted = nil
	}
	return l, nil
}

// Lift ends the quarantine of v and records the lift. Groups halted by it
// stay halted until an operator resets or runs them. Refused when v is not
// quarantined.
func (l QuarantineList) Lift(v, by, reason string, now time.Time) (QuarantineList, Quarantine, error) {
	q, ok := l.Lookup(v)
	if !ok {
		return l, Quarantine{}, fmt.Errorf("%w: %s is not quarantined", ErrBadQuarantine, v)
	}
	if by == "" {
		return l, Quarantine{}, fmt.Errorf("%w: a lift needs a by", ErrBadQuarantine)
	}
	l = l.clone()
	l.Versions = slices.DeleteFunc(l.Versions, func(x Quarantine) bool { return x.Version == v })
	l.Lifted = slices.DeleteFunc(l.Lifted, func(x Lift) bool { return x.Version == v })
	l.Lifted = append(l.Lifted, Lift{Version: v, At: now, By: truncate(by, maxQuarantineText), Reason: truncate(reason, maxQuarantineText)})
	if n := len(l.Lifted); n > MaxLifted {
		l.Lifted = l.Lifted[n-MaxLifted:]
	}
	return l, q, nil
}

func (q Quarantine) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadQuarantine}, args...)...))
	}
	if err := ValidateVersion(q.Version); err != nil {
		bad("version: %v", err)
	}
	if q.Reason == "" || len(q.Reason) > maxQuarantineText+len("…") {
		bad("%s: reason must be 1-%d bytes", q.Version, maxQuarantineText)
	}
	if q.By == "" || len(q.By) > maxQuarantineText+len("…") {
		bad("%s: by must be 1-%d bytes", q.Version, maxQuarantineText)
	}
	if q.At.IsZero() {
		bad("%s: no at", q.Version)
	}
	if len(q.Agents) > MaxQuarantineAgents {
		bad("%s: %d agents listed, at most %d", q.Version, len(q.Agents), MaxQuarantineAgents)
	}
	if q.AgentCount < len(q.Agents) {
		bad("%s: agent_count %d is less than the %d agents listed", q.Version, q.AgentCount, len(q.Agents))
	}
	for i, id := range q.Agents {
		if _, err := ParseAgentID(string(id)); err != nil {
			bad("%s: agents[%d]: %v", q.Version, i, err)
		}
	}
	return errors.Join(errs...)
}

// Validate checks l is a quarantine list fleetwave could have written: this
// schema version, at most MaxQuarantined versions, each a valid version
// listed once with a reason, a time, a by and canonical agent ids, and at
// most MaxLifted lift records of valid versions. Every violation wraps
// ErrBadQuarantine.
func (l QuarantineList) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadQuarantine}, args...)...))
	}
	if l.V != SchemaVersion {
		bad("v %d: this fleetwave reads version %d", l.V, SchemaVersion)
	}
	if len(l.Versions) > MaxQuarantined {
		bad("%d versions, at most %d", len(l.Versions), MaxQuarantined)
	}
	for i, q := range l.Versions {
		if err := q.validate(); err != nil {
			errs = append(errs, fmt.Errorf("versions[%d]: %w", i, err))
		} else if slices.IndexFunc(l.Versions, func(x Quarantine) bool { return x.Version == q.Version }) < i {
			bad("versions[%d]: %s is listed twice", i, q.Version)
		}
	}
	if len(l.Lifted) > MaxLifted {
		bad("%d lift records, at most %d", len(l.Lifted), MaxLifted)
	}
	for i, x := range l.Lifted {
		if err := ValidateVersion(x.Version); err != nil {
			bad("lifted[%d]: %v", i, err)
		}
		if x.At.IsZero() || x.By == "" {
			bad("lifted[%d]: %s needs an at and a by", i, x.Version)
		}
	}
	return errors.Join(errs...)
}

// QuarantineFrom is the quarantine rule: the versions not yet in prev that
// at least after distinct agents (across all groups, canaries included)
// report they rolled back from with a release failure (AgentView.Rollback,
// RollbackFrom the version, not running it, ErrorClass release or "" from
// an agent that does not classify). An artifact or infrastructure failure
// is not the release's fault and never counts. After an operator lifted
// the quarantine of a version, only rollbacks of update attempts that began
// at or after the lift count (an attempt with no start time does not: the
// operator has judged the failures seen before). Unreachable agents count:
// a rollback is a fact of the past, not a state that could be out of date.
//
// after <= 0 turns the rule off. The result is sorted by version, each with
// the lowest MaxQuarantineAgents ids, the full count, a reason naming the
// rule (and the sites the rollbacks came from, when agents name any), At
// now and By QuarantineByController, ready for QuarantineList.Add.
func QuarantineFrom(agents []AgentView, after int, prev QuarantineList, now time.Time) []Quarantine {
	if after <= 0 {
		return nil
	}
	byVersion := map[string]map[AgentID]AgentView{}
	for _, a := range agents {
		v := a.RollbackFrom
		if !a.Rollback || ValidateVersion(v) != nil || a.ActiveVersion == v || prev.Quarantined(v) {
			continue
		}
		if a.ErrorClass != "" && a.ErrorClass != FailureRelease {
			continue
		}
		if lifted := prev.liftedAt(v); !lifted.IsZero() && (a.StartTime.IsZero() || a.StartTime.Before(lifted)) {
			continue
		}
		if byVersion[v] == nil {
			byVersion[v] = map[AgentID]AgentView{}
		}
		byVersion[v][a.ID] = a
	}
	var out []Quarantine
	for _, v := range sortedKeys(byVersion) {
		set := byVersion[v]
		if len(set) < after {
			continue
		}
		ids := make([]AgentID, 0, len(set))
		views := make([]AgentView, 0, len(set))
		for id, a := range set {
			ids, views = append(ids, id), append(views, a)
		}
		slices.Sort(ids)
		names := make([]string, len(ids))
		for i, id := range ids {
			names[i] = set[id].Name()
		}
		// The sites the rollbacks came from, when agents name any.
		sites := describeSites(views)
		if sites != "" {
			sites = "; " + strings.TrimSuffix(strings.TrimPrefix(sites, " ("), ")")
		}
		q := Quarantine{Version: v, AgentCount: len(ids), At: now, By: QuarantineByController}
		q.Agents = ids[:min(len(ids), MaxQuarantineAgents)]
		q.Reason = truncate(fmt.Sprintf("%d agents rolled back from %s (release failures, quarantine_after %d%s): %s",
			len(ids), v, after, sites, listNames(names, reasonAgents)), maxQuarantineText)
		out = append(out, q)
	}
	return out
}

// listNames lists up to n of names, and how many more there are; fewer
// when a name is long (a host name beside its id), so that the list fits
// a quarantine reason (maxQuarantineText) with room for what precedes it.
func listNames(names []string, n int) string {
	const room = maxQuarantineText - 110
	shown, size := 0, 0
	for _, name := range names[:min(len(names), n)] {
		if shown > 0 && size+len(name)+2 > room {
			break
		}
		shown, size = shown+1, size+len(name)+2
	}
	s := strings.Join(names[:shown], ", ")
	if len(names) > shown {
		s += fmt.Sprintf(" and %d more", len(names)-shown)
	}
	return s
}

// HaltReason is the halt reason of a group rolling out q.Version: the
// version, the rule (or the operator) and the agents, and what lifts it.
func (q Quarantine) HaltReason(group string) string {
	why := q.Reason
	if q.By != QuarantineByController {
		why = "by " + q.By + ": " + q.Reason
	}
	return fmt.Sprintf("quarantined: %s; the group never rolls %s out while it is quarantined (to go on anyway: fleetctl quarantine rm %s, then fleetctl reset --group %s --force --reason TEXT)",
		truncate(why, 400), q.Version, q.Version, group)
}
