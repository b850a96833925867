package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The release catalog (kv.ReleaseCatalog, fleet_stats/releases) is what the
// leader controller last read from the release repository
// (controller --release-repo). fleetctl lists it (releases ls), checks
// plan set --target against it, and says in status which hosts run a
// version it flags end of life or older than a security release
// (rollout.StandingOf). It is a listing, never a grant: agents verify
// every install through the repository themselves. Everything in it is
// data a peer wrote, escaped before it reaches a terminal.

// catalogStaleAfter: a catalog not checked for this long is stale (the
// leader refreshes it every --release-refresh, 1m by default).
const catalogStaleAfter = 10 * time.Minute

// noCatalog is what releases ls says when no catalog was ever written.
const noCatalog = "no release repository configured (controller --release-repo): no catalog of releases in fleet_stats/releases"

// notesWidth bounds the notes column of releases ls (-o json has them in
// full).
const notesWidth = 40

// readCatalog reads the release catalog; ok is false when none was ever
// written (no release repository configured).
func readCatalog(ctx context.Context, f *kv.Fleet) (c kv.ReleaseCatalog, ok bool, err error) {
	c, err = kv.ReadReleaseCatalog(ctx, f.JS.Conn())
	if errors.Is(err, kv.ErrNotFound) {
		return kv.ReleaseCatalog{}, false, nil
	}
	if err != nil {
		return kv.ReleaseCatalog{}, false, err
	}
	return c, true, nil
}

// catalogStale lists why c may no longer say what the repository holds
// (none: it is fresh). The strings are escaped.
func catalogStale(c kv.ReleaseCatalog, now time.Time) []string {
	var out []string
	if c.Error != "" {
		what := fmt.Sprintf("the last refresh (%s ago) failed: %s", age(now, c.Checked), shorten(escape.Text(c.Error), 300))
		if c.At.IsZero() {
			what += "; the repository was never read successfully"
		} else {
			what += fmt.Sprintf("; the list is from the last good read, %s ago", age(now, c.At))
		}
		out = append(out, what)
	}
	if d := now.Sub(c.Checked); d > catalogStaleAfter {
		out = append(out, fmt.Sprintf("not refreshed for %s: is the leader controller running with --release-repo?", age(now, c.Checked)))
	}
	if !c.Expires.IsZero() && c.Expires.Before(now) {
		out = append(out, fmt.Sprintf("the metadata it was read from expired %s ago", age(now, c.Expires)))
	}
	return out
}

// newestFirst is rs (one app's, any order) newest version first.
func newestFirst(rs []rollout.Release) []rollout.Release {
	out := slices.Clone(rs)
	slices.SortStableFunc(out, func(a, b rollout.Release) int {
		if c := strings.Compare(a.App, b.App); c != 0 {
			return c
		}
		return rollout.CompareVersions(b.Version, a.Version)
	})
	return out
}

// catalogApps are the apps the catalog has releases of, by name.
func catalogApps(c kv.ReleaseCatalog) []string {
	var out []string
	for _, r := range c.Releases {
		if !slices.Contains(out, r.App) {
			out = append(out, r.App)
		}
	}
	slices.Sort(out)
	return out
}

// versionList is up to n versions of rs (newest first) with their flags,
// and how many there are in all.
func versionList(rs []rollout.Release, n int) string {
	rs = newestFirst(rs)
	var vs []string
	for i, r := range rs {
		if i == n {
			vs = append(vs, fmt.Sprintf("… %d in all", len(rs)))
			break
		}
		v := r.Version
		switch {
		case r.EndOfLife:
			v += " (end of life)"
		case r.Security:
			v += " (security)"
		}
		vs = append(vs, v)
	}
	return strings.Join(vs, ", ")
}

// newerLive are the releases of rs newer than version and not flagged end
// of life: what to target instead of an end-of-life one.
func newerLive(rs []rollout.Release, version string) []rollout.Release {
	var out []rollout.Release
	for _, r := range rs {
		if !r.EndOfLife && rollout.CompareVersions(r.Version, version) > 0 {
			out = append(out, r)
		}
	}
	return out
}

func newReleasesCmd(g *Global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "releases",
		Short: "List what the release repository publishes (as the controller last read it)",
		Long: `The leader controller, run with --release-repo URL --release-root FILE, reads
the release repository (TUF: docs/release-repo.md) every --release-refresh
and keeps what it lists in fleet_stats/releases. "releases ls" shows it.
It is a listing, never a grant: agents verify every install through the
repository themselves. plan set checks --target against it, and status
says which hosts run a version it flags end of life or older than a
security release.`,
	}
	cmd.AddCommand(newReleasesLsCmd(g))
	return cmd
}

// ReleasesLsOptions are the flags of "fleetctl releases ls".
type ReleasesLsOptions struct {
	*Global
	Output string
}

func newReleasesLsCmd(g *Global) *cobra.Command {
	o := &ReleasesLsOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the releases: versions per app, their platforms and flags",
		Long: `List the releases the release repository publishes, as the leader controller
last read it: per app, newest version first, the platforms (<os>-<arch>) it
was published for, its flags (security: it fixes a security problem, hosts
on older versions are behind it; end_of_life: no host should run it) and
the operator's notes. Above the table: the repository's URL, when it was
read and by which controller, the root and targets versions.

A catalog whose last refresh failed, or that was not refreshed for 10
minutes, or whose metadata expired, says so in a WARNING line: the list is
then the last good one and may be stale.

Without --app it lists every app the repository has (it may publish apps
this fleet does not run); --app lists one. With no release repository
configured it says so and exits 0 (-o json: {"configured": false}).`,
		Example: `  fleetctl releases ls
  fleetctl releases ls --app db
  fleetctl releases ls -o json | jq -r '.releases[] | select(.security) | .version'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			return RunReleasesLs(cmd.Context(), o)
		},
	}
	outputFlag(cmd, &o.Output)
	cmd.Flags().StringVar(&g.App, "app", cliutil.Env("", "FLEETCTL_APP"),
		"only this app (env FLEETCTL_APP); default: every app the repository has")
	return cmd
}

// ReleasesReport is "releases ls -o json": the catalog, its releases
// newest first per app (only --app's with --app).
type ReleasesReport struct {
	// Configured is false when no catalog was ever written (no controller
	// runs with --release-repo); nothing else is set then.
	Configured bool   `json:"configured"`
	App        string `json:"app,omitempty"`
	URL        string `json:"url,omitempty"`
	By         string `json:"by,omitempty"`
	// Checked is when the controller last tried, Error that try's error;
	// At is its last good read, which Releases are from.
	Checked        time.Time `json:"checked,omitzero"`
	Error          string    `json:"error,omitempty"`
	At             time.Time `json:"at,omitzero"`
	RootVersion    int64     `json:"root_version,omitempty"`
	TargetsVersion int64     `json:"targets_version,omitempty"`
	Expires        time.Time `json:"expires,omitzero"`
	// Stale: the list may no longer be what the repository holds;
	// StaleReasons say why.
	Stale          bool              `json:"stale"`
	StaleReasons   []string          `json:"stale_reasons,omitempty"`
	Releases       []rollout.Release `json:"releases"`
	Skipped        int               `json:"skipped,omitempty"`
	SkippedExample string            `json:"skipped_example,omitempty"`
}

// RunReleasesLs is "fleetctl releases ls".
func RunReleasesLs(ctx context.Context, o *ReleasesLsOptions) error {
	app := strings.TrimSpace(o.App)
	if app != "" {
		if err := rollout.ValidateAppName(app); err != nil {
			return cliutil.Usagef("--app: %v", err)
		}
	}
	ctx, f, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	c, ok, err := readCatalog(ctx, f)
	if err != nil {
		return fmt.Errorf("releases ls: %w (the leader controller rewrites it at its next refresh)", err)
	}
	if !ok {
		if o.Output == "json" {
			fmt.Fprintln(o.ErrOut, noCatalog)
			return writeJSON(o.Out, ReleasesReport{Releases: []rollout.Release{}})
		}
		_, err := fmt.Fprintln(o.Out, noCatalog)
		return err
	}
	now := o.Now()
	rep := ReleasesReport{Configured: true, App: app, URL: c.URL, By: c.By, Checked: c.Checked, Error: c.Error, At: c.At,
		RootVersion: c.RootVersion, TargetsVersion: c.TargetsVersion, Expires: c.Expires,
		StaleReasons: catalogStale(c, now), Skipped: c.Skipped, SkippedExample: c.SkippedExample}
	rep.Stale = len(rep.StaleReasons) > 0
	rs := c.Releases
	if app != "" {
		rs = c.Of(app)
		if len(rs) == 0 {
			if err := unknownReleaseApp(ctx, f, c, app); err != nil {
				return err
			}
		}
	}
	rep.Releases = newestFirst(rs)
	if rep.Releases == nil {
		rep.Releases = []rollout.Release{}
	}
	if o.Output == "json" {
		return writeJSON(o.Out, rep)
	}
	return writeReleases(o.Out, rep, c, now)
}

// unknownReleaseApp is the error for --app naming an app the catalog has no
// release of: none when the config has the app (it has no release yet, a
// fact to list), a usage error naming the apps otherwise.
func unknownReleaseApp(ctx context.Context, f *kv.Fleet, c kv.ReleaseCatalog, app string) error {
	var names []string
	if cfg, _, err := f.ReadConfig(ctx); err == nil {
		names = cfg.Value.AppNames()
		if slices.Contains(names, app) {
			return nil
		}
	}
	known := catalogApps(c)
	for _, n := range names {
		if !slices.Contains(known, n) {
			known = append(known, n)
		}
	}
	msg := fmt.Sprintf("--app %q: neither the release repository nor the config has this app", app)
	if len(known) > 0 {
		msg += "; the apps are: " + escape.Text(strings.Join(known, ", "))
	}
	if near, ok := rollout.ClosestGroupName(app, known); ok {
		msg += fmt.Sprintf("\ndid you mean --app %s?", escape.Text(near))
	}
	return cliutil.Usagef("%s", msg)
}

// writeReleases prints releases ls's text.
func writeReleases(w io.Writer, rep ReleasesReport, c kv.ReleaseCatalog, now time.Time) error {
	fmt.Fprintf(w, "Release repository: %s\n", shorten(escape.Text(c.URL), 80))
	read := "never read successfully"
	if !c.At.IsZero() {
		read = fmt.Sprintf("read %s ago", age(now, c.At))
	}
	line := fmt.Sprintf("%s by %s, checked %s ago", read, cell(c.By, 32), age(now, c.Checked))
	if c.RootVersion > 0 || c.TargetsVersion > 0 {
		line += fmt.Sprintf("; root v%d, targets v%d", c.RootVersion, c.TargetsVersion)
	}
	if !c.Expires.IsZero() && c.Expires.After(now) {
		line += "; metadata expires in " + span(c.Expires.Sub(now))
	}
	fmt.Fprintf(w, "  %s\n", line)
	for _, why := range rep.StaleReasons {
		for _, l := range wrap("WARNING: STALE: "+why+"; the list below may not be what the repository holds now", noteWidth, "  ") {
			fmt.Fprintln(w, l)
		}
	}
	if c.Skipped > 0 {
		fmt.Fprintf(w, "  %d targets name no release and are left out (e.g. %s)\n", c.Skipped, shorten(escape.Text(c.SkippedExample), 120))
	}
	fmt.Fprintln(w)
	if len(rep.Releases) == 0 {
		what := "The release repository lists no release."
		if rep.App != "" {
			what = fmt.Sprintf("The release repository lists no release of app %s.", rep.App)
			if apps := catalogApps(c); len(apps) > 0 {
				what += " It has: " + escape.Text(strings.Join(apps, ", ")) + "."
			}
		}
		_, err := fmt.Fprintln(w, what)
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "APP\tVERSION\tPLATFORMS\tFLAGS\tNOTES")
	for _, r := range rep.Releases {
		var flags []string
		if r.Security {
			flags = append(flags, "security")
		}
		if r.EndOfLife {
			flags = append(flags, "end_of_life")
		}
		fl := strings.Join(flags, ",")
		if fl == "" {
			fl = "-"
		}
		notes := cell(r.Notes, notesWidth)
		if notes == "" {
			notes = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(r.App, 32), cell(r.Version, 40), cell(strings.Join(r.Platforms, ","), 36), fl, notes)
	}
	return tw.Flush()
}

// releaseCheck is what the catalog says of a new --target of plan set.
type releaseCheck struct {
	// refusal is why the target is refused ("" when it is not): not in
	// the repository, or flagged end of life. It ends with the fix.
	refusal string
	// short names the refusal for the FORCED line.
	short string
	// unread: the refusal is that the catalog could not be read (a
	// failure, exit 1; the others are exit 2).
	unread bool
	// notes are said after the write (stale list, not checked, a newer
	// security release).
	notes []string
}

// checkRelease checks plan set's new target against the catalog. No
// catalog: nothing to check. A catalog that lists no release of the app
// (its hosts do not install through the repository, or it was never read
// successfully): not checked, said in a note. A catalog that cannot be
// read is refused too (unread).
func checkRelease(ctx context.Context, f appFleet, target string, now time.Time) (releaseCheck, error) {
	var rc releaseCheck
	c, ok, err := readCatalog(ctx, f.Fleet)
	if err != nil {
		if ctx.Err() != nil {
			return rc, err
		}
		rc.unread, rc.short = true, "the release catalog could not be read"
		rc.refusal = fmt.Sprintf("--target %s: cannot check it against the release repository: %s; the leader controller rewrites the catalog at its next refresh; or add --force --reason \"why\" to skip the check; nothing written", target, escape.Text(err.Error()))
		return rc, nil
	}
	if !ok {
		return rc, nil
	}
	app, appArg := f.NS.Name, f.appArg()
	stale := catalogStale(c, now)
	staleNote := ""
	if len(stale) > 0 {
		staleNote = " (WARNING: the list may be stale: " + strings.Join(stale, "; ") + ")"
	}
	rs := c.Of(app)
	if len(rs) == 0 {
		why := fmt.Sprintf("it lists no release of app %s", app)
		if c.At.IsZero() {
			why = "it was never read successfully"
		}
		rc.notes = append(rc.notes, fmt.Sprintf("Note: --target %s not checked against the release repository: %s%s.", target, why, staleNote))
		return rc, nil
	}
	s := rollout.StandingOf(rs, app, target)
	switch {
	case !s.Known:
		rc.short = fmt.Sprintf("%s is not in the release repository", target)
		rc.refusal = fmt.Sprintf("--target %s: the release repository (%s) has no release %s of app %s%s; it has, newest first: %s (fleetctl releases ls%s). "+
			"Publish it first (fleetctl repo add, sign, publish: the controller reads the repository again within --release-refresh), "+
			"or target one that exists, or add --force --reason \"why\" to target it anyway (agents that install through the repository hold until it is there); nothing written",
			target, shorten(escape.Text(c.URL), 200), target, app, staleNote, versionList(rs, 5), appArg)
	case s.EndOfLife:
		rc.short = fmt.Sprintf("%s is flagged end of life", target)
		notes := ""
		for _, r := range rs {
			if r.Version == target && r.Notes != "" {
				notes = " (notes: " + shorten(escape.Text(r.Notes), 200) + ")"
			}
		}
		instead := "it has no newer release that is not end of life"
		if newer := newerLive(rs, target); len(newer) > 0 {
			instead = "target a newer release (newest first: " + versionList(newer, 5) + ")"
		}
		rc.refusal = fmt.Sprintf("--target %s: the release repository flags %s of app %s end of life%s: no host should run it, and status would list every host on it%s; "+
			"%s, or add --force --reason \"why\" to roll it out anyway; nothing written",
			target, target, app, notes, staleNote, instead)
	default:
		if staleNote != "" {
			rc.notes = append(rc.notes, fmt.Sprintf("Note: --target %s checked against the release repository's last good list%s.", target, staleNote))
		}
	}
	if s.SecurityRelease != "" {
		rc.notes = append(rc.notes, fmt.Sprintf("Warning: the release repository has security release %s, newer than --target %s: hosts that stay on %s remain behind it (fleetctl plan set%s --target %s).",
			s.SecurityRelease, target, target, appArg, s.SecurityRelease))
	}
	return rc, nil
}

// ReleaseStanding is what the release repository says of the versions an
// app's hosts run (status: "Release repository:" lines; -o json
// "releases"), by rollout.StandingOf.
type ReleaseStanding struct {
	App string `json:"app"`
	URL string `json:"url"`
	// Stale: the catalog may no longer be what the repository holds.
	Stale        bool     `json:"stale"`
	StaleReasons []string `json:"stale_reasons,omitempty"`
	// EndOfLife are the hosts on a version flagged end of life, per group
	// and version.
	EndOfLife []StandingHosts `json:"end_of_life"`
	// BehindSecurity are the hosts on a version older than a security
	// release (SecurityRelease: the newest such), per group and version.
	BehindSecurity []StandingHosts `json:"behind_security"`
	// SecurityReleases are the security releases hosts are behind, newest
	// first.
	SecurityReleases []string `json:"security_releases,omitempty"`
}

// StandingHosts counts one group's hosts on one version.
type StandingHosts struct {
	Group           string `json:"group"`
	Version         string `json:"version"`
	Hosts           int    `json:"hosts"`
	SecurityRelease string `json:"security_release,omitempty"`
}

// releaseStanding is what c says of the versions rep's hosts of app run.
func releaseStanding(c kv.ReleaseCatalog, app string, rep StatusReport, now time.Time) *ReleaseStanding {
	s := &ReleaseStanding{App: app, URL: c.URL, StaleReasons: catalogStale(c, now),
		EndOfLife: []StandingHosts{}, BehindSecurity: []StandingHosts{}}
	s.Stale = len(s.StaleReasons) > 0
	rs := c.Of(app)
	for _, g := range rep.Groups {
		versions := make([]string, 0, len(g.Versions))
		for v, vr := range g.Versions {
			if vr.Count > 0 {
				versions = append(versions, v)
			}
		}
		slices.SortFunc(versions, func(a, b string) int {
			if versionLess(a, b) {
				return -1
			}
			return 1
		})
		for _, v := range versions {
			n := g.Versions[v].Count
			st := rollout.StandingOf(rs, app, v)
			if st.EndOfLife {
				s.EndOfLife = append(s.EndOfLife, StandingHosts{Group: g.Name, Version: v, Hosts: n})
			}
			if st.SecurityRelease != "" {
				s.BehindSecurity = append(s.BehindSecurity, StandingHosts{Group: g.Name, Version: v, Hosts: n, SecurityRelease: st.SecurityRelease})
				if !slices.Contains(s.SecurityReleases, st.SecurityRelease) {
					s.SecurityReleases = append(s.SecurityReleases, st.SecurityRelease)
				}
			}
		}
	}
	slices.SortFunc(s.SecurityReleases, func(a, b string) int { return rollout.CompareVersions(b, a) })
	return s
}

// hosts is "1 host" or "N hosts".
func hosts(n int) string {
	if n == 1 {
		return "1 host"
	}
	return fmt.Sprintf("%d hosts", n)
}

// writeStanding prints status's "Release repository:" lines: hosts on an
// end-of-life version, hosts behind a security release with the command
// that rolls it out, and a stale catalog. Nothing when all is well.
func writeStanding(w io.Writer, s *ReleaseStanding, plan *PlanReport, appArg string) {
	if s == nil || (len(s.EndOfLife) == 0 && len(s.BehindSecurity) == 0 && !s.Stale) {
		return
	}
	fmt.Fprintf(w, "\nRelease repository (%s):\n", shorten(escape.Text(s.URL), 80))
	for _, h := range s.EndOfLife {
		fmt.Fprintf(w, "  END OF LIFE: %s: %s on %s, which the release repository flags end of life\n", cell(h.Group, 64), hosts(h.Hosts), cell(h.Version, 40))
	}
	for _, h := range s.BehindSecurity {
		fmt.Fprintf(w, "  SECURITY: %s: %s on %s, behind security release %s\n", cell(h.Group, 64), hosts(h.Hosts), cell(h.Version, 40), h.SecurityRelease)
	}
	for _, v := range s.SecurityReleases {
		if plan != nil && rollout.ValidateVersion(plan.TargetVersion) == nil && rollout.CompareVersions(plan.TargetVersion, v) >= 0 {
			paused := ""
			if plan.Mode != rollout.ModeEnabled {
				paused = fmt.Sprintf(" (once it is no longer %s: fleetctl resume%s)", plan.Mode, appArg)
			}
			fmt.Fprintf(w, "  security release %s: the plan targets %s, which the rollout brings them to%s\n", v, plan.TargetVersion, paused)
			continue
		}
		fmt.Fprintf(w, "  security release %s available: fleetctl plan set%s --target %s\n", v, appArg, v)
	}
	for _, why := range s.StaleReasons {
		for _, l := range wrap("WARNING: STALE release list: "+why, noteWidth-2, "    ") {
			fmt.Fprintln(w, "  "+l)
		}
	}
}
