package fleetctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Apps (DESIGN §9, docs/cli.md "Apps"). Every command that reads or writes a
// plan or a status does it for one app, named by --app: the only app when
// the config has one, otherwise --app is required and its absence is a
// usage error naming the apps. The commands resolve the app once, into an
// appFleet, and read through it: its ReadSpec, ReadGroupStatus,
// ReadQuarantine, ReadState (kv.State.AppView), ReadValidStats
// (kv.StatsOf) and LastHeartbeats are the app's, in the shape the code had
// before apps, so the single-app code paths run unchanged for every app.
// The default app's keys are today's unprefixed ones (kv.AppNS).

// appFlag registers --app on cmd, bound to the Global's App.
func appFlag(cmd *cobra.Command, g *Global) {
	cmd.Flags().StringVar(&g.App, "app", cliutil.Env("", "FLEETCTL_APP"),
		"the app (fleetctl apps ls; env FLEETCTL_APP); default: the only app, required when the config has several")
}

// appFleet is the fleet as one app sees it. It embeds the fleet, so the
// buckets and everything app-neutral are the fleet's; the reads named
// below are the app's.
type appFleet struct {
	*kv.Fleet
	NS kv.AppNS
	// Multi: the config has more than one app, so output names the app.
	Multi bool
	// cfg is the config the app was resolved in (zero when not valid).
	cfg rollout.Config
}

// resolveApp resolves g.App against the stored config: "" is the only app,
// and a usage error naming the apps when there are several; a name the
// config lacks is a usage error naming the apps. A config that is not valid
// names no apps: without --app the default app's (unprefixed) keys are
// used, as before apps, so that the commands that repair a fleet still
// work; with --app it is an error.
func (g *Global) resolveApp(ctx context.Context, f *kv.Fleet) (appFleet, error) {
	cfg, _, err := f.ReadConfig(ctx)
	var bad *kv.Problem
	switch {
	case errors.As(err, &bad):
		if g.App != "" && g.App != rollout.DefaultAppName {
			return appFleet{}, fmt.Errorf("--app %s: the stored config is not valid, so its apps are not known (%v)", g.App, bad.Err)
		}
		a := appFleet{Fleet: f, NS: kv.DefaultNS(rollout.Config{})}
		g.appName = a.NS.Name
		return a, nil
	case err != nil:
		return appFleet{}, err
	}
	ns, err := resolveNS(cfg.Value, g.App)
	if err != nil {
		return appFleet{}, err
	}
	g.appName = ns.Name
	return appFleet{Fleet: f, NS: ns, Multi: len(cfg.Value.AppList()) > 1, cfg: cfg.Value}, nil
}

// resolveNS is the namespace of app in cfg ("": the only app).
func resolveNS(cfg rollout.Config, app string) (kv.AppNS, error) {
	names := cfg.AppNames()
	if app == "" {
		if len(names) > 1 {
			return kv.AppNS{}, cliutil.Usagef("this fleet has %d apps (%s): say which with --app NAME (or FLEETCTL_APP); nothing done",
				len(names), strings.Join(names, ", "))
		}
		return kv.DefaultNS(cfg), nil
	}
	if err := rollout.ValidateAppName(app); err != nil {
		return kv.AppNS{}, cliutil.Usagef("--app: %v", err)
	}
	ns, err := kv.NS(cfg, app)
	if err != nil {
		return kv.AppNS{}, cliutil.Usagef("--app %q: not in the config; the apps are: %s (add one: fleetctl apps add NAME); nothing done",
			app, strings.Join(names, ", "))
	}
	return ns, nil
}

// appSession is session, then resolveApp.
func (g *Global) appSession(ctx context.Context) (context.Context, appFleet, func(), error) {
	ctx, f, done, err := g.session(ctx)
	if err != nil {
		return nil, appFleet{}, nil, err
	}
	a, err := g.resolveApp(ctx, f)
	if err != nil {
		done()
		return nil, appFleet{}, nil, err
	}
	return ctx, a, done, nil
}

// ReadSpec reads the app's plan spec with its true revision (kv.GetLast).
// No spec is kv.ErrNotFound; a bad value is a *kv.Problem.
func (a appFleet) ReadSpec(ctx context.Context) (kv.Entry[rollout.Spec], error) {
	return kv.GetLast(ctx, a.JS.Conn(), kv.BucketPlan, a.NS.Spec(), kv.DecodeSpec)
}

// ReadGroupStatus reads the app's status of group (kv.GetLast).
func (a appFleet) ReadGroupStatus(ctx context.Context, group string) (kv.Entry[rollout.GroupStatus], error) {
	key := a.NS.Group(group)
	return kv.GetLast(ctx, a.JS.Conn(), kv.BucketPlan, key, func(data []byte) (rollout.GroupStatus, error) {
		return kv.DecodeGroupStatus(key, data)
	})
}

// ReadQuarantine reads the app's quarantine list; none written is an empty
// list at revision 0.
func (a appFleet) ReadQuarantine(ctx context.Context) (kv.Entry[rollout.QuarantineList], error) {
	e, err := kv.GetLast(ctx, a.JS.Conn(), kv.BucketPlan, a.NS.Quarantine(), kv.DecodeQuarantine)
	if errors.Is(err, kv.ErrNotFound) {
		return kv.Entry[rollout.QuarantineList]{Value: rollout.QuarantineList{V: rollout.SchemaVersion}}, nil
	}
	return e, err
}

// ReadState is the app's view of the state (kv.State.AppView): config with
// the app's overrides, the app's spec, statuses and quarantine, problems of
// its plan keys under their unprefixed names (keyOf gives the stored key).
func (a appFleet) ReadState(ctx context.Context) (*kv.State, error) {
	st, err := a.Fleet.ReadState(ctx)
	if err != nil {
		return nil, err
	}
	return st.AppView(a.NS)
}

// ReadValidStats are the app's fleet_stats entries (kv.StatsOf).
func (a appFleet) ReadValidStats(ctx context.Context) ([]kv.Stats, []kv.Problem, error) {
	entries, skipped, err := a.Fleet.ReadValidStats(ctx)
	if err != nil {
		return nil, nil, err
	}
	return kv.StatsOf(entries, a.NS), skipped, nil
}

// LastHeartbeats are the last heartbeats of the app's agents in group (all
// groups: ""), straight from the stream (as kv.Fleet.LastHeartbeats).
func (a appFleet) LastHeartbeats(ctx context.Context, group string) ([]kv.StoredHeartbeat, error) {
	var out []kv.StoredHeartbeat
	_, err := kv.ScanFrom(ctx, a.JS.Conn(), kv.StreamHB, a.NS.HBFilter(group), 1, func(m kv.StoredMsg) error {
		out = append(out, kv.StoredHeartbeatOf(m))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", kv.StreamHB, err)
	}
	return out, nil
}

// PublishEvent publishes ev as the app's (Event.App is the app's name).
func (a appFleet) PublishEvent(ev rollout.Event) error {
	ev.App = a.NS.Name
	return a.Fleet.PublishEvent(ev)
}

// keyOf is the stored fleet_plan key of an unprefixed plan key of the app
// (kv.State.AppView names the app's problems so).
func (a appFleet) keyOf(key string) string {
	switch pk := kv.ParsePlanKey(key); pk.Kind {
	case kv.KeySpec:
		return a.NS.Spec()
	case kv.KeyQuarantine:
		return a.NS.Quarantine()
	case kv.KindGroup:
		return a.NS.Group(pk.Group)
	}
	return key
}

// where is bucket/key of the app's key k, for messages.
func (a appFleet) where(key string) string { return kv.BucketPlan + "/" + key }

// specName is bucket/key of the app's plan spec, for messages.
func (a appFleet) specName() string { return a.where(a.NS.Spec()) }

// appNote is " (app NAME)" when the config has several apps, for messages
// that should say which app they are about; "" otherwise.
func (a appFleet) appNote() string {
	if !a.Multi {
		return ""
	}
	return " (app " + a.NS.Name + ")"
}

// appArg is " --app NAME" for the commands a message suggests, when the
// config has several apps.
func (a appFleet) appArg() string {
	if !a.Multi {
		return ""
	}
	return " --app " + a.NS.Name
}

// eventOfApp reports whether ev is app ns's. Events before apps carry no
// app and are the default app's; so are those a fleet without apps
// published as "default" before it named its app.
func eventOfApp(ev *rollout.Event, ns kv.AppNS, cfg rollout.Config) bool {
	switch {
	case ev.App == ns.Name:
		return true
	case !ns.IsDefault():
		return false
	case ev.App == "":
		return true
	}
	_, named := cfg.App(ev.App)
	return ev.App == rollout.DefaultAppName && !named
}

// auditOfApp reports whether r is about app ns: its app, or (records before
// apps) a plan key of the default app's. A fleet-wide record (the config)
// is about every app.
func auditOfApp(r *kv.AuditRecord, ns kv.AppNS, cfg rollout.Config) bool {
	if r.Bucket != kv.BucketPlan {
		return true
	}
	if r.App != "" {
		if r.App == ns.Name {
			return true
		}
		_, named := cfg.App(r.App)
		return ns.IsDefault() && r.App == rollout.DefaultAppName && !named
	}
	return kv.ParsePlanKey(r.Key).App == ns.Key()
}

// noPlan is errNoPlan for the app: it names the app when there are several.
func (a appFleet) noPlan() error {
	if !a.Multi {
		return errNoPlan
	}
	return fmt.Errorf("no plan for app %s: nothing is being rolled out (create one with: fleetctl plan set --app %s --start VERSION --target VERSION)",
		a.NS.Name, a.NS.Name)
}

// openApp is open, then resolveApp (the app is resolved once: a command
// that runs until interrupted keeps it).
func (g *Global) openApp(ctx context.Context) (appFleet, func(), error) {
	f, closeFn, err := g.open(ctx)
	if err != nil {
		return appFleet{}, nil, err
	}
	rctx, cancel := g.withTimeout(ctx)
	defer cancel()
	a, err := g.resolveApp(rctx, f)
	if err != nil {
		closeFn()
		return appFleet{}, nil, err
	}
	return a, closeFn, nil
}

// mine reports whether the event message data is the app's: one the
// filter cannot decode is shown (the printers say what is wrong with it).
func (a appFleet) mine(data []byte) bool {
	var ev rollout.Event
	if json.Unmarshal(data, &ev) != nil {
		return true
	}
	return eventOfApp(&ev, a.NS, a.cfg)
}
