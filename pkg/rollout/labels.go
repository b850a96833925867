package rollout

import "fmt"

// Labels are what an agent says about its host (agentd --label k=v, and
// os, arch and kernel), carried in its heartbeats; a group may be defined
// by a Selector over them.
type Labels map[string]string

// Limits of labels and selectors: a peer's labels are data, bounded.
const (
	MaxLabels        = 32
	MaxLabelKeyLen   = 63
	MaxLabelValueLen = 63
)

// ValidateLabel checks one label: a key of a-z, 0-9, '.', '-', '_' and '/'
// starting with a letter or digit, and a value of printable ASCII without
// spaces (empty allowed), each at most 63 bytes.
func ValidateLabel(k, v string) error {
	if k == "" || len(k) > MaxLabelKeyLen {
		return fmt.Errorf("label key %q: 1-%d characters", truncate(k, 70), MaxLabelKeyLen)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && (c == '.' || c == '-' || c == '_' || c == '/') {
			continue
		}
		return fmt.Errorf("label key %q: use a-z, 0-9, '.', '-', '_' and '/', starting with a letter or digit", truncate(k, 70))
	}
	if len(v) > MaxLabelValueLen {
		return fmt.Errorf("label %s: value longer than %d characters", k, MaxLabelValueLen)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("label %s: value %q: use printable ASCII without spaces", k, truncate(v, 70))
		}
	}
	return nil
}

// Validate checks every label and their number.
func (l Labels) Validate() error {
	if len(l) > MaxLabels {
		return fmt.Errorf("%d labels, at most %d", len(l), MaxLabels)
	}
	for _, k := range sortedKeys(l) {
		if err := ValidateLabel(k, l[k]); err != nil {
			return err
		}
	}
	return nil
}

// Selector defines a group's members by their labels (GroupConfig.Selector):
// label key → the value it must have; every entry must match. Empty: the
// group is defined by the group name agents are given, as before.
type Selector map[string]string

// Matches reports whether labels satisfy every entry of s (an empty s
// matches nothing: such a group has no selector).
func (s Selector) Matches(l Labels) bool {
	if len(s) == 0 {
		return false
	}
	for k, v := range s {
		if got, ok := l[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (s Selector) validate() error {
	if err := Labels(s).Validate(); err != nil {
		return fmt.Errorf("selector: %w", err)
	}
	return nil
}
