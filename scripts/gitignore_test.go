package scripts_test

import (
	"os/exec"
	"testing"
)

// TestBuildOutputsAreIgnored: what the README's commands build (go build
// -o bin/, scripts/dist.sh into dist/) leaves no untracked file behind in
// a checkout, and the sources stay tracked.
func TestBuildOutputsAreIgnored(t *testing.T) {
	for _, p := range []string{"bin/agentd", "bin/controller", "bin/fleetctl", "bin/releases", "dist/fleetwave-0.1.0-linux-amd64.tar.gz"} {
		cmd := exec.Command("git", "check-ignore", "--quiet", "--no-index", p)
		cmd.Dir = ".."
		if err := cmd.Run(); err != nil {
			t.Errorf("git check-ignore %s: %v: the README's build leaves it untracked (.gitignore)", p, err)
		}
	}
	for _, p := range []string{"cmd/agentd/main.go", "scripts/dist.sh", "deploy/systemd/install.sh"} {
		cmd := exec.Command("git", "check-ignore", "--quiet", "--no-index", p)
		cmd.Dir = ".."
		if err := cmd.Run(); err == nil {
			t.Errorf("%s is ignored: .gitignore is too wide", p)
		}
	}
}
