package rollout

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"sync"
	"time"
)

// SchemaVersion is the "v" of every value this package puts on the bus.
const SchemaVersion = 1

// Config is the operator's rollout configuration, fleet_config/config
// (DESIGN §3.1). Decode it with encoding/json: omitted fields take the
// defaults of DefaultConfig and DefaultGroup.
type Config struct {
	V int `json:"v"`
	// Mode is the operator's mode; the effective mode is the lower of this
	// and the plan's (EffectiveMode).
	Mode Mode `json:"mode"`
	// Timezone is the IANA zone that days and start_hour are read in.
	Timezone string `json:"timezone"`
	// Groups are the rollout groups. The order matters only for groups
	// without depends_on, which follow the group before them.
	Groups []GroupConfig `json:"groups"`
	// RequireReason makes fleetctl refuse a write without --reason (or a
	// group action's --note): every entry of the audit trail says why.
	// Omitted when false, so a config without it reads the same for a
	// controller older than the field.
	RequireReason bool `json:"require_reason,omitempty"`
	// QuarantineAfter quarantines a version fleet-wide once this many
	// distinct agents, in any groups, rolled back from it with a release
	// failure (see QuarantineFrom): 1-MaxQuarantineAfter, or 0 for no
	// automatic quarantine (operators still quarantine by hand). Absent:
	// DefaultQuarantineAfter.
	QuarantineAfter int `json:"quarantine_after"`
	// AnalysisConfig: prometheus_url and the fleet-wide metric analysis
	// checks (analysis.go).
	AnalysisConfig
	// Apps are the apps the fleet keeps on their versions, the default
	// app first (apps.go). Omitted: one app, DefaultAppName, by tarball.
	Apps []AppConfig `json:"apps,omitempty"`
	// CatchAll names the group that hosts of groups not in the config
	// follow and are counted in: "" the last group, CatchAllNone ("-")
	// none (they wait for their group to be configured).
	CatchAll string `json:"catch_all,omitempty"`
}

// GroupConfig is the schedule of one group.
type GroupConfig struct {
	Name string `json:"name"`
	// Days the group may start on: "Sun".."Sat", or ["*"] for every day.
	Days []string `json:"days"`
	// StartHour opens a one-hour start window, 0-23, in Config.Timezone.
	StartHour int `json:"start_hour"`
	// WaitHours after the last predecessor finished before the group may
	// start (the first window at or after that time starts it).
	WaitHours int `json:"wait_hours"`
	// JitterSeconds is the longest random delay an agent waits before it
	// updates, handed to agents through the group status.
	JitterSeconds int `json:"jitter_seconds"`
	// CanaryCount agents update first; all must be healthy before the rest.
	CanaryCount int `json:"canary_count"`
	// MaxInFlight bounds the agents updating at once (backpressure).
	MaxInFlight Percent `json:"max_in_flight"`
	// AlertAfter raises an alert when the group has not finished this long
	// after it started; the rollout continues.
	AlertAfter Duration `json:"alert_after"`
	// FailureThreshold halts the group when more of its initial agents than
	// this have failed the target.
	FailureThreshold Percent `json:"failure_threshold"`
	// HealthTimeout is how long an agent gives the updated app to become
	// healthy, and how long a canary may be missing before the group halts.
	HealthTimeout Duration `json:"health_timeout"`
	// MinHealthyTime is how long a canary must be seen healthy on the target
	// (agents also stay healthy this long before they record success).
	MinHealthyTime Duration `json:"min_healthy_time"`
	// UpdateTimeout is how long an agent may take over an update, from when
	// it reports starting it (download, install, health wait and
	// min_healthy_time included). An agent still updating to the target
	// after it is timed out: it counts as failed towards failure_threshold
	// and no longer holds a place in the max_in_flight window. 0 is
	// DefaultUpdateTimeout (see EffectiveUpdateTimeout).
	UpdateTimeout Duration `json:"update_timeout"`
	// InfrastructureHold holds the group's progress (no new agents are
	// told to update, nothing fails, nothing halts) while more than this
	// share of its agents in flight, or of its canaries, are blocked on
	// infrastructure: a release site that is down, a full disk, a held
	// lock. The agents retry by themselves and the group moves on when
	// they recover. 0% holds on the first blocked agent, 100% never holds.
	InfrastructureHold Percent `json:"infrastructure_hold"`
	// VanishedLimit bounds the share of the group's initial agents that
	// may have vanished (expired from the inventory, net of agents that
	// joined) when it would be done: past it the group is not done, it
	// says so (GroupStatus.DoneHeld) and waits for them to return or an
	// operator's mark-done. Teleport refuses done above 10%. 0% wants
	// every initial agent back, 100% never waits.
	VanishedLimit Percent `json:"vanished_limit"`
	// DependsOn names the groups that must be done first. Omitted or null:
	// the group before this one in Groups (none for the first). An explicit
	// empty list: no dependency.
	DependsOn []string `json:"depends_on"`
	// Approval lists the stages at which the group waits for an
	// operator's approval (fleetctl approve): "start" (before it starts)
	// and "after_canary" (its canaries healthy, before it goes active).
	// Empty: none. See approval.go.
	Approval ApprovalGates `json:"approval,omitempty"`
	// AlertOnApprovalWait makes the time the group awaits an approval
	// count towards alert_after (by default it does not: see
	// machine.alertElapsed).
	AlertOnApprovalWait bool `json:"alert_on_approval_wait,omitempty"`
	// Analysis are the group's own metric analysis checks, on top of the
	// fleet's (see Config.Checks).
	Analysis []Check `json:"analysis,omitempty"`
	// WindowLength is how long each start window stays open from
	// start_hour: 15m-24h; 0 (omitted) is one hour (EffectiveWindowLength).
	WindowLength Duration `json:"window_length,omitempty"`
	// SmallGroup: a group with at most this many agents present when it
	// starts skips the canary phase (0, the default: never).
	SmallGroup int `json:"small_group,omitempty"`
	// Rate caps starts per period, with an optional exponential ramp
	// (rate.go); nil: only max_in_flight bounds the group.
	Rate *RateConfig `json:"rate,omitempty"`
	// AdaptiveInFlight lets the in-flight bound grow while agents succeed
	// and shrink when failures or heartbeat lag rise, never above
	// max_in_flight.
	AdaptiveInFlight bool `json:"adaptive_in_flight,omitempty"`
	// Selector defines the group's members by their labels (labels.go):
	// an agent whose labels match joins this group whatever group name it
	// was given. Empty: membership by name only.
	Selector Selector `json:"selector,omitempty"`
}

// Default values (RFD 169 where it has one).
const (
	DefaultGroupName        = "default"
	DefaultTimezone         = "UTC"
	DefaultJitterSeconds    = 5
	DefaultCanaryCount      = 5
	DefaultMaxInFlight      = Percent(20)
	DefaultAlertAfter       = Duration(4 * time.Hour)
	DefaultFailureThreshold = Percent(5)
	DefaultHealthTimeout    = Duration(5 * time.Minute)
	DefaultMinHealthyTime   = Duration(5 * time.Minute)
	DefaultUpdateTimeout    = Duration(30 * time.Minute)
	// DefaultInfrastructureHold: the group holds while more than half
	// of its agents in flight are blocked on infrastructure.
	DefaultInfrastructureHold = Percent(50)
	// DefaultVanishedLimit: a group is done with at most a tenth of its
	// initial agents gone, as Teleport's rollouts.
	DefaultVanishedLimit = Percent(10)
)

// Limits checked by Validate.
const (
	MaxGroups        = 100
	MaxCanaryCount   = 10
	MaxJitterSeconds = 3600
	MaxWaitHours     = 168
	// MaxChain bounds how long a dependency chain may take to reach its last
	// group (see Config.Validate); RFD 169 rejects chains longer than a week.
	MaxChain = 7 * 24 * time.Hour
)

var (
	minAlertAfter     = time.Minute
	maxAlertAfter     = 7 * 24 * time.Hour
	minHealthTimeout  = 10 * time.Second
	maxHealthTimeout  = time.Hour
	maxMinHealthyTime = 24 * time.Hour
	// update_timeout: at least a minute (less times out a download on a
	// slow link), at most a week (MaxChain: a group stuck longer than a
	// rollout may take in all is stuck), and longer than the agent's own
	// waits, health_timeout + min_healthy_time, or every update that
	// passes them would time out.
	minUpdateTimeout = time.Minute
	maxUpdateTimeout = 7 * 24 * time.Hour
)

// DefaultConfig is the config fleetwave uses when fleet_config has none: one
// "default" group, enabled, UTC.
func DefaultConfig() Config {
	return Config{
		V:        SchemaVersion,
		Mode:     ModeEnabled,
		Timezone: DefaultTimezone,
		Groups:   []GroupConfig{DefaultGroup(DefaultGroupName)},

		QuarantineAfter: DefaultQuarantineAfter,
	}
}

// DefaultGroup is a group with every setting at its default: all days, start
// hour 0, no wait, jitter 5s, 5 canaries, 20% in flight, alert after 4h, halt
// above 5% failed, 5m health timeout and minimum healthy time, 30m update
// timeout, hold while more than 50% of those in flight are blocked on
// infrastructure, done with at most 10% of the initial agents vanished.
func DefaultGroup(name string) GroupConfig {
	return GroupConfig{
		Name:             name,
		Days:             []string{"*"},
		JitterSeconds:    DefaultJitterSeconds,
		CanaryCount:      DefaultCanaryCount,
		MaxInFlight:      DefaultMaxInFlight,
		AlertAfter:       DefaultAlertAfter,
		FailureThreshold: DefaultFailureThreshold,
		HealthTimeout:    DefaultHealthTimeout,
		MinHealthyTime:   DefaultMinHealthyTime,
		UpdateTimeout:    DefaultUpdateTimeout,

		InfrastructureHold: DefaultInfrastructureHold,
		VanishedLimit:      DefaultVanishedLimit,
	}
}

// EffectiveUpdateTimeout is the update_timeout the engine applies:
// UpdateTimeout, or when it is not set (0, which Validate refuses)
// DefaultUpdateTimeout, raised to health_timeout + min_healthy_time +
// DefaultUpdateTimeout when the agent's own waits take 30m or more. A
// group decoded without update_timeout (a config written before the field
// existed) gets the same, so that an old config stays valid and never
// times out updates that pass the agent's waits.
func (g GroupConfig) EffectiveUpdateTimeout() time.Duration {
	if g.UpdateTimeout > 0 {
		return g.UpdateTimeout.D()
	}
	return defaultUpdateTimeout(g)
}

// absentDuration marks a duration field the JSON did not set (no JSON
// duration decodes to it short of the most negative one).
const absentDuration = Duration(math.MinInt64)

func defaultUpdateTimeout(g GroupConfig) time.Duration {
	if waits := g.HealthTimeout.D() + g.MinHealthyTime.D(); waits >= DefaultUpdateTimeout.D() {
		return waits + DefaultUpdateTimeout.D()
	}
	return DefaultUpdateTimeout.D()
}

// UnmarshalJSON decodes a config over DefaultConfig's values, rejecting
// unknown fields. A "groups" list replaces the default group entirely.
func (c *Config) UnmarshalJSON(b []byte) error {
	d := DefaultConfig()
	fields := map[string]any{
		"v":              &d.V,
		"mode":           &d.Mode,
		"timezone":       &d.Timezone,
		"groups":         &d.Groups,
		"require_reason": &d.RequireReason,
		"apps":           &d.Apps,
		"catch_all":      &d.CatchAll,

		"quarantine_after": &d.QuarantineAfter,
	}
	maps.Copy(fields, d.AnalysisConfig.fields())
	err := decodeObject(b, fields, true)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	*c = d
	return nil
}

// UnmarshalJSON decodes a group over DefaultGroup's values, rejecting unknown
// fields.
func (g *GroupConfig) UnmarshalJSON(b []byte) error {
	d := DefaultGroup("")
	d.UpdateTimeout = absentDuration // absent: the default for the group's waits, below
	err := decodeObject(b, map[string]any{
		"name":                &d.Name,
		"days":                &d.Days,
		"start_hour":          &d.StartHour,
		"wait_hours":          &d.WaitHours,
		"jitter_seconds":      &d.JitterSeconds,
		"canary_count":        &d.CanaryCount,
		"max_in_flight":       &d.MaxInFlight,
		"alert_after":         &d.AlertAfter,
		"failure_threshold":   &d.FailureThreshold,
		"health_timeout":      &d.HealthTimeout,
		"min_healthy_time":    &d.MinHealthyTime,
		"update_timeout":      &d.UpdateTimeout,
		"infrastructure_hold": &d.InfrastructureHold,
		"vanished_limit":      &d.VanishedLimit,
		"depends_on":          &d.DependsOn,

		"approval":               &d.Approval,
		"alert_on_approval_wait": &d.AlertOnApprovalWait,
		"analysis":               &d.Analysis,

		"window_length":      &d.WindowLength,
		"small_group":        &d.SmallGroup,
		"rate":               &d.Rate,
		"adaptive_in_flight": &d.AdaptiveInFlight,
		"selector":           &d.Selector,
	}, true)
	if err != nil {
		// Name the group in the error even when another field failed first.
		var named struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(b, &named) == nil && named.Name != "" {
			return fmt.Errorf("group %q: %w", truncate(named.Name, 70), err)
		}
		return fmt.Errorf("group: %w", err)
	}
	if d.UpdateTimeout == absentDuration {
		d.UpdateTimeout = Duration(defaultUpdateTimeout(d))
	}
	*g = d
	return nil
}

// Group returns the named group's config.
func (c Config) Group(name string) (GroupConfig, bool) {
	for _, g := range c.Groups {
		if g.Name == name {
			return g, true
		}
	}
	return GroupConfig{}, false
}

// Location resolves Timezone ("" is UTC). Zones other than UTC come from the
// system's time zone database (or an embedded one, if the binary imports
// time/tzdata); each name is looked up once per process.
func (c Config) Location() (*time.Location, error) {
	return loadLocation(c.Timezone)
}

var locations sync.Map // zone name → *time.Location

func loadLocation(name string) (*time.Location, error) {
	switch name {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("timezone %q depends on the host: name an IANA zone such as \"Europe/Berlin\", or \"UTC\"", name)
	}
	if l, ok := locations.Load(name); ok {
		return l.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("timezone %q: not an IANA zone name such as \"Europe/Berlin\" (%v)", truncate(name, 60), err)
	}
	locations.Store(name, loc)
	return loc, nil
}

// Validate checks every rule of DESIGN §3.1 and returns all violations
// joined, each wrapping ErrBadConfig and naming the group, the field and the
// allowed range.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, args...)...))
	}
	if c.V != SchemaVersion {
		bad("v %d: this fleetwave reads version %d", c.V, SchemaVersion)
	}
	if err := c.Mode.validate("mode"); err != nil {
		bad("%v", err)
	}
	if _, err := c.Location(); err != nil {
		bad("%v", err)
	}
	if err := c.validateCatchAll(); err != nil {
		bad("%v", err)
	}
	if c.QuarantineAfter < 0 || c.QuarantineAfter > MaxQuarantineAfter {
		bad("quarantine_after %d must be 0 (off) or 1-%d", c.QuarantineAfter, MaxQuarantineAfter)
	}
	switch {
	case len(c.Groups) == 0:
		bad("groups: at least one group is needed (the default config has one named %q)", DefaultGroupName)
	case len(c.Groups) > MaxGroups:
		bad("groups: %d groups, at most %d", len(c.Groups), MaxGroups)
	}
	seen := map[string]bool{}
	for i, g := range c.Groups {
		for _, err := range g.validate() {
			if g.Name == "" {
				bad("group #%d: %v", i+1, err)
			} else {
				bad("group %q: %v", g.Name, err)
			}
		}
		if g.Name != "" && seen[g.Name] {
			bad("group %q: listed twice; group names must be unique", g.Name)
		}
		seen[g.Name] = true
	}
	for _, err := range c.validateAnalysis() {
		bad("%v", err)
	}
	for _, err := range c.validateApps() {
		bad("%v", err)
	}
	if len(errs) == 0 {
		for _, err := range c.validateOrder() {
			bad("%v", err)
		}
	}
	return errors.Join(errs...)
}

func (g GroupConfig) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := ValidateGroupName(g.Name); err != nil {
		bad("name: %v", err)
	}
	if _, err := parseDays(g.Days); err != nil {
		bad("%v", err)
	}
	if g.StartHour < 0 || g.StartHour > 23 {
		bad("start_hour %d must be 0-23", g.StartHour)
	}
	if g.WaitHours < 0 || g.WaitHours > MaxWaitHours {
		bad("wait_hours %d must be 0-%d", g.WaitHours, MaxWaitHours)
	}
	if g.JitterSeconds < 0 || g.JitterSeconds > MaxJitterSeconds {
		bad("jitter_seconds %d must be 0-%d", g.JitterSeconds, MaxJitterSeconds)
	}
	if g.CanaryCount < 0 || g.CanaryCount > MaxCanaryCount {
		bad("canary_count %d must be 0-%d", g.CanaryCount, MaxCanaryCount)
	}
	if g.MaxInFlight < 1 || g.MaxInFlight > 100 {
		bad("max_in_flight %q must be 1%%-100%%", g.MaxInFlight)
	}
	if g.FailureThreshold < 0 || g.FailureThreshold > 100 {
		bad("failure_threshold %q must be 0%%-100%%", g.FailureThreshold)
	}
	if g.InfrastructureHold < 0 || g.InfrastructureHold > 100 {
		bad("infrastructure_hold %q must be 0%%-100%%", g.InfrastructureHold)
	}
	if g.VanishedLimit < 0 || g.VanishedLimit > 100 {
		bad("vanished_limit %q must be 0%%-100%%", g.VanishedLimit)
	}
	if d := g.AlertAfter.D(); d < minAlertAfter || d > maxAlertAfter {
		bad("alert_after %q must be %s-%s", g.AlertAfter, Duration(minAlertAfter), Duration(maxAlertAfter))
	}
	if d := g.HealthTimeout.D(); d < minHealthTimeout || d > maxHealthTimeout {
		bad("health_timeout %q must be %s-%s", g.HealthTimeout, Duration(minHealthTimeout), Duration(maxHealthTimeout))
	}
	if d := g.MinHealthyTime.D(); d < 0 || d > maxMinHealthyTime {
		bad("min_healthy_time %q must be 0s-%s", g.MinHealthyTime, Duration(maxMinHealthyTime))
	}
	waits := g.HealthTimeout.D() + g.MinHealthyTime.D()
	switch d := g.UpdateTimeout.D(); {
	case d < minUpdateTimeout || d > maxUpdateTimeout:
		bad("update_timeout %q must be %s-%s", g.UpdateTimeout, Duration(minUpdateTimeout), Duration(maxUpdateTimeout))
	case d <= waits:
		bad("update_timeout %q must be longer than health_timeout + min_healthy_time (%s), or every update that waits them out times out",
			g.UpdateTimeout, Duration(waits))
	}
	for _, dep := range g.DependsOn {
		if dep == g.Name {
			bad("depends_on: a group cannot depend on itself")
		}
	}
	if err := g.Approval.validate(); err != nil {
		bad("%v", err)
	}
	if w := g.WindowLength; w != 0 && (w < minWindowLength || w > maxWindowLength) {
		bad("window_length %q must be %s-%s", w, minWindowLength, maxWindowLength)
	}
	if g.SmallGroup < 0 || g.SmallGroup > MaxSmallGroup {
		bad("small_group %d must be 0-%d", g.SmallGroup, MaxSmallGroup)
	}
	if err := g.Rate.validate(); err != nil {
		bad("%v", err)
	}
	if err := g.Selector.validate(); err != nil {
		bad("%v", err)
	}
	return errs
}

// CheckConfigChange decides whether next may replace prev, given the status
// of each group (keyed by group name, as in fleet_plan). next must itself be
// valid. A group that is rolling out (canary or active, halted or not) may be
// neither changed nor removed: its schedule, canaries and backpressure were
// fixed when it started. Its analysis checks may change (a changed check
// counts afresh), and so may its vanished_limit. Mode and time zone changes are always allowed, as
// are changes to groups that are unstarted, done or rolled back. A renamed
// group is a removal and an addition and keeps no state.
func CheckConfigChange(prev, next Config, statuses map[string]GroupStatus) error {
	if err := next.Validate(); err != nil {
		return err
	}
	var errs []error
	if err := checkAppsChange(prev, next); err != nil {
		errs = append(errs, err)
	}
	for _, name := range sortedKeys(statuses) {
		st := statuses[name]
		if !st.State.InProgress() {
			continue
		}
		old, ok := prev.Group(name)
		if !ok {
			continue // not configured before: nothing of ours to protect
		}
		cur, ok := next.Group(name)
		if !ok {
			errs = append(errs, fmt.Errorf("%w: group %q is %s; it cannot be removed or renamed until it is done, rolled back or reset by a new target", ErrConfigChange, name, st.State))
			continue
		}
		if !sameGroup(old, cur) || !slices.Equal(prev.Dependencies(name), next.Dependencies(name)) {
			errs = append(errs, fmt.Errorf("%w: group %q is %s; its schedule cannot change until it is done, rolled back or reset by a new target", ErrConfigChange, name, st.State))
		}
	}
	return errors.Join(errs...)
}

func sameGroup(a, b GroupConfig) bool {
	a.DependsOn, b.DependsOn = nil, nil
	// Checks may change while a group rolls out (a wrong query must be
	// fixable): a changed check counts afresh (syncChecks).
	a.Analysis, b.Analysis = nil, nil
	// vanished_limit only decides when the group is done: an operator
	// whose group waits for hosts that are gone for good may relax it
	// (or mark the group done) mid-rollout.
	a.VanishedLimit, b.VanishedLimit = 0, 0
	ad, errA := parseDays(a.Days)
	bd, errB := parseDays(b.Days)
	if errA != nil || errB != nil || ad != bd {
		return false
	}
	// Days compared as sets above; dependencies by the caller. Every other
	// field, including any added later, must be equal.
	a.Days, b.Days = nil, nil
	return reflect.DeepEqual(a, b)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
