// Command sim runs one simulated rollout against a real in-process
// controller and prints the report. See docs/simulator.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/sim"
)

type failRates map[string]float64

func (f failRates) String() string { return fmt.Sprint(map[string]float64(f)) }

func (f failRates) Set(s string) error {
	v, p, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want VERSION=P, e.g. 2.0.0=0.1")
	}
	x, err := strconv.ParseFloat(p, 64)
	if err != nil || x < 0 || x > 1 {
		return fmt.Errorf("probability %q: want 0..1", p)
	}
	f[v] = x
	return nil
}

// windowFlags are the --window flags.
type windowFlags []sim.Window

func (w *windowFlags) String() string { return fmt.Sprint(*w) }

func (w *windowFlags) Set(s string) error {
	win, err := sim.ParseWindow(s)
	if err != nil {
		return err
	}
	*w = append(*w, win)
	return nil
}

func main() {
	code := 0
	defer func() { os.Exit(code) }()
	var o sim.Options
	fr, stuck, infra := failRates{}, failRates{}, failRates{}
	errRate, errFrom := failRates{}, failRates{}
	check := rollout.Check{Name: "error-rate"}
	checkInterval := flag.Duration("check-interval", time.Second, "the check's interval")
	flag.StringVar(&o.PrometheusURL, "prometheus-url", "", "Prometheus the controller's metric analysis queries (with it, every group runs the check --check-query); it must scrape --app-metrics-listen")
	flag.StringVar(&o.AppMetricsListen, "app-metrics-listen", "", "serve the simulated app's metrics (sim_app_error_rate{group,version}) at http://ADDR/metrics")
	flag.StringVar(&check.Query, "check-query", `max(sim_app_error_rate{group="{{.Group}}",version="{{.Version}}"})`, "the check's PromQL query")
	flag.StringVar((*string)(&check.Success), "check-success", "< 0.05", "the check's success condition")
	flag.IntVar(&check.Count, "check-count", 3, "successful measurements needed in canary")
	flag.IntVar(&check.InconclusiveLimit, "check-inconclusive-limit", 5, "inconclusive measurements in a row that halt the group")
	flag.Var(errRate, "error-rate", "VERSION=RATE: the app's error rate on hosts running VERSION (repeatable; others run at 0.001)")
	flag.Var(errFrom, "error-rate-from", "VERSION=SHARE: a group's hosts on VERSION report its --error-rate only once this share of the group runs it (repeatable)")
	mif := flag.Float64("max-in-flight", 20, "max_in_flight percent of each group")
	fth := flag.Float64("failure-threshold", 5, "failure_threshold percent of each group")
	canaries := flag.Int("canaries", 5, "canary_count of each group (0-10)")
	quarantine := flag.Int("quarantine-after", 3, "quarantine_after: agents rolled back from a version before it is quarantined fleet-wide (0: off)")
	out := flag.String("o", "table", "output: table|json")
	verbose := flag.Bool("v", false, "log the controller")
	flag.IntVar(&o.Agents, "agents", 2000, "virtual agents")
	flag.IntVar(&o.Groups, "groups", 3, "groups g1..gN, each after the one before")
	flag.IntVar(&o.AgentsPerConn, "agents-per-conn", 5000, "virtual agents per NATS connection")
	flag.IntVar(&o.Apps, "apps", 1, "apps every host runs (app1..appN, app1 the default app), all rolled out at once")
	compare := flag.String("compare", "", "a JSON report (-o json) of a one-app run: print this run's figures as ratios to it")
	flag.Var(fr, "fail-rate", "VERSION=P: installs of VERSION fail on this fraction of hosts (repeatable)")
	flag.Var(stuck, "stuck", "VERSION=P: installs of VERSION never end (stuck in the health wait) on this fraction of hosts (repeatable)")
	flag.Var(infra, "infra-fail", "VERSION=P: installs of VERSION are blocked on infrastructure (release site 503) on this fraction of hosts, for --infra-for from their first attempt (repeatable)")
	flag.DurationVar(&o.InfraFor, "infra-for", 5*time.Second, "how long each --infra-fail host stays blocked")
	flag.DurationVar(&o.InfraRetry, "infra-retry", time.Second, "how often a blocked host retries")
	flag.DurationVar(&o.UpdateTimeout, "update-timeout", 0, "update_timeout of each group (1m..; 0: the default, 30m)")
	flag.DurationVar(&o.InstallMin, "install-min", 300*time.Millisecond, "shortest install")
	flag.DurationVar(&o.InstallMax, "install-max", time.Second, "longest install (uniform between)")
	flag.Float64Var(&o.Churn, "churn", 0, "agents replaced per second (leave + join) during the rollout")
	flag.DurationVar(&o.ChurnFor, "churn-for", 10*time.Second, "how long churn lasts from the spec write")
	flag.StringVar(&o.URL, "nats", "", "external NATS URL (default: embedded server, memory storage)")
	flag.StringVar(&o.StartVersion, "from", "1.0.0", "start version")
	flag.StringVar(&o.TargetVersion, "to", "2.0.0", "target version")
	flag.DurationVar(&o.HeartbeatInterval, "heartbeat", time.Second, "heartbeat interval (agents and controller)")
	flag.DurationVar(&o.ReconcileInterval, "reconcile", 300*time.Millisecond, "controller reconcile interval")
	flag.DurationVar(&o.StatsInterval, "stats", time.Second, "controller stats interval")
	flag.DurationVar(&o.MinHealthyTime, "min-healthy", 0, "min_healthy_time (0s..)")
	flag.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up after this long")
	flag.Int64Var(&o.Seed, "seed", 1, "seed for agent ids, jitter and install times")
	progress := flag.Duration("progress", 0, "print a progress line on stderr this often (0: none)")
	maxRSS := flag.Int64("max-rss", 0, "stop the run (outcome rss-limit) once the process RSS exceeds this many MiB (0: no limit)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (warm-up and rollout) to this file")
	memProfile := flag.String("memprofile", "", "write a heap profile to this file when the rollout ends (before anything is stopped)")
	mutexProfile := flag.String("mutexprofile", "", "write a mutex contention profile (1 in 10 events) to this file when the rollout ends")
	var windows windowFlags
	flag.Var(&windows, "window", "DAYS@HOUR[+LENGTH][/MAX_IN_FLIGHT]: group i's window (repeatable, cycled over the groups), e.g. Mon,Wed@22+4h/5%; with it the plan follows the windows (not critical)")
	schedule := flag.String("schedule", "regular", "the plan's schedule: regular, immediate or time-based")
	flag.StringVar(&o.Timezone, "timezone", "UTC", "the config's time zone, the one windows are read in")
	flag.Float64Var(&o.TimeScale, "time-scale", 0, "run the controller and agents on a clock this many times faster than real time (3600: a second is an hour); durations given here stay real")
	simStart := flag.String("sim-start", "", "the compressed clock's start, RFC 3339 (default: Monday 2026-03-23 00:00 in --timezone)")
	flag.DurationVar(&o.SimFor, "sim-for", 7*24*time.Hour, "with --window: end the run after this much simulated time from the plan write")
	rateStart := flag.String("rate-start", "", "issue 28: each group's rate start, like 50/s (empty: no rate)")
	rateFactor := flag.Float64("rate-factor", 0, "the rate's factor (1-10; 0: flat)")
	rateMax := flag.String("rate-max", "", "the rate's max, like 800/s (needed with a factor)")
	flag.BoolVar(&o.AdaptiveInFlight, "adaptive", false, "issue 28: adaptive_in_flight on every group")
	vsFixed := flag.Bool("adaptive-vs-fixed", false, "issue 28: run twice in this process, with the fixed bound then --adaptive, and compare the halts")
	flag.DurationVar(&o.HeartbeatLag, "heartbeat-lag", 0, "issue 28: inject heartbeat lag: agents stamp heartbeats this far in the past")
	flag.DurationVar(&o.LagFrom, "lag-from", 0, "the injected lag starts this long after the spec write")
	flag.DurationVar(&o.LagFor, "lag-for", 0, "the injected lag lasts this long (0: to the end)")
	flag.Parse()
	if *rateStart != "" {
		rc := &rollout.RateConfig{Factor: *rateFactor}
		var err error
		if rc.Start, err = rollout.ParseRatePer(*rateStart); err == nil && *rateMax != "" {
			rc.Max, err = rollout.ParseRatePer(*rateMax)
		}
		if err == nil {
			cfg := rollout.DefaultConfig()
			cfg.Groups[0].Rate = rc
			err = cfg.Validate()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "sim: --rate-start/--rate-factor/--rate-max:", err)
			code = 2
			return
		}
		o.Rate = rc
	}
	o.Windows, o.Schedule = windows, rollout.Schedule(*schedule)
	if *simStart != "" {
		t, err := time.Parse(time.RFC3339, *simStart)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sim: --sim-start:", err)
			code = 2
			return
		}
		o.SimStart = t
	}
	var base *sim.Report
	if *compare != "" {
		b, err := os.ReadFile(*compare)
		if err == nil {
			base = new(sim.Report)
			err = json.Unmarshal(b, base)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "sim: --compare:", err)
			code = 2
			return
		}
	}
	if *out != "table" && *out != "json" {
		fmt.Fprintln(os.Stderr, "sim: -o must be table or json")
		code = 2
		return
	}
	o.MaxInFlight, o.FailureThreshold = rollout.Percent(*mif), rollout.Percent(*fth)
	o.CanaryCount, o.NoCanaries = *canaries, *canaries == 0
	o.QuarantineAfter, o.NoQuarantine = *quarantine, *quarantine == 0
	o.FailRate, o.Stuck, o.InfraFail = fr, stuck, infra
	o.ErrorRate, o.ErrorRateFrom = errRate, errFrom
	if o.PrometheusURL != "" {
		check.Interval = rollout.Duration(*checkInterval)
		o.Analysis = []rollout.Check{check}
	}
	if *verbose {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	o.MaxRSS = *maxRSS << 20
	if *progress > 0 {
		o.ProgressEvery = *progress
		o.Progress = func(p sim.Progress) { sim.WriteProgress(os.Stderr, p) }
	}
	if *mutexProfile != "" {
		runtime.SetMutexProfileFraction(10)
	}
	o.AtEnd = func() {
		for _, p := range []struct{ name, path string }{{"heap", *memProfile}, {"mutex", *mutexProfile}} {
			if p.path == "" {
				continue
			}
			if err := writeProfile(p.name, p.path); err != nil {
				fmt.Fprintln(os.Stderr, "sim:", err)
			}
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "sim: cpu profile:", err)
			code = 2
			return
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	// Interrupted or terminated, the run still reports where it was (and
	// writes its profiles).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var fixed *sim.Report
	if *vsFixed {
		fo := o
		fo.AdaptiveInFlight = false
		var err error
		if fixed, err = sim.Run(ctx, fo); fixed != nil {
			fmt.Fprintln(os.Stdout, "fixed bound (max_in_flight alone):")
			_ = fixed.WriteTable(os.Stdout)
			fmt.Fprintln(os.Stdout, "\nadaptive_in_flight:")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
			return
		}
		o.AdaptiveInFlight = true
	}
	rep, err := sim.Run(ctx, o)
	if fixed != nil && rep != nil {
		defer sim.WriteAdaptiveComparison(os.Stdout, fixed, rep)
	}
	if rep != nil {
		if *out == "json" {
			_ = rep.WriteJSON(os.Stdout)
		} else {
			_ = rep.WriteTable(os.Stdout)
		}
		if base != nil {
			w := os.Stdout
			if *out == "json" {
				w = os.Stderr
			}
			fmt.Fprintln(w)
			_ = sim.WriteComparison(w, base, rep)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
}

// writeProfile writes the named runtime/pprof profile (the heap: the live
// heap after a collection).
func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if name == "heap" {
		runtime.GC()
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("%s profile: %w", name, err)
	}
	return f.Close()
}
