package install

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Health says how to tell that the app is healthy. With neither Command nor
// URL set, healthy means "the app stays up".
type Health struct {
	// Command is run; exit status 0 is healthy. Command[0] is an absolute
	// path, or a name found in SystemPath (never in PATH, where a bin dir
	// may hold the release's own); the command runs with PATH=SystemPath.
	Command []string
	// URL is fetched; a 2xx answer is healthy.
	URL string
	// Interval between probes (default 1s).
	Interval time.Duration
}

// Clock is what health waiting needs of time; agentd passes its injected
// clock, tests a fast or manual one.
type Clock struct {
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
}

func (c Clock) orReal() Clock {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.After == nil {
		c.After = time.After
	}
	return c
}

// WaitHealthy waits for the app to become healthy within timeout and then to
// stay healthy, with the runner reporting it alive, for minHealthy. Any
// failure after it first looked healthy, or the app exiting, fails at once:
// a version that flaps is not healthy. The last probe before timeout runs
// at timeout, and no probe before the first healthy answer runs past
// timeout by more than an interval (one that hangs is cut off), so a failed
// wait ends by then.
func WaitHealthy(ctx context.Context, h Health, r Runner, timeout, minHealthy time.Duration, clk Clock) error {
	clk = clk.orReal()
	interval := h.Interval
	if interval == 0 {
		interval = time.Second
	}
	start := clk.Now()
	var healthySince time.Time
	// answered is the last probe failure that was not cut off by its
	// deadline: when the last probe, which gets what is left of timeout
	// (at least an interval), is cut off on a loaded host, the failure
	// reported is the one the check itself gave (its output included).
	var answered error
	for {
		now := clk.Now()
		err := r.Alive(ctx)
		if err != nil {
			// An app or systemctl killed because agentd is stopping says
			// nothing about the version (stopping.go).
			if ierr := interruption(ctx, err); ierr != err {
				return ierr
			}
			return fmt.Errorf("%w: %v", ErrUnhealthy, err)
		}
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if healthySince.IsZero() {
			// Until it first looks healthy, a probe may run until timeout,
			// or for one interval if that is later (the last probe starts
			// at timeout): a health URL or command that hangs must not
			// hold the rollback for the probe's own timeout.
			pctx, cancel = context.WithTimeout(ctx, max(timeout-now.Sub(start), interval))
		}
		err = h.probe(pctx)
		timedOut := ctx.Err() == nil && pctx.Err() != nil
		cancel()
		if err != nil && !timedOut {
			// A probe cut short by agentd stopping (not by its own
			// deadline, which is the version's failure).
			if ierr := interruption(ctx, err); ierr != err {
				return ierr
			}
		}
		if err != nil && !timedOut {
			answered = err
		}
		switch {
		case err == nil && healthySince.IsZero():
			healthySince = now
		case err != nil && !healthySince.IsZero():
			return withOutput(fmt.Errorf("%w: failed after %s healthy: %v", ErrUnhealthy, now.Sub(healthySince).Round(time.Millisecond), err), err)
		case err != nil && clk.Now().Sub(start) >= timeout:
			if timedOut && answered != nil {
				err = answered
			}
			return withOutput(fmt.Errorf("%w: not healthy within health_timeout %s: %v", ErrUnhealthy, timeout, err), err)
		}
		if !healthySince.IsZero() && now.Sub(healthySince) >= minHealthy {
			return nil
		}
		wait := interval
		if healthySince.IsZero() {
			wait = min(wait, timeout-clk.Now().Sub(start)) // the last probe at timeout, not after
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-clk.After(wait):
		}
	}
}

func (h Health) probe(ctx context.Context) error {
	switch {
	case len(h.Command) > 0:
		prog := h.Command[0]
		if !filepath.IsAbs(prog) {
			p, err := LookTool(prog)
			if err != nil {
				return fmt.Errorf("health command: %w", err)
			}
			prog = p
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, prog, h.Command[1:]...)
		cmd.Env = ChildEnv(nil)
		// In a group of its own, all of which is killed when ctx ends: a
		// shell's child (curl …) would otherwise live on, and hold the
		// output pipe open, for as long as it hangs.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error {
			if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != syscall.ESRCH {
				return err
			}
			return os.ErrProcessDone
		}
		cmd.WaitDelay = time.Second // a child that left the group and kept the pipe
		out, err := cmd.CombinedOutput()
		if err != nil {
			return &outputError{
				err:    fmt.Errorf("health command %s: %w: %s", strings.Join(h.Command, " "), err, truncate(strings.TrimSpace(string(out)), 200)),
				output: string(out),
			}
		}
	case h.URL != "":
		client := &http.Client{Timeout: 10 * time.Second}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("health URL: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fmt.Errorf("health URL %s: %s", h.URL, resp.Status)
		}
	}
	return nil
}

// withOutput is err carrying the output probeErr carries, if any: the
// probe's error is quoted (%v), not wrapped, so that its class never
// leaks into the health failure's (a refused connection is the release's
// fault here, not the network's).
func withOutput(err, probeErr error) error {
	var oe *outputError
	if errors.As(probeErr, &oe) {
		return &outputError{err: err, output: oe.output}
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
