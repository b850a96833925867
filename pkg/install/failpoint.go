package install

import (
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// FailpointEnv names a failpoint at which the process kills itself with
// SIGKILL: the crash tests run agentd with it set to each journal step (and
// to points inside the database copies) to prove that a host recovers from
// a crash at that instant. Unset, as in production, failpoints cost a string
// comparison. Names: "<step>" right after the step is recorded, and
// "<step>/<point>" inside it (see the failpoint calls).
//
// "hold:<name>" instead holds the process there until it receives SIGTERM
// (at most failpointHoldMax), creating the file FailpointHeldEnv names once
// it holds: the SIGTERM tests stop agentd exactly at a step, as systemd
// would, and watch it go on from there being stopped.
const FailpointEnv = "FLEETWAVE_TEST_FAILPOINT"

// FailpointHeldEnv names the file a "hold:" failpoint creates once it
// holds.
const FailpointHeldEnv = "FLEETWAVE_TEST_FAILPOINT_HELD"

// failpointHoldMax bounds a hold, so that a test that never sends SIGTERM
// does not hang an agentd for ever.
const failpointHoldMax = 2 * time.Minute

var failpointAt = os.Getenv(FailpointEnv)

// failpoint kills the process if name is the configured failpoint, or
// holds it until SIGTERM if it is "hold:"+name.
func failpoint(name string) {
	switch {
	case failpointAt == "":
		return
	case failpointAt == "hold:"+name:
		hold()
		return
	case failpointAt != name:
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not delivered synchronously; never go on
}

// hold waits for SIGTERM (which the process's own handler gets as well),
// having said so in the file FailpointHeldEnv names.
func hold() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	defer signal.Stop(ch)
	if p := os.Getenv(FailpointHeldEnv); p != "" {
		_ = os.WriteFile(p, []byte(failpointAt+"\n"), 0o644)
	}
	t := time.NewTimer(failpointHoldMax)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// failpointWriter is w with the failpoint name hit in its first write, once
// half of it is on disk: a crash in the middle of a copy, whatever its size.
func failpointWriter(w *os.File, name string) io.Writer {
	if failpointAt != name {
		return w
	}
	return &fpWriter{f: w, name: name}
}

type fpWriter struct {
	f    *os.File
	name string
}

func (w *fpWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p[:len(p)/2])
	if err != nil {
		return n, err
	}
	_ = w.f.Sync()
	failpoint(w.name)
	return n, nil // not reached
}
