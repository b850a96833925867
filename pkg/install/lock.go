package install

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Lock is the root lock: an exclusive flock on <root>/lock, so two
// updaters (two daemons, the daemon and a manual `agentd update`, or two
// cron runs) never change one root at once. agentd run holds it for its
// whole life; one-shot commands for theirs. The kernel drops it when the
// holder dies (kill -9 included), so a crash never leaves a stale lock; the
// file is opened close-on-exec, so no child (the app, systemctl) keeps it.
type Lock struct{ f *os.File }

// AcquireLock takes the lock without waiting, on behalf of holder (what
// the next one who asks is told holds it, e.g. "agentd run"; "" names the
// program). When another process holds it the error is a *LockedError
// (ErrLocked) naming the holder as it wrote itself: what, pid, since when.
func AcquireLock(path, holder string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("root lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		who, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &LockedError{Path: path, Holder: strings.TrimSpace(string(who))}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// Say who holds it, for the next one who asks.
	if holder == "" {
		holder = filepath.Base(os.Args[0])
	}
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "%s (pid %d, started %s)\n", holder, os.Getpid(), time.Now().UTC().Format(time.RFC3339))
	}
	return &Lock{f: f}, nil
}

// Release drops the lock.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}
