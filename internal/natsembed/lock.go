package natsembed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// LockFile is the file in a store directory whose flock says a server
// owns the directory. nats-server itself takes no lock on its store: two
// servers on one directory both start, both replay the same streams and
// then write over each other's message blocks.
const LockFile = "fleetwave.lock"

// ErrStoreInUse is returned by LockStore when another process holds the
// store directory.
var ErrStoreInUse = errors.New("store directory in use")

// StoreLock is an exclusive flock on <store dir>/fleetwave.lock. The kernel
// drops it when the holder dies, so a crash (even kill -9) never leaves a
// stale lock.
type StoreLock struct{ f *os.File }

// LockStore creates dir if needed and takes its lock without waiting,
// writing who into the lock file (with the pid and the time) for the next
// one who asks. When another process holds it the error wraps
// ErrStoreInUse and names that process; nothing is written then.
func LockStore(dir, who string) (*StoreLock, error) {
	if dir == "" {
		return nil, errors.New("embedded server: a store directory is required (--store-dir)")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded server: store directory: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	// Open before creating: a lock file that exists is only written once
	// it is ours.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	}
	if err != nil {
		return nil, fmt.Errorf("embedded server: store directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, inUse(dir, f)
		}
		return nil, fmt.Errorf("embedded server: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "%s, pid %d, since %s\n", who, os.Getpid(), time.Now().UTC().Format(time.RFC3339))
		_ = f.Sync()
	}
	return &StoreLock{f: f}, nil
}

// StoreHolder reports who holds dir's lock, without taking it or writing
// anything: an error wrapping ErrStoreInUse and naming the holder, or nil
// when nobody holds it (or dir has no lock file). A caller that failed for
// another reason (the port in use) uses it to tell the likelier cause: a
// controller already runs on this store.
func StoreHolder(dir string) error {
	f, err := os.Open(filepath.Join(dir, LockFile))
	if err != nil {
		return nil
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return inUse(dir, f)
		}
		return nil
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return nil
}

func inUse(dir string, f *os.File) error {
	b, _ := os.ReadFile(f.Name())
	who := strings.TrimSpace(string(b))
	if who == "" {
		who = "another process (that has not yet said which)"
	}
	return fmt.Errorf("%w: %s is held by %s; stop it or give this one another --store-dir (and --listen)", ErrStoreInUse, dir, who)
}

// Release drops the lock. The file stays: removing it would let a process
// that opened it just before lock a file nobody else sees.
func (l *StoreLock) Release() error {
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
