package natsutil_test

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
)

// TestOnReconnect: a connection that is up when Connect returns is not
// reported (the agent's first heartbeat goes out anyway; a kick on top of it
// was a second, concurrent beat), a first connect made late is, and so is
// every reconnect.
func TestOnReconnect(t *testing.T) {
	connect := func(t *testing.T, url string) (*atomic.Int32, *natstest.Buffer) {
		var calls atomic.Int32
		var logs natstest.Buffer
		nc, err := natsutil.Connect(natsutil.ConnectOptions{
			URL: url, Name: "agent", RetryFirst: true, NoBuffer: true,
			Log:         slog.New(slog.NewTextHandler(&logs, nil)),
			OnReconnect: func() { calls.Add(1) },
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return &calls, &logs
	}
	wantCalls := func(t *testing.T, calls *atomic.Int32, logs *natstest.Buffer, line string, n int32) {
		t.Helper()
		natstest.Eventually(t, 20*time.Second, func() error {
			if !strings.Contains(logs.String(), line) {
				return fmt.Errorf("no %q logged yet", line)
			}
			if got := calls.Load(); got != n {
				return fmt.Errorf("OnReconnect ran %d times, want %d", got, n)
			}
			return nil
		})
	}

	t.Run("up at once", func(t *testing.T) {
		s := natstest.Start(t)
		calls, logs := connect(t, s.URL())
		// The handler logs before it decides: once the line is there, a
		// call would have been made.
		wantCalls(t, calls, logs, "connected to NATS", 0)
		s.Restart()
		wantCalls(t, calls, logs, "reconnected to NATS", 1)
	})
	t.Run("up late", func(t *testing.T) {
		s := natstest.Start(t)
		s.Shutdown()
		calls, logs := connect(t, s.URL())
		s.Restart()
		wantCalls(t, calls, logs, "connected to NATS", 1)
		s.Restart()
		wantCalls(t, calls, logs, "reconnected to NATS", 2)
	})
}
