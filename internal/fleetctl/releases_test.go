package fleetctl

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/release"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// publishReleases builds a real release repository (tuftest: keys in
// files, signed metadata, served over HTTP) with apps web and db, and
// returns the catalog a leader controller would write from it at now: the
// releases a verified refresh lists.
func publishReleases(t *testing.T, now time.Time, app string) kv.ReleaseCatalog {
	t.Helper()
	clock := func() time.Time { return now }
	r := tuftest.New(t, clock)
	for _, c := range []release.Custom{
		{App: app, Version: "1.2.0", OS: "linux", Arch: "amd64", EndOfLife: true, Notes: "unsupported since 2026-06"},
		{App: app, Version: "1.3.0", OS: "linux", Arch: "amd64"},
		{App: app, Version: "1.3.0", OS: "linux", Arch: "arm64"},
		{App: app, Version: "1.4.0", OS: "linux", Arch: "amd64"},
		{App: app, Version: "1.4.1", OS: "linux", Arch: "amd64", Security: true, Notes: "fixes CVE-2026-1234"},
		{App: "db", Version: "14.1.0", OS: "linux", Arch: "amd64"},
	} {
		r.Add(c, "app.tar.gz", []byte(c.App+" "+c.Version+" "+c.Arch))
	}
	tr, err := r.Client(clock).Refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rs, bad := tr.Releases()
	if len(bad) > 0 {
		t.Fatal(bad)
	}
	return kv.ReleaseCatalog{URL: r.Serve(), By: "ctl-1", Checked: now, At: now, RootVersion: tr.RootVersion,
		TargetsVersion: tr.TargetsVersion, Expires: tr.Expires, Releases: rs}
}

func (e *env) putCatalog(c kv.ReleaseCatalog) {
	e.t.Helper()
	if err := kv.WriteReleaseCatalog(e.ctx, e.fleet.JS, c); err != nil {
		e.t.Fatal(err)
	}
}

// specRevision is the stored spec's revision.
func (e *env) specRevision() uint64 {
	e.t.Helper()
	return e.spec().Revision
}

// TestPlanSetTargetCheckedAgainstReleasesBinary (issue 27, point 3):
// through the binary, with a catalog read from a real repository, plan set
// --target of a version the repository lacks is refused with exit 2,
// nothing written, naming the versions it has (newest first) and the fix;
// --force needs --reason; forced, the spec is written and the audit record
// says "plan set --force" with the reason. A version flagged end of life is
// refused the same way, saying why. A version it has passes. A catalog
// whose last refresh failed still checks, and says it may be stale.
func TestPlanSetTargetCheckedAgainstReleasesBinary(t *testing.T) {
	e := newEnv(t)
	e.putConfig(rollout.DefaultConfig())
	e.putSpec(rollout.DefaultSpec("1.3.0", "1.4.0"))
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL(), "FLEETCTL_ACTOR=alice"}

	// No catalog: no check (what every fleet without --release-repo does).
	stdout, stderr, code := runBin(t, bin, env, "plan", "set", "--target", "1.9.0")
	if code != 0 || e.spec().Value.TargetVersion != "1.9.0" {
		t.Fatalf("no catalog: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, "release repository") {
		t.Errorf("no catalog, yet plan set speaks of a release repository:\n%s\n%s", stdout, stderr)
	}

	now := time.Now().UTC()
	cat := publishReleases(t, now, rollout.DefaultAppName)
	e.putCatalog(cat)

	rev := e.specRevision()
	_, stderr, code = runBin(t, bin, env, "plan", "set", "--target", "1.5.0")
	if code != cliutil.ExitUsage {
		t.Errorf("--target the repository lacks: exit %d, want 2: %s", code, stderr)
	}
	for _, want := range []string{"--target 1.5.0: the release repository (" + cat.URL + ") has no release 1.5.0 of app default",
		"it has, newest first: 1.4.1 (security), 1.4.0, 1.3.0, 1.2.0 (end of life)", "fleetctl releases ls", "Publish it first",
		`--force --reason "why"`, "nothing written"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("refusal lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "--help' for usage") {
		t.Errorf("a refusal is not a usage mistake, yet it points at --help:\n%s", stderr)
	}
	if got := e.specRevision(); got != rev {
		t.Fatalf("refused, but the spec moved: revision %d → %d", rev, got)
	}

	_, stderr, code = runBin(t, bin, env, "plan", "set", "--target", "1.5.0", "--force")
	if code != cliutil.ExitUsage || !strings.Contains(stderr, "--reason is required to force past the release repository (1.5.0 is not in the release repository)") {
		t.Errorf("--force without --reason: exit %d: %s", code, stderr)
	}
	if got := e.specRevision(); got != rev {
		t.Fatalf("--force without --reason wrote the spec: revision %d → %d", rev, got)
	}

	// End of life: refused, saying why.
	_, stderr, code = runBin(t, bin, env, "plan", "set", "--target", "v1.2.0")
	if code != cliutil.ExitUsage || !strings.Contains(stderr, "flags 1.2.0 of app default end of life (notes: unsupported since 2026-06): no host should run it") ||
		!strings.Contains(stderr, "target a newer release (newest first: 1.4.1 (security), 1.4.0, 1.3.0), or add --force") {
		t.Errorf("end-of-life --target: exit %d: %s", code, stderr)
	}
	if got := e.specRevision(); got != rev {
		t.Fatalf("end of life refused, but the spec moved: revision %d → %d", rev, got)
	}

	reason := "INC-77: hotfix build, published after the rollout starts"
	stdout, stderr, code = runBin(t, bin, env, "plan", "set", "--target", "1.5.0", "--force", "--reason", reason)
	if code != 0 {
		t.Fatalf("forced: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if e.spec().Value.TargetVersion != "1.5.0" || !strings.Contains(stdout, "FORCED past the release repository: 1.5.0 is not in the release repository (reason: "+reason+")") {
		t.Errorf("forced plan set: target %s\n%s", e.spec().Value.TargetVersion, stdout)
	}
	var forced, plain int
	for _, r := range historyOf(t, bin, env).Records {
		if r.Audit == nil {
			continue
		}
		switch {
		case r.Audit.Command == "plan set --force" && r.Audit.Reason == reason && r.Audit.Actor == "alice":
			forced++
		case r.Audit.Command == "plan set":
			plain++
		}
	}
	if forced != 1 || plain != 1 {
		t.Errorf("audit: %d forced plan set records with the reason (want 1), %d plain (want 1: the one before the catalog)", forced, plain)
	}

	// A version the repository has passes, and says nothing of it.
	stdout, stderr, code = runBin(t, bin, env, "plan", "set", "--target", "1.4.1")
	if code != 0 || e.spec().Value.TargetVersion != "1.4.1" || strings.Contains(stdout, "FORCED") {
		t.Fatalf("--target the repository has: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// An older one that it has: written, with a warning naming the newer
	// security release.
	stdout, _, code = runBin(t, bin, env, "plan", "set", "--target", "1.4.0")
	if code != 0 || !strings.Contains(stdout, "Warning: the release repository has security release 1.4.1, newer than --target 1.4.0") {
		t.Errorf("--target behind a security release: exit %d\n%s", code, stdout)
	}

	// The last refresh failed: the last good list still checks, and the
	// refusal says it may be stale.
	cat.Checked, cat.Error = now, "release repository unavailable: GET "+cat.URL+"/metadata/timestamp.json: connection refused"
	cat.At = now.Add(-3 * time.Hour)
	e.putCatalog(cat)
	rev = e.specRevision()
	_, stderr, code = runBin(t, bin, env, "plan", "set", "--target", "1.6.0")
	if code != cliutil.ExitUsage || !strings.Contains(stderr, "WARNING: the list may be stale: the last refresh (") ||
		!strings.Contains(stderr, "connection refused") || !strings.Contains(stderr, "from the last good read, 3h ago") {
		t.Errorf("stale catalog: exit %d: %s", code, stderr)
	}
	if got := e.specRevision(); got != rev {
		t.Fatalf("stale catalog refused, but the spec moved: revision %d → %d", rev, got)
	}
	stdout, _, code = runBin(t, bin, env, "plan", "set", "--target", "1.4.1")
	if code != 0 || !strings.Contains(stdout, "checked against the release repository's last good list (WARNING: the list may be stale") {
		t.Errorf("stale catalog, a version it has: exit %d\n%s", code, stdout)
	}

	// --help says what is checked, and that nothing is without a catalog.
	stdout, _, _ = runBin(t, bin, env, "plan", "set", "--help")
	if !strings.Contains(stdout, "With no release repository configured there is no\ncheck") {
		t.Errorf("plan set --help does not say there is no check without a catalog:\n%s", stdout)
	}
}

// TestPlanSetReleaseCheckPerApp: the check is per app. An app the
// repository lists no release of (its hosts install from a plain release
// site) is not checked, and the note says so; the app it lists is, and the
// refusal names its versions only and the --app to list them. A catalog
// that is not a catalog is a failure (exit 1), passed only by --force with
// a reason.
func TestPlanSetReleaseCheckPerApp(t *testing.T) {
	e := newEnv(t)
	cfg := twoApps() // web (the default app), db
	e.putConfig(cfg)
	db, err := kv.NS(cfg, "db")
	if err != nil {
		t.Fatal(err)
	}
	e.putSpec(rollout.DefaultSpec("1.3.0", "1.4.0"))
	e.put(e.fleet.Plan, db.Spec(), rollout.DefaultSpec("14.0.0", "14.1.0"))
	cat := publishReleases(t, testNow, "web")
	cat.Releases = cat.Of("web") // the repository publishes web only
	e.putCatalog(cat)

	g, out, errOut := e.global()
	g.App = "db"
	if err := RunPlanSet(testCtx(), &PlanSetOptions{Global: g, Target: ptr("14.2.0")}); err != nil {
		t.Fatalf("db, which the repository does not publish: %v", err)
	}
	if !strings.Contains(out.String(), "Note: --target 14.2.0 not checked against the release repository: it lists no release of app db.") {
		t.Errorf("db: no note that it was not checked:\n%s%s", out, errOut)
	}

	rev := e.specRevision()
	g, _, _ = e.global()
	g.App = "web"
	err = RunPlanSet(testCtx(), &PlanSetOptions{Global: g, Target: ptr("2.0.0")})
	mustContain(t, err, "has no release 2.0.0 of app web", "it has, newest first: 1.4.1 (security), 1.4.0, 1.3.0, 1.2.0 (end of life) (fleetctl releases ls --app web)")
	if cliutil.ExitCode(err) != cliutil.ExitUsage || e.specRevision() != rev {
		t.Errorf("web: exit %d, spec revision %d → %d", cliutil.ExitCode(err), rev, e.specRevision())
	}

	// A value that is not a catalog: refused (exit 1), --force passes.
	if _, err := e.fleet.Stats.Put(e.ctx, kv.KeyReleases, []byte(`{"v":1,"checked":"2026-11-23T11:00:00Z","releases":[{"app":"web","version":"1.4.0\u001b[2J"}]}`)); err != nil {
		t.Fatal(err)
	}
	g, _, _ = e.global()
	g.App = "web"
	err = RunPlanSet(testCtx(), &PlanSetOptions{Global: g, Target: ptr("1.4.1")})
	mustContain(t, err, "--target 1.4.1: cannot check it against the release repository", "not valid", "--force --reason", "nothing written")
	if cliutil.ExitCode(err) != cliutil.ExitFailure || e.specRevision() != rev {
		t.Errorf("bad catalog: exit %d, spec revision %d → %d", cliutil.ExitCode(err), rev, e.specRevision())
	}
	if strings.Contains(err.Error(), "\x1b") {
		t.Errorf("the refusal quotes the catalog raw: %q", err)
	}
	g, out, _ = e.global()
	g.App, g.Reason = "web", "the controller is being repaired"
	if err := RunPlanSet(testCtx(), &PlanSetOptions{Global: g, Target: ptr("1.4.1"), Force: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "FORCED past the release repository: the release catalog could not be read") {
		t.Errorf("forced past a bad catalog:\n%s", out)
	}
}

// TestReleasesLsBinary (issue 27, point 3): releases ls through the
// binary. No catalog: says no release repository is configured, exit 0
// (json: configured false). With one read from a real repository: the URL,
// who read it and the versions, every app, newest first, platforms and
// flags; --app keeps one; -o json is one object with every release. A
// catalog whose refresh failed says STALE loudly.
func TestReleasesLsBinary(t *testing.T) {
	e := newEnv(t)
	e.putConfig(rollout.DefaultConfig())
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL()}

	stdout, stderr, code := runBin(t, bin, env, "releases", "ls")
	if code != 0 || !strings.Contains(stdout, "no release repository configured (controller --release-repo)") {
		t.Errorf("no catalog: exit %d\n%s\n%s", code, stdout, stderr)
	}
	stdout, _, code = runBin(t, bin, env, "releases", "ls", "-o", "json")
	var none ReleasesReport
	oneObject(t, stdout, &none)
	if code != 0 || none.Configured || none.Releases == nil || len(none.Releases) != 0 {
		t.Errorf("no catalog, json: exit %d: %+v", code, none)
	}

	now := time.Now().UTC()
	cat := publishReleases(t, now, "web")
	e.putCatalog(cat)
	stdout, stderr, code = runBin(t, bin, env, "releases", "ls")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	checkWidth(t, stdout)
	for _, want := range []string{
		"Release repository: " + cat.URL,
		" ago by ctl-1, checked ",
		" ago; root v1, targets v",
		"APP  VERSION  PLATFORMS                FLAGS        NOTES",
		"db   14.1.0   linux-amd64              -            -\n",
		"web  1.4.1    linux-amd64              security     fixes CVE-2026-1234",
		"web  1.3.0    linux-amd64,linux-arm64  -",
		"web  1.2.0    linux-amd64              end_of_life  unsupported since 2026-06",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("releases ls lacks %q:\n%s", want, stdout)
		}
	}
	if i, j := strings.Index(stdout, "web  1.4.1"), strings.Index(stdout, "web  1.4.0"); i < 0 || j < i {
		t.Errorf("not newest first:\n%s", stdout)
	}
	if strings.Contains(stdout, "STALE") {
		t.Errorf("a fresh catalog says STALE:\n%s", stdout)
	}

	stdout, _, _ = runBin(t, bin, env, "releases", "ls", "--app", "db")
	if !strings.Contains(stdout, "db   14.1.0") || strings.Contains(stdout, "web") {
		t.Errorf("--app db:\n%s", stdout)
	}
	_, stderr, code = runBin(t, bin, env, "releases", "ls", "--app", "wbe")
	if code != cliutil.ExitUsage || !strings.Contains(stderr, "did you mean --app web?") {
		t.Errorf("--app wbe: exit %d: %s", code, stderr)
	}

	stdout, _, code = runBin(t, bin, env, "releases", "ls", "-o", "json", "--app", "web")
	var rep ReleasesReport
	oneObject(t, stdout, &rep)
	var versions []string
	for _, r := range rep.Releases {
		versions = append(versions, r.Version)
	}
	if code != 0 || !rep.Configured || rep.Stale || rep.URL != cat.URL || rep.TargetsVersion != cat.TargetsVersion ||
		strings.Join(versions, " ") != "1.4.1 1.4.0 1.3.0 1.2.0" || !rep.Releases[0].Security || !rep.Releases[3].EndOfLife ||
		strings.Join(rep.Releases[2].Platforms, " ") != "linux-amd64 linux-arm64" {
		t.Errorf("json: exit %d: %+v", code, rep)
	}

	// The last refresh failed: STALE, the error, the age of the list.
	cat.Error, cat.At = "release repository metadata refused: timestamp.json expired", now.Add(-26*time.Hour)
	e.putCatalog(cat)
	stdout, _, code = runBin(t, bin, env, "releases", "ls")
	if code != 0 || !strings.Contains(stdout, "WARNING: STALE: the last refresh (") ||
		!strings.Contains(stdout, "ago) failed: release repository metadata refused:") || !strings.Contains(stdout, "timestamp.json expired;") ||
		!strings.Contains(stdout, "the list is from the last good read, 26h ago") || !strings.Contains(stdout, "web  1.4.1") {
		t.Errorf("stale catalog:\n%s", stdout)
	}
	checkWidth(t, stdout)
	stdout, _, _ = runBin(t, bin, env, "releases", "ls", "-o", "json")
	rep = ReleasesReport{}
	oneObject(t, stdout, &rep)
	if !rep.Stale || rep.Error == "" || len(rep.StaleReasons) != 1 {
		t.Errorf("stale catalog, json: %+v", rep)
	}
}

// TestReleasesHostileCatalog: the catalog is data a peer wrote. Control
// characters and bidirectional overrides in its notes, URL, error and
// platforms never reach the terminal raw; huge notes are cut in the table
// (-o json has them whole); a value that is not a catalog is refused with
// a clear error by releases ls, and status still shows the rollout.
func TestReleasesHostileCatalog(t *testing.T) {
	e := newEnv(t)
	e.putConfig(rollout.DefaultConfig())
	huge := strings.Repeat("A", 200_000)
	e.putCatalog(kv.ReleaseCatalog{URL: "https://r.example/\x1b]0;pwned\x07", By: "ctl\x1b[2J", Checked: testNow, At: testNow,
		Error: "boom\n\x1b[31mFAKE: all good\u202e",
		Releases: []rollout.Release{
			{App: "default", Version: "1.4.0", Platforms: []string{"linux-amd64\n\x1b[1mevil"}, Notes: "\x1b[31mred\x1b[0m \u202egnp.exe\r\nline2"},
			{App: "default", Version: "1.4.1", Platforms: []string{"linux-amd64"}, Security: true, Notes: huge},
		}})
	for _, o := range []string{"table", "json"} {
		out := e.mustRun(func(g *Global) error { return RunReleasesLs(testCtx(), &ReleasesLsOptions{Global: g, Output: o}) })
		for _, bad := range []string{"\x1b", "\u202e", "\r", "\x07"} {
			if strings.Contains(out, bad) {
				t.Errorf("-o %s: %q reaches the terminal raw:\n%q", o, bad, out)
			}
		}
		if o == "table" {
			for _, l := range strings.Split(out, "\n") {
				if len([]rune(l)) > 160 {
					t.Errorf("a line %d columns wide: %q", len([]rune(l)), l)
				}
			}
			if !strings.Contains(out, `\x1b[31mred`) || !strings.Contains(out, "WARNING: STALE") || len(out) > 4000 {
				t.Errorf("table: %d bytes:\n%s", len(out), out)
			}
			continue
		}
		var rep ReleasesReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Releases) != 2 || rep.Releases[0].Notes != huge {
			t.Errorf("json does not keep the notes whole")
		}
	}

	// status with hosts behind the (hostile) security release: escaped too.
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "prod", At: testNow.Add(-10 * time.Second), Agents: 2,
		Versions: rollout.Counts{"1.4.0": {Count: 2}}})
	out := e.mustRun(func(g *Global) error { return RunStatus(testCtx(), &StatusOptions{Global: g, Output: "table"}) })
	if !strings.Contains(out, "SECURITY: prod: 2 hosts on 1.4.0, behind security release 1.4.1") || strings.Contains(out, "\x1b") {
		t.Errorf("status with a hostile catalog:\n%q", out)
	}

	// Not a catalog: releases ls fails clearly, status warns and goes on.
	if _, err := e.fleet.Stats.Put(e.ctx, kv.KeyReleases, []byte(`{"v":1,"checked":"2026-11-23T11:00:00Z","releases":[{"app":"../etc","version":"1.0.0"}]}`)); err != nil {
		t.Fatal(err)
	}
	_, err := e.run(func(g *Global) error { return RunReleasesLs(testCtx(), &ReleasesLsOptions{Global: g, Output: "table"}) })
	mustContain(t, err, "releases ls: stored value is not valid: fleet_stats/releases", `names app "../etc"`, "rewrites it at its next refresh")
	g, out2, errOut := e.global()
	if err := RunStatus(testCtx(), &StatusOptions{Global: g, Output: "table"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "warning: cannot read the release catalog") || !strings.Contains(out2.String(), "prod") {
		t.Errorf("status with a bad catalog:\n%s\n%s", out2, errOut)
	}
}

// TestStatusReleaseStanding (issue 27, point 3): status says, per group,
// how many hosts run a version the repository flags end of life and how
// many are behind a security release, with the command that rolls it out
// (rollout.StandingOf); -o json has the same. Once the plan targets the
// security release the line says the rollout brings them there. Without a
// catalog the output is exactly what it was.
func TestStatusReleaseStanding(t *testing.T) {
	e := newEnv(t)
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")}
	e.putConfig(cfg)
	at := testNow.Add(-10 * time.Second)
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "prod", At: at, Agents: 6,
		Versions: rollout.Counts{"1.2.0": {Count: 2}, "1.3.0": {Count: 3}, "1.4.1": {Count: 1}}})
	e.putStats(kv.Stats{V: 1, ControllerID: "c1", Group: "staging", At: at, Agents: 1, Versions: rollout.Counts{"1.3.0": {Count: 1}}})
	e.putSpec(rollout.DefaultSpec("1.3.0", "1.4.0"))
	status := func(o string) string {
		return e.mustRun(func(g *Global) error { return RunStatus(testCtx(), &StatusOptions{Global: g, Output: o}) })
	}
	before := status("table")
	beforeJSON := status("json")
	if strings.Contains(before, "Release repository") || strings.Contains(beforeJSON, `"releases"`) {
		t.Fatalf("no catalog, yet status speaks of one:\n%s", before)
	}

	e.putCatalog(publishReleases(t, testNow, rollout.DefaultAppName))
	out := status("table")
	if !strings.HasPrefix(out, before) {
		t.Errorf("the catalog changed the status above its lines:\n%s\nwas:\n%s", out, before)
	}
	want := strings.Join([]string{
		"END OF LIFE: prod: 2 hosts on 1.2.0, which the release repository flags end of life",
		"SECURITY: staging: 1 host on 1.3.0, behind security release 1.4.1",
		"SECURITY: prod: 3 hosts on 1.3.0, behind security release 1.4.1",
		"SECURITY: prod: 2 hosts on 1.2.0, behind security release 1.4.1",
		"security release 1.4.1 available: fleetctl plan set --target 1.4.1",
	}, "\n  ")
	if !strings.Contains(out, "\n  "+want+"\n") {
		t.Errorf("status lacks the release lines:\n%s\nwant:\n  %s", out, want)
	}
	checkWidth(t, out)

	var rep struct {
		Groups   []GroupReport    `json:"groups"`
		Releases *ReleaseStanding `json:"releases"`
	}
	if err := json.Unmarshal([]byte(status("json")), &rep); err != nil {
		t.Fatal(err)
	}
	r := rep.Releases
	if r == nil || r.App != "default" || r.Stale || len(r.EndOfLife) != 1 || r.EndOfLife[0] != (StandingHosts{Group: "prod", Version: "1.2.0", Hosts: 2}) ||
		len(r.BehindSecurity) != 3 || r.BehindSecurity[0] != (StandingHosts{Group: "staging", Version: "1.3.0", Hosts: 1, SecurityRelease: "1.4.1"}) ||
		strings.Join(r.SecurityReleases, " ") != "1.4.1" || len(rep.Groups) != 2 {
		t.Errorf("status -o json releases: %+v", r)
	}

	// The plan targets the security release: no command, the rollout
	// brings them there. --group keeps one group's lines.
	e.putSpec(rollout.DefaultSpec("1.3.0", "1.4.1"))
	out = e.mustRun(func(g *Global) error {
		return RunStatus(testCtx(), &StatusOptions{Global: g, Output: "table", Group: "staging"})
	})
	if !strings.Contains(out, "security release 1.4.1: the plan targets 1.4.1, which the rollout brings them to") ||
		strings.Contains(out, "available: fleetctl plan set") || strings.Contains(out, "prod: 3 hosts") {
		t.Errorf("status --group staging, plan on the security release:\n%s", out)
	}
	paused := rollout.DefaultSpec("1.3.0", "1.4.1")
	paused.Mode = rollout.ModePaused
	e.putSpec(paused)
	if out := status("table"); !strings.Contains(out, "which the rollout brings them to (once it is no longer paused: fleetctl resume)") {
		t.Errorf("status, paused plan on the security release:\n%s", out)
	}
}
