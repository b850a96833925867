package install

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// ErrSkipped: the target is a version this host rolled back from; it is not
// retried automatically (an operator can force it with `agentd update
// --force`, or a new target moves on).
var ErrSkipped = errors.New("not retrying a version this host rolled back from")

// Installer moves a host from one version of the app to another, and back
// when the new one is not healthy. Every step's outcome is handed to Save at
// once (update.yaml and the next heartbeat).
type Installer struct {
	Tree    Tree
	Fetcher *Fetcher
	Runner  Runner
	Health  Health
	// DBPath is the app's SQLite database ("" when it has none).
	DBPath string
	Clock  Clock
	Log    *slog.Logger
	// Save records a new status; an error stops the install (we must not
	// do what we cannot record).
	Save func(Status) error
	// Abandon, once closed, cancels step 1's download if it has not
	// finished: Install fails at "fetch" with ErrAbandoned and nothing
	// changed on the host. After the download it has no effect:
	// extraction, swap, restart and health wait answer to Install's ctx
	// alone. agentd closes it when the plan moves away from the version
	// being downloaded. nil: never.
	Abandon <-chan struct{}
	// Script, when set, installs with the host's own commands (the script
	// installer, script.go) instead of downloading tarballs: Fetcher, DBPath
	// and the bin dir are not used, and Runner (optional: nil means the
	// health check alone judges the app) is only asked whether the app is
	// alive and what it printed.
	Script *Script
	// LockHeld says the caller holds the root lock (AcquireLock on
	// Tree.LockPath) for as long as it uses the Installer, as agentd's
	// commands do: Install and Repair then do not take it themselves (a
	// second flock by the same process would fail).
	LockHeld bool
}

// maxHistory bounds update.yaml's version_history.
const maxHistory = 10

// Install updates from cur.ActiveVersion to target: lock, repair whatever a
// crash left, fetch and verify, extract, run every other check that can
// refuse the release (preflight), back up the database, swap links,
// restart, wait until healthy for minHealthy within healthTimeout; on any
// failure after the swap, restore links and database exactly and restart
// the old version. A release refused by a check never touches the app:
// not stopped, its database not restored. Every step is recorded in the install journal before it
// begins (journal.go), so a crash at any instant is completed or undone by
// the next Repair. It returns the status it recorded last.
func (in *Installer) Install(ctx context.Context, cur Status, target string, healthTimeout, minHealthy time.Duration) (Status, error) {
	if err := checkVersion(target); err != nil {
		return cur, err
	}
	if in.Script != nil {
		in.Script.mu.Lock()
		defer in.Script.mu.Unlock()
	}
	release, err := in.lock()
	if err != nil {
		return cur, err
	}
	defer release()
	prior, cur, err := in.repairLocked(ctx, cur, target)
	if err != nil {
		return cur, err
	}
	if cur.ActiveVersion == target {
		return cur, nil
	}
	if cur.Rollback && cur.RollbackFrom == target {
		return cur, fmt.Errorf("%w: %s", ErrSkipped, target)
	}
	in.keepReserve()
	if in.Script != nil {
		return in.installScript(ctx, cur, prior, target, healthTimeout, minHealthy)
	}

	clk := in.Clock.orReal()
	from := cur.ActiveVersion
	j := &Journal{Target: target, From: from, StartedAt: clk.Now().UTC().Round(0)}
	if prior != nil && prior.Step == StepUndone && prior.Target == target {
		j.Attempts = prior.Attempts
	}
	st := cur
	st.StartTime, st.StartVersion = j.StartedAt, from
	st.SetError("", nil)
	if err := in.Save(st); err != nil {
		return cur, err
	}
	fail := func(step string, err error) (Status, error) {
		err = fmt.Errorf("install %s: %s: %w", target, step, interruption(ctx, err))
		st.SetError(err.Error(), err)
		if serr := in.Save(st); serr != nil {
			err = errors.Join(err, serr)
		}
		if jerr := in.endJournal(j); jerr != nil {
			err = errors.Join(err, jerr)
		}
		return st, err
	}

	// 1. The release, verified and extracted (nothing outside versions/<v>
	// changes if any of this fails).
	if err := in.step(j, StepFetch); err != nil {
		return fail("journal", err)
	}
	if err := in.ensureVersion(ctx, target, j); err != nil {
		return fail("fetch", err)
	}
	// 2. Every check that can still refuse the release, while the app runs
	// untouched. A refusal after the backup would be a rollback: the app
	// stopped, and the database restored from a backup that lacks what
	// the app wrote since.
	if err := in.preflight(target); err != nil {
		return fail("check", err)
	}
	// 3. What happens to the database: decided before anything changes,
	// and the current one backed up under the version that wrote it.
	var action DBAction
	if in.DBPath != "" {
		if action, err = PlanDB(cur.VersionHistory, from, target, in.backups(target)); err != nil {
			return fail("database", err)
		}
		if from != "" {
			if err := in.step(j, StepBackup); err != nil {
				return fail("journal", err)
			}
			if _, err := BackupDB(ctx, in.Tree, from, in.DBPath, clk.Now()); err != nil {
				return fail("back up database", err)
			}
		}
	}
	// 4. Swap, restart, judge. From here a failure rolls back.
	rollback := func(cause error) (Status, error) {
		// Whatever failed while agentd was being stopped failed because
		// of it (stopping.go): never the target's fault.
		return in.rollback(ctx, st, j, interruption(ctx, cause))
	}
	if action.Op == DBRestore {
		in.Log.Info("restoring database", slog.String("backup_of", action.Backup), slog.String("why", action.Reason))
		if err := in.step(j, StepRestoreTarget); err != nil {
			return rollback(err)
		}
		if err := in.Runner.Stop(ctx); err != nil {
			return rollback(fmt.Errorf("stop app: %w", err))
		}
		if err := restoreDB(in.Tree, action.Backup, in.DBPath, string(StepRestoreTarget)); err != nil {
			return rollback(fmt.Errorf("restore database of %s: %w", action.Backup, err))
		}
	}
	if err := in.step(j, StepSwap); err != nil {
		return rollback(err)
	}
	if prev, err := in.link(target, string(StepSwap)); err != nil {
		if prev == nil && action.Op != DBRestore {
			// Link refused before it changed a link (a foreign entry
			// appeared in the bin dir since the check), and the app was
			// never stopped: nothing to roll back, and a rollback would
			// restore the database from the backup, losing what the app
			// wrote since.
			return fail("swap", err)
		}
		return rollback(err)
	}
	if err := in.step(j, StepStart); err != nil {
		return rollback(err)
	}
	if err := in.Runner.Restart(ctx); err != nil {
		return rollback(fmt.Errorf("restart: %w", err))
	}
	if err := in.step(j, StepHealth); err != nil {
		return rollback(err)
	}
	if err := WaitHealthy(ctx, in.Health, in.Runner, healthTimeout, minHealthy, clk); err != nil {
		return rollback(err)
	}
	// 5. Success.
	if err := in.step(j, StepCommit); err != nil {
		return rollback(err)
	}
	return in.commit(cur, j)
}

// step records that step s begins, then hits its failpoint.
func (in *Installer) step(j *Journal, s Step) error {
	j.Step, j.Download = s, nil
	err := in.record(j)
	failpoint(string(s))
	if testHookStep != nil {
		testHookStep(s)
	}
	return err
}

// testHookStep, set by tests only, is called as each step begins, once it
// is recorded: what the host may do meanwhile (an operator's file landing
// in the bin dir).
var testHookStep func(Step)

// record writes the journal, giving up the space reserve if the disk is
// full.
func (in *Installer) record(j *Journal) error {
	return in.withSpace(func() error { return writeJournal(in.Tree, j, in.Clock.orReal().Now()) })
}

// commit records the target as the active version, ends the journal and
// prunes old versions. cur is the status before the install (or, when
// repairing, as update.yaml says now: possibly already committed).
func (in *Installer) commit(cur Status, j *Journal) (Status, error) {
	st := cur
	if cur.ActiveVersion != j.Target {
		st.ActiveVersion, st.Rollback, st.RollbackFrom = j.Target, false, ""
		st.SetError("", nil)
		st.StartVersion, st.StartTime = j.From, j.StartedAt
		if j.From != "" {
			st.VersionHistory = append([]string{j.From}, slices.DeleteFunc(slices.Clone(cur.VersionHistory), func(v string) bool { return v == j.From || v == j.Target })...)
			if len(st.VersionHistory) > maxHistory {
				st.VersionHistory = st.VersionHistory[:maxHistory]
			}
		}
		if err := in.withSpace(func() error { return in.Save(st) }); err != nil {
			return st, err
		}
	}
	failpoint(string(StepCommit) + "/saved")
	if err := removeJournal(in.Tree); err != nil {
		return st, err
	}
	if in.Script == nil {
		in.prune(j.Target, j.From)
	}
	in.sweep("")
	in.Log.Info("installed", slog.String("version", j.Target), slog.String("previous", j.From))
	return st, nil
}

// rollback goes back to the version the install started from, because of
// cause: recorded first (with whether the target is to blame), then done
// (rollBack) and recorded in update.yaml.
func (in *Installer) rollback(ctx context.Context, st Status, j *Journal, cause error) (Status, error) {
	// Not the version's fault when the install was cancelled (agentd
	// stopping, a newer plan): restore, but do not mark it bad (a
	// rolled-back version is never retried automatically).
	// Nor when the bin dir holds an entry of someone else's where the
	// release puts a link: the operator must move it, and the release is
	// tried again after that.
	// Nor when the host or the network failed, not the version (a full
	// disk while swapping links): ClassOf says infrastructure. The version
	// is tried again later and never remembered as bad.
	interrupted := errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) || errors.Is(cause, ErrNotOurs) ||
		ClassOf(cause) == ClassInfrastructure
	j.Cause, j.Bad = cause.Error(), !interrupted
	j.Class, j.Reason = ClassOf(cause), Cause(cause)
	// What the app printed last, before it is stopped and the old version
	// started (only for a failure of the version: a cancelled install's
	// output says nothing about it).
	if !interrupted || in.Script != nil && !errors.Is(cause, ErrInterrupted) {
		// (The script installer's command killed at its timeout is not
		// the version's fault, and its last lines say why it hung.)
		st.ErrorOutput = in.failureOutput(ctx, cause)
		if in.Script != nil {
			j.Output = st.ErrorOutput
		}
	}
	in.Log.Warn("rolling back", slog.String("from", j.Target), slog.String("to", j.From), slog.Any("cause", cause))
	var errs []error
	if err := in.step(j, StepRollback); err != nil {
		// Go on: putting the old version back matters more than the
		// record, and a later Repair redoes what the record says.
		errs = append(errs, err)
	}
	st, err := in.rollBack(ctx, st, j)
	return st, errors.Join(append([]error{fmt.Errorf("install %s: %w", j.Target, cause)}, append(errs, err)...)...)
}

// rollBack puts From back (app stopped, links, database from From's backup,
// app started) and records the outcome in update.yaml as j says (Bad: the
// target is marked rolled back), then ends the journal. Every part is
// idempotent: Repair runs it again after a crash in the middle.
func (in *Installer) rollBack(ctx context.Context, st Status, j *Journal) (Status, error) {
	if in.Script != nil {
		return in.rollBackScript(ctx, st, j)
	}
	// Restoring must finish even when the install was cancelled (agentd
	// stopping): a half-restored host is worse than a slow stop.
	ctx = context.WithoutCancel(ctx)
	from, target := j.From, j.Target
	var errs []error
	if err := in.Runner.Stop(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stop %s: %w", target, err))
	}
	// The database first: on a disk the target filled, restoring it is
	// what frees the space the links' temp entries need.
	if in.DBPath != "" && from != "" {
		if err := in.restoreFrom(from); err != nil {
			errs = append(errs, fmt.Errorf("restore database of %s: %w", from, err))
		}
	}
	if from != "" {
		if _, err := in.link(from, string(StepRollback)); err != nil {
			errs = append(errs, err)
		}
	} else if _, err := in.Tree.Unlink(); err != nil {
		errs = append(errs, err)
	}
	failpoint(string(StepRollback) + "/restored")
	if from != "" {
		if err := in.Runner.Restart(ctx); err != nil {
			errs = append(errs, fmt.Errorf("restart %s: %w", from, err))
		}
	}
	st.ActiveVersion, st.StartVersion = from, from
	st = rolledBack(st, j, target, from)
	if len(errs) > 0 {
		st.Error += "; rollback problems: " + errors.Join(errs...).Error()
	}
	return in.endRollback(st, j, errs)
}

// rolledBack is st after a rollback (of either installer) from target to
// from: rolled back and the release blamed when the journal says the
// release was bad, an interrupted install otherwise.
func rolledBack(st Status, j *Journal, target, from string) Status {
	if j.Bad {
		st.Rollback, st.RollbackFrom = true, target
		st.Error = fmt.Sprintf("rolled back from %s: %s", target, j.Cause)
	} else {
		st.Rollback, st.RollbackFrom = false, ""
		st.Error = fmt.Sprintf("install of %s interrupted (%s); restored %s", target, j.Cause, orNothing(from))
	}
	st.ErrorClass, st.ErrorCause = j.outcome()
	return st
}

// endRollback saves the status a rollback (of either installer) leaves and
// ends its journal. With errs the journal stays, so that the next Repair
// restores (or runs the command) again.
func (in *Installer) endRollback(st Status, j *Journal, errs []error) (Status, error) {
	if err := in.withSpace(func() error { return in.Save(st) }); err != nil {
		return st, errors.Join(append(errs, err)...)
	}
	failpoint(string(StepRollback) + "/saved")
	if len(errs) > 0 {
		return st, errors.Join(errs...)
	}
	var err error
	if j.Bad {
		err = removeJournal(in.Tree)
	} else {
		err = in.endJournal(j)
	}
	in.sweep("")
	return st, err
}

// restoreFrom puts From's database backup back. Out of space (a release
// that filled the disk, often through this very database), it removes the
// live database and its sidecars first: they are being replaced, the
// journal says so, and their space is what the copy needs.
func (in *Installer) restoreFrom(from string) error {
	err := restoreDB(in.Tree, from, in.DBPath, string(StepRollback))
	if !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	in.Log.Warn("disk full while restoring the database; removing the live copy first", slog.String("db", in.DBPath))
	for _, p := range append(backupSidecarPaths(in.DBPath), in.DBPath) {
		if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return errors.Join(err, rerr)
		}
	}
	in.sweep("")
	return restoreDB(in.Tree, from, in.DBPath, "")
}

// link points the bin dir at v, with a failpoint fp+"/linked" once the
// links changed. prev is nil when no link changed.
func (in *Installer) link(v, fp string) (prev Links, err error) {
	prev, err = in.Tree.Link(v)
	failpoint(fp + "/linked")
	return prev, err
}

// preflight runs, on target's extracted release, every check that can
// refuse it and has not run yet, changing nothing: no program agentd runs
// among its binaries (checkTools; agentd itself only in a signed release,
// which self-update may run), and no name the bin dir holds for someone
// else (ErrNotOurs, which Link would refuse at the swap). The download's
// checks (size, free space, checksum, signature) and the extraction's
// (names, sizes, file types) ran before it.
func (in *Installer) preflight(target string) error {
	names, err := in.Tree.binaries(target)
	if err != nil {
		return err
	}
	// A release a repository's verified metadata names (Resolve) is
	// signed too: by the repository's targets keys, for this app and
	// version.
	signed := in.Fetcher != nil && (in.Fetcher.PublicKey != nil || in.Fetcher.Resolve != nil)
	if err := checkTools(target, names, signed); err != nil {
		return err
	}
	return in.Tree.CheckLink(target)
}

// endJournal ends the journal of an install that was not the target's
// fault: removed, or, when earlier attempts were cut off by crashes, left
// as the record of their count (StepUndone).
func (in *Installer) endJournal(j *Journal) error {
	if j.Attempts == 0 {
		return removeJournal(in.Tree)
	}
	j.Step = StepUndone
	return in.record(j)
}

// ensureVersion makes versions/<v> a complete extraction of the verified
// release, fetching it unless a complete one is already there. The
// download's progress goes into j (step fetch) for 'agentd status'.
func (in *Installer) ensureVersion(ctx context.Context, v string, j *Journal) error {
	if _, err := os.Stat(in.Tree.MarkerPath(v)); err == nil {
		return nil
	}
	if in.Fetcher == nil {
		return errors.New("no url_template configured to download releases from")
	}
	ctx, stop := abandonable(ctx, in.Abandon)
	defer stop()
	f := *in.Fetcher // a copy, for this install's own progress record
	caller := in.Fetcher.OnProgress
	f.OnProgress = func(p DownloadProgress) {
		if caller != nil {
			caller(p) // the agent's metrics
		}
		j.Download = &p
		// At most every ProgressEvery, and only for status: a record that
		// cannot be written does not stop the download.
		if err := writeJournal(in.Tree, j, in.Clock.orReal().Now()); err != nil {
			in.Log.Debug("recording download progress failed", slog.Any("err", err))
		}
	}
	// Fetch creates the versions dir.
	dl, err := f.Fetch(ctx, v, in.Tree.VersionsDir())
	if err != nil {
		return err
	}
	defer os.Remove(dl.Path)
	return Extract(dl.Path, in.Tree, v, dl.SHA256, Limits{FreeSpace: in.Fetcher.FreeSpace, SpaceMargin: in.Fetcher.SpaceMargin})
}

// backups says, in PlanDB's terms, whether target has a usable database
// backup. PlanDB looks up no other version, so no other backup is loaded
// (LoadBackup hashes the whole copy).
func (in *Installer) backups(target string) map[string]bool {
	_, err := LoadBackup(in.Tree, target)
	return map[string]bool{target: err == nil}
}

// prune keeps only the active and the last good version (and anything not a
// version directory: a partial download stays for a resume).
func (in *Installer) prune(keep ...string) {
	entries, err := os.ReadDir(in.Tree.VersionsDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || strings.HasPrefix(name, ".") || slices.Contains(keep, name) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(in.Tree.VersionsDir(), name)); err != nil {
			in.Log.Warn("pruning an old version failed", slog.String("version", name), slog.Any("err", err))
		}
	}
}

// Repair finishes what a crash interrupted, by the rule for the step the
// journal names (recoveryRules), and removes temp files every kind of
// interrupted work leaves. Every command that can install runs it first. It
// returns the status to record (and records it).
func (in *Installer) Repair(ctx context.Context, cur Status) (Status, error) {
	if in.Script != nil {
		in.Script.mu.Lock()
		defer in.Script.mu.Unlock()
	}
	release, err := in.lock()
	if err != nil {
		return cur, err
	}
	defer release()
	_, st, err := in.repairLocked(ctx, cur, "")
	return st, err
}

// lock takes the root lock unless the caller holds it (LockHeld).
func (in *Installer) lock() (release func(), err error) {
	if in.LockHeld {
		return func() {}, nil
	}
	l, err := AcquireLock(in.Tree.LockPath(), "")
	if err != nil {
		return nil, err
	}
	return func() { _ = l.Release() }, nil
}

// repairLocked is Repair with the lock held. next is the version about to
// be installed ("" for none): its partial download is kept for a resume.
// It returns the journal it found.
func (in *Installer) repairLocked(ctx context.Context, cur Status, next string) (*Journal, Status, error) {
	if in.Script != nil {
		// An install command a killed agentd left running is ended
		// before anything is run again.
		if err := in.Script.StopOrphan(ctx); err != nil {
			return nil, cur, err
		}
	}
	j, err := LoadJournal(in.Tree)
	if err != nil {
		return nil, cur, err
	}
	if j != nil {
		if err := in.checkInstaller(j); err != nil {
			return nil, cur, err
		}
	}
	if j == nil || j.Step == StepUndone {
		in.sweep(next)
		st, err := in.repairUnjournaled(ctx, cur)
		return j, st, err
	}
	rule := RecoveryFor(j.Step)
	in.Log.Warn("finishing an install that was interrupted", slog.String("target", j.Target), slog.String("from", orNothing(j.From)),
		slog.String("step", string(j.Step)), slog.String("recovery", string(rule)))
	var st Status
	switch rule {
	case RecoverForget:
		st = cur
		st.SetError(fmt.Sprintf("install of %s was interrupted while %s; nothing had changed yet", j.Target, stepDoing(j.Step)), ErrInterrupted)
		if err = in.withSpace(func() error { return in.Save(st) }); err == nil {
			err = in.endJournal(j)
		}
	case RecoverCommit:
		st, err = in.commit(cur, j)
		if err == nil {
			err = in.ensureRunning(ctx)
		}
	case RecoverRollback:
		st, err = in.rollBack(ctx, cur, j)
	case RecoverUndo:
		j.Attempts++
		j.Cause = fmt.Sprintf("interrupted (crash or power loss) while %s", stepDoing(j.Step))
		if j.Attempts >= maxInterrupted {
			j.Bad, j.Cause = true, fmt.Sprintf("%s, %d times in a row", j.Cause, j.Attempts)
		}
		j.Step = StepRollback
		if err = in.record(j); err == nil {
			st, err = in.rollBack(ctx, cur, j)
		}
	}
	in.sweep(next)
	if err != nil {
		return nil, st, fmt.Errorf("repair the interrupted install of %s: %w", j.Target, err)
	}
	if j.Step != StepUndone {
		return nil, st, nil // ended: removed
	}
	return j, st, nil
}

// repairUnjournaled handles a host left by an agentd that kept no journal:
// links into another version than the active one mean it died between the
// swap and recording the outcome, and the attempt is rolled back.
func (in *Installer) repairUnjournaled(ctx context.Context, cur Status) (Status, error) {
	if in.Script != nil {
		// The version command is the truth: a host changed by hand (or
		// by a crash nobody journaled) is counted on what it runs.
		st, _, err := in.refreshLocked(ctx, cur)
		return st, err
	}
	linked, err := in.Tree.LinkedVersion()
	if err != nil || linked == "" || cur.ActiveVersion == "" || linked == cur.ActiveVersion {
		return cur, err
	}
	in.Log.Warn("an install was interrupted; rolling back", slog.String("linked", linked), slog.String("active", cur.ActiveVersion))
	j := &Journal{Target: linked, From: cur.ActiveVersion, Step: StepRollback,
		Cause: "interrupted (crash or power loss) between the link swap and its outcome", Bad: false}
	return in.rollBack(ctx, cur, j)
}

// ensureRunning starts the app if it is not running.
func (in *Installer) ensureRunning(ctx context.Context) error {
	if in.Script != nil {
		return nil // the install command started it (its package's job)
	}
	if in.Runner.Alive(ctx) == nil {
		return nil
	}
	return in.Runner.Restart(ctx)
}

func stepDoing(s Step) string {
	switch s {
	case StepFetch:
		return "downloading and extracting"
	case StepBackup:
		return "backing up the database"
	case StepRestoreTarget:
		return "restoring the target's database"
	case StepSwap:
		return "swapping links"
	case StepStart:
		return "starting the new version"
	case StepHealth:
		return "checking health"
	case StepScript:
		return "running the install command"
	case StepCommit:
		return "recording success"
	case StepRollback:
		return "rolling back"
	}
	return string(s)
}

func orNothing(v string) string {
	if v == "" {
		return "nothing (no version was installed)"
	}
	return v
}
