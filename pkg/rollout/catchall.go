package rollout

import (
	"fmt"
	"maps"
	"slices"
)

// CatchAllNone as Config.CatchAll: hosts of a group that is not in the
// config follow no group; they wait, as before catch-all groups existed.
// It cannot be a group name (ValidateGroupName refuses it).
const CatchAllNone = "-"

// CatchAllGroup is the group that hosts of groups not in the config follow:
// CatchAll, or the last group when it is "", or none ("", false) for
// CatchAllNone.
func (c Config) CatchAllGroup() (string, bool) {
	switch {
	case c.CatchAll == CatchAllNone:
		return "", false
	case c.CatchAll != "":
		return c.CatchAll, true
	case len(c.Groups) > 0:
		return c.Groups[len(c.Groups)-1].Name, true
	}
	return "", false
}

// MaxCaughtGroups bounds the groups not in the config that the catch-all
// group follows at once (CatchAllFollow): each is one key the controller
// writes, so hosts enrolled in ever new group names cost at most this many
// writes per change of the catch-all's status, never one per host.
const MaxCaughtGroups = MaxGroups

// CaughtGroup is the agents of one group that is not in the config and
// follows the catch-all group (Input.Caught).
type CaughtGroup struct {
	Group string
	// Agents are the group's present, established agents, as Input.Agents.
	Agents []AgentView
}

// CatchAllFollow decides which groups that are not in c the catch-all
// group follows. present are the groups whose hosts heartbeat now (with at
// least one counted agent), in any order; following are the groups whose
// stored status already follows (GroupStatus.Follows). A group already
// followed stays so while it has hosts (a group is never dropped for a
// newcomer), then the others by name, up to MaxCaughtGroups; over are the
// groups with hosts left out past the bound (they wait, as every host of a
// group not in the config did before catch-all groups). Both are sorted.
// Groups of the config, names that are not valid group names and
// duplicates are never in either. With no catch-all group (CatchAllNone, or
// no groups) nothing is followed and nothing is over.
func (c Config) CatchAllFollow(present, following []string) (follow, over []string) {
	if _, ok := c.CatchAllGroup(); !ok {
		return nil, nil
	}
	seen := make(map[string]bool, len(present))
	var fresh []string
	was := make(map[string]bool, len(following))
	for _, g := range following {
		was[g] = true
	}
	for _, g := range present {
		if seen[g] || ValidateGroupName(g) != nil {
			continue
		}
		seen[g] = true
		if _, configured := c.Group(g); configured {
			continue
		}
		if was[g] {
			follow = append(follow, g)
		} else {
			fresh = append(fresh, g)
		}
	}
	slices.Sort(follow)
	slices.Sort(fresh)
	if len(follow) > MaxCaughtGroups { // not reached: the controller never writes more
		over = append(over, follow[MaxCaughtGroups:]...)
		follow = follow[:MaxCaughtGroups]
	}
	n := min(len(fresh), MaxCaughtGroups-len(follow))
	follow = append(follow, fresh[:n]...)
	over = append(over, fresh[n:]...)
	slices.Sort(follow)
	slices.Sort(over)
	return follow, over
}

// FollowStatus is the status the controller writes under the key of group,
// a group that is not in the config and whose hosts follow the catch-all
// group, whose status is catchAll: a copy of it under group's name, marked
// Follows. Decide answers every agent id the same on both (canaries,
// progress, halts, rollbacks, done, mode and hold included), so a caught
// host does what the catch-all's own hosts do.
func FollowStatus(catchAll GroupStatus, group string) GroupStatus {
	st := catchAll.Clone()
	st.Group, st.Follows = group, catchAll.Group
	return st
}

// validateFollows checks Follows: empty, or another valid group name.
func (st GroupStatus) validateFollows() error {
	switch {
	case st.Follows == "":
		return nil
	case st.Follows == st.Group:
		return fmt.Errorf("follows %q: a group cannot follow itself", st.Follows)
	}
	if err := ValidateGroupName(st.Follows); err != nil {
		return fmt.Errorf("follows: %v", err)
	}
	return nil
}

// withCaught is the machine's input with the caught agents counted in, for
// the config's catch-all group (the agents of the groups named in
// in.Caught that are not in the config, at most MaxCaughtGroups groups):
// they count as the group's own agents do, for the initial count,
// canaries, progress, the in-flight bound, failures and done. Any other
// group ignores in.Caught. The caller's slices and maps are not changed.
func (m *machine) withCaught() {
	in := &m.in
	if len(in.Caught) == 0 {
		return
	}
	if g, ok := in.Config.CatchAllGroup(); !ok || g != in.Group {
		return
	}
	var agents []AgentView
	var counts Counts
	seen := map[string]bool{}
	for _, cg := range in.Caught {
		if len(seen) == MaxCaughtGroups {
			break
		}
		if seen[cg.Group] || cg.Group == in.Group || ValidateGroupName(cg.Group) != nil {
			continue
		}
		if _, configured := in.Config.Group(cg.Group); configured {
			continue
		}
		seen[cg.Group] = true
		if len(cg.Agents) == 0 {
			continue
		}
		if agents == nil {
			agents = slices.Clone(in.Agents)
			counts = maps.Clone(in.Counts)
			if counts == nil {
				counts = Counts{}
			}
		}
		agents = append(agents, cg.Agents...)
		for _, a := range cg.Agents {
			counts.Add(a)
		}
	}
	if agents != nil {
		in.Agents, in.Counts = agents, counts
	}
}

func (c Config) validateCatchAll() error {
	if c.CatchAll == "" || c.CatchAll == CatchAllNone {
		return nil
	}
	if _, ok := c.Group(c.CatchAll); !ok {
		return fmt.Errorf("catch_all %q: not a group of the config; name one, or %q for none (omitted: the last group)", truncate(c.CatchAll, 70), CatchAllNone)
	}
	return nil
}

// Window lengths (GroupConfig.WindowLength).
const (
	DefaultWindowLength = Duration(60 * 60 * 1e9) // one hour
	minWindowLength     = Duration(15 * 60 * 1e9)
	maxWindowLength     = Duration(24 * 60 * 60 * 1e9)
)

// EffectiveWindowLength is how long each of the group's windows stays
// open: window_length, or DefaultWindowLength when it is not set.
func (g GroupConfig) EffectiveWindowLength() Duration {
	if g.WindowLength == 0 {
		return DefaultWindowLength
	}
	return g.WindowLength
}

// MaxSmallGroup bounds small_group.
const MaxSmallGroup = 1000
