package rollout

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEvalOrder(t *testing.T) {
	g := func(name string, deps []string) GroupConfig {
		c := DefaultGroup(name)
		c.DependsOn = deps
		return c
	}
	tests := []struct {
		name   string
		groups []GroupConfig
		want   []string
	}{
		{
			name:   "list order is a chain",
			groups: []GroupConfig{g("staging", nil), g("prod", nil), g("edge", nil)},
			want:   []string{"staging", "prod", "edge"},
		},
		{
			name:   "dependency order, not list order",
			groups: []GroupConfig{g("prod", []string{"canary-dc", "staging"}), g("staging", []string{}), g("canary-dc", []string{"staging"})},
			want:   []string{"staging", "canary-dc", "prod"},
		},
		{
			name:   "unknown dependency: listed order",
			groups: []GroupConfig{g("b", []string{"zz"}), g("a", []string{})},
			want:   []string{"b", "a"},
		},
		{
			name:   "cycle: listed order",
			groups: []GroupConfig{g("c", []string{}), g("a", []string{"b"}), g("b", []string{"a"})},
			want:   []string{"c", "a", "b"},
		},
		{
			name: "no groups",
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{V: 1, Groups: tt.groups}
			if diff := cmp.Diff(tt.want, c.EvalOrder()); diff != "" {
				t.Errorf("EvalOrder() (-want +got):\n%s", diff)
			}
		})
	}
}
