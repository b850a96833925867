package agentd

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetwave/fleetwave/pkg/install"
)

func TestNewerAgentd(t *testing.T) {
	tree := install.Tree{Root: t.TempDir()}
	ship := func(v, script string) {
		t.Helper()
		dir := filepath.Join(tree.VersionDir(v), "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if script != "" {
			if err := os.WriteFile(filepath.Join(dir, "agentd"), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	ship("2.0.0", "echo agentd version 0.2.0")
	ship("2.1.0", "echo agentd version 0.1.0")
	ship("2.2.0", "")
	ship("2.3.0", "echo garbage")
	ship("2.4.0", "exit 1")
	cases := []struct {
		v    string
		want bool
	}{
		{"2.0.0", true},  // ships a newer agentd
		{"2.1.0", false}, // same version
		{"2.2.0", false}, // ships none
		{"2.3.0", false}, // does not say a version
		{"2.4.0", false}, // fails
		{"9.9.9", false}, // not installed
	}
	for _, c := range cases {
		path, got := newerAgentd(context.Background(), tree, c.v, "0.1.0")
		if got != c.want {
			t.Errorf("version %s: newer=%v (%s), want %v", c.v, got, path, c.want)
		}
	}
}
