package fleetctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// historyBound is what issue 24 demands of "fleetctl history" whatever the
// streams hold.
const historyBound = 5 * time.Second

// TestAuditFlush (issue 24, item 2): on an operator-mode server whose
// stream and buckets the controller's minted creds created (file storage,
// the default bounds), those creds publish 2,400 events of 120 KB (the
// attack that moved FLEET_AUDIT's first_seq 1 → 230) and then fill the
// events stream with maximal events it accepts, 1.25 times over. Every
// operator record written before is still stored, "fleetctl history" (the
// binary) answers in well under 5 s and still shows them, and so does
// "history --group".
func TestAuditFlush(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes 370 MB")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatal(stderr)
	}
	srv := natstest.StartConfig(t, filepath.Join(dir, auth.FileResolverConf))
	connect := func(user string) *nats.Conn {
		t.Helper()
		nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: srv.URL(), Name: user, Creds: filepath.Join(dir, auth.CredsFile(user)),
			Log: natstest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ctl := connect(auth.UserController)
	ctlJS, err := jetstream.New(ctl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Ensure(ctx, ctlJS, kv.Options{}); err != nil {
		t.Fatalf("the controller creates the bus: %v", err)
	}

	// The operators' records, through fleetctl.
	admin := []string{"--nats", srv.URL(), "--creds", filepath.Join(dir, auth.CredsFile(auth.UserAdmin))}
	writes := [][]string{
		{"plan", "set", "--start", "1.0.0", "--target", "1.1.0", "--reason", "release 1.1"},
		{"pause", "--reason", "incident 42"},
		{"resume", "--reason", "incident 42 over"},
		{"plan", "set", "--target", "1.1.1", "--reason", "hotfix"},
		{"pause", "--reason", "freeze"},
	}
	for _, w := range writes {
		if _, stderr, code := execute(t, append(admin, w...)...); code != 0 {
			t.Fatalf("fleetctl %v: exit %d: %s", w, code, stderr)
		}
	}
	adminNC := connect(auth.UserAdmin)
	adminJS, err := jetstream.New(adminNC)
	if err != nil {
		t.Fatal(err)
	}
	state := func(stream string) jetstream.StreamState {
		t.Helper()
		s, err := adminJS.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State
	}
	if st := state(kv.StreamAudit); st.Msgs != uint64(len(writes)) {
		t.Fatalf("%s holds %d messages before the attack, want the %d records", kv.StreamAudit, st.Msgs, len(writes))
	}

	// The attack of the issue: 2,400 events of 120 KB, as fast as the
	// controller's connection sends them.
	ev := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventAlert, At: time.Now().UTC()}
	ev.Reason = strings.Repeat("x", 120<<10)
	big, _ := json.Marshal(ev)
	start := time.Now()
	for range 2400 {
		if err := ctl.Publish(kv.EventSubject("prod"), big); err != nil {
			t.Fatal(err)
		}
	}
	if err := ctl.FlushWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("2,400 events of %d bytes published with the controller's creds in %v", len(big), time.Since(start).Round(time.Millisecond))
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := ctlJS.Publish(pctx, kv.EventSubject("prod"), big); err == nil {
		t.Errorf("a 120 KB event was acked by %s", kv.StreamEvents)
	}
	pcancel()

	// Then the largest events the stream takes, until it has been filled
	// 1.25 times.
	ev.Reason = ""
	small, _ := json.Marshal(ev)
	ev.Reason = strings.Repeat("y", kv.MaxEventSize-len(small))
	maximal, _ := json.Marshal(ev)
	if len(maximal) != kv.MaxEventSize {
		t.Fatalf("maximal event of %d bytes", len(maximal))
	}
	n := int(5 * kv.DefaultEventsMaxBytes / 4 / kv.MaxEventSize)
	start = time.Now()
	for range n {
		if err := ctl.Publish(kv.EventSubject("prod"), maximal); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, 2*time.Minute, func() error {
		if st := state(kv.StreamEvents); st.LastSeq < uint64(n) {
			return fmt.Errorf("%d of %d maximal events stored", st.LastSeq, n)
		}
		return nil
	})
	ev2 := state(kv.StreamEvents)
	t.Logf("%d maximal events (%d bytes) published and stored in %v: %s holds %d (%d MiB), first_seq %d",
		n, len(maximal), time.Since(start).Round(time.Millisecond), kv.StreamEvents, ev2.Msgs, ev2.Bytes>>20, ev2.FirstSeq)
	if ev2.FirstSeq == 1 || ev2.Bytes > uint64(kv.DefaultEventsMaxBytes) {
		t.Errorf("%s not full and bounded: first_seq %d, %d bytes", kv.StreamEvents, ev2.FirstSeq, ev2.Bytes)
	}

	// Every operator record is still there.
	if st := state(kv.StreamAudit); st.FirstSeq != 1 || st.Msgs != uint64(len(writes)) {
		t.Errorf("%s after the attack: first_seq %d, %d messages, want 1 and the %d records", kv.StreamAudit, st.FirstSeq, st.Msgs, len(writes))
	}

	// fleetctl history, the binary, with the admin's creds: bounded in
	// time, and the records in it.
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + srv.URL(), "NATS_CREDS=" + filepath.Join(dir, auth.CredsFile(auth.UserAdmin))}
	for _, args := range [][]string{{"history"}, {"history", "-o", "json"}, {"history", "--group", "prod", "-o", "json"}} {
		start := time.Now()
		stdout, stderr, code := runBin(t, bin, env, args...)
		took := time.Since(start)
		t.Logf("fleetctl %s: %v, %d bytes out", strings.Join(args, " "), took.Round(time.Millisecond), len(stdout))
		if code != 0 {
			t.Fatalf("fleetctl %v: exit %d: %s", args, code, stderr)
		}
		if took > historyBound {
			t.Errorf("fleetctl %v took %v, want under %v", args, took, historyBound)
		}
		if !strings.Contains(stderr, "older ones were left out") {
			t.Errorf("fleetctl %v does not say it left entries out: %q", args, stderr)
		}
		if args[len(args)-1] != "json" {
			for _, w := range writes {
				// Piped, the reason is whole (issue 25; it was cut to 14).
				if reason := w[len(w)-1]; !strings.Contains(stdout, reason) {
					t.Errorf("fleetctl history lacks the record %q", reason)
				}
			}
			continue
		}
		var rep HistoryReport
		if err := json.NewDecoder(bytes.NewReader([]byte(stdout))).Decode(&rep); err != nil {
			t.Fatal(err)
		}
		var reasons []string
		events := 0
		for _, r := range rep.Records {
			if r.Audit != nil {
				reasons = append(reasons, r.Audit.Reason)
			} else {
				events++
			}
		}
		if want := "release 1.1|incident 42|incident 42 over|hotfix|freeze"; strings.Join(reasons, "|") != want || !rep.More || events != kv.DefaultTimelineLimit {
			t.Errorf("fleetctl %v: records %q, %d events, more %t; want %q, the newest %d events, more", args, reasons, events, rep.More, want, kv.DefaultTimelineLimit)
		}
	}
}
