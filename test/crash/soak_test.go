package crash_test

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// TestSoakRandomKills installs versions one after another on one host,
// killing agentd (SIGKILL) at a random instant of each install, then runs
// it again, and checks the host after every one: 0 inconsistent hosts.
// The targets mix upgrades, a bad release, downgrades and re-installs.
// -crash.soak sets the number of installs (CI runs a few; the issue's
// figure is ≥ 100).
func TestSoakRandomKills(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	h := newHost(t, false, "")
	h.setPlan("1.0.0")
	h.mustRun(h.args("enable")...)
	h.check("1.0.0", "")

	targets := []string{"2.0.0", "1.0.0", "3.0.0", "2.0.0", "1.0.0"}
	killedN, span := 0, 2500*time.Millisecond
	for i := range *soakInstalls {
		before, err := h.status()
		if err != nil {
			t.Fatal(err)
		}
		target := targets[rnd.IntN(len(targets))]
		for target == before.ActiveVersion {
			target = targets[rnd.IntN(len(targets))]
		}
		h.setPlan(target)
		// Kill anywhere in [0, span): span follows how long an install
		// that was not killed took (fetch, backup, swap, start, a health
		// check over a second), so most kills land inside one.
		delay := time.Duration(rnd.Int64N(int64(span)))
		started := time.Now()
		cmd := h.command("", h.args("update")...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		timer := time.AfterFunc(delay, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
		err = cmd.Wait()
		timer.Stop()
		if killed(err) {
			killedN++
		} else if err == nil {
			span = max(time.Since(started), 500*time.Millisecond)
		}
		// What the host must be on now: the target, unless it is the bad
		// release (rolled back) or one this host rolled back from before;
		// nothing changes when it is already on the target.
		want, rollbackFrom := target, ""
		switch {
		case target == before.ActiveVersion:
			want = before.ActiveVersion
			if before.Rollback {
				rollbackFrom = before.RollbackFrom
			}
		case target == "3.0.0" || rolledBackFrom(before, target):
			want, rollbackFrom = before.ActiveVersion, target
		}
		if out, err := h.agentd("", h.args("update")...); err != nil && rollbackFrom != target {
			t.Fatalf("install %d (%s → %s, killed after %v): agentd update after the kill: %v\n%s", i, before.ActiveVersion, target, delay, err, out)
		}
		t.Run(fmt.Sprintf("install-%d-%s-to-%s", i, before.ActiveVersion, target), func(t *testing.T) {
			hh := *h
			hh.t = t
			hh.check(want, rollbackFrom)
		})
		if t.Failed() {
			t.Fatalf("host inconsistent after install %d (killed after %v)", i, delay)
		}
	}
	t.Logf("%d installs, %d killed by SIGKILL at a random instant, 0 inconsistent hosts", *soakInstalls, killedN)
}

func rolledBackFrom(st install.Status, v string) bool { return st.Rollback && st.RollbackFrom == v }
