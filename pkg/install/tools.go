package install

import (
	"fmt"
	"os"
	"path/filepath"
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
)

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
