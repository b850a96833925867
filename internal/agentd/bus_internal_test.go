package agentd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/install"
)

// fakeConn is a connection state the test sets.
type fakeConn struct{ down atomic.Bool }

func (c *fakeConn) state() (bool, string) {
	if c.down.Load() {
		return false, "RECONNECTING"
	}
	return true, "CONNECTED"
}

// TestBusLostRule (issue 15 point 5): the bus is lost after MaxMissedAcks
// heartbeats in a row without an ack, or at once when the connection is
// down; one ack in between starts the count again; an ack brings it back
// (with the connection up), and every change is logged once with its cause
// and time.
func TestBusLostRule(t *testing.T) {
	errTimeout := errors.New("nats: timeout")
	type step struct {
		do        string // "fail", "ack", "down", "up"
		wantLost  bool
		wantLog   string // a line logged by this step ("" none)
		advanceBy time.Duration
	}
	tests := []struct {
		name  string
		max   int
		steps []step
	}{
		{"two misses in a row", 2, []step{
			{do: "fail", advanceBy: 5 * time.Second},
			{do: "fail", wantLost: true, wantLog: `level=WARN msg="bus lost" cause="no heartbeat ack for 2 tries / 5s: nats: timeout"`},
			{do: "fail", wantLost: true, advanceBy: time.Second},
			{do: "ack", wantLog: `level=INFO msg="bus back" cause="heartbeat acked"`},
		}},
		{"one ack resets the count", 2, []step{
			{do: "fail"}, {do: "ack"}, {do: "fail"}, {do: "ack"}, {do: "fail"},
			{do: "fail", wantLost: true, wantLog: "no heartbeat ack for 2 tries"},
		}},
		{"three tries when asked", 3, []step{
			{do: "fail"}, {do: "fail"},
			{do: "fail", wantLost: true, wantLog: "no heartbeat ack for 3 tries"},
		}},
		{"connection down is lost at once", 2, []step{
			{do: "down", wantLost: true, wantLog: `cause="connection down (NATS client RECONNECTING)"`},
			{do: "fail", wantLost: true}, {do: "fail", wantLost: true},
			// Reconnected, but the last beats went unacked: still lost
			// until one is acked.
			{do: "up", wantLost: true},
			{do: "ack", wantLog: `cause="heartbeat acked"`},
		}},
		{"reconnect before any miss", 2, []step{
			{do: "down", wantLost: true, wantLog: "connection down"},
			{do: "up", wantLog: `msg="bus back" cause=connected`},
		}},
		{"an ack does not hide a down connection", 2, []step{
			{do: "down", wantLost: true, wantLog: "connection down"},
			{do: "ack", wantLost: true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			clk := clock.NewManual(start)
			var logs natstest.Buffer
			conn := &fakeConn{}
			w := newBusWatch(clk, slog.New(slog.NewTextHandler(&logs, nil)), tc.max, conn.state)
			wantSince := start
			for i, s := range tc.steps {
				before := logs.String()
				switch s.do {
				case "fail":
					w.acked(errTimeout)
				case "ack":
					w.acked(nil)
				case "down":
					conn.down.Store(true)
					w.check()
				case "up":
					conn.down.Store(false)
					w.check()
				}
				lost, since := w.state()
				if lost != s.wantLost {
					t.Fatalf("step %d (%s): lost = %v, want %v\nlog:\n%s", i, s.do, lost, s.wantLost, logs.String())
				}
				added := strings.TrimPrefix(logs.String(), before)
				switch {
				case s.wantLog == "" && added != "":
					t.Errorf("step %d (%s) logged without a change: %s", i, s.do, added)
				case s.wantLog != "" && strings.Count(added, "\n") != 1:
					t.Errorf("step %d (%s) logged %q, want one line with %q", i, s.do, added, s.wantLog)
				case s.wantLog != "" && !strings.Contains(added, s.wantLog):
					t.Errorf("step %d (%s) logged %q, want %q", i, s.do, added, s.wantLog)
				}
				if s.wantLog != "" {
					wantSince = clk.Now()
				}
				if !since.Equal(wantSince) {
					t.Errorf("step %d (%s): since %v, want %v (the last change)", i, s.do, since, wantSince)
				}
				clk.Advance(s.advanceBy)
			}
		})
	}
}

// TestFallbackStartsFallbackAfterLoss: the first find request goes out
// FallbackAfter after the bus was found lost, not earlier and not at the
// next poll after it, and stops when the bus is back (manual clock).
func TestFallbackStartsFallbackAfterLoss(t *testing.T) {
	var mu sync.Mutex
	var asked []time.Time
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clock.NewManual(start)
	find := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, clk.Now())
		mu.Unlock()
		http.Error(w, "controller not on the bus", http.StatusServiceUnavailable)
	}))
	t.Cleanup(find.Close)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(asked)
	}

	root := t.TempDir()
	uf := install.NewUpdateFile("blue")
	uf.Spec.Enabled = true
	if err := uf.Save(root); err != nil {
		t.Fatal(err)
	}
	const after, every = 2 * time.Minute, time.Hour
	a, err := New(Options{
		Root: root, Clock: clk, Log: natstest.Logger(t),
		FindURLs: []string{find.URL + httpfind.PathFind}, FallbackAfter: after, FindInterval: every,
		App: AppOptions{URLTemplate: "http://127.0.0.1:1/{{.Version}}.tar.gz", BinDir: filepath.Join(root, "bin"), Process: "app"},
	})
	if err != nil {
		t.Fatal(err)
	}
	conn := &fakeConn{}
	a.bus = newBusWatch(clk, a.o.Log, DefaultMaxMissedAcks, conn.state)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.fallbackLoop(ctx, make(chan decision, 1)) }()
	t.Cleanup(func() { cancel(); <-done })

	step := func(d time.Duration) {
		t.Helper()
		if !clk.WaitPending(1, ctx.Done()) {
			t.Fatal("fallback loop armed no timer")
		}
		clk.Advance(d)
	}
	// Connected for a while: nobody is asked.
	for range 10 {
		step(7 * time.Second)
	}
	// Lost at an odd moment, off the loop's polling grid.
	clk.Advance(300 * time.Millisecond)
	a.bus.acked(errors.New("nats: timeout"))
	a.bus.acked(errors.New("nats: timeout"))
	lost, since := a.bus.state()
	if !lost || !since.Equal(clk.Now()) {
		t.Fatalf("bus lost %v since %v, want lost since now (%v)", lost, since, clk.Now())
	}
	for clk.Now().Before(since.Add(after)) {
		step(min(time.Second, since.Add(after).Sub(clk.Now())))
		if clk.Now().Before(since.Add(after)) && count() > 0 {
			t.Fatalf("find asked %v after the loss, before --fallback-after (%v)", clk.Now().Sub(since), after)
		}
	}
	natstest.Eventually(t, 10*time.Second, func() error {
		if count() != 1 {
			return fmt.Errorf("find asked %d times at %v after the loss, want once", count(), clk.Now().Sub(since))
		}
		return nil
	})
	mu.Lock()
	first := asked[0]
	mu.Unlock()
	if got := first.Sub(since); got != after {
		t.Errorf("first find %v after the loss, want exactly %v", got, after)
	}
	natstest.Eventually(t, 10*time.Second, func() error {
		if !a.fallback.Load() {
			return errors.New("not in fallback after asking")
		}
		return nil
	})
	// An ack: the bus is back and the fallback ends at the next poll.
	a.bus.acked(nil)
	step(time.Second)
	natstest.Eventually(t, 10*time.Second, func() error {
		if a.fallback.Load() {
			return errors.New("still in fallback with the bus back")
		}
		return nil
	})

	// A second outage, well within FindInterval of the last ask: it too
	// asks FallbackAfter after it starts.
	step(time.Second)
	conn.down.Store(true)
	a.bus.check()
	lost, since = a.bus.state()
	if !lost {
		t.Fatal("bus not lost with the connection down")
	}
	for clk.Now().Before(since.Add(after)) {
		step(min(time.Second, since.Add(after).Sub(clk.Now())))
	}
	natstest.Eventually(t, 10*time.Second, func() error {
		if count() != 2 {
			return fmt.Errorf("find asked %d times in all, %v into the second outage; want a second ask at %v",
				count(), clk.Now().Sub(since), after)
		}
		return nil
	})
	mu.Lock()
	second := asked[1]
	mu.Unlock()
	if got := second.Sub(since); got != after {
		t.Errorf("second outage: first find %v after the loss, want exactly %v", got, after)
	}
}
