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

// Attribution: every revision of the keys that steer the fleet (the plan
// spec, the config) must have fleetctl's audit record naming it (bucket,
// key, revision). The leading controller checks each new revision once the
// record had time to land, and raises an "unattributed change" for one that
// has none: written by something other than fleetctl (a raw KV put, an edge
// site's leaf credentials, a stolen credential). A record proves that an
// admin's credentials wrote one, not who: credentials that may write the
// spec may also write a record.
//
// What was checked is kept on the bus, under KeyAttribution in fleet_stats
// (no dot: never a <group>.<controller_id> stats key; written with a
// "never" TTL like a webhook's cursor), so that a new leader neither checks
// again what was checked (no second alarm for one write) nor misses what
// was written while no controller led.

// KeyAttribution is the fleet_stats key of the attribution check's state.
const KeyAttribution = "attribution"

// AttributedKeys are the keys whose every revision must be attributed, as
// bucket/key.
var AttributedKeys = []BucketKey{{BucketConfig, KeyConfig}, {BucketPlan, KeySpec}}

// BucketKey names one key of one bucket.
type BucketKey struct{ Bucket, Key string }

func (k BucketKey) String() string { return k.Bucket + "/" + k.Key }

// AttributionState is the value under KeyAttribution.
type AttributionState struct {
	V int `json:"v"`
	// Keys maps bucket/key to how far its revisions were checked.
	Keys map[string]AttributionKey `json:"keys"`
	// At is when it was written, by controller By.
	At time.Time `json:"at"`
	By string    `json:"by"`
}

// AttributionKey is how far one key's revisions were checked.
type AttributionKey struct {
	// Checked: every revision up to this one was checked (attributed,
	// reported, or older than the audit trail reaches).
	Checked uint64 `json:"checked"`
	// Unattributed is the last revision found without a record (0: none):
	// while it is the key's newest (Checked), the fleet follows a value
	// nobody signed for.
	Unattributed uint64 `json:"unattributed,omitempty"`
}

// ReadAttribution reads the state under KeyAttribution and its revision. A
// key never written is ErrNotFound; a value that is not a state is
// ErrCorrupt, with its revision.
func ReadAttribution(ctx context.Context, nc *nats.Conn) (AttributionState, uint64, error) {
	m, err := DirectGetLast(ctx, nc, StreamOf(BucketStats), KeySubject(BucketStats, KeyAttribution))
	if err != nil {
		return AttributionState{}, 0, err
	}
	where := BucketStats + "/" + KeyAttribution
	if m.Deleted {
		return AttributionState{}, m.Sequence, fmt.Errorf("%s: %w", where, ErrNotFound)
	}
	if m.Foreign {
		return AttributionState{}, m.Sequence, fmt.Errorf("%s: %w", where, ErrForeign)
	}
	var s AttributionState
	if err := checkSchema(m.Data); err != nil {
		return AttributionState{}, m.Sequence, fmt.Errorf("%s: %w", where, err)
	}
	if err := json.Unmarshal(m.Data, &s); err != nil || s.At.IsZero() {
		return AttributionState{}, m.Sequence, corrupt("%s: not an attribution state: %.200s", where, m.Data)
	}
	return s, m.Sequence, nil
}

// SaveAttribution writes s under KeyAttribution if the key's last revision
// is still rev (0: never written), and returns the new revision; a write by
// someone else since (another controller took the lead) is ErrConflict.
func SaveAttribution(ctx context.Context, js jetstream.JetStream, s AttributionState, rev uint64) (uint64, error) {
	return saveForever(ctx, js, KeyAttribution, s, rev)
}

// saveForever writes v under key of fleet_stats with compare-and-swap on rev
// and a "never" TTL (the bucket's age limit does not drop it).
func saveForever(ctx context.Context, js jetstream.JetStream, key string, v any, rev uint64) (uint64, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	msg := nats.NewMsg(KeySubject(BucketStats, key))
	msg.Data = data
	msg.Header.Set(jetstream.MsgTTLHeader, "never")
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(rev))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return 0, fmt.Errorf("%s/%s was written by someone else after revision %d: %w", BucketStats, key, rev, ErrConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("write %s/%s: %w", BucketStats, key, err)
	}
	return ack.Sequence, nil
}

// Revisions reads the revisions of k after revision after still in its
// bucket's history (values and delete markers), oldest first.
func (f *Fleet) Revisions(ctx context.Context, k BucketKey, after uint64) ([]StoredMsg, error) {
	var out []StoredMsg
	_, err := ScanFrom(ctx, f.JS.Conn(), StreamOf(k.Bucket), KeySubject(k.Bucket, k.Key), after+1, func(m StoredMsg) error {
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the history of %s: %w", k, err)
	}
	return out, nil
}

// AuditReach is the time from which FLEET_AUDIT holds every record stored:
// the stream's creation, or, once records have left it (its max age or
// bytes, a purge), the oldest it still holds (the newest it held, when it
// holds none), and a minute more for the clocks of a cluster's stream
// leaders. A revision stored before it may have had a record that is gone.
func (f *Fleet) AuditReach(ctx context.Context) (time.Time, error) {
	s, err := f.JS.Stream(ctx, StreamAudit)
	if err != nil {
		return time.Time{}, timelineErr(err)
	}
	info := s.CachedInfo()
	reach := info.Created
	if st := info.State; st.FirstSeq > 1 {
		t := st.FirstTime
		if st.Msgs == 0 {
			t = st.LastTime
		}
		reach = later(reach, t.Add(time.Minute))
	}
	return reach, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// AuditedRevisions reads the fleet-wide audit records stored at or after
// since and returns the revisions of each key they name (bucket/key →
// revision → true). Records that do not decode name nothing.
func (f *Fleet) AuditedRevisions(ctx context.Context, since time.Time) (map[string]map[uint64]bool, error) {
	nc := f.JS.Conn()
	from, err := seqAtOrAfter(ctx, nc, StreamAudit, since)
	if err != nil {
		return nil, timelineErr(err)
	}
	out := map[string]map[uint64]bool{}
	if from == 0 {
		return out, nil
	}
	_, err = ScanFrom(ctx, nc, StreamAudit, AuditSubject(""), from, func(m StoredMsg) error {
		e, derr := decodeTimeline(m)
		if derr != nil || e.Audit == nil || e.Audit.Revision == 0 {
			return nil
		}
		k := BucketKey{e.Audit.Bucket, e.Audit.Key}.String()
		if out[k] == nil {
			out[k] = map[uint64]bool{}
		}
		out[k][e.Audit.Revision] = true
		return nil
	})
	if err != nil {
		return nil, timelineErr(err)
	}
	return out, nil
}
