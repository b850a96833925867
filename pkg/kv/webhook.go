package kv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A webhook's place in the timeline: the sequences of the last message the
// leader handled for it in FLEET_AUDIT and in FLEET_EVENTS (delivered, dropped after its max age, or not one
// it forwards), kept in fleet_stats under WebhookCursorKey(url). It is what
// a durable JetStream consumer's ack floor would be, kept where the
// controller may already write: the CONTROL account may create no consumer
// (a consumer's deliver subject is in the request's body, beyond any
// permission, and a push consumer would publish FLEET_AUDIT's messages,
// which the controller writes, onto any subject of FLEET; internal/auth
// perms.go). The controller reads both streams with batched direct gets, as
// its dashboard does, so webhooks need no grant the controller did not
// have.
//
// The key has no dot, like KeyLeader, so it never looks like a
// <group>.<controller_id> stats key, and its message is written with a
// "never" TTL: the bucket's age limit (StatsTTL) would otherwise drop the
// place of a webhook that had nothing to send for an hour.

// webhookKeyPrefix starts the fleet_stats key of every webhook's cursor.
const webhookKeyPrefix = "webhook-"

// WebhookCursorKey is the fleet_stats key of the cursor of the webhook
// posting to url: a hash, so that a URL holding a secret (Slack's do) is
// not written to the bus, and the same URL finds its place again after a
// restart or a change of leader.
func WebhookCursorKey(url string) string {
	sum := sha256.Sum256([]byte(url))
	return webhookKeyPrefix + hex.EncodeToString(sum[:16])
}

// IsWebhookCursorKey reports whether key of fleet_stats holds a webhook's
// cursor (not a stats entry).
func IsWebhookCursorKey(key string) bool { return strings.HasPrefix(key, webhookKeyPrefix) }

// WebhookCursor is the value under WebhookCursorKey.
type WebhookCursor struct {
	V int `json:"v"`
	// Webhook is the webhook's short name (host and hash, never the URL),
	// for a human reading the bucket.
	Webhook string `json:"webhook"`
	// Seq is the FLEET_AUDIT sequence of the last message handled; the
	// next delivery starts after it.
	Seq uint64 `json:"seq"`
	// EventsSeq is the same in FLEET_EVENTS. Absent in a cursor written
	// before FLEET_EVENTS existed: the webhook then starts there with the
	// first event stored after At.
	EventsSeq *uint64 `json:"events_seq,omitempty"`
	// At is when it was written, by controller By.
	At time.Time `json:"at"`
	By string    `json:"by"`
}

// ReadWebhookCursor reads the cursor under key with a direct get, and its
// revision, which SaveWebhookCursor compares against. A key never written
// or deleted is ErrNotFound (with the revision of the delete marker, if
// any); a value that is not a cursor is ErrCorrupt, with its revision.
func ReadWebhookCursor(ctx context.Context, nc *nats.Conn, key string) (WebhookCursor, uint64, error) {
	m, err := DirectGetLast(ctx, nc, StreamOf(BucketStats), KeySubject(BucketStats, key))
	if err != nil {
		return WebhookCursor{}, 0, err
	}
	if m.Deleted {
		return WebhookCursor{}, m.Sequence, fmt.Errorf("%s/%s: %w", BucketStats, key, ErrNotFound)
	}
	if m.Foreign {
		return WebhookCursor{}, m.Sequence, fmt.Errorf("%s/%s: %w", BucketStats, key, ErrForeign)
	}
	var c WebhookCursor
	if err := checkSchema(m.Data); err != nil {
		return WebhookCursor{}, m.Sequence, fmt.Errorf("%s/%s: %w", BucketStats, key, err)
	}
	if err := json.Unmarshal(m.Data, &c); err != nil || c.At.IsZero() {
		return WebhookCursor{}, m.Sequence, corrupt("%s/%s: not a webhook cursor: %s", BucketStats, key, m.Data)
	}
	return c, m.Sequence, nil
}

// SaveWebhookCursor writes c under key if the key's last revision is still
// rev (0: the key has never been written), and returns the new revision; a
// later write by someone else (another controller that took the lead) is
// ErrConflict. The message never expires (see above).
func SaveWebhookCursor(ctx context.Context, js jetstream.JetStream, key string, c WebhookCursor, rev uint64) (uint64, error) {
	return saveForever(ctx, js, key, c, rev)
}

// Timeline is the cursor as a timeline cursor (ReadTimelineAfter): what
// the webhook has handled of each stream.
func (c WebhookCursor) Timeline() TimelineCursor {
	tc := TimelineCursor{Audit: c.Seq}
	if c.EventsSeq != nil {
		tc.Events = *c.EventsSeq
	}
	return tc
}
