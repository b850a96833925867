package rollout

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDependenciesAndOrder(t *testing.T) {
	g := func(name string, deps []string) GroupConfig {
		c := DefaultGroup(name)
		c.DependsOn = deps
		return c
	}
	tests := []struct {
		name    string
		groups  []GroupConfig
		deps    map[string][]string
		order   []string
		wantErr string
	}{
		{
			name:   "list order is a chain",
			groups: []GroupConfig{g("staging", nil), g("prod", nil), g("edge", nil)},
			deps:   map[string][]string{"staging": nil, "prod": {"staging"}, "edge": {"prod"}},
			order:  []string{"staging", "prod", "edge"},
		},
		{
			name:   "explicit dependencies reorder",
			groups: []GroupConfig{g("prod", []string{"canary-dc", "staging"}), g("staging", []string{}), g("canary-dc", []string{"staging"})},
			deps:   map[string][]string{"prod": {"canary-dc", "staging"}, "staging": {}, "canary-dc": {"staging"}},
			order:  []string{"staging", "canary-dc", "prod"},
		},
		{
			name:   "empty list means independent",
			groups: []GroupConfig{g("a", nil), g("b", []string{})},
			deps:   map[string][]string{"a": nil, "b": {}},
			order:  []string{"a", "b"},
		},
		{
			name:    "unknown",
			groups:  []GroupConfig{g("a", []string{"zz"})},
			wantErr: `group "a": depends_on "zz": no such group`,
		},
		{
			name:    "two-cycle",
			groups:  []GroupConfig{g("a", []string{"b"}), g("b", []string{"a"})},
			wantErr: "dependency cycle a → b → a",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{V: 1, Groups: tt.groups}
			order, err := c.Order()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Order() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.order, order); diff != "" {
				t.Errorf("Order() (-want +got):\n%s", diff)
			}
			for name, want := range tt.deps {
				if diff := cmp.Diff(want, c.Dependencies(name)); diff != "" {
					t.Errorf("Dependencies(%q) (-want +got):\n%s", name, diff)
				}
			}
		})
	}
}

func TestChainDelay(t *testing.T) {
	g := func(name string, wait int, days []string, deps []string) GroupConfig {
		c := DefaultGroup(name)
		c.WaitHours, c.Days, c.DependsOn = wait, days, deps
		return c
	}
	all := []string{"*"}
	tests := []struct {
		name   string
		groups []GroupConfig
		delay  time.Duration
		chain  []string
		valid  bool
	}{
		{name: "single group", groups: []GroupConfig{g("a", 0, all, nil)}, valid: true},
		{
			name:   "daily chain of eight is a week",
			groups: []GroupConfig{g("g1", 0, all, nil), g("g2", 0, all, nil), g("g3", 0, all, nil), g("g4", 0, all, nil), g("g5", 0, all, nil), g("g6", 0, all, nil), g("g7", 0, all, nil), g("g8", 0, all, nil)},
			delay:  168 * time.Hour, chain: []string{"g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"}, valid: true,
		},
		{
			name:   "daily chain of nine is too long",
			groups: []GroupConfig{g("g1", 0, all, nil), g("g2", 0, all, nil), g("g3", 0, all, nil), g("g4", 0, all, nil), g("g5", 0, all, nil), g("g6", 0, all, nil), g("g7", 0, all, nil), g("g8", 0, all, nil), g("g9", 0, all, nil)},
			delay:  192 * time.Hour, chain: []string{"g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8", "g9"},
		},
		{
			name:   "weekly second group fills the week",
			groups: []GroupConfig{g("staging", 0, all, nil), g("prod", 0, []string{"Tue"}, nil)},
			delay:  168 * time.Hour, chain: []string{"staging", "prod"}, valid: true,
		},
		{
			name:   "weekly group plus wait is too long",
			groups: []GroupConfig{g("staging", 0, all, nil), g("prod", 1, []string{"Tue"}, nil)},
			delay:  169 * time.Hour, chain: []string{"staging", "prod"},
		},
		{
			name: "longest branch wins",
			groups: []GroupConfig{
				g("root", 0, all, nil),
				g("short", 0, all, []string{"root"}),
				g("long", 48, all, []string{"root"}),
				g("last", 0, []string{"Mon", "Thu"}, []string{"short", "long"}),
			},
			delay: 72*time.Hour + 96*time.Hour, chain: []string{"root", "long", "last"}, valid: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: tt.groups}
			delay, chain, err := c.ChainDelay()
			if err != nil {
				t.Fatal(err)
			}
			if delay != tt.delay {
				t.Errorf("ChainDelay() delay = %v, want %v", delay, tt.delay)
			}
			if diff := cmp.Diff(tt.chain, chain); diff != "" {
				t.Errorf("ChainDelay() chain (-want +got):\n%s", diff)
			}
			err = c.Validate()
			if tt.valid && err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
			if !tt.valid && (err == nil || !strings.Contains(err.Error(), "one week")) {
				t.Errorf("Validate() = %v, want the one-week chain limit", err)
			}
		})
	}
}
