package install

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"
)

// procInfo is what /proc/<pid>/stat says about a process.
type procInfo struct {
	PID       int
	State     byte // R, S, D, Z, …
	PGID, SID int
	StartTime uint64
}

// exited reports a process that has ended and only waits to be reaped.
func (pi procInfo) exited() bool { return pi.State == 'Z' || pi.State == 'X' }

// groupAlive reports whether the recorded group still has a process that
// has not exited. Zombies do not count: they have exited and only wait for
// a parent to reap them (agentd for its own child, init for the rest; a
// container whose init reaps nothing would otherwise keep them forever).
//
// reaped is closed once our own child, the leader, has been waited for (nil
// for a group another agentd started). Until then its pid cannot be given
// out again, so the group is certainly ours; that is all there is to go on
// without /proc.
func groupAlive(rec appRecord, reaped <-chan struct{}) (bool, error) {
	if !signallable(rec.PGID) {
		return false, nil // never the app's: it has a group of its own
	}
	if err := unix.Kill(-rec.PGID, 0); errors.Is(err, unix.ESRCH) {
		return false, nil
	} else if !procAvailable() || rec.StartTimeTicks == 0 {
		return !closed(reaped) && (err == nil || errors.Is(err, unix.EPERM)), nil
	}
	leader, err := readProc(rec.PID)
	switch {
	case err == nil && !rec.sameLeader(leader):
		// The pid was freed and given out again, which Linux does only
		// once no process of the recorded group remains.
		return false, nil
	case err == nil && !leader.exited():
		return true, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return false, err
	}
	members, err := groupMembers(rec.PGID)
	if err != nil {
		return false, err
	}
	for _, m := range members {
		if !m.exited() && rec.member(m) {
			return true, nil
		}
	}
	return false, nil
}

// signallable guards every signal to a group: kill(-1) would reach every
// process agentd may signal, and agentd's own group holds agentd (a record
// can name it when the recorded group is long gone and its id was reused).
func signallable(pgid int) bool {
	return pgid > 1 && pgid != unix.Getpgrp()
}

// signalGroup sends sig to the recorded group if it is still the recorded
// one.
func signalGroup(rec appRecord, reaped <-chan struct{}, sig unix.Signal) error {
	alive, err := groupAlive(rec, reaped)
	if err != nil || !alive {
		return err
	}
	if err := unix.Kill(-rec.PGID, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal process group %d: %w", rec.PGID, err)
	}
	return nil
}

// groupPoll is how often ending a group looks whether it is gone.
const groupPoll = 20 * time.Millisecond

// killWait bounds the wait for a group to go after SIGKILL: a process stuck
// in the kernel (a hung NFS mount) can outlive it, and agentd must not hang
// on it. The record is then kept, so the next start tries again.
const killWait = 10 * time.Second

// endGroup ends the recorded process group: SIGTERM to every member, up to
// grace for all of them (not just the leader) to exit, then SIGKILL to what
// remains and a wait until nothing does. reaped, when not nil, is closed
// once our own child (the leader) has been waited for: the group is only
// gone after that, so Alive and the record agree with what ran. ctx cuts
// the grace short; the wait after SIGKILL is bounded by killWait instead.
func endGroup(ctx context.Context, rec appRecord, grace time.Duration, reaped <-chan struct{}) error {
	if err := signalGroup(rec, reaped, unix.SIGTERM); err != nil {
		return err
	}
	if gone, err := waitGroupGone(ctx, rec, reaped, grace); gone || err != nil {
		return err
	}
	if err := signalGroup(rec, reaped, unix.SIGKILL); err != nil {
		return err
	}
	gone, err := waitGroupGone(context.WithoutCancel(ctx), rec, reaped, killWait)
	if err == nil && !gone {
		err = fmt.Errorf("process group %d still has processes %v after SIGKILL", rec.PGID, killWait)
	}
	return err
}

// waitGroupGone polls until the group is gone (and reaped is closed), for
// at most timeout or until ctx is done.
func waitGroupGone(ctx context.Context, rec appRecord, reaped <-chan struct{}, timeout time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	for {
		alive, err := groupAlive(rec, reaped)
		if err != nil {
			return false, err
		}
		if !alive && closed(reaped) {
			return true, nil
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-tick.C:
		case <-reaped:
			reaped = nil // a nil channel counts as closed from here on
		}
	}
}

func closed(c <-chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}
