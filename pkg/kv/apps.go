package kv

import (
	"fmt"
	"strings"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// AppNS is one app's namespace on the bus (DESIGN §9): its plan keys,
// heartbeat subjects and stats keys. The default app's namespace carries no
// app name, so its keys and subjects are exactly those of a fleet before
// apps (KeySpec, GroupKey, KeyQuarantine, fleet.hb.<g>.<id>): a single-app
// fleet gains apps without a key moving or a host's credentials changing.
// Every other app's carry its name first: <app>.spec, <app>.group.<g>,
// <app>.quarantine, fleet.hb.<app>.<g>.<id>, fleet_stats <app>.<g>.<ctl>.
type AppNS struct {
	// Name is the app's name (never empty: the default app's too).
	Name string
	// key is "" for the default app, Name otherwise.
	key string
}

// NS is the namespace of app in cfg ("" is the default app). An app the
// config does not list is an error that names the ones it does.
func NS(cfg rollout.Config, app string) (AppNS, error) {
	a, ok := cfg.App(app)
	if !ok {
		return AppNS{}, fmt.Errorf("app %q is not in the config; apps: %s", app, strings.Join(cfg.AppNames(), ", "))
	}
	if cfg.IsDefaultApp(a.Name) {
		return AppNS{Name: a.Name}, nil
	}
	return AppNS{Name: a.Name, key: a.Name}, nil
}

// DefaultNS is the namespace of cfg's default app.
func DefaultNS(cfg rollout.Config) AppNS { return AppNS{Name: cfg.DefaultApp()} }

// OtherNS is the namespace of a non-default app named name, for callers that
// know it is not the default (an agent told so by its own config).
func OtherNS(name string) AppNS { return AppNS{Name: name, key: name} }

// IsDefault reports whether n is the default app's namespace.
func (n AppNS) IsDefault() bool { return n.key == "" }

// Key is the app token of n's keys and subjects: "" for the default app.
func (n AppNS) Key() string { return n.key }

func (n AppNS) prefixed(k string) string {
	if n.key == "" {
		return k
	}
	return n.key + "." + k
}

// Spec is the fleet_plan key of n's plan spec.
func (n AppNS) Spec() string { return n.prefixed(KeySpec) }

// Group is the fleet_plan key of n's status of group.
func (n AppNS) Group(group string) string { return n.prefixed(GroupKey(group)) }

// Groups is the fleet_plan key of n's groups and their selectors
// (KeyGroups): "groups", "<app>.groups". App "group" is reserved
// (rollout.ValidateAppName), so "<app>.groups" is never a group's status
// key, which "group.groups" would be.
func (n AppNS) Groups() string { return n.prefixed(KeyGroups) }

// Quarantine is the fleet_plan key of n's quarantine list.
func (n AppNS) Quarantine() string { return n.prefixed(KeyQuarantine) }

// Stats is the fleet_stats key a controller writes n's counts of group to.
func (n AppNS) Stats(group, controllerID string) string {
	return n.prefixed(StatsKey(group, controllerID))
}

// HBSubject is the subject agent id of group heartbeats n on.
func (n AppNS) HBSubject(group string, id rollout.AgentID) string {
	return heartbeat.SubjectForApp(n.key, group, id)
}

// HBFilter is the heartbeat filter of n's agents in group, or in every group
// when group is "". The default app's filter ("" group) is
// fleet.hb.*.* : its subjects have one token fewer than every other app's.
func (n AppNS) HBFilter(group string) string {
	g := group
	if g == "" {
		g = "*"
	}
	if n.key == "" {
		return heartbeat.SubjectPrefix + g + ".*"
	}
	return heartbeat.SubjectPrefix + n.key + "." + g + ".*"
}

// PlanKey is a fleet_plan key taken apart: the app token ("" for the default
// app), and what the key holds.
type PlanKey struct {
	App string
	// Kind is KeySpec, KeyQuarantine or "group" (then Group is set), or ""
	// for a key that is none of these.
	Kind  string
	Group string
}

// Kind of a group status key in PlanKey.
const KindGroup = "group"

// ParsePlanKey takes a fleet_plan key apart: spec, quarantine, group.<g>,
// <app>.spec, <app>.quarantine, <app>.group.<g>. Anything else has Kind "".
func ParsePlanKey(key string) PlanKey {
	switch key {
	case KeySpec, KeyQuarantine:
		return PlanKey{Kind: key}
	}
	if g, ok := GroupFromKey(key); ok && g != "" && !strings.Contains(g, ".") {
		return PlanKey{Kind: KindGroup, Group: g}
	}
	app, rest, ok := strings.Cut(key, ".")
	if !ok || rollout.ValidateAppName(app) != nil {
		return PlanKey{}
	}
	switch rest {
	case KeySpec, KeyQuarantine:
		return PlanKey{App: app, Kind: rest}
	}
	if g, ok := GroupFromKey(rest); ok && g != "" && !strings.Contains(g, ".") {
		return PlanKey{App: app, Kind: KindGroup, Group: g}
	}
	return PlanKey{}
}
