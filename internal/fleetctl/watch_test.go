package fleetctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// startWatch runs RunWatch until the test ends and waits until it is
// subscribed. stop cancels it and returns its error.
func startWatch(t *testing.T, e *env, redraw bool) (out *natstest.Buffer, stop func() error) {
	t.Helper()
	g, out, errOut := e.global()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunWatch(ctx, &WatchOptions{Global: g, Redraw: redraw, RedrawInterval: time.Hour})
	}()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("watch did not stop after its context was cancelled")
		}
	}
	t.Cleanup(func() { _ = stop() })
	natstest.Eventually(t, 10*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("watch ended early: %v", err)
		default:
		}
		if !strings.Contains(errOut.String(), "Watching fleet.events.>") {
			return errors.New("not subscribed yet")
		}
		return nil
	})
	return out, stop
}

func TestWatchPrintsEvents(t *testing.T) {
	e := newEnv(t)
	out, stop := startWatch(t, e, false)

	ev := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, From: rollout.StateActive, To: rollout.StateActive,
		Reason: "7 of 100 failed (threshold 5%)", At: testNow}
	if err := e.fleet.PublishEvent(ev); err != nil {
		t.Fatal(err)
	}
	ev2 := rollout.Event{V: 1, Group: "staging", Kind: rollout.EventTransition, From: rollout.StateCanary, To: rollout.StateActive,
		Reason: "2 canaries healthy for 5m", At: testNow.Add(time.Second)}
	if err := e.fleet.PublishEvent(ev2); err != nil {
		t.Fatal(err)
	}
	want := "2026-11-23T12:00:00Z  prod          halt        active                  7 of 100 failed (threshold 5%)\n" +
		"2026-11-23T12:00:01Z  staging       transition  canary → active         2 canaries healthy for 5m\n"
	natstest.Eventually(t, 10*time.Second, func() error {
		if got := out.String(); got != want {
			return fmt.Errorf("output %q, want %q", got, want)
		}
		return nil
	})
	if err := stop(); err != nil {
		t.Errorf("watch returned %v on interrupt, want nil", err)
	}
}

func TestWatchRedrawsStatusOnATerminal(t *testing.T) {
	e := rolloutFixture(t)
	out, _ := startWatch(t, e, true)
	// The first screen is drawn at once.
	natstest.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), "Version:   1.3.2 → 1.4.0") {
			return errors.New("no status drawn yet")
		}
		return nil
	})
	ev := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventTransition, From: rollout.StateUnstarted, To: rollout.StateCanary,
		Reason: "window open", At: testNow}
	if err := e.fleet.PublishEvent(ev); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() error {
		screens := strings.Split(out.String(), "\x1b[H\x1b[2J")
		last := screens[len(screens)-1]
		if len(screens) < 3 || !strings.Contains(last, "GROUP    STATE") || !strings.Contains(last, "unstarted → canary") {
			return fmt.Errorf("no redraw with the event yet (%d screens):\n%s", len(screens)-1, last)
		}
		return nil
	})
}

func TestEventLine(t *testing.T) {
	for _, tc := range []struct {
		name, subject, data, want string
	}{
		{"operator", "fleet.events.prod",
			`{"v":1,"group":"prod","kind":"operator","from":"active","to":"active","reason":"operator reset","at":"2026-11-23T12:00:00Z"}`,
			"2026-11-23T12:00:00Z  prod          operator    active                  operator reset"},
		{"alert without states", "fleet.events.prod",
			`{"v":1,"group":"prod","kind":"alert","reason":"not done after 4h","at":"2026-11-23T12:00:00+01:00"}`,
			"2026-11-23T11:00:00Z  prod          alert       -                       not done after 4h"},
		{"garbage", "fleet.events.prod", `{"v":1,`, `fleet.events.prod: not an event (unexpected end of JSON input): {"v":1,`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := eventLine(tc.subject, []byte(tc.data)); got != tc.want {
				t.Errorf("eventLine\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestIsTerminalFalseForBuffers(t *testing.T) {
	if isTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is not a terminal")
	}
}
