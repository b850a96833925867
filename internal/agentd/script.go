package agentd

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The script installer's side of agentd: its flags, kept in update.yaml's
// spec.app.installer and spec.app.script, the installer built on them, and
// the version re-read that keeps active_version true to the host.

// registerScriptFlags adds --installer, --install-cmd, --version-cmd and
// --script-timeout.
func registerScriptFlags(fl *pflag.FlagSet, o *AppOptions) {
	fl.StringVar(&o.Installer, "installer", "", "how the app is installed: tarball (releases from --url-template; the default) or script (--install-cmd and --version-cmd, e.g. apt; saved)")
	fl.StringVar(&o.InstallCmd, "install-cmd", "", "with --installer script: shell command (/bin/sh -c) that installs $FLEETWAVE_VERSION, or goes back to it when $FLEETWAVE_ACTION is rollback; must be idempotent (saved)")
	fl.StringVar(&o.VersionCmd, "version-cmd", "", "with --installer script: shell command that prints the installed version, nothing when none is (saved)")
	fl.DurationVar(&o.ScriptTimeout, "script-timeout", 0, "with --installer script: kill the install command's process group after this long (saved; default "+install.DefaultScriptTimeout.String()+")")
}

// resolveScript lays the script flags given over s (what update.yaml
// keeps), and leaves o as the agent runs.
func (o *AppOptions) resolveScript(s *install.AppSpec, given func(flag string) bool) error {
	if given("installer") {
		switch o.Installer {
		case rollout.InstallerScript:
			if s.Process != "" && !given("process") {
				return cliutil.Usagef("--installer script: the saved --process %q runs a tarball release's binary; pass --process= to clear it (a systemd unit may stay, for the health check)", s.Process)
			}
		case rollout.InstallerTarball, "":
			s.Script = install.ScriptSpec{} // a tarball has no commands
		default:
			return cliutil.Usagef("--installer %q: want %s or %s", o.Installer, rollout.InstallerTarball, rollout.InstallerScript)
		}
		s.Installer = o.Installer
	}
	script := s.Installer == rollout.InstallerScript
	for flag, p := range map[string]*string{"install-cmd": &o.InstallCmd, "version-cmd": &o.VersionCmd} {
		if !given(flag) {
			continue
		}
		if !script {
			return cliutil.Usagef("--%s goes with --installer script", flag)
		}
		if flag == "install-cmd" {
			s.Script.Install = *p
		} else {
			s.Script.Version = *p
		}
	}
	if given("script-timeout") {
		if !script {
			return cliutil.Usagef("--script-timeout goes with --installer script")
		}
		if o.ScriptTimeout <= 0 {
			return cliutil.Usagef("--script-timeout %v: want a positive duration", o.ScriptTimeout)
		}
		s.Script.Timeout = o.ScriptTimeout
	}
	if script && s.Process != "" {
		return cliutil.Usagef("--installer script and --process %q exclude each other: --process runs a tarball release's binary, and a script-installed app is run by its package (a systemd unit: --systemd-unit, for the health check); --process= clears the saved one", s.Process)
	}
	if script && (s.Script.Install == "" || s.Script.Version == "") {
		return cliutil.Usagef("--installer script needs --install-cmd (installs $FLEETWAVE_VERSION) and --version-cmd (prints the installed version); see docs/agent.md \"The script installer\"")
	}
	o.Installer, o.InstallCmd, o.VersionCmd, o.ScriptTimeout = s.Installer, s.Script.Install, s.Script.Version, s.Script.Timeout
	return nil
}

// scripted reports whether the app is installed by the script installer.
func (o *AppOptions) scripted() bool { return o.Installer == rollout.InstallerScript }

// installerName is what heartbeats and 'agentd status' say installs the
// app: "script", "tarball" (a url_template is set), or "" (report only).
func (a *Agent) installerName() string {
	switch {
	case a.o.App.scripted():
		return rollout.InstallerScript
	case a.update.Spec.URLTemplate != "", a.update.Spec.ReleaseRepo != "":
		return rollout.InstallerTarball
	}
	return ""
}

// appName is the app's name for the install command (FLEETWAVE_APP): the
// app's own (agentd --app) for an app under <root>/apps, else the name
// releases are signed for (--app-name), else DefaultAppName.
func (a *Agent) appName() string {
	if a.o.Name != "" {
		return a.o.Name
	}
	if a.o.App.AppName != "" {
		return a.o.App.AppName
	}
	return rollout.DefaultAppName
}

// setupScriptInstaller builds the script installer. A systemd unit, if
// given, is only asked whether the app is alive and what it printed: the
// install command (its package) restarts it.
func (a *Agent) setupScriptInstaller() error {
	app := a.o.App
	tree := a.tree()
	if app.SystemdUnit != "" {
		a.runner = &install.SystemdRunner{Unit: app.SystemdUnit, Systemctl: app.Systemctl}
	}
	clk := a.o.Clock
	a.installer = &install.Installer{
		Tree: tree,
		Script: &install.Script{App: a.appName(), Install: app.InstallCmd, Version: app.VersionCmd, Timeout: app.ScriptTimeout,
			// Into agentd's log as it runs; its last lines are kept
			// for a failure's report either way.
			Output:  os.Stderr,
			PIDFile: tree.ScriptPIDPath(), Log: a.o.Log},
		Runner: a.runner,
		Health: install.Health{URL: app.HealthURL, Command: app.HealthCommand},
		Clock: install.Clock{Now: clk.Now, After: func(d time.Duration) <-chan time.Time {
			return clk.NewTimer(d).C()
		}},
		Log:      a.o.Log,
		Save:     a.SetStatus,
		LockHeld: a.o.RootLocked,
	}
	return nil
}

// versionLoop re-reads the installed version every heartbeat interval
// (the script installer's version command): a host upgraded or downgraded
// by hand heartbeats the version it runs within one interval.
func (a *Agent) versionLoop(ctx context.Context) error {
	t := a.o.Clock.NewTimer(a.o.Interval)
	defer t.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		}
		_, _, err := a.installer.Refresh(ctx, a.Status)
		switch {
		case err != nil && err.Error() != last:
			a.o.Log.Error("reading the installed version failed", slog.Any("err", err))
			last = err.Error()
		case err == nil:
			last = ""
		}
		t.Reset(a.o.Interval)
	}
}
