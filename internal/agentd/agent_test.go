package agentd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

func TestIdentityAndUpdateFileKeptUnderRoot(t *testing.T) {
	root := t.TempDir()
	log := natstest.Logger(t)
	a1, err := agentd.New(agentd.Options{Root: root, Group: "blue", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := agentd.New(agentd.Options{Root: root, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if a1.ID() != a2.ID() {
		t.Errorf("agent id changed across restarts: %s then %s", a1.ID(), a2.ID())
	}
	if a2.Group() != "blue" {
		t.Errorf("group not kept in update.yaml: got %q", a2.Group())
	}
	a3, err := agentd.New(agentd.Options{Root: root, Group: "green", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	uf, err := install.LoadUpdateFile(root)
	if err != nil {
		t.Fatal(err)
	}
	if a3.Group() != "green" || uf.Spec.Group != "green" {
		t.Errorf("--group green not saved: agent %q, update.yaml %q", a3.Group(), uf.Spec.Group)
	}

	if _, err := agentd.New(agentd.Options{Root: t.TempDir(), Log: log}); err == nil || !strings.Contains(err.Error(), "--group") {
		t.Errorf("agent without a group: got %v, want an error that names --group", err)
	}
	if _, err := agentd.New(agentd.Options{Root: t.TempDir(), Group: "Bad.Group", Log: log}); err == nil {
		t.Error("agent with group \"Bad.Group\" accepted")
	}

	bad := t.TempDir()
	corrupt := []byte("version: v1\nkind: update_config\nspec: [not, a, mapping\n")
	if err := os.WriteFile(filepath.Join(bad, install.UpdateFileName), corrupt, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := agentd.New(agentd.Options{Root: bad, Group: "blue", Log: log}); !errors.Is(err, install.ErrCorrupt) {
		t.Errorf("corrupt update.yaml: got %v, want ErrCorrupt", err)
	}
	if got, _ := os.ReadFile(filepath.Join(bad, install.UpdateFileName)); !bytes.Equal(got, corrupt) {
		t.Errorf("corrupt update.yaml was rewritten:\n%s", got)
	}
}

func TestAgentRidesOutServerRestart(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// File storage: the stream must survive the server restart.
	fleet, err := kv.Ensure(ctx, srv.JetStream("setup"), kv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var logs natstest.Buffer
	root := t.TempDir()
	a, err := agentd.New(agentd.Options{
		Root: root, Group: "blue", NATSURL: srv.URL(), Interval: 50 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	last := func() (*heartbeat.Heartbeat, error) {
		msgs, err := fleet.LastHeartbeats(ctx, "blue")
		if err != nil {
			return nil, err
		}
		if len(msgs) != 1 {
			return nil, fmt.Errorf("%d heartbeats in the stream, want 1", len(msgs))
		}
		return heartbeat.DecodeFrom(msgs[0].Subject, msgs[0].Data)
	}
	// Ten beats, and the log holds state changes only: no line per beat.
	natstest.Eventually(t, 10*time.Second, func() error {
		hb, err := last()
		if err != nil {
			return err
		}
		if hb.Seq < 10 {
			return fmt.Errorf("seq %d", hb.Seq)
		}
		return nil
	})
	if n := strings.Count(logs.String(), "\n"); n > 3 {
		t.Errorf("%d log lines after 10 heartbeats; want only state changes:\n%s", n, logs.String())
	}

	// The bus goes away; meanwhile the host's status changes.
	srv.Shutdown()
	if err := a.SetStatus(install.Status{ActiveVersion: "2.0.0", StartVersion: "1.0.0", StartTime: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	fleet, err = kv.Open(ctx, srv.JetStream("after-restart"))
	if err != nil {
		t.Fatal(err)
	}
	// The first beats after the outage carry the current status.
	natstest.Eventually(t, 20*time.Second, func() error {
		hb, err := last()
		if err != nil {
			return err
		}
		if hb.ActiveVersion != "2.0.0" {
			return fmt.Errorf("active_version %q after restart, want 2.0.0", hb.ActiveVersion)
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("agent stopped during the outage: %v", err)
	default:
	}
	for _, want := range []string{"disconnected", "reconnected"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log does not mention %q:\n%s", want, logs.String())
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("agent ended with %v, want context.Canceled", err)
	}
}
