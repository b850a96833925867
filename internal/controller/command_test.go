package controller_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"

	"github.com/nats-io/nats.go/jetstream"
)

// TestRunEmbeddedStartsAndStopsCleanly is "controller run" with no --nats: it
// embeds a server, creates the bus, says where it listens, and returns nil
// when its context ends (what SIGTERM does through signal.NotifyContext).
func TestRunEmbeddedStartsAndStopsCleanly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs natstest.Buffer
	o := runOptions()
	o.Listen, o.StoreDir = addr, t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx, &o, slog.New(slog.NewTextHandler(&logs, nil))) }()

	natstest.Eventually(t, 20*time.Second, func() error {
		nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: "nats://" + addr, Log: natstest.Logger(t)})
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		_, err = kv.Open(ctx, js)
		return err
	})
	if !strings.Contains(logs.String(), "nats://"+addr) {
		t.Errorf("the controller does not say where it listens:\n%s", logs.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after its context ended: %v, want nil (a clean stop)", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	// The port is free again: the embedded server is gone.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port still held after stop: %v", err)
	}
	ln.Close()
}

// runOptions is the valid RunOptions the tests start from: short intervals,
// and neither a server nor a bus chosen.
func runOptions() controller.RunOptions {
	return controller.RunOptions{ID: "c1", StatsInterval: time.Second, HeartbeatInterval: time.Second,
		AgentExpiry: time.Minute, ReconcileInterval: time.Second, LeaseTTL: 3 * time.Second, Replicas: 1}
}

func TestRunRejectsBadFlags(t *testing.T) {
	base := runOptions()
	cases := map[string]func(o *controller.RunOptions){
		"--id":           func(o *controller.RunOptions) { o.ID = "has.dot" },
		"--agent-expiry": func(o *controller.RunOptions) { o.AgentExpiry = time.Second / 2 },
		"--lease-ttl":    func(o *controller.RunOptions) { o.LeaseTTL = time.Second },
		"--replicas":     func(o *controller.RunOptions) { o.Replicas = 0 },
		// Malformed addresses and an empty store are the invocation's
		// fault (exit 2), found before anything is bound or created.
		"--listen":    func(o *controller.RunOptions) { o.Listen, o.StoreDir = "127.0.0.1:99999", "unused" },
		"--store-dir": func(o *controller.RunOptions) { o.Listen, o.StoreDir = "127.0.0.1:-1", "" },
		"--http-addr": func(o *controller.RunOptions) { o.NATSURL, o.HTTPAddr = "nats://127.0.0.1:1", "no-port" },
	}
	for flag, edit := range cases {
		o := base
		edit(&o)
		err := controller.Run(context.Background(), &o, slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)))
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: got %v, want an error naming the flag", flag, err)
		}
		if code := cliutil.ExitCode(err); code != cliutil.ExitUsage {
			t.Errorf("%s: exit code %d, want %d (usage)", flag, code, cliutil.ExitUsage)
		}
	}
}
