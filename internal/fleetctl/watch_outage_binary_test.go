package fleetctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestWatchSaysDisconnectedBinary (issue 25, point 12): "fleetctl watch"
// printed nothing through a 26 s bus outage, so its silence read as "no
// events". Through the binary, piped and with -o json: the loss of the bus
// and the reconnect are printed as they happen, with times and how long
// events were not received, and events arrive again afterwards.
func TestWatchSaysDisconnectedBinary(t *testing.T) {
	bin := fleetctlBin(t)
	for _, output := range []string{"text", "json"} {
		t.Run(output, func(t *testing.T) {
			e := newEnv(t)
			var out, errOut natstest.Buffer
			cmd := exec.Command(bin, "--nats", e.srv.URL(), "--timeout", "3s", "watch", "-o", output)
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			natstest.Eventually(t, 20*time.Second, func() error {
				if !strings.Contains(errOut.String(), "Watching fleet.events.>") {
					return fmt.Errorf("not watching yet: %q", errOut.String())
				}
				return nil
			})
			e.srv.Shutdown()
			natstest.Eventually(t, 20*time.Second, func() error {
				if !strings.Contains(out.String(), "disconnected") {
					return fmt.Errorf("no disconnect said yet:\n%s", out.String())
				}
				return nil
			})
			e.srv.Restart()
			natstest.Eventually(t, 30*time.Second, func() error {
				if !strings.Contains(out.String(), "reconnected") {
					return fmt.Errorf("no reconnect said yet:\n%s", out.String())
				}
				return nil
			})
			// Events arrive again: the subscription came back with the
			// connection.
			natstest.Eventually(t, 20*time.Second, func() error {
				ev := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, From: rollout.StateCanary, To: rollout.StateCanary,
					Reason: "after the outage", At: time.Now().UTC()}
				if err := e.fleet.PublishEvent(ev); err != nil {
					return err
				}
				if !strings.Contains(out.String(), "after the outage") {
					return fmt.Errorf("no event after the reconnect:\n%s", out.String())
				}
				return nil
			})

			got := out.String()
			if output == "text" {
				var lost, back string
				for _, l := range strings.Split(got, "\n") {
					switch {
					case strings.Contains(l, " bus ") && strings.Contains(l, "disconnected"):
						lost = l
					case strings.Contains(l, " bus ") && strings.Contains(l, "reconnected"):
						back = l
					}
				}
				joined := strings.Join(strings.Fields(got), " ") // lines wrap at 100 columns
				if !strings.Contains(lost, "lost the bus") || !strings.Contains(joined, "no event is received until it is back") {
					t.Errorf("no disconnect line:\n%s", got)
				}
				if !strings.Contains(back, "back on the bus after ") || !strings.Contains(joined, "events of that time were not received") ||
					!strings.Contains(joined, "fleetctl history --since") {
					t.Errorf("no reconnect line with how long:\n%s", got)
				}
				if _, err := time.Parse(time.RFC3339, strings.Fields(lost + " x")[0]); err != nil {
					t.Errorf("the disconnect line does not start with its time: %q", lost)
				}
				return
			}
			var types []string
			var secs *float64
			for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
				var line struct { // WatchLine's fields, as a script reads them
					Type    string     `json:"type"`
					At      *time.Time `json:"at"`
					Seconds *float64   `json:"seconds"`
				}
				if err := json.Unmarshal([]byte(l), &line); err != nil {
					t.Fatalf("not a JSON line: %q", l)
				}
				if line.Type == "disconnected" || line.Type == "reconnected" {
					types = append(types, line.Type)
					if line.At == nil || line.At.IsZero() {
						t.Errorf("%s line without a time: %s", line.Type, l)
					}
					if line.Type == "reconnected" {
						secs = line.Seconds
					}
				}
			}
			if len(types) < 2 || types[0] != "disconnected" || types[len(types)-1] != "reconnected" || secs == nil || *secs <= 0 {
				t.Errorf("connection lines %v (seconds %v):\n%s", types, secs, got)
			}
		})
	}
}

// TestWatchScreenSaysDisconnected: on a terminal, a lost bus is the title
// (since when, how long) and a "bus" line among the events, until it is
// back; the screen still fits the window.
func TestWatchScreenSaysDisconnected(t *testing.T) {
	var tr connTracker
	lost := connChange{At: testNow.Add(-26 * time.Second), Lost: true, Err: errors.New("EOF")}
	s := watchState{Now: testNow, Status: &StatusReport{}}
	for _, l := range connLines(&tr, lost, screenLayout, 0) {
		s.add(l)
	}
	s.Disconnected = tr.since
	lines := renderScreen(s, 80, 24)
	if !strings.Contains(lines[0], "DISCONNECTED from the bus since 11:59:34 UTC (26s)") {
		t.Errorf("title %q", lines[0])
	}
	if got := strings.Join(lines, "\n"); !strings.Contains(got, "11:59:34  -         bus         disconnected") {
		t.Errorf("no bus line among the events:\n%s", got)
	}
	for _, l := range lines {
		if utf8.RuneCountInString(l) > 80 {
			t.Errorf("line wider than 80: %q", l)
		}
	}
	back := connLines(&tr, connChange{At: testNow, Server: "nats://127.0.0.1:4222"}, screenLayout, 0)
	if len(back) != 1 || !strings.Contains(back[0], "back on the bus after 26s (lost at 11:59:34 UTC)") || !tr.since.IsZero() {
		t.Errorf("reconnect line %q, tracker %v", back, tr.since)
	}
}
