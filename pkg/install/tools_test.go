package install_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// shadowPATH puts a directory first in PATH for the test (a bin dir, as
// systemd's default service PATH and root shells have /usr/local/bin) with
// each name as a program that records that it ran, and returns the
// directory.
func shadowPATH(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		script := "#!/bin/sh\necho \"$@\" >> " + filepath.Join(dir, name+".ran") + "\nexit 0\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return dir
}

func ranIn(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name+".ran"))
	return err == nil
}

// TestToolsNeverFromPATH: systemctl and a health command's program are
// found in SystemPath, never in PATH, and everything agentd starts gets
// PATH=SystemPath, whatever PATH agentd has.
func TestToolsNeverFromPATH(t *testing.T) {
	shadow := shadowPATH(t, "systemctl", "fleetwave-health-probe", "true")

	// systemctl: the PATH's one is not run, the configured one is, with
	// the fixed PATH.
	sysd := t.TempDir()
	systemctl := filepath.Join(sysd, "systemctl")
	if err := os.WriteFile(systemctl, []byte("#!/bin/sh\necho \"$PATH $*\" >> "+filepath.Join(sysd, "calls")+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &install.SystemdRunner{Unit: "app.service", Systemctl: systemctl}
	if err := r.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := string(readFile(t, filepath.Join(sysd, "calls"))); got != install.SystemPath+" restart app.service\n" {
		t.Errorf("systemctl ran as %q, want PATH %s and restart app.service", got, install.SystemPath)
	}
	if err := (&install.SystemdRunner{Unit: "app.service", Systemctl: "systemctl"}).Restart(context.Background()); err == nil ||
		!strings.Contains(err.Error(), "absolute") {
		t.Errorf("a relative Systemctl: %v, want refused", err)
	}
	// Unset, it is looked up in SystemPath: here, the real one or none.
	_ = (&install.SystemdRunner{Unit: "fleetwave-test-no-such.service"}).Alive(context.Background())
	if ranIn(shadow, "systemctl") {
		t.Error("the systemctl first in PATH was run")
	}
	if p, err := install.LookTool("sh"); err != nil || !strings.HasPrefix(p, "/") || strings.HasPrefix(p, shadow) {
		t.Errorf("LookTool(sh) = %q, %v; want the system's", p, err)
	}
	if p, err := install.LookTool("fleetwave-health-probe"); err == nil {
		t.Errorf("LookTool found %s, which only PATH has", p)
	}

	// Health commands: by name only from SystemPath; their shell's PATH
	// is SystemPath.
	app := healthApp(t, "exec sleep 100")
	clk := install.Clock{}
	if err := install.WaitHealthy(context.Background(), install.Health{Command: []string{"fleetwave-health-probe"}, Interval: 10 * time.Millisecond},
		app, 50*time.Millisecond, 0, clk); err == nil || !strings.Contains(err.Error(), "not found in "+install.SystemPath) {
		t.Errorf("health command only PATH has: %v, want not found", err)
	}
	out := filepath.Join(t.TempDir(), "path")
	h := install.Health{Command: []string{"sh", "-c", `echo "$PATH" > ` + out + `; true`}, Interval: 10 * time.Millisecond}
	if err := install.WaitHealthy(context.Background(), h, app, time.Second, 0, clk); err != nil {
		t.Fatalf("health command: %v", err)
	}
	if got := strings.TrimSpace(string(readFile(t, out))); got != install.SystemPath {
		t.Errorf("health command's PATH %q, want %s", got, install.SystemPath)
	}
	if ranIn(shadow, "true") || ranIn(shadow, "fleetwave-health-probe") {
		t.Error("a program first in PATH was run by a health command")
	}

	// The app agentd supervises gets the fixed PATH too.
	env := filepath.Join(t.TempDir(), "env")
	healthApp(t, `echo "$PATH" > `+env+`; exec sleep 100`)
	eventually(t, 10*time.Second, func() error {
		if b, err := os.ReadFile(env); err != nil || len(b) == 0 {
			return fmt.Errorf("the app has not written its PATH (%v)", err)
		}
		return nil
	})
	if got := strings.TrimSpace(string(readFile(t, env))); got != install.SystemPath {
		t.Errorf("app's PATH %q, want %s", got, install.SystemPath)
	}
}

func TestChildEnv(t *testing.T) {
	got := install.ChildEnv([]string{"A=1", "PATH=/usr/local/bin:/usr/bin", "PATHX=2"})
	want := []string{"A=1", "PATHX=2", "PATH=" + install.SystemPath}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ChildEnv = %q, want %q", got, want)
	}
	for _, d := range filepath.SplitList(install.SystemPath) {
		if d == "/usr/local/bin" || !filepath.IsAbs(d) {
			t.Errorf("SystemPath holds %q", d)
		}
	}
}

// TestSystemdRunnerOutput: for a unit, the app's last lines are its
// journal's since the runner restarted it, read with the system's
// journalctl (never PATH's), bounded.
func TestSystemdRunnerOutput(t *testing.T) {
	shadow := shadowPATH(t, "journalctl")
	dir := t.TempDir()
	systemctl := filepath.Join(dir, "systemctl")
	journalctl := filepath.Join(dir, "journalctl")
	if err := os.WriteFile(systemctl, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho \"$*\" > " + filepath.Join(dir, "args") + "\nprintf 'listening\\npanic: bad config\\n'\n"
	if err := os.WriteFile(journalctl, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &install.SystemdRunner{Unit: "app.service", Systemctl: systemctl, Journalctl: journalctl}
	before := time.Now().Unix()
	if err := r.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.Output(context.Background()); got != "listening\npanic: bad config\n" {
		t.Errorf("Output = %q", got)
	}
	args := strings.Fields(string(readFile(t, filepath.Join(dir, "args"))))
	wantPrefix := []string{"--unit", "app.service", "--lines", "10", "--output", "cat", "--no-pager", "--quiet", "--since"}
	if len(args) != len(wantPrefix)+1 || strings.Join(args[:len(wantPrefix)], " ") != strings.Join(wantPrefix, " ") {
		t.Fatalf("journalctl ran with %q, want %q and a time", args, wantPrefix)
	}
	var since int64
	if _, err := fmt.Sscanf(args[len(args)-1], "@%d", &since); err != nil || since < before || since > time.Now().Unix() {
		t.Errorf("--since %s: want the restart's time (@%d or later)", args[len(args)-1], before)
	}
	// Unset, journalctl is the system's or none: never PATH's.
	_ = (&install.SystemdRunner{Unit: "fleetwave-test-no-such.service"}).Output(context.Background())
	if ranIn(shadow, "journalctl") {
		t.Error("the journalctl first in PATH was run")
	}
}
