package kv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The audit trail: two streams. FLEET_AUDIT holds what operators wrote
// (fleet.audit.>, published by fleetctl with admin credentials, and by no
// one else: the controller's credentials cannot publish there);
// FLEET_EVENTS (events.go) holds the rollout events (fleet.events.>), which
// the controller and fleetctl's group actions publish. Each stream is
// bounded on its own, so a flood of events, which the controller's
// credentials can publish, evicts old events and never an operator's
// record. The timeline (timeline.go) merges the two by the time the bus
// stored each message.
//
// Before FLEET_EVENTS, FLEET_AUDIT captured fleet.events.> too (the legacy
// layout, LegacyAuditSubjects): a controller may not change a stream, so it
// runs with that layout, warning, until "fleetctl bus ensure" (admin)
// moves the events out; the events stored before stay in FLEET_AUDIT and
// in the timeline until they age out.
const (
	// StreamAudit is the operators' audit trail stream.
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

// LegacyAuditSubjects are FLEET_AUDIT's subjects before FLEET_EVENTS
// existed: the operators' records and the events in one stream.
var LegacyAuditSubjects = []string{AuditPrefix + ">", EventsPrefix + ">"}

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
	Group string `json:"group,omitempty"`
	// App is the app whose plan key was written (its name, the default
	// app's too); absent for fleet-wide writes (the config) and in
	// records made before apps, which are the default app's.
	App              string `json:"app,omitempty"`
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
	case r.App != "" && rollout.ValidateAppName(r.App) != nil:
		return fmt.Errorf("audit record: app: %w", rollout.ValidateAppName(r.App))
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
		Description: "fleetwave audit trail: the operators' writes (fleetctl); the rollout events are in " + StreamEvents,
		Subjects:    []string{AuditPrefix + ">"},
		MaxAge:      o.AuditMaxAge,
		MaxBytes:    o.AuditMaxBytes,
		MaxMsgSize:  maxAuditMsgSize,
		Discard:     jetstream.DiscardOld,
		Storage:     o.storage(),
		Replicas:    o.Replicas,
		AllowDirect: true,
	}
}
