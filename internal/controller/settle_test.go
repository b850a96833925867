package controller_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
)

const (
	logWaiting = "waiting for the NATS JetStream bus to accept the stream and buckets"
	logReady   = "inventory recovered from the stream"
)

// TestRunWaitsForTheClusterToForm: a controller started against one node of
// a three-node cluster, which has no JetStream meta leader until a second
// node joins, neither exits nor hangs silently: it says what it waits for,
// and comes up once the other nodes start.
func TestRunWaitsForTheClusterToForm(t *testing.T) {
	t.Parallel()
	nodes := natstest.NewCluster(t, 3)
	nodes.Start(t, 0)
	var logs natstest.Buffer
	o := runOptions()
	o.NATSURL, o.Replicas = nodes.URL(0), 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx, &o, slog.New(slog.NewTextHandler(&logs, nil))) }()

	natstest.Eventually(t, 20*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("Run returned while the cluster formed: %v\n%s", err, logs.String())
		default:
		}
		if !strings.Contains(logs.String(), logWaiting) || !strings.Contains(logs.String(), `ensuring="stream FLEET_HB"`) {
			return fmt.Errorf("no line says what the controller waits for:\n%s", logs.String())
		}
		return nil
	})
	nodes.Start(t, 1)
	nodes.Start(t, 2)
	natstest.Eventually(t, 30*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("Run returned: %v\n%s", err, logs.String())
		default:
		}
		if !strings.Contains(logs.String(), logReady) {
			return fmt.Errorf("controller not ready:\n%s", logs.String())
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after its context ended: %v, want nil", err)
	}
}

// TestRunStopsCleanlyWhileWaiting: told to stop while it still waits for
// the bus, the controller stops at once, as it does once running.
func TestRunStopsCleanlyWhileWaiting(t *testing.T) {
	t.Parallel()
	nodes := natstest.NewCluster(t, 3)
	nodes.Start(t, 0) // never a meta leader
	var logs natstest.Buffer
	o := runOptions()
	o.NATSURL, o.Replicas = nodes.URL(0), 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx, &o, slog.New(slog.NewTextHandler(&logs, nil))) }()
	natstest.Eventually(t, 20*time.Second, func() error {
		if !strings.Contains(logs.String(), logWaiting) {
			return fmt.Errorf("not waiting yet:\n%s", logs.String())
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v, want nil (a clean stop)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if !strings.Contains(logs.String(), "controller stopping before the stream and buckets were ready") {
		t.Errorf("the log does not say it stopped before the bus was ready:\n%s", logs.String())
	}
}
