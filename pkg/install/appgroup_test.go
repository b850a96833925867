//go:build linux

package install_test

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// running reports whether pid is a process that has not exited (a zombie has).
func running(t *testing.T, pid int) bool {
	t.Helper()
	state, gone := procState(t, pid)
	return !gone && state != "Z"
}

func TestProcessRunnerStopEndsMembersThatOutliveTheLeader(t *testing.T) {
	// The app exits on SIGTERM at once; its child ignores SIGTERM. Stop must
	// not return while that child runs on in the group (reparented to init,
	// it would never be stopped by anyone).
	dir := t.TempDir()
	r := healthApp(t, fmt.Sprintf("(trap '' TERM; exec sleep 1000) & echo $! > '%s/child.tmp' && mv '%[1]s/child.tmp' '%[1]s/child'; wait", dir))
	r.StopTimeout = 200 * time.Millisecond
	child := waitChildPid(t, filepath.Join(dir, "child"))
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if running(t, child) {
		state, _ := procState(t, child)
		t.Fatalf("the app's child (pid %d, state %s) still runs after Stop returned", child, state)
	}
}
