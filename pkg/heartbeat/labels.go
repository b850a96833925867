package heartbeat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// LabelSet is the labels a heartbeat carries (agentd --label k=v, its
// labels file, and os, arch, kernel): in JSON an object of strings,
// "labels":{"arch":"amd64","os":"linux"}. It is a value, not a map, so that
// a Heartbeat stays comparable and an inventory of a million agents holds
// one string per agent (shared by the agents with the same labels), never
// a map each. The zero LabelSet has no label. Every LabelSet holds labels
// that pass rollout.Labels.Validate: MakeLabelSet and UnmarshalJSON refuse
// others.
type LabelSet struct {
	// enc is the labels sorted by key, each "key=value", joined by '\n'
	// (keys hold no '=', values no '\n': rollout.ValidateLabel).
	enc string
}

// MakeLabelSet validates l and returns it as a LabelSet.
func MakeLabelSet(l rollout.Labels) (LabelSet, error) {
	if err := l.Validate(); err != nil {
		return LabelSet{}, err
	}
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(l)) {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(l[k])
	}
	return LabelSet{enc: b.String()}, nil
}

// IsZero reports whether s has no label (and lets `omitzero` leave it out).
func (s LabelSet) IsZero() bool { return s.enc == "" }

// Map returns the labels as a new map (nil when there is none).
func (s LabelSet) Map() rollout.Labels {
	if s.enc == "" {
		return nil
	}
	out := rollout.Labels{}
	s.each(func(k, v string) bool {
		out[k] = v
		return true
	})
	return out
}

// Len is the number of labels.
func (s LabelSet) Len() int {
	if s.enc == "" {
		return 0
	}
	return strings.Count(s.enc, "\n") + 1
}

// Get returns the value of label k.
func (s LabelSet) Get(k string) (v string, ok bool) {
	s.each(func(key, val string) bool {
		if key == k {
			v, ok = val, true
			return false
		}
		return true
	})
	return v, ok
}

// Matches reports whether every entry of sel is one of s's labels
// (rollout.Selector.Matches, without building a map).
func (s LabelSet) Matches(sel rollout.Selector) bool {
	if len(sel) == 0 {
		return false
	}
	for k, want := range sel {
		if v, ok := s.Get(k); !ok || v != want {
			return false
		}
	}
	return true
}

// String is the labels as "k=v,k=v", sorted by key ("" for none): how
// tables show them (values may hold ',' and '=': -o json has them exactly).
func (s LabelSet) String() string { return strings.ReplaceAll(s.enc, "\n", ",") }

func (s LabelSet) each(fn func(k, v string) bool) {
	rest := s.enc
	for rest != "" {
		var pair string
		pair, rest, _ = strings.Cut(rest, "\n")
		k, v, _ := strings.Cut(pair, "=")
		if !fn(k, v) {
			return
		}
	}
}

// MarshalJSON writes the labels as a JSON object, keys sorted. Keys and
// values are printable ASCII (rollout.ValidateLabel): only '"' and '\\'
// are escaped, so a label costs at most twice its length.
func (s LabelSet) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, len(s.enc)+2+4*s.Len())
	b = append(b, '{')
	first := true
	s.each(func(k, v string) bool {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendQuoted(b, k)
		b = append(b, ':')
		b = appendQuoted(b, v)
		return true
	})
	return append(b, '}'), nil
}

func appendQuoted(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// UnmarshalJSON reads an object of strings (null: no labels) and refuses
// labels that fail rollout.Labels.Validate.
func (s *LabelSet) UnmarshalJSON(data []byte) error {
	if string(bytes.TrimSpace(data)) == "null" {
		return nil // as encoding/json leaves any other field on null
	}
	var m map[string]string
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("%w: want an object of strings", ErrBadLabels)
	}
	set, err := MakeLabelSet(m)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadLabels, err)
	}
	*s = set
	return nil
}

// Equal reports whether s and o hold the same labels (go-cmp uses it).
func (s LabelSet) Equal(o LabelSet) bool { return s.enc == o.enc }
