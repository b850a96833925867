package fleetctl

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCredsHint: against an operator-mode server, fleetctl without creds
// says which flag or variable to set; with creds the server refuses the
// fleet's buckets to, it names the file.
func TestCredsHint(t *testing.T) {
	bin := fleetctlBin(t)
	dir := filepath.Join(t.TempDir(), "auth")
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatalf("auth init: %s", stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, _ := operatorServer(t, ctx, dir)
	agentCreds := filepath.Join(t.TempDir(), "agent.creds")
	if _, stderr, code := execute(t, "auth", "agent", "--dir", dir, "--group", "prod", "--out", agentCreds); code != 0 {
		t.Fatalf("auth agent: %s", stderr)
	}

	_, stderr, code := runBin(t, bin, nil, "--nats", srv.URL(), "--timeout", "5s", "status")
	if code != 1 || !strings.Contains(stderr, "Authorization Violation") && !strings.Contains(stderr, "authorization violation") ||
		!strings.Contains(stderr, "this server needs credentials: pass --creds or set NATS_CREDS") {
		t.Errorf("no creds: exit %d, stderr %q; want the hint to pass --creds or set NATS_CREDS", code, stderr)
	}

	_, stderr, code = runBin(t, bin, []string{"NATS_CREDS=" + agentCreds}, "--nats", srv.URL(), "--timeout", "5s", "pause")
	if code != 1 || !strings.Contains(stderr, "the credentials in "+agentCreds) || !strings.Contains(stderr, "admin credentials") {
		t.Errorf("agent creds: exit %d, stderr %q; want it to name %s and ask for admin credentials", code, stderr, agentCreds)
	}
}
