package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/controller"
	fwctl "github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/aptenv"
)

// The script-installed app of TestTwoAppsEndToEnd: the Debian package
// fwpkg, whose health check fails in pkgBad.
const (
	pkgApp = "pkg"
	pkgDeb = "fwpkg"
	pkgBad = "7.0.0"
)

// pkgCheck is fwpkg's health check (its bin/fwpkg-check): it prints why
// it fails.
const pkgCheck = `#!/bin/sh
if [ "%s" = bad ]; then
  echo "fwpkg %s: /etc/fwpkg.conf: unknown key 'listen_adress'" >&2
  exit 1
fi
echo "fwpkg %s ok"
`

// pkgDebs are fwpkg 5.0.0, 6.0.0 and the bad 7.0.0.
func pkgDebs() []aptenv.Deb {
	var debs []aptenv.Deb
	for _, v := range []string{"5.0.0", "6.0.0", pkgBad} {
		mode := "good"
		if v == pkgBad {
			mode = "bad"
		}
		debs = append(debs, aptenv.Deb{Name: pkgDeb, Version: v, Files: map[string]string{
			"opt/fwpkg/version":         v + "\n",
			"opt/fwpkg/bin/fwpkg-check": fmt.Sprintf(pkgCheck, mode, v, v),
		}})
	}
	return debs
}

// twoApps is TestTwoAppsEndToEnd's fleet: every host runs the default app
// web (tarballs from the release site, supervised by agentd) and pkg (the
// script installer running apt-get in the host's own throwaway apt root).
type twoApps struct {
	*fleet
	web, pkg kv.AppNS
	apt      map[*agent]*aptenv.Root
}

// appTree is the host's tree of ns's app.
func (e *twoApps) appTree(a *agent, ns kv.AppNS) string {
	if ns.IsDefault() {
		return a.root
	}
	return filepath.Join(a.root, "apps", ns.Name)
}

// appStatuses are ns's group statuses in the store.
func (e *twoApps) appStatuses(ns kv.AppNS) map[string]rollout.GroupStatus {
	e.t.Helper()
	st, err := e.kv.ReadState(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]rollout.GroupStatus{}
	for g, s := range st.ForApp(ns).Groups {
		out[g] = s.Value
	}
	return out
}

// planSet is the operator's "fleetctl plan set --app" (the real binary).
func (e *twoApps) planSet(ns kv.AppNS, start, target string) {
	e.t.Helper()
	fleetctl(e.t, e.fleet, 0, "plan", "set", "--app", ns.Name, "--start", start, "--target", target, "--critical", "--reason", "e2e")
}

// appDone is nil once every group of ns's app is done on target and every
// host's tree of the app says it runs target; for pkg, dpkg in every
// host's apt root has exactly target fully installed, nothing half done.
func (e *twoApps) appDone(ns kv.AppNS, target string) error {
	statuses := e.appStatuses(ns)
	for _, g := range e.groups {
		st, ok := statuses[g]
		if !ok {
			return fmt.Errorf("app %s: no status for group %s yet", ns.Name, g)
		}
		if st.TargetVersion != target || st.State != rollout.StateDone || st.Halted {
			return fmt.Errorf("app %s: group %s %s on %s (halted %v %s; waiting %s)", ns.Name, g, st.State, st.TargetVersion, st.Halted, st.HaltReason, st.Waiting)
		}
	}
	for _, a := range e.agents {
		if err := e.hostRuns(a, ns, target); err != nil {
			return err
		}
	}
	return nil
}

// hostRuns is nil when a's tree of ns's app says it runs v with no install
// under way, and for pkg dpkg agrees and the package's files are v's.
func (e *twoApps) hostRuns(a *agent, ns kv.AppNS, v string) error {
	uf, err := install.LoadUpdateFile(e.appTree(a, ns))
	if err != nil {
		return err
	}
	if uf.Status.ActiveVersion != v {
		return fmt.Errorf("app %s: host-%d (%s) is on %q (%s), want %s", ns.Name, a.n, a.group, uf.Status.ActiveVersion, uf.Status.Error, v)
	}
	if ns != e.pkg {
		return nil
	}
	r := e.apt[a]
	if s := r.State(pkgDeb); s != "installed "+v {
		return fmt.Errorf("host-%d: dpkg says %s %q, want installed %s", a.n, pkgDeb, s, v)
	}
	if err := r.Audit(); err != nil {
		return fmt.Errorf("host-%d: %w", a.n, err)
	}
	if b, err := os.ReadFile(r.Path("opt/fwpkg/version")); err != nil || strings.TrimSpace(string(b)) != v {
		return fmt.Errorf("host-%d: /opt/fwpkg/version %q (%v), want %s", a.n, b, err, v)
	}
	if j, err := install.LoadJournal(install.Tree{Root: e.appTree(a, ns)}); err != nil || j != nil && j.Step != install.StepUndone {
		return fmt.Errorf("host-%d: pkg's install journal open: %+v %v", a.n, j, err)
	}
	return nil
}

// beatsOf are every heartbeat of ns's app recorded so far.
func (e *twoApps) beatsOf(ns kv.AppNS) []heartbeat.Heartbeat {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []heartbeat.Heartbeat
	for _, b := range e.beats {
		if b.App == ns.Key() {
			out = append(out, b)
		}
	}
	return out
}

// dashboard is the controller's dashboard API's answer for app.
func (e *twoApps) dashboard(app string) (controller.Overview, error) {
	var ov controller.Overview
	resp, err := http.Get(strings.TrimSuffix(e.findURL, "/v1/find") + controller.PathAPIStatus + "?app=" + app)
	if err != nil {
		return ov, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return ov, err
	}
	if resp.StatusCode != http.StatusOK {
		return ov, fmt.Errorf("dashboard ?app=%s: %s: %s", app, resp.Status, body)
	}
	if err := json.Unmarshal(body, &ov); err != nil {
		return ov, fmt.Errorf("dashboard ?app=%s: %w", app, err)
	}
	return ov, nil
}

// statusJSON is "fleetctl status --app app -o json" (the real binary).
func (e *twoApps) statusJSON(app string) (view.StatusReport, error) {
	var rep view.StatusReport
	out, _ := fleetctl(e.t, e.fleet, 0, "status", "--app", app, "-o", "json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		return rep, fmt.Errorf("fleetctl status --app %s -o json: %w\n%s", app, err, out)
	}
	return rep, nil
}

// groupNumbers are the numbers of one group an operator reads off fleetctl
// status and the dashboard.
type groupNumbers struct {
	Target        string
	State         rollout.State
	Halted        bool
	Agents        int // counted
	OnTarget      int // rollout.agents.updated
	Failed        int // rollout.agents.failed
	CountedFailed int // the group's failed count
}

func (g groupNumbers) String() string {
	return fmt.Sprintf("%s %s halted=%v agents=%d on_target=%d failed=%d/%d", g.Target, g.State, g.Halted, g.Agents, g.OnTarget, g.Failed, g.CountedFailed)
}

// numbersOf are rep's numbers by group.
func numbersOf(rep view.StatusReport) map[string]groupNumbers {
	out := map[string]groupNumbers{}
	for _, g := range rep.Groups {
		n := groupNumbers{Agents: g.Agents, CountedFailed: g.Failed}
		if rep.Plan != nil {
			n.Target = rep.Plan.TargetVersion
		}
		if r := g.Rollout; r != nil {
			n.State, n.Halted, n.OnTarget, n.Failed = r.State, r.Halted, r.Agents.Updated, r.Agents.Failed
		}
		out[g.Name] = n
	}
	return out
}

func diffNumbers(a, b map[string]groupNumbers) string {
	var out []string
	for g := range a {
		if _, ok := b[g]; !ok {
			out = append(out, fmt.Sprintf("%s: %v / absent", g, a[g]))
		}
	}
	for g, y := range b {
		if x, ok := a[g]; !ok || x != y {
			out = append(out, fmt.Sprintf("%s: %v / %v", g, x, y))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// agree waits until fleetctl status --app, the dashboard's ?app= answer
// for the same app, and want (what the hosts and the store say) are the
// same numbers for every app; the dashboard's all-apps line of each app
// says them too. It returns the last dashboard answers, by app.
func (e *twoApps) agree(want map[string]map[string]groupNumbers) map[string]controller.Overview {
	e.t.Helper()
	ovs := map[string]controller.Overview{}
	natstest.Eventually(e.t, time.Minute, func() error {
		for app, w := range want {
			rep, err := e.statusJSON(app)
			if err != nil {
				return err
			}
			ov, err := e.dashboard(app)
			if err != nil {
				return err
			}
			if ov.App != app {
				return fmt.Errorf("dashboard ?app=%s answers for app %q", app, ov.App)
			}
			ctl, dash := numbersOf(rep), numbersOf(ov.Status)
			if d := diffNumbers(ctl, dash); d != "" {
				return fmt.Errorf("app %s: fleetctl status --app and the dashboard differ (fleetctl / dashboard): %s", app, d)
			}
			if d := diffNumbers(w, ctl); d != "" {
				return fmt.Errorf("app %s: fleetctl status --app is not what the hosts run (want / fleetctl): %s", app, d)
			}
			i := slices.IndexFunc(ov.Apps, func(s controller.AppSummary) bool { return s.App == app })
			if i < 0 {
				return fmt.Errorf("the dashboard's overview has no line for app %s: %+v", app, ov.Apps)
			}
			line, sum := ov.Apps[i], view.Progress(rep)
			if line.Agents != sum.Agents || line.OnTarget != sum.OnTarget || line.Failed != sum.Failed || line.Target != sum.Target ||
				!slices.Equal(line.Halted, sum.Halted) || line.GroupsDone != sum.GroupsDone {
				return fmt.Errorf("app %s: the dashboard's all-apps line %+v, fleetctl status sums to %+v", app, line.AppProgress, sum)
			}
			ovs[app] = ov
		}
		return nil
	})
	return ovs
}

// appsLs is "fleetctl apps ls" (the real binary), as a table and as JSON.
func (e *twoApps) appsLs() (string, map[string]fwctl.AppReport) {
	e.t.Helper()
	table, _ := fleetctl(e.t, e.fleet, 0, "apps", "ls")
	out, _ := fleetctl(e.t, e.fleet, 0, "apps", "ls", "-o", "json")
	var rep fwctl.AppsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		e.t.Fatalf("fleetctl apps ls -o json: %v\n%s", err, out)
	}
	byName := map[string]fwctl.AppReport{}
	for _, a := range rep.Apps {
		byName[a.Name] = a
	}
	return table, byName
}

// TestTwoAppsEndToEnd (issue 26, the first thing to show): a secured
// controller process and four agentd processes in two groups, every host
// running two apps: web, the default app (tarballs, the app supervised by
// agentd), and pkg (the script installer: apt-get in the host's own
// throwaway apt root, against a local file: repository of dpkg-deb builds
// of fwpkg). The apps are named and their plans set with the real
// fleetctl.
//  1. Both apps roll out at once to different targets (web 1.0.0→1.1.0,
//     pkg 5.0.0→6.0.0): both complete, every host's dpkg has fwpkg 6.0.0,
//     and fleetctl status --app, the dashboard's ?app= and its all-apps
//     overview count 4 of 4 on each target.
//  2. At once again, web to 1.3.0 (good) and pkg to 7.0.0 (its health
//     check fails): pkg's canary is rolled back by apt (a downgrade to
//     6.0.0), pkg's first group halts in its canary phase and its second
//     never moves, while web completes in both groups; no web group ever
//     halts. fleetctl status --app web / --app pkg and the dashboard give
//     the same numbers per group (state, halted, agents, on the target,
//     failed), which are what the hosts run.
func TestTwoAppsEndToEnd(t *testing.T) {
	aptenv.Require(t)
	repo := aptenv.BuildRepo(t, t.TempDir(), pkgDebs())
	e := &twoApps{apt: map[*agent]*aptenv.Root{}}
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{groupConfig("canary", 1, 50), groupConfig("prod", 1, 50)}
	t0 := time.Now()
	e.fleet = startFleet(t, map[string]int{"canary": 2, "prod": 2}, 0, func(f *fleet) {
		e.fleet = f
		f.setConfig(cfg)
		// The operator names the fleet's app and adds the second.
		fleetctl(t, f, 0, "apps", "add", "web", "--default")
		fleetctl(t, f, 0, "apps", "add", pkgApp, "--installer", "script")
		ecfg, _, err := f.kv.ReadConfig(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e.web, err = kv.NS(ecfg.Value, "web"); err != nil {
			t.Fatal(err)
		}
		if e.pkg, err = kv.NS(ecfg.Value, pkgApp); err != nil {
			t.Fatal(err)
		}
		if !e.web.IsDefault() || e.pkg.IsDefault() {
			t.Fatalf("web default %v, pkg default %v", e.web.IsDefault(), e.pkg.IsDefault())
		}
		// Every host on the start versions first.
		e.planSet(e.web, "1.0.0", "1.0.0")
		e.planSet(e.pkg, "5.0.0", "5.0.0")
		natstest.Eventually(t, 30*time.Second, func() error {
			st := e.appStatuses(e.pkg)
			for _, g := range cfg.Groups {
				if st[g.Name].TargetVersion != "5.0.0" {
					return fmt.Errorf("pkg's group %s: %+v", g.Name, st[g.Name])
				}
			}
			return nil
		})
		// Each host's creds name both apps; its pkg is set up with
		// agentd enable --app pkg (which installs 5.0.0 at once) before
		// agentd run starts.
		f.authFlags = []string{"--apps", "web," + pkgApp, "--default-app", "web"}
		f.prepare = func(a *agent, creds string) {
			r := aptenv.NewRoot(t, filepath.Join(f.dir, fmt.Sprintf("apt-%d", a.n)), repo)
			e.apt[a] = r
			runCmd(t, "agentd", "enable", "--app", pkgApp, "--root", a.root, "--creds", creds, "--hostname", fmt.Sprintf("host-%d", a.n),
				"--installer", "script", "--install-cmd", r.InstallCmd(pkgDeb), "--version-cmd", r.VersionCmd(pkgDeb), "--script-timeout", "1m",
				"--health-command", r.Path("opt/fwpkg/bin/fwpkg-check"))
			if s := r.State(pkgDeb); s != "installed 5.0.0" {
				t.Fatalf("host-%d after agentd enable --app pkg: dpkg says %q", a.n, s)
			}
		}
	})
	natstest.Eventually(t, 2*time.Minute, func() error {
		if err := e.appDone(e.web, "1.0.0"); err != nil {
			return err
		}
		return e.appDone(e.pkg, "5.0.0")
	})
	t.Logf("every host on web 1.0.0 and pkg 5.0.0 after %v", time.Since(t0).Round(time.Second))

	t.Run("both apps roll out at once", func(t *testing.T) {
		t1 := time.Now()
		e.planSet(e.web, "1.0.0", "1.1.0")
		e.planSet(e.pkg, "5.0.0", "6.0.0")
		natstest.Eventually(t, 2*time.Minute, func() error {
			if err := e.appDone(e.web, "1.1.0"); err != nil {
				return err
			}
			return e.appDone(e.pkg, "6.0.0")
		})
		t.Logf("both done after %v", time.Since(t1).Round(time.Second))
		// At once: each app's canary group started before the other
		// app's last group was done.
		ev := e.eventsAfter(t1)
		for _, x := range []struct{ app, other string }{{"web", pkgApp}, {pkgApp, "web"}} {
			started := appEventTime(t, ev, x.app, "canary", "", rollout.StateCanary)
			otherDone := appEventTime(t, ev, x.other, "prod", rollout.StateActive, rollout.StateDone)
			if !started.Before(otherDone) {
				t.Errorf("app %s's rollout started at %v, after app %s's was done at %v: not at once", x.app, started, x.other, otherDone)
			}
		}
		// Every pkg install was the script installer's.
		for _, hb := range e.beatsOf(e.pkg) {
			if hb.Installer != rollout.InstallerScript {
				t.Fatalf("a pkg heartbeat says installer %q: %+v", hb.Installer, hb)
			}
		}
		done := func(target string) map[string]groupNumbers {
			return map[string]groupNumbers{
				"canary": {Target: target, State: rollout.StateDone, Agents: 2, OnTarget: 2},
				"prod":   {Target: target, State: rollout.StateDone, Agents: 2, OnTarget: 2},
			}
		}
		e.agree(map[string]map[string]groupNumbers{"web": done("1.1.0"), pkgApp: done("6.0.0")})
	})
	if t.Failed() {
		return
	}

	t.Run("a bad pkg release halts pkg only", func(t *testing.T) {
		t2 := time.Now()
		e.planSet(e.web, "1.1.0", "1.3.0")
		e.planSet(e.pkg, "6.0.0", pkgBad)
		var halted rollout.GroupStatus
		natstest.Eventually(t, 2*time.Minute, func() error {
			halted = e.appStatuses(e.pkg)["canary"]
			if halted.TargetVersion != pkgBad || !halted.Halted {
				return fmt.Errorf("pkg's canary group: %s on %s, halted %v", halted.State, halted.TargetVersion, halted.Halted)
			}
			return nil
		})
		if halted.State != rollout.StateCanary || len(halted.Canaries) != 1 {
			t.Errorf("pkg halted in %s with canaries %+v, want the canary phase, one canary", halted.State, halted.Canaries)
		}
		t.Logf("pkg's canary group halted after %v: %s", time.Since(t2).Round(time.Second), halted.HaltReason)
		// web completes meanwhile.
		natstest.Eventually(t, 2*time.Minute, func() error { return e.appDone(e.web, "1.3.0") })
		t.Logf("web done on 1.3.0 after %v", time.Since(t2).Round(time.Second))

		// pkg's canary was rolled back by apt: every host has 6.0.0 again
		// (the canary downgraded, the others never moved), and the canary
		// says why.
		canary := halted.Canaries[0].ID
		natstest.Eventually(t, time.Minute, func() error {
			for _, a := range e.agents {
				if err := e.hostRuns(a, e.pkg, "6.0.0"); err != nil {
					return err
				}
				uf, err := install.LoadUpdateFile(e.appTree(a, e.pkg))
				if err != nil {
					return err
				}
				if a.id == canary && (!uf.Status.Rollback || uf.Status.RollbackFrom != pkgBad) {
					return fmt.Errorf("pkg's canary host-%d: rollback %v from %q, want from %s", a.n, uf.Status.Rollback, uf.Status.RollbackFrom, pkgBad)
				}
			}
			return nil
		})
		for _, a := range e.agents {
			uf, err := install.LoadUpdateFile(e.appTree(a, e.pkg))
			if err != nil {
				t.Fatal(err)
			}
			if a.id == canary && !strings.Contains(uf.Status.ErrorOutput, "unknown key 'listen_adress'") {
				t.Errorf("pkg's canary: error_output %q, want the health check's last lines", uf.Status.ErrorOutput)
			}
		}
		// Only the canary ever went to 7.0.0 (no pkg heartbeat of another
		// host names it), and the second group never started on it.
		for _, hb := range e.beatsOf(e.pkg) {
			if hb.AgentID != canary && (hb.ActiveVersion == pkgBad || hb.UpdatingTo == pkgBad || hb.RollbackFrom == pkgBad) {
				t.Errorf("pkg host %s (%s) touched %s: %+v", hb.Hostname, hb.Group, pkgBad, hb)
			}
		}
		if prod := e.appStatuses(e.pkg)["prod"]; prod.Halted || prod.State != rollout.StateUnstarted {
			t.Errorf("pkg's prod group: %s halted %v, want unstarted (its canary group halted)", prod.State, prod.Halted)
		}
		// No web group halted; pkg's halt is pkg's.
		for _, ev := range e.eventsAfter(t0) {
			if ev.Kind == rollout.EventHalt && ev.App != pkgApp {
				t.Errorf("a halt of app %q: %+v", ev.App, ev)
			}
		}
		if !slices.ContainsFunc(e.eventsAfter(t2), func(ev rollout.Event) bool {
			return ev.Kind == rollout.EventHalt && ev.App == pkgApp && ev.Group == "canary"
		}) {
			t.Errorf("no halt event of app pkg, group canary")
		}

		// fleetctl status --app and the dashboard agree, and say what the
		// hosts run.
		ovs := e.agree(map[string]map[string]groupNumbers{
			"web": {
				"canary": {Target: "1.3.0", State: rollout.StateDone, Agents: 2, OnTarget: 2},
				"prod":   {Target: "1.3.0", State: rollout.StateDone, Agents: 2, OnTarget: 2},
			},
			pkgApp: {
				"canary": {Target: pkgBad, State: rollout.StateCanary, Halted: true, Agents: 2, Failed: 1, CountedFailed: 1},
				"prod":   {Target: pkgBad, State: rollout.StateUnstarted, Agents: 2},
			},
		})
		if ov := ovs[pkgApp]; ov.Fleet.State != "halted" || !slices.ContainsFunc(ov.Banners, func(b controller.Banner) bool {
			return b.Kind == "halt" && b.Group == "canary" && b.Version == pkgBad && strings.Contains(b.Text, "rolled back from "+pkgBad)
		}) {
			t.Errorf("the dashboard of pkg: %+v, banners %+v; want halted, a halt banner of canary on %s saying its canary rolled back", ov.Fleet, ov.Banners, pkgBad)
		}
		if ov := ovs["web"]; ov.Fleet.State != "done" || len(ov.Banners) != 0 {
			t.Errorf("the dashboard of web: %+v, banners %+v; want done, no bad news", ov.Fleet, ov.Banners)
		}

		// fleetctl apps ls says the same in a line per app.
		table, apps := e.appsLs()
		t.Logf("fleetctl apps ls:\n%s", table)
		if w := apps["web"]; !w.Default || w.Installer != "tarball" || w.State != "done" || w.TargetVersion != "1.3.0" || w.OnTarget != 4 || w.Agents != 4 || w.GroupsDone != 2 {
			t.Errorf("apps ls, web: %+v", w)
		}
		if p := apps[pkgApp]; p.Default || p.Installer != "script" || p.State != "halted" || p.TargetVersion != pkgBad || p.OnTarget != 0 || p.Agents != 4 ||
			!slices.Equal(p.Halted, []string{"canary"}) {
			t.Errorf("apps ls, pkg: %+v", p)
		}
	})

	// No package of the test reached the machine's own dpkg.
	if out, err := exec.Command("dpkg-query", "-W", pkgDeb).CombinedOutput(); err == nil {
		t.Fatalf("%s is in the machine's own dpkg database: %s", pkgDeb, out)
	}
}

// eventsAfter are the events recorded with a time after t (eventsSince
// takes a second more, which holds the end of the phase before).
func (e *twoApps) eventsAfter(t time.Time) []rollout.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []rollout.Event
	for _, ev := range e.events {
		if ev.At.After(t) {
			out = append(out, ev)
		}
	}
	return out
}

// appEventTime is when app's group moved from → to (the first time; from
// "": from any state), from events.
func appEventTime(t *testing.T, events []rollout.Event, app, group string, from, to rollout.State) time.Time {
	t.Helper()
	for _, ev := range events {
		if ev.App == app && ev.Group == group && ev.Kind == rollout.EventTransition && (from == "" || ev.From == from) && ev.To == to {
			return ev.At
		}
	}
	t.Fatalf("no event of app %s, group %s: %s -> %s", app, group, from, to)
	return time.Time{}
}
