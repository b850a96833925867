package rollout

import "slices"

// MaxRejected bounds GroupStatus.RejectedVersions: the oldest entry is
// dropped when a new one would make more.
const MaxRejected = 10

// Rejected reports whether the group halted on v or was rolled back from it
// (and has not completed it since).
func (st GroupStatus) Rejected(v string) bool {
	return slices.Contains(st.RejectedVersions, v)
}

// reject records that the group halted on v or was rolled back from it.
func (st *GroupStatus) reject(v string) {
	if ValidateVersion(v) != nil || st.Rejected(v) {
		return
	}
	st.RejectedVersions = append(slices.Clone(st.RejectedVersions), v)
	if n := len(st.RejectedVersions); n > MaxRejected {
		st.RejectedVersions = st.RejectedVersions[n-MaxRejected:]
	}
}

// accept forgets a rejection of v: the group completed v after all (a reset
// group that went on to finish, or an operator's mark-done).
func (st *GroupStatus) accept(v string) {
	if st.Rejected(v) {
		st.RejectedVersions = slices.DeleteFunc(slices.Clone(st.RejectedVersions), func(r string) bool { return r == v })
	}
	if len(st.RejectedVersions) == 0 {
		st.RejectedVersions = nil
	}
}

// holdAfter is the HoldVersion a group whose status is prev takes on when a
// new target resets it: the target of prev if the group completed it, else
// what it held during prev (its HoldVersion, or for a status written before
// hold_version existed, or one that followed the spec, prev's start
// version). A version the group rejected is skipped. "" when the group has
// no history: it then follows the spec's start version.
func holdAfter(prev GroupStatus) string {
	if prev.V == 0 || ValidateVersion(prev.TargetVersion) != nil {
		return ""
	}
	var candidates []string
	if prev.State == StateDone && !prev.Halted {
		candidates = append(candidates, prev.TargetVersion)
	}
	candidates = append(candidates, prev.HoldVersion, prev.StartVersion)
	for _, v := range candidates {
		if ValidateVersion(v) == nil && !prev.Rejected(v) {
			return v
		}
	}
	return ""
}

// Hold is the version the group's agents run before its turn under spec
// (Decide's v1): what unstarted, halted and rolled back groups answer, and
// what new hosts of the group install. It is the group's HoldVersion, the
// last version it completed; for a status about another target (the
// controller has not reset it yet) the hold the reset will give it; and the
// spec's start version only for a group with no history of its own. Never a
// version the group halted on or was rolled back from: "" (keep what you
// have) rather than that.
func (st GroupStatus) Hold(spec Spec) string {
	h := st.HoldVersion
	if st.TargetVersion != spec.TargetVersion {
		h = holdAfter(st)
	}
	if h == "" {
		h = spec.StartVersion
	}
	if ValidateVersion(h) != nil || st.Rejected(h) {
		return ""
	}
	return h
}

// RejectedBy names, sorted, the groups that halted on v or were rolled back
// from it: those that list it in RejectedVersions, and (for a status written
// before that field existed) those halted or rolled back on it now.
func RejectedBy(groups map[string]GroupStatus, v string) []string {
	var out []string
	for name, st := range groups {
		now := st.TargetVersion == v && (st.Halted || st.State == StateRolledBack)
		if now || st.Rejected(v) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// DefaultStart is the start version of a new target when the operator
// names none: the previous target if at least one group completed it and no
// group halted on it or was rolled back from it, else the previous start.
// The spec's start is what groups with no history and new groups hold, so
// it must be a version known to work.
func DefaultStart(prev Spec, groups map[string]GroupStatus) string {
	if len(RejectedBy(groups, prev.TargetVersion)) > 0 {
		return prev.StartVersion
	}
	for _, st := range groups {
		if st.TargetVersion == prev.TargetVersion && st.State == StateDone {
			return prev.TargetVersion
		}
	}
	return prev.StartVersion
}
