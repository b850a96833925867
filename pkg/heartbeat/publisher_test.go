package heartbeat_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// agentStatus is what a test agent reports; the test changes it while the
// publisher runs.
type agentStatus struct {
	mu    sync.Mutex
	hb    heartbeat.Heartbeat
	calls atomic.Int64 // Status calls: one per publish attempt
}

func newAgentStatus() *agentStatus {
	hb := validHeartbeat()
	// The publisher owns V, At and Seq: junk here must not leak out.
	hb.V, hb.At, hb.Seq = 99, time.Unix(1, 0), 12345
	return &agentStatus{hb: hb}
}

func (s *agentStatus) Status() heartbeat.Heartbeat {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hb
}

func (s *agentStatus) set(edit func(h *heartbeat.Heartbeat)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	edit(&s.hb)
}

// runPublisher runs p until the end of the test and checks that Run returns
// the context's error when stopped.
func runPublisher(t *testing.T, p *heartbeat.Publisher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return within 10s of cancel")
		}
	})
}

// lastBeat reads the stored heartbeat of the test agent from the stream.
func lastBeat(ctx context.Context, js jetstream.JetStream) (*heartbeat.Heartbeat, uint64, error) {
	stream, err := js.Stream(ctx, kv.StreamHB)
	if err != nil {
		return nil, 0, err
	}
	msg, err := stream.GetLastMsgForSubject(ctx, heartbeat.SubjectFor(testGroup, testID))
	if err != nil {
		return nil, 0, err
	}
	hb, err := heartbeat.DecodeFrom(msg.Subject, msg.Data)
	if err != nil {
		return nil, 0, fmt.Errorf("stored heartbeat: %w", err)
	}
	return hb, msg.Sequence, nil
}

// waitBeat waits until the stream's last heartbeat has sequence number seq.
func waitBeat(t *testing.T, js jetstream.JetStream, seq uint64) *heartbeat.Heartbeat {
	t.Helper()
	var got *heartbeat.Heartbeat
	natstest.Eventually(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		hb, _, err := lastBeat(ctx, js)
		if err != nil {
			return err
		}
		if hb.Seq < seq {
			return fmt.Errorf("last heartbeat has seq %d, waiting for %d", hb.Seq, seq)
		}
		got = hb
		return nil
	})
	if got.Seq != seq {
		t.Fatalf("last heartbeat has seq %d, want exactly %d", got.Seq, seq)
	}
	return got
}

func TestPublisherManualClock(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	js := s.JetStream("agent")
	if _, err := kv.Ensure(t.Context(), js, kv.Options{Memory: true}); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewManual(start)
	status := newAgentStatus()
	const interval = 30 * time.Second
	pub := &heartbeat.Publisher{
		JS:       js,
		Interval: interval,
		Jitter:   0,
		Clock:    clk,
		Log:      natstest.Logger(t),
		Status:   status.Status,
	}
	runPublisher(t, pub)

	wantBeat := func(seq uint64, at time.Time) *heartbeat.Heartbeat {
		hb := status.Status()
		hb.V, hb.Seq, hb.At = heartbeat.SchemaVersion, seq, at
		return &hb
	}

	// The first beat goes out at once, stamped with the clock's time.
	got := waitBeat(t, js, 1)
	if diff := cmp.Diff(wantBeat(1, start), got); diff != "" {
		t.Errorf("first heartbeat (-want +got):\n%s", diff)
	}

	// The next regular beat is due exactly one interval later.
	if !clk.WaitPending(1, t.Context().Done()) {
		t.Fatal("publisher never armed its timer after the first beat")
	}
	clk.Advance(interval - time.Nanosecond)
	if n := clk.Pending(); n != 1 {
		t.Fatalf("1ns before the interval: %d timers pending, want 1 (not fired)", n)
	}
	clk.Advance(time.Nanosecond)
	got = waitBeat(t, js, 2)
	if diff := cmp.Diff(wantBeat(2, start.Add(interval)), got); diff != "" {
		t.Errorf("second heartbeat (-want +got):\n%s", diff)
	}

	// A state change is reported at once by Kick, with the clock standing
	// still, and the beat is built fresh from Status.
	if !clk.WaitPending(1, t.Context().Done()) {
		t.Fatal("publisher never re-armed its timer after the second beat")
	}
	status.set(func(h *heartbeat.Heartbeat) {
		h.ActiveVersion, h.StartVersion = "1.5.0", "1.4.2"
		h.Rollback, h.RollbackFrom, h.Error = true, "1.5.1", "health check failed"
	})
	pub.Kick()
	got = waitBeat(t, js, 3)
	if diff := cmp.Diff(wantBeat(3, start.Add(interval)), got); diff != "" {
		t.Errorf("kicked heartbeat (-want +got):\n%s", diff)
	}

	// The stream keeps only the last beat of the agent.
	info, err := s.JetStream("check").Stream(t.Context(), kv.StreamHB)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("stream holds %d messages, want 1 (the last beat)", n)
	}
}

func TestPublisherRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		interval time.Duration
		// waits lists the wait after each failed attempt; the bus answers
		// the attempt after the last one.
		waits []time.Duration
	}{
		{
			name:     "doubling from 500ms, capped at the interval",
			interval: 1500 * time.Millisecond,
			waits:    []time.Duration{500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond, 1500 * time.Millisecond},
		},
		{
			name:     "interval shorter than the first backoff",
			interval: 300 * time.Millisecond,
			waits:    []time.Duration{300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := natstest.Start(t)
			js := s.JetStream("agent")
			start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
			clk := clock.NewManual(start)
			status := newAgentStatus()
			pub := &heartbeat.Publisher{
				JS:       js,
				Interval: tc.interval,
				Clock:    clk,
				Log:      natstest.Logger(t),
				Status:   status.Status,
				Timeout:  5 * time.Second,
			}
			// No stream yet: every publish fails (no responders) until
			// one exists.
			runPublisher(t, pub)

			// Every attempt builds its beat with one Status call.
			waitAttempts := func(n int64, why string) {
				t.Helper()
				natstest.Eventually(t, 5*time.Second, func() error {
					if got := status.calls.Load(); got != n {
						return fmt.Errorf("%d attempts, want %d: %s", got, n, why)
					}
					return nil
				})
			}
			waitAttempts(1, "the first beat goes out at once")
			at := start
			for i, wait := range tc.waits {
				if !clk.WaitPending(1, t.Context().Done()) {
					t.Fatalf("after attempt %d: no retry timer armed", i+1)
				}
				clk.Advance(wait - time.Nanosecond)
				if got := status.calls.Load(); got != int64(i+1) {
					t.Fatalf("attempt %d made %v after attempt %d, before its %v backoff", got, wait-time.Nanosecond, i+1, wait)
				}
				if i == len(tc.waits)-1 {
					// Now the bus answers.
					if _, err := kv.Ensure(t.Context(), s.JetStream("controller"), kv.Options{Memory: true}); err != nil {
						t.Fatalf("Ensure: %v", err)
					}
				}
				clk.Advance(time.Nanosecond)
				at = at.Add(wait)
				waitAttempts(int64(i+2), fmt.Sprintf("retry due %v after attempt %d", wait, i+1))
			}
			n := uint64(len(tc.waits) + 1)
			got := waitBeat(t, js, n)
			if !got.At.Equal(at) {
				t.Errorf("delivered heartbeat at = %v, want %v (fresh, not the first failed beat)", got.At, at)
			}
			// Delivered again: back to the regular interval.
			if !clk.WaitPending(1, t.Context().Done()) {
				t.Fatal("publisher never re-armed its timer")
			}
			clk.Advance(tc.interval)
			waitBeat(t, js, n+1)
		})
	}
}

// TestPublisherSurvivesServerRestart takes the bus away and brings it back:
// heartbeats must resume without anyone restarting the publisher.
func TestPublisherSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		interval time.Duration
		jitter   time.Duration
	}{
		// Resumes through the retry loop and regular beats.
		{name: "short interval", interval: 100 * time.Millisecond, jitter: 20 * time.Millisecond},
		// No regular beat is due for an hour: only the reconnect Kick
		// can bring the agent back in time.
		{name: "reconnect kick", interval: time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := natstest.Start(t)
			// File storage, so the stream survives the restart.
			if _, err := kv.Ensure(t.Context(), s.JetStream("controller"), kv.Options{}); err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			check := s.JetStream("check")
			status := newAgentStatus()
			pub := &heartbeat.Publisher{
				Interval: tc.interval,
				Jitter:   tc.jitter,
				Clock:    clock.Real{},
				Log:      natstest.Logger(t),
				Status:   status.Status,
				Timeout:  time.Second,
			}
			nc, err := natsutil.Connect(natsutil.ConnectOptions{
				URL:         s.URL(),
				Name:        "agent",
				Log:         natstest.Logger(t),
				NoBuffer:    true,
				RetryFirst:  true,
				OnReconnect: pub.Kick,
			})
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			t.Cleanup(nc.Close)
			if pub.JS, err = jetstream.New(nc); err != nil {
				t.Fatal(err)
			}
			runPublisher(t, pub)

			var before *heartbeat.Heartbeat
			var beforeSeq uint64
			natstest.Eventually(t, 10*time.Second, func() error {
				hb, seq, err := lastBeat(t.Context(), check)
				if err != nil {
					return err
				}
				before, beforeSeq = hb, seq
				return nil
			})

			s.Shutdown()
			s.Restart()

			natstest.Eventually(t, 30*time.Second, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				hb, seq, err := lastBeat(ctx, check)
				if err != nil {
					return err
				}
				if seq <= beforeSeq || hb.Seq <= before.Seq || !hb.At.After(before.At) {
					return fmt.Errorf("last heartbeat: stream seq %d, seq %d, at %v; before the outage: %d, %d, %v",
						seq, hb.Seq, hb.At, beforeSeq, before.Seq, before.At)
				}
				return nil
			})
		})
	}
}

func TestNextDelay(t *testing.T) {
	t.Parallel()
	const interval = 30 * time.Second
	almostOne := math.Nextafter(1, 0)
	tests := []struct {
		name             string
		interval, jitter time.Duration
		rnd              float64
		wantMin, wantMax time.Duration // inclusive
	}{
		{name: "no jitter", interval: interval, jitter: 0, rnd: 0.9, wantMin: interval, wantMax: interval},
		{name: "negative jitter is none", interval: interval, jitter: -5 * time.Second, rnd: 0, wantMin: interval, wantMax: interval},
		{name: "rnd 0 is interval-jitter", interval: interval, jitter: 5 * time.Second, rnd: 0, wantMin: 25 * time.Second, wantMax: 25 * time.Second},
		{name: "rnd 0.5 is interval", interval: interval, jitter: 5 * time.Second, rnd: 0.5, wantMin: interval, wantMax: interval},
		{name: "rnd 0.75", interval: interval, jitter: 4 * time.Second, rnd: 0.75, wantMin: 32 * time.Second, wantMax: 32 * time.Second},
		{name: "rnd near 1 is just under interval+jitter", interval: interval, jitter: 5 * time.Second, rnd: almostOne,
			wantMin: 35*time.Second - time.Microsecond, wantMax: 35*time.Second - time.Nanosecond},
		{name: "floor at a tenth of the interval", interval: interval, jitter: time.Minute, rnd: 0, wantMin: 3 * time.Second, wantMax: 3 * time.Second},
		{name: "jitter equal to interval", interval: interval, jitter: interval, rnd: 0, wantMin: 3 * time.Second, wantMax: 3 * time.Second},
		{name: "huge jitter, rnd near 1", interval: interval, jitter: time.Minute, rnd: almostOne,
			wantMin: 90*time.Second - time.Microsecond, wantMax: 90*time.Second - time.Nanosecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := heartbeat.NextDelay(tc.interval, tc.jitter, func() float64 { return tc.rnd })
			if got < tc.wantMin || got > tc.wantMax {
				t.Errorf("NextDelay(%v, %v, %v) = %v, want in [%v, %v]", tc.interval, tc.jitter, tc.rnd, got, tc.wantMin, tc.wantMax)
			}
		})
	}
}

// TestNextDelayBounds sweeps rnd over [0, 1): the delay stays within
// [interval-jitter, interval+jitter), never under interval/10, and grows with
// rnd.
func TestNextDelayBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		interval, jitter time.Duration
	}{
		{name: "default 30s±5s", interval: 30 * time.Second, jitter: 5 * time.Second},
		{name: "jitter over the interval", interval: 10 * time.Second, jitter: 30 * time.Second},
		{name: "tiny", interval: 100 * time.Millisecond, jitter: 20 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lo := max(tc.interval-tc.jitter, tc.interval/10)
			hi := tc.interval + tc.jitter
			prev := time.Duration(0)
			const steps = 10_000
			for i := range steps {
				r := float64(i) / steps
				got := heartbeat.NextDelay(tc.interval, tc.jitter, func() float64 { return r })
				if got < lo || got >= hi {
					t.Fatalf("rnd %v: NextDelay = %v, want in [%v, %v)", r, got, lo, hi)
				}
				if got < prev {
					t.Fatalf("rnd %v: NextDelay = %v, less than %v for a smaller rnd", r, got, prev)
				}
				prev = got
			}
		})
	}
}

// TestPublisherReportsAcks: OnAck hears every publish's outcome, an error
// while no stream acks (here: none exists) and nil once one does, which is
// what agentd counts to find a lost bus (issue 15 point 5).
func TestPublisherReportsAcks(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	js := s.JetStream("agent")
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewManual(start)
	results := make(chan error, 100)
	pub := &heartbeat.Publisher{
		JS: js, Interval: time.Minute, Clock: clk, Log: natstest.Logger(t),
		Status: newAgentStatus().Status, Timeout: 5 * time.Second,
		OnAck: func(err error) { results <- err },
	}
	runPublisher(t, pub)
	next := func() error {
		t.Helper()
		select {
		case err := <-results:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("OnAck not called within 10s of a publish")
			return nil
		}
	}
	for i := range 2 {
		if err := next(); err == nil {
			t.Fatalf("attempt %d without a stream reported acked", i+1)
		}
		if !clk.WaitPending(1, t.Context().Done()) {
			t.Fatal("no retry armed")
		}
		if i == 1 {
			if _, err := kv.Ensure(t.Context(), s.JetStream("controller"), kv.Options{Memory: true}); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Minute)
	}
	if err := next(); err != nil {
		t.Errorf("attempt with a stream reported %v, want acked (nil)", err)
	}
	// A regular beat that is acked is reported too, not only a recovery.
	if !clk.WaitPending(1, t.Context().Done()) {
		t.Fatal("no timer armed")
	}
	clk.Advance(time.Minute)
	if err := next(); err != nil {
		t.Errorf("regular beat reported %v, want acked (nil)", err)
	}
}
