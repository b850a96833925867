package kv_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// TestWebhookCursor: a cursor is created once, moved with compare-and-swap
// (a writer that read an older revision is refused), outlives the stats
// bucket's age limit (a stats entry written with it expires, the cursor
// does not), and is no stats entry to the stats reader.
func TestWebhookCursor(t *testing.T) {
	srv := natstest.Start(t)
	ctx := context.Background()
	js := srv.JetStream("cursor")
	f, err := kv.Ensure(ctx, js, kv.Options{Memory: true, StatsTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	key := kv.WebhookCursorKey("https://hooks.slack.com/services/T/B/SECRET")
	if !kv.IsWebhookCursorKey(key) || kv.IsWebhookCursorKey(kv.KeyLeader) || kv.IsWebhookCursorKey(kv.StatsKey("prod", "c1")) {
		t.Fatalf("key %q", key)
	}
	if _, _, err := kv.ReadWebhookCursor(ctx, js.Conn(), key); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("no cursor yet: %v, want ErrNotFound", err)
	}
	c := kv.WebhookCursor{V: 1, Webhook: "hooks.slack.com-1234", Seq: 7, At: time.Now().UTC(), By: "c1"}
	rev, err := kv.SaveWebhookCursor(ctx, js, key, c, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.SaveWebhookCursor(ctx, js, key, c, 0); !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	c.Seq, c.By = 9, "c2"
	rev2, err := kv.SaveWebhookCursor(ctx, js, key, c, rev)
	if err != nil {
		t.Fatal(err)
	}
	c.Seq = 8
	if _, err := kv.SaveWebhookCursor(ctx, js, key, c, rev); !errors.Is(err, kv.ErrConflict) {
		t.Fatalf("write on a stale revision: %v, want ErrConflict", err)
	}
	// A stats entry written now expires with the bucket's age limit; the
	// cursor stays.
	if _, err := kv.Save(ctx, f.Stats, kv.StatsKey("prod", "c1"), kv.Stats{V: 1, ControllerID: "c1", Group: "prod", At: time.Now().UTC()}, 0); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, func() error {
		stats, err := f.ReadStats(ctx)
		if err != nil {
			return err
		}
		if len(stats) != 0 {
			return fmt.Errorf("%d stats entries left", len(stats))
		}
		return nil
	})
	got, gotRev, err := kv.ReadWebhookCursor(ctx, js.Conn(), key)
	if err != nil || got.Seq != 9 || got.By != "c2" || gotRev != rev2 {
		t.Fatalf("cursor after the age limit: %+v rev %d, %v; want seq 9 by c2 at revision %d", got, gotRev, err, rev2)
	}
	// Not valid: ErrCorrupt, with the revision to replace it at.
	badRev, err := f.Stats.Put(ctx, key, []byte(`{"type":"io.nats.jetstream.api.v1.stream_info_response"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, r, err := kv.ReadWebhookCursor(ctx, js.Conn(), key); !errors.Is(err, kv.ErrCorrupt) || r != badRev {
		t.Fatalf("bad cursor: rev %d, %v; want ErrCorrupt at %d", r, err, badRev)
	}
}
