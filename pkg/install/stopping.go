package install

import (
	"context"
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// Being stopped is never the release's fault. agentd stops on SIGTERM
// (systemctl stop, a reboot, a package upgrade): its context is cancelled,
// and whatever child it was running (systemctl, the health command, the app
// it supervises) is killed with it. The child's failure then says nothing
// about the version: the install is interrupted, rolled back without
// blaming the target, and the next start installs it again.
//
// systemd stops a service by sending SIGTERM to every process of its
// control group at once, so the child may die of that SIGTERM before
// agentd's own signal handler has cancelled the context. A child that died
// of a signal agentd did not send (stopSignals), or the supervised app's
// clean exit (a graceful shutdown on that SIGTERM), is therefore judged
// only once the context ends or stopGrace passes, whichever comes first.

// stopGrace is how long a child's death by a stop signal waits for agentd's
// own context to end before it is judged as the child's failure. Real
// time, not the injected clock: it is about signal delivery.
var stopGrace = 2 * time.Second

// errExitedCleanly is the supervised app's exit with status 0 while agentd
// waits for it to prove healthy. An app stops that way on the SIGTERM
// systemd sends the whole control group (a graceful shutdown), so it too is
// judged only once agentd's context ends or stopGrace passes.
var errExitedCleanly = errors.New("exited (status 0)")

// stopSignals are the signals that stop a service: systemd's SIGTERM (and
// SIGKILL after TimeoutStopSec), SIGINT and SIGHUP from a terminal.
var stopSignals = []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL, syscall.SIGINT, syscall.SIGHUP}

// StoppedError is an install step that failed because agentd was being
// stopped (its context ended). It is ErrInterrupted and the context's
// error, and never the error it replaces: a health check cut short is not
// ErrUnhealthy. Its text keeps what failed.
type StoppedError struct {
	// Err is how the step failed; Ctx the context's error.
	Err, Ctx error
}

func (e *StoppedError) Error() string {
	return "interrupted: agentd is stopping (" + e.Err.Error() + ")"
}

// Unwrap makes errors.Is(err, ErrInterrupted) and errors.Is(err,
// context.Canceled) (or DeadlineExceeded) true.
func (e *StoppedError) Unwrap() []error { return []error{ErrInterrupted, e.Ctx} }

// interruption is err as a *StoppedError when agentd is being stopped
// (ctx is done, or ends within stopGrace of a child dying of a stop
// signal), and err unchanged otherwise (nil stays nil).
func interruption(ctx context.Context, err error) error {
	var se *StoppedError
	if err == nil || errors.As(err, &se) {
		return err
	}
	if ctx.Err() == nil && killedByStopSignal(err) {
		t := time.NewTimer(stopGrace)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if ctx.Err() == nil {
		return err
	}
	return &StoppedError{Err: err, Ctx: ctx.Err()}
}

// killedByStopSignal reports whether err is (or wraps) a child process's
// death by one of stopSignals, or the supervised app's clean exit (what a
// graceful shutdown on SIGTERM looks like).
func killedByStopSignal(err error) bool {
	if errors.Is(err, errExitedCleanly) {
		return true
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return false
	}
	for _, s := range stopSignals {
		if ws.Signal() == s {
			return true
		}
	}
	return false
}
