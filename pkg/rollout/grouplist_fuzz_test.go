package rollout

import "testing"

// FuzzDecodeGroupList: the groups key is read by every agent; whatever it
// holds, DecodeGroupList returns an error or a list that validates (at
// most MaxGroups valid, distinct names; valid selectors), and Member picks
// one of its groups or the given one.
func FuzzDecodeGroupList(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"groups":[{"name":"canary"},{"name":"edge","selector":{"env":"edge"}},{"name":"prod"}]}`,
		`{"v":1,"groups":[{"name":"a"},{"name":"a"}]}`,
		`{"v":2,"groups":[]}`,
		`{"v":1,"groups":[{"name":"Bad Name"}]}`,
		`{"v":1,"groups":[{"name":"e","selector":{"env":"\u001b[2J"}}]}`,
		`{"v":1,"groups":null}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := DecodeGroupList(data)
		if err != nil {
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("decoded list fails validation: %v", err)
		}
		g, selected := l.Member(Labels{"env": "edge", "os": "linux"}, "given")
		if !selected && g != "given" {
			t.Fatalf("not selected, but member of %q", g)
		}
		if selected {
			found := false
			for _, e := range l.Groups {
				found = found || e.Name == g
			}
			if !found {
				t.Fatalf("selected %q, not one of the list's groups", g)
			}
		}
	})
}
