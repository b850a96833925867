package deps

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/fleetwave/fleetwave/"

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func TestDependencyDirection(t *testing.T) {
	cases := []struct {
		pkg string
		// ours lists the only packages of this module the package may reach.
		ours []string
		// banned are import path prefixes the package must not reach.
		banned []string
	}{
		{"pkg/rollout", nil, []string{"github.com/nats-io/", "testing"}},
		{"pkg/install", []string{"pkg/rollout"}, []string{"github.com/nats-io/", "testing"}},
		{"pkg/httpfind", []string{"pkg/rollout"}, []string{"github.com/nats-io/", "testing"}},
		// The release repository is read by agentd and the controller and
		// maintained by fleetctl: TUF and nothing of the bus.
		{"pkg/release", []string{"pkg/rollout"}, []string{"github.com/nats-io/", "testing"}},
		// The agent and the CLI must not carry a whole nats-server.
		{"cmd/agentd", nil, []string{"github.com/nats-io/nats-server/", "testing", module + "internal/natstest"}},
		{"cmd/fleetctl", nil, []string{"github.com/nats-io/nats-server/", "testing", module + "internal/natstest"}},
		{"cmd/controller", nil, []string{"testing", module + "internal/natstest"}},
	}
	for _, c := range cases {
		t.Run(c.pkg, func(t *testing.T) {
			for _, d := range deps(t, c.pkg) {
				if d == module+c.pkg {
					continue
				}
				for _, b := range c.banned {
					if d == b || strings.HasPrefix(d, b) && strings.HasSuffix(b, "/") {
						t.Errorf("%s reaches %s (banned: %s)", c.pkg, d, b)
					}
				}
				if c.ours == nil && !strings.HasPrefix(c.pkg, "cmd/") && strings.HasPrefix(d, module) {
					t.Errorf("%s imports %s; it must import nothing of ours", c.pkg, d)
				}
				if c.ours != nil && strings.HasPrefix(d, module) && !slices.Contains(c.ours, strings.TrimPrefix(d, module)) {
					t.Errorf("%s imports %s; allowed: %v", c.pkg, d, c.ours)
				}
			}
		})
	}
}

// TestNothingImportsCmd: commands are leaves; logic lives in packages.
func TestNothingImportsCmd(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}}`, "./../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module+"cmd/") {
				t.Errorf("%s imports %s", f[0], imp)
			}
		}
	}
}
