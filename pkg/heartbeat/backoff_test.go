package heartbeat_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestRetryBackoffStaysBounded: during a long outage every retry waits a
// positive, bounded time. (A doubling backoff that was only capped when used
// overflowed after ~34 failures into a negative wait: a busy loop that
// pinned a core and grew memory without bound.)
func TestRetryBackoffStaysBounded(t *testing.T) {
	srv := natstest.Start(t)
	nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: srv.URL(), Log: natstest.Logger(t), NoBuffer: true, RetryFirst: true})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()

	clk := clock.NewManual(time.Now())
	id, _ := rollout.NewAgentID(nil)
	const interval = 30 * time.Second
	p := &heartbeat.Publisher{
		JS: js, Interval: interval, Clock: clk, Log: natstest.Logger(t), Timeout: time.Second,
		Status: func() heartbeat.Heartbeat { return heartbeat.Heartbeat{AgentID: id, Group: "g"} },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()

	for i := range 80 {
		if !clk.WaitPending(1, timeout(10*time.Second)) {
			t.Fatalf("after %d failed attempts the publisher did not arm a positive retry wait", i)
		}
		clk.Advance(interval)
	}
}

func timeout(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}
