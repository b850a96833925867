package fleetctl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// twoApps is a config with apps web (the default) and db (script).
func twoApps() rollout.Config {
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")}
	cfg.Apps = []rollout.AppConfig{{Name: "web"}, {Name: "db", Installer: rollout.InstallerScript}}
	return cfg
}

// planRevisions is every key of fleet_plan with its revision.
func (e *env) planRevisions() map[string]uint64 {
	e.t.Helper()
	out := map[string]uint64{}
	err := kv.ReadLatest(e.ctx, e.fleet.JS.Conn(), kv.BucketPlan, func(key string, m kv.StoredMsg) error {
		out[key] = m.Sequence
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// appKey reads a plan key of any app as T.
func appKey[T any](e *env, key string) (kv.Entry[T], error) {
	return kv.Get[T](e.ctx, e.fleet.Plan, key)
}

// TestAppFlagResolutionBinary (issue 26, point 1): with several apps, a
// plan or status command without --app is a usage error (exit 2) naming
// the apps, and writes nothing; so is an app the config lacks or a name
// that is not one. With one app, --app is optional and its name is taken.
func TestAppFlagResolutionBinary(t *testing.T) {
	e := newEnv(t)
	e.putConfig(twoApps())
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL(), "FLEETCTL_ACTOR=alice"}
	before := e.planRevisions()
	for _, args := range [][]string{
		{"status"}, {"plan", "show"}, {"plan", "forecast"}, {"watch"}, {"agents", "ls"},
		{"plan", "set", "--start", "14.1.0", "--target", "14.2.0"}, {"pause"}, {"resume"},
		{"run", "--group", "prod"}, {"reset", "--group", "prod"}, {"mark-done", "--group", "prod"},
		{"retry", "--group", "prod"}, {"rollback", "--group", "prod"},
		{"rollback", "--all", "--reason", "x"}, {"run", "--group", "prod", "--skip-canaries", "--reason", "x"},
		{"approve", "--group", "prod", "--reason", "ok"},
		{"quarantine", "ls"}, {"quarantine", "add", "1.4.0", "--reason", "bad"}, {"quarantine", "rm", "1.4.0"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			stdout, stderr, code := runBin(t, bin, env, args...)
			if code != cliutil.ExitUsage {
				t.Errorf("exit %d, want %d", code, cliutil.ExitUsage)
			}
			if !strings.Contains(stderr, "this fleet has 2 apps (web, db): say which with --app NAME") {
				t.Errorf("stderr does not name the apps:\n%s", stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q", stdout)
			}
			// Every one of them takes --app.
			_, stderr, code = runBin(t, bin, env, append(args, "--app", "nope")...)
			if code != cliutil.ExitUsage || !strings.Contains(stderr, `--app "nope": not in the config; the apps are: web, db`) {
				t.Errorf("--app nope: exit %d:\n%s", code, stderr)
			}
		})
	}
	for _, tc := range []struct {
		app, want string
	}{
		{"nope", `--app "nope": not in the config; the apps are: web, db`},
		{"Web", "--app: invalid app name"},
		{"group", "reserved"},
	} {
		_, stderr, code := runBin(t, bin, env, "plan", "set", "--app", tc.app, "--start", "1.0.0", "--target", "1.1.0")
		if code != cliutil.ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("--app %s: exit %d, want 2 with %q:\n%s", tc.app, code, tc.want, stderr)
		}
	}
	if _, stderr, code := runBin(t, bin, env, "history", "--app", "nope"); code != cliutil.ExitUsage || !strings.Contains(stderr, "the apps are: web, db") {
		t.Errorf("history --app nope: exit %d: %s", code, stderr)
	}
	if diff := cmp.Diff(before, e.planRevisions()); diff != "" {
		t.Errorf("a refused command wrote fleet_plan (-before +after):\n%s", diff)
	}
	// FLEETCTL_APP stands for --app.
	stdout, stderr, code := runBin(t, bin, append(env, "FLEETCTL_APP=web"), "plan", "show", "-o", "json")
	if code != 0 || !strings.Contains(stdout, `"target_version": "1.4.0"`) {
		t.Errorf("FLEETCTL_APP=web plan show: exit %d\n%s%s", code, stdout, stderr)
	}

	// One app: --app is optional, its name (even the implicit "default")
	// accepted, another refused.
	one := newEnv(t)
	one.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	env = []string{"NATS_URL=" + one.srv.URL()}
	for _, args := range [][]string{{"plan", "show"}, {"plan", "show", "--app", "default"}} {
		if stdout, stderr, code := runBin(t, bin, env, args...); code != 0 || !strings.Contains(stdout, "1.4.0") {
			t.Errorf("%v: exit %d\n%s%s", args, code, stdout, stderr)
		}
	}
	if _, stderr, code := runBin(t, bin, env, "plan", "show", "--app", "db"); code != cliutil.ExitUsage || !strings.Contains(stderr, "the apps are: default") {
		t.Errorf("--app db on a fleet without it: exit %d: %s", code, stderr)
	}
}

// TestSecondAppPlanBinary (issue 26, point 1 and 4): plan set --app db
// writes db.spec and leaves the default app's spec alone; pause --app db
// pauses db alone; plan show, status and history --app read the app's
// own; the audit records name the app.
func TestSecondAppPlanBinary(t *testing.T) {
	e := newEnv(t)
	cfg := twoApps()
	e.putConfig(cfg)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	web := e.spec()
	db, err := kv.NS(cfg, "db")
	if err != nil {
		t.Fatal(err)
	}
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL(), "FLEETCTL_ACTOR=alice"}

	stdout, stderr, code := runBin(t, bin, env, "plan", "set", "--app", "db", "--start", "14.1.0", "--target", "14.2.0", "--reason", "pg minor", "-o", "json")
	if code != 0 {
		t.Fatalf("plan set --app db: exit %d\n%s%s", code, stdout, stderr)
	}
	var res WriteResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	if res.Key != "db.spec" || !res.Written {
		t.Errorf("plan set --app db wrote %s (written %v), want db.spec", res.Key, res.Written)
	}
	got, err := appKey[rollout.Spec](e, db.Spec())
	if err != nil {
		t.Fatalf("db.spec: %v", err)
	}
	if got.Value.TargetVersion != "14.2.0" || got.Value.StartVersion != "14.1.0" {
		t.Errorf("db.spec = %+v", got.Value)
	}
	if s := e.spec(); s.Revision != web.Revision || s.Value != web.Value {
		t.Errorf("plan set --app db changed the default app's spec: %+v rev %d → %+v rev %d", web.Value, web.Revision, s.Value, s.Revision)
	}

	// pause --app db: db.spec paused, web's spec untouched.
	if stdout, stderr, code := runBin(t, bin, env, "pause", "--app", "db"); code != 0 || !strings.Contains(stdout, "plan (app db) paused (fleet_plan/db.spec") {
		t.Errorf("pause --app db: exit %d\n%s%s", code, stdout, stderr)
	}
	if got, _ := appKey[rollout.Spec](e, db.Spec()); got.Value.Mode != rollout.ModePaused {
		t.Errorf("db.spec mode %q after pause --app db", got.Value.Mode)
	}
	if s := e.spec(); s.Revision != web.Revision {
		t.Errorf("pause --app db wrote the default app's spec")
	}

	// plan show reads each app's own.
	for app, want := range map[string]string{"db": "14.2.0", "web": "1.4.0"} {
		stdout, stderr, code := runBin(t, bin, env, "plan", "show", "--app", app)
		if code != 0 || !strings.Contains(stdout, "target_version  "+want) || !strings.Contains(stdout, "app             "+app) {
			t.Errorf("plan show --app %s: exit %d, want target %s:\n%s%s", app, code, want, stdout, stderr)
		}
	}

	// status --app: the app's plan and its own counts.
	for _, s := range []struct {
		ns     kv.AppNS
		counts rollout.Counts
	}{
		{kv.DefaultNS(cfg), rollout.Counts{"1.4.0": {Count: 7}}},
		{db, rollout.Counts{"14.1.0": {Count: 2}, "14.2.0": {Count: 1}}},
	} {
		n := 0
		for _, c := range s.counts {
			n += c.Count
		}
		e.put(e.fleet.Stats, s.ns.Stats("prod", "ctl-1"), kv.Stats{V: 1, ControllerID: "ctl-1", Group: "prod", At: time.Now(), Agents: n,
			Versions: s.counts, App: s.ns.Key()})
	}
	stdout, stderr, code = runBin(t, bin, env, "status", "--app", "db", "-o", "json")
	if code != 0 {
		t.Fatalf("status --app db: exit %d\n%s%s", code, stdout, stderr)
	}
	var rep StatusReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Plan == nil || rep.Plan.TargetVersion != "14.2.0" {
		t.Errorf("status --app db: plan %+v, want target 14.2.0", rep.Plan)
	}
	for _, g := range rep.Groups {
		if g.Name == "prod" && (g.Agents != 3 || g.Versions["14.2.0"].Count != 1) {
			t.Errorf("status --app db: prod counts %d agents, %d on 14.2.0; want db's 3 and 1", g.Agents, g.Versions["14.2.0"].Count)
		}
	}
	stdout, _, _ = runBin(t, bin, env, "status", "--app", "db")
	if !strings.Contains(stdout, "App: db") || !strings.Contains(stdout, "14.2.0") || strings.Contains(stdout, "1.4.0 ") {
		t.Errorf("status --app db table does not show db's plan alone:\n%s", stdout)
	}

	// history --app: db's records (naming db) and the config's; the
	// default app's own are web's.
	stdout, stderr, code = runBin(t, bin, env, "history", "--app", "db", "-o", "json")
	if code != 0 {
		t.Fatalf("history --app db: exit %d\n%s%s", code, stdout, stderr)
	}
	var h HistoryReport
	if err := json.Unmarshal([]byte(stdout), &h); err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, r := range h.Records {
		if r.Audit == nil {
			continue
		}
		cmds = append(cmds, r.Audit.Command)
		if r.Audit.App != "db" || r.App != "db" {
			t.Errorf("history --app db: record %q names app %q (entry %q), want db", r.Audit.Command, r.Audit.App, r.App)
		}
	}
	if !slices.Equal(cmds, []string{"plan set", "pause"}) {
		t.Errorf("history --app db: records %v, want plan set, pause", cmds)
	}
	stdout, _, _ = runBin(t, bin, env, "history", "--app", "web", "-o", "json")
	if strings.Contains(stdout, `"app": "db"`) {
		t.Errorf("history --app web shows db's entries:\n%s", stdout)
	}
	stdout, _, _ = runBin(t, bin, env, "history", "-o", "json")
	if !strings.Contains(stdout, `"app": "db"`) {
		t.Errorf("history without --app leaves out db's entries:\n%s", stdout)
	}
}

// TestAppsLsBinary (issue 26, point 1): apps ls shows every app's
// installer, versions, mode and progress; -o json the same as data.
func TestAppsLsBinary(t *testing.T) {
	e := newEnv(t)
	cfg := twoApps()
	e.putConfig(cfg)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	staging := groupStatus(rollout.StateDone)
	staging.Group = "staging"
	e.putStatus(staging)
	db, _ := kv.NS(cfg, "db")
	dbSpec := rollout.DefaultSpec("14.1.0", "14.2.0")
	dbSpec.Mode = rollout.ModePaused
	e.put(e.fleet.Plan, db.Spec(), dbSpec)
	halted := groupStatus(rollout.StateCanary)
	halted.TargetVersion, halted.StartVersion, halted.Halted, halted.HaltReason = "14.2.0", "14.1.0", true, "canary failed"
	e.put(e.fleet.Plan, db.Group("prod"), halted)
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL()}

	stdout, stderr, code := runBin(t, bin, env, "apps", "ls", "-o", "json")
	if code != 0 {
		t.Fatalf("apps ls: exit %d\n%s%s", code, stdout, stderr)
	}
	var rep AppsReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	want := []AppReport{
		{Name: "web", Default: true, Installer: "tarball", HasPlan: true, StartVersion: "1.3.2", TargetVersion: "1.4.0", Mode: "enabled",
			Groups: 2, GroupsDone: 1, State: "rolling_out"},
		{Name: "db", Installer: "script", HasPlan: true, StartVersion: "14.1.0", TargetVersion: "14.2.0", Mode: "paused",
			Groups: 2, Halted: []string{"prod"}, State: "halted"},
	}
	if diff := cmp.Diff(want, rep.Apps); diff != "" {
		t.Errorf("apps ls -o json (-want +got):\n%s", diff)
	}
	stdout, _, _ = runBin(t, bin, env, "apps", "ls")
	for _, w := range []string{"APP", "web (default)  tarball", "db             script", "1/2", "halted: prod"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("apps ls lacks %q:\n%s", w, stdout)
		}
	}
	checkWidth(t, stdout)
}

// TestConfigApplyAppsBinary (issue 26, point 1 and 5): config apply names
// the app of a fleet without apps and adds another: every plan key keeps
// its revision (nothing moves, no rollout restarts). Each app's change is
// then checked against its own statuses with its overrides; the default
// app cannot change; an app with a plan is removed only with --force.
func TestConfigApplyAppsBinary(t *testing.T) {
	e := newEnv(t)
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")}
	e.putConfig(cfg)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	e.putStatus(groupStatus(rollout.StateActive)) // prod rolling out
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL(), "FLEETCTL_ACTOR=alice"}
	dir := t.TempDir()
	apply := func(yaml string, extra ...string) (string, string, int) {
		t.Helper()
		path := filepath.Join(dir, "fleet.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return runBin(t, bin, env, append([]string{"config", "apply", "-f", path}, extra...)...)
	}
	groups := `groups:
  - name: staging
  - name: prod
`
	before := e.planRevisions()
	stdout, stderr, code := apply(groups + `apps:
  - name: web
  - name: db
    installer: script
    overrides:
      prod: {max_in_flight: "5%"}
`)
	if code != 0 {
		t.Fatalf("config apply naming web and adding db: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, w := range []string{`the fleet's app named "web" (default app)`, `app "db" added (installer script)`,
		`app "db": group "prod" overrides {"max_in_flight":"5%"}`, `The fleet's app is now named "web"`, "no group restarts"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("config apply output lacks %q:\n%s", w, stdout)
		}
	}
	if diff := cmp.Diff(before, e.planRevisions()); diff != "" {
		t.Errorf("naming the app moved plan keys (-before +after):\n%s", diff)
	}
	if got := e.config().Value; !slices.Equal(got.AppNames(), []string{"web", "db"}) {
		t.Errorf("apps %v after apply", got.AppNames())
	}
	// status without --app now refuses (two apps); --app web is the
	// same rollout as before.
	if stdout, _, code := runBin(t, bin, env, "status", "--app", "web"); code != 0 || !strings.Contains(stdout, "1.4.0") || !strings.Contains(stdout, "active") {
		t.Errorf("status --app web after naming: exit %d\n%s", code, stdout)
	}

	rev := e.configRevision()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"web's prod is active: its override cannot change", groups + `apps:
  - name: web
    overrides:
      prod: {max_in_flight: "50%"}
  - name: db
    installer: script
    overrides:
      prod: {max_in_flight: "5%"}
`, `app web: config change rejected: group "prod" is active; its schedule cannot change`},
		{"the default app cannot change", groups + `apps:
  - name: db
  - name: web
`, `the default app (the first of apps) is "web" and cannot become "db"`},
		{"an override of a group the config lacks", groups + `apps:
  - name: web
  - name: db
    overrides:
      lab: {max_in_flight: "5%"}
`, `overrides group "lab", which the config does not have`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := apply(tc.yaml)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, want a refusal with %q:\n%s", code, tc.want, stderr)
			}
			if got := e.configRevision(); got != rev {
				t.Errorf("refused apply wrote the config (revision %d → %d)", rev, got)
			}
		})
	}

	// db's prod rolling out: db's override of prod is frozen, web's
	// staging (unstarted) may change.
	db, _ := kv.NS(e.config().Value, "db")
	dbProd := groupStatus(rollout.StateCanary)
	dbProd.TargetVersion, dbProd.StartVersion = "14.2.0", "14.1.0"
	e.put(e.fleet.Plan, db.Group("prod"), dbProd)
	e.put(e.fleet.Plan, db.Spec(), rollout.DefaultSpec("14.1.0", "14.2.0"))
	_, stderr, code = apply(groups + `apps:
  - name: web
  - name: db
    installer: script
    overrides:
      prod: {max_in_flight: "10%"}
`)
	if code == 0 || !strings.Contains(stderr, `app db: config change rejected: group "prod" is canary`) {
		t.Errorf("db's active prod override changed: exit %d\n%s", code, stderr)
	}
	stdout, stderr, code = apply(groups + `apps:
  - name: web
    overrides:
      staging: {canary_count: 2}
  - name: db
    installer: script
    overrides:
      prod: {max_in_flight: "5%"}
`)
	if code != 0 || !strings.Contains(stdout, `app "web": group "staging" overrides {"canary_count":2}`) {
		t.Errorf("web's unstarted staging override: exit %d\n%s%s", code, stdout, stderr)
	}

	// Removing db, which has a plan: refused without --force, saying
	// what happens to its keys and hosts.
	rev = e.configRevision()
	noDB := groups + `apps:
  - name: web
    overrides:
      staging: {canary_count: 2}
`
	_, stderr, code = apply(noDB)
	for _, w := range []string{`app "db" has a plan 14.1.0 → 14.2.0; groups rolling out: prod canary`, "db.spec", "stay as they are",
		"fleetctl pause --app db", "--force", "nothing was written"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("removing db: stderr lacks %q:\n%s", w, stderr)
		}
	}
	if code == 0 || e.configRevision() != rev {
		t.Errorf("removing db without --force: exit %d, config revision %d → %d", code, rev, e.configRevision())
	}
	_, _, code = runBin(t, bin, env, "apps", "rm", "db")
	if code == 0 || e.configRevision() != rev {
		t.Errorf("apps rm db without --force: exit %d", code)
	}
	before = e.planRevisions()
	if stdout, stderr, code := apply(noDB, "--force"); code != 0 || !strings.Contains(stdout, `app "db" removed`) {
		t.Errorf("removing db with --force: exit %d\n%s%s", code, stdout, stderr)
	}
	if diff := cmp.Diff(before, e.planRevisions()); diff != "" {
		t.Errorf("removing an app touched fleet_plan (-before +after):\n%s", diff)
	}
}

// TestUpgradeSingleAppFleetBinary (issue 26, point 5): a fleet without apps
// names its app with "apps add NAME --default": every plan key keeps its
// revision, status reads the same rollout, and the command a tired operator
// types first (apps add db) is refused with the way to do it.
func TestUpgradeSingleAppFleetBinary(t *testing.T) {
	e := newEnv(t)
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")}
	e.putConfig(cfg)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	staging := groupStatus(rollout.StateDone)
	staging.Group = "staging"
	e.putStatus(staging)
	e.putStatus(groupStatus(rollout.StateActive))
	bin := fleetctlBin(t)
	env := []string{"NATS_URL=" + e.srv.URL(), "FLEETCTL_ACTOR=alice"}
	status := func() StatusReport {
		t.Helper()
		stdout, stderr, code := runBin(t, bin, env, "status", "-o", "json")
		var rep StatusReport
		if err := json.Unmarshal([]byte(stdout), &rep); code != 0 || err != nil {
			t.Fatalf("status: exit %d %v\n%s", code, err, stderr)
		}
		for i := range rep.Groups {
			rep.Groups[i].At = time.Time{}
		}
		return rep
	}
	statusBefore := status()
	before := e.planRevisions()
	rev := e.configRevision()

	_, stderr, code := runBin(t, bin, env, "apps", "add", "db", "--installer", "script")
	if code != cliutil.ExitUsage || !strings.Contains(stderr, "fleetctl apps add NAME --default") || e.configRevision() != rev {
		t.Errorf("apps add db on an unnamed fleet: exit %d, config %d → %d:\n%s", code, rev, e.configRevision(), stderr)
	}
	stdout, stderr, code := runBin(t, bin, env, "apps", "add", "web", "--default", "--reason", "issue 26 upgrade")
	if code != 0 || !strings.Contains(stdout, `The fleet's app is now named "web"`) || !strings.Contains(stdout, "its plan (1.3.2 → 1.4.0) and its 2 group statuses carry on") {
		t.Fatalf("apps add web --default: exit %d\n%s%s", code, stdout, stderr)
	}
	if diff := cmp.Diff(before, e.planRevisions()); diff != "" {
		t.Errorf("naming the app moved plan keys (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(statusBefore, status()); diff != "" {
		t.Errorf("status changed by naming the app (-before +after):\n%s", diff)
	}
	if _, stderr, code := runBin(t, bin, env, "apps", "add", "api", "--default"); code == 0 || !strings.Contains(stderr, `already named "web"`) {
		t.Errorf("a second --default: exit %d: %s", code, stderr)
	}
	if stdout, stderr, code := runBin(t, bin, env, "apps", "add", "db", "--installer", "script"); code != 0 || !strings.Contains(stdout, `app "db" added (installer script)`) {
		t.Errorf("apps add db after naming: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, stderr, code := runBin(t, bin, env, "apps", "rm", "web"); code == 0 || !strings.Contains(stderr, "cannot be removed") {
		t.Errorf("apps rm of the default app: exit %d: %s", code, stderr)
	}
	if diff := cmp.Diff(before, e.planRevisions()); diff != "" {
		t.Errorf("adding db moved plan keys (-before +after):\n%s", diff)
	}
	// The audit trail has the naming, fleet-wide.
	stdout, _, _ = runBin(t, bin, env, "history", "-o", "json")
	if !strings.Contains(stdout, `"command": "apps add"`) {
		t.Errorf("history lacks apps add:\n%s", stdout)
	}
}
