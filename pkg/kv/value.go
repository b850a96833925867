package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Entry is a decoded value with the revision it was read at. Pass Revision
// back to Update to write only if nobody wrote in between.
type Entry[T any] struct {
	Value    T
	Revision uint64
}

// Get reads and decodes key. A missing or deleted key is ErrNotFound; a value
// that does not decode is ErrCorrupt.
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

// Create writes key only if it does not exist yet.
func Create[T any](ctx context.Context, b jetstream.KeyValue, key string, v T) (uint64, error) {
	data, err := json.Marshal(v)
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
	data, err := json.Marshal(v)
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

// readAll calls fn with every current entry of b (deleted keys skipped) and
// returns when all have been delivered, or at fn's first error.
func readAll(ctx context.Context, b jetstream.KeyValue, fn func(jetstream.KeyValueEntry) error) error {
	w, err := b.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("read %s: %w", b.Bucket(), err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("read %s: %w", b.Bucket(), ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("read %s: watcher closed", b.Bucket())
			}
			if e == nil { // initial values delivered
				return nil
			}
			if err := fn(e); err != nil {
				return err
			}
		}
	}
}

// decodeEntry decodes the JSON value of e, read from b, into v; a value that
// does not decode is ErrCorrupt.
func decodeEntry(b jetstream.KeyValue, e jetstream.KeyValueEntry, v any) error {
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return fmt.Errorf("%s/%s: %w: %v", b.Bucket(), e.Key(), ErrCorrupt, err)
	}
	return nil
}
