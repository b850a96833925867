package rollout

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestGroupListMember: the first group in config order whose selector
// matches takes the agent; with none, it keeps the group it was given.
func TestGroupListMember(t *testing.T) {
	t.Parallel()
	const in = `{"v":1,"groups":[
		{"name":"canary","selector":{"env":"canary"}},
		{"name":"eu","selector":{"region":"eu","os":"linux"}},
		{"name":"linux","selector":{"os":"linux"}},
		{"name":"prod"}]}`
	var cfg Config
	if err := json.Unmarshal([]byte(in), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	l := GroupListOf(cfg)
	if !l.HasSelectors() {
		t.Fatal("no selectors")
	}
	tests := []struct {
		name     string
		labels   Labels
		given    string
		want     string
		selected bool
	}{
		{"no labels keep their group", nil, "prod", "prod", false},
		{"no match keeps the given group", Labels{"os": "darwin"}, "prod", "prod", false},
		{"a given group the config lacks is kept too", Labels{"os": "darwin"}, "lab", "lab", false},
		{"first match in config order", Labels{"env": "canary", "os": "linux", "region": "eu"}, "prod", "canary", true},
		{"every entry must match", Labels{"region": "eu", "os": "darwin"}, "prod", "prod", false},
		{"two entries match", Labels{"region": "eu", "os": "linux"}, "prod", "eu", true},
		{"a later selector", Labels{"region": "us", "os": "linux"}, "prod", "linux", true},
		{"values compare exactly", Labels{"os": "Linux"}, "prod", "prod", false},
		{"an empty value is a value", Labels{"env": ""}, "prod", "prod", false},
		{"a selected group may be the given one", Labels{"os": "linux"}, "linux", "linux", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, sel := l.Member(tc.labels, tc.given)
			if got != tc.want || sel != tc.selected {
				t.Errorf("Member(%v, %q) = %q, %v; want %q, %v", tc.labels, tc.given, got, sel, tc.want, tc.selected)
			}
		})
	}
}

// TestGroupListDecode: what agents read is validated; the leader's own
// encoding round-trips and lists groups without selectors as names only.
func TestGroupListDecode(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Groups = []GroupConfig{DefaultGroup("canary"), DefaultGroup("prod")}
	cfg.Groups[0].Selector = Selector{"env": "canary"}
	b, err := json.Marshal(GroupListOf(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"v":1,"groups":[{"name":"canary","selector":{"env":"canary"}},{"name":"prod"}]}`; string(b) != want {
		t.Errorf("encoded %s\nwant    %s", b, want)
	}
	l, err := DecodeGroupList(b)
	if err != nil || !l.Equal(GroupListOf(cfg)) {
		t.Errorf("round trip: %+v, %v", l, err)
	}
	if GroupListOf(DefaultConfig()).HasSelectors() {
		t.Error("the default config has selectors")
	}
	for name, in := range map[string]string{
		"not json":        `{`,
		"other schema":    `{"v":2,"groups":[]}`,
		"bad group name":  `{"v":1,"groups":[{"name":"Prod"}]}`,
		"twice":           `{"v":1,"groups":[{"name":"a"},{"name":"a"}]}`,
		"bad selector":    `{"v":1,"groups":[{"name":"a","selector":{"OS":"x"}}]}`,
		"selector spaces": `{"v":1,"groups":[{"name":"a","selector":{"os":"a b"}}]}`,
		"too many groups": `{"v":1,"groups":[` + strings.Repeat(`{"name":"a"},`, MaxGroups) + `{"name":"b"}]}`,
	} {
		if _, err := DecodeGroupList([]byte(in)); err == nil {
			t.Errorf("%s: accepted %.80s", name, in)
		}
	}
}
