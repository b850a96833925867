package kv

import (
	"context"
	"fmt"
	"time"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
)

// StoredHeartbeat is the last heartbeat message of one agent as the stream
// holds it.
type StoredHeartbeat struct {
	Subject string
	Data    []byte
	Stored  time.Time
	// Sequence is the message's stream sequence.
	Sequence uint64
	// Foreign: the stored message carries JetStream's own headers
	// (StoredMsg.Foreign), so it is not a heartbeat an agent published.
	Foreign bool
}

// Decode checks and decodes the heartbeat: a foreign message, or a body that
// heartbeat.DecodeFrom rejects for its subject, is a *Problem (ErrCorrupt)
// naming the subject.
func (s StoredHeartbeat) Decode() (*heartbeat.Heartbeat, error) {
	return s.decode(heartbeat.DecodeFrom)
}

// DecodeWith is Decode with d's buffers: the Heartbeat returned is d's and
// is overwritten by its next call (heartbeat.Decoder).
func (s StoredHeartbeat) DecodeWith(d *heartbeat.Decoder) (*heartbeat.Heartbeat, error) {
	return s.decode(d.DecodeFrom)
}

func (s StoredHeartbeat) decode(decodeFrom func(string, []byte) (*heartbeat.Heartbeat, error)) (*heartbeat.Heartbeat, error) {
	problem := func(err error) error {
		return &Problem{Bucket: StreamHB, Key: s.Subject, Revision: s.Sequence, Err: err}
	}
	if s.Foreign {
		return nil, problem(ErrForeign)
	}
	hb, err := decodeFrom(s.Subject, s.Data)
	if err != nil {
		return nil, problem(corrupt("%v", err))
	}
	return hb, nil
}

// LastHeartbeats reads the last heartbeat of every agent in group (all groups
// when group is empty) straight from the stream: the inventory as the bus
// sees it, with no controller involved. It pages through the stream with
// batched direct gets (ScanFrom), so it creates no consumer: a script polling
// `fleetctl agents ls` costs the server nothing to clean up, and a user that
// may not create consumers (a controller) can read it too.
func (f *Fleet) LastHeartbeats(ctx context.Context, group string) ([]StoredHeartbeat, error) {
	var out []StoredHeartbeat
	_, err := ScanFrom(ctx, f.JS.Conn(), StreamHB, HBFilter(group), 1, func(m StoredMsg) error {
		out = append(out, StoredHeartbeatOf(m))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", StreamHB, err)
	}
	return out, nil
}

// StoredHeartbeatOf is a heartbeat message as a direct get or the stream's
// republish delivers it.
func StoredHeartbeatOf(m StoredMsg) StoredHeartbeat {
	return StoredHeartbeat{Subject: m.Subject, Data: m.Data, Stored: m.Time, Sequence: m.Sequence, Foreign: m.Foreign}
}
