package rollout

// Decide answers what an agent should run and whether to update to it now.
// It is the one function behind both agentd's own decision and /v1/find, so
// the two can never disagree. Its inputs are what an agent can read: its id,
// the plan spec and its group's status, plus a mode.
//
// mode is the config mode as the caller knows it; agentd, which cannot read
// fleet_config, passes st.Mode. The mode used is the lowest of mode,
// spec.Mode and st.Mode (the last written by the controller), so a pause
// anywhere is a pause.
//
// The answers are RFD 169's "Proxy answer" tables, with v1 = the version
// the group holds (st.Hold(spec): the last version the group completed, the
// spec's start version only for a group with no history, never one it
// halted on or was rolled back from) and v2 = the target version:
//
//	mode      state       version  update
//	disabled  any         v2       false
//	paused    unstarted   v1       false
//	paused    canary      v1       false
//	paused    active      v2       false
//	paused    done        v2       false
//	paused    rolledback  v1       false
//	enabled   unstarted   v1       false
//	enabled   canary      v1       false, but v2 and true for the group's canaries
//	enabled   active      v2       true iff id.Fraction() < progress (or a canary)
//	enabled   done        v2       true
//	enabled   rolledback  v1       true
//
// and, beyond RFD 169:
//
//   - A halted group (canary or active, paused or enabled) answers v1 and
//     false to everyone: nobody starts a new update while it is halted, new
//     installs get the version known to work, and nobody is moved back until
//     an operator rolls back. Agents already updating finish or roll back.
//   - A status for another target than the spec's (the controller has not
//     caught up yet) counts as unstarted, holding what the controller's
//     reset will make it hold: its old target if it was done there, else
//     what it held. A group with no status holds the spec's start version.
//   - Under the time-based schedule (timebased.go), a done group answers
//     v2 and false (true with critical): its window closed or everyone is
//     on the target; stragglers update when it is active again in its
//     next window. An agent told to update checks UpdateAllowed before it
//     starts, so none starts after the window closed, even before the
//     controller wrote done.
//   - v1 may be "" (the group rejected every version it could hold): then
//     the answer is "" and false, keep what you have.
//   - Without a valid target version the answer is "" and false: keep what
//     you have.
func Decide(id AgentID, spec Spec, st GroupStatus, mode Mode) (version string, update bool) {
	return NewDecider(spec, st, mode).Decide(id)
}

// A Decider is Decide for one spec, group status and mode, with all that
// does not depend on the agent worked out once: for a caller that decides
// for many agents of a group on the same plan (a simulated fleet). Decide
// is a Decider used once, so the two cannot disagree.
type Decider struct {
	// Everyone gets version and update, except in canary (canaries get
	// v2 and true) and active (v2, and update for canaries and ids below
	// progress).
	version    string
	update     bool
	v2         string
	canaries   []Canary
	byProgress bool // active: update iff a canary or id.Fraction() < progress
	onlyCanary bool // canary: v2 and true for canaries only
	progress   float64
}

// NewDecider works out Decide's answer for spec, st and mode (see Decide)
// up to the agent id.
func NewDecider(spec Spec, st GroupStatus, mode Mode) Decider {
	if ValidateVersion(spec.TargetVersion) != nil {
		return Decider{}
	}
	v1, v2 := st.Hold(spec), spec.TargetVersion
	state, halted := st.State, st.Halted
	if st.TargetVersion != spec.TargetVersion || !state.Valid() {
		state, halted = StateUnstarted, false
	}
	switch lowestMode(mode, spec.Mode, st.Mode) {
	case ModeDisabled:
		return Decider{version: v2}
	case ModePaused:
		switch {
		case halted:
			return Decider{version: v1}
		case state == StateActive || state == StateDone:
			return Decider{version: v2}
		}
		return Decider{version: v1}
	}
	switch state {
	case StateCanary:
		if halted {
			return Decider{version: v1}
		}
		return Decider{version: v1, v2: v2, canaries: st.Canaries, onlyCanary: true}
	case StateActive:
		if halted {
			return Decider{version: v1}
		}
		return Decider{version: v2, canaries: st.Canaries, byProgress: true, progress: st.Progress}
	case StateDone:
		if spec.Schedule == ScheduleTimeBased {
			return Decider{version: v2, update: spec.Critical}
		}
		return Decider{version: v2, update: true}
	case StateRolledBack:
		return Decider{version: v1, update: v1 != ""}
	}
	return Decider{version: v1}
}

// Decide is Decide(id, spec, st, mode) for the Decider's spec, st and mode.
func (d Decider) Decide(id AgentID) (version string, update bool) {
	switch {
	case d.onlyCanary:
		if d.isCanary(id) {
			return d.v2, true
		}
	case d.byProgress:
		return d.version, d.isCanary(id) || id.Fraction() < d.progress
	}
	return d.version, d.update
}

func (d Decider) isCanary(id AgentID) bool {
	for _, c := range d.canaries {
		if c.ID == id {
			return true
		}
	}
	return false
}

// Act reports whether an agent that runs installed ("" for nothing) should
// install version now, given Decide's answer (version, update). A new host
// installs its group's version at once whatever the rollout says (RFD 169:
// "new installations will use agent_version regardless of
// agent_autoupdate"); any other host only when told to update, to a version
// it does not run already.
func Act(installed, version string, update bool) bool {
	switch {
	case version == "" || version == installed:
		return false
	case installed == "":
		return true
	default:
		return update
	}
}
