package rollout

import "testing"

func TestClosestGroupName(t *testing.T) {
	names := []string{"canary", "staging", "prod", "prod-eu"}
	for _, tc := range []struct {
		g, want string
		ok      bool
	}{
		{"prdo", "prod", true},      // swap
		{"prd", "prod", true},       // deletion
		{"stagin", "staging", true}, // deletion
		{"canari", "canary", true},  // substitution
		{"prod-us", "prod-eu", true},
		{"qa", "", false},          // nothing close
		{"database", "", false},    // too far from all
		{"prod", "prod-eu", false}, // the name itself is not a suggestion; prod-eu is 3 away, over the limit of 1
	} {
		got, ok := ClosestGroupName(tc.g, names)
		if got != tc.want && tc.ok || ok != tc.ok {
			t.Errorf("ClosestGroupName(%q) = %q, %v; want %q, %v", tc.g, got, ok, tc.want, tc.ok)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"prod", "prod", 0},
		{"prod", "prdo", 1}, {"kitten", "sitting", 3}, {"ca", "abc", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := editDistance(tc.b, tc.a); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.b, tc.a, got, tc.want)
		}
	}
}
