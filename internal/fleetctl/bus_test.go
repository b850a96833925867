package fleetctl

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// TestBusEnsureFixesWhatAControllerMayNot: on an operator-mode server a
// controller may create the stream and buckets but not change them. A
// heartbeat stream from an older fleetwave (no inventory republish) stops
// the controller with an error naming "fleetctl bus ensure"; the admin's
// "bus ensure" brings it up to date; a later controller with other settings
// runs with the bus as it is and is told of the drift.
func TestBusEnsureFixesWhatAControllerMayNot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatal(stderr)
	}
	srv := natstest.StartConfig(t, filepath.Join(dir, auth.FileResolverConf))
	js := func(user string) jetstream.JetStream {
		nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: srv.URL(), Name: "test",
			Creds: filepath.Join(dir, auth.CredsFile(user)), Log: natstest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		j, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	admin, ctl := js(auth.UserAdmin), js(auth.UserController)
	// What an older fleetwave created: the heartbeat stream, no republish.
	if _, err := admin.CreateStream(ctx, jetstream.StreamConfig{Name: kv.StreamHB, Subjects: []string{kv.HBSubjects},
		MaxMsgsPerSubject: 1, MaxAge: time.Hour, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	_, err := kv.Ensure(ctx, ctl, kv.Options{})
	if err == nil || !strings.Contains(err.Error(), "fleetctl bus ensure") || !strings.Contains(err.Error(), "republish") {
		t.Fatalf("controller on an old heartbeat stream: %v, want an error naming the republish and 'fleetctl bus ensure'", err)
	}

	// A controller's creds cannot do the admin's part either.
	if _, stderr, code := execute(t, "--nats", srv.URL(), "--creds", filepath.Join(dir, auth.CredsFile(auth.UserController)),
		"bus", "ensure"); code == 0 {
		t.Errorf("bus ensure with controller creds succeeded")
	} else {
		t.Logf("with controller creds: %s", stderr)
	}
	stdout, stderr, code := execute(t, "--nats", srv.URL(), "--creds", filepath.Join(dir, auth.CredsFile(auth.UserAdmin)),
		"bus", "ensure", "--agent-expiry", "2h", "--audit-max-age", "48h")
	if code != 0 {
		t.Fatalf("bus ensure: %s", stderr)
	}
	t.Log(stdout)
	s, err := admin.Stream(ctx, kv.StreamHB)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.RePublish == nil || cfg.MaxAge != 2*time.Hour {
		t.Errorf("after bus ensure: republish %+v, max age %v", cfg.RePublish, cfg.MaxAge)
	}

	var drift []string
	if _, err := kv.Ensure(ctx, ctl, kv.Options{OnDrift: func(what string, diffs []string) {
		drift = append(drift, what+": "+strings.Join(diffs, ", "))
	}}); err != nil {
		t.Fatalf("controller after bus ensure: %v", err)
	}
	// The audit stream keeps any number of messages per subject (0 asked,
	// -1 stored): that is no difference; its max age is drift.
	if len(drift) != 2 || !strings.Contains(drift[0], "stream FLEET_HB: max age 2h0m0s, want 1h0m0s") ||
		!strings.Contains(drift[1], "stream FLEET_AUDIT: max age 48h0m0s") {
		t.Errorf("drift reported to the controller: %q", drift)
	}
}
