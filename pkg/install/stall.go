package install

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Download time limits: Fetcher's defaults. With them a server that stops
// answering costs a minute, a trickle under 64 KiB a minute (about 1 KiB/s,
// a day for a 100 MB release) costs a minute, and anything slower than the
// release's size per 30 minutes fails at 30 minutes. None of them loses the
// bytes received: the .part file stays for the next attempt to resume.
const (
	DefaultStallTimeout = time.Minute
	DefaultMinProgress  = 64 << 10
	DefaultDeadline     = 30 * time.Minute
)

// pace is the stall rule for one response, as a pure function of what
// arrived when: the response headers, and then every MinProgress bytes,
// restart a window of StallTimeout; a window that ends is a stall. Counting
// bytes per window rather than waiting for silence is what catches a server
// that keeps a connection alive with a byte now and then.
type pace struct {
	window  time.Duration
	min     int64
	mark    time.Time // when the window last restarted
	since   int64     // bytes since mark
	headers bool      // whether the response headers arrived
}

func newPace(window time.Duration, min int64, start time.Time) pace {
	return pace{window: window, min: min, mark: start}
}

// gotHeaders counts the response headers as progress.
func (p *pace) gotHeaders(now time.Time) {
	p.headers, p.mark, p.since = true, now, 0
}

// add counts n body bytes received at now.
func (p *pace) add(n int64, now time.Time) {
	p.since += n
	if p.since >= p.min {
		p.mark, p.since = now, 0
	}
}

// due is when the response is stalled unless the window restarts first.
func (p *pace) due() time.Time { return p.mark.Add(p.window) }

// err says how the response stalled.
func (p *pace) err() error {
	switch {
	case !p.headers:
		return fmt.Errorf("%w: no response within %v", ErrStalled, p.window)
	case p.since == 0:
		return fmt.Errorf("%w: nothing received for %v", ErrStalled, p.window)
	default:
		return fmt.Errorf("%w: %d bytes in %v, want at least %d", ErrStalled, p.since, p.window, p.min)
	}
}

// watch holds one request to the stall rule: it cancels the request's
// context, with the pace's error as the cause, once the pace is due.
type watch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	clk    Clock
	stop   chan struct{}
	exited chan struct{}
	once   sync.Once

	mu   sync.Mutex
	pace pace
}

// watch starts the stall rule for a request about to be sent under ctx;
// the request must use the returned watch's ctx, and close the watch when
// it is done with the response.
func (f *Fetcher) watch(ctx context.Context) *watch {
	clk := f.Clock.orReal()
	w := &watch{clk: clk, stop: make(chan struct{}), exited: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancelCause(ctx)
	window, min := f.StallTimeout, f.MinProgress
	if window == 0 {
		window = DefaultStallTimeout
	}
	if min <= 0 {
		min = DefaultMinProgress
	}
	w.pace = newPace(window, min, clk.Now())
	if window < 0 {
		close(w.exited) // no stall rule
		return w
	}
	go w.run()
	return w
}

func (w *watch) run() {
	defer close(w.exited)
	for {
		now := w.clk.Now()
		w.mu.Lock()
		wait, err := w.pace.due().Sub(now), error(nil)
		if wait <= 0 {
			err = w.pace.err()
		}
		w.mu.Unlock()
		if err != nil {
			w.cancel(err)
			return
		}
		select {
		case <-w.stop:
			return
		case <-w.ctx.Done():
			return
		case <-w.clk.After(wait):
		}
	}
}

func (w *watch) gotHeaders() {
	now := w.clk.Now()
	w.mu.Lock()
	w.pace.gotHeaders(now)
	w.mu.Unlock()
}

func (w *watch) add(n int) {
	now := w.clk.Now()
	w.mu.Lock()
	w.pace.add(int64(n), now)
	w.mu.Unlock()
}

// close ends the watch and releases the request's context.
func (w *watch) close() {
	w.once.Do(func() {
		close(w.stop)
		<-w.exited
		w.cancel(nil)
	})
}

// why replaces err, a request's failure, with the reason this package
// cancelled the request (a stall, the deadline, an abandoned install),
// which says more than "context canceled". A cancellation by the caller
// stays as it is.
func (w *watch) why(err error) error {
	c := context.Cause(w.ctx)
	if c == nil || errors.Is(c, context.Canceled) || errors.Is(c, context.DeadlineExceeded) {
		return err
	}
	return c
}

// watchedBody feeds a response body's progress to its watch.
type watchedBody struct {
	io.ReadCloser
	w *watch
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.add(n)
	}
	if err != nil && err != io.EOF {
		err = b.w.why(err)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	err := b.ReadCloser.Close()
	b.w.close()
	return err
}

// withDeadline bounds a whole Fetch by f.Deadline: ctx is cancelled with
// ErrDeadline as the cause when it passes. stop releases it.
func (f *Fetcher) withDeadline(ctx context.Context) (_ context.Context, stop func()) {
	d := f.Deadline
	if d == 0 {
		d = DefaultDeadline
	}
	ctx, cancel := context.WithCancelCause(ctx)
	if d < 0 {
		return ctx, func() { cancel(nil) }
	}
	clk := f.Clock.orReal()
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-done:
		case <-ctx.Done():
		case <-clk.After(d):
			cancel(fmt.Errorf("%w: not finished within %v", ErrDeadline, d))
		}
	}()
	return ctx, func() {
		close(done)
		<-exited
		cancel(nil)
	}
}
