package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KeyLeader is the fleet_stats key of the controllers' leader lease. It has
// no dot, so it can never collide with a <group>.<controller_id> stats key.
const KeyLeader = "leader"

// LeaseValue is the JSON held under the lease key.
type LeaseValue struct {
	V       int       `json:"v"`
	Holder  string    `json:"holder"`
	Renewed time.Time `json:"renewed"`
}

// Lease is one controller's claim on leadership: a key with a per-message TTL
// that only its holder renews. Whoever holds the key is the only controller
// that writes rollout state; a holder that stops renewing (crash, partition)
// loses it after TTL and another controller takes it.
//
// Renewal publishes to the key's subject with a message TTL and an expected
// last sequence: kv.Put and kv.Update would drop the per-key TTL, and the
// expected sequence makes a renewal after someone else took the lease fail
// instead of stealing it back.
type Lease struct {
	Bucket jetstream.KeyValue
	JS     jetstream.JetStream
	Key    string
	Holder string
	TTL    time.Duration

	rev uint64 // revision of our last write; 0 when not held
}

// Campaign takes or renews the lease and reports whether this holder has it.
func (l *Lease) Campaign(ctx context.Context, now time.Time) (bool, error) {
	val, err := json.Marshal(LeaseValue{V: 1, Holder: l.Holder, Renewed: now.UTC()})
	if err != nil {
		return false, err
	}
	if l.rev != 0 {
		msg := nats.NewMsg("$KV." + l.Bucket.Bucket() + "." + l.Key)
		msg.Data = val
		ack, err := l.JS.PublishMsg(ctx, msg, jetstream.WithMsgTTL(l.TTL), jetstream.WithExpectLastSequencePerSubject(l.rev))
		if err == nil {
			l.rev = ack.Sequence
			return true, nil
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || (apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence && apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			// Unknown outcome (timeout, disconnect): we may or may not
			// still hold it; act as if not, and try again next round.
			l.rev = 0
			return false, fmt.Errorf("renew lease %s/%s: %w", l.Bucket.Bucket(), l.Key, err)
		}
		l.rev = 0 // someone else's write came after ours: lost
	}
	rev, err := l.Bucket.Create(ctx, l.Key, val, jetstream.KeyTTL(l.TTL))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("take lease %s/%s: %w", l.Bucket.Bucket(), l.Key, err)
	}
	l.rev = rev
	return true, nil
}

// Release gives the lease up at once (on clean shutdown), so the next
// controller does not wait out the TTL.
func (l *Lease) Release(ctx context.Context) error {
	if l.rev == 0 {
		return nil
	}
	err := l.Bucket.Delete(ctx, l.Key, jetstream.LastRevision(l.rev))
	l.rev = 0
	if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("release lease %s/%s: %w", l.Bucket.Bucket(), l.Key, err)
	}
	return nil
}
