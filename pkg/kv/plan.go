package kv

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// State is the rollout's stored state as one read sees it: config, spec and
// every group status, each with the revision to write back against.
type State struct {
	Config Entry[rollout.Config]
	// ConfigDefault: no config was ever written; Config is the default
	// (Revision 0, so a write creates it).
	ConfigDefault bool
	Spec          Entry[rollout.Spec]
	// HasSpec: a plan spec exists (no spec means nothing to roll out).
	HasSpec bool
	Groups  map[string]Entry[rollout.GroupStatus]
}

// Plan returns the statuses as a rollout.Plan (for Predecessors).
func (s *State) Plan() rollout.Plan {
	p := rollout.Plan{Spec: s.Spec.Value, Groups: make(map[string]rollout.GroupStatus, len(s.Groups))}
	for g, e := range s.Groups {
		p.Groups[g] = e.Value
	}
	return p
}

// ReadConfig reads fleet_config/config; when none was written it returns the
// default config with revision 0 and isDefault true.
func (f *Fleet) ReadConfig(ctx context.Context) (e Entry[rollout.Config], isDefault bool, err error) {
	e, err = Get[rollout.Config](ctx, f.Config, KeyConfig)
	if errors.Is(err, ErrNotFound) {
		return Entry[rollout.Config]{Value: rollout.DefaultConfig()}, true, nil
	}
	return e, false, err
}

// ReadState reads config, spec and every group status of the plan bucket.
func (f *Fleet) ReadState(ctx context.Context) (*State, error) {
	s := &State{Groups: map[string]Entry[rollout.GroupStatus]{}}
	var err error
	if s.Config, s.ConfigDefault, err = f.ReadConfig(ctx); err != nil {
		return nil, err
	}
	err = readAll(ctx, f.Plan, func(e jetstream.KeyValueEntry) error {
		if e.Key() == KeySpec {
			if err := decodeEntry(f.Plan, e, &s.Spec.Value); err != nil {
				return err
			}
			s.Spec.Revision, s.HasSpec = e.Revision(), true
		} else if group, ok := GroupFromKey(e.Key()); ok {
			var st rollout.GroupStatus
			if err := decodeEntry(f.Plan, e, &st); err != nil {
				return err
			}
			s.Groups[group] = Entry[rollout.GroupStatus]{Value: st, Revision: e.Revision()}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// PublishEvent sends ev on fleet.events.<group> (core NATS: events are for
// people and `fleetctl watch`; the state itself is in the buckets).
func (f *Fleet) PublishEvent(ev rollout.Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return f.JS.Conn().Publish(EventSubject(ev.Group), data)
}
