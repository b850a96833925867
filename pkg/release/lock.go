package release

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultLockWait is how long a command waits for another one working on
// the same repository.
const DefaultLockWait = time.Minute

// lock takes an exclusive flock on the repository directory itself (no
// lock file: a command that fails changes no file), waiting up to
// r.LockWait. Every command that writes takes it, so the timer's
// timestamp cannot interleave with a publish: it would re-sign a timestamp
// naming the snapshot before the publish's, with the same version as the
// publish's, and the release just published would vanish from hosts until
// the timer's next run. Two signers on a shared directory cannot lose each
// other's signature either.
func (r *Repo) lock() (func(), error) {
	f, err := os.Open(r.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, nil // Init of a new directory; the rest fail on their own
	}
	if err != nil {
		return nil, err
	}
	wait := r.LockWait
	if wait == 0 {
		wait = DefaultLockWait
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", r.Dir, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("%w: %s: another fleetctl repo command has been working on it for %s (a publish, a sign, the timer); nothing done", ErrLocked, r.Dir, wait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
