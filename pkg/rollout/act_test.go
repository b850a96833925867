package rollout

import "testing"

func TestAct(t *testing.T) {
	cases := []struct {
		name               string
		installed, version string
		update, want       bool
	}{
		{"new host installs the group's version although not told to update", "", "1.0.0", false, true},
		{"new host told to update", "", "1.1.0", true, true},
		{"no version to install", "", "", true, false},
		{"told to update to another version", "1.0.0", "1.1.0", true, true},
		{"not told to update", "1.0.0", "1.1.0", false, false},
		{"already runs it", "1.1.0", "1.1.0", true, false},
		{"rolledback: told to go back", "1.1.0", "1.0.0", true, true},
	}
	for _, c := range cases {
		if got := Act(c.installed, c.version, c.update); got != c.want {
			t.Errorf("%s: Act(%q, %q, %v) = %v, want %v", c.name, c.installed, c.version, c.update, got, c.want)
		}
	}
}
