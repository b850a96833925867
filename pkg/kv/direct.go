package kv

import (
	"context"
	"encoding/json"
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

// BatchRequest is a batched direct get (nats-server 2.11+): the messages
// from Seq on whose subject matches NextFor, at most Batch of them; or,
// with MultiLast, the last message of every subject matching one of its
// filters (at most 1,024 subjects).
type BatchRequest struct {
	Seq       uint64   `json:"seq,omitempty"`
	NextFor   string   `json:"next_by_subj,omitempty"`
	Batch     int      `json:"batch,omitempty"`
	MultiLast []string `json:"multi_last,omitempty"`
	UpToSeq   uint64   `json:"up_to_seq,omitempty"`
	// StartTime starts at the first message stored at or after it.
	StartTime *time.Time `json:"start_time,omitempty"`
}

// BatchEnd is what the server says at the end of a batch: how many matching
// messages are left after it, and the sequence of the last one sent.
type BatchEnd struct {
	Pending  uint64
	LastSent uint64
}

// DirectGetBatch sends req to stream's direct get API
// ($JS.API.DIRECT.GET.<stream>, one request, no consumer) and calls fn with
// every message of the answer, in stream order. No matching message is a
// zero BatchEnd and no error.
func DirectGetBatch(ctx context.Context, nc *nats.Conn, stream string, req BatchRequest, fn func(StoredMsg) error) (BatchEnd, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return BatchEnd{}, err
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return BatchEnd{}, err
	}
	defer sub.Unsubscribe()
	subject := "$JS.API.DIRECT.GET." + stream
	if err := nc.PublishRequest(subject, inbox, body); err != nil {
		return BatchEnd{}, err
	}
	for {
		resp, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return BatchEnd{}, fmt.Errorf("direct get batch %s: %w", stream, err)
		}
		if len(resp.Data) == 0 && resp.Header.Get("Status") != "" {
			switch resp.Header.Get("Status") {
			case "204": // end of batch
				var end BatchEnd
				end.Pending, _ = strconv.ParseUint(resp.Header.Get("Nats-Num-Pending"), 10, 64)
				end.LastSent, _ = strconv.ParseUint(resp.Header.Get(jetstream.LastSequenceHeader), 10, 64)
				return end, nil
			case "404":
				return BatchEnd{}, nil
			case "503":
				return BatchEnd{}, fmt.Errorf("direct get batch %s: %w", stream, nats.ErrNoResponders)
			default:
				return BatchEnd{}, fmt.Errorf("direct get batch %s: status %s %s", stream, resp.Header.Get("Status"), resp.Header.Get("Description"))
			}
		}
		m, err := ParseStored(resp.Header, resp.Data)
		if err != nil {
			return BatchEnd{}, fmt.Errorf("direct get batch %s: %w", stream, err)
		}
		if m.Stream != stream {
			return BatchEnd{}, fmt.Errorf("direct get batch %s: answered for stream %s", stream, m.Stream)
		}
		if err := fn(m); err != nil {
			return BatchEnd{}, err
		}
	}
}

// scanPage is how many messages one batch of ScanFrom asks for (the
// server also stops a batch at its max pending bytes, 64 MiB by default).
const scanPage = 10000

// ScanFrom calls fn with every message of stream from sequence from on whose
// subject matches filter ("" for every message: cheaper for the server than
// a filter that matches all), in stream order, a page of batched direct
// gets at a time, until none is left. It returns the sequence of the last
// message it delivered (from-1 when none). Messages stored while it runs are
// delivered too, up to the moment the last page is read.
func ScanFrom(ctx context.Context, nc *nats.Conn, stream, filter string, from uint64, fn func(StoredMsg) error) (uint64, error) {
	last := max(from, 1) - 1
	for {
		end, err := DirectGetBatch(ctx, nc, stream, BatchRequest{Seq: last + 1, NextFor: filter, Batch: scanPage}, func(m StoredMsg) error {
			last = m.Sequence
			return fn(m)
		})
		if err != nil {
			return last, err
		}
		if end.Pending == 0 || end.LastSent == 0 {
			return last, nil
		}
	}
}
