package fleetctl

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestWatchJSONThroughTheBinary: "fleetctl watch -o json" prints one JSON
// object a line: the status first, then each event as published.
func TestWatchJSONThroughTheBinary(t *testing.T) {
	bin := fleetctlBin(t)
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--nats", e.srv.URL(), "watch", "-o", "json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut natstest.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []string
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); _ = cmd.Wait(); <-scanned })
	natstest.Eventually(t, 20*time.Second, func() error {
		if !strings.Contains(errOut.String(), "Watching fleet.events.>") {
			return fmt.Errorf("not subscribed yet; stderr: %s", errOut.String())
		}
		return nil
	})
	ev := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, From: rollout.StateActive, To: rollout.StateActive,
		Reason: "7 of 100 failed (threshold 5%)", At: testNow}
	if err := e.fleet.PublishEvent(ev); err != nil {
		t.Fatal(err)
	}
	var parsed []WatchLine
	natstest.Eventually(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		parsed = parsed[:0]
		for _, l := range lines {
			var w WatchLine
			dec := json.NewDecoder(strings.NewReader(l))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&w); err != nil {
				return fmt.Errorf("line %q is not a JSON object: %v", l, err)
			}
			parsed = append(parsed, w)
		}
		if !slices.ContainsFunc(parsed, func(w WatchLine) bool { return w.Type == "event" }) {
			return fmt.Errorf("no event line yet: %q", lines)
		}
		return nil
	})
	if parsed[0].Type != "status" || parsed[0].Status == nil || parsed[0].Status.Plan == nil || parsed[0].Status.Plan.TargetVersion != "1.4.0" {
		t.Errorf("first line %+v, want the status with the plan", parsed[0])
	}
	i := slices.IndexFunc(parsed, func(w WatchLine) bool { return w.Type == "event" })
	if w := parsed[i]; w.Subject != kv.EventSubject("prod") || w.Event == nil || !cmp.Equal(*w.Event, ev) {
		t.Errorf("event line %+v, want %+v on %s", w, ev, kv.EventSubject("prod"))
	}
}
