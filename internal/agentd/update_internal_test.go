package agentd

import "testing"

// TestKeepsTarget: which decisions, arriving while 2.0.0 downloads, let
// the download go on.
func TestKeepsTarget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		from string
		d    decision
		want bool
	}{
		{name: "same target", from: "1.0.0", d: decision{version: "2.0.0", update: true}, want: true},
		{name: "new target", from: "1.0.0", d: decision{version: "3.0.0", update: true}},
		{name: "back to the start version", from: "1.0.0", d: decision{version: "1.0.0", update: true}},
		{name: "paused", from: "1.0.0", d: decision{version: "2.0.0"}},
		{name: "halted", from: "1.0.0", d: decision{version: "1.0.0"}},
		// A new host installs its group's version whatever the rollout says.
		{name: "new host, paused", d: decision{version: "2.0.0"}, want: true},
		{name: "new host, new target", d: decision{version: "3.0.0"}},
		{name: "no plan known", from: "1.0.0", d: decision{}, want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := keepsTarget(tc.d, tc.from, "2.0.0"); got != tc.want {
				t.Errorf("keepsTarget(%+v, from %q, to 2.0.0) = %v, want %v", tc.d, tc.from, got, tc.want)
			}
		})
	}
}
