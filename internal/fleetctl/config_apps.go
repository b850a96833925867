package fleetctl

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// checkAppsConfig checks a config change for the whole fleet and for every
// app: rollout.CheckConfigChange of the configs as a whole (validity, and
// the default app staying the same once named), then, for each app of
// next, of prev.ForApp and next.ForApp (its overrides applied) against that
// app's own group statuses. A group whose stored status is not valid counts
// as active: nobody knows where it stands.
func checkAppsConfig(st *kv.State, next rollout.Config) error {
	prev := st.Config.Value
	if err := rollout.CheckConfigChange(prev, next, nil); err != nil {
		return err
	}
	multi := len(prev.AppList()) > 1 || len(next.AppList()) > 1
	var errs []error
	for _, name := range next.AppNames() {
		ns, err := kv.NS(next, name)
		if err != nil {
			return err
		}
		na, err := next.ForApp(name)
		if err != nil {
			return err
		}
		// The app as prev saw it: the default app is the default app
		// (a fleet without apps naming its one), a new app the fleet's
		// groups as they were (statuses it may have from before it was
		// removed are protected against them).
		pa := prev
		switch _, had := prev.App(name); {
		case next.IsDefaultApp(name):
			pa, err = prev.ForApp("")
		case had:
			pa, err = prev.ForApp(name)
		}
		if err != nil {
			pa = prev
		}
		// The apps were checked above; here only the groups.
		pa.Apps, na.Apps = nil, nil
		statuses := st.ForApp(ns).Plan().Groups
		var unreadable []string
		for _, p := range st.Problems {
			pk := kv.ParsePlanKey(p.Key)
			if p.Bucket != kv.BucketPlan || pk.Kind != kv.KindGroup || pk.App != ns.Key() {
				continue
			}
			statuses[pk.Group] = rollout.GroupStatus{V: rollout.SchemaVersion, Group: pk.Group, State: rollout.StateActive}
			unreadable = append(unreadable, pk.Group)
		}
		err = rollout.CheckConfigChange(pa, na, statuses)
		if err == nil {
			continue
		}
		if len(unreadable) > 0 {
			appArg := ""
			if multi {
				appArg = " --app " + name
			}
			err = fmt.Errorf("%w\n(a group whose stored status is not valid counts as active: %s; fleetctl reset%s --group G replaces it)",
				err, strings.Join(unreadable, ", "), appArg)
		}
		if multi {
			err = prefixErrors("app "+name+": ", err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// prefixErrors puts prefix before each of err's joined errors.
func prefixErrors(prefix string, err error) error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return fmt.Errorf("%s%w", prefix, err)
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, prefixErrors(prefix, e))
	}
	return errors.Join(out...)
}

// appPlan says what app name has in fleet_plan: "" when nothing.
func appPlan(st *kv.State, name string) string {
	a, ok := st.Apps[name]
	if !ok {
		return ""
	}
	var parts []string
	if a.HasSpec {
		parts = append(parts, fmt.Sprintf("a plan %s → %s", a.Spec.Value.StartVersion, a.Spec.Value.TargetVersion))
	}
	var rolling []string
	for _, g := range slices.Sorted(maps.Keys(a.Groups)) {
		if s := a.Groups[g].Value.State; s.InProgress() {
			rolling = append(rolling, fmt.Sprintf("%s %s", g, s))
		}
	}
	if len(rolling) > 0 {
		parts = append(parts, "groups rolling out: "+strings.Join(rolling, ", "))
	}
	if len(parts) == 0 && len(a.Groups) > 0 {
		parts = append(parts, fmt.Sprintf("%d group statuses", len(a.Groups)))
	}
	return strings.Join(parts, "; ")
}

// checkRemovedApps refuses, unless force, to remove an app that has a plan:
// the controller stops moving its groups, its hosts stay on what they run.
// (The default app cannot be removed at all: rollout.CheckConfigChange.)
func checkRemovedApps(st *kv.State, next rollout.Config, force bool) error {
	if force {
		return nil
	}
	var errs []error
	for _, a := range st.Config.Value.Apps {
		if _, ok := next.App(a.Name); ok {
			continue
		}
		has := appPlan(st, a.Name)
		if has == "" {
			continue
		}
		errs = append(errs, fmt.Errorf("app %q has %s. Removing it from the config stops its rollout where it is: "+
			"the controller no longer moves its groups or counts its hosts; its keys (fleet_plan %s, %s, %s) stay as they are, "+
			"and listing the app again carries on from them; its hosts keep the version they run, and those in a group that was rolling out "+
			"may still install the target its status allows. Pause it first (fleetctl pause --app %s), and run agentd disable --app %s on its hosts "+
			"to take it off them. To remove it anyway: --force",
			a.Name, has, kv.OtherNS(a.Name).Spec(), kv.OtherNS(a.Name).Group("<group>"), kv.OtherNS(a.Name).Quarantine(), a.Name, a.Name))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w\nnothing was written", errors.Join(errs...))
	}
	return nil
}

// writeAppNotes says, after a config write, what naming the fleet's app
// did: nothing moved.
func writeAppNotes(w io.Writer, st *kv.State, next rollout.Config) {
	prev := st.Config.Value
	if len(prev.Apps) > 0 || len(next.Apps) == 0 {
		return
	}
	name := next.DefaultApp()
	plan := "it has no plan yet"
	if st.HasSpec {
		plan = fmt.Sprintf("its plan (%s → %s) and its %d group statuses carry on", st.Spec.Value.StartVersion, st.Spec.Value.TargetVersion, len(st.Groups))
	}
	fmt.Fprintf(w, "The fleet's app is now named %q (the first of apps, its default app): it keeps the keys spec, group.<group> and quarantine, "+
		"its hosts' heartbeats and credentials as they are, and no group restarts; %s. It cannot be renamed: the default app is fixed once named.\n",
		name, plan)
}

// describeApps lists the apps next adds, removes and changes in prev.
func describeApps(prev, next rollout.Config) []string {
	var out []string
	if len(prev.Apps) == 0 && len(next.Apps) > 0 {
		out = append(out, fmt.Sprintf("the fleet's app named %q (default app)", next.DefaultApp()))
	}
	for _, a := range prev.Apps {
		if _, ok := next.App(a.Name); !ok {
			out = append(out, fmt.Sprintf("app %q removed", a.Name))
		}
	}
	for i, a := range next.Apps {
		old, ok := prev.App(a.Name)
		if !ok || (len(prev.Apps) == 0 && i == 0) {
			if i > 0 {
				out = append(out, fmt.Sprintf("app %q added (installer %s)", a.Name, a.EffectiveInstaller()))
			}
			for _, g := range slices.Sorted(maps.Keys(a.Overrides)) {
				out = append(out, fmt.Sprintf("app %q: group %q overrides %s", a.Name, g, string(a.Overrides[g])))
			}
			continue
		}
		if old.EffectiveInstaller() != a.EffectiveInstaller() {
			out = append(out, fmt.Sprintf("app %q: installer %s → %s", a.Name, old.EffectiveInstaller(), a.EffectiveInstaller()))
		}
		for _, g := range slices.Sorted(maps.Keys(old.Overrides)) {
			if _, ok := a.Overrides[g]; !ok {
				out = append(out, fmt.Sprintf("app %q: overrides of group %q removed", a.Name, g))
			}
		}
		for _, g := range slices.Sorted(maps.Keys(a.Overrides)) {
			if o, ok := old.Overrides[g]; !ok || len(kv.JSONDiff(o, a.Overrides[g])) > 0 {
				out = append(out, fmt.Sprintf("app %q: group %q overrides %s", a.Name, g, string(a.Overrides[g])))
			}
		}
	}
	return out
}
