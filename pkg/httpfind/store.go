package httpfind

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Plan is the part of fleet_plan the find endpoint answers from: the spec and
// every group's status. It holds nothing per agent, so no answer can reveal
// what an agent runs.
type Plan struct {
	Spec rollout.Spec
	// Groups maps a group name to its status (key group.<name>).
	Groups map[string]rollout.GroupStatus
	// HasSpec is false until a spec has been read: a zero Spec and a missing
	// one must not look alike, because without a spec there is no version to
	// tell anyone.
	HasSpec bool
	// Configured are the groups of the rollout config (fleet_config), in
	// its order. A group not among them is answered ErrUnknownGroup. Nil
	// means not known (no config read yet): every group is answered.
	Configured []string
}

// clone returns a copy of p that shares no memory with it, so a snapshot in
// the Store can never change under a reader.
func (p Plan) clone() *Plan {
	groups := make(map[string]rollout.GroupStatus, len(p.Groups))
	for name, st := range p.Groups {
		groups[name] = st.Clone()
	}
	p.Groups = groups
	p.Configured = slices.Clone(p.Configured)
	return &p
}

// Store holds the current Plan for the handler. Readers (every request) load
// an immutable snapshot through an atomic pointer and take no lock, so a
// burst of agents never contends with the controller's watcher; writers copy
// the snapshot, change the copy and swap it in, serialised by a mutex so that
// two concurrent writes cannot lose each other. The zero Store is ready to
// use and holds an empty plan (no spec).
type Store struct {
	mu   sync.Mutex // serialises writers; readers never take it
	plan atomic.Pointer[Plan]
}

// empty is what Get returns before the first write; never modified.
var empty = &Plan{Groups: map[string]rollout.GroupStatus{}}

// Get returns the current snapshot, never nil. It is shared: callers must not
// modify it (copy what you want to change and Set the copy).
func (s *Store) Get() *Plan {
	if p := s.plan.Load(); p != nil {
		return p
	}
	return empty
}

// Set replaces the whole plan (the controller's initial read of the bucket).
// p is copied, so the caller may keep using it.
func (s *Store) Set(p Plan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plan.Store(p.clone())
}

// SetSpec records the plan spec (key spec) and marks the plan as loaded.
func (s *Store) SetSpec(spec rollout.Spec) {
	s.update(func(p *Plan) {
		p.Spec, p.HasSpec = spec, true
	})
}

// DeleteSpec forgets the spec (the key was deleted or purged): find answers
// "no plan yet" again rather than a version nobody stands behind any more.
func (s *Store) DeleteSpec() {
	s.update(func(p *Plan) {
		p.Spec, p.HasSpec = rollout.Spec{}, false
	})
}

// SetConfigured records the groups of the rollout config, in order; nil
// turns the group check off. names is copied.
func (s *Store) SetConfigured(names []string) {
	names = slices.Clone(names)
	s.update(func(p *Plan) {
		p.Configured = names
	})
}

// SetGroup records the status of one group (key group.<name>).
func (s *Store) SetGroup(name string, st rollout.GroupStatus) {
	st = st.Clone()
	s.update(func(p *Plan) {
		p.Groups[name] = st
	})
}

// DeleteGroup forgets a group's status; the group is then answered as
// unstarted, like any group the plan does not know.
func (s *Store) DeleteGroup(name string) {
	s.update(func(p *Plan) {
		delete(p.Groups, name)
	})
}

// update applies change to a copy of the current plan and publishes the copy.
// Copying the groups map costs O(groups) per write; groups are few and
// writes rare next to reads, which is the trade copy-on-write makes.
func (s *Store) update(change func(*Plan)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.Get()
	next := *cur
	next.Groups = maps.Clone(cur.Groups) // statuses are values; Canaries are never mutated in place
	if next.Groups == nil {
		next.Groups = map[string]rollout.GroupStatus{}
	}
	change(&next)
	s.plan.Store(&next)
}
