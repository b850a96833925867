package install

import (
	"io"
	"os"
	"syscall"
)

// FailpointEnv names a failpoint at which the process kills itself with
// SIGKILL: the crash tests run agentd with it set to each journal step (and
// to points inside the database copies) to prove that a host recovers from
// a crash at that instant. Unset, as in production, failpoints cost a string
// comparison. Names: "<step>" right after the step is recorded, and
// "<step>/<point>" inside it (see the failpoint calls).
const FailpointEnv = "FLEETWAVE_TEST_FAILPOINT"

var failpointAt = os.Getenv(FailpointEnv)

// failpoint kills the process if name is the configured failpoint.
func failpoint(name string) {
	if failpointAt == "" || failpointAt != name {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not delivered synchronously; never go on
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
