package controller

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// PathMetrics is where the controller serves its Prometheus metrics on
// --http-addr.
const PathMetrics = "/metrics"

// Agent states of fleetwave_agents (docs/metrics.md). Each counted agent is
// in exactly one, the first that applies: unreachable (no heartbeat for
// three intervals, not yet expired: rollout.Unreachable, the rule the
// rollout engine counts by), rolled_back (its last update was rolled
// back), blocked (it reports an infrastructure failure it retries by
// itself), failed (it reports another error), updating (installing a
// version right now), ok: view.AgentClass, which the dashboard's agents
// table filters by.
const (
	AgentUnreachable = view.AgentUnreachable
	AgentRolledBack  = view.AgentRolledBack
	AgentFailed      = view.AgentFailed
	AgentBlocked     = view.AgentBlocked
	AgentUpdating    = view.AgentUpdating
	AgentOK          = view.AgentOK
)

// Reasons of fleetwave_heartbeats_rejected_total: a fixed set, so the label
// stays bounded whatever agents send.
const (
	rejectForeign        = "foreign"
	rejectTooLarge       = "too_large"
	rejectUnsupported    = "unsupported_version"
	rejectSubject        = "subject_mismatch"
	rejectMalformed      = "malformed"
	rejectNotRepublished = "not_republished"
	// rejectUnprintable: a name field (host name, group, version, site,
	// agent id) holds a control, DEL, C1 or bidirectional character
	// (rollout.ErrUnprintable): a heartbeat forged to steer a terminal.
	rejectUnprintable = "unprintable"
	// rejectUnknownApp: a heartbeat of an app the config does not list
	// (apps.go): not counted in any app.
	rejectUnknownApp = "unknown_app"
	// rejectLabels: labels that are not an object of strings or break
	// rollout.ValidateLabel / rollout.MaxLabels (heartbeat.ErrBadLabels).
	rejectLabels = "bad_labels"
)

// Outcomes of fleetwave_find_requests_total.
var findOutcomes = map[int]string{
	http.StatusOK:                 "ok",
	http.StatusBadRequest:         "bad_request",
	http.StatusNotFound:           "unknown_group",
	http.StatusRequestURITooLong:  "bad_request",
	http.StatusMethodNotAllowed:   "bad_request",
	http.StatusServiceUnavailable: "unavailable",
}

// metrics are the controller's Prometheus metrics, in a registry of its own
// (several controllers can run in one process, as in tests). The counts of
// agents and groups are not kept up to date on every heartbeat: a collector
// reads the inventory and the plan when Prometheus scrapes.
type metrics struct {
	reg         *prometheus.Registry
	rejected    *prometheus.CounterVec
	statsWrite  prometheus.Histogram
	rolloutPass prometheus.Histogram
	findReqs    *prometheus.CounterVec
	findLatency prometheus.Histogram
	// Metric analysis (analysis.go): measurements the leader took, by
	// result, and the time of their queries.
	analysisMeasurements *prometheus.CounterVec
	analysisQuery        prometheus.Histogram
	// releaseFailures counts this controller's failed reads of the
	// release repository (releases.go); nil without one.
	releaseFailures prometheus.Counter
	// Issue 28: the heartbeat lag the rollout pass measured (lag.go).
	heartbeatLag     prometheus.Gauge
	heartbeatBacklog prometheus.Gauge
}

func newMetrics(c *Controller) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetwave_heartbeats_rejected_total",
			Help: "Heartbeats rejected, by reason.",
		}, []string{"reason"}),
		statsWrite: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fleetwave_stats_write_duration_seconds",
			Help:    "Time to expire silent agents and write the counts to fleet_stats.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		rolloutPass: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fleetwave_rollout_pass_duration_seconds",
			Help:    "Time of one rollout pass (campaign for the lease and, leading, decide and write every group).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		findReqs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetwave_find_requests_total",
			Help: "GET /v1/find requests, by outcome (ok, bad_request, unknown_group, unknown_app, unavailable, other).",
		}, []string{"outcome"}),
		findLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fleetwave_find_request_duration_seconds",
			Help:    "Time to answer GET /v1/find.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8),
		}),
	}
	m.analysisMeasurements = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetwave_analysis_measurements_total",
		Help: "Metric analysis measurements this controller took (while leading), by app, group, check and result (successful, failed, inconclusive).",
	}, []string{"app", "group", "check", "result"})
	m.analysisQuery = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fleetwave_analysis_query_duration_seconds",
		Help:    "Time of one metric analysis query to Prometheus, answered or not.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
	})
	m.reg.MustRegister(m.analysisMeasurements, m.analysisQuery)
	m.heartbeatLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleetwave_heartbeat_lag_seconds",
		Help: "How far behind the leader's view of its agents was at its last rollout pass: the median age of the heartbeats it read (read time minus the agent's stamp) plus its backlog's time to drain; adaptive_in_flight halves a group's bound while it exceeds the heartbeat interval.",
	})
	m.heartbeatBacklog = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleetwave_heartbeat_backlog",
		Help: "Heartbeats the controller had received and not yet read at its last rollout pass.",
	})
	m.reg.MustRegister(m.heartbeatLag, m.heartbeatBacklog)
	if c.releases != nil {
		m.releaseFailures = prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleetwave_release_refresh_failures_total",
			Help: "Reads of the release repository (--release-repo) this controller made while leading that failed (unreachable, expired, unverifiable).",
		})
		m.reg.MustRegister(m.releaseFailures)
	}
	for _, r := range []string{rejectForeign, rejectTooLarge, rejectUnsupported, rejectSubject, rejectMalformed, rejectNotRepublished, rejectUnprintable, rejectUnknownApp, rejectLabels} {
		m.rejected.WithLabelValues(r)
	}
	for _, o := range []string{"ok", "bad_request", "unknown_group", "unknown_app", "unavailable", "other"} {
		m.findReqs.WithLabelValues(o)
	}
	m.reg.MustRegister(
		m.rejected, m.statsWrite, m.rolloutPass, m.findReqs, m.findLatency,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fleetwave_heartbeats_received_total",
			Help: "Heartbeats received (read from the stream or its republish), valid or not.",
		}, func() float64 { return float64(c.received.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fleetwave_inventory_agents",
			Help: "Agents in the controller's inventories of every app (a host running two apps counts in each), established or not, expired ones not yet pruned included.",
		}, func() float64 {
			n := 0
			for _, a := range c.apps.Load().list {
				n += a.agg.Len()
			}
			return float64(n)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fleetwave_controller_leader",
			Help: "1 while this controller holds the leader lease and drives the rollout, else 0.",
		}, func() float64 {
			if c.leading.Load() {
				return 1
			}
			return 0
		}),
		&fleetCollector{c: c},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// rejectReason classifies why a stored heartbeat was rejected.
func rejectReason(m kv.StoredMsg) string {
	if m.Foreign {
		return rejectForeign
	}
	_, err := heartbeat.DecodeFrom(m.Subject, m.Data)
	switch {
	case errors.Is(err, heartbeat.ErrTooLarge):
		return rejectTooLarge
	case errors.Is(err, heartbeat.ErrUnsupportedVersion):
		return rejectUnsupported
	case errors.Is(err, rollout.ErrUnprintable):
		return rejectUnprintable
	case errors.Is(err, heartbeat.ErrSubjectMismatch):
		return rejectSubject
	case errors.Is(err, heartbeat.ErrBadLabels):
		return rejectLabels
	}
	return rejectMalformed
}

// Registry is the controller's Prometheus registry: what GET /metrics
// serves.
func (c *Controller) Registry() *prometheus.Registry { return c.m.reg }

// ServePlanFrom makes the group metrics (state, progress, in flight...) read
// the plan and config mirror; without one only agent and process metrics are
// served. Call it before Run.
func (c *Controller) ServePlanFrom(m *PlanMirror) { c.mirror.Store(m) }

// HTTPHandler serves GET /metrics from the controller's registry, the
// dashboard (when not nil) at /, /ui/ and /api/, and every other path with
// find, counting and timing the find requests.
func (c *Controller) HTTPHandler(find http.Handler, dash ...http.Handler) http.Handler {
	metrics := promhttp.HandlerFor(c.m.reg, promhttp.HandlerOpts{Registry: c.m.reg, ErrorHandling: promhttp.ContinueOnError})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case PathMetrics:
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				http.Error(w, "method not allowed; use GET", http.StatusMethodNotAllowed)
				return
			}
			metrics.ServeHTTP(w, r)
		case httpfind.PathFind:
			start := time.Now()
			rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
			find.ServeHTTP(rec, r)
			c.m.findLatency.Observe(time.Since(start).Seconds())
			outcome, ok := findOutcomes[rec.code]
			switch {
			case !ok:
				outcome = "other"
			case rec.code == http.StatusNotFound && c.unknownApp(r):
				outcome = "unknown_app"
			}
			c.m.findReqs.WithLabelValues(outcome).Inc()
		default:
			if len(dash) > 0 && dash[0] != nil && isDashboardPath(r.URL.Path) {
				dash[0].ServeHTTP(w, r)
				return
			}
			find.ServeHTTP(w, r)
		}
	})
}

// unknownApp reports whether the find request r names an app the
// controller's config does not list (its 404 is the app's, not the
// group's).
func (c *Controller) unknownApp(r *http.Request) bool {
	app := r.URL.Query().Get("app")
	if app == "" {
		return false
	}
	if m := c.mirror.Load(); m != nil {
		_, _, ok := m.FindApp(app)
		return !ok
	}
	return true
}

type statusRecorder struct {
	http.ResponseWriter
	code    int
	written bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.written {
		s.code, s.written = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

// fleetCollector reads the inventory and the plan mirror at scrape time.
type fleetCollector struct{ c *Controller }

var (
	descAgents = prometheus.NewDesc("fleetwave_agents",
		"Counted agents (established, not expired: the agents of fleetctl status) per group, active version and state (ok, updating, blocked, failed, rolled_back, unreachable).",
		[]string{"app", "group", "version", "state"}, nil)
	descGroupState = prometheus.NewDesc("fleetwave_group_state",
		"1 for the group's rollout state (unstarted, canary, active, done, rolledback), 0 for the others.",
		[]string{"app", "group", "state"}, nil)
	descGroupInfo = prometheus.NewDesc("fleetwave_group_info",
		"Always 1: the group's start and target versions as labels.",
		[]string{"app", "group", "start_version", "target_version"}, nil)
	descProgress = prometheus.NewDesc("fleetwave_group_progress",
		"Fraction of the group told to update to the target, 0 to 1.", []string{"app", "group"}, nil)
	descInFlight = prometheus.NewDesc("fleetwave_group_in_flight",
		"Counted agents of the group installing a version right now.", []string{"app", "group"}, nil)
	descInFlightBound = prometheus.NewDesc("fleetwave_group_in_flight_bound",
		"The most agents the group lets update at once: max_in_flight of the initial count, at least 1; with adaptive_in_flight, the current adaptive bound once the group is active.", []string{"app", "group"}, nil)
	descInFlightBoundCause = prometheus.NewDesc("fleetwave_group_in_flight_bound_cause",
		"adaptive_in_flight groups only: 1 for why the bound last moved (start, grew, failures, lag), 0 for the others.", []string{"app", "group", "cause"}, nil)
	descInFlightBoundMax = prometheus.NewDesc("fleetwave_group_in_flight_bound_max",
		"adaptive_in_flight groups only: the bound max_in_flight alone gives, which the adaptive bound never exceeds.", []string{"app", "group"}, nil)
	descRateAllowance = prometheus.NewDesc("fleetwave_group_rate_allowance",
		"Groups with a rate only: how many agents the current period lets start (start, ramped by factor up to max).", []string{"app", "group"}, nil)
	descRateStarted = prometheus.NewDesc("fleetwave_group_rate_started",
		"Groups with a rate only: how many agents started in the current period.", []string{"app", "group"}, nil)
	descInitial = prometheus.NewDesc("fleetwave_group_initial_count",
		"Agents the group had when its rollout started.", []string{"app", "group"}, nil)
	descHalted = prometheus.NewDesc("fleetwave_group_halted",
		"1 while the group is halted.", []string{"app", "group"}, nil)
	descAlerted = prometheus.NewDesc("fleetwave_group_alerted",
		"1 while the group is in progress (not halted) and has been longer than its alert_after (or, with alert_on_approval_wait, has awaited its start approval that long); 0 for a halted, done or rolled back group.", []string{"app", "group"}, nil)
	descTargetQuarantined = prometheus.NewDesc("fleetwave_group_target_quarantined",
		"1 while the group's target version is quarantined (fleetctl quarantine ls): a group rolling it out halts for that reason.", []string{"app", "group"}, nil)
	descMode = prometheus.NewDesc("fleetwave_mode",
		"1 for the app's effective rollout mode (enabled, paused, disabled: the lower of the config's and the app's plan's), 0 for the others.", []string{"app", "mode"}, nil)
	descModeSetting = prometheus.NewDesc("fleetwave_mode_setting",
		"1 for the mode each source sets (source config: fleetctl config set --mode; plan: fleetctl pause and resume), 0 for the others.", []string{"app", "source", "mode"}, nil)
	descQuarantined = prometheus.NewDesc("fleetwave_version_quarantined",
		"1 for each version quarantined in the app (its quarantine list: fleet_plan/quarantine for the default app, <app>.quarantine for the others); absent for the others.", []string{"app", "version"}, nil)
	descStateSeconds = prometheus.NewDesc("fleetwave_group_state_seconds",
		"Seconds since the group entered its current state.", []string{"app", "group"}, nil)
	descCanaries = prometheus.NewDesc("fleetwave_group_canaries",
		"Canaries the group picked.", []string{"app", "group"}, nil)
	descCanariesHealthy = prometheus.NewDesc("fleetwave_group_canaries_healthy",
		"Canaries healthy on the target.", []string{"app", "group"}, nil)
	descFailed = prometheus.NewDesc("fleetwave_group_failed",
		"The controller's count of agents failing the target, towards failure_threshold.", []string{"app", "group"}, nil)
	descHeld = prometheus.NewDesc("fleetwave_group_held",
		"1 while the group's progress is held because more than infrastructure_hold of its agents in flight are blocked on infrastructure.", []string{"app", "group"}, nil)
	descBlocked = prometheus.NewDesc("fleetwave_group_blocked",
		"The controller's count of the group's agents blocked on infrastructure (retrying by themselves; not failed).", []string{"app", "group"}, nil)
	descOffTarget = prometheus.NewDesc("fleetwave_group_agents_off_target",
		"Counted agents of the group not on its target version.", []string{"app", "group"}, nil)
	descAwaitingApproval = prometheus.NewDesc("fleetwave_group_awaiting_approval",
		"1 while the group waits for an operator's approval (fleetctl approve) at the stage (start, after_canary), 0 for the other stages.",
		[]string{"app", "group", "stage"}, nil)
	// Issue 28, catch-all.
	descCaughtAgents = prometheus.NewDesc("fleetwave_group_caught_agents",
		"Counted agents of groups not in the config that the group, the config's catch-all, rolls out with its own (their groups' statuses follow it).", []string{"app", "group"}, nil)
	descCaughtGroups = prometheus.NewDesc("fleetwave_group_caught_groups",
		"Groups not in the config that the group, the config's catch-all, follows (at most 100).", []string{"app", "group"}, nil)
	descUnfollowed = prometheus.NewDesc("fleetwave_catch_all_unfollowed_groups",
		"Groups not in the config with counted agents that no group follows (past the 100 a catch-all follows, catch_all \"-\", or not yet): their hosts wait.", []string{"app"}, nil)
	descCheckValue = prometheus.NewDesc("fleetwave_analysis_value",
		"The last value a group's metric analysis check measured (absent before one, or when it had none).", []string{"app", "group", "check"}, nil)
	descCheckPasses = prometheus.NewDesc("fleetwave_analysis_passes",
		"Successful measurements of a group's check in this rollout of its target.", []string{"app", "group", "check"}, nil)
	descCheckCount = prometheus.NewDesc("fleetwave_analysis_count",
		"The successful measurements a group's check needs before the group leaves canary (its count).", []string{"app", "group", "check"}, nil)
	descCheckInconclusive = prometheus.NewDesc("fleetwave_analysis_inconclusive",
		"Inconclusive measurements of a group's check in a row; the group holds while it is above 0 and halts at the check's inconclusive_limit.", []string{"app", "group", "check"}, nil)

	// The release repository's (releases.go): served only with
	// --release-repo, once a catalog is known.
	descHostsEndOfLife = prometheus.NewDesc("fleetwave_release_hosts_end_of_life",
		"Counted agents of the group on a version the release repository flags end_of_life; absent for the other versions.", []string{"app", "group", "version"}, nil)
	descHostsBehindSecurity = prometheus.NewDesc("fleetwave_release_hosts_behind_security",
		"Counted agents of the group on a version older than a release the repository flags security (security_release: the newest such); absent for the other versions.",
		[]string{"app", "group", "version", "security_release"}, nil)
	descCatalogSuccess = prometheus.NewDesc("fleetwave_release_catalog_success_timestamp_seconds",
		"When the release catalog was last read from the repository successfully (Unix seconds); 0 if never.", nil, nil)
	descCatalogChecked = prometheus.NewDesc("fleetwave_release_catalog_checked_timestamp_seconds",
		"When the leader last tried to read the release repository (Unix seconds).", nil, nil)
	descCatalogError = prometheus.NewDesc("fleetwave_release_catalog_error",
		"1 while the last read of the release repository failed (the catalog keeps the last good releases), else 0.", nil, nil)
	descCatalogExpires = prometheus.NewDesc("fleetwave_release_catalog_expires_timestamp_seconds",
		"When the repository's trusted metadata last read expires (the earliest of root, targets, snapshot and timestamp; Unix seconds): past it, hosts refuse the repository until it is re-signed.", nil, nil)
	descCatalogReleases = prometheus.NewDesc("fleetwave_release_catalog_releases",
		"Releases (versions) of the app in the release catalog.", []string{"app"}, nil)
)

var groupStates = []rollout.State{rollout.StateUnstarted, rollout.StateCanary, rollout.StateActive, rollout.StateDone, rollout.StateRolledBack}

func (f *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAgents, descGroupState, descGroupInfo, descProgress, descInFlight, descInFlightBound,
		descInFlightBoundCause, descInFlightBoundMax, descRateAllowance, descRateStarted,
		descInitial, descHalted, descAlerted, descTargetQuarantined, descMode, descModeSetting, descQuarantined, descStateSeconds, descCanaries, descCanariesHealthy, descFailed, descHeld, descBlocked, descOffTarget,
		descAwaitingApproval, descCaughtAgents, descCaughtGroups, descUnfollowed, descCheckValue, descCheckPasses, descCheckCount, descCheckInconclusive,
		descHostsEndOfLife, descHostsBehindSecurity, descCatalogSuccess, descCatalogChecked, descCatalogError, descCatalogExpires, descCatalogReleases} {
		ch <- d
	}
}

type agentKey struct{ group, version, state string }

func (f *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	c := f.c
	now := c.o.Clock.Now()
	m := c.mirror.Load()
	var cfg *rollout.Config
	if m != nil {
		cfg = m.config.Load()
	}
	cat := c.catalog.Load()
	if c.releases == nil {
		cat = nil // a catalog only with --release-repo
	}
	if cat != nil {
		collectCatalog(ch, cat)
	}
	// Every app the controller drives: the app label is bounded by the
	// config (rollout.MaxApps).
	for _, app := range c.apps.Load().list {
		var plan *httpfind.Plan
		var quarantine *rollout.QuarantineList
		if m != nil {
			plan, quarantine = m.AppPlan(app.ns.Key())
		}
		var appCfg *rollout.Config
		if cfg != nil {
			if ac, err := cfg.ForApp(app.ns.Name); err == nil {
				appCfg = &ac
			}
		}
		collectApp(ch, c, app, plan, appCfg, quarantine, cat, m != nil, now)
	}
}

// collectCatalog is the release catalog's age and error.
func collectCatalog(ch chan<- prometheus.Metric, cat *kv.ReleaseCatalog) {
	unix := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(t.UnixMilli()) / 1000
	}
	ch <- constMetric(descCatalogSuccess, prometheus.GaugeValue, unix(cat.At))
	ch <- constMetric(descCatalogChecked, prometheus.GaugeValue, unix(cat.Checked))
	e := 0.0
	if cat.Error != "" {
		e = 1
	}
	ch <- constMetric(descCatalogError, prometheus.GaugeValue, e)
	if !cat.Expires.IsZero() {
		ch <- constMetric(descCatalogExpires, prometheus.GaugeValue, unix(cat.Expires))
	}
}

// collectStanding is, per group and version of app's counted agents
// (hosts), what the release catalog says of them: end of life, or behind
// a security release (rollout.StandingOf, the one rule).
func collectStanding(ch chan<- prometheus.Metric, cat *kv.ReleaseCatalog, app string, hosts map[[2]string]int) {
	rs := cat.Of(app)
	ch <- constMetric(descCatalogReleases, prometheus.GaugeValue, float64(len(rs)), app)
	standing := map[string]rollout.VersionStanding{}
	for gv, n := range hosts {
		s, ok := standing[gv[1]]
		if !ok {
			s = rollout.StandingOf(rs, app, gv[1])
			standing[gv[1]] = s
		}
		if s.EndOfLife {
			ch <- constMetric(descHostsEndOfLife, prometheus.GaugeValue, float64(n), app, gv[0], gv[1])
		}
		if s.SecurityRelease != "" {
			ch <- constMetric(descHostsBehindSecurity, prometheus.GaugeValue, float64(n), app, gv[0], gv[1], s.SecurityRelease)
		}
	}
}

// collectApp is one app's metrics: its agents (from its inventory) and,
// with a plan mirror (mirrored), its plan's.
func collectApp(ch chan<- prometheus.Metric, c *Controller, app *appInv, plan *httpfind.Plan, cfg *rollout.Config,
	quarantine *rollout.QuarantineList, cat *kv.ReleaseCatalog, mirrored bool, now time.Time) {
	name := app.ns.Name
	targets := map[string]string{}
	if plan != nil {
		for g, st := range plan.Groups {
			targets[g] = st.TargetVersion
		}
	}
	agents := map[agentKey]int{}
	updating := map[string]int{}
	offTarget := map[string]int{}
	app.agg.EachCounted(now, func(hb *heartbeat.Heartbeat, lastSeen time.Time) {
		v := hb.ActiveVersion
		if v == "" {
			v = rollout.NoVersion
		}
		state := view.AgentClass(hb, lastSeen, now, c.o.HeartbeatInterval)
		agents[agentKey{hb.Group, v, state}]++
		// An unreachable agent's updating_to is out of date: the engine
		// does not count it in flight, nor does this.
		if hb.UpdatingTo != "" && state != AgentUnreachable {
			updating[hb.Group]++
		}
		if t, ok := targets[hb.Group]; ok && hb.ActiveVersion != t {
			offTarget[hb.Group]++
		}
	})
	for k, n := range agents {
		ch <- constMetric(descAgents, prometheus.GaugeValue, float64(n), name, k.group, k.version, k.state)
	}
	if cat != nil {
		hosts := map[[2]string]int{}
		for k, n := range agents {
			hosts[[2]string{k.group, k.version}] += n
		}
		collectStanding(ch, cat, name, hosts)
	}
	if !mirrored {
		return
	}
	if plan == nil {
		plan = &httpfind.Plan{} // nothing of the app's plan read yet
	}
	gauge := func(d *prometheus.Desc, v float64, group string) {
		ch <- constMetric(d, prometheus.GaugeValue, v, name, group)
	}
	b := func(x bool) float64 {
		if x {
			return 1
		}
		return 0
	}
	if cfg != nil {
		var planMode rollout.Mode
		if plan.HasSpec {
			planMode = plan.Spec.Mode
		}
		effective := rollout.EffectiveMode(cfg.Mode, planMode)
		for _, mode := range modes {
			ch <- constMetric(descMode, prometheus.GaugeValue, b(effective == mode), name, string(mode))
			// EffectiveMode of one source alone is that source's mode
			// as the engine reads it ("" enabled, unknown paused).
			ch <- constMetric(descModeSetting, prometheus.GaugeValue, b(rollout.EffectiveMode(cfg.Mode, "") == mode), name, "config", string(mode))
			ch <- constMetric(descModeSetting, prometheus.GaugeValue, b(rollout.EffectiveMode(planMode, "") == mode), name, "plan", string(mode))
		}
	}
	if quarantine != nil {
		for _, q := range quarantine.Versions {
			ch <- constMetric(descQuarantined, prometheus.GaugeValue, 1, name, q.Version)
		}
	}
	if cfg != nil {
		collectCatchAll(ch, name, *cfg, plan, agents)
	}
	for group, st := range plan.Groups {
		if st.Follows != "" {
			// A copy of the catch-all's status: its figures are the
			// catch-all's (fleetwave_group_caught_agents counts its
			// hosts there), and a halt must alert once, not per copy.
			continue
		}
		for _, s := range groupStates {
			ch <- constMetric(descGroupState, prometheus.GaugeValue, b(st.State == s), name, group, string(s))
		}
		ch <- constMetric(descGroupInfo, prometheus.GaugeValue, 1, name, group, st.StartVersion, st.TargetVersion)
		gauge(descProgress, st.Progress, group)
		gauge(descInFlight, float64(updating[group]), group)
		var gc *rollout.GroupConfig
		if cfg != nil {
			if g, ok := cfg.Group(group); ok {
				gc = &g
				bound := rollout.InFlightWindow(g.MaxInFlight, st.InitialCount)
				if a := st.Adaptive; a != nil && a.Bound > 0 {
					bound = min(a.Bound, bound)
				}
				gauge(descInFlightBound, float64(bound), group)
			}
		}
		if a := st.Adaptive; a != nil {
			for _, cause := range rollout.AdaptiveCauses {
				ch <- constMetric(descInFlightBoundCause, prometheus.GaugeValue, b(a.Cause == cause), name, group, cause)
			}
			gauge(descInFlightBoundMax, float64(a.Max), group)
		}
		if r := st.Rate; r != nil {
			gauge(descRateAllowance, float64(r.Allowance), group)
			gauge(descRateStarted, float64(r.Started), group)
		}
		gauge(descInitial, float64(st.InitialCount), group)
		gauge(descHalted, b(st.Halted), group)
		gauge(descAlerted, b(alertAfterLive(st, gc, now)), group)
		gauge(descTargetQuarantined, b(quarantine != nil && st.TargetVersion != "" && quarantine.Quarantined(st.TargetVersion)), group)
		if !st.Since.IsZero() {
			gauge(descStateSeconds, max(now.Sub(st.Since).Seconds(), 0), group)
		}
		healthy := 0
		for _, cn := range st.Canaries {
			if !cn.HealthySince.IsZero() {
				healthy++
			}
		}
		gauge(descCanaries, float64(len(st.Canaries)), group)
		gauge(descCanariesHealthy, float64(healthy), group)
		gauge(descFailed, float64(st.FailedCount), group)
		gauge(descHeld, b(st.Held != ""), group)
		gauge(descBlocked, float64(st.Blocked), group)
		gauge(descOffTarget, float64(offTarget[group]), group)
		for _, s := range rollout.ApprovalStages {
			ch <- constMetric(descAwaitingApproval, prometheus.GaugeValue, b(st.AwaitingApproval.Stage == s), name, group, string(s))
		}
		for _, cs := range st.Analysis {
			if cs.Value != nil {
				ch <- constMetric(descCheckValue, prometheus.GaugeValue, *cs.Value, name, group, cs.Name)
			}
			ch <- constMetric(descCheckPasses, prometheus.GaugeValue, float64(cs.Passes), name, group, cs.Name)
			ch <- constMetric(descCheckCount, prometheus.GaugeValue, float64(cs.Count), name, group, cs.Name)
			ch <- constMetric(descCheckInconclusive, prometheus.GaugeValue, float64(cs.Inconclusive), name, group, cs.Name)
		}
	}
}

// collectCatchAll is the catch-all's figures (issue 28): the agents and
// groups it follows, and the groups not in the config with agents that no
// group follows.
func collectCatchAll(ch chan<- prometheus.Metric, app string, cfg rollout.Config, plan *httpfind.Plan, agents map[agentKey]int) {
	catchAll, ok := cfg.CatchAllGroup()
	sizes := map[string]int{}
	for k, n := range agents {
		if _, configured := cfg.Group(k.group); !configured {
			sizes[k.group] += n
		}
	}
	caught, groups, unfollowed := 0, 0, 0
	for g, n := range sizes {
		if ok && plan.Groups[g].Follows == catchAll {
			caught += n
			groups++
		} else {
			unfollowed++
		}
	}
	if ok {
		ch <- constMetric(descCaughtAgents, prometheus.GaugeValue, float64(caught), app, catchAll)
		ch <- constMetric(descCaughtGroups, prometheus.GaugeValue, float64(groups), app, catchAll)
	}
	ch <- constMetric(descUnfollowed, prometheus.GaugeValue, float64(unfollowed), app)
}

// modes are the values of fleetwave_mode's mode label.
var modes = []rollout.Mode{rollout.ModeEnabled, rollout.ModePaused, rollout.ModeDisabled}

// alertAfterLive is fleetwave_group_alerted: the engine raised the group's
// alert_after alert (st.Alerted) and its cause still holds at now. A halt
// also sets st.Alerted (the halt is the rollout's one alert), so the flag
// alone said "taking longer than its alert_after" beside every halt, and
// kept saying it once the group was done: one alert per cause, so the gauge
// is 1 only while the group is unfinished and not halted (a halted group
// has FleetwaveGroupHalted) and alert_after has passed by the engine's
// count (rollout's alertElapsed: from the start, without the time awaiting
// an after_canary approval unless alert_on_approval_wait; for an unstarted
// group, with alert_on_approval_wait, the wait for its start approval). The
// count matters after a reset of a halted group: st.Alerted stays set by
// the halt, although alert_after has not passed. gc nil (no config read
// yet, or the group is not in it): the flag and the state alone.
func alertAfterLive(st rollout.GroupStatus, gc *rollout.GroupConfig, now time.Time) bool {
	if !st.Alerted || st.Halted {
		return false
	}
	switch {
	case st.State.InProgress():
		if gc == nil {
			return true
		}
		if st.StartedAt.IsZero() {
			return false
		}
		elapsed := now.Sub(st.StartedAt)
		if !gc.AlertOnApprovalWait {
			waited := st.ApprovalWaited.D()
			if w := st.AwaitingApproval; w.Stage == rollout.ApprovalAfterCanary && now.After(w.Since) {
				waited += now.Sub(w.Since)
			}
			elapsed -= waited
		}
		return elapsed >= gc.AlertAfter.D()
	case st.State == rollout.StateUnstarted && st.AwaitingApproval.Stage == rollout.ApprovalStart:
		if gc == nil {
			return true
		}
		return gc.AlertOnApprovalWait && now.Sub(st.AwaitingApproval.Since) >= gc.AlertAfter.D()
	}
	return false
}

// constMetric is prometheus.MustNewConstMetric without the panic: a label
// value the library refuses (none should reach here: versions and group
// names are validated on the way in) is reported as that one metric's error,
// and the rest of the scrape is served (promhttp.ContinueOnError).
func constMetric(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}

// isDashboardPath: the path is the dashboard's (the page, its assets, its
// API).
func isDashboardPath(p string) bool {
	return p == PathUI || strings.HasPrefix(p, PathUIAssets) || strings.HasPrefix(p, "/api/")
}
