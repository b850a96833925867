package fleetctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

const configKeyName = kv.BucketConfig + "/" + kv.KeyConfig

func newConfigCmd(g *Global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show and change the rollout config (groups, schedules, mode)",
		Long: `The rollout config (fleet_config/config) holds the operator's mode and the
rollout groups in order, each with its start window, canaries, backpressure
and thresholds (docs/rollout.md). Every change is validated and written with
compare-and-swap: a concurrent edit fails instead of being overwritten.`,
	}
	cmd.AddCommand(newConfigShowCmd(g), newConfigSetCmd(g), newConfigAddGroupCmd(g), newConfigApplyCmd(g),
		newConfigResetCmd(g), newConfigDeleteGroupCmd(g))
	return cmd
}

// ConfigShowOptions are the flags of "fleetctl config show".
type ConfigShowOptions struct {
	*Global
	// Output is yaml or json.
	Output string
}

func newConfigShowCmd(g *Global) *cobra.Command {
	o := &ConfigShowOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Print the rollout config (YAML, or JSON with -o json)",
		Long: `Print the rollout config. The YAML keys are the JSON keys of the bucket, so the
output can be edited and given back to "fleetctl config apply -f". When no
config was ever written, the default config fleetwave uses is shown.`,
		Example: `  fleetctl config show
  fleetctl config show > fleet.yaml && $EDITOR fleet.yaml && fleetctl config apply -f fleet.yaml
  fleetctl config show -o json | jq '.groups[].name'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(o.Output, "yaml", "json"); err != nil {
				return err
			}
			return RunConfigShow(cmd.Context(), o)
		},
	}
	formatFlag(cmd, &o.Output, "yaml", "json")
	return cmd
}

// RunConfigShow is "fleetctl config show".
func RunConfigShow(ctx context.Context, o *ConfigShowOptions) error {
	ctx, f, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	e, isDefault, err := f.ReadConfig(ctx)
	if err != nil {
		return err // a config that is not valid names the fix
	}
	if o.Output == "json" {
		return writeJSON(o.Out, e.Value)
	}
	data, err := json.Marshal(e.Value)
	if err != nil {
		return err
	}
	y, err := jsonToYAML(data)
	if err != nil {
		return err
	}
	if isDefault {
		fmt.Fprintf(o.Out, "# %s: none written yet; this is the default config\n", configKeyName)
	} else {
		fmt.Fprintf(o.Out, "# %s revision %d\n", configKeyName, e.Revision)
	}
	_, err = o.Out.Write(y)
	return err
}

// ConfigSetOptions are the flags of "fleetctl config set" and "fleetctl
// config add-group". A nil setting is left as it is: only what the operator
// gave changes.
type ConfigSetOptions struct {
	*Global
	// Group is the group the group settings apply to. It must exist, unless
	// Add is set.
	Group string
	// Add makes Group a new group (default settings, at the end of the list,
	// then the settings given); it must not exist yet. Adding is a verb of
	// its own so that a mistyped name is an error, never a new group.
	Add bool

	Mode     *string
	Timezone *string
	// RequireReason sets the config's require_reason.
	RequireReason *bool
	// QuarantineAfter sets the config's quarantine_after.
	QuarantineAfter *int
	// CatchAll is catch_all: a group, "-" for none, "" for the last
	// group (docs/rollout.md, "Catch-all group").
	CatchAll *string

	// Days: "Mon,Tue" or "*".
	Days          *string
	StartHour     *int
	WaitHours     *int
	JitterSeconds *int
	CanaryCount   *int
	// SmallGroup sets small_group (issue 28): at most this many agents
	// present at the start skip the canary phase.
	SmallGroup *int
	// MaxInFlight, FailureThreshold, InfrastructureHold and
	// VanishedLimit: "20%".
	MaxInFlight        *string
	FailureThreshold   *string
	InfrastructureHold *string
	VanishedLimit      *string
	// AlertAfter, HealthTimeout, MinHealthyTime, UpdateTimeout: "4h", "90s".
	AlertAfter     *string
	HealthTimeout  *string
	MinHealthyTime *string
	UpdateTimeout  *string
	// WindowLength: "4h", "90m" (window_length).
	WindowLength *string
	// DependsOn: "a,b"; "" for none; "-" for the default (the group listed
	// before this one).
	DependsOn *string
	// Approval: "start,after_canary", "manual", "none"; AlertOnApprovalWait
	// sets alert_on_approval_wait.
	Approval            *string
	AlertOnApprovalWait *bool
	// Output is text or json (a WriteResult).
	Output string
	// ForApp is config set's --app: the group settings are that app's own
	// (its overrides of the group), not the fleet's.
	ForApp string
}

func (o *ConfigSetOptions) groupSettings() []string {
	var set []string
	for _, s := range []struct {
		flag  string
		given bool
	}{
		{"--days", o.Days != nil}, {"--start-hour", o.StartHour != nil}, {"--window-length", o.WindowLength != nil}, {"--wait-hours", o.WaitHours != nil},
		{"--jitter-seconds", o.JitterSeconds != nil}, {"--canary-count", o.CanaryCount != nil},
		{"--small-group", o.SmallGroup != nil},
		{"--max-in-flight", o.MaxInFlight != nil}, {"--failure-threshold", o.FailureThreshold != nil},
		{"--infrastructure-hold", o.InfrastructureHold != nil}, {"--vanished-limit", o.VanishedLimit != nil},
		{"--alert-after", o.AlertAfter != nil}, {"--health-timeout", o.HealthTimeout != nil},
		{"--min-healthy-time", o.MinHealthyTime != nil}, {"--update-timeout", o.UpdateTimeout != nil},
		{"--depends-on", o.DependsOn != nil},
		{"--approval", o.Approval != nil}, {"--alert-on-approval-wait", o.AlertOnApprovalWait != nil},
	} {
		if s.given {
			set = append(set, s.flag)
		}
	}
	return set
}

func newConfigSetCmd(g *Global) *cobra.Command {
	o := &ConfigSetOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "set",
		Short: "Change the mode, the time zone or one existing group's settings",
		Long: `Change the config's mode or time zone, or the settings of one group. Only the
flags you give change. The group must exist: a name that is not in the config
is an error that lists the groups (add one with "fleetctl config add-group").
A group that is rolling out (canary or active) cannot be changed until it is
done, rolled back or reset by a new target.

--depends-on takes group names separated by commas; '' means no dependency,
'-' the default (the group listed before this one).

--app NAME changes that app's own settings of the group (its overrides,
docs/cli.md "Apps") instead of the fleet's: the other apps keep the fleet's.
Refused, like any change, while that app's group is rolling out. The order
(--depends-on) and the mode, time zone and other fleet-wide settings are the
fleet's.`,
		Example: `  fleetctl config set --group staging --start-hour 3 --jitter-seconds 60
  fleetctl config set --group prod --days Mon,Tue,Wed,Thu --max-in-flight 10% --depends-on staging
  fleetctl config set --group canary --depends-on ''
  fleetctl config set --group prod --approval start,after_canary
  fleetctl config set --mode paused
  fleetctl config set --timezone Europe/Berlin
  fleetctl config set --quarantine-after 5
  fleetctl config set --catch-all staging     # hosts of groups not in the config follow staging
  fleetctl config set --catch-all=-           # they follow none: they wait
  fleetctl config set --mode enabled -o json | jq .revision
  fleetctl config set --app db --group prod --max-in-flight 5%   # db's own setting of prod`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Group, "group", "", "group to change (must exist; see config add-group)")
	setters := []func(){
		optionalString(cmd, &o.Mode, "mode", "config mode: enabled, paused or disabled"),
		optionalString(cmd, &o.Timezone, "timezone", `IANA time zone of days and start hours ("Europe/Berlin", "UTC")`),
		func() func() {
			v := new(bool)
			fs.BoolVar(v, "require-reason", false, "every fleetctl write must give --reason (--require-reason=false to undo)")
			return func() {
				if fs.Changed("require-reason") {
					o.RequireReason = v
				}
			}
		}(),
		optionalString(cmd, &o.CatchAll, "catch-all", `the group hosts of groups not in the config follow; --catch-all=- for none, --catch-all= for the last group (the default)`),
		func() func() {
			v := new(int)
			fs.IntVar(v, "quarantine-after", 0, "quarantine a version fleet-wide once this many agents rolled back from it (1-1000; 0 turns the rule off; default 3)")
			return func() {
				if fs.Changed("quarantine-after") {
					o.QuarantineAfter = v
				}
			}
		}(),
	}
	setters = append(setters, groupSettingFlags(cmd, o)...)
	writeOutputFlag(cmd, &o.Output)
	// Its own variable, no FLEETCTL_APP: an app named in the shell's
	// environment must not turn a change of the fleet's group into one
	// app's override.
	cmd.Flags().StringVar(&o.ForApp, "app", "", "change this app's own settings of --group (its overrides), not the fleet's")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkWriteOutput(o.Output); err != nil {
			return err
		}
		for _, set := range setters {
			set()
		}
		return RunConfigSet(cmd.Context(), o)
	}
	return cmd
}

func newConfigAddGroupCmd(g *Global) *cobra.Command {
	o := &ConfigSetOptions{Global: g, Add: true}
	cmd := &cobra.Command{
		Use:   "add-group --group G [SETTINGS…]",
		Short: "Add a group to the rollout config",
		Long: `Add a group at the end of the list, with the default settings and then the
settings given (the same flags as "fleetctl config set"). Refused when the
group exists: change it with "fleetctl config set". Agents name their group in
update.yaml; an agent whose group is not in the config is never updated, and
the find endpoint answers it 404.`,
		Example: `  fleetctl config add-group --group staging
  fleetctl config add-group --group prod --start-hour 3 --depends-on staging`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Group, "group", "", "name of the new group (a-z, 0-9, '-', '_')")
	setters := groupSettingFlags(cmd, o)
	writeOutputFlag(cmd, &o.Output)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkWriteOutput(o.Output); err != nil {
			return err
		}
		for _, set := range setters {
			set()
		}
		return RunConfigSet(cmd.Context(), o)
	}
	return cmd
}

// groupSettingFlags registers the group settings of config set and
// add-group on fs; the returned setters, run after parsing, fill o with the
// flags given.
func groupSettingFlags(cmd *cobra.Command, o *ConfigSetOptions) []func() {
	fs := cmd.Flags()
	num := func(dst **int, name, usage string) func() {
		v := new(int)
		fs.IntVar(v, name, 0, usage)
		return func() {
			if fs.Changed(name) {
				*dst = v
			}
		}
	}
	return []func(){
		optionalString(cmd, &o.Days, "days", `days the group may start: "Mon,Tue,…" or "*" for every day`),
		num(&o.StartHour, "start-hour", "hour (0-23) the group's start window opens (open --window-length, one hour unless set)"),
		optionalString(cmd, &o.WindowLength, "window-length", `how long each start window stays open from start_hour ("15m"-"24h"; "0s" for the default hour); a window past midnight belongs to the day it opens`),
		num(&o.WaitHours, "wait-hours", "hours (0-168) to wait after the predecessors finished"),
		num(&o.JitterSeconds, "jitter-seconds", "longest random delay (0-3600) before an agent updates"),
		num(&o.CanaryCount, "canary-count", "agents updated first (0-10)"),
		num(&o.SmallGroup, "small-group", "a group with at most this many agents present when it starts skips its canaries (0-1000; 0 never)"),
		optionalString(cmd, &o.MaxInFlight, "max-in-flight", `share of the group updating at once ("1%"-"100%")`),
		optionalString(cmd, &o.FailureThreshold, "failure-threshold", `halt when more than this share failed ("0%"-"100%")`),
		optionalString(cmd, &o.InfrastructureHold, "infrastructure-hold", `hold (never halt) while more than this share of the agents in flight are blocked on infrastructure ("0%"-"100%"; "100%" never holds)`),
		optionalString(cmd, &o.VanishedLimit, "vanished-limit", `done only while at most this share of the initial agents vanished ("0%"-"100%"; "100%" never waits)`),
		optionalString(cmd, &o.AlertAfter, "alert-after", `alert when not done this long after the start ("1m"-"168h")`),
		optionalString(cmd, &o.HealthTimeout, "health-timeout", `time for the app to become healthy ("10s"-"1h")`),
		optionalString(cmd, &o.MinHealthyTime, "min-healthy-time", `time the app must stay healthy ("0s"-"24h")`),
		optionalString(cmd, &o.UpdateTimeout, "update-timeout", `time an update may take before it counts as failed ("1m"-"168h")`),
		optionalString(cmd, &o.DependsOn, "depends-on", `groups that must be done first: "a,b"; '' none; '-' the group listed before`),
		optionalString(cmd, &o.Approval, "approval", `wait for fleetctl approve at: "start", "after_canary", "start,after_canary" ("manual" is start; "none" for no approval)`),
		func() func() {
			v := new(bool)
			fs.BoolVar(v, "alert-on-approval-wait", false, "count the time awaiting approval towards alert_after (--alert-on-approval-wait=false to undo)")
			return func() {
				if fs.Changed("alert-on-approval-wait") {
					o.AlertOnApprovalWait = v
				}
			}
		}(),
	}
}

// optionalString registers a string flag whose value is set into *dst, by
// the returned setter, only when the flag was given.
func optionalString(cmd *cobra.Command, dst **string, name, usage string) func() {
	fs := cmd.Flags()
	v := new(string)
	fs.StringVar(v, name, "", usage)
	return func() {
		if fs.Changed(name) {
			*dst = v
		}
	}
}

// RunConfigSet is "fleetctl config set".
func RunConfigSet(ctx context.Context, o *ConfigSetOptions) error {
	groupFlags := o.groupSettings()
	switch {
	case o.Add && o.Group == "":
		return cliutil.Usagef("--group: say which group to add")
	case o.Group == "" && len(groupFlags) > 0:
		return cliutil.Usagef("%s: say which group with --group", strings.Join(groupFlags, ", "))
	case o.Group == "" && o.Mode == nil && o.Timezone == nil && o.RequireReason == nil && o.QuarantineAfter == nil && o.CatchAll == nil:
		return cliutil.Usagef("nothing to set: give --mode, --timezone, --require-reason, --quarantine-after, --catch-all, or --group with the settings to change")
	}
	if err := checkGroupFilter(o.Group); err != nil {
		return err
	}
	if o.ForApp != "" {
		switch {
		case o.Add:
			return cliutil.Usagef("--app: config add-group adds a group to the fleet, for every app; give an app its own settings of it with config set --app %s --group %s", o.ForApp, o.Group)
		case o.Group == "" || o.Mode != nil || o.Timezone != nil || o.RequireReason != nil || o.QuarantineAfter != nil || o.CatchAll != nil:
			return cliutil.Usagef("--app %s changes the app's own settings of one group: give --group and its settings (--mode, --timezone, --require-reason, --quarantine-after and --catch-all are the fleet's); nothing written", o.ForApp)
		case o.DependsOn != nil:
			return cliutil.Usagef("--depends-on is the fleet's: the groups' order is the same for every app; leave out --app; nothing written")
		}
	}
	edit, err := o.parse()
	if err != nil {
		return err
	}
	ctx, f, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := readStateForEdit(ctx, f)
	if err != nil {
		return err
	}
	next := cloneConfig(st.Config.Value)
	if o.Mode != nil {
		next.Mode = rollout.Mode(*o.Mode)
	}
	if o.Timezone != nil {
		next.Timezone = *o.Timezone
	}
	if o.RequireReason != nil {
		next.RequireReason = *o.RequireReason
	}
	if o.QuarantineAfter != nil {
		next.QuarantineAfter = *o.QuarantineAfter
	}
	if o.CatchAll != nil {
		next.CatchAll = *o.CatchAll
	}
	if o.Group != "" {
		i := slices.IndexFunc(next.Groups, func(g rollout.GroupConfig) bool { return g.Name == o.Group })
		switch {
		case o.Add && i >= 0:
			return fmt.Errorf("group %q is already in the config; change it with: fleetctl config set --group %s SETTINGS…\nnothing written", o.Group, o.Group)
		case o.Add:
			// A new group makes next differ from the stored config below.
			next.Groups = append(next.Groups, rollout.DefaultGroup(o.Group))
			i = len(next.Groups) - 1
		case i < 0:
			return unknownGroupError(o.Group, next, st.ConfigDefault)
		}
		if o.ForApp != "" {
			if err := setOverride(&next, o.ForApp, i, edit); err != nil {
				return err
			}
		} else {
			edit(&next.Groups[i])
		}
	}
	if reflect.DeepEqual(next, st.Config.Value) && !st.ConfigDefault {
		if o.Output == "json" {
			return writeJSON(o.Out, configUnchanged("config set", st))
		}
		_, err := fmt.Fprintf(o.Out, "%s unchanged (revision %d): the values given are the current ones; nothing written\n", configKeyName, st.Config.Revision)
		return err
	}
	command := "config set"
	if o.Add {
		command = "config add-group"
	}
	return writeConfig(ctx, o.Global, f, st, next, command, o.Output, false)
}

// unknownGroupError is "config set" of a group that is not in cfg: a typo
// more often than not, so it lists the groups, suggests the closest and says
// how to add one on purpose.
func unknownGroupError(group string, cfg rollout.Config, isDefault bool) error {
	return cliutil.Usagef("%s\nto add a new group: fleetctl config add-group --group %s [SETTINGS…]\nnothing written",
		notInConfig(group, cfg, isDefault), group)
}

// notInConfig says that group is not in cfg, lists the config's groups and
// suggests the closest name: every command given a --group that the config
// lacks says it the same way.
func notInConfig(group string, cfg rollout.Config, isDefault bool) string {
	names := make([]string, len(cfg.Groups))
	for i, g := range cfg.Groups {
		names[i] = g.Name
	}
	var b strings.Builder
	fmt.Fprintf(&b, "--group %q: no such group in the config", group)
	if isDefault {
		b.WriteString(" (none written yet: the default config)")
	}
	fmt.Fprintf(&b, "; its groups are: %s", strings.Join(names, ", "))
	if near, ok := rollout.ClosestGroupName(group, names); ok {
		fmt.Fprintf(&b, "\ndid you mean --group %s?", near)
	}
	return b.String()
}

// inConfig reports whether cfg has group.
func inConfig(group string, cfg rollout.Config) bool {
	return slices.ContainsFunc(cfg.Groups, func(g rollout.GroupConfig) bool { return g.Name == group })
}

// parse checks the given values that need parsing and returns the edit they
// make to a group. Ranges are left to Config.Validate, which names the field.
func (o *ConfigSetOptions) parse() (func(*rollout.GroupConfig), error) {
	var edits []func(*rollout.GroupConfig)
	if o.Days != nil {
		days := splitList(*o.Days)
		edits = append(edits, func(g *rollout.GroupConfig) { g.Days = days })
	}
	ints := []struct {
		v   *int
		dst func(*rollout.GroupConfig) *int
	}{
		{o.StartHour, func(g *rollout.GroupConfig) *int { return &g.StartHour }},
		{o.WaitHours, func(g *rollout.GroupConfig) *int { return &g.WaitHours }},
		{o.JitterSeconds, func(g *rollout.GroupConfig) *int { return &g.JitterSeconds }},
		{o.CanaryCount, func(g *rollout.GroupConfig) *int { return &g.CanaryCount }},
		{o.SmallGroup, func(g *rollout.GroupConfig) *int { return &g.SmallGroup }},
	}
	for _, s := range ints {
		if s.v != nil {
			v, dst := *s.v, s.dst
			edits = append(edits, func(g *rollout.GroupConfig) { *dst(g) = v })
		}
	}
	percents := []struct {
		flag string
		v    *string
		dst  func(*rollout.GroupConfig) *rollout.Percent
	}{
		{"--max-in-flight", o.MaxInFlight, func(g *rollout.GroupConfig) *rollout.Percent { return &g.MaxInFlight }},
		{"--failure-threshold", o.FailureThreshold, func(g *rollout.GroupConfig) *rollout.Percent { return &g.FailureThreshold }},
		{"--infrastructure-hold", o.InfrastructureHold, func(g *rollout.GroupConfig) *rollout.Percent { return &g.InfrastructureHold }},
		{"--vanished-limit", o.VanishedLimit, func(g *rollout.GroupConfig) *rollout.Percent { return &g.VanishedLimit }},
	}
	for _, s := range percents {
		if s.v == nil {
			continue
		}
		p, err := rollout.ParsePercent(*s.v)
		if err != nil {
			return nil, cliutil.Usagef("%s: %v", s.flag, err)
		}
		dst := s.dst
		edits = append(edits, func(g *rollout.GroupConfig) { *dst(g) = p })
	}
	durations := []struct {
		flag string
		v    *string
		dst  func(*rollout.GroupConfig) *rollout.Duration
	}{
		{"--alert-after", o.AlertAfter, func(g *rollout.GroupConfig) *rollout.Duration { return &g.AlertAfter }},
		{"--health-timeout", o.HealthTimeout, func(g *rollout.GroupConfig) *rollout.Duration { return &g.HealthTimeout }},
		{"--min-healthy-time", o.MinHealthyTime, func(g *rollout.GroupConfig) *rollout.Duration { return &g.MinHealthyTime }},
		{"--update-timeout", o.UpdateTimeout, func(g *rollout.GroupConfig) *rollout.Duration { return &g.UpdateTimeout }},
		{"--window-length", o.WindowLength, func(g *rollout.GroupConfig) *rollout.Duration { return &g.WindowLength }},
	}
	for _, s := range durations {
		if s.v == nil {
			continue
		}
		d, err := time.ParseDuration(strings.TrimSpace(*s.v))
		if err != nil {
			return nil, cliutil.Usagef("%s %q: write a duration like 90s, 30m or 4h", s.flag, *s.v)
		}
		dst := s.dst
		edits = append(edits, func(g *rollout.GroupConfig) { *dst(g) = rollout.Duration(d) })
	}
	if o.DependsOn != nil {
		var deps []string // "-": nil, the group listed before
		switch v := strings.TrimSpace(*o.DependsOn); v {
		case "-":
		case "":
			deps = []string{}
		default:
			deps = splitList(v)
			for _, d := range deps {
				if err := rollout.ValidateGroupName(d); err != nil {
					return nil, cliutil.Usagef("--depends-on: %v", err)
				}
			}
		}
		edits = append(edits, func(g *rollout.GroupConfig) { g.DependsOn = deps })
	}
	if o.Approval != nil {
		gates := rollout.ParseApprovalGates(*o.Approval) // unknown stages: Validate names them
		edits = append(edits, func(g *rollout.GroupConfig) { g.Approval = gates })
	}
	if o.AlertOnApprovalWait != nil {
		v := *o.AlertOnApprovalWait
		edits = append(edits, func(g *rollout.GroupConfig) { g.AlertOnApprovalWait = v })
	}
	return func(g *rollout.GroupConfig) {
		for _, e := range edits {
			e(g)
		}
	}, nil
}

func splitList(s string) []string {
	out := []string{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func cloneConfig(c rollout.Config) rollout.Config {
	c.Groups = slices.Clone(c.Groups)
	for i := range c.Groups {
		c.Groups[i].Days = slices.Clone(c.Groups[i].Days)
		c.Groups[i].DependsOn = slices.Clone(c.Groups[i].DependsOn)
		c.Groups[i].Approval = slices.Clone(c.Groups[i].Approval)
	}
	return c
}

// configUnchanged is the WriteResult of a config command that wrote nothing.
func configUnchanged(command string, st *kv.State) WriteResult {
	return WriteResult{Command: command, Bucket: kv.BucketConfig, Key: kv.KeyConfig,
		Revision: st.Config.Revision, PreviousRevision: st.Config.Revision, Value: st.Config.Value}
}

// writeConfig validates next against the stored state and writes it with
// the revision st was read at; command and output say how to report it.
// Every app's change is checked with that app's view of both configs and
// its own statuses (checkAppsConfig); force lets an app with a plan be
// removed.
func writeConfig(ctx context.Context, g *Global, f *kv.Fleet, st *kv.State, next rollout.Config, command, output string, force bool) error {
	if err := validateConfig(next); err != nil {
		return err
	}
	if err := checkAppsConfig(st, next); err != nil {
		return fmt.Errorf("%w\nnothing was written", err)
	}
	if err := checkRemovedApps(st, next, force); err != nil {
		return err
	}
	var before any
	if !st.ConfigDefault {
		before = st.Config.Value
	}
	rev, err := save(ctx, g, f, f.Config, kv.KeyConfig, next, st.Config.Revision, change{Command: command, Before: before})
	if err != nil {
		return err
	}
	prev := st.Config.Value
	changes := describeConfigChange(prev, next)
	// Notes go to stderr with -o json, which keeps stdout one object.
	notes := g.Out
	if output == "json" {
		notes = g.ErrOut
	}
	defer writeAppNotes(notes, st, next)
	if output == "json" {
		return writeJSON(g.Out, WriteResult{Command: command, Written: true, Bucket: kv.BucketConfig, Key: kv.KeyConfig,
			Revision: rev, PreviousRevision: st.Config.Revision, Value: next, Changes: changes})
	}
	if st.ConfigDefault {
		fmt.Fprintf(g.Out, "%s written (revision %d), replacing the built-in default:\n", configKeyName, rev)
	} else {
		fmt.Fprintf(g.Out, "%s written (revision %d, was %d):\n", configKeyName, rev, st.Config.Revision)
	}
	if len(changes) == 0 {
		changes = []string{"no setting changed"}
	}
	for _, c := range changes {
		fmt.Fprintf(g.Out, "  %s\n", c)
	}
	return nil
}

// ConfigApplyOptions are the flags of "fleetctl config apply".
type ConfigApplyOptions struct {
	*Global
	// File is the YAML or JSON config to write; "-" reads In.
	File string
	In   io.Reader
	// Output is text or json (a WriteResult).
	Output string
	// Force removes an app that has a plan (checkRemovedApps).
	Force bool
}

func newConfigApplyCmd(g *Global) *cobra.Command {
	o := &ConfigApplyOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Replace the whole rollout config with a YAML or JSON file",
		Long: `Replace the rollout config with the one in FILE (YAML or JSON, "-" for stdin).
Fields are the JSON fields of docs/rollout.md; omitted fields take their
defaults and unknown fields are an error. The file is validated as a whole and
checked against the groups rolling out before anything is written: for every
app, with that app's overrides and its own group statuses.

apps: lists the fleet's apps, the default app first (docs/cli.md "Apps"). A
fleet without apps names its one app by listing it first: it keeps its plan,
group statuses and hosts as they are. The default app cannot change once
named. Removing an app that has a plan is refused unless --force.`,
		Example: `  fleetctl config apply -f fleet.yaml
  fleetctl config show -o json | jq '.groups[0].start_hour = 4' | fleetctl config apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.File == "" {
				return cliutil.Usagef("--file (-f): say which config file to apply (\"-\" for stdin)")
			}
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			o.In = cmd.InOrStdin()
			return RunConfigApply(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVarP(&o.File, "file", "f", "", `YAML or JSON config file ("-" for stdin)`)
	cmd.Flags().BoolVar(&o.Force, "force", false, "remove an app that has a plan (its keys stay in fleet_plan; see the refusal)")
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunConfigApply is "fleetctl config apply".
func RunConfigApply(ctx context.Context, o *ConfigApplyOptions) error {
	var data []byte
	var err error
	if o.File == "-" {
		data, err = io.ReadAll(io.LimitReader(o.In, 1<<20))
	} else {
		data, err = os.ReadFile(o.File)
	}
	if err != nil {
		return fmt.Errorf("read config file: %w", err)
	}
	next, err := parseConfigFile(data)
	if err != nil {
		return cliutil.Usagef("%s: %v", o.File, err)
	}
	ctx, f, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := readStateForReplace(ctx, o.Global, f)
	if err != nil {
		return err
	}
	if reflect.DeepEqual(next, st.Config.Value) && !st.ConfigDefault {
		if o.Output == "json" {
			return writeJSON(o.Out, configUnchanged("config apply", st))
		}
		_, err := fmt.Fprintf(o.Out, "%s unchanged (revision %d): the file matches the stored config; nothing written\n", configKeyName, st.Config.Revision)
		return err
	}
	return writeConfig(ctx, o.Global, f, st, next, "config apply", o.Output, o.Force)
}

// parseConfigFile decodes a YAML or JSON config with rollout's own decoder:
// the same defaults, and unknown fields rejected.
func parseConfigFile(data []byte) (rollout.Config, error) {
	var c rollout.Config
	j, err := yamlToJSON(data)
	if err != nil {
		return c, err
	}
	var probe any
	if err := json.Unmarshal(j, &probe); err != nil {
		return c, err
	}
	if _, ok := probe.(map[string]any); !ok {
		return c, errors.New("want a config object (mode, timezone, groups)")
	}
	if err := json.Unmarshal(j, &c); err != nil {
		return c, err
	}
	return c, nil
}

// readStateForEdit is ReadState for the commands that change the stored
// config: a config that is not valid cannot be edited, only replaced, and
// the error says how.
func readStateForEdit(ctx context.Context, f *kv.Fleet) (*kv.State, error) {
	st, err := f.ReadState(ctx)
	if err != nil {
		return nil, err
	}
	if bad, ok := st.Problem(kv.BucketConfig, kv.KeyConfig); ok {
		return nil, bad
	}
	return st, nil
}

// readStateForReplace is ReadState for the commands that replace the whole
// config: when the stored config is not valid (someone wrote it by hand with
// a typo, or it is a JetStream response stored by mistake), they are the way
// out, so they go on with its true revision (still compare-and-swap) and an
// empty previous config. The controller does not act on a config that is
// not valid, so no group's schedule is at stake.
func readStateForReplace(ctx context.Context, g *Global, f *kv.Fleet) (*kv.State, error) {
	st, err := f.ReadState(ctx)
	if err != nil {
		return nil, err
	}
	if bad, ok := st.Problem(kv.BucketConfig, kv.KeyConfig); ok {
		fmt.Fprintf(g.ErrOut, "warning: replacing a stored config that cannot be read: %v\n", bad.Err)
		st.Config = kv.Entry[rollout.Config]{Revision: bad.Revision}
	}
	return st, nil
}

// ConfigResetOptions are the flags of "fleetctl config reset".
type ConfigResetOptions struct {
	*Global
	// Output is text or json (a WriteResult).
	Output string
}

func newConfigResetCmd(g *Global) *cobra.Command {
	o := &ConfigResetOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Replace the rollout config with the default (one group, every day)",
		Long: `Replace the rollout config with the default: mode enabled, UTC, one group
"default" with every setting at its default. Refused while a configured group
is rolling out. The previous config stays in the bucket's history
(nats kv history fleet_config config).`,
		Example: `  fleetctl config reset`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			return RunConfigReset(cmd.Context(), o)
		},
	}
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunConfigReset is "fleetctl config reset".
func RunConfigReset(ctx context.Context, o *ConfigResetOptions) error {
	ctx, f, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := readStateForReplace(ctx, o.Global, f)
	if err != nil {
		return err
	}
	next := rollout.DefaultConfig()
	// The apps stay (the default app cannot change); their overrides name
	// groups the default config does not have.
	for _, a := range st.Config.Value.Apps {
		a.Overrides = nil
		next.Apps = append(next.Apps, a)
	}
	if reflect.DeepEqual(next, st.Config.Value) {
		if o.Output == "json" {
			return writeJSON(o.Out, configUnchanged("config reset", st))
		}
		_, err := fmt.Fprintf(o.Out, "%s is already the default; nothing written\n", configKeyName)
		return err
	}
	return writeConfig(ctx, o.Global, f, st, next, "config reset", o.Output, false)
}

// ConfigDeleteGroupOptions are the flags of "fleetctl config delete-group".
type ConfigDeleteGroupOptions struct {
	*Global
	Group string
	// Output is text or json (a WriteResult).
	Output string
}

func newConfigDeleteGroupCmd(g *Global) *cobra.Command {
	o := &ConfigDeleteGroupOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "delete-group --group G",
		Short: "Remove one group from the rollout config",
		Long: `Remove a group from the config, with the apps' own settings of it. Refused
while the group is rolling out for any app, and when another group names it in
depends_on (change that group first). A group
without depends_on that followed the removed one then follows the group
before it.`,
		Example: `  fleetctl config delete-group --group old-dc`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			return RunConfigDeleteGroup(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Group, "group", "", "group to remove")
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunConfigDeleteGroup is "fleetctl config delete-group".
func RunConfigDeleteGroup(ctx context.Context, o *ConfigDeleteGroupOptions) error {
	if err := checkGroupFlag(o.Group); err != nil {
		return err
	}
	ctx, f, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := readStateForEdit(ctx, f)
	if err != nil {
		return err
	}
	next := cloneConfig(st.Config.Value)
	i := slices.IndexFunc(next.Groups, func(g rollout.GroupConfig) bool { return g.Name == o.Group })
	if i < 0 {
		return cliutil.Usagef("%s\nnothing written", notInConfig(o.Group, st.Config.Value, st.ConfigDefault))
	}
	next.Groups = slices.Delete(next.Groups, i, i+1)
	// The apps' own settings of the group go with it.
	next.Apps = slices.Clone(next.Apps)
	for j, a := range next.Apps {
		if _, ok := a.Overrides[o.Group]; ok {
			a.Overrides = maps.Clone(a.Overrides)
			delete(a.Overrides, o.Group)
			if len(a.Overrides) == 0 {
				a.Overrides = nil
			}
			next.Apps[j] = a
		}
	}
	return writeConfig(ctx, o.Global, f, st, next, "config delete-group", o.Output, false)
}

// checkGroupFlag checks a required --group value.
func checkGroupFlag(group string) error {
	if group == "" {
		return cliutil.Usagef("--group: say which group")
	}
	return checkGroupFilter(group)
}

// checkGroupFilter checks an optional --group value; "" means all groups.
func checkGroupFilter(group string) error {
	if group == "" {
		return nil
	}
	if err := rollout.ValidateGroupName(group); err != nil {
		return cliutil.Usagef("--group: %v", err)
	}
	return nil
}
