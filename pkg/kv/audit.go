package kv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The audit trail: one stream, FLEET_AUDIT, holding what fleetctl wrote
// (fleet.audit.>) and the rollout events (fleet.events.>), so one timeline
// says who moved a group and what the controller did next. The stream
// captures the events subjects itself: every event publisher (the
// controller, fleetctl's group actions, older controllers too) lands in
// the timeline without a change or a new grant.
const (
	// StreamAudit is the audit trail stream.
	StreamAudit = "FLEET_AUDIT"
	// AuditPrefix is the subject space of audit records:
	// fleet.audit.<group> for a write to one group's status,
	// fleet.audit._fleet for fleet-wide writes (config, plan spec).
	AuditPrefix = "fleet.audit."
	// AuditFleet is the subject token of fleet-wide records; '.'-free and
	// not a group name's shape (those start with a letter or digit).
	AuditFleet = "_fleet"

	DefaultAuditMaxAge         = 90 * 24 * time.Hour
	DefaultAuditMaxBytes       = 256 << 20
	DefaultAuditMaxBytesMemory = 16 << 20
	// maxAuditMsgSize caps one record: a config before and after fits.
	maxAuditMsgSize = 256 << 10
)

// AuditSubject is the subject of a record about group ("" for fleet-wide).
func AuditSubject(group string) string {
	if group == "" {
		return AuditPrefix + AuditFleet
	}
	return AuditPrefix + group
}

// AuditRecord is one write fleetctl made, as stored on fleet.audit.>.
type AuditRecord struct {
	V int `json:"v"`
	// At is when the write was made (fleetctl's clock).
	At time.Time `json:"at"`
	// Actor is who: the NATS user's name in the credentials, else
	// $USER@hostname, or what --actor says. A label, not a proof.
	Actor string `json:"actor"`
	// Reason is --reason (or a group action's --note); may be empty.
	Reason string `json:"reason,omitempty"`
	// Command is the command without "fleetctl": "plan set", "pause".
	Command string `json:"command"`
	// Group is the group whose status was written; empty for fleet-wide.
	Group            string `json:"group,omitempty"`
	Bucket           string `json:"bucket"`
	Key              string `json:"key"`
	Revision         uint64 `json:"revision,omitempty"`
	PreviousRevision uint64 `json:"previous_revision,omitempty"`
	Deleted          bool   `json:"deleted,omitempty"`
	// Before and After are the key's value before and after the write
	// (absent: the key did not exist, or was deleted).
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
	// Diff lists every JSON field that differs, by path.
	Diff []FieldChange `json:"diff,omitempty"`
}

// FieldChange is one JSON field that a write changed: its path
// ("groups[1].max_in_flight"), and the values before and after (absent:
// the field was not there).
type FieldChange struct {
	Path   string          `json:"path"`
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// Validate refuses a record that could not have been written by fleetctl.
func (r AuditRecord) Validate() error {
	switch {
	case r.V != 1:
		return fmt.Errorf("audit record: v %d, want 1", r.V)
	case r.At.IsZero():
		return errors.New("audit record: no at")
	case r.Actor == "":
		return errors.New("audit record: no actor")
	case r.Command == "":
		return errors.New("audit record: no command")
	case r.Group != "" && rollout.ValidateGroupName(r.Group) != nil:
		return fmt.Errorf("audit record: group: %w", rollout.ValidateGroupName(r.Group))
	}
	return nil
}

// JSONDiff lists the fields that differ between two JSON values, objects
// compared field by field and arrays element by element, in path order.
func JSONDiff(before, after json.RawMessage) []FieldChange {
	var a, b any
	if len(before) > 0 {
		_ = json.Unmarshal(before, &a)
	}
	if len(after) > 0 {
		_ = json.Unmarshal(after, &b)
	}
	var out []FieldChange
	diffValue("", a, b, len(before) > 0, len(after) > 0, &out)
	return out
}

func diffValue(path string, a, b any, hasA, hasB bool, out *[]FieldChange) {
	am, aObj := a.(map[string]any)
	bm, bObj := b.(map[string]any)
	if aObj && bObj {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			av, okA := am[k]
			bv, okB := bm[k]
			diffValue(join(path, k), av, bv, okA, okB, out)
		}
		return
	}
	as, aArr := a.([]any)
	bs, bArr := b.([]any)
	if aArr && bArr && len(as) == len(bs) {
		for i := range as {
			diffValue(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i], true, true, out)
		}
		return
	}
	ra, rb := raw(a, hasA), raw(b, hasB)
	if hasA == hasB && bytes.Equal(ra, rb) {
		return
	}
	p := path
	if p == "" {
		p = "."
	}
	*out = append(*out, FieldChange{Path: p, Before: ra, After: rb})
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func raw(v any, has bool) json.RawMessage {
	if !has {
		return nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return data
}

// PublishAudit stores r in FLEET_AUDIT and waits for the stream's ack: a
// record that is not acknowledged is an error, never dropped silently.
func (f *Fleet) PublishAudit(ctx context.Context, r AuditRecord) error {
	if err := r.Validate(); err != nil {
		return err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = f.JS.Publish(ctx, AuditSubject(r.Group), data, jetstream.WithExpectStream(StreamAudit))
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no stream %s stores %s (created by a controller of this version, or fleetctl bus ensure): %w", StreamAudit, AuditSubject(r.Group), err)
	}
	return err
}

// TimelineEntry is one message of FLEET_AUDIT: an audit record or a
// rollout event, with the stream's time and sequence.
type TimelineEntry struct {
	Seq    uint64
	Stored time.Time
	Audit  *AuditRecord
	Event  *rollout.Event
}

// At is when the entry happened by its own account, else when it was stored.
func (e TimelineEntry) At() time.Time {
	switch {
	case e.Audit != nil:
		return e.Audit.At
	case e.Event != nil && !e.Event.At.IsZero():
		return e.Event.At
	}
	return e.Stored
}

// Group is the group the entry is about ("" for fleet-wide).
func (e TimelineEntry) Group() string {
	if e.Audit != nil {
		return e.Audit.Group
	}
	if e.Event != nil {
		return e.Event.Group
	}
	return ""
}

// ReadTimeline reads FLEET_AUDIT from the first message stored at or after
// since (zero: everything), in stream order, with batched direct gets (no
// consumer). A message that does not decode is reported in problems and
// skipped.
func (f *Fleet) ReadTimeline(ctx context.Context, since time.Time) (entries []TimelineEntry, problems []Problem, err error) {
	nc := f.JS.Conn()
	from := uint64(1)
	if !since.IsZero() {
		// The first sequence stored at or after since, by the server's
		// index; none: the timeline since then is empty.
		from = 0
		_, err := DirectGetBatch(ctx, nc, StreamAudit, BatchRequest{Batch: 1, StartTime: &since}, func(m StoredMsg) error {
			from = m.Sequence
			return nil
		})
		if err != nil {
			return nil, nil, timelineErr(err)
		}
		if from == 0 {
			return nil, nil, nil
		}
	}
	entries, problems, _, err = f.ReadTimelineFrom(ctx, from)
	if err != nil {
		return nil, nil, err
	}
	if !since.IsZero() {
		entries = slices.DeleteFunc(entries, func(e TimelineEntry) bool { return e.Stored.Before(since) })
	}
	return entries, problems, nil
}

// ReadTimelineFrom reads FLEET_AUDIT from sequence from on, like
// ReadTimeline, and returns the last sequence read (from-1 when there was
// none), where a follower goes on from next time.
func (f *Fleet) ReadTimelineFrom(ctx context.Context, from uint64) (entries []TimelineEntry, problems []Problem, last uint64, err error) {
	last, err = ScanFrom(ctx, f.JS.Conn(), StreamAudit, "", from, func(m StoredMsg) error {
		e, derr := decodeTimeline(m)
		if derr != nil {
			problems = append(problems, Problem{Bucket: StreamAudit, Key: m.Subject, Revision: m.Sequence, Err: derr})
			return nil
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, nil, last, timelineErr(err)
	}
	return entries, problems, last, nil
}

// LastTimelineSeq is the sequence of the newest message in FLEET_AUDIT (0:
// none).
func (f *Fleet) LastTimelineSeq(ctx context.Context) (uint64, error) {
	st, err := f.JS.Stream(ctx, StreamAudit)
	if err != nil {
		return 0, timelineErr(err)
	}
	return st.CachedInfo().State.LastSeq, nil
}

// decodeTimeline decodes one message of FLEET_AUDIT.
func decodeTimeline(m StoredMsg) (TimelineEntry, error) {
	e := TimelineEntry{Seq: m.Sequence, Stored: m.Time}
	var derr error
	switch {
	case m.Foreign:
		derr = errors.New("stored with JetStream's own headers: not written by fleetwave")
	case strings.HasPrefix(m.Subject, AuditPrefix):
		var r AuditRecord
		if derr = strictJSON(m.Data, &r); derr == nil {
			derr = r.Validate()
		}
		if derr == nil && AuditSubject(r.Group) != m.Subject {
			derr = fmt.Errorf("audit record for group %q on subject %s", r.Group, m.Subject)
		}
		e.Audit = &r
	case strings.HasPrefix(m.Subject, EventsPrefix):
		var ev rollout.Event
		if derr = json.Unmarshal(m.Data, &ev); derr == nil && ev.V != 1 {
			derr = fmt.Errorf("event: v %d, want 1", ev.V)
		}
		if derr == nil && EventSubject(ev.Group) != m.Subject {
			derr = fmt.Errorf("event for group %q on subject %s", ev.Group, m.Subject)
		}
		e.Event = &ev
	default:
		derr = fmt.Errorf("unexpected subject %s", m.Subject)
	}
	return e, derr
}

func timelineErr(err error) error {
	return fmt.Errorf("read %s (created by a controller of this version, or fleetctl bus ensure): %w", StreamAudit, err)
}

func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// auditStreamConfig is FLEET_AUDIT's configuration under o.
func auditStreamConfig(o Options) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamAudit,
		Description: "fleetwave audit trail: fleetctl's writes and the rollout events",
		Subjects:    []string{AuditPrefix + ">", EventsPrefix + ">"},
		MaxAge:      o.AuditMaxAge,
		MaxBytes:    o.AuditMaxBytes,
		MaxMsgSize:  maxAuditMsgSize,
		Discard:     jetstream.DiscardOld,
		Storage:     o.storage(),
		Replicas:    o.Replicas,
		AllowDirect: true,
	}
}
