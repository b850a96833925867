// Package sim is a fleet simulator: N virtual agents (up to a million in
// one process) on a few NATS connections drive a real, in-process
// controller through one rollout in compressed time. See docs/simulator.md.
//
// Each virtual agent has its own agent_id, group and update state (64
// bytes and its id); it heartbeats on fleet.hb.<group>.<id> with
// heartbeat.Encode's bytes every interval ±
// jitter and at once after a state change, and follows the plan as agentd
// does, with rollout.Decide on the spec and its group's status. A shard (one
// NATS connection, by default per 5,000 agents) holds ONE core subscription
// on fleet.plan.> and does direct gets of the plan keys at start and every
// PlanRefresh; one scheduler goroutine per shard paces all its agents'
// heartbeats and installs. No JetStream consumer per agent.
package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natsembed"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Options describe one simulated rollout. Zero values take the defaults in
// the field comments.
type Options struct {
	// URL of an external NATS server; "" starts an embedded one (memory
	// storage, temporary store directory).
	URL           string
	Agents        int // 2000
	Groups        int // 3, named g1..gN, each depending on the one before
	AgentsPerConn int // 5000
	// Apps is how many apps every host runs (1). With more than one, the
	// config lists apps app1..appN (app1 the default app, on today's
	// unprefixed keys and subjects; the others on their own), every host
	// heartbeats once per app on the app's subject, and every app's
	// rollout (the same start and target) runs at once, each with its own
	// plan, statuses and in-flight bound. The same Seed gives every app
	// the same hosts (ids and groups). Apps are independent here: the
	// simulator does not model agentd's one-install-at-a-time host lock.
	Apps int

	MaxInFlight      rollout.Percent // 20
	CanaryCount      int             // 5 (0 is allowed: set NoCanaries)
	NoCanaries       bool
	FailureThreshold rollout.Percent // 5
	MinHealthyTime   time.Duration   // 0 (controller: canaries healthy this long)

	StartVersion, TargetVersion string // "1.0.0", "2.0.0"
	// FailRate is the probability, per version, that an install fails and
	// rolls back (rollback=true, rollback_from=version, active unchanged).
	FailRate               map[string]float64
	InstallMin, InstallMax time.Duration // uniform install duration: 300ms..1s
	// Stuck is the share of hosts, per version, whose install of it never
	// ends: stuck in the health wait, heartbeating updating_to forever. They
	// are the hosts whose id fraction is below it, the first the rollout
	// lets go (outside the canaries), so that they fill the max_in_flight
	// window at once when they are as many. The controller times them out after
	// UpdateTimeout, counts them failed and gives their places in the
	// window to others; such a group never gets done (its stuck agents are
	// not on the target), so a run with them ends "stuck" (see Run).
	Stuck map[string]float64
	// UpdateTimeout is the groups' update_timeout; 0: the default (30m).
	UpdateTimeout time.Duration
	// QuarantineAfter is the config's quarantine_after; 0: the default
	// (3). NoQuarantine turns the rule off (quarantine_after 0), for runs
	// about one group's failure_threshold.
	QuarantineAfter int
	NoQuarantine    bool
	// InfraFail is the share of hosts, per version, whose installs of it
	// are blocked on infrastructure (the release site answers 503 to
	// them) for InfraFor from their first attempt: agentd's
	// infrastructure failure, error_class "infrastructure", retried every
	// InfraRetry (1s) until it succeeds. A fixed subset of hosts (by id),
	// apart from FailRate's.
	InfraFail  map[string]float64
	InfraFor   time.Duration // 5s
	InfraRetry time.Duration // 1s

	// Churn is agents replaced per second (one leaves, a new one joins on
	// the start version), from the spec write on, for ChurnFor (10s).
	// A group is done only when every present agent is on the target, and a
	// silent agent stays present until AgentExpiry, so endless churn would
	// keep the last group from finishing.
	Churn    float64
	ChurnFor time.Duration

	HeartbeatInterval time.Duration // 1s (agents and controller)
	HeartbeatJitter   float64       // 0.1: each interval is ±10%
	StatsInterval     time.Duration // 1s
	ReconcileInterval time.Duration // 300ms
	AgentExpiry       time.Duration // 10 heartbeat intervals
	PlanRefresh       time.Duration // 10s: periodic direct gets
	Tick              time.Duration // 20ms: scheduler pacing

	// Analysis are metric analysis checks every group runs (the config's
	// fleet-wide analysis), against the Prometheus at PrometheusURL;
	// none: no analysis. See appmetrics.go for what the simulated app
	// reports.
	Analysis      []rollout.Check
	PrometheusURL string
	// AppMetricsListen, when set, is the address (host:port) where the
	// simulated app's metrics are served at /metrics, for that
	// Prometheus to scrape: sim_app_error_rate{group,version}.
	AppMetricsListen string
	// ErrorRate is the app's error rate, per version, on the hosts running
	// it; other versions run at BaseErrorRate (0.001).
	ErrorRate     map[string]float64
	BaseErrorRate float64
	// ErrorRateFrom delays a version's ErrorRate, per version: in each
	// group its hosts report BaseErrorRate until this share of the group
	// runs the version (a fault that shows only under load).
	ErrorRateFrom map[string]float64
	// OnStatus, when set, is called with each new group status the
	// simulator reads (possibly more than once per status: once per
	// connection), from the connections' goroutines: keep it short.
	OnStatus func(group string, st rollout.GroupStatus)

	// Issue 28: every group's rate and adaptive_in_flight (nil, false:
	// neither). HeartbeatLag, when set, is injected heartbeat lag: from
	// LagFrom after the spec write, for LagFor (0: to the end), every
	// agent stamps its heartbeats HeartbeatLag in the past, which to the
	// controller is the same as heartbeats that spent that long on the way
	// (a backed-up bus): it measures the age of what it reads.
	Rate             *rollout.RateConfig
	AdaptiveInFlight bool
	HeartbeatLag     time.Duration
	LagFrom, LagFor  time.Duration

	// Timeout bounds the rollout (from the spec write); 5m.
	Timeout time.Duration
	// Settle is how long to keep watching after a halt once nothing is in
	// flight, to show later groups do not start: 3 reconcile + 2 stats
	// intervals.
	Settle time.Duration
	Seed   int64
	Log    *slog.Logger // nil: silent

	// Progress, when set, is called every ProgressEvery (10s) from the
	// spec write to the end with what the run looks like then.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// AtEnd, when set, is called once the rollout has ended, before
	// anything is stopped (e.g. to write a heap profile of the live state).
	AtEnd func()
	// MaxRSS, when set, stops the run (outcome "rss-limit", with the
	// report) once the process's RSS exceeds it, in bytes: a run of a
	// million agents on a shared machine.
	MaxRSS int64

	// Issue 28, windowed runs (timebased.go). Windows, when set, gives
	// group i the window Windows[i % len], and the rollout follows the
	// windows (the plan is not critical) under Schedule (regular unless
	// set; rollout.ScheduleTimeBased: each group in its own windows).
	// TimeScale, above 1, runs the controller and the agents on a clock
	// TimeScale times faster than the wall clock, starting at SimStart
	// (Monday 2026-03-23 00:00 in Timezone, the week Europe/Berlin springs
	// forward); the durations above stay real time (the simulator hands
	// the controller and agents their simulated equivalents). A windowed
	// run ends when every agent is on the target and every group done,
	// or SimFor (a week) of simulated time after the plan was written
	// (outcome "sim-end").
	Windows   []Window
	Schedule  rollout.Schedule
	Timezone  string // UTC
	TimeScale float64
	SimStart  time.Time
	SimFor    time.Duration
}

func (o Options) withDefaults() Options {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Agents == 0 {
		o.Agents = 2000
	}
	if o.Groups == 0 {
		o.Groups = 3
	}
	if o.Apps == 0 {
		o.Apps = 1
	}
	if o.AgentsPerConn == 0 {
		o.AgentsPerConn = 5000
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 20
	}
	if o.CanaryCount == 0 && !o.NoCanaries {
		o.CanaryCount = 5
	}
	if o.FailureThreshold == 0 {
		o.FailureThreshold = 5
	}
	if o.StartVersion == "" {
		o.StartVersion = "1.0.0"
	}
	if o.TargetVersion == "" {
		o.TargetVersion = "2.0.0"
	}
	def(&o.InfraFor, 5*time.Second)
	def(&o.InfraRetry, time.Second)
	def(&o.InstallMin, 300*time.Millisecond)
	def(&o.InstallMax, time.Second)
	o.InstallMax = max(o.InstallMax, o.InstallMin)
	def(&o.HeartbeatInterval, time.Second)
	if o.BaseErrorRate == 0 {
		o.BaseErrorRate = 0.001
	}
	if o.HeartbeatJitter == 0 {
		o.HeartbeatJitter = 0.1
	}
	def(&o.StatsInterval, time.Second)
	def(&o.ReconcileInterval, 300*time.Millisecond)
	def(&o.AgentExpiry, 10*o.HeartbeatInterval)
	def(&o.PlanRefresh, 10*time.Second)
	def(&o.Tick, 20*time.Millisecond)
	def(&o.Timeout, 5*time.Minute)
	def(&o.ChurnFor, 10*time.Second)
	def(&o.ProgressEvery, 10*time.Second)
	def(&o.Settle, 3*o.ReconcileInterval+2*o.StatsInterval)
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Timezone == "" {
		o.Timezone = rollout.DefaultTimezone
	}
	if o.Schedule == "" {
		o.Schedule = rollout.ScheduleRegular
	}
	def(&o.SimFor, 7*24*time.Hour)
	if o.SimStart.IsZero() {
		loc, err := time.LoadLocation(o.Timezone)
		if err != nil {
			loc = time.UTC
		}
		o.SimStart = time.Date(2026, 3, 23, 0, 0, 0, 0, loc)
	}
	return o
}

// Sim is a running simulation.
type Sim struct {
	o   Options
	url string
	log *slog.Logger
	// app is this fleet's app ("" when the config lists none) and ns its
	// keys and subjects; one Sim per app, all on the same controller.
	app        string
	ns         kv.AppNS
	groups     []string
	groupIndex map[string]int // plan key (the app's) → group index
	stats      *tracker
	churnOn    atomic.Int64 // milli-agents per second, 0 until the spec is written
	// lagFrom and lagUntil (unix nanos; lagUntil 0: no end) bound the
	// injected heartbeat lag (Options.HeartbeatLag); 0 before the spec.
	lagFrom, lagUntil atomic.Int64
	shards            []*shard
	haltQuiet         time.Time // since when the app has been halted with nothing in flight
	outcome           string
	// clk is the compressed clock of a windowed run (nil: the wall
	// clock); cfg the config written; specSimAt when the plan was
	// written, on clk.
	clk       *scaledClock
	cfg       rollout.Config
	specSimAt time.Time
}

// newSim is the simulated fleet of one app (ns), its keys set once the
// config is known (setNS).
func newSim(o Options, url, app string, clk *scaledClock) *Sim {
	s := &Sim{o: o, log: o.Log, url: url, app: app, groupIndex: map[string]int{}, outcome: "timeout", clk: clk}
	for i := range o.Groups {
		s.groups = append(s.groups, "g"+strconv.Itoa(i+1))
	}
	s.stats = newTracker(o.Groups)
	return s
}

// setNS makes ns the app's keys and subjects.
func (s *Sim) setNS(ns kv.AppNS) {
	s.ns = ns
	clear(s.groupIndex)
	for i, g := range s.groups {
		s.groupIndex[ns.Group(g)] = i
	}
}

// appNames are the apps' names: none (today's config) for one app.
func appNames(n int) []string {
	if n <= 1 {
		return []string{""}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = "app" + strconv.Itoa(i+1)
	}
	return out
}

// GroupReport is one group's outcome.
type GroupReport struct {
	Name         string        `json:"name"`
	State        rollout.State `json:"state"`
	Halted       bool          `json:"halted"`
	HaltReason   string        `json:"halt_reason,omitempty"`
	InitialCount int           `json:"initial_count"`
	Canaries     int           `json:"canaries"`
	// WallTime is started_at → done_at as the controller recorded them (0
	// when not done).
	WallTime time.Duration `json:"wall_time_ns"`
	// MaxInFlightActive is the most agents installing at once outside the
	// canary phase, from the simulator's own knowledge, sampled on every
	// install start and end; Bound is floor(max_in_flight × initial_count)
	// (at least 1) + 1 for the lowest-id guard.
	MaxInFlightActive int `json:"max_in_flight_active"`
	MaxInFlightCanary int `json:"max_in_flight_canary"`
	Bound             int `json:"bound"`
	// Starts counts install attempts; BadVersionHosts the distinct hosts that
	// started a version with a failure rate > 0; Failed the attempts that
	// rolled back; StartsAfterHalt attempts begun after the sim saw the halt
	// (installs of agents told before it are not in it).
	Starts          int `json:"starts"`
	BadVersionHosts int `json:"bad_version_hosts"`
	Failed          int `json:"failed"`
	StartsAfterHalt int `json:"starts_after_halt"`
	FailedCount     int `json:"controller_failed_count"`
	FailureLimit    int `json:"failure_limit"` // failure_threshold × initial_count
	OnTarget        int `json:"on_target"`
	// Stuck counts the hosts whose install never ends (Options.Stuck);
	// TimedOut is the controller's timed_out_count.
	Stuck    int `json:"stuck"`
	TimedOut int `json:"controller_timed_out_count"`
	// Blocked counts install attempts blocked on infrastructure
	// (Options.InfraFail) and BlockedHosts the distinct hosts;
	// MaxBlocked is the most the controller counted blocked at once
	// (group status "blocked"), HeldSeen whether it ever held the group.
	Blocked      int  `json:"blocked"`
	BlockedHosts int  `json:"blocked_hosts"`
	MaxBlocked   int  `json:"controller_max_blocked"`
	HeldSeen     bool `json:"held_seen"`
	// Analysis are the group's metric analysis checks as the controller
	// last wrote them; OnTargetAtHalt how many of its hosts ran the
	// target when the simulator saw the group halt (installs in flight
	// then may finish after).
	Analysis       []rollout.CheckStatus `json:"analysis,omitempty"`
	OnTargetAtHalt int                   `json:"on_target_at_halt"`
	// Windowed runs (Options.Windows): the group's transitions in
	// simulated time; how often its window closed on it (active → done)
	// and reopened (done → active); the installs of the target begun
	// outside its window under a time-based plan (must be 0).
	Transitions         []Transition `json:"transitions,omitempty"`
	WindowCloses        int          `json:"window_closes,omitempty"`
	WindowReopens       int          `json:"window_reopens,omitempty"`
	StartsOutsideWindow int          `json:"starts_outside_window,omitempty"`
	// InconclusiveSeen: a check of the group was seen inconclusive (the
	// group held on it).
	InconclusiveSeen bool `json:"inconclusive_seen"`
	// Issue 28: HaltAfter is started_at → halted_at as the controller
	// recorded them (0 when not halted); Adaptive and Rate what the
	// simulator saw of the group's adaptive bound and rate in its statuses.
	HaltAfter time.Duration  `json:"halt_after_ns,omitempty"`
	Adaptive  AdaptiveReport `json:"adaptive,omitzero"`
	Rate      RateReport     `json:"rate,omitzero"`
}

// AdaptiveReport is what the simulator saw of a group's adaptive
// in-flight bound: where it started, its lowest and highest, the last,
// the most max_in_flight allows, and how many moves of each cause.
type AdaptiveReport struct {
	Start, Min, Max, Last, Window int
	Moves                         map[string]int
}

// RateReport is what the simulator saw of a group's rate: each new
// allowance in order (the ramp), and the most agents one period started
// (its status's started, at most).
type RateReport struct {
	Allowances []int
	MaxStarted int
}

// Report is the outcome of one simulated rollout.
type Report struct {
	Agents      int           `json:"agents"`
	Connections int           `json:"connections"`
	Duration    time.Duration `json:"duration_ns"` // spec write → end
	Outcome     string        `json:"outcome"`     // done | halted | stuck | timeout | rss-limit | interrupted
	Groups      []GroupReport `json:"groups"`

	NotifyP50 time.Duration `json:"notify_p50_ns"` // spec write → agent saw it
	NotifyP99 time.Duration `json:"notify_p99_ns"`
	Notified  int           `json:"notified"`

	HeartbeatsSent     uint64  `json:"heartbeats_sent"`
	HeartbeatsReceived uint64  `json:"heartbeats_received"` // controller Counters()
	HeartbeatsRejected uint64  `json:"heartbeats_rejected"`
	HeartbeatsPerSec   float64 `json:"heartbeats_per_sec"`
	Churned            uint64  `json:"churned"`
	// ProcessCPU is user+system CPU of the whole process during the rollout
	// (getrusage): controller, embedded nats-server and simulator together.
	ProcessCPU time.Duration `json:"process_cpu_ns"`
	// RSSBytes is VmRSS of the whole test process at the end,
	// RSSPeakBytes its peak (VmHWM).
	RSSBytes     int64 `json:"rss_bytes"`
	RSSPeakBytes int64 `json:"rss_peak_bytes"`
	// RolloutPass and StatsWrite are the controller's own timings of its
	// rollout passes and stats writes during the rollout.
	RolloutPass PassTimes `json:"rollout_pass"`
	StatsWrite  PassTimes `json:"stats_write"`
	// Apps is every app's own outcome when the run had more than one
	// (Options.Apps): Outcome and Groups above are then the first app's,
	// the heartbeat, CPU, RSS and pass figures the whole run's.
	Apps []AppReport `json:"apps,omitempty"`
	// SimFrom and SimUntil are, on a compressed clock (Options.TimeScale),
	// the simulated times of the plan write and of the end.
	SimFrom  time.Time `json:"sim_from,omitzero"`
	SimUntil time.Time `json:"sim_until,omitzero"`
}

// AppReport is one app's rollout in a run of several.
type AppReport struct {
	Name           string        `json:"name"`
	Outcome        string        `json:"outcome"`
	Groups         []GroupReport `json:"groups"`
	NotifyP50      time.Duration `json:"notify_p50_ns"`
	NotifyP99      time.Duration `json:"notify_p99_ns"`
	Notified       int           `json:"notified"`
	HeartbeatsSent uint64        `json:"heartbeats_sent"`
}

// Run simulates one rollout from StartVersion to TargetVersion (of every
// app, at once, with Options.Apps) and reports.
// The report is returned with the error when the rollout timed out.
func Run(ctx context.Context, opts Options) (*Report, error) {
	o := opts.withDefaults()
	if o.Agents < 1 || o.Groups < 1 || o.Groups > o.Agents {
		return nil, fmt.Errorf("sim: need at least one agent per group (agents %d, groups %d)", o.Agents, o.Groups)
	}
	switch o.Schedule {
	case rollout.ScheduleRegular, rollout.ScheduleImmediate, rollout.ScheduleTimeBased:
	default:
		return nil, fmt.Errorf("sim: schedule %q: want regular, immediate or time-based", o.Schedule)
	}
	if o.Apps > rollout.MaxApps {
		return nil, fmt.Errorf("sim: %d apps, at most %d", o.Apps, rollout.MaxApps)
	}
	url := o.URL
	if url == "" {
		dir, err := os.MkdirTemp("", "fleetwave-sim-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:-1", StoreDir: dir, ServerName: "sim"})
		if err != nil {
			return nil, err
		}
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
		url = ns.ClientURL()
	}
	var clk *scaledClock
	if o.TimeScale > 1 {
		clk = newScaledClock(o.SimStart, o.TimeScale)
	}
	var sims []*Sim
	for _, app := range appNames(o.Apps) {
		sims = append(sims, newSim(o, url, app, clk))
	}
	s := sims[0] // the default app: progress, app metrics, the report's groups
	nc, err := nats.Connect(url, nats.Name("fleetwave-sim-controller"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("sim: connect %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	fleet, err := kv.Ensure(ctx, js, kv.Options{AgentExpiry: o.AgentExpiry, Memory: o.URL == ""})
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	cfg, err := s.writeConfig(ctx, fleet, appNames(o.Apps))
	if err != nil {
		return nil, err
	}
	for _, a := range sims {
		a.cfg = cfg
		ns, err := kv.NS(cfg, a.app)
		if err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		a.setNS(ns)
	}
	copts := controller.Options{
		ID: "sim", StatsInterval: o.StatsInterval, HeartbeatInterval: o.HeartbeatInterval,
		AgentExpiry: o.AgentExpiry, ReconcileInterval: o.ReconcileInterval, Log: o.Log,
	}
	if clk != nil {
		// The controller counts in simulated time.
		copts.Clock = clk
		copts.StatsInterval, copts.HeartbeatInterval = s.simDur(o.StatsInterval), s.simDur(o.HeartbeatInterval)
		copts.AgentExpiry, copts.ReconcileInterval = s.simDur(o.AgentExpiry), s.simDur(o.ReconcileInterval)
	}
	ctrl, err := controller.New(fleet, copts)
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() {
		if err := ctrl.Run(runCtx); err != nil && runCtx.Err() == nil {
			o.Log.Error("controller stopped", "err", err)
		}
	})

	for _, a := range sims {
		for n := 0; n*o.AgentsPerConn < o.Agents; n++ {
			count := min(o.AgentsPerConn, o.Agents-n*o.AgentsPerConn)
			sh := newShard(a, n, count)
			a.shards = append(a.shards, sh)
			defer sh.close()
			if err := sh.start(runCtx); err != nil {
				return nil, fmt.Errorf("sim: app %s shard %d: %w", a.ns.Name, n, err)
			}
		}
	}
	if o.AppMetricsListen != "" {
		stopMetrics, err := s.serveAppMetrics(o.AppMetricsListen)
		if err != nil {
			return nil, err
		}
		defer stopMetrics()
	}
	for _, a := range sims {
		for _, sh := range a.shards {
			wg.Go(func() { sh.run(runCtx) })
		}
	}

	// Progress lines, every ProgressEvery, in the warm-up and the rollout.
	mark := progressMark{at: time.Now()}
	phase, phaseStart, lastProgress := "warm-up", time.Now(), time.Now()
	tellProgress := func() {
		if o.Progress != nil && time.Since(lastProgress) >= o.ProgressEvery {
			lastProgress = time.Now()
			o.Progress(s.progress(ctrl, phase, phaseStart, &mark))
		}
	}

	// Warm up: every agent of every app established in the controller and
	// counted in fleet_stats, so initial_count is the whole group.
	counted := 0
	if err := s.until(ctx, 30*time.Second+20*o.HeartbeatInterval, func() (bool, error) {
		tellProgress()
		if err := s.overRSS(); err != nil {
			return false, err
		}
		stats, err := fleet.ReadStats(ctx)
		if err != nil {
			return false, err
		}
		total := 0
		mergeAt := time.Now()
		if clk != nil {
			// Written every simulated StatsInterval: fresh as of the
			// last one.
			mergeAt = time.Time{}
			for _, st := range stats {
				mergeAt = later(mergeAt, st.At)
			}
		}
		for _, a := range sims {
			for _, gs := range kv.MergeStats(kv.StatsOf(stats, a.ns), mergeAt) {
				total += gs.Versions.Total()
			}
		}
		counted = total
		return total == o.Agents*len(sims), nil
	}); err != nil {
		return nil, fmt.Errorf("sim: warm-up: not every agent counted (%d of %d in fleet_stats): %w", counted, o.Agents*len(sims), err)
	}

	recv0, _ := ctrl.Counters()
	rp0, sw0 := passTimes(ctrl)
	cpu0 := processCPU()
	start := time.Now()
	phase, phaseStart = "rollout", start
	mark = progressMark{at: start, recv: recv0, rollout: rp0, stats: sw0}
	spec := rollout.DefaultSpec(o.StartVersion, o.TargetVersion)
	spec.Critical = !o.windowed() // windows ignored; dependencies still apply
	spec.Schedule = o.Schedule
	for _, a := range sims {
		a.stats.setSpecAt(time.Now())
		if o.HeartbeatLag > 0 {
			from := time.Now().Add(o.LagFrom)
			if o.LagFor > 0 {
				a.lagUntil.Store(from.Add(o.LagFor).UnixNano())
			}
			a.lagFrom.Store(from.UnixNano())
		}
		a.specSimAt = a.now()
		if err := saveLatest(ctx, fleet.Plan, a.ns.Spec(), spec); err != nil {
			return nil, err
		}
		a.churnOn.Store(int64(o.Churn * 1000))
	}
	churnStop := time.AfterFunc(o.ChurnFor, func() {
		for _, a := range sims {
			a.churnOn.Store(0)
		}
	})
	defer churnStop.Stop()

	err = s.until(ctx, o.Timeout, func() (bool, error) {
		tellProgress()
		if err := s.overRSS(); err != nil {
			for _, a := range sims {
				a.outcome = "rss-limit"
			}
			return false, err
		}
		all := true
		for _, a := range sims {
			if !a.ended() {
				all = false
			}
		}
		return all, nil
	})
	end := time.Now()
	for _, a := range sims {
		if err != nil && ctx.Err() != nil {
			a.outcome = "interrupted"
		}
		a.churnOn.Store(0)
	}
	if o.AtEnd != nil {
		o.AtEnd()
	}

	rep := s.report(ctrl, end.Sub(start), recv0, cpu0)
	if clk != nil {
		rep.SimFrom, rep.SimUntil = s.specSimAt, s.now()
		if loc, err := cfg.Location(); err == nil {
			rep.SimFrom, rep.SimUntil = rep.SimFrom.In(loc), rep.SimUntil.In(loc)
		}
	}
	rp, sw := passTimes(ctrl)
	rep.RolloutPass, rep.StatsWrite = rp.since(rp0), sw.since(sw0)
	rep.Outcome = s.outcome
	if len(sims) > 1 {
		rep.HeartbeatsSent, rep.Connections = 0, 0
		for _, a := range sims {
			rep.Connections += len(a.shards)
			ar := a.report(ctrl, end.Sub(start), recv0, cpu0)
			rep.HeartbeatsSent += ar.HeartbeatsSent
			rep.Apps = append(rep.Apps, AppReport{Name: a.ns.Name, Outcome: a.outcome, Groups: ar.Groups,
				NotifyP50: ar.NotifyP50, NotifyP99: ar.NotifyP99, Notified: ar.Notified, HeartbeatsSent: ar.HeartbeatsSent})
		}
	}
	if err != nil {
		return rep, fmt.Errorf("sim: rollout not finished: %w", err)
	}
	return rep, nil
}

// ended reports whether the app's rollout is over (s.outcome says how):
// every group done, or stuck, or halted with nothing in flight for Settle.
func (s *Sim) ended() bool {
	o := s.o
	if o.windowed() {
		return s.windowedEnded()
	}
	sts, inFlight := s.stats.snapshot()
	stuck := s.stats.stuckCounts()
	done, halted, timedOut := true, false, false
	for i, st := range sts {
		// A group whose only agents off the target are stuck, all
		// timed out, and nothing else installing, is as far as it goes.
		over := st.TargetVersion == o.TargetVersion && st.State == rollout.StateActive && !st.Halted &&
			st.Progress == 1 && stuck[i].n > 0 && st.TimedOutCount == stuck[i].n && stuck[i].inFlight == stuck[i].n
		if over {
			timedOut = true
			continue
		}
		if st.TargetVersion != o.TargetVersion || st.State != rollout.StateDone {
			done = false
		}
		if st.TargetVersion == o.TargetVersion && st.Halted {
			halted = true
		}
	}
	switch {
	case done && timedOut:
		s.outcome = "stuck"
		return true
	case done:
		s.outcome = "done"
		return true
	case halted && inFlight == 0:
		if s.haltQuiet.IsZero() {
			s.haltQuiet = time.Now()
		}
		if time.Since(s.haltQuiet) >= o.Settle {
			s.outcome = "halted"
			return true
		}
	default:
		s.haltQuiet = time.Time{}
	}
	return false
}

func (s *Sim) writeConfig(ctx context.Context, fleet *kv.Fleet, apps []string) (rollout.Config, error) {
	cfg := rollout.DefaultConfig()
	for _, a := range apps {
		if a != "" {
			cfg.Apps = append(cfg.Apps, rollout.AppConfig{Name: a})
		}
	}
	cfg.Groups = nil
	cfg.Timezone = s.o.Timezone
	for i, name := range s.groups {
		g := rollout.DefaultGroup(name)
		g.JitterSeconds = 0
		g.CanaryCount = s.o.CanaryCount
		g.MaxInFlight = s.o.MaxInFlight
		g.FailureThreshold = s.o.FailureThreshold
		g.HealthTimeout = rollout.Duration(10 * time.Second) // the minimum allowed
		if s.scaled() {
			// 10s of real time, as far as the config allows: a canary
			// late by a loaded machine's second is not missing.
			g.HealthTimeout = rollout.Duration(min(s.simDur(10*time.Second), time.Hour))
		}
		g.MinHealthyTime = rollout.Duration(s.o.MinHealthyTime)
		if s.o.UpdateTimeout > 0 {
			g.UpdateTimeout = rollout.Duration(s.o.UpdateTimeout)
		}
		g.Rate, g.AdaptiveInFlight = s.o.Rate, s.o.AdaptiveInFlight
		s.o.applyWindow(i, &g)
		cfg.Groups = append(cfg.Groups, g)
	}
	cfg.PrometheusURL, cfg.Analysis = s.o.PrometheusURL, s.o.Analysis
	switch {
	case s.o.NoQuarantine:
		cfg.QuarantineAfter = 0
	case s.o.QuarantineAfter > 0:
		cfg.QuarantineAfter = s.o.QuarantineAfter
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("sim: config: %w", err)
	}
	return cfg, saveLatest(ctx, fleet.Config, kv.KeyConfig, cfg)
}

// saveLatest writes v over whatever is there (an external server may hold
// an earlier run's value).
func saveLatest[T any](ctx context.Context, b jetstream.KeyValue, key string, v T) error {
	var rev uint64
	if e, err := b.Get(ctx, key); err == nil {
		rev = e.Revision()
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
		return fmt.Errorf("sim: read %s: %w", key, err)
	}
	if _, err := kv.Save(ctx, b, key, v, rev); err != nil {
		return fmt.Errorf("sim: write %s: %w", key, err)
	}
	return nil
}

// errRSSLimit stops a run whose process outgrew Options.MaxRSS.
var errRSSLimit = errors.New("process RSS over the limit")

// overRSS is errRSSLimit when the process is over Options.MaxRSS.
func (s *Sim) overRSS() error {
	if s.o.MaxRSS <= 0 {
		return nil
	}
	if r := rss(); r > s.o.MaxRSS {
		return fmt.Errorf("%w: %d MiB > %d MiB", errRSSLimit, r>>20, s.o.MaxRSS>>20)
	}
	return nil
}

// until polls cond every 50ms until it is true, fails, or timeout passes.
// An errRSSLimit from cond ends it at once.
func (s *Sim) until(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if errors.Is(err, errRSSLimit) {
			return err
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-t.C:
		}
	}
}

func (s *Sim) report(ctrl *controller.Controller, d time.Duration, recv0 uint64, cpu0 time.Duration) *Report {
	recv, rej := ctrl.Counters()
	rep := &Report{
		Agents: s.o.Agents, Connections: len(s.shards), Duration: d,
		HeartbeatsSent: s.stats.beats.Load(), HeartbeatsReceived: recv, HeartbeatsRejected: rej,
		HeartbeatsPerSec: float64(recv-recv0) / d.Seconds(),
		Churned:          s.stats.churned.Load(),
		ProcessCPU:       processCPU() - cpu0,
		RSSBytes:         procStatus("VmRSS:"),
		RSSPeakBytes:     procStatus("VmHWM:"),
	}
	onTarget := make([]int, len(s.groups))
	for _, sh := range s.shards {
		sh.countOn(s.o.TargetVersion, onTarget)
	}
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	lat := sortDurations(s.stats.notifyLat)
	rep.Notified, rep.NotifyP50, rep.NotifyP99 = len(lat), percentile(lat, 0.50), percentile(lat, 0.99)
	for i := range s.stats.groups {
		gt := &s.stats.groups[i]
		st := gt.status
		gr := GroupReport{
			Name: s.groups[i], State: st.State, Halted: st.Halted, HaltReason: st.HaltReason,
			InitialCount: st.InitialCount, Canaries: len(st.Canaries),
			MaxInFlightActive: gt.maxActive, MaxInFlightCanary: gt.maxCanary,
			Bound:  InFlightBound(s.o.MaxInFlight, st.InitialCount),
			Starts: gt.starts, BadVersionHosts: len(gt.badStarts), Failed: gt.failed,
			StartsAfterHalt: gt.startsAfterHalt, FailedCount: st.FailedCount,
			FailureLimit: int(math.Floor(s.o.FailureThreshold.Of(st.InitialCount))),
			OnTarget:     onTarget[i],
			Stuck:        gt.stuck, TimedOut: st.TimedOutCount,
			Blocked: gt.blocked, BlockedHosts: len(gt.blockedHosts), MaxBlocked: gt.maxBlocked, HeldSeen: gt.heldSeen,
			Analysis: st.Analysis, OnTargetAtHalt: gt.onTargetAtHalt, InconclusiveSeen: gt.inconclusiveSeen,
		}
		if st.State == rollout.StateDone && !st.StartedAt.IsZero() {
			gr.WallTime = st.DoneAt.Sub(st.StartedAt)
		}
		if st.Halted && !st.StartedAt.IsZero() {
			gr.HaltAfter = st.HaltedAt.Sub(st.StartedAt)
		}
		gr.Adaptive, gr.Rate = gt.adaptive, gt.rate
		gr.Adaptive.Moves = maps.Clone(gt.adaptive.Moves)
		gr.Rate.Allowances = slices.Clone(gt.rate.Allowances)
		gr.Transitions = append([]Transition(nil), gt.win.transitions...)
		if loc, err := s.cfg.Location(); err == nil {
			for i := range gr.Transitions {
				gr.Transitions[i].At = gr.Transitions[i].At.In(loc)
			}
		}
		gr.WindowCloses, gr.WindowReopens, gr.StartsOutsideWindow = gt.win.closes, gt.win.reopens, gt.win.startsOutside
		rep.Groups = append(rep.Groups, gr)
	}
	return rep
}

// InFlightBound is the most agents of a group that may be updating at once
// in the active phase: rollout.InFlightWindow, plus one for the lowest-id
// guard against a statistical deadlock.
func InFlightBound(maxInFlight rollout.Percent, initial int) int {
	return rollout.InFlightWindow(maxInFlight, initial) + 1
}

// processCPU is the user+system CPU time of this whole process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rss is VmRSS of this whole process (0 where there is no /proc).
func rss() int64 { return procStatus("VmRSS:") }

// procStatus is a size in /proc/self/status, in bytes (0 elsewhere).
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}
