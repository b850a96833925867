package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The script installer (RFD 90's local-script): the host's own command
// installs the app, usually through its package manager (apt-get install
// app=$FLEETWAVE_VERSION), and another command says which version is
// installed. agentd keeps what it keeps for tarballs around it: the
// install journal, the health check, the automatic rollback (the same
// command with FLEETWAVE_ACTION=rollback and the previous version), the
// failure classes and the operator's view of the last output lines.
//
// Both commands are strings run by /bin/sh -c (as --health-command), with
// PATH=SystemPath and the variables below; the version goes in the
// environment, never into the command's text.

// The variables an install command gets.
const (
	// EnvApp is the app's name (the fleet's app, "default" when the fleet
	// names none).
	EnvApp = "FLEETWAVE_APP"
	// EnvVersion is the version to install (ActionInstall) or to go back
	// to (ActionRollback).
	EnvVersion = "FLEETWAVE_VERSION"
	// EnvPreviousVersion is the version installed before ("" on a first
	// install; on a rollback, the version being rolled back from).
	EnvPreviousVersion = "FLEETWAVE_PREVIOUS_VERSION"
	// EnvAction is ActionInstall or ActionRollback.
	EnvAction = "FLEETWAVE_ACTION"
)

// The actions an install command is run for.
const (
	ActionInstall  = "install"
	ActionRollback = "rollback"
)

// DefaultScriptTimeout bounds one run of the install command when
// Script.Timeout is 0.
const DefaultScriptTimeout = 10 * time.Minute

// versionTimeout bounds one run of the version command.
const versionTimeout = time.Minute

// ScriptTempFail is the exit status (sysexits' EX_TEMPFAIL) by which an
// install command says that it failed for a reason outside the version (the
// package mirror is down, the package manager's lock is held): an
// infrastructure failure, retried with backoff, never counted against the
// version.
const ScriptTempFail = 75

// Script errors.
var (
	// ErrScriptFailed: the install command exited with a status other
	// than 0 and ScriptTempFail: the version's fault (ClassRelease).
	ErrScriptFailed = errors.New("install command failed")
	// ErrScriptTempFail: the install command exited with ScriptTempFail
	// (ClassInfrastructure).
	ErrScriptTempFail = errors.New("install command failed temporarily")
	// ErrScriptTimeout: the install command ran past its timeout and its
	// process group was killed (ClassInfrastructure: a hung package
	// manager is most often a lock or a mirror, not the version; the
	// install is undone and retried with backoff, and a group whose hosts
	// stay blocked holds).
	ErrScriptTimeout = errors.New("install command timed out")
	// ErrVersionCommand: the version command failed or printed something
	// that is not a version.
	ErrVersionCommand = errors.New("version command")
	// ErrScriptVersion: the install command succeeded but the version
	// command then names another version than the one asked for (the
	// version's fault: the repository does not have it as published).
	ErrScriptVersion = errors.New("installed version is not the one asked for")
)

// Script is the script installer's configuration. An Installer with a
// Script installs with it instead of downloading tarballs.
type Script struct {
	// App is FLEETWAVE_APP.
	App string
	// Install and Version are the install and version commands (run by
	// /bin/sh -c).
	Install, Version string
	// Timeout bounds one run of Install (0: DefaultScriptTimeout); at the
	// timeout its whole process group is killed (SIGKILL).
	Timeout time.Duration
	// Output receives what the commands print as they run (agentd's log);
	// nil discards it. The last lines are kept either way.
	Output io.Writer
	// PIDFile records the running install command's process group, so
	// that the next agentd stops one a killed agentd left running before
	// it repairs (StopOrphan).
	PIDFile string
	// Log receives what StopOrphan did.
	Log *slog.Logger

	// mu is held while an install runs, so that a version re-read
	// (Installer.Refresh) never runs in the middle of one.
	mu sync.Mutex
}

func (s *Script) timeout() time.Duration {
	if s.Timeout <= 0 {
		return DefaultScriptTimeout
	}
	return s.Timeout
}

// scriptError is a failed run of the install command, with its output.
func scriptError(err error, out string) error {
	return &outputError{err: err, output: out}
}

// Run runs the install command for action, to version, from previous, and
// returns its output (the end of it: tail's bound). A non-zero exit is
// ErrScriptFailed (or ErrScriptTempFail), the timeout ErrScriptTimeout,
// agentd stopping a *StoppedError; each carries the output's last lines
// (failureOutput) and names its last line.
func (s *Script) Run(ctx context.Context, action, version, previous string) error {
	env := append(ChildEnv(nil),
		EnvApp+"="+s.App, EnvVersion+"="+version, EnvPreviousVersion+"="+previous, EnvAction+"="+action)
	tctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	var out tail
	err := s.run(tctx, s.Install, env, &out, true)
	text := out.String()
	what := fmt.Sprintf("install command (%s %s)", action, version)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case ctx.Err() == nil && tctx.Err() != nil:
		return scriptError(fmt.Errorf("%w: %s ran longer than %s and was killed%s", ErrScriptTimeout, what, s.timeout(), lastLine(text)), text)
	case errors.As(err, &ee) && ee.ExitCode() == ScriptTempFail:
		err = fmt.Errorf("%w: %s exited with status %d%s", ErrScriptTempFail, what, ScriptTempFail, lastLine(text))
	case errors.As(err, &ee):
		err = fmt.Errorf("%w: %s: %v%s", ErrScriptFailed, what, err, lastLine(text))
	default:
		err = fmt.Errorf("%s: %w", what, err)
	}
	return scriptError(interruption(ctx, err), text)
}

// lastLine is ": " and the last non-empty line of out, cut to 200 bytes,
// or "".
func lastLine(out string) string {
	out = strings.TrimSpace(out)
	if out == "" {
		return ""
	}
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	return ": " + truncate(strings.TrimSpace(out), 200)
}

// ReadVersion runs the version command: its output, trimmed, is the
// installed version; empty output (exit 0) means nothing is installed.
func (s *Script) ReadVersion(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	var out limitBuffer
	out.n = 4096
	env := append(ChildEnv(nil), EnvApp+"="+s.App)
	err := s.run(ctx, s.Version, env, &out, false)
	text := strings.TrimSpace(out.String())
	if err != nil {
		return "", fmt.Errorf("%w %q: %v%s (it must print the installed version, or nothing when none is)", ErrVersionCommand, s.Version, interruption(ctx, err), lastLine(text))
	}
	if text == "" {
		return "", nil
	}
	if err := rollout.ValidateVersion(text); err != nil {
		return "", fmt.Errorf("%w %q printed %.80q: %v (it must print only the installed version, e.g. dpkg-query -W -f='${Version}' PACKAGE)", ErrVersionCommand, s.Version, text, err)
	}
	return text, nil
}

// run runs command under /bin/sh -c in a process group of its own, output
// (stdout and stderr, in order) into w and s.Output; at ctx's end the whole
// group is killed. record: the group is recorded in PIDFile while it runs.
func (s *Script) run(ctx context.Context, command string, env []string, w io.Writer, record bool) error {
	cmd := exec.Command(ShellPath, "-c", command)
	cmd.Env = env
	cmd.Dir = "/"
	dst := w
	if s.Output != nil && record { // not the version command's, every heartbeat period
		dst = io.MultiWriter(w, ignoreErrors{s.Output})
	}
	cmd.Stdout, cmd.Stderr = dst, dst
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A child that left the group and kept the output pipe open must not
	// hold the install.
	cmd.WaitDelay = 5 * time.Second
	instance := newInstance()
	cmd.Env = append(cmd.Env, instanceEnv+"="+instance)
	now := time.Now()
	if record && s.PIDFile != "" {
		starting := appRecord{Instance: instance, BootID: bootID(), Path: ShellPath, StartedAt: now.UTC()}
		if err := writeRecord(s.PIDFile, starting); err != nil {
			return fmt.Errorf("record the install command: %w", err)
		}
		defer func() { _ = removeRecord(s.PIDFile, instance) }()
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	if record && s.PIDFile != "" {
		rec := recordFor(cmd.Process.Pid, ShellPath, now)
		rec.Instance = instance
		if err := writeRecord(s.PIDFile, rec); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			return fmt.Errorf("record the install command: %w", err)
		}
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	if ctx.Err() != nil && err != nil {
		// What remains of the group (a child that outlived the shell).
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	return err
}

// StopOrphan ends the install command a killed agentd left running (its
// process group, recorded in PIDFile), as ProcessRunner.StopOrphan ends an
// app: the next repair must not run the command beside it.
func (s *Script) StopOrphan(ctx context.Context) error {
	if s.PIDFile == "" {
		return nil
	}
	p := &ProcessRunner{PIDFile: s.PIDFile, Log: s.Log, StopTimeout: 5 * time.Second}
	return p.StopOrphan(ctx)
}

// limitBuffer keeps the first n bytes written to it.
type limitBuffer struct {
	mu  sync.Mutex
	buf []byte
	n   int
}

func (b *limitBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.n - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *limitBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// alwaysAlive is the runner of a script-installed app without a unit to
// ask: the health check alone judges it.
type alwaysAlive struct{}

func (alwaysAlive) Restart(context.Context) error { return nil }
func (alwaysAlive) Stop(context.Context) error    { return nil }
func (alwaysAlive) Alive(context.Context) error   { return nil }

// installScript is Install with the script installer, the lock held and the
// host repaired: journal, install command, version check, health, commit;
// any failure after the command started rolls back (the command again,
// with ActionRollback and the previous version).
func (in *Installer) installScript(ctx context.Context, cur Status, prior *Journal, target string, healthTimeout, minHealthy time.Duration) (Status, error) {
	s := in.Script
	clk := in.Clock.orReal()
	from := cur.ActiveVersion
	j := &Journal{Target: target, From: from, StartedAt: clk.Now().UTC().Round(0), Installer: rollout.InstallerScript}
	if prior != nil && prior.Step == StepUndone && prior.Target == target {
		j.Attempts = prior.Attempts
	}
	st := cur
	st.StartTime, st.StartVersion = j.StartedAt, from
	st.SetError("", nil)
	if err := in.Save(st); err != nil {
		return cur, err
	}
	rollback := func(cause error) (Status, error) {
		return in.rollback(ctx, st, j, interruption(ctx, cause))
	}
	// 1. The install command. From here the host may be partly on the
	// target: a crash is undone (RecoverUndo) by the command run again
	// for the previous version.
	if err := in.step(j, StepScript); err != nil {
		st.SetError(err.Error(), err)
		_ = in.Save(st)
		_ = in.endJournal(j)
		return st, err
	}
	in.Log.Info("running the install command", slog.String("version", target), slog.String("previous", orNothing(from)))
	if err := s.Run(ctx, ActionInstall, target, from); err != nil {
		return rollback(err)
	}
	failpoint(string(StepScript) + "/done")
	got, err := s.ReadVersion(ctx)
	if err != nil {
		return rollback(err)
	}
	if got != target {
		return rollback(fmt.Errorf("%w: the install command for %s succeeded, and the version command says %s", ErrScriptVersion, target, orNothing(got)))
	}
	// 2. Health, as for a tarball.
	if err := in.step(j, StepHealth); err != nil {
		return rollback(err)
	}
	if err := WaitHealthy(ctx, in.Health, in.runner(), healthTimeout, minHealthy, clk); err != nil {
		return rollback(err)
	}
	if err := in.step(j, StepCommit); err != nil {
		return rollback(err)
	}
	return in.commit(cur, j)
}

// runner is the Runner, alwaysAlive when there is none (a script-installed
// app without a unit).
func (in *Installer) runner() Runner {
	if in.Runner == nil {
		return alwaysAlive{}
	}
	return in.Runner
}

// rollBackScript is rollBack for the script installer: the install command
// for From (ActionRollback), then the version command says where the host
// is. With no From (a first install) there is nothing to go back to: the
// version command alone says what is there.
func (in *Installer) rollBackScript(ctx context.Context, st Status, j *Journal) (Status, error) {
	ctx = context.WithoutCancel(ctx)
	s := in.Script
	from, target := j.From, j.Target
	if j.Output != "" {
		st.ErrorOutput = j.Output // a repair's: update.yaml did not get it yet
	}
	var errs []error
	if from != "" {
		in.Log.Info("running the install command to roll back", slog.String("version", from), slog.String("from", target))
		if err := s.Run(ctx, ActionRollback, from, target); err != nil {
			errs = append(errs, err)
		}
	}
	failpoint(string(StepRollback) + "/restored")
	got, verr := s.ReadVersion(ctx)
	if verr != nil {
		errs = append(errs, verr)
		got = from
	} else if from != "" && got != from {
		errs = append(errs, fmt.Errorf("%w: rolled back to %s, and the version command says %s", ErrScriptVersion, from, orNothing(got)))
	}
	st.ActiveVersion, st.StartVersion = got, from
	st = rolledBack(st, j, target, from)
	if len(errs) > 0 {
		st.Error += "; rollback problems: " + errors.Join(errs...).Error()
		if st.ErrorOutput == "" {
			var oe *outputError
			if errors.As(errs[0], &oe) {
				st.ErrorOutput = LastLines(oe.output)
			}
		}
	}
	return in.endRollback(st, j, errs)
}

// Refresh re-reads the installed version with the version command (the
// script installer's source of truth for active_version) and records it
// when it changed: a host upgraded or downgraded by hand is counted on the
// version it really runs. It does nothing for a tarball installer, while an
// install runs, or while an interrupted one waits for its repair. status
// is the status to start from, read once no install runs; changed says
// whether it recorded a new version.
func (in *Installer) Refresh(ctx context.Context, status func() Status) (st Status, changed bool, err error) {
	s := in.Script
	if s == nil {
		return status(), false, nil
	}
	if !s.mu.TryLock() {
		return status(), false, nil // an install is running: it reads the version itself
	}
	defer s.mu.Unlock()
	cur := status()
	if j, err := LoadJournal(in.Tree); err != nil || j != nil && j.Step != StepUndone {
		return cur, false, err
	}
	return in.refreshLocked(ctx, cur)
}

func (in *Installer) refreshLocked(ctx context.Context, cur Status) (Status, bool, error) {
	v, err := in.Script.ReadVersion(ctx)
	if err != nil {
		return cur, false, err
	}
	if v == cur.ActiveVersion {
		return cur, false, nil
	}
	in.Log.Warn("the installed version changed outside fleetwave; counting the host on it",
		slog.String("version", orNothing(v)), slog.String("recorded", orNothing(cur.ActiveVersion)))
	st := cur
	st.ActiveVersion = v
	if cur.ActiveVersion != "" && v != "" {
		st.VersionHistory = append([]string{cur.ActiveVersion}, deleteVersion(cur.VersionHistory, cur.ActiveVersion, v)...)
		if len(st.VersionHistory) > maxHistory {
			st.VersionHistory = st.VersionHistory[:maxHistory]
		}
	}
	if st.Rollback && st.RollbackFrom == v {
		// Installed by hand: no longer the version it rolled back from.
		st.Rollback, st.RollbackFrom = false, ""
		st.SetError("", nil)
	}
	if err := in.Save(st); err != nil {
		return cur, false, err
	}
	return st, true, nil
}

func deleteVersion(list []string, drop ...string) []string {
	out := make([]string, 0, len(list))
	for _, v := range list {
		keep := true
		for _, d := range drop {
			keep = keep && v != d
		}
		if keep {
			out = append(out, v)
		}
	}
	return out
}

// checkInstaller refuses a journal written by the other installer: the
// steps it names are undone another way.
func (in *Installer) checkInstaller(j *Journal) error {
	script := j.Installer == rollout.InstallerScript
	switch {
	case script && in.Script == nil:
		return fmt.Errorf("%w: install journal %s: an install of %s by the script installer was interrupted, and agentd is configured for tarballs: configure the script installer again (--installer script) to finish it",
			ErrCorrupt, in.Tree.JournalPath(), j.Target)
	case !script && in.Script != nil && j.Step != StepUndone:
		return fmt.Errorf("%w: install journal %s: a tarball install of %s was interrupted, and agentd is configured for the script installer: configure the tarball installer again to finish it",
			ErrCorrupt, in.Tree.JournalPath(), j.Target)
	}
	return nil
}
