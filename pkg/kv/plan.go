package kv

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// State is the rollout's stored state as one read sees it: config, spec and
// every group status, each with the revision to write back against.
//
// A stored value that is not what its key should hold is not in the fields
// below but in Problems: a bad config leaves Config zero (with the bad
// value's revision), a bad spec leaves HasSpec false (Spec.Revision is the
// bad value's), a bad group status leaves the group out of Groups. A reader
// that acts on the state must look at Problems first: a group missing from
// Groups because its status is bad is not a group without a status.
type State struct {
	Config Entry[rollout.Config]
	// ConfigDefault: no config was ever written; Config is the default
	// (Revision 0, so a write creates it).
	ConfigDefault bool
	Spec          Entry[rollout.Spec]
	// HasSpec: a valid plan spec exists (no spec means nothing to roll out).
	HasSpec bool
	Groups  map[string]Entry[rollout.GroupStatus]
	// Quarantine is fleet_plan/quarantine (Revision 0 and an empty list
	// when none was written; a bad value is in Problems, Value empty).
	Quarantine Entry[rollout.QuarantineList]
	// Problems are the values skipped, in the order read: config, then the
	// plan bucket's keys.
	Problems []Problem
	// Apps holds the plan of every app but the default one (whose plan is
	// Spec, HasSpec, Groups and Quarantine above), by app name, for every
	// app with a key in fleet_plan, configured or not. ForApp reads it.
	Apps map[string]*AppState
}

// AppState is one app's plan: its spec, group statuses and quarantine.
type AppState struct {
	Spec       Entry[rollout.Spec]
	HasSpec    bool
	Groups     map[string]Entry[rollout.GroupStatus]
	Quarantine Entry[rollout.QuarantineList]
}

// Plan returns the app's statuses as a rollout.Plan (for Predecessors).
func (a *AppState) Plan() rollout.Plan {
	p := rollout.Plan{Spec: a.Spec.Value, Groups: make(map[string]rollout.GroupStatus, len(a.Groups))}
	for g, e := range a.Groups {
		p.Groups[g] = e.Value
	}
	return p
}

func newAppState() *AppState {
	return &AppState{Groups: map[string]Entry[rollout.GroupStatus]{}, Quarantine: Entry[rollout.QuarantineList]{Value: rollout.QuarantineList{V: rollout.SchemaVersion}}}
}

// AppView is s as n's app sees it, in the form a fleet had before apps, so
// that what reads one app's plan reads any app's: Config is the fleet's
// with the app's overrides (rollout.Config.ForApp), Spec, HasSpec, Groups
// and Quarantine are the app's, and Problems are the config's and the app's
// own, each plan key in its unprefixed form (db.group.prod reads
// group.prod). Apps is left nil. An app the config does not list, or
// overrides that do not apply, is an error; a config that is not valid
// (in Problems) is kept as it is.
func (s *State) AppView(n AppNS) (*State, error) {
	out := &State{Config: s.Config, ConfigDefault: s.ConfigDefault}
	if _, bad := s.Problem(BucketConfig, KeyConfig); !bad {
		cfg, err := s.Config.Value.ForApp(n.Name)
		if err != nil {
			return nil, err
		}
		out.Config.Value = cfg
	}
	a := s.ForApp(n)
	out.Spec, out.HasSpec, out.Groups, out.Quarantine = a.Spec, a.HasSpec, a.Groups, a.Quarantine
	for _, p := range s.Problems {
		if p.Bucket != BucketPlan {
			out.Problems = append(out.Problems, p)
			continue
		}
		pk := ParsePlanKey(p.Key)
		if pk.Kind == "" || pk.App != n.Key() {
			continue
		}
		if pk.Kind == KindGroup {
			p.Key = GroupKey(pk.Group)
		} else {
			p.Key = pk.Kind
		}
		out.Problems = append(out.Problems, p)
	}
	return out, nil
}

// ForApp is n's plan. The default app's shares the maps of s (Groups): a
// caller that changes one changes the other.
func (s *State) ForApp(n AppNS) *AppState {
	if n.IsDefault() {
		return &AppState{Spec: s.Spec, HasSpec: s.HasSpec, Groups: s.Groups, Quarantine: s.Quarantine}
	}
	if a, ok := s.Apps[n.Key()]; ok {
		return a
	}
	return newAppState()
}

// Problem returns the problem with bucket/key, if that value was skipped.
func (s *State) Problem(bucket, key string) (*Problem, bool) {
	for i := range s.Problems {
		if p := &s.Problems[i]; p.Bucket == bucket && p.Key == key {
			return p, true
		}
	}
	return nil, false
}

// Plan returns the statuses as a rollout.Plan (for Predecessors).
func (s *State) Plan() rollout.Plan {
	p := rollout.Plan{Spec: s.Spec.Value, Groups: make(map[string]rollout.GroupStatus, len(s.Groups))}
	for g, e := range s.Groups {
		p.Groups[g] = e.Value
	}
	return p
}

// DecodeConfig decodes and validates the value of fleet_config/config. A
// value without "v": 1, with an unknown field, or that breaks a rule of
// rollout.Config.Validate is ErrCorrupt: the controller must not act on it.
func DecodeConfig(data []byte) (rollout.Config, error) {
	var c rollout.Config
	if err := checkSchema(data); err != nil {
		return c, err
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return rollout.Config{}, corrupt("%v", err)
	}
	if err := c.Validate(); err != nil {
		return rollout.Config{}, corrupt("%v", err)
	}
	return c, nil
}

// DecodeSpec decodes and validates the value of fleet_plan/spec. A value
// without "v": 1, that breaks a rule of rollout.Spec.Validate, or that is a
// group status (it has "group" or "state": a status stored under the spec
// key would otherwise pass, since it carries both versions and the spec
// skips unknown fields) is ErrCorrupt.
func DecodeSpec(data []byte) (rollout.Spec, error) {
	var s rollout.Spec
	if err := checkSchema(data); err != nil {
		return s, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return s, corrupt("%v", err)
	}
	for _, f := range []string{"group", "state"} {
		if _, ok := fields[f]; ok {
			return s, corrupt("has %q: a group status stored under the spec key, not a plan spec", f)
		}
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return rollout.Spec{}, corrupt("%v", err)
	}
	if err := s.Validate(); err != nil {
		return rollout.Spec{}, corrupt("%v", err)
	}
	return s, nil
}

// DecodeGroupStatus decodes and validates the value of fleet_plan key
// group.<name>. A value without "v": 1, that breaks a rule of
// rollout.GroupStatus.Validate, or whose group is not <name> (the status of
// another group, stored under this key) is ErrCorrupt.
func DecodeGroupStatus(key string, data []byte) (rollout.GroupStatus, error) {
	var st rollout.GroupStatus
	pk := ParsePlanKey(key)
	if pk.Kind != KindGroup {
		return st, corrupt("%q is not a group status key ([<app>.]%s<group>)", key, groupKeyPrefix)
	}
	group := pk.Group
	if err := checkSchema(data); err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return rollout.GroupStatus{}, corrupt("%v", err)
	}
	if err := st.Validate(); err != nil {
		return rollout.GroupStatus{}, corrupt("%v", err)
	}
	if st.Group != group {
		return rollout.GroupStatus{}, corrupt("the status of group %q stored under the key of group %q", st.Group, group)
	}
	return st, nil
}

// DecodeQuarantine decodes and validates the value of
// fleet_plan/quarantine. A value without "v": 1, with an unknown field, or
// that breaks a rule of rollout.QuarantineList.Validate is ErrCorrupt.
func DecodeQuarantine(data []byte) (rollout.QuarantineList, error) {
	var l rollout.QuarantineList
	if err := checkSchema(data); err != nil {
		return l, err
	}
	if err := strictJSON(data, &l); err != nil {
		return rollout.QuarantineList{}, corrupt("%v", err)
	}
	if err := l.Validate(); err != nil {
		return rollout.QuarantineList{}, corrupt("%v", err)
	}
	return l, nil
}

// ReadQuarantine reads fleet_plan/quarantine with its true revision
// (GetLast). None written is an empty list at revision 0 (a write creates
// it); a bad value is a *Problem (ErrCorrupt) with e.Revision set.
func (f *Fleet) ReadQuarantine(ctx context.Context) (Entry[rollout.QuarantineList], error) {
	e, err := GetLast(ctx, f.JS.Conn(), BucketPlan, KeyQuarantine, DecodeQuarantine)
	if errors.Is(err, ErrNotFound) {
		return Entry[rollout.QuarantineList]{Value: rollout.QuarantineList{V: rollout.SchemaVersion}}, nil
	}
	return e, err
}

// ReadConfig reads fleet_config/config with its true revision (GetLast);
// when none was written it returns the default config with revision 0 and
// isDefault true. A bad value is a *Problem (ErrCorrupt) with e.Revision set.
func (f *Fleet) ReadConfig(ctx context.Context) (e Entry[rollout.Config], isDefault bool, err error) {
	e, err = GetLast(ctx, f.JS.Conn(), BucketConfig, KeyConfig, DecodeConfig)
	if errors.Is(err, ErrNotFound) {
		return Entry[rollout.Config]{Value: rollout.DefaultConfig()}, true, nil
	}
	return e, false, err
}

// ReadSpec reads fleet_plan/spec with its true revision (GetLast). No spec
// is ErrNotFound; a bad value is a *Problem (ErrCorrupt) with e.Revision set.
func (f *Fleet) ReadSpec(ctx context.Context) (Entry[rollout.Spec], error) {
	return GetLast(ctx, f.JS.Conn(), BucketPlan, KeySpec, DecodeSpec)
}

// ReadGroupStatus reads fleet_plan/group.<group> with its true revision
// (GetLast). No status is ErrNotFound; a bad value is a *Problem
// (ErrCorrupt) with e.Revision set.
func (f *Fleet) ReadGroupStatus(ctx context.Context, group string) (Entry[rollout.GroupStatus], error) {
	key := GroupKey(group)
	return GetLast(ctx, f.JS.Conn(), BucketPlan, key, func(data []byte) (rollout.GroupStatus, error) {
		return DecodeGroupStatus(key, data)
	})
}

// ReadState reads config, spec and every group status of the plan bucket.
// Values that are not what their key should hold are skipped and listed in
// State.Problems; the error is for the bus only.
func (f *Fleet) ReadState(ctx context.Context) (*State, error) {
	s := &State{Groups: map[string]Entry[rollout.GroupStatus]{}, Quarantine: Entry[rollout.QuarantineList]{Value: rollout.QuarantineList{V: rollout.SchemaVersion}}}
	var err error
	var p *Problem
	s.Config, s.ConfigDefault, err = f.ReadConfig(ctx)
	switch {
	case errors.As(err, &p):
		s.Problems = append(s.Problems, *p)
	case err != nil:
		return nil, err
	}
	// The last value of every key, with the server's own sequence and
	// headers: one batched direct get, no consumer.
	def := &AppState{Groups: s.Groups, Quarantine: s.Quarantine}
	err = ReadLatest(ctx, f.JS.Conn(), BucketPlan, func(key string, m StoredMsg) error {
		skip := func(err error) {
			s.Problems = append(s.Problems, Problem{Bucket: BucketPlan, Key: key, Revision: m.Sequence, Err: err})
		}
		pk := ParsePlanKey(key)
		if pk.Kind == "" {
			return nil
		}
		a := def
		if pk.App != "" {
			if s.Apps == nil {
				s.Apps = map[string]*AppState{}
			}
			if a = s.Apps[pk.App]; a == nil {
				a = newAppState()
				s.Apps[pk.App] = a
			}
		}
		if m.Foreign {
			switch pk.Kind {
			case KeySpec:
				a.Spec.Revision = m.Sequence
			case KeyQuarantine:
				a.Quarantine.Revision = m.Sequence
			}
			skip(ErrForeign)
			return nil
		}
		switch pk.Kind {
		case KeySpec:
			a.Spec.Revision = m.Sequence
			spec, err := DecodeSpec(m.Data)
			if err != nil {
				skip(err)
				return nil
			}
			a.Spec.Value, a.HasSpec = spec, true
		case KeyQuarantine:
			a.Quarantine.Revision = m.Sequence
			q, err := DecodeQuarantine(m.Data)
			if err != nil {
				skip(err)
				return nil
			}
			a.Quarantine.Value = q
		case KindGroup:
			st, err := DecodeGroupStatus(key, m.Data)
			if err != nil {
				skip(err)
				return nil
			}
			a.Groups[pk.Group] = Entry[rollout.GroupStatus]{Value: st, Revision: m.Sequence}
		}
		return nil
	})
	s.Spec, s.HasSpec, s.Quarantine = def.Spec, def.HasSpec, def.Quarantine
	if err != nil {
		return nil, err
	}
	return s, nil
}
