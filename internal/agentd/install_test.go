package agentd_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
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
	"github.com/fleetwave/fleetwave/test/releases"
)

// releaseServer serves the given versions of the stand-in app (see
// test/releases) at releases.URLTemplate(srv.URL).
func releaseServer(t *testing.T, versions map[string]releases.Behaviour) *httptest.Server {
	t.Helper()
	rs := releases.NewServer(nil)
	for v, b := range versions {
		if err := rs.Add(v, b); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(rs)
	t.Cleanup(srv.Close)
	return srv
}

func TestAgentInstallsWhatThePlanSaysAndRollsBack(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	rel := releaseServer(t, map[string]releases.Behaviour{"2.0.0": releases.Good, "3.0.0": releases.Crash})
	// The group is done on 2.0.0: every agent is told to update.
	setPlan(t, ctx, fleet, "1.0.0", "2.0.0")

	a, root, logs, done := runEnabledAgent(t, ctx, srv.URL(), rel.URL)

	lastBeat := func() (*heartbeat.Heartbeat, error) { return lastHeartbeat(ctx, fleet) }
	natstest.Eventually(t, 30*time.Second, func() error {
		hb, err := lastBeat()
		if err != nil {
			return err
		}
		if hb.ActiveVersion != "2.0.0" || hb.Rollback || hb.Error != "" {
			return fmt.Errorf("heartbeat %+v, want 2.0.0 installed", hb)
		}
		return nil
	})
	target, err := os.Readlink(filepath.Join(root, "bin", "app"))
	if err != nil || !strings.Contains(target, "2.0.0") {
		t.Fatalf("bin/app -> %q (%v), want the 2.0.0 release", target, err)
	}

	// A broken release: installed, fails, rolled back, reported, not retried.
	setPlan(t, ctx, fleet, "2.0.0", "3.0.0")
	var rolledBack *heartbeat.Heartbeat
	natstest.Eventually(t, 30*time.Second, func() error {
		hb, err := lastBeat()
		if err != nil {
			return err
		}
		if !hb.Rollback || hb.RollbackFrom != "3.0.0" || hb.ActiveVersion != "2.0.0" || hb.Error == "" {
			return fmt.Errorf("heartbeat %+v, want rollback from 3.0.0 to 2.0.0", hb)
		}
		rolledBack = hb
		return nil
	})
	// Why: the app's own last lines (its stderr), which agentd used to
	// write only to its own log, are in the heartbeat.
	if want := "app 3.0.0: cannot start (simulated broken release)"; rolledBack.ErrorOutput != want {
		t.Errorf("error_output of the rollback heartbeat: %q, want %q", rolledBack.ErrorOutput, want)
	}
	saved, err := install.LoadUpdateFile(root)
	if err != nil {
		t.Fatal(err)
	}
	if !saved.Status.Rollback || saved.Status.RollbackFrom != "3.0.0" {
		t.Errorf("update.yaml status %+v, want the rollback recorded", saved.Status)
	}
	if target, _ := os.Readlink(filepath.Join(root, "bin", "app")); !strings.Contains(target, "2.0.0") {
		t.Errorf("bin/app -> %q after rollback, want 2.0.0", target)
	}
	// The plan changes again (same target): the agent decides not to retry.
	before := a.Status().StartTime
	setPlan(t, ctx, fleet, "2.0.0", "3.0.0")
	natstest.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), "not retrying a version this host rolled back from") {
			return fmt.Errorf("agent has not decided on the new plan revision yet")
		}
		return nil
	})
	if got := a.Status().StartTime; !got.Equal(before) {
		t.Errorf("a new install attempt started at %v after the rollback", got)
	}
	if hb, _ := lastBeat(); hb == nil || hb.Seq != rolledBack.Seq && hb.StartTime != rolledBack.StartTime {
		t.Errorf("heartbeat after the skipped retry: %+v", hb)
	}
	cancel()
	<-done
}

// runEnabledAgent runs an agent of group blue with updates enabled, which
// supervises bin/app of the releases at releaseBase, until ctx ends. It
// returns the agent, its root, its log and Run's result.
func runEnabledAgent(t *testing.T, ctx context.Context, natsURL, releaseBase string) (*agentd.Agent, string, *natstest.Buffer, chan error) {
	t.Helper()
	root := t.TempDir()
	uf := install.NewUpdateFile("blue")
	uf.Spec.Enabled = true
	if err := uf.Save(root); err != nil {
		t.Fatal(err)
	}
	logs := &natstest.Buffer{}
	a, err := agentd.New(agentd.Options{
		Root: root, NATSURL: natsURL, Interval: time.Hour, Log: slog.New(slog.NewTextHandler(logs, nil)),
		App: agentd.AppOptions{URLTemplate: releases.URLTemplate(releaseBase), BinDir: filepath.Join(root, "bin"), Process: "app"},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return a, root, logs, done
}
