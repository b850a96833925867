package controller

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The dashboard's paths. Everything under them is read-only (GET, HEAD).
const (
	PathUI         = "/"
	PathUIAssets   = "/ui/"
	PathAPIStatus  = "/api/v1/status"
	PathAPIAgents  = "/api/v1/agents"
	PathAPIHistory = "/api/v1/timeline"
	PathAPIStream  = "/api/v1/stream"
)

//go:embed web
var webFS embed.FS

// Dashboard limits.
const (
	// DefaultUIRefresh is how often the page's numbers are recomputed and
	// pushed to the open pages, and the timeline read for new entries.
	DefaultUIRefresh = time.Second
	// timelineKeep is how many of the newest operator records, and of the
	// newest events, the page gets: fleetctl history has the rest.
	timelineKeep = 200
	// maxStreams bounds the pages following the live stream at once; the
	// ones after it are told to retry later.
	maxStreams = 256
	// maxStreamsPerClient bounds the streams of one client (streamClient),
	// so that one peer holding idle connections cannot take every slot.
	maxStreamsPerClient = 16
	// maxPerPage bounds one page of the agents table.
	maxPerPage = 500
	// defaultPerPage is a page of the agents table when not asked.
	defaultPerPage = 50
	// DefaultStreamWriteTimeout bounds one write to a live stream: a page
	// that stops reading is dropped once the socket's buffers are full
	// and a write has waited this long.
	DefaultStreamWriteTimeout = 10 * time.Second
	// maxQuery bounds a search or filter value.
	maxQuery = 256
)

// Dashboard serves the controller's web page: the rollout as fleetctl
// status shows it (from the same code, internal/view), the timeline
// (FLEET_AUDIT and FLEET_EVENTS), live over Server-Sent Events, and the agents of the
// inventory, filtered and paginated on the server. It is read-only.
//
// One loop (Run) recomputes the numbers and reads the timeline every
// Refresh, once for all pages however many are open, and only while one is.
type Dashboard struct {
	C      *Controller
	Mirror *PlanMirror
	// Refresh is how often the numbers are pushed. Default DefaultUIRefresh.
	Refresh time.Duration
	// Ticker paces the pushes; default the controller's clock (which also
	// tells the time the numbers are computed at).
	Ticker clock.Clock
	Log    *slog.Logger
	// Disabled, when not empty, is why the page is not served: the UI
	// paths answer 403 with it (the /v1/find and /metrics paths are not
	// the dashboard's).
	Disabled string
	// StreamWriteTimeout bounds one write to a live stream; default
	// DefaultStreamWriteTimeout.
	StreamWriteTimeout time.Duration

	readMu sync.Mutex // serializes readTimeline
	mu     sync.Mutex
	// streams are the open live streams, each with the app it follows.
	streams  map[chan streamMsg]kv.AppNS
	clients  map[string]int    // streams open per streamClient
	timeline []timelineRow     // the newest, oldest first
	cursor   kv.TimelineCursor // of the timeline read so far
	loaded   bool              // the timeline's first read succeeded
	// plan is the fleet's plan state (config, every app's spec, group
	// statuses and quarantine) as last read (readPlan), planErr why the
	// last read failed, planRead whether one was tried.
	plan     *kv.State
	planErr  string
	planRead bool
	wake     chan struct{}
	stop     chan struct{} // closed when Run returns: the streams end
}

type streamMsg struct {
	event string
	data  []byte
}

// Overview is the JSON of /api/v1/status and of the stream's "status"
// events: what the top of the page shows, of one app (App), and a line
// for every app (Apps).
type Overview struct {
	At         time.Time `json:"at"`
	Controller string    `json:"controller"`
	// App is the app the numbers are of (its name: the default app's
	// when the request named none).
	App string `json:"app"`
	// Apps is every app of the config, the default app first, each in one
	// line: the all-apps overview and the page's app selector.
	Apps []AppSummary `json:"apps"`
	// Leader: this controller drives the rollout (others only count).
	Leader bool `json:"leader"`
	// Ready is "" once the plan has been read and the bus is connected,
	// else why the numbers may be old.
	Ready string `json:"ready,omitempty"`
	// Header describes the plan as fleetctl status's header does; absent
	// with no plan.
	Header *view.PlanHeader `json:"header,omitempty"`
	// Rows are the rollout table's rows (fleetctl status and watch show
	// the same cells).
	Rows []view.GroupRow `json:"rows"`
	// Versions are, per group, the agents per version, newest first.
	Versions []GroupVersions `json:"versions"`
	// Agents is how many agents the inventory holds (counted or not yet).
	Agents int `json:"agents"`
	// PendingApprovals are the groups awaiting an operator's approval
	// (fleetctl approve) not given yet, in the rows' order.
	PendingApprovals []view.PendingApproval `json:"pending_approvals"`
	// Status is the whole report, as fleetctl status -o json has it.
	Status view.StatusReport `json:"status"`
	// Fleet is the rollout's state in a word, for the top of the page.
	Fleet FleetState `json:"fleet"`
	// Banners are the bad news the top of the page must not bury: a
	// paused or disabled rollout, each halted or rolled back group, each
	// quarantined version; [] for none.
	Banners []Banner `json:"banners"`
	// Quarantined are the versions quarantined fleet-wide
	// (fleet_plan/quarantine), as last read; [] for none.
	Quarantined []rollout.Quarantine `json:"quarantined"`
	// Releases is the release repository's panel (dashboard_releases.go);
	// absent without --release-repo or before its catalog is read.
	Releases *ReleasesPanel `json:"releases,omitempty"`
}

// FleetState is the whole rollout in a word: State is one of no_plan,
// disabled, paused, halted, rolled_back, quarantined (the target is),
// held, rolling_out, done and waiting, the first that holds in that order;
// Text says it for people ("halted: prod").
type FleetState struct {
	State string `json:"state"`
	Text  string `json:"text"`
}

// Banner is one piece of bad news: Kind is paused, disabled, halt,
// rolled_back, quarantine or quarantine_unknown; Group the group it is
// about, Version the version; Text says what and what to do.
type Banner struct {
	Kind    string `json:"kind"`
	Group   string `json:"group,omitempty"`
	Version string `json:"version,omitempty"`
	Text    string `json:"text"`
}

// GroupVersions is one group's version distribution. Target is the plan's
// target, Hold what the group holds until its turn (view.GroupRollout's
// Hold); Started: the group's rollout of the target has started, so its
// failed agents failed the target (before, they failed an earlier one).
type GroupVersions struct {
	Group    string        `json:"group"`
	Agents   int           `json:"agents"`
	Target   string        `json:"target,omitempty"`
	Hold     string        `json:"hold,omitempty"`
	Started  bool          `json:"started"`
	Versions []VersionItem `json:"versions"`
	// EndOfLife counts the group's agents on a version the release
	// repository flags end of life; BehindSecurity those on a version
	// older than a security release, SecurityRelease the newest such
	// release (rollout.StandingOf). Absent without a release catalog.
	EndOfLife       int    `json:"end_of_life,omitempty"`
	BehindSecurity  int    `json:"behind_security,omitempty"`
	SecurityRelease string `json:"security_release,omitempty"`
}

// VersionItem is one version's count in a group and what it is to the
// group: Role is target (the plan's target), previous (what the group
// holds until its turn, or the plan's start version), none (agents with
// nothing installed) or other. The page colours by Role, not by the
// version's place in the list.
type VersionItem struct {
	view.VersionRow
	Role string `json:"role"`
	// EndOfLife: the release repository flags the version end of life;
	// SecurityRelease: the newest security release newer than it.
	EndOfLife       bool   `json:"end_of_life,omitempty"`
	SecurityRelease string `json:"security_release,omitempty"`
}

// Version roles (VersionItem.Role).
const (
	RoleTarget   = "target"
	RolePrevious = "previous"
	RoleOther    = "other"
	RoleNone     = "none"
)

// AgentsPage is the JSON of /api/v1/agents.
type AgentsPage struct {
	// Total is how many agents match the filters; Page (from 1) of Pages
	// holds Agents.
	Total   int         `json:"total"`
	Page    int         `json:"page"`
	Pages   int         `json:"pages"`
	PerPage int         `json:"per_page"`
	Agents  []AgentItem `json:"agents"`
	// Versions are every version the inventory's agents run (for the
	// filter), newest first.
	Versions []string `json:"versions"`
	// Groups are the groups the inventory's agents are in.
	Groups []string `json:"groups"`
}

// addFailures fills the failures of every group of rep that counts a
// failed agent from the inventory, as fleetctl status does from the
// stream (view.GroupFailures): the page and the terminal say the same.
func addFailures(inv *heartbeat.Aggregator, rep *view.StatusReport, now time.Time) {
	if inv == nil {
		return
	}
	for i := range rep.Groups {
		g := &rep.Groups[i]
		if g.Failed == 0 && (g.Rollout == nil || g.Rollout.Agents.Failed == 0 && g.Rollout.FailedCount == 0) {
			continue
		}
		agents := inv.Agents(g.Name, now)
		hbs, seen := make([]heartbeat.Heartbeat, len(agents)), make([]time.Time, len(agents))
		for j, a := range agents {
			hbs[j], seen[j] = a.Heartbeat, a.LastSeen
		}
		g.Failures, g.FailuresTotal = view.GroupFailures(hbs, seen, now, 0)
	}
}

// AgentItem is one agent in the agents table.
type AgentItem struct {
	ID       rollout.AgentID `json:"id"`
	Group    string          `json:"group"`
	Hostname string          `json:"hostname"`
	Version  string          `json:"version"`
	// Class is view.AgentClass; State the STATE cell of fleetctl agents
	// ls, except for an unreachable agent: "unreachable", since LastSeen,
	// and LastState is what its last heartbeat said (view.AgentState),
	// which may no longer be true.
	Class     string `json:"class"`
	State     string `json:"state"`
	LastState string `json:"last_state,omitempty"`
	Error     string `json:"error,omitempty"`
	// Output is the last lines of the agent's app's output at the failure
	// (its heartbeat's error_output: at most 10 lines, 2 KiB, the agent's
	// own text, to be escaped where shown); absent when it reports none.
	Output      string    `json:"output,omitempty"`
	LastSeen    time.Time `json:"last_seen"`
	Seen        string    `json:"seen"`
	Established bool      `json:"established"`
}

// Overview computes the default app's numbers at now, from the plan as
// read now (the page's stream computes them from the plan read once per
// Refresh for every page).
func (d *Dashboard) Overview(now time.Time) Overview {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.readPlan(ctx)
	ov, _ := d.AppOverview("", now)
	return ov
}

// AppOverview computes app's numbers ("": the default app) at now from the
// plan as last read. An app the config does not list is an error naming
// the apps it does.
func (d *Dashboard) AppOverview(app string, now time.Time) (Overview, error) {
	d.mu.Lock()
	st := d.plan
	d.mu.Unlock()
	ns, err := resolveApp(d.config(st), app)
	if err != nil {
		return Overview{}, err
	}
	return d.numbersAt(now).overview(ns), nil
}

// groupVersions is g's versions with their roles.
func groupVersions(g view.GroupReport, p *view.PlanReport) GroupVersions {
	gv := GroupVersions{Group: g.Name, Agents: g.Agents}
	previous := ""
	if p != nil {
		gv.Target, previous = p.TargetVersion, p.StartVersion
	}
	if r := g.Rollout; r != nil {
		gv.Hold = r.Hold
		if r.Hold != "" {
			previous = r.Hold
		}
		gv.Started = view.StartedOnTarget(r)
	}
	for _, v := range view.VersionRows(g) {
		role := RoleOther
		switch v.Version {
		case rollout.NoVersion:
			role = RoleNone
		case gv.Target:
			role = RoleTarget
		case previous:
			role = RolePrevious
		}
		gv.Versions = append(gv.Versions, VersionItem{VersionRow: v, Role: role})
	}
	return gv
}

// badNews is the rollout's state in a word and the banners of rep, with
// the versions quarantined (qErr: why the quarantine list could not be
// read). appFlag goes after the fleetctl commands the banners name
// (" --app db" on a fleet with several apps, where fleetctl asks for it).
func badNews(rep view.StatusReport, quarantined []rollout.Quarantine, qErr, appFlag string, now time.Time) (FleetState, []Banner) {
	banners := []Banner{}
	p := rep.Plan
	if p == nil {
		return FleetState{State: "no_plan", Text: "no plan"}, banners
	}
	var halted, rolledBack, held, moving, waiting []string
	done, groups := 0, 0
	for _, g := range rep.Groups {
		r := g.Rollout
		if r == nil || !r.InConfig {
			continue
		}
		groups++
		switch {
		case r.Stale || r.StatusInvalid || r.State == "":
			waiting = append(waiting, g.Name)
		case r.Halted:
			halted = append(halted, g.Name)
			banners = append(banners, Banner{Kind: "halt", Group: g.Name, Version: p.TargetVersion,
				Text: fmt.Sprintf("%s halted %s ago on %s: %s", g.Name, view.Age(now, r.HaltedAt), p.TargetVersion, r.HaltReason)})
		case r.State == rollout.StateRolledBack:
			rolledBack = append(rolledBack, g.Name)
			banners = append(banners, Banner{Kind: "rolled_back", Group: g.Name, Version: p.TargetVersion,
				Text: fmt.Sprintf("%s rolled back from %s %s ago: %s", g.Name, p.TargetVersion, view.Age(now, r.Since), r.Reason)})
		case r.State == rollout.StateDone:
			done++
		case r.State.InProgress() && r.Held != "":
			held = append(held, g.Name)
		case r.State.InProgress():
			moving = append(moving, g.Name)
		default:
			waiting = append(waiting, g.Name)
		}
	}
	targetQuarantined := false
	for _, q := range quarantined {
		targetQuarantined = targetQuarantined || q.Version == p.TargetVersion
		what := "quarantined by " + q.By
		if q.AgentCount > 0 {
			what += fmt.Sprintf(" after %d agents rolled back from it", q.AgentCount)
		}
		banners = append(banners, Banner{Kind: "quarantine", Version: q.Version,
			Text: fmt.Sprintf("%s %s, %s ago: %s (no group rolls it out or holds it; lift: fleetctl quarantine rm%s %s)", q.Version, what, view.Age(now, q.At), q.Reason, appFlag, q.Version)})
	}
	if qErr != "" {
		banners = append(banners, Banner{Kind: "quarantine_unknown", Text: "cannot read the quarantined versions: " + qErr})
	}
	mode := p.Mode
	if mode == rollout.ModeDisabled || mode == rollout.ModePaused {
		what := "paused: no group moves and no agent starts an update"
		if mode == rollout.ModeDisabled {
			what = "disabled: fleetwave manages no update and no group moves"
		}
		// Whichever of the two set it is where to lift it.
		var fixes []string
		if p.PlanMode != rollout.ModeEnabled {
			fixes = append(fixes, "fleetctl resume"+appFlag)
		}
		if p.ConfigMode != rollout.ModeEnabled {
			fixes = append(fixes, "set mode: enabled in the config (fleetctl config apply)")
		}
		fix := strings.Join(fixes, ", and ")
		b := Banner{Kind: string(mode), Text: fmt.Sprintf("Rollout %s (config %s, plan %s). To go on: %s", what, p.ConfigMode, p.PlanMode, fix)}
		banners = append([]Banner{b}, banners...)
	}
	// The word at the top: the worst that holds.
	st := FleetState{}
	switch {
	case mode == rollout.ModeDisabled:
		st = FleetState{"disabled", "disabled"}
	case mode == rollout.ModePaused:
		st = FleetState{"paused", "paused"}
	case len(halted) > 0:
		st = FleetState{"halted", "halted: " + strings.Join(halted, ", ")}
	case len(rolledBack) > 0:
		st = FleetState{"rolled_back", "rolled back: " + strings.Join(rolledBack, ", ")}
	case targetQuarantined:
		st = FleetState{"quarantined", "target " + p.TargetVersion + " quarantined"}
	case len(held) > 0:
		st = FleetState{"held", "held: " + strings.Join(held, ", ")}
	case len(moving) > 0:
		st = FleetState{"rolling_out", "rolling out: " + strings.Join(moving, ", ")}
	case groups > 0 && done == groups:
		st = FleetState{"done", "done: every group on " + p.TargetVersion}
	default:
		st = FleetState{"waiting", "waiting"}
	}
	if mode != rollout.ModeEnabled { // what the mode hides
		if len(halted) > 0 {
			st.Text += "; halted: " + strings.Join(halted, ", ")
		}
		if len(rolledBack) > 0 {
			st.Text += "; rolled back: " + strings.Join(rolledBack, ", ")
		}
	}
	return st, banners
}

// readPlan reads the plan state (kv.Fleet.ReadState: the config and
// every key of fleet_plan, one batched direct get) for the numbers and the
// banners of every app. A failure keeps what was read before, and the
// numbers say why they may be old.
func (d *Dashboard) readPlan(ctx context.Context) {
	st, err := d.C.fleet.ReadState(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return // stopping, or the bus is slow: keep what was read
		}
		d.planErr, d.planRead = err.Error(), true
		return
	}
	d.plan, d.planErr, d.planRead = st, "", true
}

// ensurePlan reads the plan if it was never read.
func (d *Dashboard) ensurePlan(ctx context.Context) {
	d.mu.Lock()
	read := d.planRead
	d.mu.Unlock()
	if !read {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		d.readPlan(ctx)
	}
}

// AgentsFilter selects agents for the table; empty fields match all.
type AgentsFilter struct {
	// App is the app whose inventory is listed (its name; "": the
	// default app's).
	App                   string
	Group, Version, Class string
	// Query matches a substring of the id or the hostname, any case.
	Query   string
	Page    int
	PerPage int
}

// Agents is one page of the inventory's agents matching f, sorted by group
// then id. The matching pass copies only the sort keys, so a page of 50
// out of 100,000 agents copies 50 heartbeats, and only the page is sorted
// (pageOf), not every match.
func (d *Dashboard) Agents(f AgentsFilter, now time.Time) AgentsPage {
	interval := d.C.o.HeartbeatInterval
	inv := d.C.AppInventory(f.App)
	if inv == nil {
		return AgentsPage{Page: 1, Pages: 1, PerPage: cmp.Or(min(f.PerPage, maxPerPage), defaultPerPage), Agents: []AgentItem{}, Versions: []string{}, Groups: []string{}}
	}
	q := strings.ToLower(f.Query)
	type key struct{ group, id string }
	var keys []key
	if f == (AgentsFilter{App: f.App, Page: f.Page, PerPage: f.PerPage}) {
		keys = make([]key, 0, inv.Len()) // every agent matches
	}
	var versions, groups stringSet
	inv.EachAgent(now, func(hb *heartbeat.Heartbeat, lastSeen time.Time, _ bool) {
		v := hb.Version()
		versions.add(v)
		groups.add(hb.Group)
		switch {
		case f.Group != "" && hb.Group != f.Group,
			f.Version != "" && v != f.Version,
			f.Class != "" && view.AgentClass(hb, lastSeen, now, interval) != f.Class,
			q != "" && !strings.Contains(strings.ToLower(string(hb.AgentID)), q) && !strings.Contains(strings.ToLower(hb.Hostname), q):
			return
		}
		keys = append(keys, key{hb.Group, string(hb.AgentID)})
	})
	per := f.PerPage
	if per <= 0 {
		per = defaultPerPage
	}
	per = min(per, maxPerPage)
	pages := max((len(keys)+per-1)/per, 1)
	page := min(max(f.Page, 1), pages)
	out := AgentsPage{Total: len(keys), Page: page, Pages: pages, PerPage: per, Agents: []AgentItem{}}
	lo, hi := min((page-1)*per, len(keys)), min(page*per, len(keys))
	for _, k := range pageOf(keys, lo, hi, func(a, b key) int {
		if c := strings.Compare(a.group, b.group); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	}) {
		a, ok := inv.Lookup(rollout.AgentID(k.id), now)
		if !ok {
			continue // expired since the pass
		}
		hb := &a.Heartbeat
		item := AgentItem{ID: hb.AgentID, Group: hb.Group, Hostname: hb.Hostname, Version: hb.Version(),
			Class: view.AgentClass(hb, a.LastSeen, now, interval), State: view.AgentState(hb, now), Error: hb.Error, Output: hb.ErrorOutput,
			LastSeen: a.LastSeen.UTC(), Seen: view.Age(now, a.LastSeen), Established: a.Established}
		if item.Class == view.AgentUnreachable {
			// What it last said ("ok") is not what it is now.
			item.LastState, item.State = item.State, view.AgentUnreachable
		}
		out.Agents = append(out.Agents, item)
	}
	out.Versions = versions.list()
	slices.SortFunc(out.Versions, func(a, b string) int {
		if view.VersionLess(a, b) {
			return -1
		}
		if view.VersionLess(b, a) {
			return 1
		}
		return 0
	})
	out.Groups = groups.list()
	slices.Sort(out.Groups)
	return out
}

// stringSet collects the few distinct values (groups, versions) of many
// agents. A fleet has a handful: a look through a short list is cheaper
// than hashing every agent's value, which was a third of a page's cost.
type stringSet struct {
	few  []string
	many map[string]bool // once few is long
}

func (s *stringSet) add(v string) {
	switch {
	case s.many != nil:
		s.many[v] = true
	case slices.Contains(s.few, v):
	case len(s.few) < 32:
		s.few = append(s.few, v)
	default:
		s.many = make(map[string]bool, 2*len(s.few))
		for _, f := range s.few {
			s.many[f] = true
		}
		s.many[v] = true
	}
}

// list is the values, in no order; never nil.
func (s *stringSet) list() []string {
	if s.many == nil {
		return append([]string{}, s.few...)
	}
	out := make([]string, 0, len(s.many))
	for v := range s.many {
		out = append(out, v)
	}
	return out
}

// pageOf is s[lo:hi] as it would be if s were sorted by cmp, whose
// elements must be distinct. It reorders s to get there in linear time on
// average (a quickselect at lo and at hi, then a sort of the page only): a
// full sort of 100,000 agents was most of a page's cost.
func pageOf[T any](s []T, lo, hi int, cmp func(a, b T) int) []T {
	if lo >= hi {
		return nil
	}
	if lo > 0 {
		nth(s, lo, cmp)
	}
	if hi < len(s) {
		nth(s[lo:], hi-lo, cmp)
	}
	page := s[lo:hi]
	slices.SortFunc(page, cmp)
	return page
}

// nth reorders s so that s[k] is what a sort would put there, nothing after
// it smaller and nothing before it greater (Hoare's quickselect, pivot the
// median of three; the elements must be distinct).
func nth[T any](s []T, k int, cmp func(a, b T) int) {
	lo, hi := 0, len(s)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if cmp(s[mid], s[lo]) < 0 {
			s[mid], s[lo] = s[lo], s[mid]
		}
		if cmp(s[hi], s[lo]) < 0 {
			s[hi], s[lo] = s[lo], s[hi]
		}
		if cmp(s[mid], s[hi]) < 0 {
			s[mid], s[hi] = s[hi], s[mid]
		}
		// s[hi] is the median of the three: partition around it.
		p := lo
		for i := lo; i < hi; i++ {
			if cmp(s[i], s[hi]) < 0 {
				s[i], s[p] = s[p], s[i]
				p++
			}
		}
		s[p], s[hi] = s[hi], s[p]
		switch {
		case k < p:
			hi = p - 1
		case k > p:
			lo = p + 1
		default:
			return
		}
	}
}

// Streams is how many pages follow the live stream now.
func (d *Dashboard) Streams() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.streams)
}

// Timeline is the newest entries of the timeline (FLEET_AUDIT and
// FLEET_EVENTS) read so far, oldest first; never nil (the JSON is a list,
// empty or not). At most timelineKeep operator records and timelineKeep
// events, each row of bounded size (view.MaxTimelineText): the answer stays
// small however many or however large the stored entries.
func (d *Dashboard) Timeline() []view.TimelineRow {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]view.TimelineRow, len(d.timeline)) // [] when empty, for JSON
	for i, r := range d.timeline {
		out[i] = r.TimelineRow
	}
	return out
}

// TimelineOf is Timeline with only the entries about ns's app and those
// about the whole fleet (timelineRow.of).
func (d *Dashboard) TimelineOf(ns kv.AppNS) []view.TimelineRow {
	d.mu.Lock()
	defer d.mu.Unlock()
	cfg := d.config(d.plan)
	out := []view.TimelineRow{}
	for _, r := range d.timeline {
		if r.of(ns, cfg) {
			out = append(out, r.TimelineRow)
		}
	}
	return out
}

// readTimeline reads the entries added to the timeline since the last read
// (at the first, the newest timelineKeep; at most the newest timelineKeep
// of each stream at any read, however many were stored meanwhile) and
// returns them.
func (d *Dashboard) readTimeline(ctx context.Context) ([]timelineRow, error) {
	d.readMu.Lock() // one reader at a time: two would append the same entries
	defer d.readMu.Unlock()
	f := d.C.fleet
	d.mu.Lock()
	cur, loaded := d.cursor, d.loaded
	d.mu.Unlock()
	var tl kv.Timeline
	var err error
	if loaded {
		tl, err = f.ReadTimelineAfter(ctx, cur, timelineKeep)
	} else {
		tl, err = f.ReadTimelineQuery(ctx, kv.TimelineQuery{Limit: timelineKeep})
	}
	if err != nil {
		return nil, err
	}
	rows := make([]timelineRow, 0, len(tl.Entries))
	for _, e := range tl.Entries {
		rows = append(rows, timelineRowOf(e))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.loaded = true
	d.cursor = tl.Cursor
	d.timeline = keepNewest(append(d.timeline, rows...), timelineKeep)
	return rows, nil
}

// keepNewest keeps the newest keep operator records and the newest keep
// events of rows (oldest first): a flood of events never pushes the
// operators' records off the page.
func keepNewest(rows []timelineRow, keep int) []timelineRow {
	seen := map[string]int{}
	out := make([]timelineRow, 0, min(len(rows), 2*keep))
	for i := len(rows) - 1; i >= 0; i-- {
		if seen[rows[i].Kind]++; seen[rows[i].Kind] <= keep {
			out = append(out, rows[i])
		}
	}
	slices.Reverse(out)
	return out
}

// Run pushes the numbers and new timeline entries to the open pages every
// Refresh until ctx ends. With no page open it does nothing.
func (d *Dashboard) Run(ctx context.Context) error {
	d.init()
	refresh := d.Refresh
	if refresh <= 0 {
		refresh = DefaultUIRefresh
	}
	defer close(d.stop)
	clk := d.C.o.Clock
	ticker := d.Ticker
	if ticker == nil {
		ticker = clk
	}
	t := ticker.NewTimer(refresh)
	defer t.Stop()
	var lastErr string
	for {
		// A wake is a page that just opened its stream with the numbers
		// of now: it needs the timeline read, not the numbers again.
		tick := false
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			t.Reset(refresh)
			tick = true
		case <-d.wake:
		}
		d.mu.Lock()
		n := len(d.streams)
		d.mu.Unlock()
		if n == 0 {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rows, err := d.readTimeline(rctx)
		cancel()
		if err != nil && err.Error() != lastErr && ctx.Err() == nil {
			d.log().Warn("dashboard: cannot read the timeline", slog.Any("err", err))
		}
		lastErr = ""
		if err != nil {
			lastErr = err.Error()
		}
		d.broadcastTimeline(rows)
		if tick {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			d.readPlan(pctx)
			cancel()
			d.pushStatus(clk.Now())
		}
	}
}

func (d *Dashboard) init() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.streams == nil {
		d.streams = map[chan streamMsg]kv.AppNS{}
		d.clients = map[string]int{}
		d.wake = make(chan struct{}, 1)
		d.stop = make(chan struct{})
	}
}

func (d *Dashboard) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.New(slog.DiscardHandler)
}

// broadcast sends v to every open stream that follows app (to:
// whether it does); a page too slow to take it misses it (the next status
// replaces it).
func (d *Dashboard) broadcast(event string, v any, to func(app kv.AppNS) bool) {
	data, err := escape.MarshalJSON(v)
	if err != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for ch, app := range d.streams {
		if !to(app) {
			continue
		}
		select {
		case ch <- streamMsg{event, data}:
		default:
		}
	}
}

// broadcastTimeline sends each of rows to the streams of the apps it is
// about.
func (d *Dashboard) broadcastTimeline(rows []timelineRow) {
	if len(rows) == 0 {
		return
	}
	d.mu.Lock()
	cfg := d.config(d.plan)
	d.mu.Unlock()
	for _, r := range rows {
		d.broadcast("timeline", r.TimelineRow, func(app kv.AppNS) bool { return r.of(app, cfg) })
	}
}

// pushStatus sends every open stream the numbers of its app at now: each
// app's computed once, however many pages follow it.
func (d *Dashboard) pushStatus(now time.Time) {
	d.mu.Lock()
	apps := map[string]kv.AppNS{}
	for _, ns := range d.streams {
		apps[ns.Name] = ns
	}
	d.mu.Unlock()
	if len(apps) == 0 {
		return
	}
	s := d.numbersAt(now)
	for name, ns := range apps {
		d.broadcast("status", s.overview(ns), func(app kv.AppNS) bool { return app.Name == name })
	}
}

// ServeHTTP serves the page, its assets and the API.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.init()
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	// Errors in JSON for the API, in text for the page.
	fail := http.Error
	if strings.HasPrefix(r.URL.Path, "/api/") {
		fail = writeJSONError
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		fail(w, "method not allowed: the dashboard is read-only; use fleetctl to change the rollout", http.StatusMethodNotAllowed)
		return
	}
	if d.Disabled != "" {
		fail(w, "the dashboard is not served here: "+d.Disabled, http.StatusForbidden)
		return
	}
	now := d.C.o.Clock.Now()
	switch p := r.URL.Path; {
	case p == PathUI:
		d.serveAsset(w, r, "web/index.html")
	case strings.HasPrefix(p, PathUIAssets):
		d.serveAsset(w, r, "web/"+strings.TrimPrefix(p, PathUIAssets))
	case p == PathAPIStatus:
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		d.readPlan(ctx)
		cancel()
		ns, err := d.appOf(r)
		if err != nil {
			writeJSONError(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, d.numbersAt(now).overview(ns))
	case p == PathAPIAgents:
		ns, err := d.appOf(r)
		if err != nil {
			writeJSONError(w, err.Error(), http.StatusBadRequest)
			return
		}
		f, err := parseAgentsFilter(r)
		if err != nil {
			writeJSONError(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.App = ns.Name
		writeJSON(w, d.Agents(f, now))
	case p == PathAPIHistory:
		ns, err := d.appOf(r)
		if err != nil {
			writeJSONError(w, err.Error(), http.StatusBadRequest)
			return
		}
		// Catch up first (one direct get when nothing is new): with no
		// page streaming, Run does not read the timeline.
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		rows, err := d.readTimeline(ctx)
		cancel()
		if err != nil {
			writeJSONError(w, "cannot read the timeline: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		d.broadcastTimeline(rows) // the open pages get them too
		writeJSON(w, d.TimelineOf(ns))
	case p == PathAPIStream:
		ns, err := d.appOf(r)
		if err != nil {
			writeJSONError(w, err.Error(), http.StatusBadRequest)
			return
		}
		d.serveStream(w, r, ns)
	default:
		writeJSONError(w, fmt.Sprintf("no such page: %s", p), http.StatusNotFound)
	}
}

func (d *Dashboard) serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	data, err := fs.ReadFile(webFS, name)
	if err != nil || strings.Contains(name, "..") {
		writeJSONError(w, "no such file", http.StatusNotFound)
		return
	}
	switch {
	case strings.HasSuffix(name, ".html"):
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
	case strings.HasSuffix(name, ".js"):
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case strings.HasSuffix(name, ".css"):
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case strings.HasSuffix(name, ".svg"):
		w.Header().Set("Content-Type", "image/svg+xml")
	}
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(data))
}

// serveStream is the live stream: the numbers and the timeline at once,
// then what Run pushes, and a comment every 15s so proxies keep it open.
func (d *Dashboard) serveStream(w http.ResponseWriter, r *http.Request, ns kv.AppNS) {
	rc := http.NewResponseController(w)
	// The server's write timeout is for answers, not for a stream: each
	// write below gets its own deadline instead, so a page that stops
	// reading is dropped.
	timeout := d.StreamWriteTimeout
	if timeout <= 0 {
		timeout = DefaultStreamWriteTimeout
	}
	deadline := func() { _ = rc.SetWriteDeadline(time.Now().Add(timeout)) }
	deadline()
	ch := make(chan streamMsg, 16)
	client := streamClient(r)
	d.mu.Lock()
	if len(d.streams) >= maxStreams || d.clients[client] >= maxStreamsPerClient {
		n := d.clients[client]
		d.mu.Unlock()
		w.Header().Set("Retry-After", "10")
		msg := fmt.Sprintf("%d pages follow this controller already; try again later", maxStreams)
		if n >= maxStreamsPerClient {
			msg = fmt.Sprintf("%d pages at your address follow this controller already: close one, or try again later", n)
		}
		writeJSONError(w, msg, http.StatusServiceUnavailable)
		return
	}
	d.streams[ch] = ns
	d.clients[client]++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.streams, ch)
		if d.clients[client]--; d.clients[client] <= 0 {
			delete(d.clients, client)
		}
		d.mu.Unlock()
	}()
	select { // read the timeline now rather than in a second
	case d.wake <- struct{}{}:
	default:
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(event string, data []byte) bool {
		deadline()
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	d.ensurePlan(r.Context()) // read by appOf, unless that failed
	if data, err := escape.MarshalJSON(d.numbersAt(d.C.o.Clock.Now()).overview(ns)); err == nil && !send("status", data) {
		return
	}
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-d.stop:
			return
		case m := <-ch:
			if !send(m.event, m.data) {
				return
			}
		case <-keepalive.C:
			deadline()
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// streamClient is who a live stream counts against (maxStreamsPerClient):
// the client's IP address, an IPv6 client's /64 (a host usually holds a
// whole one). A request from loopback that carries X-Forwarded-For comes
// through a proxy on this host (docs/dashboard.md): it counts against the
// last address the proxy names, so that the viewers behind one proxy are
// not one client. (A local process could forge the header, but it can
// also connect from any 127.x.y.z: loopback is not where this bound
// holds anyone.)
func streamClient(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip != nil && ip.IsLoopback() {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			parts := strings.Split(xff[len(xff)-1], ",")
			if fwd := net.ParseIP(strings.TrimSpace(parts[len(parts)-1])); fwd != nil {
				ip = fwd
			}
		}
	}
	switch {
	case ip == nil:
		return host
	case ip.To4() != nil:
		return ip.To4().String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

func parseAgentsFilter(r *http.Request) (AgentsFilter, error) {
	q := r.URL.Query()
	f := AgentsFilter{Group: q.Get("group"), Version: q.Get("version"), Class: q.Get("state"), Query: strings.TrimSpace(q.Get("q"))}
	// In a fixed order, so that several bad values get the same error
	// every time.
	for _, p := range []struct{ name, v string }{{"group", f.Group}, {"version", f.Version}, {"state", f.Class}, {"q", f.Query}} {
		if len(p.v) > maxQuery {
			return f, fmt.Errorf("%s: longer than %d bytes", p.name, maxQuery)
		}
	}
	if f.Class != "" && !slices.Contains(view.AgentClasses, f.Class) {
		return f, fmt.Errorf("state %q: want one of %s", f.Class, strings.Join(view.AgentClasses, ", "))
	}
	for _, p := range []struct {
		name string
		dst  *int
	}{{"page", &f.Page}, {"per_page", &f.PerPage}} {
		if s := q.Get(p.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return f, fmt.Errorf("%s %q: want a whole number from 1", p.name, s)
			}
			*p.dst = n
		}
	}
	if f.PerPage > maxPerPage {
		return f, fmt.Errorf("per_page %d: at most %d", f.PerPage, maxPerPage)
	}
	return f, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(escape.NewJSONWriter(w)).Encode(v) // a page gone away is not an error
}

// writeJSONError answers {"error": msg} with code (http.Error's order).
func writeJSONError(w http.ResponseWriter, msg string, code int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(escape.NewJSONWriter(w)).Encode(map[string]string{"error": msg})
}
