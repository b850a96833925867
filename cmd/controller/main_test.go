package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var controllerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fleetwave-controller-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	controllerBin = filepath.Join(dir, "controller")
	build := exec.Command("go", "build", "-o", controllerBin, "github.com/fleetwave/fleetwave/cmd/controller")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the controller:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestHelpListsTheExitCodesItReturns: the controller waits on no rollout, so
// its help must not promise exit code 3.
func TestHelpListsTheExitCodesItReturns(t *testing.T) {
	out, err := exec.Command(controllerBin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("controller --help: %v\n%s", err, out)
	}
	_, codes, ok := strings.Cut(string(out), "Exit codes:\n")
	if !ok {
		t.Fatalf("controller --help lists no exit codes:\n%s", out)
	}
	codes, _, _ = strings.Cut(codes, "\n\n")
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^\s+(\d+)\s`).FindAllStringSubmatch(codes, -1) {
		got = append(got, m[1])
	}
	if strings.Join(got, " ") != "0 1 2" {
		t.Errorf("controller --help lists exit codes %v, want 0 1 2:\n%s", got, codes)
	}
}
