package fleetctl

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

func newAppsCmd(g *Global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "apps",
		Short: "The fleet's apps: list them, add one, remove one",
		Long: `A fleet keeps one or more apps on their versions (docs/cli.md "Apps"). The
groups, their order and windows are the fleet's; each app has its own plan
(fleetctl plan set --app NAME), group statuses, quarantine and history, and
may override any group setting (config apply, apps: [{name, overrides}]).

The first app is the fleet's default app: its plan keys, heartbeat subjects
and host tree are the ones a fleet had before apps, so naming the app of an
existing fleet (fleetctl apps add NAME --default) moves nothing: no host is
re-enrolled and no rollout restarts. The default app cannot change once named.
These commands edit the config's apps: list (as config apply does).`,
	}
	cmd.AddCommand(newAppsLsCmd(g), newAppsAddCmd(g), newAppsRmCmd(g))
	return cmd
}

// AppsLsOptions are the flags of "fleetctl apps ls".
type AppsLsOptions struct {
	*Global
	Output string
}

// AppReport is one app in "fleetctl apps ls -o json".
type AppReport struct {
	Name string `json:"name"`
	// Default: the fleet's default app (its keys carry no app name).
	Default   bool   `json:"default"`
	Installer string `json:"installer"`
	// HasPlan: the app has a valid plan spec; the versions and mode are
	// its.
	HasPlan       bool   `json:"has_plan"`
	StartVersion  string `json:"start_version,omitempty"`
	TargetVersion string `json:"target_version,omitempty"`
	// Mode is the effective mode: the lower of the config's and the
	// plan's (paused when either is).
	Mode string `json:"mode,omitempty"`
	// Groups is how many groups the config has; GroupsDone how many are
	// done on the target.
	Groups     int `json:"groups"`
	GroupsDone int `json:"groups_done"`
	// Agents counts the app's agents (fresh fleet_stats), OnTarget those
	// that run the target.
	Agents   int `json:"agents"`
	OnTarget int `json:"on_target"`
	// Halted and RolledBack name the groups halted or rolled back on the
	// target.
	Halted     []string `json:"halted,omitempty"`
	RolledBack []string `json:"rolled_back,omitempty"`
	// State is the app in a word: no_plan, paused, disabled, halted,
	// rolled_back, rolling_out, done, not_valid (a stored plan key is not
	// valid: fleetctl status --app says which).
	State string `json:"state"`
}

// AppsReport is the JSON of "fleetctl apps ls -o json".
type AppsReport struct {
	Apps []AppReport `json:"apps"`
}

func newAppsLsCmd(g *Global) *cobra.Command {
	o := &AppsLsOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the apps: installer, versions, mode and progress of each",
		Long: `List the fleet's apps, the default app first: how hosts install it, the plan's
start and target versions, the effective mode, how many groups are done on the
target, how many of its agents run the target, and its state in a word
(no_plan, paused, disabled, halted, rolled_back, rolling_out, done, not_valid).
fleetctl status --app NAME shows one app in full.`,
		Example: `  fleetctl apps ls
  fleetctl apps ls -o json | jq -r '.apps[] | "\(.name) \(.target_version) \(.state)"'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			return RunAppsLs(cmd.Context(), o)
		},
	}
	outputFlag(cmd, &o.Output)
	return cmd
}

// RunAppsLs is "fleetctl apps ls".
func RunAppsLs(ctx context.Context, o *AppsLsOptions) error {
	ctx, f, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := f.ReadState(ctx)
	if err != nil {
		return err
	}
	if bad, ok := st.Problem(kv.BucketConfig, kv.KeyConfig); ok {
		return bad // names the fix
	}
	entries, _, err := f.ReadValidStats(ctx)
	if err != nil {
		return err
	}
	rep := AppsReport{Apps: []AppReport{}}
	cfg := st.Config.Value
	for _, a := range cfg.AppList() {
		ns, err := kv.NS(cfg, a.Name)
		if err != nil {
			return err
		}
		v, err := st.AppView(ns)
		if err != nil {
			return err
		}
		rep.Apps = append(rep.Apps, appReport(a, ns, v, kv.StatsOf(entries, ns), o.Now))
	}
	if o.Output == "json" {
		return writeJSON(o.Out, rep)
	}
	tw := newTable(o.Out)
	fmt.Fprintln(tw, "APP\tINSTALLER\tSTART\tTARGET\tMODE\tGROUPS DONE\tON TARGET\tSTATE")
	for _, a := range rep.Apps {
		name := a.Name
		if a.Default && len(rep.Apps) > 1 {
			name += " (default)"
		}
		start, target, mode := a.StartVersion, a.TargetVersion, a.Mode
		if !a.HasPlan {
			start, target, mode = "-", "-", "-"
		}
		state := strings.ReplaceAll(a.State, "_", " ")
		if len(a.Halted) > 0 {
			state += ": " + strings.Join(a.Halted, ",")
		} else if len(a.RolledBack) > 0 {
			state += ": " + strings.Join(a.RolledBack, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%d/%d\t%s\n", cell(name, 42), a.Installer, cell(start, 24), cell(target, 24),
			mode, a.GroupsDone, a.Groups, a.OnTarget, a.Agents, cell(state, 40))
	}
	return tw.Flush()
}

// appReport sums up one app from its view of the state and its stats.
func appReport(a rollout.AppConfig, ns kv.AppNS, v *kv.State, stats []kv.Stats, now func() time.Time) AppReport {
	r := AppReport{Name: a.Name, Default: ns.IsDefault(), Installer: a.EffectiveInstaller(), Groups: len(v.Config.Value.Groups), State: "no_plan"}
	for _, gs := range kv.MergeStats(stats, now()) {
		r.Agents += gs.Agents
		if v.HasSpec {
			r.OnTarget += gs.Versions[v.Spec.Value.TargetVersion].Count
		}
	}
	bad := slices.ContainsFunc(v.Problems, func(p kv.Problem) bool { return p.Bucket == kv.BucketPlan })
	if !v.HasSpec {
		if bad {
			r.State = "not_valid"
		}
		return r
	}
	s := v.Spec.Value
	r.HasPlan, r.StartVersion, r.TargetVersion = true, s.StartVersion, s.TargetVersion
	mode := rollout.EffectiveMode(v.Config.Value.Mode, s.Mode)
	r.Mode = string(view.OrEnabled(mode))
	for _, g := range v.Config.Value.Groups {
		e, ok := v.Groups[g.Name]
		if !ok || e.Value.TargetVersion != s.TargetVersion {
			continue
		}
		switch {
		case e.Value.Halted:
			r.Halted = append(r.Halted, g.Name)
		case e.Value.State == rollout.StateRolledBack:
			r.RolledBack = append(r.RolledBack, g.Name)
		case e.Value.State == rollout.StateDone:
			r.GroupsDone++
		}
	}
	switch {
	case bad:
		r.State = "not_valid"
	case len(r.Halted) > 0:
		r.State = "halted"
	case len(r.RolledBack) > 0:
		r.State = "rolled_back"
	case r.Groups > 0 && r.GroupsDone == r.Groups:
		r.State = "done"
	case mode == rollout.ModePaused:
		r.State = "paused"
	case mode == rollout.ModeDisabled:
		r.State = "disabled"
	default:
		r.State = "rolling_out"
	}
	return r
}

// AppsAddOptions are the flags of "fleetctl apps add".
type AppsAddOptions struct {
	*Global
	Name      string
	Installer string
	// Default names the fleet's one, so far unnamed, app: the config
	// gets its first app, which keeps every key and host as they are.
	Default bool
	Output  string
}

func newAppsAddCmd(g *Global) *cobra.Command {
	o := &AppsAddOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "add NAME [--installer tarball|script] [--default]",
		Short: "Add an app to the config, or name the fleet's existing app (--default)",
		Long: `Add an app at the end of the config's apps. Its hosts run agentd with the app
enabled (agentd enable --app NAME …) and credentials that allow it (fleetctl
auth agent --apps); its plan is set with fleetctl plan set --app NAME.

--default names the app a fleet without apps already runs: the config gets its
first app, the fleet's default app, which keeps the plan, every group status,
the quarantine, the hosts' heartbeats and their credentials exactly as they
are (nothing moves, no rollout restarts). Do this first when a single-app
fleet takes a second app: a fleet without apps refuses apps add without
--default, since its existing app would otherwise be named "default" for good
(the default app cannot change once named). "apps add default --default" keeps
that name on purpose.

NAME: a lower-case letter, then up to 31 lower-case letters, digits or '-';
at most 16 apps.`,
		Example: `  fleetctl apps add web --default          # name the existing app: nothing moves
  fleetctl apps add db --installer script
  fleetctl apps add db --installer script -o json | jq .revision`,
		Args: appNameArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			o.Name = args[0]
			return RunAppsAdd(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Installer, "installer", rollout.InstallerTarball, "how hosts install the app: tarball or script")
	cmd.Flags().BoolVar(&o.Default, "default", false, "name the fleet's existing app (a config without apps): it keeps its plan, statuses and hosts")
	writeOutputFlag(cmd, &o.Output)
	_ = cmd.RegisterFlagCompletionFunc("installer", cobra.FixedCompletions(rollout.Installers, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// appNameArg wants exactly the NAME argument.
func appNameArg(cmd *cobra.Command, args []string) error {
	if len(args) == 1 {
		return nil
	}
	what := strings.TrimPrefix(cmd.CommandPath(), "fleetctl ")
	if len(args) == 0 {
		return cliutil.Usagef("%s: give the app's NAME", what)
	}
	return cliutil.Usagef("%s: one NAME only, got %d arguments", what, len(args))
}

// RunAppsAdd is "fleetctl apps add".
func RunAppsAdd(ctx context.Context, o *AppsAddOptions) error {
	if err := rollout.ValidateAppName(o.Name); err != nil {
		return cliutil.Usagef("apps add: %v; nothing written", err)
	}
	if !slices.Contains(rollout.Installers, o.Installer) {
		return cliutil.Usagef("--installer %q: want %s; nothing written", o.Installer, strings.Join(rollout.Installers, " or "))
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
	next.Apps = slices.Clone(next.Apps)
	app := rollout.AppConfig{Name: o.Name, Installer: o.Installer}
	switch _, exists := st.Config.Value.App(o.Name); {
	case o.Default && len(next.Apps) > 0:
		return fmt.Errorf("apps add %s --default: the fleet's default app is already named %q, and cannot change (it owns the unprefixed plan keys and its hosts' heartbeats); nothing written",
			o.Name, next.DefaultApp())
	case o.Default:
		next.Apps = []rollout.AppConfig{app}
	case len(next.Apps) == 0:
		return cliutil.Usagef("apps add %s: this fleet's existing app has no name yet: name it first, keeping its plan, statuses and hosts as they are: "+
			"fleetctl apps add NAME --default (e.g. web; \"default\" keeps the name it has), then fleetctl apps add %s; nothing written", o.Name, o.Name)
	case exists:
		return fmt.Errorf("apps add %s: app %q is already in the config; nothing written", o.Name, o.Name)
	default:
		next.Apps = append(next.Apps, app)
	}
	return writeConfig(ctx, o.Global, f, st, next, "apps add", o.Output, false)
}

// AppsRmOptions are the flags of "fleetctl apps rm".
type AppsRmOptions struct {
	*Global
	Name   string
	Force  bool
	Output string
}

func newAppsRmCmd(g *Global) *cobra.Command {
	o := &AppsRmOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "rm NAME [--force]",
		Short: "Remove an app from the config",
		Long: `Remove an app from the config's apps. The default app cannot be removed. An app
that has a plan is refused unless --force: the controller then stops moving its
groups and counting its hosts, its keys stay in fleet_plan (adding the app
again carries on from them), and its hosts keep the version they run. Pause it
first (fleetctl pause --app NAME) and take it off its hosts (agentd disable
--app NAME).`,
		Example: `  fleetctl apps rm db
  fleetctl apps rm db --force --reason "db moved to its own fleet"`,
		Args: appNameArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			o.Name = args[0]
			return RunAppsRm(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.Force, "force", false, "remove an app that has a plan")
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunAppsRm is "fleetctl apps rm".
func RunAppsRm(ctx context.Context, o *AppsRmOptions) error {
	if err := rollout.ValidateAppName(o.Name); err != nil {
		return cliutil.Usagef("apps rm: %v; nothing written", err)
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
	cfg := st.Config.Value
	i := slices.IndexFunc(cfg.Apps, func(a rollout.AppConfig) bool { return a.Name == o.Name })
	switch {
	case i < 0:
		return cliutil.Usagef("apps rm %s: no such app; the apps are: %s; nothing written", o.Name, strings.Join(cfg.AppNames(), ", "))
	case i == 0:
		return fmt.Errorf("apps rm %s: %q is the fleet's default app, which cannot be removed (it owns the unprefixed plan keys and its hosts' heartbeats); nothing written",
			o.Name, o.Name)
	}
	next := cloneConfig(cfg)
	next.Apps = slices.Delete(slices.Clone(cfg.Apps), i, i+1)
	return writeConfig(ctx, o.Global, f, st, next, "apps rm", o.Output, o.Force)
}
