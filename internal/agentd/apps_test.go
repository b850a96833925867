package agentd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/releases"
)

// setAppPlan sets app ns's plan: spec start→target and group blue's status
// done on it, with no jitter, so that every agent installs at once.
func setAppPlan(t *testing.T, ctx context.Context, fleet *kv.Fleet, ns kv.AppNS, group, start, target string, minHealthy time.Duration) {
	t.Helper()
	if _, err := kv.Save(ctx, fleet.Plan, ns.Spec(), rollout.DefaultSpec(start, target), 0); err != nil {
		t.Fatal(err)
	}
	st := rollout.GroupStatus{V: 1, Group: group, State: rollout.StateDone, TargetVersion: target, StartVersion: start,
		Progress: 1, Mode: rollout.ModeEnabled, HealthTimeout: rollout.Duration(20 * time.Second), MinHealthyTime: rollout.Duration(minHealthy)}
	if _, err := kv.Save(ctx, fleet.Plan, ns.Group(group), st, 0); err != nil {
		t.Fatal(err)
	}
}

// probeLog records, per app, when its health URL was probed: the health
// step of its install.
type probeLog struct {
	mu    sync.Mutex
	first map[string]time.Time
	last  map[string]time.Time
}

func (p *probeLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	app := strings.TrimPrefix(r.URL.Path, "/")
	now := time.Now()
	p.mu.Lock()
	if _, ok := p.first[app]; !ok {
		p.first[app] = now
	}
	p.last[app] = now
	p.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// window is when app's health was probed.
func (p *probeLog) window(app string) (first, last time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first[app], p.last[app]
}

// lastAppBeat is the last heartbeat on subject.
func lastAppBeat(ctx context.Context, fleet *kv.Fleet, subject string) (*heartbeat.Heartbeat, error) {
	m, err := fleet.HB.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return nil, fmt.Errorf("last heartbeat on %s: %w", subject, err)
	}
	return heartbeat.DecodeFrom(m.Subject, m.Data)
}

// TestTwoAppsOneDaemon (issue 26 point 2): one 'agentd run' process runs
// the host's default app (at the root) and app db (at <root>/apps/db),
// each following its own plan to its own target, with one NATS connection.
// Both want to install at once; the installs run one after the other (the
// health windows do not overlap and the log says one waited), both
// converge, each tree holds only its own versions, journal and links, the
// default app heartbeats on today's subject with no app and db on
// fleet.hb.db.green.<id> (db's own group) naming app and installer, 'agentd status' shows
// both, and the metrics carry app="db" for db only.
//
// Fails on the code before apps: --app was the supervised binary, so
// 'agentd enable --app db' set no app up and nothing ran app db's plan.
func TestTwoAppsOneDaemon(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx := context.Background()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	dbNS := kv.OtherNS("db")
	// Long enough healthy times that two installs at once would overlap.
	// db's hosts are in another group than the host's default app: an
	// app's group is its update.yaml's.
	setAppPlan(t, ctx, fleet, kv.AppNS{}, "blue", "1.0.0", "2.0.0", 1500*time.Millisecond)
	setAppPlan(t, ctx, fleet, dbNS, "green", "5.0.0", "6.0.0", 1500*time.Millisecond)

	webRel, dbRel := releases.NewServer(nil), releases.NewServer(nil)
	if err := webRel.Add("2.0.0", releases.Good); err != nil {
		t.Fatal(err)
	}
	if err := dbRel.Add("6.0.0", releases.Good); err != nil {
		t.Fatal(err)
	}
	webSite, dbSite := httptest.NewServer(webRel), httptest.NewServer(dbRel)
	t.Cleanup(webSite.Close)
	t.Cleanup(dbSite.Close)
	probes := &probeLog{first: map[string]time.Time{}, last: map[string]time.Time{}}
	health := httptest.NewServer(probes)
	t.Cleanup(health.Close)

	root := t.TempDir()
	textfile := filepath.Join(t.TempDir(), "agentd.prom")
	runCmd := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("agentd %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	// The default app, then db: enable with a supervised app needs no bus.
	runCmd("enable", "--root", root, "--nats", srv.URL(), "--group", "blue", "--url-template", releases.URLTemplate(webSite.URL),
		"--process", "app", "--bin-dir", filepath.Join(root, "bin"), "--health-url", health.URL+"/web")
	runCmd("enable", "--root", root, "--app", "db", "--group", "green", "--url-template", releases.URLTemplate(dbSite.URL),
		"--process", "app", "--bin-dir", filepath.Join(root, "dbbin"), "--health-url", health.URL+"/db")
	if _, err := os.Stat(filepath.Join(root, "apps", "db", install.UpdateFileName)); err != nil {
		t.Fatalf("enable --app db wrote no update.yaml under apps/db: %v", err)
	}

	// --hostname is the host's: every app's heartbeats carry it.
	d := startAgentd(t, bin, "run", "--root", root, "--heartbeat-interval", "1s", "--metrics-textfile", textfile, "--hostname", "host-a")
	id := readID(t, root)
	natstest.Eventually(t, 60*time.Second, func() error {
		web, err := install.LoadUpdateFile(root)
		if err != nil {
			return err
		}
		db, err := install.LoadUpdateFile(filepath.Join(root, "apps", "db"))
		if err != nil {
			return err
		}
		if web.Status.ActiveVersion != "2.0.0" || db.Status.ActiveVersion != "6.0.0" {
			return fmt.Errorf("default app runs %q (want 2.0.0), db %q (want 6.0.0)", web.Status.ActiveVersion, db.Status.ActiveVersion)
		}
		// The status is saved before the journal ends.
		for _, dir := range []string{root, filepath.Join(root, "apps", "db")} {
			if j, err := install.LoadJournal(install.Tree{Root: dir}); err != nil || j != nil && j.Step != install.StepUndone {
				return fmt.Errorf("%s: journal %+v, %v", dir, j, err)
			}
		}
		return nil
	})

	// One at a time: the health windows (each install's health step) do
	// not overlap, and one app said it waited for the other.
	wf, wl := probes.window("web")
	df, dl := probes.window("db")
	if wf.IsZero() || df.IsZero() {
		t.Fatalf("health probes: web %v, db %v: both installs should have probed", wf, df)
	}
	if wf.Before(dl) && df.Before(wl) {
		t.Errorf("the installs overlapped: web probed %s..%s, db %s..%s", wf.Format(time.StampMilli), wl.Format(time.StampMilli),
			df.Format(time.StampMilli), dl.Format(time.StampMilli))
	}
	if !strings.Contains(d.output(), "waiting for another app's install on this host to end") {
		t.Errorf("no app waited for the other's install:\n%s", d.output())
	}

	// Each tree its own: versions, journal, links.
	for _, c := range []struct{ dir, bin, have, not string }{
		{root, filepath.Join(root, "bin"), "2.0.0", "6.0.0"},
		{filepath.Join(root, "apps", "db"), filepath.Join(root, "dbbin"), "6.0.0", "2.0.0"},
	} {
		tree := install.Tree{Root: c.dir, BinDir: c.bin}
		if _, err := os.Stat(tree.MarkerPath(c.have)); err != nil {
			t.Errorf("%s: version %s not complete: %v", c.dir, c.have, err)
		}
		if _, err := os.Stat(tree.VersionDir(c.not)); err == nil {
			t.Errorf("%s holds the other app's version %s", c.dir, c.not)
		}
		if j, err := install.LoadJournal(tree); err != nil || j != nil && j.Step != install.StepUndone {
			t.Errorf("%s: journal %+v, %v: want none under way", c.dir, j, err)
		}
		link, err := os.Readlink(filepath.Join(c.bin, "app"))
		if err != nil || !strings.HasPrefix(link, tree.VersionDir(c.have)+string(filepath.Separator)) {
			t.Errorf("%s/app -> %q (%v), want into %s", c.bin, link, err, tree.VersionDir(c.have))
		}
	}

	// Heartbeats: the default app's as before, db's on its own subject.
	natstest.Eventually(t, 30*time.Second, func() error {
		web, err := lastAppBeat(ctx, fleet, heartbeat.SubjectFor("blue", id))
		if err != nil {
			return err
		}
		db, err := lastAppBeat(ctx, fleet, dbNS.HBSubject("green", id))
		if err != nil {
			return err
		}
		if web.App != "" || web.ActiveVersion != "2.0.0" || db.App != "db" || db.Installer != rollout.InstallerTarball || db.ActiveVersion != "6.0.0" {
			return fmt.Errorf("default app's heartbeat app %q active %q; db's app %q installer %q active %q", web.App, web.ActiveVersion, db.App, db.Installer, db.ActiveVersion)
		}
		if web.Hostname != "host-a" || db.Hostname != "host-a" {
			return fmt.Errorf("host names: default app's %q, db's %q, want run --hostname's host-a in both", web.Hostname, db.Hostname)
		}
		return nil
	})

	// One connection for both apps.
	var conns []string
	for _, n := range srv.ClientNames() {
		if strings.Contains(n, string(id)) {
			conns = append(conns, n)
		}
	}
	if len(conns) != 1 {
		t.Errorf("agentd's connections: %q, want one for both apps", conns)
	}

	// status: today's fields for the default app, and every app.
	out, err := exec.Command(bin, "status", "--root", root).Output()
	var rep agentd.StatusReport
	if err != nil || json.Unmarshal(out, &rep) != nil {
		t.Fatalf("agentd status: %v\n%s", err, out)
	}
	if rep.Installed != "2.0.0" || rep.Desired != "2.0.0" || len(rep.Apps) != 2 || !rep.Apps[0].Default || rep.Apps[1].App != "db" ||
		rep.Apps[1].Installed != "6.0.0" || rep.Apps[1].Desired != "6.0.0" || rep.Apps[1].AgentID != string(id) {
		t.Errorf("agentd status:\n%s", out)
	}
	out, err = exec.Command(bin, "status", "--root", root, "--app", "db", "-o", "table").Output()
	if err != nil || !strings.Contains(string(out), "(default)  blue") || !regexpMatch(`db\s+green\s+true\s+6\.0\.0\s+6\.0\.0\s+ok`, string(out)) {
		t.Errorf("agentd status -o table: %v\n%s", err, out)
	}

	// Metrics: the default app's series as before, db's with app="db".
	natstest.Eventually(t, 30*time.Second, func() error {
		b, err := os.ReadFile(textfile)
		if err != nil {
			return err
		}
		s := string(b)
		for _, want := range []string{`fleetwave_agent_installs_total{result="ok"} 1`, `fleetwave_agent_installs_total{app="db",result="ok"} 1`,
			`fleetwave_agent_bus_connected 1`, `fleetwave_agent_info{agentd_version=`} {
			if !strings.Contains(s, want) {
				return fmt.Errorf("textfile has no %s:\n%s", want, s)
			}
		}
		if strings.Contains(s, `fleetwave_agent_bus_connected{`) {
			return fmt.Errorf("bus_connected is the host's, with no label:\n%s", s)
		}
		return nil
	})
}

// readID is the host's agent id.
func readID(t *testing.T, root string) rollout.AgentID {
	t.Helper()
	id, err := install.LoadAgentID(root)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestDisableRemoveApp (issue 26 point 2): 'agentd disable --app db
// --remove' sends db's last heartbeat with left set, removes
// apps/db/update.yaml and keeps its versions; the next 'agentd run' runs
// the default app only. Without the bus the config goes all the same and
// the command says the controllers drop the host at the heartbeat's
// expiry. The default app cannot be removed this way, and --app naming an
// app the host does not have is a usage error listing those it has.
//
// Fails on the code before apps: disable had no --remove (exit 2).
func TestDisableRemoveApp(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx := context.Background()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	agentdOK := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("agentd %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	agentdOK("enable", "--root", root, "--nats", srv.URL(), "--group", "blue")
	agentdOK("enable", "--root", root, "--app", "db")
	agentdOK("enable", "--root", root, "--app", "cache")
	id := readID(t, root)
	// Something installed, which --remove keeps.
	kept := filepath.Join(root, "apps", "db", "versions", "1.0.0", "VERSION")
	if err := os.MkdirAll(filepath.Dir(kept), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kept, []byte("1.0.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Bad input first: nothing changes.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"disable", "--root", root, "--remove"}, "--remove needs --app NAME"},
		{[]string{"disable", "--root", root, "--app", "dbb", "--remove"}, `app "dbb" is not set up on this host`},
		{[]string{"disable", "--root", root, "--app", "DB", "--remove"}, "invalid app name"},
		{[]string{"disable", "--root", root, "--app", "db", "--purge"}, "--purge goes with --remove"},
		{[]string{"status", "--root", root, "--app", "nope"}, "this host's other apps: [cache db]"},
	} {
		out, err := exec.Command(bin, c.args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), c.want) {
			t.Errorf("agentd %v: %v\n%s\nwant exit 2 saying %q", c.args, err, out, c.want)
		}
	}

	out := agentdOK("disable", "--root", root, "--app", "db", "--remove")
	if !strings.Contains(out, "told the controllers this host left app db") {
		t.Errorf("disable --remove says:\n%s", out)
	}
	hb, err := lastAppBeat(ctx, fleet, kv.OtherNS("db").HBSubject("blue", id))
	if err != nil || !hb.Left || hb.App != "db" || hb.AgentID != id {
		t.Fatalf("db's last heartbeat: %+v, %v; want left from %s", hb, err, id)
	}
	if _, err := os.Stat(filepath.Join(root, "apps", "db", install.UpdateFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("apps/db/update.yaml still there: %v", err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("the installed version went too: %v", err)
	}

	// Without the bus: removed all the same, and said.
	out = agentdOK("disable", "--root", root, "--app", "cache", "--remove", "--purge", "--nats", "nats://127.0.0.1:1")
	if !strings.Contains(out, "they drop it once its last heartbeat expires") {
		t.Errorf("disable --remove with no bus says:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(root, "apps", "cache")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--purge left apps/cache: %v", err)
	}

	// An app whose update.yaml is broken does not stop the others.
	if err := os.MkdirAll(filepath.Join(root, "apps", "broken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "apps", "broken", install.UpdateFileName), []byte("version: v1\nkind: nonsense\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The next start runs the default app only: db's last word stays left.
	d := startAgentd(t, bin, "run", "--root", root, "--heartbeat-interval", "1s")
	natstest.Eventually(t, 30*time.Second, func() error {
		if n := strings.Count(d.output(), "agent started"); n != 1 {
			return fmt.Errorf("%d apps started, want 1:\n%s", n, d.output())
		}
		if !strings.Contains(d.output(), `msg="app not run: its update.yaml is not usable`) || !strings.Contains(d.output(), "app=broken") {
			return fmt.Errorf("the broken app is not said:\n%s", d.output())
		}
		if _, err := lastAppBeat(ctx, fleet, heartbeat.SubjectFor("blue", id)); err != nil {
			return err
		}
		return nil
	})
	if strings.Contains(d.output(), "app=db") {
		t.Errorf("app db still runs:\n%s", d.output())
	}
	if hb, err := lastAppBeat(ctx, fleet, kv.OtherNS("db").HBSubject("blue", id)); err != nil || !hb.Left {
		t.Errorf("db's last heartbeat after the restart: %+v, %v; want the left one", hb, err)
	}
}

// TestLegacyAppFlag: a host set up before apps passes --app NAME for the
// binary agentd supervises (install.sh's AGENTD_ARGS): while the root's
// update.yaml records process NAME and no app NAME is set up, --app NAME
// still means that, with a warning, and acts on the default app.
func TestLegacyAppFlag(t *testing.T) {
	bin := buildAgentd(t)
	root := t.TempDir()
	out, err := exec.Command(bin, "enable", "--root", root, "--group", "blue", "--url-template", "https://dl.example/{{.Version}}/app.tar.gz",
		"--process", "app", "--bin-dir", filepath.Join(root, "bin")).CombinedOutput()
	if err != nil {
		t.Fatalf("enable: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "disable", "--root", root, "--app", "app").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "reading --app app as --process app") || !strings.Contains(string(out), "automatic updates disabled") {
		t.Fatalf("disable --app app on a legacy host: %v\n%s", err, out)
	}
	uf, err := install.LoadUpdateFile(root)
	if err != nil || uf.Spec.Enabled || uf.Spec.App.Process != "app" {
		t.Errorf("root update.yaml after legacy disable: %+v, %v", uf, err)
	}
	if _, err := os.Stat(filepath.Join(root, "apps")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a legacy --app set an app up: %v", err)
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// TestPlanFollowerOfAnApp: a follower of app db reads db.spec and
// db.group.<g> only: the default app's spec and status, another app's, and
// a republished default-app value do not move it, and its changes arrive
// on fleet.plan.db.*. A default-app follower is not moved by db's keys.
func TestPlanFollowerOfAnApp(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	db, web := kv.OtherNS("db"), kv.OtherNS("web")
	save := func(key string, v any) uint64 {
		t.Helper()
		var rev uint64
		if e, err := kv.Get[json.RawMessage](ctx, fleet.Plan, key); err == nil {
			rev = e.Revision
		}
		n, err := kv.Save(ctx, fleet.Plan, key, v, rev)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	status := func(target string) rollout.GroupStatus {
		return rollout.GroupStatus{V: 1, Group: "blue", State: rollout.StateActive, TargetVersion: target, StartVersion: "1.0.0", Mode: rollout.ModeEnabled}
	}
	save(kv.KeySpec, rollout.DefaultSpec("1.0.0", "9.0.0"))
	save(kv.GroupKey("blue"), status("9.0.0"))
	specRev := save(db.Spec(), rollout.DefaultSpec("1.0.0", "2.0.0"))
	clk := clock.NewManual(time.Now())
	var logs natstest.Buffer
	dbF := &agentd.PlanFollower{NC: srv.Conn("agent"), Group: "blue", NS: db, Clock: clk, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	defF := &agentd.PlanFollower{NC: srv.Conn("agent2"), Group: "blue", Clock: clk, Log: natstest.Logger(t)}
	for _, f := range []*agentd.PlanFollower{dbF, defF} {
		go func() { _ = f.Run(ctx) }()
	}
	natstest.Eventually(t, 10*time.Second, func() error {
		if p := dbF.Plan(); p.SpecRev != specRev || p.Spec.TargetVersion != "2.0.0" || p.StatusRev != 0 {
			return fmt.Errorf("db's plan at start: %+v", p)
		}
		if p := defF.Plan(); p.Spec.TargetVersion != "9.0.0" {
			return fmt.Errorf("default app's plan at start: %+v", p)
		}
		return nil
	})
	// Live: db's status and a new db target arrive; web's and the default
	// app's writes do not reach db's follower.
	stRev := save(db.Group("blue"), status("2.0.0"))
	save(web.Spec(), rollout.DefaultSpec("1.0.0", "7.0.0"))
	save(web.Group("blue"), status("7.0.0"))
	save(kv.KeySpec, rollout.DefaultSpec("1.0.0", "9.1.0"))
	natstest.Eventually(t, 10*time.Second, func() error {
		if p := dbF.Plan(); p.StatusRev != stRev || p.Status.TargetVersion != "2.0.0" || p.Spec.TargetVersion != "2.0.0" {
			return fmt.Errorf("db's plan: %+v", p)
		}
		if p := defF.Plan(); p.Spec.TargetVersion != "9.1.0" {
			return fmt.Errorf("default app's plan: %+v", p)
		}
		return nil
	})
	// Reflection: the default app's stored spec (target 9.1.0) and web's
	// status answered onto db's subjects: their Nats-Subject headers name
	// spec and web.group.blue, not db's keys.
	attacker := srv.Conn("attacker")
	for _, r := range []struct{ key, onto string }{{kv.KeySpec, db.Spec()}, {web.Group("blue"), db.Group("blue")}} {
		if err := attacker.PublishRequest("$JS.API.DIRECT.GET."+kv.PlanStream+"."+kv.KeySubject(kv.BucketPlan, r.key),
			kv.PlanRepublish+r.onto, nil); err != nil {
			t.Fatal(err)
		}
		natstest.Eventually(t, 10*time.Second, func() error {
			if !strings.Contains(logs.String(), `for key \"`+r.key+`\"`) {
				return fmt.Errorf("db's follower does not say it ignored %s:\n%s", r.key, logs.String())
			}
			return nil
		})
		clk.Advance(time.Minute) // past the log's rate limit
	}
	if p := dbF.Plan(); p.Spec.TargetVersion != "2.0.0" || p.Status.TargetVersion != "2.0.0" {
		t.Errorf("db's plan moved by another app's values: %+v", p)
	}
	specRev = save(db.Spec(), rollout.DefaultSpec("1.0.0", "2.1.0"))
	natstest.Eventually(t, 10*time.Second, func() error {
		if p := dbF.Plan(); p.SpecRev != specRev || p.Spec.TargetVersion != "2.1.0" {
			return fmt.Errorf("db's new target not followed: %+v", p)
		}
		if p := defF.Plan(); p.Spec.TargetVersion != "9.1.0" {
			return fmt.Errorf("db's target moved the default app: %+v", p)
		}
		return nil
	})
}

// TestAppsEndToEnd (issue 26): a real controller (the config's apps: web,
// the default, and db) and two real agentd processes, one per host, each
// running both apps (web at the root, db under apps/db). Both apps roll
// out at once to different targets; db's release does not start, so db's
// group halts while web completes: each app's heartbeats, plan and
// inventory are its own end to end.
func TestAppsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: real controller and agentd processes")
	}
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rollout.DefaultConfig()
	grp := rollout.DefaultGroup("blue")
	grp.CanaryCount, grp.MaxInFlight, grp.JitterSeconds = 1, 50, 0
	grp.MinHealthyTime, grp.HealthTimeout = rollout.Duration(500*time.Millisecond), rollout.Duration(20*time.Second)
	cfg.Groups = []rollout.GroupConfig{grp}
	cfg.Apps = []rollout.AppConfig{{Name: "web"}, {Name: "db"}}
	if _, err := kv.Save(ctx, fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	web, _ := kv.NS(cfg, "web")
	db, _ := kv.NS(cfg, "db")
	c, err := controller.New(fleet, controller.Options{
		ID: "c1", StatsInterval: 300 * time.Millisecond, HeartbeatInterval: time.Second, AgentExpiry: time.Minute,
		ReconcileInterval: 200 * time.Millisecond, Clock: clock.Real{}, Log: natstest.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctlDone := make(chan error, 1)
	go func() { ctlDone <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ctlDone })

	webRel, dbRel := releases.NewServer(nil), releases.NewServer(nil)
	for _, r := range []struct {
		s *releases.Server
		v string
		b releases.Behaviour
	}{{webRel, "1.0.0", releases.Good}, {webRel, "2.0.0", releases.Good}, {dbRel, "5.0.0", releases.Good}, {dbRel, "6.0.0", releases.Crash}} {
		if err := r.s.Add(r.v, r.b); err != nil {
			t.Fatal(err)
		}
	}
	webSite, dbSite := httptest.NewServer(webRel), httptest.NewServer(dbRel)
	t.Cleanup(webSite.Close)
	t.Cleanup(dbSite.Close)

	setSpec := func(ns kv.AppNS, start, target string) {
		t.Helper()
		var rev uint64
		if e, err := kv.Get[rollout.Spec](ctx, fleet.Plan, ns.Spec()); err == nil {
			rev = e.Revision
		}
		spec := rollout.DefaultSpec(start, target)
		spec.Critical = true // start now, not in a maintenance window
		if _, err := kv.Save(ctx, fleet.Plan, ns.Spec(), spec, rev); err != nil {
			t.Fatal(err)
		}
	}
	// Every host on the start versions first.
	setSpec(web, "1.0.0", "1.0.0")
	setSpec(db, "5.0.0", "5.0.0")
	var roots []string
	for i := range 2 {
		root := t.TempDir()
		roots = append(roots, root)
		for _, args := range [][]string{
			{"enable", "--root", root, "--nats", srv.URL(), "--group", "blue", "--hostname", fmt.Sprintf("host-%d", i),
				"--url-template", releases.URLTemplate(webSite.URL), "--process", "app", "--bin-dir", filepath.Join(root, "bin")},
			{"enable", "--root", root, "--app", "db", "--url-template", releases.URLTemplate(dbSite.URL), "--process", "app",
				"--bin-dir", filepath.Join(root, "dbbin")},
		} {
			if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
				t.Fatalf("agentd %v: %v\n%s", args, err, out)
			}
		}
		startAgentd(t, bin, "run", "--root", root, "--heartbeat-interval", "1s")
	}
	active := func(root, app string) string {
		uf, err := install.LoadUpdateFile(appDirOf(root, app))
		if err != nil {
			return err.Error()
		}
		return uf.Status.ActiveVersion
	}
	natstest.Eventually(t, 90*time.Second, func() error {
		for _, root := range roots {
			if w, d := active(root, ""), active(root, "db"); w != "1.0.0" || d != "5.0.0" {
				return fmt.Errorf("%s runs web %q, db %q; want 1.0.0 and 5.0.0", root, w, d)
			}
		}
		return nil
	})
	// The controller counts each app's hosts in that app's inventory.
	natstest.Eventually(t, 30*time.Second, func() error {
		for _, app := range []string{"web", "db"} {
			inv := c.AppInventory(app)
			if inv == nil || inv.Len() != 2 {
				return fmt.Errorf("app %s's inventory: %v", app, inv)
			}
		}
		return nil
	})

	// Both roll out at once; db's 6.0.0 does not start.
	setSpec(web, "1.0.0", "2.0.0")
	setSpec(db, "5.0.0", "6.0.0")
	natstest.Eventually(t, 120*time.Second, func() error {
		st, err := fleet.ReadState(ctx)
		if err != nil {
			return err
		}
		w, d := st.ForApp(web).Groups["blue"].Value, st.ForApp(db).Groups["blue"].Value
		if w.TargetVersion != "2.0.0" || w.State != rollout.StateDone || w.Halted {
			return fmt.Errorf("web's group: %s target %s halted %v (%s)", w.State, w.TargetVersion, w.Halted, w.HaltReason)
		}
		if d.TargetVersion != "6.0.0" || !d.Halted {
			return fmt.Errorf("db's group: %s target %s halted %v", d.State, d.TargetVersion, d.Halted)
		}
		return nil
	})
	natstest.Eventually(t, 60*time.Second, func() error {
		for _, root := range roots {
			if w, d := active(root, ""), active(root, "db"); w != "2.0.0" || d != "5.0.0" {
				return fmt.Errorf("%s runs web %q, db %q; want 2.0.0 and 5.0.0 (db halted)", root, w, d)
			}
		}
		return nil
	})
}

func appDirOf(root, app string) string {
	if app == "" {
		return root
	}
	return filepath.Join(root, "apps", app)
}

// TestTwoAppsKilledMidInstall (issue 26 point 2): agentd running two apps
// that both want to install is killed (SIGKILL, the crash tests'
// failpoint) at a step of whichever install runs first: swap, health,
// commit. The app that waited has not been touched; after a restart both
// converge, and each tree is consistent (its own versions, no journal
// under way, its links into its own tree).
func TestTwoAppsKilledMidInstall(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx := context.Background()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	dbNS := kv.OtherNS("db")
	setAppPlan(t, ctx, fleet, kv.AppNS{}, "blue", "1.0.0", "2.0.0", 300*time.Millisecond)
	setAppPlan(t, ctx, fleet, dbNS, "blue", "5.0.0", "6.0.0", 300*time.Millisecond)
	webRel, dbRel := releases.NewServer(nil), releases.NewServer(nil)
	if err := webRel.Add("2.0.0", releases.Good); err != nil {
		t.Fatal(err)
	}
	if err := dbRel.Add("6.0.0", releases.Good); err != nil {
		t.Fatal(err)
	}
	webSite, dbSite := httptest.NewServer(webRel), httptest.NewServer(dbRel)
	t.Cleanup(webSite.Close)
	t.Cleanup(dbSite.Close)

	for _, step := range []string{"swap", "health", "commit"} {
		t.Run(step, func(t *testing.T) {
			root := t.TempDir()
			for _, args := range [][]string{
				{"enable", "--root", root, "--nats", srv.URL(), "--group", "blue", "--url-template", releases.URLTemplate(webSite.URL),
					"--process", "app", "--bin-dir", filepath.Join(root, "bin")},
				{"enable", "--root", root, "--app", "db", "--url-template", releases.URLTemplate(dbSite.URL), "--process", "app",
					"--bin-dir", filepath.Join(root, "dbbin")},
			} {
				if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
					t.Fatalf("agentd %v: %v\n%s", args, err, out)
				}
			}
			trees := map[string]install.Tree{
				"":   {Root: root, BinDir: filepath.Join(root, "bin")},
				"db": {Root: filepath.Join(root, "apps", "db"), BinDir: filepath.Join(root, "dbbin")},
			}
			killed := startAgentdEnv(t, bin, []string{install.FailpointEnv + "=" + step}, "run", "--root", root, "--heartbeat-interval", "1s")
			if code := killed.wait(t, 60*time.Second); code != -1 {
				t.Fatalf("agentd with failpoint %s: exit %d, want killed\n%s", step, code, killed.output())
			}
			// One install was under way at step; the other app had not begun.
			under := 0
			for app, tree := range trees {
				j, err := install.LoadJournal(tree)
				if err != nil {
					t.Fatal(err)
				}
				if j != nil && j.Step == install.Step(step) {
					under++
				} else if _, err := os.Stat(tree.VersionsDir()); err == nil {
					t.Errorf("app %s: touched while the other installed: journal %+v", appLabel(app), j)
				}
			}
			if under != 1 {
				t.Fatalf("%d installs at step %s when killed, want 1", under, step)
			}

			d := startAgentd(t, bin, "run", "--root", root, "--heartbeat-interval", "1s")
			natstest.Eventually(t, 60*time.Second, func() error {
				for app, want := range map[string]string{"": "2.0.0", "db": "6.0.0"} {
					uf, err := install.LoadUpdateFile(trees[app].Root)
					if err != nil {
						return err
					}
					if uf.Status.ActiveVersion != want {
						return fmt.Errorf("app %s runs %q, want %s", appLabel(app), uf.Status.ActiveVersion, want)
					}
					// The status is saved before the journal ends.
					if j, err := install.LoadJournal(trees[app]); err != nil || j != nil && j.Step != install.StepUndone {
						return fmt.Errorf("app %s: journal %+v, %v: want none under way", appLabel(app), j, err)
					}
				}
				return nil
			})
			for app, want := range map[string]string{"": "2.0.0", "db": "6.0.0"} {
				tree := trees[app]
				if j, err := install.LoadJournal(tree); err != nil || j != nil && j.Step != install.StepUndone {
					t.Errorf("app %s: journal %+v, %v: want none under way", appLabel(app), j, err)
				}
				ents, _ := os.ReadDir(tree.VersionsDir())
				for _, e := range ents {
					if e.Name() != want {
						t.Errorf("app %s holds version %s beside %s", appLabel(app), e.Name(), want)
					}
				}
				link, err := os.Readlink(filepath.Join(tree.BinDir, "app"))
				if err != nil || !strings.HasPrefix(link, tree.VersionDir(want)+string(filepath.Separator)) {
					t.Errorf("app %s: %s/app -> %q (%v), want into %s", appLabel(app), tree.BinDir, link, err, tree.VersionDir(want))
				}
			}
			_ = d
		})
	}
}

func appLabel(app string) string {
	if app == "" {
		return "(default)"
	}
	return app
}

// TestHostWithOnlyAnApp: a host that runs only app db (no default app at
// the root): 'agentd enable --app db' with a systemd unit reads db's plan
// and installs db's target at once into apps/db (not the default app's
// target, not at the root); 'agentd update --app db' finds it up to date;
// 'agentd status --app db' shows it, and apps lists db alone; 'agentd run'
// runs db alone, and refuses a default-app setting with no app to save it in.
func TestHostWithOnlyAnApp(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx := context.Background()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	setAppPlan(t, ctx, fleet, kv.AppNS{}, "blue", "1.0.0", "2.0.0", 100*time.Millisecond)
	setAppPlan(t, ctx, fleet, kv.OtherNS("db"), "blue", "5.0.0", "6.0.0", 100*time.Millisecond)
	dbRel := releases.NewServer(nil)
	if err := dbRel.Add("6.0.0", releases.Good); err != nil {
		t.Fatal(err)
	}
	dbSite := httptest.NewServer(dbRel)
	t.Cleanup(dbSite.Close)
	root := t.TempDir()
	agentdOut := func(args ...string) (string, int) {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	out, code := agentdOut("enable", "--root", root, "--app", "db", "--nats", srv.URL(), "--group", "blue",
		"--url-template", releases.URLTemplate(dbSite.URL), "--systemd-unit", "db.service", "--systemctl", fakeSystemctl(t),
		"--bin-dir", filepath.Join(root, "dbbin"))
	if code != 0 || !strings.Contains(out, "installed 6.0.0") {
		t.Fatalf("enable --app db: exit %d\n%s", code, out)
	}
	if hasFile(filepath.Join(root, install.UpdateFileName)) || hasFile(filepath.Join(root, "versions")) {
		t.Errorf("enable --app db wrote the default app's tree at the root")
	}
	if out, code := agentdOut("update", "--root", root, "--app", "db"); code != 0 || !strings.Contains(out, "up to date: 6.0.0") {
		t.Errorf("update --app db: exit %d\n%s", code, out)
	}
	outb, err := exec.Command(bin, "status", "--root", root, "--app", "db").Output()
	var rep agentd.StatusReport
	if err != nil || json.Unmarshal(outb, &rep) != nil || rep.Installed != "6.0.0" || rep.Desired != "6.0.0" ||
		len(rep.Apps) != 1 || rep.Apps[0].App != "db" || rep.Apps[0].Default {
		t.Errorf("status --app db: %v\n%s", err, outb)
	}
	if out, code := agentdOut("update", "--root", root); code != 2 || !strings.Contains(out, "this host has no default app") || !strings.Contains(out, "[db]") {
		t.Errorf("update without --app on a host without a default app: exit %d, want 2 naming db\n%s", code, out)
	}
	if out, code := agentdOut("run", "--root", root, "--hostname", "web-1"); code != 2 || !strings.Contains(out, "--hostname: this host has no default app") {
		t.Errorf("run --hostname on a host without a default app: exit %d, want 2\n%s", code, out)
	}
	d := startAgentd(t, bin, "run", "--root", root, "--heartbeat-interval", "1s")
	natstest.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(d.output(), `msg="agent started" app=db`) {
			return fmt.Errorf("db not started:\n%s", d.output())
		}
		return nil
	})
	if n := strings.Count(d.output(), "agent started"); n != 1 {
		t.Errorf("%d apps started, want db alone:\n%s", n, d.output())
	}
}

func hasFile(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
