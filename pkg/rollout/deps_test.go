package rollout

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps DESIGN §7's dependency direction: pkg/rollout imports
// nothing of ours, nothing of NATS, and its production code not testing.
func TestDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	const self = "github.com/fleetwave/fleetwave/pkg/rollout"
	out, err := exec.Command(goBin, "list", "-deps", self).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", self, err, out)
	}
	allowed := func(p string) bool {
		switch {
		case p == self:
			return true
		case strings.HasPrefix(p, "golang.org/x/mod/"):
			return true
		case !strings.Contains(strings.SplitN(p, "/", 2)[0], "."):
			return p != "testing" && !strings.HasPrefix(p, "testing/") // standard library
		}
		return false
	}
	for _, p := range strings.Fields(string(out)) {
		if !allowed(p) {
			t.Errorf("%s depends on %s; it may use only the standard library and golang.org/x/mod", self, p)
		}
	}
}
