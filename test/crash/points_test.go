package crash_test

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/install"
)

// scenario is an install that a crash interrupts.
type scenario struct {
	name     string
	setup    []string // versions installed first, in order
	target   string
	want     string // the version the host must end on
	bad      bool   // the target must end recorded as rolled back
	diskFull bool   // root (database included) on a small filesystem
	points   []string
}

var (
	installPoints  = []string{"fetch", "backup", "backup/db-copy", "swap", "swap/linked", "start", "health"}
	rollbackPoints = []string{"rollback", "rollback/db-copy", "rollback/db-sidecars", "rollback/linked", "rollback/restored", "rollback/saved"}
	commitPoints   = []string{"commit", "commit/saved"}
)

func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

var scenarios = []scenario{
	{name: "good", setup: []string{"1.0.0"}, target: "2.0.0", want: "2.0.0",
		points: concat(installPoints, commitPoints)},
	{name: "bad", setup: []string{"1.0.0"}, target: "3.0.0", want: "1.0.0", bad: true,
		points: concat(installPoints, rollbackPoints)},
	{name: "downgrade", setup: []string{"1.0.0", "2.0.0"}, target: "1.0.0", want: "1.0.0",
		points: concat([]string{"fetch", "backup", "backup/db-copy", "restore-target-db", "restore-target-db/db-copy", "restore-target-db/db-sidecars"},
			installPoints[3:], commitPoints)},
	{name: "diskfull", setup: []string{"1.0.0"}, target: "4.0.0", want: "1.0.0", bad: true, diskFull: true,
		points: concat([]string{"health"}, rollbackPoints)},
}

var covered atomic.Int64

// TestCrashAtEveryStep: for every scenario, mode and crash point, agentd
// dies by SIGKILL exactly there, is started again, and the host converges.
func TestCrashAtEveryStep(t *testing.T) {
	total := 0
	for _, sc := range scenarios {
		total += 2 * len(sc.points)
	}
	t.Cleanup(func() {
		t.Logf("crash points × scenarios covered: %d of %d (%d scenarios, 2 modes)", covered.Load(), total, len(scenarios))
	})
	for _, mode := range []string{"update", "run"} {
		for _, sc := range scenarios {
			for _, point := range sc.points {
				t.Run(fmt.Sprintf("%s/%s/%s", mode, sc.name, point), func(t *testing.T) {
					t.Parallel()
					crashAt(t, sc, mode == "run", point)
					covered.Add(1)
				})
			}
		}
	}
}

// setUp enables the host and installs sc's setup versions, one after the
// other; a daemon is stopped afterwards, so the test starts it again.
func (h *host) setUp(sc scenario) {
	if h.daemon {
		h.mustRun(h.args("enable")...) // records enabled; run installs
	}
	for i, v := range sc.setup {
		if i == 0 && !h.daemon {
			h.setPlan(v)
			h.mustRun(h.args("enable")...)
			continue
		}
		h.install(v)
	}
	if h.daemon {
		h.stopDaemon()
	}
}

func crashAt(t *testing.T, sc scenario, daemon bool, point string) {
	root := ""
	if sc.diskFull {
		root = smallDisk(t, 80<<20)
	}
	h := newHost(t, daemon, root)
	h.setUp(sc)

	// The crash.
	h.setPlan(sc.target)
	if !daemon {
		out, err := h.agentd(point, h.args("update")...)
		if !killed(err) {
			t.Fatalf("agentd update did not die at failpoint %q: %v\n%s", point, err, out)
		}
		// Started again, as the next cron run.
		out, err = h.agentd("", h.args("update")...)
		// A bad release fails again, or, when the crash came during its
		// rollback, the recovery finishes the rollback and the version
		// is not retried (exit 0, "not retrying": fleetctl retry).
		failed := err != nil || strings.Contains(out, "not retrying "+sc.target)
		if sc.bad != failed {
			t.Fatalf("agentd update after the crash: %v (bad release: %v)\n%s", err, sc.bad, out)
		}
	} else {
		h.startDaemon(point)
		select {
		case err := <-h.runErr:
			if !killed(err) {
				t.Fatalf("agentd run did not die at failpoint %q: %v\n%s", point, err, h.log())
			}
		case <-time.After(90 * time.Second):
			t.Fatalf("agentd run never reached failpoint %q\n%s", point, h.log())
		}
		h.run = nil
		h.startDaemon("")
		h.waitSettled(sc)
	}
	rollbackFrom := ""
	if sc.bad {
		rollbackFrom = sc.target
	}
	h.check(sc.want, rollbackFrom)
	if daemon {
		h.stopDaemon()
		if apps := h.apps(); len(apps) != 0 {
			t.Fatalf("app processes %+v left after agentd stopped", apps)
		}
	}
}

// waitSettled waits until the daemon has finished with the scenario's
// target: installed it, or recorded it as rolled back.
func (h *host) waitSettled(sc scenario) {
	h.t.Helper()
	natstest.Eventually(h.t, 90*time.Second, func() error {
		st, err := h.status()
		if err != nil {
			return err
		}
		done := st.ActiveVersion == sc.want && (!sc.bad || st.Rollback && st.RollbackFrom == sc.target)
		if !done {
			return fmt.Errorf("active %q rollback_from %q (%s)", st.ActiveVersion, st.RollbackFrom, st.Error)
		}
		if j, err := install.LoadJournal(h.tree()); err != nil || j != nil && j.Step != install.StepUndone {
			return fmt.Errorf("journal still open: %+v %v", j, err)
		}
		if n := len(h.apps()); n != 1 {
			return fmt.Errorf("%d app processes", n)
		}
		return nil
	})
}

func killed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// smallDisk mounts a tmpfs of size bytes for the test (the host's whole
// root, so a release that fills its database fills the disk update.yaml
// and the journal live on).
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("the disk-full scenario mounts a small tmpfs, which needs root (CI runs as root): %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}
