package agentd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestScriptInstallerFlags: the script installer's flags are checked
// before anything is written (exit 2, the root not created), kept in
// update.yaml when right, and the installer is named in heartbeats and
// 'agentd status'.
func TestScriptInstallerFlags(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	base := []string{"enable", "--root", root, "--group", "g"}
	for name, args := range map[string][]string{
		"a command without the installer": {"--install-cmd", "true"},
		"the installer without commands":  {"--installer", "script"},
		"no version command":              {"--installer", "script", "--install-cmd", "true"},
		"an unknown installer":            {"--installer", "apt", "--install-cmd", "a", "--version-cmd", "b"},
		"a negative timeout":              {"--installer", "script", "--install-cmd", "a", "--version-cmd", "b", "--script-timeout", "-1s"},
		"a supervised app":                {"--installer", "script", "--install-cmd", "a", "--version-cmd", "b", "--process", "app"},
		"a timeout for tarballs":          {"--script-timeout", "1m"},
	} {
		out, code := runAgentd(t, append(base, args...)...)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2\n%s", name, code, out)
		}
		if _, err := os.Stat(root); err == nil {
			t.Fatalf("%s: the root was created", name)
		}
	}

	// Right: kept, as 'agentd run' keeps it, and named.
	a, err := agentd.New(agentd.Options{Root: root, Group: "g", App: agentd.AppOptions{Installer: "script",
		InstallCmd: "apt-get install -y \"app=$FLEETWAVE_VERSION\"", VersionCmd: "echo 1.0.0", ScriptTimeout: 90 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if hb := a.Heartbeat(); hb.Installer != rollout.InstallerScript {
		t.Fatalf("heartbeat installer %q", hb.Installer)
	}
	uf, err := install.LoadUpdateFile(root)
	if err != nil {
		t.Fatal(err)
	}
	if app := uf.Spec.App; !app.IsScript() || app.Script.Version != "echo 1.0.0" || app.Script.Timeout != 90*time.Second {
		t.Fatalf("update.yaml spec.app %+v", app)
	}
	out, code := runAgentd(t, "status", "--root", root)
	if code != 0 || !strings.Contains(out, `"installer": "script"`) {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	// Back to tarballs: the commands go.
	b, err := agentd.New(agentd.Options{Root: root, Group: "g", App: agentd.AppOptions{Installer: "tarball", URLTemplate: "http://127.0.0.1:1/{{.Version}}/app.tar.gz", Process: "app"}})
	if err != nil {
		t.Fatal(err)
	}
	if hb := b.Heartbeat(); hb.Installer != rollout.InstallerTarball {
		t.Fatalf("heartbeat installer %q", hb.Installer)
	}
	if uf, err = install.LoadUpdateFile(root); err != nil || uf.Spec.App.Script != (install.ScriptSpec{}) || uf.Spec.App.IsScript() {
		t.Fatalf("update.yaml spec.app %+v %v", uf.Spec.App, err)
	}
	// Report only: no installer.
	c, err := agentd.New(agentd.Options{Root: filepath.Join(dir, "other"), Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if hb := c.Heartbeat(); hb.Installer != "" {
		t.Fatalf("report-only heartbeat installer %q", hb.Installer)
	}
}

// TestScriptInstallerHasNoLinks: 'agentd link' on a script-installed app
// says why it has nothing to do (exit 2), changing nothing.
func TestScriptInstallerHasNoLinks(t *testing.T) {
	root := t.TempDir()
	if _, err := agentd.New(agentd.Options{Root: root, Group: "g", App: agentd.AppOptions{Installer: "script", InstallCmd: "true", VersionCmd: "echo 1.0.0"}}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(root, install.UpdateFileName))
	if err != nil {
		t.Fatal(err)
	}
	out, code := runAgentd(t, "link", "--root", root, "--version", "1.0.0")
	if code != 2 || !strings.Contains(out, "keeps no links") {
		t.Fatalf("link: exit %d\n%s", code, out)
	}
	if after, _ := os.ReadFile(filepath.Join(root, install.UpdateFileName)); string(after) != string(before) {
		t.Fatalf("update.yaml changed:\n%s\n---\n%s", before, after)
	}
}
