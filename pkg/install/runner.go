package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Runner starts and stops the app that the bin dir's links point to.
type Runner interface {
	// Restart (re)starts the app on whatever the links point to now.
	Restart(ctx context.Context) error
	// Stop stops the app and waits until it is gone.
	Stop(ctx context.Context) error
	// Alive is nil while the app runs, and says why not otherwise.
	Alive(ctx context.Context) error
}

// SystemdRunner runs the app as a systemd unit.
type SystemdRunner struct {
	Unit string
}

func (s *SystemdRunner) systemctl(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "systemctl", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("systemctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Restart runs systemctl restart.
func (s *SystemdRunner) Restart(ctx context.Context) error {
	return s.systemctl(ctx, "restart", s.Unit)
}

// Stop runs systemctl stop.
func (s *SystemdRunner) Stop(ctx context.Context) error { return s.systemctl(ctx, "stop", s.Unit) }

// Alive runs systemctl is-active.
func (s *SystemdRunner) Alive(ctx context.Context) error {
	return s.systemctl(ctx, "is-active", "--quiet", s.Unit)
}

// ProcessRunner runs the app as a child process of agentd, for hosts and
// containers without systemd. The child gets its own process group, so Stop
// reaches anything it started.
type ProcessRunner struct {
	Path   string
	Args   []string
	Env    []string
	Stdout io.Writer
	Stderr io.Writer
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	StopTimeout time.Duration

	mu   sync.Mutex
	cmd  *exec.Cmd
	rec  appRecord     // cmd's process group
	done chan struct{} // closed when cmd exits
	exit error         // cmd.Wait's result once done
}

func (p *ProcessRunner) stopTimeout() time.Duration {
	if p.StopTimeout == 0 {
		return 10 * time.Second
	}
	return p.StopTimeout
}

// Restart stops the child if it runs and starts it again from Path (which
// resolves through the bin dir's link to the active version).
func (p *ProcessRunner) Restart(ctx context.Context) error {
	if err := p.Stop(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = p.Env, p.Stdout, p.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Path, err)
	}
	rec := recordFor(cmd.Process.Pid, p.Path, time.Now())
	done := make(chan struct{})
	p.cmd, p.rec, p.done, p.exit = cmd, rec, done, nil
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exit = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Stop ends the child's whole process group: SIGTERM to every member, then
// SIGKILL to what remains after StopTimeout (default 10s), and waits until
// no member remains, the app's own children included (they can outlive the
// leader).
func (p *ProcessRunner) Stop(ctx context.Context) error {
	p.mu.Lock()
	cmd, rec, done := p.cmd, p.rec, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := endGroup(ctx, rec, p.stopTimeout(), done); err != nil {
		return fmt.Errorf("stop %s: %w", p.Path, err)
	}
	return nil
}

// Alive is nil while the child runs.
func (p *ProcessRunner) Alive(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return errors.New("not started")
	}
	select {
	case <-p.done:
		if p.exit == nil {
			return fmt.Errorf("%s exited", p.Path)
		}
		return fmt.Errorf("%s exited: %w", p.Path, p.exit)
	default:
		return nil
	}
}

// Pid is the child's pid, 0 when none runs.
func (p *ProcessRunner) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
