package agentd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fleetwave/fleetwave/internal/version"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// newerAgentd reports the agentd shipped in version v's bin/ when it is newer
// than this binary. A release that ships no agentd, or one whose --version
// does not answer with a version, is not a self-update.
func newerAgentd(ctx context.Context, tree install.Tree, v, ours string) (string, bool) {
	path := filepath.Join(tree.VersionDir(v), "bin", "agentd")
	if _, err := os.Stat(path); err != nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Env = install.ChildEnv(nil)
	out, err := cmd.Output()
	if err != nil {
		return "", false
	}
	// cobra prints "agentd version X".
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		return "", false
	}
	theirs := fields[len(fields)-1]
	if rollout.ValidateVersion(theirs) != nil || rollout.ValidateVersion(ours) != nil {
		return "", false
	}
	return path, rollout.CompareVersions(theirs, ours) > 0
}

// selfUpdate re-executes into the active version's agentd when it is newer:
// the agent updates itself with the app it ships with. The supervised app
// is stopped first (the new agentd starts it again), so two copies never run.
// It returns only when there is nothing to do or the exec failed.
//
// What makes running a release's agentd (as root) safe, docs/agent.md
// "Self-update": the Installer refuses a release that ships bin/agentd
// unless releases are signed (install.ErrShadowsTool), and a signature
// names the app and the version, so only a release the key's holder made
// for this version gets here, after it was installed and found healthy;
// it is run from versions/<v>/bin/agentd by absolute path, never through
// the bin dir or PATH.
func (a *Agent) selfUpdate(ctx context.Context) {
	v := a.Status().ActiveVersion
	if v == "" {
		return
	}
	path, newer := newerAgentd(ctx, a.tree(), v, version.Version)
	if !newer {
		return
	}
	a.o.Log.Info("re-executing into a newer agentd shipped with the app", slog.String("path", path), slog.String("version", v))
	if pr, ok := a.runner.(*install.ProcessRunner); ok {
		_ = pr.Stop(ctx)
	}
	err := syscall.Exec(path, append([]string{path}, os.Args[1:]...), os.Environ())
	a.o.Log.Error("self-update failed; staying on this agentd", slog.Any("err", fmt.Errorf("exec %s: %w", path, err)))
	if pr, ok := a.runner.(*install.ProcessRunner); ok {
		_ = pr.Restart(ctx)
	}
}
