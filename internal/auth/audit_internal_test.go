package auth

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// TestControllerOfOlderDirStartsWithoutAudit: an auth directory minted
// before FLEET_AUDIT existed exports no create of it to CONTROL. Its
// controller still gets its stream and buckets (at once, not after a
// retry loop that never ends), is told FLEET_AUDIT is missing, and the
// admin's Ensure (fleetctl bus ensure) creates it.
func TestControllerOfOlderDirStartsWithoutAudit(t *testing.T) {
	saved := fleetStreams
	fleetStreams = slices.DeleteFunc(slices.Clone(fleetStreams), func(s string) bool { return s == kv.StreamAudit })
	d := Dir{Path: t.TempDir()}
	_, err := d.Init("test", DefaultJetStreamLimits)
	fleetStreams = saved
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.StartConfig(t, filepath.Join(d.Path, FileResolverConf))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := func(user string) jetstream.JetStream {
		nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: srv.URL(), Name: "test", Creds: filepath.Join(d.Path, CredsFile(user)), Log: natstest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	var mu sync.Mutex
	var drift []string
	start := time.Now()
	if _, err := kv.Ensure(ctx, js(UserController), kv.Options{Memory: true, OnDrift: func(what string, diffs []string) {
		mu.Lock()
		defer mu.Unlock()
		drift = append(drift, what+": "+strings.Join(diffs, "; "))
	}}); err != nil {
		t.Fatalf("controller of an older auth dir: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Ensure took %v: it retried the audit stream", d)
	}
	mu.Lock()
	if len(drift) != 1 || !strings.Contains(drift[0], "stream "+kv.StreamAudit) || !strings.Contains(drift[0], "may not create it") {
		t.Errorf("drift reported: %q, want FLEET_AUDIT missing", drift)
	}
	mu.Unlock()
	admin := js(UserAdmin)
	if _, err := admin.Stream(ctx, kv.StreamAudit); err == nil {
		t.Fatal("FLEET_AUDIT exists before the admin's ensure")
	}
	if _, err := kv.Ensure(ctx, admin, kv.Options{Memory: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Stream(ctx, kv.StreamAudit); err != nil {
		t.Errorf("after the admin's ensure: %v", err)
	}
}
