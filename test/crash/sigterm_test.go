package crash_test

// Being stopped is never the release's fault (issue 25, point 3): agentd
// stopped with SIGTERM (systemctl stop, a reboot) at any step of an install
// or a downgrade must never mark the good version it was installing rolled
// back, and the next start must bring the host to the desired version.
//
// Where a step runs a child (systemctl stop/restart/is-active, the health
// command), the child hangs there (hang-<verb>, crash_test.go) and the
// SIGTERM lands while it runs; elsewhere agentd holds at the step (failpoint
// "hold:<step>") until the SIGTERM. The SIGTERM goes either to agentd alone
// (its context kills the child) or, as systemd stops a service, to every
// process of agentd's session (its "control group": the child, and with
// --app the app too), children first, so that a child may die of it before
// agentd has seen its own.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/install"
)

// sigtermScenarios: a good upgrade and a downgrade (which restores the
// target's database), each stopped at every journal step it goes through.
var sigtermScenarios = []scenario{
	{name: "good", setup: []string{"1.0.0"}, target: "2.0.0", want: "2.0.0",
		points: []string{"fetch", "backup", "swap", "start", "health", "commit"}},
	{name: "downgrade", setup: []string{"1.0.0", "2.0.0"}, target: "1.0.0", want: "1.0.0",
		points: []string{"fetch", "backup", "restore-target-db", "swap", "start", "health", "commit"}},
}

// hangVerb is the child that runs at point and can be made to hang there
// ("": none).
func hangVerb(mode, point string) string {
	if mode == "run" {
		// agentd supervises the app itself: the health command is the
		// only child an install waits for (made to hang once the app
		// has looked healthy, while min_healthy_time runs).
		if point == "health" {
			return "health"
		}
		return ""
	}
	switch point {
	case "restore-target-db":
		return "stop"
	case "start":
		return "restart"
	case "health":
		return "is-active"
	}
	return ""
}

// TestSIGTERMAtEveryStep stops agentd with SIGTERM at every journal step of
// an install and of a downgrade, as 'agentd update' and as 'agentd run'
// (supervising the app, or with a systemd unit): the version is never
// marked rolled back, and after a restart the host runs it. At each step
// agentd is held there (failpoint hold:<step>) and its session gets the
// SIGTERM; where the step runs a child, the child also hangs there and the
// SIGTERM reaches it running, sent to the session or to agentd alone.
func TestSIGTERMAtEveryStep(t *testing.T) {
	for _, mode := range []string{"update", "run", "run-systemd"} {
		for _, sc := range sigtermScenarios {
			for _, point := range sc.points {
				type how struct {
					verb   string // "": hold at the step
					cgroup bool
				}
				hows := []how{{"", true}}
				if verb := hangVerb(mode, point); verb != "" {
					hows = append(hows, how{verb, true}, how{verb, false})
				}
				for _, hw := range hows {
					name := "hold"
					if hw.verb != "" {
						name = "child-" + hw.verb
					}
					if hw.cgroup {
						name += "/session"
					} else {
						name += "/agentd"
					}
					t.Run(fmt.Sprintf("%s/%s/%s/%s", mode, sc.name, point, name), func(t *testing.T) {
						t.Parallel()
						sigtermAt(t, sc, mode, point, hw.verb, hw.cgroup)
					})
				}
			}
		}
	}
}

func sigtermAt(t *testing.T, sc scenario, mode, point, verb string, cgroup bool) {
	daemon := mode != "update"
	h := newHost(t, daemon, "")
	h.unit = mode == "run-systemd"
	h.setUp(sc)

	h.setPlan(sc.target)
	held := filepath.Join(h.sysd, "in-hold")
	fp, reached := "hold:"+point, held
	if verb != "" {
		_ = os.Remove(filepath.Join(h.sysd, "healthy"))
		if err := os.WriteFile(filepath.Join(h.sysd, "hang-"+verb), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		fp, reached = "", filepath.Join(h.sysd, "in-"+verb)
	}
	cmd := "update"
	if daemon {
		cmd = "run"
	}
	c := h.command(fp, h.args(cmd)...)
	c.Env = append(c.Env, install.FailpointHeldEnv+"="+held)
	// A session of its own: what systemd's control group of agentd's unit
	// would hold (the stand-in's app runs in yet another, as a unit of
	// its own would).
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	logf, err := os.OpenFile(filepath.Join(h.sysd, "agentd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, "$ agentd %s (SIGTERM at %s, cgroup %v)\n", cmd, point, cgroup)
	c.Stdout, c.Stderr = logf, logf
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait(); logf.Close() }()
	t.Cleanup(func() {
		if c.ProcessState == nil {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})

	// At the step (with the child running, if it has one).
	natstest.Eventually(t, 90*time.Second, func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("agentd %s ended (%v) before reaching %s\n%s", cmd, err, point, h.log())
		default:
		}
		if _, err := os.Stat(reached); err != nil {
			return fmt.Errorf("agentd has not reached %s yet", point)
		}
		return nil
	})

	// Stopped.
	if cgroup {
		for _, pid := range session(c.Process.Pid) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
	_ = syscall.Kill(c.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() {
			t.Fatalf("agentd %s died of %v instead of stopping\n%s", cmd, ee, h.log())
		}
		if daemon && err != nil {
			t.Fatalf("agentd run ended with %v on SIGTERM, want a clean stop\n%s", err, h.log())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("agentd %s did not stop on SIGTERM at %s\n%s", cmd, point, h.log())
	}

	// Never the release's fault.
	st, err := h.status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Rollback || st.ErrorClass == install.ClassRelease {
		t.Fatalf("SIGTERM at %s: update.yaml says rollback %v from %q, error class %q (%s): the good release %s was blamed for agentd being stopped\n%s",
			point, st.Rollback, st.RollbackFrom, st.ErrorClass, st.Error, sc.target, h.log())
	}
	if j, err := install.LoadJournal(h.tree()); err != nil || j != nil && j.Bad {
		t.Fatalf("SIGTERM at %s: journal %+v (%v) marks the release bad\n%s", point, j, err, h.log())
	}

	// Started again: the host ends on the desired version.
	if daemon {
		started := strings.Count(h.log(), "agent started")
		h.startDaemon("")
		h.waitActive(sc.want)
		// Up (its signal handler set), before it is stopped again.
		natstest.Eventually(t, 30*time.Second, func() error {
			if strings.Count(h.log(), "agent started") == started {
				return errors.New("the restarted agentd run has not started yet")
			}
			return nil
		})
	} else {
		out, err := h.agentd("", h.args("update")...)
		if err != nil {
			t.Fatalf("agentd update after the SIGTERM: %v\n%s\n%s", err, out, h.log())
		}
	}
	h.check(sc.want, "")
	if daemon {
		h.stopDaemon()
	}
}

// session lists the other live processes of the session leader's session:
// what systemd's SIGTERM to agentd's control group would reach.
func session(leader int) []int {
	var out []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(data), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		// state ppid pgrp session
		if len(f) < 4 || f[0] == "Z" || f[3] != strconv.Itoa(leader) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != leader {
			out = append(out, pid)
		}
	}
	return out
}
