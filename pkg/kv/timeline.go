package kv

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The timeline: FLEET_AUDIT (the operators' records, and the events of the
// legacy layout) and FLEET_EVENTS (the rollout events) merged by the time
// the bus stored each message. Every read is bounded: the newest Limit
// entries of a query, found without reading what is older (a flood of
// events costs a reader nothing but the newest Limit of them), with batched
// direct gets (no consumer).

// TimelineEntry is one message of the timeline: an audit record or a
// rollout event, with the stream that stores it, its sequence there and
// the time the bus stored it.
type TimelineEntry struct {
	Stream string
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

// ID names the entry on the bus: stream and sequence ("FLEET_EVENTS-42").
func (e TimelineEntry) ID() string { return fmt.Sprintf("%s-%d", e.Stream, e.Seq) }

// DefaultTimelineLimit is how many of the newest operator records, and of
// the newest events, a timeline read returns unless told otherwise
// (fleetctl history, the dashboard).
const DefaultTimelineLimit = 200

// TimelineQuery selects the newest entries of the timeline.
type TimelineQuery struct {
	// Since keeps the entries stored at or after it (zero: no bound).
	Since time.Time
	// Group keeps this group's entries and the fleet-wide ones ("": all).
	Group string
	// Limit keeps the newest Limit operator records and the newest Limit
	// events (<= 0: DefaultTimelineLimit).
	Limit int
}

// TimelineCursor is where a follower of the timeline is: the last sequence
// read of each stream.
type TimelineCursor struct {
	Audit  uint64 `json:"audit"`
	Events uint64 `json:"events"`
}

// Timeline is the answer of a timeline read.
type Timeline struct {
	// Entries are oldest first.
	Entries []TimelineEntry
	// Problems are the stored messages that are not an audit record or an
	// event fleetwave wrote (skipped).
	Problems []Problem
	// More: older entries the query selects were left out (the limit).
	More bool
	// Cursor is where ReadTimelineAfter goes on from.
	Cursor TimelineCursor
	// LegacyAudit: FLEET_AUDIT still stores the events (the layout before
	// FLEET_EVENTS; fleetctl bus ensure moves them).
	LegacyAudit bool
}

// ReadTimeline reads every entry stored at or after since (zero:
// everything the streams hold), oldest first. It is unbounded: for tests
// and small trails; people's tools use ReadTimelineQuery.
func (f *Fleet) ReadTimeline(ctx context.Context, since time.Time) (entries []TimelineEntry, problems []Problem, err error) {
	tl, err := f.ReadTimelineQuery(ctx, TimelineQuery{Since: since, Limit: math.MaxInt})
	return tl.Entries, tl.Problems, err
}

// ReadTimelineQuery reads the newest q.Limit operator records and the
// newest q.Limit events that q selects, merged, oldest first: however many
// events were published (the controller's credentials may publish any
// number), the operators' records stay in view.
func (f *Fleet) ReadTimelineQuery(ctx context.Context, q TimelineQuery) (Timeline, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultTimelineLimit
	}
	srcs, legacy, err := f.trailStreams(ctx)
	if err != nil {
		return Timeline{}, err
	}
	tl := Timeline{LegacyAudit: legacy}
	nc := f.JS.Conn()
	// Where each class of entries is: the records in FLEET_AUDIT; the
	// events in FLEET_EVENTS and, stored before it existed, in FLEET_AUDIT.
	type part struct {
		src     trailSource
		filters []string // nil: every message of the stream
	}
	var records, events []part
	for _, src := range srcs {
		if src.name == StreamEvents {
			p := part{src: src}
			if q.Group != "" {
				p.filters = []string{EventSubject(q.Group), EventSubject("")}
			}
			events = append(events, p)
			continue
		}
		rec, ev := part{src, []string{AuditPrefix + ">"}}, part{src, []string{EventsPrefix + ">"}}
		if q.Group != "" {
			rec.filters = []string{AuditSubject(q.Group), AuditSubject("")}
			ev.filters = []string{EventSubject(q.Group), EventSubject("")}
		}
		records, events = append(records, rec), append(events, ev)
	}
	lows := map[string]uint64{}
	for _, src := range srcs {
		lo := src.first
		if !q.Since.IsZero() {
			if lo, err = seqAtOrAfter(ctx, nc, src.name, q.Since); err != nil {
				return Timeline{}, src.err(err)
			}
		}
		lows[src.name] = lo
		src.setCursor(&tl.Cursor, src.last)
	}
	for _, class := range [][]part{records, events} {
		var msgs []StoredMsg
		for _, p := range class {
			lo := lows[p.src.name]
			if lo == 0 {
				continue // nothing stored since
			}
			got, more, err := newest(ctx, nc, p.src.name, lo, p.src.last, p.filters, limit)
			if err != nil {
				return Timeline{}, p.src.err(err)
			}
			tl.More = tl.More || more
			msgs = append(msgs, got...)
			if n := len(got); n > 0 {
				p.src.setCursor(&tl.Cursor, max(p.src.cursor(tl.Cursor), got[n-1].Sequence))
			}
		}
		slices.SortStableFunc(msgs, compareStored)
		if n := len(msgs); n > limit {
			msgs, tl.More = msgs[n-limit:], true
		}
		tl.add(msgs, func(e TimelineEntry) bool { return !q.Since.IsZero() && e.Stored.Before(q.Since) })
	}
	tl.finish(math.MaxInt)
	return tl, nil
}

// compareStored orders messages by the time the bus stored them,
// FLEET_AUDIT's first on a tie, then by sequence.
func compareStored(a, b StoredMsg) int {
	if c := a.Time.Compare(b.Time); c != 0 {
		return c
	}
	if c := cmp.Compare(streamRank(a.Stream), streamRank(b.Stream)); c != 0 {
		return c
	}
	return cmp.Compare(a.Sequence, b.Sequence)
}

// ReadTimelineAfter reads the entries stored after cur, oldest first: at
// most the newest limit of each stream (More says some were skipped), with
// the cursor to go on from. A zero cursor reads the newest limit.
func (f *Fleet) ReadTimelineAfter(ctx context.Context, cur TimelineCursor, limit int) (Timeline, error) {
	if limit <= 0 {
		limit = DefaultTimelineLimit
	}
	srcs, legacy, err := f.trailStreams(ctx)
	if err != nil {
		return Timeline{}, err
	}
	tl := Timeline{LegacyAudit: legacy, Cursor: cur}
	nc := f.JS.Conn()
	for _, src := range srcs {
		after := src.cursor(cur)
		if after > src.last {
			after = 0 // the stream was made anew: read what it holds
		}
		lo := max(after+1, src.first)
		msgs, more, err := newest(ctx, nc, src.name, lo, src.last, nil, limit)
		if err != nil {
			return Timeline{}, src.err(err)
		}
		tl.More = tl.More || more
		last := max(after, src.last)
		if n := len(msgs); n > 0 {
			last = max(last, msgs[n-1].Sequence)
		}
		src.setCursor(&tl.Cursor, last)
		tl.add(msgs, nil)
	}
	tl.finish(math.MaxInt)
	return tl, nil
}

// add decodes msgs into the timeline, leaving out those skip says.
func (tl *Timeline) add(msgs []StoredMsg, skip func(TimelineEntry) bool) {
	for _, m := range msgs {
		e, err := decodeTimeline(m)
		if err != nil {
			tl.Problems = append(tl.Problems, Problem{Bucket: m.Stream, Key: m.Subject, Revision: m.Sequence, Err: err})
			continue
		}
		if skip != nil && skip(e) {
			continue
		}
		tl.Entries = append(tl.Entries, e)
	}
}

// finish orders the entries by the time the bus stored them (FLEET_AUDIT
// first on a tie, then by sequence) and keeps the newest limit.
func (tl *Timeline) finish(limit int) {
	slices.SortStableFunc(tl.Entries, func(a, b TimelineEntry) int {
		if c := a.Stored.Compare(b.Stored); c != 0 {
			return c
		}
		if c := cmp.Compare(streamRank(a.Stream), streamRank(b.Stream)); c != 0 {
			return c
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	if n := len(tl.Entries); n > limit {
		tl.Entries = slices.Delete(tl.Entries, 0, n-limit)
		tl.More = true
	}
}

func streamRank(s string) int {
	if s == StreamAudit {
		return 0
	}
	return 1
}

// trailSource is one stream of the timeline as its info described it.
type trailSource struct {
	name        string
	first, last uint64
	legacy      bool // FLEET_AUDIT still stores events
}

func (s trailSource) cursor(c TimelineCursor) uint64 {
	if s.name == StreamAudit {
		return c.Audit
	}
	return c.Events
}

func (s trailSource) setCursor(c *TimelineCursor, seq uint64) {
	if s.name == StreamAudit {
		c.Audit = seq
	} else {
		c.Events = seq
	}
}

func (s trailSource) err(err error) error {
	if s.name == StreamAudit {
		return timelineErr(err)
	}
	return eventsErr(err)
}

// trailStreams describes the streams of the timeline: FLEET_AUDIT, and
// FLEET_EVENTS unless FLEET_AUDIT still stores the events (legacy) or
// FLEET_EVENTS does not exist yet (an older controller's bus).
func (f *Fleet) trailStreams(ctx context.Context) (srcs []trailSource, legacy bool, err error) {
	audit, err := f.JS.Stream(ctx, StreamAudit)
	if err != nil {
		return nil, false, timelineErr(err)
	}
	ai := audit.CachedInfo()
	legacy = slices.Contains(ai.Config.Subjects, EventsPrefix+">")
	srcs = append(srcs, trailSource{name: StreamAudit, first: ai.State.FirstSeq, last: ai.State.LastSeq, legacy: legacy})
	if legacy {
		return srcs, true, nil
	}
	events, err := f.JS.Stream(ctx, StreamEvents)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return srcs, false, nil
	}
	if err != nil {
		return nil, false, eventsErr(err)
	}
	ei := events.CachedInfo()
	return append(srcs, trailSource{name: StreamEvents, first: ei.State.FirstSeq, last: ei.State.LastSeq}), false, nil
}

// seqAtOrAfter is the first sequence of stream stored at or after t, by the
// server's index (0: none).
func seqAtOrAfter(ctx context.Context, nc *nats.Conn, stream string, t time.Time) (uint64, error) {
	var seq uint64
	_, err := DirectGetBatch(ctx, nc, stream, BatchRequest{Batch: 1, StartTime: &t}, func(m StoredMsg) error {
		seq = m.Sequence
		return nil
	})
	return seq, err
}

// newest reads the newest limit messages of stream among sequences lo to
// last whose subject is one of filters (none: every message), oldest first,
// and reports whether older ones matched. It reads no message older than
// those it returns, bar one probe per step of a binary search when a
// filter matches more than limit: a stream of any size costs the newest
// limit messages.
func newest(ctx context.Context, nc *nats.Conn, stream string, lo, last uint64, filters []string, limit int) ([]StoredMsg, bool, error) {
	lo = max(lo, 1)
	if last < lo {
		return nil, false, nil
	}
	if len(filters) == 0 {
		from, more := lo, false
		if last-lo >= uint64(limit) {
			from, more = last-uint64(limit)+1, true
		}
		msgs, err := scan(ctx, nc, stream, "", from)
		if err != nil {
			return nil, false, err
		}
		if n := len(msgs); n > limit { // stored while reading
			msgs = msgs[n-limit:]
		}
		return msgs, more, nil
	}
	var out []StoredMsg
	more := false
	for _, filter := range filters {
		from, fmore, err := startOfNewest(ctx, nc, stream, filter, lo, last, limit)
		if err != nil {
			return nil, false, err
		}
		if from == 0 {
			continue
		}
		msgs, err := scan(ctx, nc, stream, filter, from)
		if err != nil {
			return nil, false, err
		}
		more = more || fmore
		out = append(out, msgs...)
	}
	slices.SortFunc(out, func(a, b StoredMsg) int { return cmp.Compare(a.Sequence, b.Sequence) })
	if n := len(out); n > limit {
		out, more = out[n-limit:], true
	}
	return out, more, nil
}

// startOfNewest is the sequence from which filter matches the newest limit
// messages of stream in lo..last (0: none matches), and whether older ones
// match.
func startOfNewest(ctx context.Context, nc *nats.Conn, stream, filter string, lo, last uint64, limit int) (uint64, bool, error) {
	n, first, err := countFrom(ctx, nc, stream, filter, lo)
	if err != nil || n == 0 {
		return 0, false, err
	}
	if n <= uint64(limit) {
		return first, false, nil
	}
	// count is non-increasing in the start: the largest start that still
	// counts limit or more.
	a, b := first, last
	for a < b {
		mid := a + (b-a+1)/2
		n, _, err := countFrom(ctx, nc, stream, filter, mid)
		if err != nil {
			return 0, false, err
		}
		if n >= uint64(limit) {
			a = mid
		} else {
			b = mid - 1
		}
	}
	return a, true, nil
}

// countFrom is how many messages of stream from sequence from on match
// filter, and the sequence of the first: one message read, the server
// counts the rest.
func countFrom(ctx context.Context, nc *nats.Conn, stream, filter string, from uint64) (n, first uint64, err error) {
	end, err := DirectGetBatch(ctx, nc, stream, BatchRequest{Seq: from, NextFor: filter, Batch: 1}, func(m StoredMsg) error {
		first = m.Sequence
		return nil
	})
	if err != nil || first == 0 {
		return 0, 0, err
	}
	return 1 + end.Pending, first, nil
}

// scan reads every message of stream from sequence from on matching filter.
func scan(ctx context.Context, nc *nats.Conn, stream, filter string, from uint64) ([]StoredMsg, error) {
	var msgs []StoredMsg
	_, err := ScanFrom(ctx, nc, stream, filter, from, func(m StoredMsg) error {
		msgs = append(msgs, m)
		return nil
	})
	return msgs, err
}

// DecodeTimelineMsg decodes one message of FLEET_AUDIT or FLEET_EVENTS read
// with a direct get: an audit record or a rollout event, checked as the
// timeline checks them.
func DecodeTimelineMsg(m StoredMsg) (TimelineEntry, error) { return decodeTimeline(m) }

// decodeTimeline decodes one message of FLEET_AUDIT or FLEET_EVENTS.
func decodeTimeline(m StoredMsg) (TimelineEntry, error) {
	e := TimelineEntry{Stream: m.Stream, Seq: m.Sequence, Stored: m.Time}
	var derr error
	switch {
	case m.Foreign:
		derr = errors.New("stored with JetStream's own headers: not written by fleetwave")
	case strings.HasPrefix(m.Subject, AuditPrefix) && m.Stream == StreamAudit:
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
		derr = fmt.Errorf("unexpected subject %s in %s", m.Subject, m.Stream)
	}
	return e, derr
}

func timelineErr(err error) error {
	return fmt.Errorf("read %s (created by a controller of this version, or fleetctl bus ensure): %w", StreamAudit, err)
}

func eventsErr(err error) error {
	return fmt.Errorf("read %s (the controller's credentials read it once 'fleetctl auth upgrade' granted it; created by fleetctl bus ensure): %w", StreamEvents, err)
}
