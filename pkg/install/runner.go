package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
	// Systemctl is systemctl's absolute path; "" means the first found in
	// SystemPath (LookTool). Never looked up in PATH: a bin dir there may
	// hold a release's own systemctl.
	Systemctl string
	// Journalctl is journalctl's absolute path, for the unit's last lines
	// at a failure (Output); "" means the first found in SystemPath.
	Journalctl string

	mu        sync.Mutex
	restarted time.Time // when Restart last ran: Output reads the journal since
}

func (s *SystemdRunner) systemctl(ctx context.Context, args ...string) error {
	path := s.Systemctl
	if path == "" {
		var err error
		if path, err = LookTool(ToolSystemctl); err != nil {
			return fmt.Errorf("systemctl %s: %w", strings.Join(args, " "), err)
		}
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("systemctl %q: want an absolute path", path)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = ChildEnv(nil)
	out, err := cmd.CombinedOutput()
	if err != nil {
		// Killed because agentd is stopping (its context, or systemd's
		// SIGTERM to the whole control group): an interruption, not a
		// failure of the app (stopping.go).
		return interruption(ctx, fmt.Errorf("systemctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out))))
	}
	return nil
}

// Restart runs systemctl restart.
func (s *SystemdRunner) Restart(ctx context.Context) error {
	s.mu.Lock()
	s.restarted = time.Now()
	s.mu.Unlock()
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
//
// The group is owned: with PIDFile set, the runner records it there (pid,
// process group, and the leader's start time) as soon as it starts, and
// removes the record only once no process of the group remains. The record
// is first written before the app starts, with a random instance id that
// the app gets in its environment (FLEETWAVE_APP_INSTANCE), so an agentd
// killed between the start and the pid's record leaves the app findable. An agentd
// killed with SIGKILL cannot stop its app; the next one finds the record
// and stops that app (StopOrphan, which Restart also calls) before it starts
// its own, so one copy runs. Only a group whose leader still has the
// recorded start time (and group) is signalled: a pid handed to an
// unrelated process since is never killed. That check needs Linux's /proc:
// elsewhere a recorded orphan is only logged, and Stop ends the members of
// its own child's group only while the leader has not been reaped.
type ProcessRunner struct {
	Path string
	Args []string
	// Env is the app's environment; nil means agentd's own, with PATH set
	// to SystemPath (ChildEnv).
	Env []string
	// Stdout and Stderr receive the app's output (nil: discarded), through
	// pipes agentd reads, which also keep its last lines for a failure's
	// report (Output). When they are the same writer the app gets one pipe
	// for both, so its last lines are in the order it wrote them.
	Stdout io.Writer
	Stderr io.Writer
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	StopTimeout time.Duration
	// PIDFile, when set, records the running app's process group (JSON,
	// see appRecord), so that an agentd started after this one died finds
	// and stops the app this one left running.
	PIDFile string
	// Log receives what StopOrphan did; nil discards it.
	Log *slog.Logger

	// out keeps the end of the app's stdout and stderr since it was last
	// started (Output); copying counts the goroutines copying them.
	out     tail
	copying *sync.WaitGroup

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

func (p *ProcessRunner) log() *slog.Logger {
	if p.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Log
}

// Restart stops the child if it runs, and any app an earlier agentd left
// running (StopOrphan), and starts it again from Path (which resolves
// through the bin dir's link to the active version).
func (p *ProcessRunner) Restart(ctx context.Context) error {
	if err := p.Stop(ctx); err != nil {
		return err
	}
	if err := p.StopOrphan(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.Path, p.Args...)
	// The app writes into pipes agentd reads, on to Stdout and Stderr and
	// into out: what it printed last is kept for a failure's report
	// (Output). Pipes of our own, not exec's, so that Wait does not wait
	// for a child of the app that keeps them open.
	p.out.reset()
	copying := new(sync.WaitGroup)
	var pipes []*os.File
	closePipes := func() {
		for _, f := range pipes {
			f.Close()
		}
	}
	// One pipe when both go to the same place (agentd's log), so that
	// the lines are kept in the order the app wrote them; two pipes are
	// read in whatever order they are.
	streams := []io.Writer{p.Stdout, p.Stderr}
	if sameWriter(p.Stdout, p.Stderr) {
		streams = streams[:1]
	}
	for _, w := range streams {
		f, err := teePipe(w, &p.out, copying)
		if err != nil {
			closePipes()
			return fmt.Errorf("start %s: %w", p.Path, err)
		}
		pipes = append(pipes, f)
	}
	cmd.Stdout, cmd.Stderr = pipes[0], pipes[len(pipes)-1]
	// No Pdeathsig: Linux sends it when the OS thread that forked the
	// child exits, not the process, and the Go runtime retires threads
	// at will (golang.org/issue/27505), so it can kill a healthy agentd's
	// app; it reaches only the leader, not the app's own children; and it
	// is Linux-only. The record in PIDFile is what cleans up after a
	// killed agentd instead.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	instance := newInstance()
	env := p.Env
	if env == nil {
		env = ChildEnv(nil)
	}
	cmd.Env = append(slices.Clip(env), instanceEnv+"="+instance)
	now := time.Now()
	if p.PIDFile != "" {
		starting := appRecord{Instance: instance, BootID: bootID(), Path: p.Path, StartedAt: now.UTC()}
		if err := writeRecord(p.PIDFile, starting); err != nil {
			closePipes()
			return fmt.Errorf("start %s: record it: %w", p.Path, err)
		}
	}
	err := cmd.Start()
	closePipes() // the app holds them now; the copies end when it is gone
	if err != nil {
		if p.PIDFile != "" {
			_ = removeRecord(p.PIDFile, instance)
		}
		return fmt.Errorf("start %s: %w", p.Path, err)
	}
	rec := recordFor(cmd.Process.Pid, p.Path, now)
	rec.Instance = instance
	if p.PIDFile != "" {
		if err := writeRecord(p.PIDFile, rec); err != nil {
			// Leave no app running that the record does not name: the
			// instance alone only covers a crash in this very window.
			_ = unix.Kill(-rec.PGID, unix.SIGKILL)
			_ = cmd.Wait()
			_ = removeRecord(p.PIDFile, instance)
			return fmt.Errorf("start %s: record its process group: %w", p.Path, err)
		}
	}
	done := make(chan struct{})
	p.cmd, p.rec, p.done, p.exit, p.copying = cmd, rec, done, nil, copying
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
// leader). Then it removes the record in PIDFile. If the group cannot be
// ended, the record stays for the next start to try again.
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
	if p.PIDFile != "" {
		return removeRecord(p.PIDFile, rec.Instance)
	}
	return nil
}

// StopOrphan stops the app an earlier agentd started and did not stop (it
// was killed, or crashed): the process group recorded in PIDFile, if it
// still runs and is still the recorded one, the same way Stop ends its own.
// Then it removes the record. A record of a group that is gone, or of an
// earlier boot, is just removed. agentd calls it before anything else acts
// on the app; Restart calls it too.
func (p *ProcessRunner) StopOrphan(ctx context.Context) error {
	if p.PIDFile == "" {
		return nil
	}
	rec, ok, err := readRecord(p.PIDFile)
	if err != nil || !ok {
		return err
	}
	p.mu.Lock()
	own := p.cmd != nil && p.rec.Instance == rec.Instance
	p.mu.Unlock()
	if own {
		return nil // this runner's child: Stop's to end
	}
	log := p.log().With(slog.String("path", rec.Path), slog.Time("started_at", rec.StartedAt))
	var groups []appRecord
	switch {
	case rec.BootID != "" && rec.BootID != bootID():
		// Recorded before the host rebooted: that group is gone.
	case !rec.verifiable():
		log.Warn("an earlier agentd recorded its app, but this system cannot tell whether that pid is still the app; not stopping it",
			slog.Int("pid", rec.PID))
	case rec.starting():
		// That agentd was killed between starting the app and
		// recording its pid: the app carries the instance.
		if groups, err = instanceGroups(rec); err != nil {
			return fmt.Errorf("find the app an earlier agentd started as %s: %w", rec.Instance, err)
		}
	default:
		groups = []appRecord{rec}
	}
	for _, g := range groups {
		alive, err := groupAlive(g, nil)
		if err != nil {
			return fmt.Errorf("stop the app an earlier agentd left running (pid %d): %w", g.PID, err)
		}
		if !alive {
			continue
		}
		if err := endGroup(ctx, g, p.stopTimeout(), nil); err != nil {
			return fmt.Errorf("stop the app an earlier agentd left running (pid %d): %w", g.PID, err)
		}
		log.Warn("stopped an app left running by an earlier agentd", slog.Int("pid", g.PID))
	}
	return removeRecord(p.PIDFile, rec.Instance)
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
			return fmt.Errorf("%s %w", p.Path, errExitedCleanly)
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
