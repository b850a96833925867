package rollout

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
)

// Membership by labels (issue 28, point 8). An agent cannot read
// fleet_config; the leader publishes what it needs on a plan key agents can
// read (pkg/kv AppNS.Groups: "groups", "<app>.groups"): every group of the
// app's config in order, with its selector when it has one. The agent
// decides its own group from it (Member) and moves, with hysteresis, to
// the group its labels select (internal/agentd, selector.go).

// AutoLabels are the labels agentd sets on every host itself: its OS,
// CPU architecture and kernel release. An operator's labels may not.
var AutoLabels = []string{"os", "arch", "kernel"}

// GroupList is the value of the groups key: the app's groups in config
// order and their selectors.
type GroupList struct {
	V      int          `json:"v"`
	Groups []GroupEntry `json:"groups"`
}

// GroupEntry is one group of a GroupList.
type GroupEntry struct {
	Name     string   `json:"name"`
	Selector Selector `json:"selector,omitempty"`
}

// GroupListOf is cfg's GroupList (cfg as the app sees it: Config.ForApp).
func GroupListOf(cfg Config) GroupList {
	l := GroupList{V: SchemaVersion, Groups: make([]GroupEntry, 0, len(cfg.Groups))}
	for _, g := range cfg.Groups {
		e := GroupEntry{Name: g.Name}
		if len(g.Selector) > 0 {
			e.Selector = maps.Clone(g.Selector)
		}
		l.Groups = append(l.Groups, e)
	}
	return l
}

// HasSelectors reports whether any group of l has a selector.
func (l GroupList) HasSelectors() bool {
	for _, g := range l.Groups {
		if len(g.Selector) > 0 {
			return true
		}
	}
	return false
}

// Equal reports whether l and o list the same groups and selectors.
func (l GroupList) Equal(o GroupList) bool {
	return l.V == o.V && reflect.DeepEqual(l.normal(), o.normal())
}

func (l GroupList) normal() []GroupEntry {
	out := make([]GroupEntry, len(l.Groups))
	for i, g := range l.Groups {
		out[i] = GroupEntry{Name: g.Name}
		if len(g.Selector) > 0 {
			out[i].Selector = g.Selector
		}
	}
	return out
}

// Validate checks what an agent reads before it acts on it: the schema,
// at most MaxGroups groups with valid, distinct names, valid selectors.
func (l GroupList) Validate() error {
	if l.V != SchemaVersion {
		return fmt.Errorf("groups: v=%d, this build reads v=%d", l.V, SchemaVersion)
	}
	if len(l.Groups) > MaxGroups {
		return fmt.Errorf("groups: %d groups, at most %d", len(l.Groups), MaxGroups)
	}
	seen := make(map[string]bool, len(l.Groups))
	for _, g := range l.Groups {
		if err := ValidateGroupName(g.Name); err != nil {
			return fmt.Errorf("groups: %w", err)
		}
		if seen[g.Name] {
			return fmt.Errorf("groups: group %q listed twice", g.Name)
		}
		seen[g.Name] = true
		if err := g.Selector.validate(); err != nil {
			return fmt.Errorf("groups: group %q: %w", g.Name, err)
		}
	}
	return nil
}

// DecodeGroupList decodes and validates a groups key's value.
func DecodeGroupList(data []byte) (GroupList, error) {
	var l GroupList
	if err := json.Unmarshal(data, &l); err != nil {
		return GroupList{}, fmt.Errorf("groups: %w", err)
	}
	if err := l.Validate(); err != nil {
		return GroupList{}, err
	}
	return l, nil
}

// Member is the group an agent with labels belongs to: the first group of
// l, in config order, whose selector matches them (selected true), or the
// group the agent was given (its --group) when none does.
func (l GroupList) Member(labels Labels, given string) (group string, selected bool) {
	for _, g := range l.Groups {
		if g.Selector.Matches(labels) {
			return g.Name, true
		}
	}
	return given, false
}
