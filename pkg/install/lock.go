package install

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Lock is the updater lock: an exclusive flock on <root>/lock, so two
// updaters (the daemon and a manual `agentd update`, or two cron runs) never
// install at once. The kernel drops it when the holder dies, so a crash
// never leaves a stale lock.
type Lock struct{ f *os.File }

// AcquireLock takes the lock without waiting. When another process holds it
// the error is ErrLocked and says who (pid and since when, as the holder
// wrote them).
func AcquireLock(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			who := strings.TrimSpace(string(holder))
			if who == "" {
				who = "unknown process"
			}
			return nil, fmt.Errorf("%w: %s is held by %s", ErrLocked, path, who)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// Say who holds it, for the next one who asks.
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "pid %d since %s\n", os.Getpid(), time.Now().UTC().Format(time.RFC3339))
		_ = f.Sync()
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
