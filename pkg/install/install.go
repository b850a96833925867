package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
}

// maxHistory bounds update.yaml's version_history.
const maxHistory = 10

// Install updates from cur.ActiveVersion to target: lock, fetch and verify,
// extract, back up the database, swap links, restart, wait until healthy for
// minHealthy within healthTimeout; on any failure after the swap, restore
// links and database exactly and restart the old version. It returns the
// status it recorded last.
func (in *Installer) Install(ctx context.Context, cur Status, target string, healthTimeout, minHealthy time.Duration) (Status, error) {
	if err := checkVersion(target); err != nil {
		return cur, err
	}
	if cur.ActiveVersion == target {
		return cur, nil
	}
	if cur.Rollback && cur.RollbackFrom == target {
		return cur, fmt.Errorf("%w: %s", ErrSkipped, target)
	}
	lock, err := AcquireLock(in.Tree.LockPath())
	if err != nil {
		return cur, err
	}
	defer lock.Release()

	clk := in.Clock.orReal()
	from := cur.ActiveVersion
	st := cur
	st.StartTime, st.StartVersion, st.Error = clk.Now().UTC(), from, ""
	if err := in.Save(st); err != nil {
		return cur, err
	}
	fail := func(step string, err error) (Status, error) {
		err = fmt.Errorf("install %s: %s: %w", target, step, err)
		st.Error = err.Error()
		if serr := in.Save(st); serr != nil {
			err = errors.Join(err, serr)
		}
		return st, err
	}

	// 1. The release, verified and extracted (nothing outside versions/<v>
	// changes if any of this fails).
	if err := in.ensureVersion(ctx, target); err != nil {
		return fail("fetch", err)
	}
	// 2. What happens to the database: decided before anything changes,
	// and the current one backed up under the version that wrote it.
	var action DBAction
	if in.DBPath != "" {
		if action, err = PlanDB(cur.VersionHistory, from, target, in.backups(target)); err != nil {
			return fail("database", err)
		}
		if from != "" {
			if _, err := BackupDB(ctx, in.Tree, from, in.DBPath, clk.Now()); err != nil {
				return fail("back up database", err)
			}
		}
	}
	// 3. Swap, restart, judge.
	if action.Op == DBRestore {
		in.Log.Info("restoring database", slog.String("backup_of", action.Backup), slog.String("why", action.Reason))
		if err := in.Runner.Stop(ctx); err != nil {
			return fail("stop app", err)
		}
		if err := RestoreDB(in.Tree, action.Backup, in.DBPath); err != nil {
			return in.rollback(ctx, st, nil, target, fmt.Errorf("restore database of %s: %w", action.Backup, err))
		}
	}
	prev, err := in.Tree.Link(target)
	if err != nil {
		return in.rollback(ctx, st, prev, target, err)
	}
	if err := in.Runner.Restart(ctx); err != nil {
		return in.rollback(ctx, st, prev, target, fmt.Errorf("restart: %w", err))
	}
	if err := WaitHealthy(ctx, in.Health, in.Runner, healthTimeout, minHealthy, clk); err != nil {
		return in.rollback(ctx, st, prev, target, err)
	}
	// 4. Success.
	st.ActiveVersion, st.Rollback, st.RollbackFrom, st.Error = target, false, "", ""
	if from != "" {
		st.VersionHistory = append([]string{from}, slices.DeleteFunc(slices.Clone(cur.VersionHistory), func(v string) bool { return v == from || v == target })...)
		if len(st.VersionHistory) > maxHistory {
			st.VersionHistory = st.VersionHistory[:maxHistory]
		}
	}
	if err := in.Save(st); err != nil {
		return st, err
	}
	in.prune(target, from)
	in.Log.Info("installed", slog.String("version", target), slog.String("previous", from))
	return st, nil
}

// rollback restores links (prev, when the swap happened) and the database of
// the previous version, restarts it, and records the rollback.
func (in *Installer) rollback(ctx context.Context, st Status, prev Links, target string, cause error) (Status, error) {
	from := st.StartVersion
	// Restoring must finish even when the install was cancelled (agentd
	// stopping): a half-restored host is worse than a slow stop.
	ctx = context.WithoutCancel(ctx)
	interrupted := errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded)
	in.Log.Warn("rolling back", slog.String("from", target), slog.String("to", from), slog.Any("cause", cause))
	var errs []error
	if err := in.Runner.Stop(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stop %s: %w", target, err))
	}
	if prev != nil {
		if err := in.Tree.RestoreLinks(prev); err != nil {
			errs = append(errs, err)
		}
	}
	if in.DBPath != "" && from != "" {
		if err := RestoreDB(in.Tree, from, in.DBPath); err != nil {
			errs = append(errs, fmt.Errorf("restore database of %s: %w", from, err))
		}
	}
	if from != "" {
		if err := in.Runner.Restart(ctx); err != nil {
			errs = append(errs, fmt.Errorf("restart %s: %w", from, err))
		}
	}
	msg := fmt.Sprintf("rolled back from %s: %v", target, cause)
	if len(errs) > 0 {
		msg += "; rollback problems: " + errors.Join(errs...).Error()
	}
	st.ActiveVersion, st.Rollback, st.RollbackFrom, st.Error = from, true, target, msg
	if interrupted {
		// Not the version's fault: restore, but do not mark it bad (a
		// rolled-back version is never retried automatically).
		st.Rollback, st.RollbackFrom = false, ""
		st.Error = fmt.Sprintf("install of %s interrupted (%v); restored %s", target, cause, orNothing(from))
	}
	if err := in.Save(st); err != nil {
		errs = append(errs, err)
	}
	return st, errors.Join(append([]error{fmt.Errorf("install %s: %w", target, cause)}, errs...)...)
}

// ensureVersion makes versions/<v> a complete extraction of the verified
// release, fetching it unless a complete one is already there.
func (in *Installer) ensureVersion(ctx context.Context, v string) error {
	if _, err := os.Stat(in.Tree.MarkerPath(v)); err == nil {
		return nil
	}
	if in.Fetcher == nil {
		return errors.New("no url_template configured to download releases from")
	}
	ctx, stop := abandonable(ctx, in.Abandon)
	defer stop()
	// Fetch creates the versions dir.
	dl, err := in.Fetcher.Fetch(ctx, v, in.Tree.VersionsDir())
	if err != nil {
		return err
	}
	defer os.Remove(dl.Path)
	return Extract(dl.Path, in.Tree, v, dl.SHA256, Limits{})
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

// Repair finishes what a crash interrupted. If the bin dir links into
// another version than cur.ActiveVersion, the host died between the link swap
// and recording the outcome: the attempt is treated as failed and rolled
// back (links, and the database from the active version's backup), exactly
// as if its health check had failed. It returns the status to record.
func (in *Installer) Repair(ctx context.Context, cur Status) (Status, error) {
	linked, err := in.Tree.LinkedVersion()
	if err != nil || linked == "" || cur.ActiveVersion == "" || linked == cur.ActiveVersion {
		return cur, err
	}
	lock, err := AcquireLock(in.Tree.LockPath())
	if err != nil {
		return cur, err
	}
	defer lock.Release()
	in.Log.Warn("an install was interrupted; rolling back", slog.String("linked", linked), slog.String("active", cur.ActiveVersion))
	if err := in.Runner.Stop(ctx); err != nil {
		return cur, err
	}
	if _, err := in.Tree.Link(cur.ActiveVersion); err != nil {
		return cur, fmt.Errorf("repair: relink %s: %w", cur.ActiveVersion, err)
	}
	if in.DBPath != "" {
		if _, err := LoadBackup(in.Tree, cur.ActiveVersion); err == nil {
			if err := RestoreDB(in.Tree, cur.ActiveVersion, in.DBPath); err != nil {
				return cur, fmt.Errorf("repair: restore database of %s: %w", cur.ActiveVersion, err)
			}
		}
	}
	if err := in.Runner.Restart(ctx); err != nil {
		return cur, fmt.Errorf("repair: restart %s: %w", cur.ActiveVersion, err)
	}
	st := cur
	st.Rollback, st.RollbackFrom = true, linked
	st.Error = fmt.Sprintf("install of %s was interrupted (crash or power loss); rolled back to %s", linked, cur.ActiveVersion)
	return st, in.Save(st)
}

func orNothing(v string) string {
	if v == "" {
		return "nothing (no version was installed)"
	}
	return v
}
