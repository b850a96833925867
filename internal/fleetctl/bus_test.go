package fleetctl

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
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

// TestBusEnsureMovesTheEvents: on a bus created before FLEET_EVENTS
// (FLEET_AUDIT captures fleet.events.>), "bus ensure" with admin creds takes
// the events out of FLEET_AUDIT and creates FLEET_EVENTS with its own
// bounds; the event stored before stays in the history.
func TestBusEnsureMovesTheEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatal(stderr)
	}
	srv := natstest.StartConfig(t, filepath.Join(dir, auth.FileResolverConf))
	adminCreds := filepath.Join(dir, auth.CredsFile(auth.UserAdmin))
	nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: srv.URL(), Name: "test", Creds: adminCreds, Log: natstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	admin, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Ensure(ctx, admin, kv.Options{}); err != nil {
		t.Fatal(err)
	}
	// Back to the layout of before: no FLEET_EVENTS, FLEET_AUDIT takes both.
	if err := admin.DeleteStream(ctx, kv.StreamEvents); err != nil {
		t.Fatal(err)
	}
	s, err := admin.Stream(ctx, kv.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Subjects = kv.LegacyAuditSubjects
	if _, err := admin.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	ev, _ := json.Marshal(rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, Reason: "stored before", At: time.Now().UTC()})
	if _, err := admin.Publish(ctx, kv.EventSubject("prod"), ev); err != nil {
		t.Fatal(err)
	}
	env := []string{"--nats", srv.URL(), "--creds", adminCreds}
	_, stderr, code := execute(t, append(env, "history")...)
	if code != 0 || !strings.Contains(stderr, "fleetctl bus ensure") {
		t.Errorf("history on the old layout: exit %d, stderr %q: want a warning naming fleetctl bus ensure", code, stderr)
	}

	stdout, stderr, code := execute(t, append(env, "bus", "ensure", "--events-max-age", "240h", "--events-max-bytes", "32MiB")...)
	if code != 0 {
		t.Fatalf("bus ensure: %s", stderr)
	}
	if !strings.Contains(stdout, kv.StreamEvents+" (rollout events): kept 240h0m0s, at most 32MiB") {
		t.Errorf("bus ensure output: %s", stdout)
	}
	if got := streamCfg(t, ctx, admin, kv.StreamAudit).Subjects; !slices.Equal(got, []string{kv.AuditPrefix + ">"}) {
		t.Errorf("%s subjects after bus ensure: %v", kv.StreamAudit, got)
	}
	if got := streamCfg(t, ctx, admin, kv.StreamEvents); !slices.Equal(got.Subjects, []string{kv.EventsPrefix + ">"}) ||
		got.MaxAge != 240*time.Hour || got.MaxBytes != 32<<20 || got.MaxMsgSize != kv.MaxEventSize {
		t.Errorf("%s after bus ensure: subjects %v, max age %v, max bytes %d, max msg size %d", kv.StreamEvents, got.Subjects, got.MaxAge, got.MaxBytes, got.MaxMsgSize)
	}
	stdout, stderr, code = execute(t, append(env, "history", "-o", "json")...)
	if code != 0 || strings.Contains(stderr, "bus ensure") {
		t.Fatalf("history after bus ensure: exit %d: %s", code, stderr)
	}
	var rep HistoryReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Records) != 1 || rep.Records[0].Event == nil || rep.Records[0].Stream != kv.StreamAudit || rep.Records[0].Event.Reason != "stored before" {
		t.Errorf("history after the migration: %+v, want the event stored before, in %s", rep.Records, kv.StreamAudit)
	}
}

func streamCfg(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().Config
}
