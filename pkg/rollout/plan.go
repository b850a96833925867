package rollout

import (
	"errors"
	"fmt"
)

// Schedule says whether groups wait for their windows and dependencies.
type Schedule string

// Schedules.
const (
	// ScheduleRegular: groups start in dependency order, each in its window
	// and wait_hours after its predecessors finished.
	ScheduleRegular Schedule = "regular"
	// ScheduleImmediate: every group starts at once, ignoring windows,
	// dependencies and wait_hours. Canaries, backpressure and halts still
	// apply; pick strategy grouped and canary_count 0 for "all at once".
	ScheduleImmediate Schedule = "immediate"
	// ScheduleTimeBased: every group updates during its own window,
	// independently of every other (no dependency chain, no wait_hours); a
	// group is done while its window is open, and active again when its
	// window reopens with agents off the target (Teleport's time-based
	// strategy).
	ScheduleTimeBased Schedule = "time-based"
)

// Strategy says how a started group hands out updates.
type Strategy string

// Strategies.
const (
	// StrategyBackpressure: at most max_in_flight of the group updates at
	// once (DESIGN §3.4).
	StrategyBackpressure Strategy = "backpressure"
	// StrategyGrouped: after the canaries, every agent of the group at once.
	StrategyGrouped Strategy = "grouped"
)

// Spec is the plan spec, fleet_plan/spec (DESIGN §3.2): what to roll out and
// how. Omitted fields decode to regular, backpressure and enabled.
type Spec struct {
	V int `json:"v"`
	// StartVersion is what agents run before their group's turn (and after a
	// rollback).
	StartVersion string `json:"start_version"`
	// TargetVersion is what agents run after their group's turn. Changing it
	// resets every group to unstarted.
	TargetVersion string   `json:"target_version"`
	Schedule      Schedule `json:"schedule"`
	Strategy      Strategy `json:"strategy"`
	Mode          Mode     `json:"mode"`
	// Critical lets groups start outside their windows (dependencies and
	// wait_hours still apply).
	Critical bool `json:"critical"`
}

// DefaultSpec is a spec with the given versions and default settings.
func DefaultSpec(start, target string) Spec {
	return Spec{
		V:             SchemaVersion,
		StartVersion:  start,
		TargetVersion: target,
		Schedule:      ScheduleRegular,
		Strategy:      StrategyBackpressure,
		Mode:          ModeEnabled,
	}
}

// UnmarshalJSON decodes a spec over DefaultSpec's values. Unlike Config, it
// skips unknown fields: agents read the spec and may be older than the
// fleetctl that wrote it, and a spec they cannot read would strand them.
func (s *Spec) UnmarshalJSON(b []byte) error {
	d := DefaultSpec("", "")
	err := decodeObject(b, map[string]any{
		"v":              &d.V,
		"start_version":  &d.StartVersion,
		"target_version": &d.TargetVersion,
		"schedule":       &d.Schedule,
		"strategy":       &d.Strategy,
		"mode":           &d.Mode,
		"critical":       &d.Critical,
	}, false)
	if err != nil {
		return fmt.Errorf("plan spec: %w", err)
	}
	*s = d
	return nil
}

// Validate checks the spec; every violation wraps ErrBadSpec.
func (s Spec) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadSpec}, args...)...))
	}
	if s.V != SchemaVersion {
		bad("v %d: this fleetwave reads version %d", s.V, SchemaVersion)
	}
	if err := ValidateVersion(s.StartVersion); err != nil {
		bad("start_version: %v", err)
	}
	if err := ValidateVersion(s.TargetVersion); err != nil {
		bad("target_version: %v", err)
	}
	if s.Schedule != ScheduleRegular && s.Schedule != ScheduleImmediate && s.Schedule != ScheduleTimeBased {
		bad("schedule %q must be regular, immediate or time-based", s.Schedule)
	}
	if s.Strategy != StrategyBackpressure && s.Strategy != StrategyGrouped {
		bad("strategy %q must be backpressure or grouped", s.Strategy)
	}
	if err := s.Mode.validate("mode"); err != nil {
		bad("%v", err)
	}
	return errors.Join(errs...)
}

// Downgrade reports whether the target is older than the start version. The
// rollout rules are the same; agents apply RFD 169's database rules.
func (s Spec) Downgrade() bool {
	return ValidateVersion(s.StartVersion) == nil && ValidateVersion(s.TargetVersion) == nil &&
		CompareVersions(s.TargetVersion, s.StartVersion) < 0
}

// Plan is the whole fleet_plan bucket as the controller and fleetctl see it:
// the spec and the status of every group, keyed by group name.
type Plan struct {
	Spec   Spec
	Groups map[string]GroupStatus
}

// Predecessors returns the statuses of the groups above group in the
// depends_on chain under cfg (Config.Ancestors: its dependencies and
// theirs, transitively), as Input.Predecessors wants them. A group without
// a status is left out, and Next reads a dependency without one as not
// done.
func (p Plan) Predecessors(cfg Config, group string) map[string]GroupStatus {
	out := map[string]GroupStatus{}
	for _, d := range cfg.Ancestors(group) {
		if st, ok := p.Groups[d]; ok {
			out[d] = st
		}
	}
	return out
}
