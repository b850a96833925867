package kv

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The rollout events' stream, FLEET_EVENTS: fleet.events.<group>, published
// with core NATS by the controller (through the CONTROL account's service
// import) and by fleetctl's group actions. The controller's credentials may
// publish any number of events of any content, so the stream is bounded on
// its own (age, bytes, and a small message size): a flood evicts old events,
// never an operator's record (FLEET_AUDIT), and a reader of the newest
// entries reads a bounded number of bytes.
const (
	DefaultEventsMaxAge         = 30 * 24 * time.Hour
	DefaultEventsMaxBytes       = 64 << 20
	DefaultEventsMaxBytesMemory = 8 << 20
	// MaxEventSize is the largest event FLEET_EVENTS stores (its
	// MaxMsgSize): an event with a reason of rollout.MaxEventReason
	// bytes, every one escaped in JSON (6 bytes each), and the longest
	// group name fits.
	MaxEventSize = 8 << 10
)

// eventsStreamConfig is FLEET_EVENTS's configuration under o.
func eventsStreamConfig(o Options) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamEvents,
		Description: "fleetwave rollout events (the controller's and fleetctl's group actions'); the operators' records are in " + StreamAudit,
		Subjects:    []string{EventsPrefix + ">"},
		MaxAge:      o.EventsMaxAge,
		MaxBytes:    o.EventsMaxBytes,
		MaxMsgSize:  MaxEventSize,
		Discard:     jetstream.DiscardOld,
		Storage:     o.storage(),
		Replicas:    o.Replicas,
		AllowDirect: true,
	}
}

// EncodeEvent is ev as published: its reason cut to rollout.MaxEventReason
// (ev.Bounded), so that every legitimate event fits MaxEventSize.
func EncodeEvent(ev rollout.Event) ([]byte, error) {
	ev = ev.Bounded()
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	// The agents an event names (their errors and outputs, which JSON may
	// escape to six bytes each) give way to the event itself: first
	// their outputs, then they.
	for _, drop := range []func(){
		func() {
			ev.Agents = slices.Clone(ev.Agents)
			for i := range ev.Agents {
				ev.Agents[i].Output = ""
			}
		},
		func() { ev.Agents = nil },
	} {
		if len(data) <= MaxEventSize || len(ev.Agents) == 0 {
			break
		}
		drop()
		if data, err = json.Marshal(ev); err != nil {
			return nil, err
		}
	}
	if len(data) > MaxEventSize {
		// Only a group name no group can have gets here.
		return nil, fmt.Errorf("event for group %q: %d bytes, more than %d", rollout.CutText(ev.Group, 70), len(data), MaxEventSize)
	}
	return data, nil
}

// PublishEvent sends ev on fleet.events.<group> (core NATS: events are for
// people, `fleetctl watch` and the timeline; the state itself is in the
// buckets). FLEET_EVENTS stores it.
func (f *Fleet) PublishEvent(ev rollout.Event) error {
	data, err := EncodeEvent(ev)
	if err != nil {
		return err
	}
	return f.JS.Conn().Publish(EventSubject(ev.Group), data)
}
