package kv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StoredMsg is one message of a stream as a direct get (or a bucket's
// republish) delivers it, described by what the server itself says of it.
//
// A stored message may carry headers named like the ones the server adds
// (Nats-Subject, Nats-Sequence, …): a JetStream response reflected into a
// bucket subject is stored with its own headers. The server appends its
// headers after the stored ones, so the last value of each is the truth;
// more than one value means the stored message is foreign, not a value
// fleetwave wrote. jetstream's KeyValue.Get reads the first value, which is
// how a reflected value once reported revision 9 for a key whose stream
// sequence was 2 and wedged every compare-and-swap writer.
type StoredMsg struct {
	Stream   string
	Subject  string
	Sequence uint64
	Time     time.Time // zero for republished messages
	Data     []byte
	Header   nats.Header
	// Deleted marks a KV delete or purge marker, or a TTL marker.
	Deleted bool
	// Foreign marks a stored message that carries JetStream's own headers.
	Foreign bool
}

// ParseStored reads what the server says of a direct get response or a
// republished message. A message without the server's headers is an error.
func ParseStored(h nats.Header, data []byte) (StoredMsg, error) {
	m := StoredMsg{Data: data, Header: h}
	last := func(name string) string {
		v := h.Values(name)
		if len(v) > 1 {
			m.Foreign = true
		}
		if len(v) == 0 {
			return ""
		}
		return v[len(v)-1]
	}
	m.Stream, m.Subject = last(jetstream.StreamHeader), last(jetstream.SubjectHeader)
	seq := last(jetstream.SequenceHeader)
	if m.Stream == "" || m.Subject == "" || seq == "" {
		return StoredMsg{}, errors.New("not a stored message: no Nats-Stream, Nats-Subject or Nats-Sequence header")
	}
	var err error
	if m.Sequence, err = strconv.ParseUint(seq, 10, 64); err != nil || m.Sequence == 0 {
		return StoredMsg{}, fmt.Errorf("not a stored message: Nats-Sequence %q", seq)
	}
	if ts := last(jetstream.TimeStampHeaer); ts != "" {
		if m.Time, err = time.Parse(time.RFC3339Nano, ts); err != nil {
			return StoredMsg{}, fmt.Errorf("not a stored message: Nats-Time-Stamp %q", ts)
		}
	}
	switch {
	case h.Get("KV-Operation") != "":
		m.Deleted = true
	case h.Get(jetstream.MarkerReasonHeader) != "":
		m.Deleted = true
	}
	return m, nil
}

// DirectGetLast reads the last message stored on subject in stream with a
// direct get ($JS.API.DIRECT.GET.<stream>.<subject>): one request, no
// stream info, and the exact subject the credentials of an agent allow.
// No message is ErrNotFound.
func DirectGetLast(ctx context.Context, nc *nats.Conn, stream, subject string) (StoredMsg, error) {
	resp, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
	if err != nil {
		return StoredMsg{}, fmt.Errorf("direct get %s %s: %w", stream, subject, err)
	}
	if len(resp.Data) == 0 {
		switch status := resp.Header.Get("Status"); status {
		case "":
		case "404":
			return StoredMsg{}, fmt.Errorf("%s %s: %w", stream, subject, ErrNotFound)
		default:
			return StoredMsg{}, fmt.Errorf("direct get %s %s: status %s %s", stream, subject, status, resp.Header.Get("Description"))
		}
	}
	m, err := ParseStored(resp.Header, resp.Data)
	if err != nil {
		return StoredMsg{}, fmt.Errorf("direct get %s %s: %w", stream, subject, err)
	}
	if m.Stream != stream || m.Subject != subject {
		return StoredMsg{}, fmt.Errorf("direct get %s %s: answered for %s %s", stream, subject, m.Stream, m.Subject)
	}
	return m, nil
}

// KeySubject is the stream subject of key in bucket: $KV.<bucket>.<key>.
func KeySubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// KeyOfSubject is the inverse of KeySubject for one bucket.
func KeyOfSubject(bucket, subject string) (key string, ok bool) {
	key, ok = strings.CutPrefix(subject, "$KV."+bucket+".")
	return key, ok && key != ""
}

// StreamOf is the stream behind a bucket: KV_<bucket>.
func StreamOf(bucket string) string { return "KV_" + bucket }
