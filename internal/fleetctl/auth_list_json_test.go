package fleetctl

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/auth"
)

// TestAuthListJSONIsAnObject: auth ls -o json wraps its list like agents
// ls, so that fields can be added.
func TestAuthListJSONIsAnObject(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatalf("auth init: %s", stderr)
	}
	stdout, stderr, code := execute(t, "auth", "ls", "--dir", dir, "-o", "json")
	if code != 0 {
		t.Fatalf("auth ls: %s", stderr)
	}
	var got AuthListReport
	oneObject(t, stdout, &got)
	var names []string
	for _, r := range got.Users {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	if want := []string{auth.UserAdmin, auth.UserController, auth.UserSystem}; !cmp.Equal(names, want) {
		t.Errorf("users %q, want %q", names, want)
	}
}
