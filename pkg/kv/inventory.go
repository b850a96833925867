package kv

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	// (ServerHeaders), so it is not a heartbeat an agent published.
	Foreign bool
}

// Decode checks and decodes the heartbeat: a foreign message, or a body that
// heartbeat.DecodeFrom rejects for its subject, is a *Problem (ErrCorrupt)
// naming the subject.
func (s StoredHeartbeat) Decode() (*heartbeat.Heartbeat, error) {
	problem := func(err error) error {
		return &Problem{Bucket: StreamHB, Key: s.Subject, Revision: s.Sequence, Err: err}
	}
	if s.Foreign {
		return nil, problem(errForeignMsg)
	}
	hb, err := heartbeat.DecodeFrom(s.Subject, s.Data)
	if err != nil {
		return nil, problem(corrupt("%v", err))
	}
	return hb, nil
}

// ServerHeaders reports whether h, the headers of a message a consumer
// delivered, carries a header the server adds only to what it sends out
// itself (direct get responses, republished messages): a consumer delivers
// the stored headers as they are, so these were stored with the message,
// which is then a JetStream response captured by the stream, not a value a
// client published.
func ServerHeaders(h nats.Header) bool {
	for _, name := range []string{jetstream.StreamHeader, jetstream.SequenceHeader, jetstream.SubjectHeader,
		jetstream.TimeStampHeaer, jetstream.LastSequenceHeader} {
		if len(h.Values(name)) > 0 {
			return true
		}
	}
	return false
}

// LastHeartbeats reads the last heartbeat of every agent in group (all groups
// when group is empty) straight from the stream: the inventory as the bus
// sees it, with no controller involved. It uses one short-lived ordered
// consumer.
func (f *Fleet) LastHeartbeats(ctx context.Context, group string) ([]StoredHeartbeat, error) {
	filter := HBFilter(group)
	info, err := f.HB.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", StreamHB, err)
	}
	// One message per subject (MaxMsgsPerSubject 1): this many to read.
	want := len(info.State.Subjects)
	if want == 0 {
		return nil, nil
	}
	cons, err := f.HB.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", StreamHB, err)
	}
	// Delete the consumer when done rather than leave it to expire: a
	// script polling `fleetctl agents ls` must not pile up consumers
	// against the stream's limit.
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = f.HB.DeleteConsumer(dctx, info.Name)
		}
	}()
	out := make([]StoredHeartbeat, 0, want)
	for len(out) < want {
		batch, err := cons.Fetch(min(want-len(out), 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", StreamHB, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", StreamHB, err)
			}
			out = append(out, StoredHeartbeat{
				Subject: msg.Subject(), Data: msg.Data(), Stored: md.Timestamp,
				Sequence: md.Sequence.Stream, Foreign: ServerHeaders(msg.Headers()),
			})
			if md.NumPending == 0 {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read %s: %w", StreamHB, err)
		}
		if n == 0 {
			// Messages aged out between Info and Fetch.
			return out, nil
		}
	}
	return out, nil
}
