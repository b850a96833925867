package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/internal/run"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Apps on one host (issue 26, DESIGN §9). One agentd keeps every app of its
// host: the host's default app lives at <root> exactly as before apps
// existed (update.yaml, versions/, journal.json, lock …), so an existing
// host needs nothing; every other app NAME has the same files under
// <root>/apps/NAME/. The host has one identity (<root>/agent_id) for all
// of them, one NATS connection, and one process: 'agentd run' runs every
// app it finds, each following its own plan keys and heartbeating on its
// own subject (kv.AppNS), and installs one app at a time (installGate).

// appsDirName is the directory under the root that holds the other apps.
const appsDirName = "apps"

// appDir is the tree of app name ("" the default app) under the host root.
func appDir(root, name string) string {
	if name == "" {
		return root
	}
	return filepath.Join(root, appsDirName, name)
}

// dir is the agent's app tree: where its update.yaml, versions and journal
// live.
func (a *Agent) dir() string { return appDir(a.o.Root, a.o.Name) }

// ns is the agent's app namespace on the bus: the default app's (today's
// keys and subjects) or OtherNS(name).
func (a *Agent) ns() kv.AppNS {
	if a.o.Name == "" {
		return kv.AppNS{}
	}
	return kv.OtherNS(a.o.Name)
}

// appLabel names the agent's app for people: its name, or "(default)".
func appLabel(name string) string {
	if name == "" {
		return "(default)"
	}
	return name
}

// hasUpdateFile reports whether dir holds an update.yaml.
func hasUpdateFile(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, install.UpdateFileName))
	return err == nil
}

// listApps are the names of the other apps set up under root (a valid name
// whose directory holds an update.yaml), sorted. The default app is not
// among them.
func listApps(root string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(root, appsDirName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() || rollout.ValidateAppName(e.Name()) != nil {
			continue
		}
		if hasUpdateFile(appDir(root, e.Name())) {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// inheritHost fills a new app's update.yaml with the host's settings from
// the default app's (the root's): bus, find URLs, group, host name and
// site. enable saves them in the app's own file, which from then on is
// the app's alone (--group moves this app's group, not the host's).
func inheritHost(root string, uf *install.UpdateFile) {
	host, err := install.LoadUpdateFile(root)
	if err != nil {
		return
	}
	s := &uf.Spec
	if s.Group == "" {
		s.Group = host.Spec.Group
	}
	if s.NATS == "" {
		s.NATS = host.Spec.NATS
	}
	if len(s.FindURLs) == 0 {
		s.FindURLs = slices.Clone(host.Spec.FindURLs)
	}
	if s.Hostname == "" {
		s.Hostname = host.Spec.Hostname
	}
	if s.Site == "" {
		s.Site = host.Spec.Site
	}
	if len(s.Labels) == 0 && s.LabelsFile == "" {
		s.Labels, s.LabelsFile = maps.Clone(host.Spec.Labels), host.Spec.LabelsFile
	}
}

// legacyApp reads `--app NAME` as it was meant before apps existed, the
// binary agentd supervises (now --process), on a host set up that way:
// the root's update.yaml records process NAME and no app NAME is set up.
// Such hosts pass --app NAME in their unit's AGENTD_ARGS (install.sh) and
// must keep working after agentd is upgraded. It says so on stderr.
func (f *flags) legacyApp(cmd *cobra.Command) error {
	name := f.o.Name
	if name == "" || cmd.Flags().Changed("process") {
		return nil
	}
	root, err := filepath.Abs(f.o.Root)
	if err != nil {
		return nil //nolint:nilerr // load reports the bad root
	}
	if hasUpdateFile(appDir(root, name)) {
		return nil
	}
	uf, err := install.LoadUpdateFile(root)
	if err != nil || uf.Spec.App.Process != name {
		return nil //nolint:nilerr // not a legacy host: --app names an app
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "agentd: warning: reading --app %s as --process %s, the binary agentd supervises, as update.yaml records it: --app now names an app (<root>/apps/NAME); drop it (update.yaml keeps the process) or say --process\n", name, name)
	f.o.App.Process, f.o.Name = name, ""
	changed := cmd.Flags().Changed
	f.o.given = func(flag string) bool {
		switch flag {
		case "process":
			return true
		case "app":
			return false
		}
		return changed(flag)
	}
	return nil
}

// checkAppExists refuses --app NAME for an app that is not set up on this
// host, for the commands that do not set one up (all but enable and run).
func (f *flags) checkAppExists() error {
	if f.o.Name == "" && f.holder != "" && f.holder != "agentd enable" && f.holder != "agentd run" {
		// update, disable, link, unlink of the default app on a host
		// that runs only other apps: name them rather than "no group".
		root, err := filepath.Abs(f.o.Root)
		if err != nil || hasUpdateFile(root) {
			return nil //nolint:nilerr // load reports the bad root
		}
		if apps, _ := listApps(root); len(apps) > 0 {
			return cliutil.Usagef("this host has no default app (no %s), only apps %v: pass --app NAME", filepath.Join(root, install.UpdateFileName), apps)
		}
		return nil
	}
	if f.o.Name == "" || f.holder == "agentd enable" || f.holder == "agentd run" {
		return nil
	}
	if err := rollout.ValidateAppName(f.o.Name); err != nil {
		return cliutil.UsageError{Err: fmt.Errorf("--app: %w", err)}
	}
	root, err := filepath.Abs(f.o.Root)
	if err != nil {
		return fmt.Errorf("--root: %w", err)
	}
	if hasUpdateFile(appDir(root, f.o.Name)) {
		return nil
	}
	apps, _ := listApps(root)
	have := "none"
	if len(apps) > 0 {
		have = fmt.Sprint(apps)
	}
	return cliutil.Usagef("app %q is not set up on this host (no %s): 'agentd enable --app %s' sets it up; this host's other apps: %s",
		f.o.Name, filepath.Join(appDir(root, f.o.Name), install.UpdateFileName), f.o.Name, have)
}

// findURLs are the find endpoints to ask for this agent's app: another app
// than the default adds app=NAME to each (httpfind.Client keeps a URL's
// own query).
func (a *Agent) findURLs() []string {
	a.mu.Lock()
	urls := slices.Clone(a.update.Spec.FindURLs)
	a.mu.Unlock()
	if a.o.Name == "" {
		return urls
	}
	for i, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			continue // the client reports it
		}
		q := u.Query()
		q.Set("app", a.o.Name)
		u.RawQuery = q.Encode()
		urls[i] = u.String()
	}
	return urls
}

// installGate is the host-wide install lock of the apps one agentd runs:
// installs of two apps on one host run one at a time. Package managers hold
// one global lock (dpkg's), so a second app's apt-get would fail or wait
// anyway; and restarting two services at once doubles what a bad moment
// takes down. An app waiting here is neither failed nor updating: its
// heartbeats say what it runs until its install begins.
type installGate chan struct{}

func newInstallGate() installGate { return make(installGate, 1) }

// acquire takes the gate, or returns ctx's error, or install.ErrAbandoned
// when abandon closes first. waiting is called once if it must wait.
func (g installGate) acquire(ctx context.Context, abandon <-chan struct{}, waiting func()) error {
	if g == nil {
		return nil
	}
	select {
	case g <- struct{}{}:
		return nil
	default:
	}
	waiting()
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-abandon:
		return install.ErrAbandoned
	}
}

func (g installGate) release() {
	if g != nil {
		<-g
	}
}

// runHost runs agents, one per app of the host (the first is the host's:
// its bus URL, credentials, metrics listener and textfile are used), in
// one process with one NATS connection, until ctx is done.
func runHost(ctx context.Context, agents []*Agent) error {
	host := agents[0]
	natsURL := host.o.NATSURL
	for _, a := range agents {
		if natsURL == "" {
			natsURL = a.o.NATSURL
		}
	}
	if natsURL == "" {
		return errNoNATS
	}
	for _, a := range agents[1:] {
		if a.o.NATSURL != "" && a.o.NATSURL != natsURL {
			a.o.Log.Warn("this app's update.yaml names another bus; the host has one connection, to the first app's", slog.String("nats", a.o.NATSURL), slog.String("using", natsURL))
		}
	}
	gate := newInstallGate()
	for _, a := range agents {
		a.gate = gate
		a.textfileKick = host.textfileKick
		if a.installer == nil {
			continue
		}
		if pr, ok := a.runner.(*install.ProcessRunner); ok {
			// An agentd killed before it could stop its app left it
			// running: stop it before anything acts on the app.
			if err := pr.StopOrphan(ctx); err != nil {
				a.o.Log.Error("stopping the app an earlier agentd left running failed", slog.Any("err", err))
			}
		}
		// Finish what a crash interrupted, then bring the app up. The apps
		// are repaired one after the other.
		if _, err := a.installer.Repair(ctx, a.Status()); err != nil {
			a.o.Log.Error("repairing an interrupted install failed", slog.Any("err", err))
		}
		if pr, ok := a.runner.(*install.ProcessRunner); ok {
			// agentd supervises the app: it lives as long as agentd.
			defer pr.Stop(context.Background())
			if a.Status().ActiveVersion != "" {
				if err := pr.Restart(ctx); err != nil {
					a.o.Log.Error("starting the app failed", slog.Any("err", err))
				}
			}
		}
	}
	// The bus is lost when the connection is down or heartbeats go
	// unacked: a silent cut stops the acks long before the client's pings
	// notice (docs/agent.md). One connection, one watch for every app.
	var conn atomic.Pointer[nats.Conn]
	bus := newBusWatch(host.o.Clock, host.o.Log, host.o.MaxMissedAcks, func() (bool, string) {
		nc := conn.Load()
		if nc == nil {
			return false, "CONNECTING"
		}
		return nc.IsConnected(), nc.Status().String()
	})
	followers := make([]*PlanFollower, len(agents))
	for i, a := range agents {
		a.bus = bus
		a.pub = &heartbeat.Publisher{
			Interval: a.o.Interval,
			Jitter:   a.o.Jitter,
			Clock:    a.o.Clock,
			Log:      a.o.Log,
			Status:   a.Heartbeat,
			Timeout:  a.o.AckTimeout,
		}
		if i == 0 {
			// The host's heartbeats alone judge the bus: "2 heartbeats
			// in a row without an ack" stays what it says whatever the
			// number of apps (they share the connection).
			a.pub.OnAck = bus.acked
		}
		followers[i] = &PlanFollower{Group: a.Group(), NS: a.ns(), Clock: a.o.Clock, Log: a.o.Log,
			OnRead: func(p Plan) { a.noteGroup(ctx, p) }, FollowGroups: a.followsGroups()}
		a.member.kick = make(chan struct{}, 1)
		if a.installer != nil {
			a.member.moves = make(chan string, 1)
		}
	}
	nc, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{
		URL:        natsURL,
		Name:       "fleetwave-agentd " + string(host.id),
		Creds:      host.o.Creds,
		Log:        host.o.Log,
		NoBuffer:   true,
		RetryFirst: true,
		// The agent's credentials allow replies on this prefix only.
		TLS: host.o.TLS, InboxPrefix: kv.AgentInboxPrefix(string(host.id)),
		OnReconnect: func() {
			bus.check()
			for i, a := range agents {
				a.pub.Kick()
				followers[i].Refresh()
			}
		},
		Extra: []nats.Option{nats.PingInterval(host.o.PingInterval), nats.MaxPingsOutstanding(host.o.MaxPingsOut)},
	})
	if err != nil {
		return err
	}
	defer nc.Close()
	conn.Store(nc)
	gatherers := make(prometheus.Gatherers, 0, len(agents))
	for i, a := range agents {
		a.busConn.Store(nc)
		a.pub.JS = js
		followers[i].NC = nc
		a.follower.Store(followers[i])
		a.metrics.setBus(bus)
		gatherers = append(gatherers, a.metrics.reg)
	}
	host.metrics.registerBus()
	host.metrics.gatherer = gatherers
	for _, a := range agents {
		a.mu.Lock()
		enabled := a.update.Spec.Enabled
		a.mu.Unlock()
		a.o.Log.Info("agent started", slog.String("agent_id", string(a.id)), slog.String("group", a.Group()),
			slog.String("active_version", a.Status().ActiveVersion), slog.Bool("installs", a.installer != nil), slog.Bool("updates_enabled", enabled))
		if !enabled {
			a.o.Log.Warn("updates are disabled on this host: it heartbeats but installs nothing; 'agentd enable' turns them on")
		}
	}
	bus.check() // a bus down at start is lost from now

	// The loops; the first to end stops the others.
	busPoll := max(min(time.Second, host.o.FallbackAfter/4), 10*time.Millisecond)
	loops := append([]func(context.Context) error{
		func(ctx context.Context) error { return bus.run(ctx, busPoll) },
	}, host.metricsLoops()...)
	for i, a := range agents {
		follower := followers[i]
		loops = append(loops, a.pub.Run, follower.Run)
		if follower.FollowGroups || a.labelsFile() != "" {
			loops = append(loops, func(ctx context.Context) error { return a.membershipLoop(ctx, follower) })
		}
		if a.installer != nil && a.installer.Script != nil {
			// The script installer's version command is the truth of
			// what is installed: re-read every heartbeat period.
			loops = append(loops, a.versionLoop)
		}
		if a.installer != nil {
			answers := make(chan decision, 1)
			loops = append(loops,
				func(ctx context.Context) error { return a.updateLoop(ctx, follower, answers) },
				func(ctx context.Context) error { return a.fallbackLoop(ctx, answers) })
		}
	}
	return run.All(ctx, loops...)
}

// appSettingFlags are the flags whose settings 'agentd run' saves in an
// app's update.yaml: they need an app to go to.
var appSettingFlags = []string{"group", "site", "label", "labels-file", "hostname", "url-template", "find-url", "process", "app-arg", "systemd-unit",
	"systemctl", "app-name", "bin-dir", "health-url", "health-command", "db", "public-key", "release-repo", "release-root"}

// hostAgents builds the agents of every app 'agentd run' runs, the host's
// first: the app --app selects (default: the default app) with the flags'
// settings, saved as before; the default app when <root>/update.yaml exists
// or no other app is set up (a new host, as before apps); and every app of
// <root>/apps/*/update.yaml with its own saved settings only. It holds the
// root lock and every app's lock until f.unlock.
func (f *flags) hostAgents(cmd *cobra.Command) ([]*Agent, error) {
	root, err := filepath.Abs(f.o.Root)
	if err != nil {
		return nil, fmt.Errorf("--root: %w", err)
	}
	apps, err := listApps(root)
	if err != nil {
		return nil, fmt.Errorf("list the apps under %s: %w", root, err)
	}
	var agents []*Agent
	if f.o.Name == "" && !hasUpdateFile(root) && len(apps) > 0 && !cmd.Flags().Changed("app") {
		// No default app on this host, only others: run them; a setting
		// given here would have no app to go to.
		for _, flag := range appSettingFlags {
			if cmd.Flags().Changed(flag) {
				return nil, cliutil.Usagef("--%s: this host has no default app (%s) but apps %v: name the app with --app NAME", flag, filepath.Join(root, install.UpdateFileName), apps)
			}
		}
		log, err := f.logFlags.Logger(cmd.ErrOrStderr())
		if err != nil {
			return nil, err
		}
		f.o.Log = log
		if err := f.lockRoot(); err != nil {
			return nil, err
		}
	} else {
		a, err := f.agent(cmd)
		if err != nil {
			return nil, err
		}
		agents = append(agents, a)
	}
	var others []string
	if len(agents) > 0 && agents[0].o.Name != "" && hasUpdateFile(root) {
		others = append(others, "") // the default app, first
	}
	for _, name := range apps {
		if len(agents) == 0 || name != agents[0].o.Name {
			others = append(others, name)
		}
	}
	for _, name := range others {
		if name != "" {
			if err := f.lockApp(root, name); err != nil {
				f.unlock()
				return nil, err
			}
		}
		a, err := load(f.plainOptions(name), accessInstall, true)
		if err == nil {
			err = a.save()
		}
		if err != nil {
			// One app's broken config must not stop the host's other
			// apps: it is not run (the controllers see it unreachable)
			// and said at every start until fixed.
			f.o.Log.Error("app not run: its update.yaml is not usable; fix it (agentd enable --app NAME …) or remove it (agentd disable --app NAME --remove)",
				slog.String("app", appLabel(name)), slog.Any("err", err))
			continue
		}
		agents = append(agents, a)
	}
	if len(agents) == 0 {
		f.unlock()
		return nil, fmt.Errorf("no app of this host can run (see the errors above)")
	}
	// The default app first: the host's settings (bus URL) come from it.
	slices.SortStableFunc(agents, func(x, y *Agent) int {
		switch {
		case x.o.Name == "" && y.o.Name != "":
			return -1
		case x.o.Name != "" && y.o.Name == "":
			return 1
		}
		return 0
	})
	for _, a := range agents {
		a.o.MetricsTextfile = ""
	}
	agents[0].o.MetricsTextfile = f.o.MetricsTextfile
	return agents, nil
}

// plainOptions are the options of app name when 'agentd run' was not told
// about it: its saved settings only, with the host's bus and timings.
func (f *flags) plainOptions(name string) Options {
	o := f.o
	o.Name = name
	// The host's name is the host's, not one app's: 'agentd run
	// --hostname' names it in every app's heartbeats.
	o.Group, o.Site, o.FindURLs = "", "", nil
	o.Labels, o.LabelsFile = nil, ""
	o.App = AppOptions{Progress: f.o.App.Progress, DownloadStallTimeout: f.o.App.DownloadStallTimeout,
		DownloadDeadline: f.o.App.DownloadDeadline, KeepFree: f.o.App.KeepFree, ProgressInterval: f.o.App.ProgressInterval}
	o.given = func(string) bool { return false }
	o.MetricsListener, o.MetricsTextfile = nil, ""
	o.RootLocked = true
	return o
}

// report is the agent's status for 'agentd status': update.yaml, the
// journal, and what the plan on the bus gives it (read within 5 s).
func (a *Agent) report(ctx context.Context) StatusReport {
	st := a.Status()
	rep := StatusReport{AgentID: string(a.id), Hostname: a.o.Hostname, Group: a.Group(), Labels: a.Labels().Map(), LabelsError: a.labelsError(), Installer: a.installerName(), Enabled: a.enabled(), Installed: st.ActiveVersion,
		LastUpdate: st.StartTime, Rollback: st.Rollback, RollbackFrom: st.RollbackFrom, Error: st.Error,
		ErrorClass: string(st.ErrorClass), ErrorCause: st.ErrorCause, ErrorOutput: heartbeat.CleanOutput(st.ErrorOutput)}
	if len(st.VersionHistory) > 0 {
		rep.Previous = st.VersionHistory[0]
	}
	if j, err := install.LoadJournal(a.tree()); err != nil {
		rep.JournalError = err.Error()
	} else if j != nil && j.Step != install.StepUndone {
		rep.InstallStep, rep.InstallTarget = string(j.Step), j.Target
		if j.Step == install.StepFetch {
			rep.Download = j.Download
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if a.id == "" {
		rep.DesiredError = "no agent id yet ('agentd enable' or 'agentd run' draws one)"
	} else {
		p, err := a.readPlan(ctx)
		if err != nil {
			rep.DesiredError = err.Error()
		} else {
			rep.Desired, rep.ShouldUpdate = p.DecideAt(a.id, a.o.Clock.Now())
			rep.Jitter = p.Status.JitterSeconds
		}
		var plan *Plan
		if err == nil {
			plan = &p
		}
		rep.GroupError, _ = a.groupProblem(ctx, plan)
	}
	rep.Site, rep.SiteFrom = a.site()
	rep.ReleaseRepo = a.repoStatus()
	return rep
}

// hostStatus is 'agentd status': sel's report at the top, and every app of
// the host in Apps (sel's included), the default app first when it is set
// up.
func (f *flags) hostStatus(ctx context.Context, sel *Agent) (StatusReport, error) {
	rep := sel.report(ctx)
	apps, err := listApps(sel.o.Root)
	if err != nil {
		return rep, fmt.Errorf("list the apps under %s: %w", sel.o.Root, err)
	}
	names := apps
	if hasUpdateFile(sel.o.Root) || len(apps) == 0 {
		names = append([]string{""}, apps...)
	}
	for _, name := range names {
		e := AppStatus{App: name, Default: name == ""}
		if name == sel.o.Name {
			e.StatusReport = rep
		} else {
			o := f.plainOptions(name)
			o.NATSURL = sel.o.NATSURL // the host's bus
			a, err := load(o, accessRead, false)
			if err != nil {
				e.StatusReport = StatusReport{AgentID: string(sel.id), DesiredError: err.Error()}
			} else {
				e.StatusReport = a.report(ctx)
			}
		}
		rep.Apps = append(rep.Apps, e)
	}
	return rep, nil
}

// writeStatusTable writes 'agentd status -o table': one row per app.
func writeStatusTable(w io.Writer, rep StatusReport) error {
	fmt.Fprintf(w, "agent %s, host %s\n", escape.Text(rep.AgentID), escape.Text(rep.Hostname))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "APP\tGROUP\tENABLED\tINSTALLED\tDESIRED\tSTATE")
	for _, e := range rep.Apps {
		r := e.StatusReport
		desired := r.Desired
		if desired == "" {
			desired = "-"
		}
		state := "ok"
		switch {
		case r.InstallStep != "":
			state = "installing " + r.InstallTarget + " (" + r.InstallStep + ")"
		case r.Rollback:
			state = "rolled back from " + r.RollbackFrom
		case r.Error != "":
			state = "error: " + r.Error
		case r.DesiredError != "":
			state = "plan: " + r.DesiredError
		case r.GroupError != "":
			state = "group: " + r.GroupError
		case r.ShouldUpdate && r.Desired != r.Installed:
			state = "update due"
		}
		fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%s\t%s\n", escape.Text(appLabel(e.App)), escape.Text(r.Group), r.Enabled,
			escape.Text(orNone(r.Installed)), escape.Text(desired), escape.Text(truncateText(state, 120)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range rep.Apps {
		if r := e.ReleaseRepo; r != nil {
			fmt.Fprintf(w, "release repository of %s: %s\n", escape.Text(appLabel(e.App)), escape.Text(repoLine(r)))
		}
	}
	return nil
}

// repoLine is an app's trust state on one line.
func repoLine(r *RepoStatus) string {
	var b strings.Builder
	b.WriteString(r.URL)
	if r.RootVersion > 0 {
		fmt.Fprintf(&b, ", root v%d (expires %s)", r.RootVersion, r.RootExpires.Format(time.RFC3339))
	}
	switch {
	case r.TargetsVersion > 0:
		fmt.Fprintf(&b, ", targets v%d, verified %s, valid until %s", r.TargetsVersion, r.RefreshedAt.Format(time.RFC3339), r.Expires.Format(time.RFC3339))
	default:
		b.WriteString(", not refreshed yet")
	}
	if r.LastError != "" {
		fmt.Fprintf(&b, "; last refresh failed %s: %s", r.LastErrorAt.Format(time.RFC3339), truncateText(r.LastError, 200))
	}
	if r.TrustError != "" {
		b.WriteString("; " + r.TrustError)
	}
	return b.String()
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// leftTimeout bounds the bus work of 'agentd disable --remove'.
const leftTimeout = 10 * time.Second

// removeApp is 'agentd disable --app NAME --remove': the app's last
// heartbeat says left, then its update.yaml goes (and with purge its whole
// tree). A bus that cannot be reached is said and does not stop it: the
// controllers drop the host from the app when its heartbeat expires.
func (a *Agent) removeApp(ctx context.Context, out io.Writer, purge bool) error {
	if a.o.Name == "" {
		return cliutil.Usagef("--remove needs --app NAME")
	}
	if a.id != "" && !a.newID {
		if err := a.sendLeft(ctx); err != nil {
			fmt.Fprintf(out, "warning: could not tell the controllers that this host left app %s (%s); they drop it once its last heartbeat expires (agent expiry, 1 h by default)\n",
				a.o.Name, escape.Text(err.Error()))
		} else {
			fmt.Fprintf(out, "told the controllers this host left app %s\n", a.o.Name)
		}
	}
	dir := a.dir()
	if purge {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
		fmt.Fprintf(out, "removed app %s: %s and everything under it\n", a.o.Name, dir)
		return nil
	}
	if err := os.Remove(filepath.Join(dir, install.UpdateFileName)); err != nil {
		return fmt.Errorf("remove app %s's config: %w", a.o.Name, err)
	}
	fmt.Fprintf(out, "removed app %s: %s is gone, its installed versions stay under %s (--purge removes them)\n",
		a.o.Name, filepath.Join(dir, install.UpdateFileName), dir)
	return nil
}

// sendLeft publishes the app's heartbeat with left set and waits for the
// stream's ack.
func (a *Agent) sendLeft(ctx context.Context) error {
	if a.o.NATSURL == "" {
		return errNoNATS
	}
	ctx, cancel := context.WithTimeout(ctx, leftTimeout)
	defer cancel()
	nc, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{URL: a.o.NATSURL, Name: "agentd " + string(a.id), Creds: a.o.Creds,
		TLS: a.o.TLS, InboxPrefix: kv.AgentInboxPrefix(string(a.id)), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer nc.Close()
	a.mu.Lock()
	a.noteDomain(nc.ConnectedDomain())
	a.mu.Unlock()
	hb := a.Heartbeat()
	hb.Left = true
	hb.V, hb.At, hb.Seq = heartbeat.SchemaVersion, a.o.Clock.Now().UTC(), 1
	data, err := heartbeat.Encode(&hb)
	if err != nil {
		return err
	}
	_, err = js.Publish(ctx, a.ns().HBSubject(hb.Group, a.id), data)
	return err
}
