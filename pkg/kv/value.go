package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Entry is a decoded value with the revision it was read at. Pass Revision
// back to Update to write only if nobody wrote in between.
type Entry[T any] struct {
	Value    T
	Revision uint64
}

// Get reads and decodes key through jetstream's KeyValue.Get: for callers
// that hold only a bucket handle (an agent's credentials, a mirror bound
// through a JetStream domain) and only look at the value. A missing or
// deleted key is ErrNotFound; a value that does not decode is ErrCorrupt.
//
// The revision it reports is the first Nats-Sequence header of the stored
// message, which a foreign message (a JetStream response stored under the
// key) forges. Never write back against it: writers read with GetLast or
// the Fleet's readers (ReadConfig, ReadSpec, ReadGroupStatus), which report
// the stream's own sequence.
func Get[T any](ctx context.Context, b jetstream.KeyValue, key string) (Entry[T], error) {
	var e Entry[T]
	kve, err := b.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return e, fmt.Errorf("%s/%s: %w", b.Bucket(), key, ErrNotFound)
	}
	if err != nil {
		return e, fmt.Errorf("get %s/%s: %w", b.Bucket(), key, err)
	}
	if err := json.Unmarshal(kve.Value(), &e.Value); err != nil {
		return e, fmt.Errorf("%s/%s at revision %d: %w: %v", b.Bucket(), key, kve.Revision(), ErrCorrupt, err)
	}
	e.Revision = kve.Revision()
	return e, nil
}

// GetLast reads key of bucket as the stream stores it, with one direct get
// over nc (DirectGetLast), and decodes it with decode. The revision is the
// stream's own last sequence for the key, so it is the one compare-and-swap
// checks against. A missing or deleted key is ErrNotFound. A stored message
// that carries JetStream's own headers (StoredMsg.Foreign), or a value decode
// rejects, is a *Problem wrapping ErrCorrupt, returned with the Entry's
// Revision set (and its Value zero): a writer that means to replace the bad
// value can, with compare-and-swap on that revision.
func GetLast[T any](ctx context.Context, nc *nats.Conn, bucket, key string, decode func([]byte) (T, error)) (Entry[T], error) {
	var e Entry[T]
	m, err := DirectGetLast(ctx, nc, StreamOf(bucket), KeySubject(bucket, key))
	if errors.Is(err, ErrNotFound) {
		return e, fmt.Errorf("%s/%s: %w", bucket, key, ErrNotFound)
	}
	if err != nil {
		return e, fmt.Errorf("get %s/%s: %w", bucket, key, err)
	}
	if m.Deleted {
		return e, fmt.Errorf("%s/%s: %w", bucket, key, ErrNotFound)
	}
	e.Revision = m.Sequence
	if m.Foreign {
		return e, &Problem{Bucket: bucket, Key: key, Revision: m.Sequence, Err: ErrForeign}
	}
	v, err := decode(m.Data)
	if err != nil {
		return e, &Problem{Bucket: bucket, Key: key, Revision: m.Sequence, Err: err}
	}
	e.Value = v
	return e, nil
}

// ErrForeign is a stored message whose headers say the server delivered
// it once already: a JetStream response stored under a key, not a value
// fleetwave wrote, whatever its body looks like.
var ErrForeign = fmt.Errorf("%w: the stored message carries JetStream's own headers (Nats-Sequence, Nats-Subject, …): "+
	"it is a JetStream response stored under the key, not a value fleetwave wrote", ErrCorrupt)

// Problem is a stored value a reader skipped because it is not what its key
// holds: it does not decode, does not validate, belongs under another key,
// or is a foreign message. Err wraps ErrCorrupt.
type Problem struct {
	// Bucket is the bucket, or the stream for a heartbeat (StreamHB).
	Bucket string
	// Key is the key, or the subject for a heartbeat.
	Key string
	// Revision is the stream sequence of the bad value; 0 when unknown.
	Revision uint64
	Err      error
}

// Where names the value: bucket/key (stream/subject for a heartbeat).
func (p *Problem) Where() string { return p.Bucket + "/" + p.Key }

func (p *Problem) Error() string {
	msg := p.Where()
	if p.Revision != 0 {
		msg += fmt.Sprintf(" (revision %d)", p.Revision)
	}
	return msg + ": " + p.Err.Error() + "; to repair: " + p.Fix()
}

func (p *Problem) Unwrap() error { return p.Err }

// Fix is what repairs the value: the command that replaces it, or how it
// goes away by itself.
func (p *Problem) Fix() string {
	switch p.Bucket {
	case BucketConfig:
		return "write a valid config: fleetctl config apply -f FILE (or fleetctl config reset)"
	case BucketPlan:
		if p.Key == KeySpec {
			return "write a valid plan: fleetctl plan set --start VERSION --target VERSION"
		}
		if p.Key == KeyQuarantine {
			return "fleetctl quarantine add VERSION --reason TEXT (replaces it with a list holding that version alone; add the others again)"
		}
		if group, ok := GroupFromKey(p.Key); ok && rollout.ValidateGroupName(group) == nil {
			return fmt.Sprintf("fleetctl reset --group %s (removes it; the controller starts the group afresh as unstarted)", group)
		}
		return fmt.Sprintf("remove it: nats kv del %s %s", p.Bucket, p.Key)
	case BucketStats:
		return fmt.Sprintf("it expires with the bucket's TTL, or remove it: nats kv del %s %s", p.Bucket, p.Key)
	case StreamHB:
		return fmt.Sprintf("it ages out with the agent expiry, or remove it: nats stream purge %s --subject %s", p.Bucket, p.Key)
	}
	return fmt.Sprintf("remove it: nats kv del %s %s", p.Bucket, p.Key)
}

// corrupt is the error of a value that is not what its key should hold.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// checkSchema requires what every value on the bus has (DESIGN §2): a JSON
// object with "v": 1. Readers check it before decoding, because a JetStream
// API response stored under a key ({"type":"io.nats.jetstream.api.v1…"})
// decodes with encoding/json into a zero or default value without error.
func checkSchema(data []byte) error {
	var probe struct {
		V *int `json:"v"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return corrupt("not a JSON object: %v", err)
	}
	if probe.V == nil {
		return corrupt(`no "v": not a fleetwave value (a JetStream API response stored under the key?)`)
	}
	if *probe.V != rollout.SchemaVersion {
		return corrupt(`"v" %d: this fleetwave reads version %d`, *probe.V, rollout.SchemaVersion)
	}
	return nil
}

// encode is v as stored: its JSON. A group status is bounded first
// (rollout.GroupStatus.Bounded), whoever writes it: it is stored shorter
// than rollout.MaxStatusBytes, its free text cut if need be, or not at all
// (rollout.ErrStatusTooLarge).
func encode[T any](v T) ([]byte, error) {
	if st, ok := any(v).(rollout.GroupStatus); ok {
		_, data, err := st.Bounded()
		return data, err
	}
	return json.Marshal(v)
}

// Create writes key only if it does not exist yet.
func Create[T any](ctx context.Context, b jetstream.KeyValue, key string, v T) (uint64, error) {
	data, err := encode(v)
	if err != nil {
		return 0, fmt.Errorf("encode %s/%s: %w", b.Bucket(), key, err)
	}
	rev, err := b.Create(ctx, key, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%s/%s already exists: %w", b.Bucket(), key, ErrConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("create %s/%s: %w", b.Bucket(), key, err)
	}
	return rev, nil
}

// Update replaces key only if its revision is still rev.
func Update[T any](ctx context.Context, b jetstream.KeyValue, key string, v T, rev uint64) (uint64, error) {
	data, err := encode(v)
	if err != nil {
		return 0, fmt.Errorf("encode %s/%s: %w", b.Bucket(), key, err)
	}
	next, err := b.Update(ctx, key, data, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%s/%s was written by someone else after revision %d: %w", b.Bucket(), key, rev, ErrConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("update %s/%s: %w", b.Bucket(), key, err)
	}
	return next, nil
}

// Save writes v with compare-and-swap: Create when rev is 0 (the caller read
// nothing), Update otherwise.
func Save[T any](ctx context.Context, b jetstream.KeyValue, key string, v T, rev uint64) (uint64, error) {
	if rev == 0 {
		return Create(ctx, b, key, v)
	}
	return Update(ctx, b, key, v, rev)
}

// ReadLatest calls fn with the last message of every key of bucket that is
// not deleted, in stream order: one batched direct get (multi_last), no
// consumer, with the server's own sequences and the stored headers (so a
// foreign message shows). A bucket with more than 1,024 keys is an error
// (the server's cap on one such request).
func ReadLatest(ctx context.Context, nc *nats.Conn, bucket string, fn func(key string, m StoredMsg) error) error {
	req := BatchRequest{MultiLast: []string{KeySubject(bucket, ">")}}
	_, err := DirectGetBatch(ctx, nc, StreamOf(bucket), req, func(m StoredMsg) error {
		key, ok := KeyOfSubject(bucket, m.Subject)
		if !ok || m.Deleted {
			return nil
		}
		return fn(key, m)
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", bucket, err)
	}
	return nil
}
