package controller_test

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// TestRunEmbeddedOperatorMode is "controller run --auth-dir D": the embedded
// server trusts only what "fleetctl auth init" minted, the controller gets in
// with creds/controller.creds from the same directory and creates the bus,
// the admin reads it, and a client without credentials is refused.
func TestRunEmbeddedOperatorMode(t *testing.T) {
	dir := auth.Dir{Path: t.TempDir()}
	if _, err := dir.Init("test", auth.DefaultJetStreamLimits); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs natstest.Buffer
	o := runOptions()
	o.Listen, o.StoreDir, o.AuthDir = addr, t.TempDir(), dir.Path
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx, &o, slog.New(slog.NewTextHandler(&logs, nil))) }()

	connect := func(creds string) error {
		nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: "nats://" + addr, Creds: creds, Log: natstest.Logger(t)})
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
	}
	natstest.Eventually(t, 20*time.Second, func() error {
		return connect(filepath.Join(dir.Path, auth.CredsFile(auth.UserAdmin)))
	})
	if err := connect(""); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Errorf("connect without credentials: %v, want an authorization violation", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if strings.Contains(strings.ToLower(logs.String()), "violation") {
		t.Errorf("the controller hit a permission error:\n%s", logs.String())
	}
}

func TestRunRejectsServerConfigWithExternalServer(t *testing.T) {
	o := runOptions()
	o.NATSURL, o.ServerConfig = "nats://127.0.0.1:1", "x.conf"
	err := controller.Run(context.Background(), &o, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "--server-config") {
		t.Errorf("got %v, want a usage error naming --server-config", err)
	}
}
