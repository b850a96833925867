package rollout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
)

// Apps (DESIGN §9). A fleet keeps one or more apps on their versions; the
// groups, their order and their windows are the fleet's, and each app has its
// own plan, group statuses, quarantine and history, and may override any
// group setting for itself (AppConfig.Overrides).
//
// The first app of Config.Apps is the fleet's default app: its plan keys,
// heartbeat subjects, stats keys and host tree carry no app name, exactly as
// a fleet had them before apps existed (pkg/kv.AppNS). That is what lets a
// single-app fleet take a second app without a key moving and without any
// host's credentials changing: those name the subjects they may use. A config
// without apps has one default app, DefaultAppName, installed by tarball.

// DefaultAppName names the default app of a config that lists no apps.
const DefaultAppName = "default"

// MaxApps bounds Config.Apps: every app is a label value of the controller's
// metrics and a plan the controller reconciles each pass.
const MaxApps = 16

// Installers an app may name (AppConfig.Installer).
const (
	// InstallerTarball downloads, verifies and extracts a release tarball
	// and switches a link to it (pkg/install).
	InstallerTarball = "tarball"
	// InstallerScript runs the host's own install command with the
	// target version (RFD 90's local-script): apt, yum, anything.
	InstallerScript = "script"
)

// Installers are the values AppConfig.Installer may have besides "".
var Installers = []string{InstallerTarball, InstallerScript}

// ErrBadApp marks an app name that is not valid.
var ErrBadApp = errors.New("invalid app name")

var appNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// reservedAppNames would make an app's plan keys read as another key of
// fleet_plan: app "group"'s "group.spec" is the default app's status of a
// group named "spec".
var reservedAppNames = []string{"group"}

// ValidateAppName checks an app name: [a-z][a-z0-9-]{0,31}, not reserved.
func ValidateAppName(name string) error {
	if !appNameRE.MatchString(name) {
		return fmt.Errorf("%w %q: want a lower-case letter, then up to 31 lower-case letters, digits or '-'", ErrBadApp, truncate(name, 70))
	}
	if slices.Contains(reservedAppNames, name) {
		return fmt.Errorf("%w %q: reserved (its keys would read as another key of fleet_plan)", ErrBadApp, name)
	}
	return nil
}

// AppConfig is one app of the fleet.
type AppConfig struct {
	Name string `json:"name"`
	// Installer is how hosts install the app: InstallerTarball (also "")
	// or InstallerScript. The hosts' own agentd config says how exactly;
	// the controller shows it and a host that reports another installer
	// for the app is shown with it.
	Installer string `json:"installer,omitempty"`
	// Overrides are this app's own group settings: group name → an object
	// of GroupConfig fields (not name or depends_on: the order is the
	// fleet's) that replace the fleet's for this app.
	Overrides map[string]json.RawMessage `json:"overrides,omitempty"`
}

// EffectiveInstaller is Installer, InstallerTarball when empty.
func (a AppConfig) EffectiveInstaller() string {
	if a.Installer == "" {
		return InstallerTarball
	}
	return a.Installer
}

// AppList is the config's apps as the fleet has them: Apps, or the one
// implicit default app when it lists none.
func (c Config) AppList() []AppConfig {
	if len(c.Apps) == 0 {
		return []AppConfig{{Name: DefaultAppName, Installer: InstallerTarball}}
	}
	return c.Apps
}

// AppNames are the apps' names, the default app first.
func (c Config) AppNames() []string {
	apps := c.AppList()
	out := make([]string, len(apps))
	for i, a := range apps {
		out[i] = a.Name
	}
	return out
}

// DefaultApp is the name of the fleet's default app: the first of Apps, or
// DefaultAppName.
func (c Config) DefaultApp() string { return c.AppList()[0].Name }

// IsDefaultApp reports whether name is the default app, or "" (which names
// it too: a heartbeat, a find request or a key without an app).
func (c Config) IsDefaultApp(name string) bool { return name == "" || name == c.DefaultApp() }

// App returns the named app ("" is the default app).
func (c Config) App(name string) (AppConfig, bool) {
	if name == "" {
		return c.AppList()[0], true
	}
	for _, a := range c.AppList() {
		if a.Name == name {
			return a, true
		}
	}
	return AppConfig{}, false
}

// ForApp is the config as the named app sees it: the fleet's, with the app's
// overrides applied to its groups, and Apps left as they are. An unknown
// app, or overrides that do not apply (Validate says why), is an error.
func (c Config) ForApp(name string) (Config, error) {
	app, ok := c.App(name)
	if !ok {
		return Config{}, fmt.Errorf("%w: app %q is not in the config (apps: %v)", ErrBadConfig, name, c.AppNames())
	}
	if len(app.Overrides) == 0 {
		return c, nil
	}
	out := c
	out.Groups = slices.Clone(c.Groups)
	for i, g := range out.Groups {
		raw, ok := app.Overrides[g.Name]
		if !ok {
			continue
		}
		merged, err := overrideGroup(g, raw)
		if err != nil {
			return Config{}, fmt.Errorf("%w: app %q: overrides of group %q: %v", ErrBadConfig, app.Name, g.Name, err)
		}
		out.Groups[i] = merged
	}
	return out, nil
}

// notOverridable are the group fields that are the fleet's alone.
var notOverridable = []string{"name", "depends_on"}

// overrideGroup lays the fields of raw over g.
func overrideGroup(g GroupConfig, raw json.RawMessage) (GroupConfig, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return GroupConfig{}, errors.New("want an object of group settings")
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if slices.Contains(notOverridable, k) {
			return GroupConfig{}, fmt.Errorf("%s is the fleet's: an app may not change it", k)
		}
	}
	base, err := json.Marshal(g)
	if err != nil {
		return GroupConfig{}, err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(base, &all); err != nil {
		return GroupConfig{}, err
	}
	maps.Copy(all, fields)
	merged, err := json.Marshal(all)
	if err != nil {
		return GroupConfig{}, err
	}
	var out GroupConfig
	if err := json.Unmarshal(merged, &out); err != nil {
		return GroupConfig{}, err
	}
	return out, nil
}

// validateApps checks Apps: names valid and unique, installers known, at
// most MaxApps, and every override naming a configured group and giving a
// valid group.
func (c Config) validateApps() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Apps) > MaxApps {
		bad("apps: %d apps, at most %d", len(c.Apps), MaxApps)
	}
	seen := map[string]bool{}
	for i, a := range c.Apps {
		label := fmt.Sprintf("app #%d", i+1)
		if err := ValidateAppName(a.Name); err != nil {
			bad("%s: %v", label, err)
		} else {
			label = fmt.Sprintf("app %q", a.Name)
			if seen[a.Name] {
				bad("%s: listed twice; app names must be unique", label)
			}
			seen[a.Name] = true
		}
		if a.Installer != "" && !slices.Contains(Installers, a.Installer) {
			bad("%s: installer %q: want one of %v", label, truncate(a.Installer, 70), Installers)
		}
		for _, g := range slices.Sorted(maps.Keys(a.Overrides)) {
			base, ok := c.Group(g)
			if !ok {
				bad("%s: overrides group %q, which the config does not have", label, truncate(g, 70))
				continue
			}
			merged, err := overrideGroup(base, a.Overrides[g])
			if err != nil {
				bad("%s: overrides of group %q: %v", label, g, err)
				continue
			}
			for _, err := range merged.validate() {
				bad("%s: overrides of group %q: %v", label, g, err)
			}
		}
	}
	return errs
}

// checkAppsChange refuses a change of the default app once the config named
// one: the default app owns the plan keys without an app name, so another
// app first would take over its plan and its hosts. Naming the implicit
// default app (a config without apps getting its first) is allowed.
func checkAppsChange(prev, next Config) error {
	if len(prev.Apps) == 0 {
		return nil
	}
	if p, n := prev.DefaultApp(), next.DefaultApp(); p != n {
		return fmt.Errorf("%w: the default app (the first of apps) is %q and cannot become %q: it owns the fleet's unprefixed plan keys and its hosts' heartbeats; keep %q first", ErrConfigChange, p, n, p)
	}
	return nil
}

// UnmarshalJSON decodes an app, rejecting unknown fields.
func (a *AppConfig) UnmarshalJSON(b []byte) error {
	var d AppConfig
	if err := decodeObject(b, map[string]any{
		"name":      &d.Name,
		"installer": &d.Installer,
		"overrides": &d.Overrides,
	}, true); err != nil {
		return fmt.Errorf("app: %w", err)
	}
	*a = d
	return nil
}
