package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMain lets the test binary stand in for fleetbench when a mode starts
// one of its child processes (os.Executable with "serve", "agents", or
// "app" in a release agentd runs).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "serve" || os.Args[1] == "agents" || os.Args[1] == "app") {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The benchmarks at a small size, so that they keep working: each mode
// returns an error when what it measures did not happen (heartbeats not
// all ingested, an agent not notified, a heartbeat missing from the hub).

func TestIngestSmall(t *testing.T) {
	if err := ingest([]string{"-agents", "500", "-plan-subs", "200"}); err != nil {
		t.Fatal(err)
	}
}

func TestPlanSmall(t *testing.T) {
	for _, mode := range []string{"conns", "shared", "fanout"} {
		if err := plan([]string{"-mode", mode, "-agents", "100", "-conns", "4", "-rounds", "2", "-repeat", "2"}); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
	}
}

func TestTierSmall(t *testing.T) {
	for _, leaves := range []string{"0", "2"} {
		if err := tier([]string{"-agents", "300", "-leaves", leaves, "-rounds", "2", "-repeat", "2"}); err != nil {
			t.Fatalf("%s leaves: %v", leaves, err)
		}
	}
}

// TestHostSmall: the real agentd rolls back two failing releases, one whose
// health URL answers 503 and one whose never answers, and then idles
// briefly.
func TestHostSmall(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agentd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/fleetwave/fleetwave/cmd/agentd").CombinedOutput(); err != nil {
		t.Fatalf("go build agentd: %v\n%s", err, out)
	}
	for _, bad := range []string{"503", "hang"} {
		if err := rollback([]string{"-agentd", bin, "-runs", "1", "-health-timeout", "1s", "-bad-health", bad}); err != nil {
			t.Fatalf("rollback, health %s: %v", bad, err)
		}
	}
	if err := idle([]string{"-agentd", bin, "-duration", "2s", "-every", "1s", "-settle", "0s"}); err != nil {
		t.Fatalf("idle: %v", err)
	}
}

// TestPlanProfiles: -pprof leaves a CPU profile of the server and of the
// agents process for each repeat.
func TestPlanProfiles(t *testing.T) {
	dir := t.TempDir()
	if err := plan([]string{"-mode", "conns", "-agents", "50", "-rounds", "1", "-pprof", dir}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"serve-r1.pprof", "agents0-r1.pprof"} {
		if fi, err := os.Stat(dir + "/" + f); err != nil || fi.Size() == 0 {
			t.Errorf("%s: want a non-empty profile, got %v", f, err)
		}
	}
}
