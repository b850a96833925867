package install

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The programs agentd runs, and how: by absolute path, with a PATH that
// never holds a bin dir. A bin dir (/usr/local/bin by default) holds links
// to whatever a release ships, and systemd's default service PATH, like
// most root shells', puts /usr/local/bin before /usr/bin: run by name,
// "systemctl" would be a release's bin/systemctl, which could restart and
// health-check its own app into looking healthy.

// SystemPath is the PATH of every program agentd starts: systemctl, the
// health command's shell and what it runs, the app it supervises, a
// release's agentd asked for its version. It names the system's own
// directories and never a bin dir. The systemd units in deploy/systemd set
// the same PATH for agentd itself.
const SystemPath = "/usr/sbin:/usr/bin:/sbin:/bin"

// ShellPath is the shell that runs health commands (agentd
// --health-command), by absolute path.
const ShellPath = "/bin/sh"

// The names of the programs agentd runs.
const (
	// ToolShell runs health commands (ShellPath).
	ToolShell = "sh"
	// ToolSystemctl restarts and checks the app's unit (SystemdRunner).
	ToolSystemctl = "systemctl"
	// ToolJournalctl reads a unit's last lines when it fails
	// (SystemdRunner.Output).
	ToolJournalctl = "journalctl"
	// ToolAgentd is agentd itself: a release may ship one only when
	// releases are signed (Installer: self-update runs it, as root).
	ToolAgentd = "agentd"
)

// Tools are the names a release may not ship in bin/ (ErrShadowsTool): the
// programs agentd runs. agentd finds them by absolute path, so a link of
// that name in the bin dir would not fool agentd; but it would fool every
// root shell that has the bin dir first in its PATH (and an operator typing
// "systemctl status" there), so such a release is refused before anything
// changes. This is the one list: add a program here when agentd starts
// running it.
var Tools = []string{ToolShell, ToolSystemctl, ToolJournalctl, ToolAgentd}

// LookTool finds the program name in SystemPath's directories, never in
// the caller's PATH, and returns its absolute path.
func LookTool(name string) (string, error) {
	if !ValidBinaryName(name) {
		return "", fmt.Errorf("%q is not a program name", name)
	}
	for _, dir := range filepath.SplitList(SystemPath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in %s", name, SystemPath)
}

// ChildEnv is env (nil: this process's environment) with PATH set to
// SystemPath, for a program agentd starts.
func ChildEnv(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PATH=") {
			out = append(out, kv)
		}
	}
	return append(out, "PATH="+SystemPath)
}

// checkTools refuses release binaries named like a program agentd runs
// (Tools). agentd itself is allowed when allowAgentd (releases are signed:
// see Installer.preflight).
func checkTools(v string, names []string, allowAgentd bool) error {
	var bad []string
	for _, name := range names {
		if slices.Contains(Tools, name) && !(name == ToolAgentd && allowAgentd) {
			bad = append(bad, "bin/"+name)
		}
	}
	switch {
	case len(bad) == 0:
		return nil
	case len(bad) == 1 && bad[0] == "bin/"+ToolAgentd:
		return fmt.Errorf("%w: %s ships bin/agentd, which self-update would run as root: only signed releases may (agentd --public-key)", ErrShadowsTool, v)
	}
	return fmt.Errorf("%w: %s ships %s: linked into the bin dir, it would stand in for the system's in every PATH that lists the bin dir first "+
		"(agentd itself runs %s by absolute path, with PATH=%s); rename it in the release",
		ErrShadowsTool, v, strings.Join(bad, ", "), strings.Join(Tools, ", "), SystemPath)
}
