package controller

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Apps on the dashboard (DESIGN §9). Every API path takes ?app=NAME (absent:
// the fleet's default app); the numbers of an app are those fleetctl status
// --app shows: its plan in the shape of a fleet before apps
// (kv.State.AppView), its counts (kv.StatsOf) from its own inventory
// (Controller.AppInventory), rendered by the same internal/view code.

// AppSummary is one app in the all-apps overview (Overview.Apps): its
// rollout in one line and its bad news.
type AppSummary struct {
	// App is the app's name; Default whether it is the fleet's default
	// app (today's keys and host tree); Installer how its hosts install it.
	App       string `json:"app"`
	Default   bool   `json:"default"`
	Installer string `json:"installer"`
	view.AppProgress
	// Fleet is the app's rollout in a word, as the top of its page says
	// it (halted, paused, rolling_out, done, …).
	Fleet FleetState `json:"fleet"`
	// Banners are the app's bad news, as its page shows them; [] for none.
	Banners []Banner `json:"banners"`
	// Error says why the app's plan cannot be shown (its overrides do not
	// apply); absent when it can.
	Error string `json:"error,omitempty"`
}

// appNumbers are one app's numbers at one instant.
type appNumbers struct {
	ns  kv.AppNS
	inv *heartbeat.Aggregator // nil: the controller keeps none for the app
	// plan is the app's plan (kv.State.AppView); nil when none was read,
	// or when err says why it cannot be.
	plan *kv.State
	cfg  *rollout.Config // the app's config, overrides applied; nil if not known
	err  string
	rep  view.StatusReport
	// quarantined are the app's quarantined versions, qErr why they
	// cannot be read.
	quarantined []rollout.Quarantine
	qErr        string
	fleet       FleetState
	banners     []Banner
}

// numbers are every app's numbers at one instant, from one read of the
// plan: the overview of each and the all-apps lines agree.
type numbers struct {
	d    *Dashboard
	now  time.Time
	cfg  rollout.Config
	apps []appNumbers // in the config's order, the default app first
	// ready is why the numbers may be old ("" when they are not).
	ready string
}

// numbersAt computes every configured app's numbers at now from the plan
// as last read (readPlan).
func (d *Dashboard) numbersAt(now time.Time) *numbers {
	d.mu.Lock()
	st, planErr, planRead := d.plan, d.planErr, d.planRead
	d.mu.Unlock()
	s := &numbers{d: d, now: now, cfg: d.config(st)}
	if m := d.Mirror; m != nil {
		if err := m.Ready(); err != nil {
			s.ready = err.Error()
		}
	}
	switch {
	case s.ready != "":
	case planErr != "":
		s.ready = "cannot read the plan: " + planErr
	case !planRead || st == nil:
		s.ready = "plan not read yet"
	}
	for _, a := range s.cfg.AppList() {
		ns, err := kv.NS(s.cfg, a.Name)
		if err != nil {
			continue // not in the config it came from: cannot be
		}
		s.apps = append(s.apps, d.appNumbersOf(s.cfg, ns, st, now))
	}
	return s
}

// config is the fleet's config: st's, else (not valid, or not read) the
// last good one the plan mirror read, else the default.
func (d *Dashboard) config(st *kv.State) rollout.Config {
	if st != nil {
		if _, bad := st.Problem(kv.BucketConfig, kv.KeyConfig); !bad {
			return st.Config.Value
		}
	}
	if m := d.Mirror; m != nil {
		if c := m.Config(); c != nil {
			return *c
		}
	}
	return rollout.DefaultConfig()
}

// appNumbersOf computes the numbers of cfg's app ns at now from st (nil:
// not read).
func (d *Dashboard) appNumbersOf(cfg rollout.Config, ns kv.AppNS, st *kv.State, now time.Time) appNumbers {
	c := d.C
	n := appNumbers{ns: ns, inv: c.AppInventory(ns.Name)}
	var entries []kv.Stats
	if n.inv != nil {
		counts, sites := n.inv.CountsWithSites(now)
		entries = make([]kv.Stats, 0, len(counts))
		for group, vc := range counts {
			entries = append(entries, kv.Stats{V: 1, ControllerID: c.o.ID, Group: group, At: now.UTC(), Agents: vc.Total(), Versions: vc,
				Sites: sites[group], App: ns.Key()})
		}
	}
	entries = kv.StatsOf(entries, ns)
	if st != nil {
		plan, err := st.AppView(ns)
		if err != nil {
			n.err = err.Error()
		} else {
			n.plan = plan
			if _, bad := plan.Problem(kv.BucketConfig, kv.KeyConfig); !bad {
				n.cfg = &plan.Config.Value
			}
			n.quarantined = append(n.quarantined, plan.Quarantine.Value.Versions...)
			if p, bad := plan.Problem(kv.BucketPlan, kv.KeyQuarantine); bad {
				n.qErr = p.Err.Error()
			}
		}
	}
	if n.quarantined == nil {
		n.quarantined = []rollout.Quarantine{}
	}
	n.rep = view.BuildRolloutStatus(entries, n.plan, now)
	appFlag := ""
	if len(cfg.AppList()) > 1 {
		appFlag = " --app " + ns.Name
	}
	n.fleet, n.banners = badNews(n.rep, n.quarantined, n.qErr, appFlag, now)
	return n
}

// resolveApp is the namespace of app ("": the default app) in cfg. An app
// the config does not list, or a name that is not an app's, is an error
// naming the ones it does.
func resolveApp(cfg rollout.Config, app string) (kv.AppNS, error) {
	if app != "" {
		if err := rollout.ValidateAppName(app); err != nil {
			return kv.AppNS{}, fmt.Errorf("app: %w; the apps are: %s", err, strings.Join(cfg.AppNames(), ", "))
		}
	}
	ns, err := kv.NS(cfg, app)
	if err != nil {
		return kv.AppNS{}, err
	}
	return ns, nil
}

// appOf is the app r asks for (?app=), the plan read first if it never
// was (the config lists the apps).
func (d *Dashboard) appOf(r *http.Request) (kv.AppNS, error) {
	d.ensurePlan(r.Context())
	d.mu.Lock()
	st := d.plan
	d.mu.Unlock()
	return resolveApp(d.config(st), r.URL.Query().Get("app"))
}

// summaries are the all-apps lines.
func (s *numbers) summaries() []AppSummary {
	out := make([]AppSummary, 0, len(s.apps))
	for _, n := range s.apps {
		a, _ := s.cfg.App(n.ns.Name)
		out = append(out, AppSummary{App: n.ns.Name, Default: n.ns.IsDefault(), Installer: a.EffectiveInstaller(),
			AppProgress: view.Progress(n.rep), Fleet: n.fleet, Banners: n.banners, Error: n.err})
	}
	return out
}

// overview is the page's numbers of ns's app. An app no longer in the
// config (the page was opened before it was removed) gets empty numbers
// that say so.
func (s *numbers) overview(ns kv.AppNS) Overview {
	c := s.d.C
	ov := Overview{At: s.now.UTC(), Controller: c.o.ID, Leader: c.leading.Load(), App: ns.Name, Apps: s.summaries(), Ready: s.ready,
		Rows: []view.GroupRow{}, Versions: []GroupVersions{}, PendingApprovals: []view.PendingApproval{}, Banners: []Banner{},
		Quarantined: []rollout.Quarantine{}, Status: view.StatusReport{Groups: []view.GroupReport{}}, Fleet: FleetState{State: "no_plan", Text: "no plan"}}
	i := slices.IndexFunc(s.apps, func(n appNumbers) bool { return n.ns == ns })
	if i < 0 {
		ov.Ready = fmt.Sprintf("app %q is not in the config any more; apps: %s", ns.Name, strings.Join(s.cfg.AppNames(), ", "))
		return ov
	}
	n := s.apps[i]
	if n.err != "" && ov.Ready == "" {
		ov.Ready = n.err
	}
	if n.inv != nil {
		ov.Agents = n.inv.Len()
	}
	ov.Status = n.rep
	ov.Status.Groups = slices.Clone(n.rep.Groups) // addFailures fills them
	addFailures(n.inv, &ov.Status, s.now)
	if ov.Status.Plan != nil {
		h := view.Header(ov.Status)
		ov.Header = &h
	}
	ov.Rows = view.Rows(ov.Status, n.cfg, s.now)
	ov.PendingApprovals = view.PendingApprovals(ov.Rows, s.now)
	for _, g := range ov.Status.Groups {
		if g.Agents > 0 {
			ov.Versions = append(ov.Versions, groupVersions(g, ov.Status.Plan))
		}
	}
	ov.Quarantined = slices.Clone(n.quarantined)
	ov.Fleet, ov.Banners = n.fleet, n.banners
	c.addReleases(&ov, s.now)
	return ov
}

// timelineRow is a row of the timeline and the app it is about.
type timelineRow struct {
	view.TimelineRow
	// app is the app's name ("": the default app's; an event of before
	// apps, or an operator's write of a default-app key); fleetWide: the
	// entry is about every app (a write of the config).
	app       string
	fleetWide bool
}

// timelineRowOf renders e and tells what app it is about: an event by its
// app (rollout.Event.App; one that names neither an app nor a group, such
// as an unattributed change of the config, is the whole fleet's); an
// operator's write of fleet_plan by its key's app (kv.ParsePlanKey); any
// other write (the config) is the whole fleet's.
func timelineRowOf(e kv.TimelineEntry) timelineRow {
	r := timelineRow{TimelineRow: view.TimelineRowOf(e)}
	switch {
	case e.Event != nil:
		r.app, r.fleetWide = e.Event.App, e.Event.App == "" && e.Event.Group == ""
	case e.Audit != nil && e.Audit.Bucket == kv.BucketPlan:
		pk := kv.ParsePlanKey(e.Audit.Key)
		r.app, r.fleetWide = pk.App, pk.Kind == ""
	default:
		r.fleetWide = true
	}
	return r
}

// of reports whether r is to be shown with ns's app of cfg. The default
// app's entries are also those that name no app (made before apps) and
// those that name rollout.DefaultAppName when no app has that name (made
// by a fleet without apps, before it named its app): as fleetctl history
// --app sees them.
func (r timelineRow) of(ns kv.AppNS, cfg rollout.Config) bool {
	switch {
	case r.fleetWide || r.app == ns.Name:
		return true
	case !ns.IsDefault():
		return false
	case r.app == "":
		return true
	}
	_, named := cfg.App(rollout.DefaultAppName)
	return r.app == rollout.DefaultAppName && !named
}
