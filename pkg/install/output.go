package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What a host keeps of the app's output at a failure (Status.ErrorOutput):
// its last OutputLines lines, at most OutputBytes bytes of them. The agent
// heartbeats it (error_output), so that an operator reads why the app
// failed where the failure is shown, not only in the host's logs.
const (
	OutputLines = 10
	OutputBytes = 2048
)

// OutputSource is a Runner that can say what the app last printed: the
// last lines of its stdout and stderr since it was last (re)started, or
// of its unit's journal. Installer asks it when a new version fails to
// start or to become healthy.
type OutputSource interface {
	// Output is the app's last output lines ("" when it printed none or
	// they cannot be read), raw: not yet cut or cleaned.
	Output(ctx context.Context) string
}

// LastLines is the end of out: its last OutputLines lines (a trailing
// newline ends the last), at most OutputBytes bytes of them, the first
// cut at a byte (and later at a rune, by whoever cleans it) and marked
// with "...". "" when out is only white space.
func LastLines(out string) string {
	out = strings.TrimRight(out, " \t\r\n")
	if strings.TrimSpace(out) == "" {
		return ""
	}
	for n, i := 0, len(out); ; {
		j := strings.LastIndexByte(out[:i], '\n')
		if j < 0 {
			break
		}
		if n++; n == OutputLines {
			out = out[j+1:]
			break
		}
		i = j
	}
	if len(out) > OutputBytes {
		out = "..." + out[len(out)-(OutputBytes-3):]
	}
	return out
}

// outputError carries the output of a failed health command, for
// Installer to keep when the app itself printed nothing.
type outputError struct {
	err    error
	output string
}

func (e *outputError) Error() string { return e.err.Error() }
func (e *outputError) Unwrap() error { return e.err }

// failureOutput is what to keep of the app's output for a rollback
// because of cause: the app's own last lines (the runner's), else the
// failing health command's output; "" when neither said anything.
func (in *Installer) failureOutput(ctx context.Context, cause error) string {
	var oe *outputError
	if in.Script != nil && !errors.Is(cause, ErrUnhealthy) && errors.As(cause, &oe) {
		// The install command's own last lines (apt's error).
		return LastLines(oe.output)
	}
	if src, ok := in.Runner.(OutputSource); ok {
		// Bounded: a journal that does not answer must not hold the
		// rollback.
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		out := LastLines(src.Output(octx))
		cancel()
		if out != "" {
			return out
		}
	}
	if errors.As(cause, &oe) {
		return LastLines(oe.output)
	}
	return ""
}

// tail keeps the end of what is written to it: enough for OutputLines
// lines of up to OutputBytes bytes. Safe for concurrent use (the app's
// stdout and stderr write to one).
type tail struct {
	mu  sync.Mutex
	buf []byte
}

// tailKeep is how much tail keeps: twice what is sent, so that a cut at a
// line boundary still leaves OutputBytes.
const tailKeep = 2 * OutputBytes

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= tailKeep {
		t.buf = append(t.buf[:0], p[len(p)-tailKeep:]...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*tailKeep {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailKeep:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

func (t *tail) reset() {
	t.mu.Lock()
	t.buf = t.buf[:0]
	t.mu.Unlock()
}

// teePipe is a pipe whose write end the app gets as its stdout or
// stderr, and whose read end copies to w (agentd's own stream, nil: none)
// and to t, until every holder of the write end has closed it.
func teePipe(w io.Writer, t *tail, done *sync.WaitGroup) (*os.File, error) {
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	done.Add(1)
	go func() {
		defer done.Done()
		defer r.Close()
		dst := io.Writer(t)
		if w != nil {
			dst = io.MultiWriter(t, ignoreErrors{w})
		}
		_, _ = io.Copy(dst, r)
	}()
	return pw, nil
}

// sameWriter reports whether a and b are the same writer (a writer whose
// type cannot be compared is not the same as any).
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// ignoreErrors is w with its errors dropped: agentd's own stdout going
// away (a closed terminal) must not stop the copy into the tail, nor the
// app's writes.
type ignoreErrors struct{ w io.Writer }

func (i ignoreErrors) Write(p []byte) (int, error) {
	_, _ = i.w.Write(p)
	return len(p), nil
}

// Output is the app's last output since Restart started it: its stdout
// and stderr, as one stream. When the app has exited it first waits (up
// to ctx, at most a second) for what it wrote last to be read.
func (p *ProcessRunner) Output(ctx context.Context) string {
	p.mu.Lock()
	done, copying := p.done, p.copying
	p.mu.Unlock()
	if done != nil && copying != nil {
		select {
		case <-done:
			wait := make(chan struct{})
			go func() { copying.Wait(); close(wait) }()
			select {
			case <-wait:
			case <-ctx.Done():
			case <-time.After(time.Second): // a child that left the group holds the pipe
			}
		default:
		}
	}
	return p.out.String()
}

// Output is the unit's last journal lines since the runner last
// restarted it (journalctl --unit U --since @T --lines OutputLines
// --output cat), or "" when journalctl is not there or fails.
func (s *SystemdRunner) Output(ctx context.Context) string {
	s.mu.Lock()
	since := s.restarted
	s.mu.Unlock()
	path := s.Journalctl
	if path == "" {
		var err error
		if path, err = LookTool(ToolJournalctl); err != nil {
			return ""
		}
	}
	if !filepath.IsAbs(path) {
		return ""
	}
	args := []string{"--unit", s.Unit, "--lines", strconv.Itoa(OutputLines), "--output", "cat", "--no-pager", "--quiet"}
	if !since.IsZero() {
		args = append(args, "--since", "@"+strconv.FormatInt(since.Unix(), 10))
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = ChildEnv(nil)
	var out bytes.Buffer
	cmd.Stdout = &limitWriter{w: &out, n: 64 << 10}
	if err := cmd.Run(); err != nil {
		return ""
	}
	return out.String()
}

// limitWriter writes the first n bytes to w and drops the rest.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.n -= k
		if _, err := l.w.Write(p[:k]); err != nil {
			return 0, fmt.Errorf("keep output: %w", err)
		}
	}
	return len(p), nil
}
