package controller_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestControllerFollowsInventoryWithoutConsumers: the controller reads the
// inventory from the stream (a scan of batched direct gets), follows new
// heartbeats through the stream's republish, reads the whole inventory again
// after a reconnect, and creates no consumer on any stream while doing so
// (nor does the find endpoint's plan mirror): a consumer's deliver subject
// would be a write path to any subject of the account.
func TestControllerFollowsInventoryWithoutConsumers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := natstest.Start(t) // file storage: the stream outlives a restart
	setup := srv.JetStream("setup")
	fleet, err := kv.Ensure(ctx, setup, kv.Options{AgentExpiry: expiry})
	if err != nil {
		t.Fatal(err)
	}
	ids := []rollout.AgentID{"0a000000-0000-4000-8000-000000000001", "0a000000-0000-4000-8000-000000000002",
		"0a000000-0000-4000-8000-000000000003"}
	beat := func(id rollout.AgentID, version string) {
		t.Helper()
		data, err := heartbeat.Encode(&heartbeat.Heartbeat{V: heartbeat.SchemaVersion, AgentID: id, Group: "blue",
			ActiveVersion: version, UpdaterVersion: "0.1.0", At: time.Now().UTC(), Seq: uint64(time.Now().UnixNano())})
		if err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, waitLong, func() error {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := setup.Publish(pctx, heartbeat.SubjectFor("blue", id), data)
			return err
		})
	}
	for _, id := range ids {
		beat(id, "1.0.0")
	}
	// Garbage among them: counted as rejected, nothing else.
	if _, err := setup.Publish(ctx, heartbeat.SubjectFor("blue", "not-an-id"), []byte("x")); err != nil {
		t.Fatal(err)
	}

	var log natstest.Buffer
	clk := clock.NewManual(time.Now())
	c, err := controller.New(fleet, controller.Options{ID: "c1", StatsInterval: statsEvery, HeartbeatInterval: interval,
		AgentExpiry: expiry, Clock: clk, Log: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	mirror := &controller.PlanMirror{NC: fleet.JS.Conn(), Store: &httpfind.Store{}, Log: natstest.Logger(t)}
	mirrorDone := make(chan error, 1)
	go func() { mirrorDone <- mirror.Run(ctx) }()
	select {
	case <-c.Ready():
	case err := <-done:
		t.Fatalf("controller stopped: %v", err)
	}
	versions := func() map[rollout.AgentID]string {
		out := map[rollout.AgentID]string{}
		for _, a := range c.Inventory().Agents("blue", clk.Now()) {
			out[a.Heartbeat.AgentID] = a.Heartbeat.ActiveVersion
		}
		return out
	}
	waitVersion := func(id rollout.AgentID, want string) {
		t.Helper()
		natstest.Eventually(t, waitLong, func() error {
			if got := versions()[id]; got != want {
				return fmt.Errorf("agent %s on %q in the inventory, want %q", id, got, want)
			}
			return nil
		})
	}
	if got := len(versions()); got != len(ids) {
		t.Errorf("inventory after the scan: %d agents, want %d", got, len(ids))
	}
	if _, rejected := c.Counters(); rejected != 1 {
		t.Errorf("%d heartbeats rejected, want the one garbage message", rejected)
	}
	beat(ids[0], "1.1.0") // live, through the republish
	waitVersion(ids[0], "1.1.0")

	// A restart of the server: the controller reconnects and, at its next
	// stats pass, reads the whole inventory again.
	srv.Restart()
	natstest.Eventually(t, waitLong, func() error {
		if nc := fleet.JS.Conn(); nc.Stats().Reconnects == 0 || !nc.IsConnected() {
			return errors.New("the controller has not reconnected yet")
		}
		return nil
	})
	beat(ids[1], "1.1.0")
	clk.Advance(statsEvery)
	natstest.Eventually(t, waitLong, func() error {
		if !strings.Contains(log.String(), "reading the inventory again") {
			return errors.New("no second read of the inventory after the reconnect")
		}
		return nil
	})
	waitVersion(ids[1], "1.1.0")
	natstest.Eventually(t, waitLong, mirror.Ready)

	for _, name := range []string{kv.StreamHB, kv.PlanStream, kv.StreamOf(kv.BucketConfig), kv.StreamOf(kv.BucketStats)} {
		s, err := setup.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Consumers != 0 {
			t.Errorf("stream %s has %d consumers; the controller must create none", name, info.State.Consumers)
		}
	}
	cancel()
	for _, d := range []chan error{done, mirrorDone} {
		if err := <-d; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("ended with %v", err)
		}
	}
}
