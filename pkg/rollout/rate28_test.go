package rollout

import (
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Issue 28, points 6 and 7: rate with an exponential ramp, and adaptive in
// flight. Table cases drive Next on an active group of 100 agents; the
// property test drives random histories.

// activeGroup28 is group staging of testConfig with max_in_flight mif, the
// given rate and adaptive setting, active on v1 → v2 with 100 agents
// (ids spread evenly) and no canaries.
func activeGroup28(mif Percent, rate *RateConfig, adaptive bool) (Config, GroupStatus, []AgentID) {
	cfg := testConfig()
	cfg.Groups[0].MaxInFlight, cfg.Groups[0].Rate, cfg.Groups[0].AdaptiveInFlight = mif, rate, adaptive
	cfg.Groups[0].CanaryCount = 0
	start := time.Date(2024, 3, 5, 3, 0, 0, 0, time.UTC)
	st := GroupStatus{V: 1, Group: "staging", State: StateActive, Since: start, Mode: ModeEnabled, TargetVersion: v2, StartVersion: v1,
		InitialCount: 100, FailuresSince: start, StartedAt: start,
		JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime}
	return cfg, st, spreadIDs(100, 0.5)
}

// fleet28 is the 100 agents: the first onTarget on v2, the next failed
// rolled back from v2 (at start), the rest on v1.
func fleet28(ids []AgentID, onTarget, failed int, start time.Time) []AgentView {
	out := onVersion(ids, v1)
	for i := range onTarget {
		out[i].ActiveVersion = v2
	}
	for i := onTarget; i < onTarget+failed; i++ {
		out[i].Rollback, out[i].RollbackFrom, out[i].StartTime = true, v2, start.Add(time.Second)
	}
	return out
}

// told counts the agents Decide tells to update to v2 that are not on it
// nor rolled back from it: the agents in flight.
func told(st GroupStatus, agents []AgentView) int {
	n := 0
	for _, a := range agents {
		if _, u := Decide(a.ID, DefaultSpec(v1, v2), st, ModeEnabled); u && a.ActiveVersion != v2 && !rolledBackFrom(a, v2) {
			n++
		}
	}
	return n
}

func rate28(start, maxPerMin int, factor float64) *RateConfig {
	r := &RateConfig{Start: RatePer{start, time.Minute}, Factor: factor}
	if maxPerMin > 0 {
		r.Max = RatePer{maxPerMin, time.Minute}
	}
	return r
}

func TestRateRampTable(t *testing.T) {
	start := time.Date(2024, 3, 5, 3, 0, 0, 0, time.UTC)
	now := start.Add(time.Hour)
	tests := []struct {
		name     string
		mif      Percent
		rate     *RateConfig
		prev     *RateStatus
		progress float64 // the previous progress
		onTarget int
		failed   int
		// want
		allowance, started, inFlight int
		periodStart                  time.Time
		reason                       string
	}{
		{name: "first active step: start per period", mif: 50, rate: rate28(10, 40, 2),
			allowance: 10, started: 10, inFlight: 10, periodStart: now, reason: "to start with"},
		{name: "the period's allowance is used: nobody more starts although agents finished", mif: 50, rate: rate28(10, 40, 2),
			prev: &RateStatus{Allowance: 10, Started: 10, PeriodStart: now.Add(-30 * time.Second)}, progress: 0.1, onTarget: 10,
			allowance: 10, started: 10, inFlight: 0, periodStart: now.Add(-30 * time.Second)},
		{name: "a period with starts and no failure ramps by the factor", mif: 50, rate: rate28(10, 40, 2),
			prev: &RateStatus{Allowance: 10, Started: 10, PeriodStart: now.Add(-61 * time.Second)}, progress: 0.1, onTarget: 10,
			allowance: 20, started: 20, inFlight: 20, periodStart: now.Add(-time.Second), reason: "ramped from 10 to 20"},
		{name: "the ramp stops at max", mif: 100, rate: rate28(10, 40, 2),
			prev: &RateStatus{Allowance: 30, Started: 30, PeriodStart: now.Add(-60 * time.Second)}, progress: 0.3, onTarget: 30,
			allowance: 40, started: 40, inFlight: 40, periodStart: now, reason: "ramped from 30 to 40"},
		{name: "at max it stays at max", mif: 100, rate: rate28(10, 40, 2),
			prev: &RateStatus{Allowance: 40, Started: 40, PeriodStart: now.Add(-60 * time.Second), Reason: "ramped from 20 to 40"}, progress: 0.4, onTarget: 40,
			allowance: 40, started: 40, inFlight: 40, periodStart: now, reason: "ramped from 20 to 40"},
		{name: "a failure resets to start mid-period; what started in it still counts", mif: 100, rate: rate28(10, 40, 2),
			prev: &RateStatus{Allowance: 40, Started: 5, PeriodStart: now.Add(-10 * time.Second)}, progress: 0.05, onTarget: 4, failed: 1,
			allowance: 10, started: 10, inFlight: 5, periodStart: now.Add(-10 * time.Second), reason: "reset to 10 per 1m: failed_count rose from 0 to 1"},
		{name: "a failure after the allowance was used starts nobody more", mif: 100, rate: rate28(10, 40, 2),
			prev: &RateStatus{Allowance: 40, Started: 20, PeriodStart: now.Add(-10 * time.Second)}, progress: 0.2, onTarget: 19, failed: 1,
			allowance: 10, started: 20, inFlight: 0, periodStart: now.Add(-10 * time.Second), reason: "reset to 10"},
		{name: "a period with a failure does not ramp", mif: 100, rate: rate28(10, 40, 2),
			prev: &RateStatus{Allowance: 10, Started: 10, PeriodStart: now.Add(-60 * time.Second), FailedMark: 1, FailedInPeriod: true, Reason: "reset to 10"}, progress: 0.1, onTarget: 9, failed: 1,
			allowance: 10, started: 10, inFlight: 10, periodStart: now, reason: "reset to 10"},
		{name: "a period with no start holds the allowance", mif: 100, rate: rate28(10, 40, 2),
			prev: &RateStatus{Allowance: 20, Started: 0, PeriodStart: now.Add(-60 * time.Second)}, progress: 0, onTarget: 0,
			allowance: 20, started: 20, inFlight: 20, periodStart: now},
		{name: "the in-flight bound is below the rate: it wins", mif: 5, rate: rate28(40, 0, 0),
			allowance: 40, started: 5, inFlight: 5, periodStart: now},
		{name: "the rate is below the in-flight bound: it wins", mif: 50, rate: rate28(3, 0, 0),
			allowance: 3, started: 3, inFlight: 3, periodStart: now},
		{name: "a flat rate never ramps", mif: 100, rate: rate28(10, 0, 0),
			prev: &RateStatus{Allowance: 10, Started: 10, PeriodStart: now.Add(-60 * time.Second)}, progress: 0.1, onTarget: 10,
			allowance: 10, started: 10, inFlight: 10, periodStart: now},
		{name: "several periods passed: one ramp, the period starts at the last whole one", mif: 100, rate: rate28(10, 40, 2),
			prev: &RateStatus{Allowance: 10, Started: 10, PeriodStart: now.Add(-150 * time.Second)}, progress: 0.1, onTarget: 10,
			allowance: 20, started: 20, inFlight: 20, periodStart: now.Add(-30 * time.Second)},
		{name: "a rate per hour converts max to the start's period", mif: 100,
			rate: &RateConfig{Start: RatePer{1, time.Second}, Factor: 10, Max: RatePer{600, time.Minute}},
			prev: &RateStatus{Allowance: 1, Started: 1, PeriodStart: now.Add(-time.Second)}, progress: 0.01, onTarget: 1,
			allowance: 10, started: 10, inFlight: 10, periodStart: now},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, st, ids := activeGroup28(tc.mif, tc.rate, false)
			st.Progress, st.FailedCount = tc.progress, 0
			if tc.prev != nil {
				r := *tc.prev
				st.Rate = &r
			}
			agents := fleet28(ids, tc.onTarget, tc.failed, start)
			next, _ := Next(Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: st, Agents: agents, Counts: CountAgents(agents), Now: now})
			if next.State != StateActive || next.Halted {
				t.Fatalf("state %s halted %v (%s)", next.State, next.Halted, next.HaltReason)
			}
			r := next.Rate
			if r == nil {
				t.Fatal("no rate status")
			}
			if r.Allowance != tc.allowance || r.Started != tc.started || !r.PeriodStart.Equal(tc.periodStart) {
				t.Errorf("rate = allowance %d started %d period_start %s; want %d %d %s", r.Allowance, r.Started, r.PeriodStart.Format(time.TimeOnly), tc.allowance, tc.started, tc.periodStart.Format(time.TimeOnly))
			}
			if got := told(next, agents); got != tc.inFlight {
				t.Errorf("%d agents in flight, want %d (progress %v)", got, tc.inFlight, next.Progress)
			}
			if !strings.Contains(r.Reason, tc.reason) {
				t.Errorf("reason %q, want it to contain %q", r.Reason, tc.reason)
			}
			if r.Allowance > tc.rate.MaxAllowance() || r.Allowance < tc.rate.Start.N {
				t.Errorf("allowance %d outside start %d .. max %d", r.Allowance, tc.rate.Start.N, tc.rate.MaxAllowance())
			}
			if err := next.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestRateAbsentUnchanged: without a rate (or adaptive), the status has
// neither, and progress is what it always was.
func TestRateAbsentUnchanged(t *testing.T) {
	cfg, st, ids := activeGroup28(20, nil, false)
	st.Progress = 0.2
	agents := fleet28(ids, 20, 0, st.StartedAt)
	next, _ := Next(Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: st, Agents: agents, Counts: CountAgents(agents), Now: st.StartedAt.Add(time.Hour)})
	if next.Rate != nil || next.Adaptive != nil {
		t.Errorf("rate %+v adaptive %+v, want neither", next.Rate, next.Adaptive)
	}
	if next.Progress != 0.4 {
		t.Errorf("progress %v, want 0.4", next.Progress)
	}
}

// TestRateStartsOnlyWhenActive: the canaries are not counted; the rate's
// period begins when the group enters active.
func TestRateStartsOnlyWhenActive(t *testing.T) {
	cfg, _, ids := activeGroup28(50, rate28(10, 40, 2), false)
	cfg.Groups[0].CanaryCount = 3
	spec := DefaultSpec(v1, v2)
	spec.Schedule = ScheduleImmediate
	now := time.Date(2024, 3, 5, 3, 0, 0, 0, time.UTC)
	agents := onVersion(ids, v1)
	st, _ := Next(Input{Config: cfg, Group: "staging", Spec: spec, Agents: agents, Counts: CountAgents(agents), Now: now})
	if st.State != StateCanary || st.Rate != nil {
		t.Fatalf("state %s rate %+v, want canary with no rate", st.State, st.Rate)
	}
}

func TestAdaptiveTable(t *testing.T) {
	start := time.Date(2024, 3, 5, 3, 0, 0, 0, time.UTC)
	now := start.Add(time.Hour)
	tests := []struct {
		name     string
		mif      Percent
		prev     *AdaptiveStatus
		canaries int
		progress float64
		onTarget int
		failed   int
		lag      time.Duration
		backlog  int
		// want
		bound    int
		cause    string
		reason   string
		inFlight int
	}{
		{name: "starts at a tenth of max_in_flight's window", mif: 50,
			bound: 5, cause: AdaptiveStart, reason: "starts at 5 of max_in_flight's 50", inFlight: 5},
		{name: "a tiny window starts at 1", mif: 1,
			bound: 1, cause: AdaptiveStart, inFlight: 1},
		{name: "grows ×2 once as many agents as the bound succeeded", mif: 50,
			prev:     &AdaptiveStatus{Bound: 5, Cause: AdaptiveStart, Since: now.Add(-time.Minute)},
			progress: 0.05, onTarget: 5, bound: 10, cause: AdaptiveGrew, reason: "doubled from 5: 5 agents reached the target", inFlight: 10},
		{name: "does not grow before that", mif: 50,
			prev:     &AdaptiveStatus{Bound: 8, Cause: AdaptiveStart, Since: now.Add(-time.Minute)},
			progress: 0.08, onTarget: 7, bound: 8, cause: AdaptiveStart, inFlight: 8},
		{name: "never above max_in_flight", mif: 30,
			prev:     &AdaptiveStatus{Bound: 20, Cause: AdaptiveGrew, Since: now.Add(-time.Minute)},
			progress: 0.2, onTarget: 20, bound: 30, cause: AdaptiveGrew, inFlight: 30},
		{name: "a failure halves it", mif: 50,
			prev:     &AdaptiveStatus{Bound: 20, Cause: AdaptiveGrew, Since: now.Add(-time.Minute)},
			progress: 0.2, onTarget: 15, failed: 1, bound: 10, cause: AdaptiveFailures, reason: "halved from 20: failed_count rose from 0 to 1", inFlight: 9},
		{name: "in flight above the shrunk bound: nobody new starts", mif: 50,
			prev:     &AdaptiveStatus{Bound: 20, Cause: AdaptiveGrew, Since: now.Add(-time.Minute)},
			progress: 0.2, onTarget: 2, failed: 1, bound: 10, cause: AdaptiveFailures, inFlight: 17},
		{name: "a failure within a heartbeat interval of the last move waits", mif: 50,
			prev:     &AdaptiveStatus{Bound: 20, Cause: AdaptiveGrew, Since: now.Add(-500 * time.Millisecond)},
			progress: 0.2, onTarget: 15, failed: 1, bound: 20, cause: AdaptiveGrew, inFlight: 19},
		{name: "never below 1", mif: 50,
			prev:     &AdaptiveStatus{Bound: 1, Cause: AdaptiveFailures, Since: now.Add(-time.Minute)},
			progress: 0.02, onTarget: 1, failed: 2, bound: 1, cause: AdaptiveFailures, reason: "halved from 1", inFlight: 1},
		{name: "heartbeat lag above the interval halves it, the backlog named", mif: 50,
			prev:     &AdaptiveStatus{Bound: 20, Cause: AdaptiveGrew, Since: now.Add(-time.Minute)},
			progress: 0.2, onTarget: 20, lag: 3 * time.Second, backlog: 1200,
			bound: 10, cause: AdaptiveLag, reason: "heartbeats lag 3s (1200 waiting to be read), more than the heartbeat interval 1s", inFlight: 10},
		{name: "lag stops growth even with successes", mif: 50,
			prev:     &AdaptiveStatus{Bound: 10, Cause: AdaptiveLag, Since: now.Add(-500 * time.Millisecond)},
			progress: 0.2, onTarget: 20, lag: 3 * time.Second, bound: 10, cause: AdaptiveLag, inFlight: 10},
		{name: "lag at the interval is not lag", mif: 50,
			prev:     &AdaptiveStatus{Bound: 10, Cause: AdaptiveStart, Since: now.Add(-time.Minute)},
			progress: 0.1, onTarget: 4, lag: time.Second, bound: 10, cause: AdaptiveStart, inFlight: 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, st, ids := activeGroup28(tc.mif, nil, true)
			st.Progress = tc.progress
			if tc.prev != nil {
				a := *tc.prev
				st.Adaptive = &a
			}
			agents := fleet28(ids, tc.onTarget, tc.failed, start)
			next, _ := Next(Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: st, Agents: agents, Counts: CountAgents(agents), Now: now,
				HeartbeatLag: tc.lag, HeartbeatBacklog: tc.backlog, HeartbeatInterval: time.Second})
			a := next.Adaptive
			if a == nil {
				t.Fatal("no adaptive status")
			}
			if a.Bound != tc.bound || a.Cause != tc.cause {
				t.Errorf("bound %d cause %s, want %d %s (%s)", a.Bound, a.Cause, tc.bound, tc.cause, a.Reason)
			}
			if !strings.Contains(a.Reason, tc.reason) {
				t.Errorf("reason %q, want it to contain %q", a.Reason, tc.reason)
			}
			w := InFlightWindow(tc.mif, 100)
			if a.Bound < 1 || a.Bound > w || a.Max != w {
				t.Errorf("bound %d max %d outside 1..%d", a.Bound, a.Max, w)
			}
			if got := told(next, agents); got != tc.inFlight {
				t.Errorf("%d agents in flight, want %d (progress %v)", got, tc.inFlight, next.Progress)
			}
			if err := next.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestPropertyRateRamp drives one group with a rate (and, one history in
// two, adaptive in flight) through random histories: 1 to 200 agents,
// max_in_flight 1-100%, a rate of 1-30 per minute or per 10 s… ramping by
// 1-4 up to 1-20 times its start, steps of 1 s to 3 min, installs that
// land, fail (rolling back or retrying) or hang, and random heartbeat lag.
// After every Next:
//
//   - the allowance stays within start .. max (MaxAllowance);
//   - the agents newly told to update in one period never exceed the
//     largest allowance of that period, so never the max, and those of one
//     step never the starts the period had left;
//   - when a step lets anyone new start, the agents in flight are at most
//     the in-flight bound: max_in_flight's window, and the adaptive bound
//     when adaptive (which stays within 1..window).
func TestPropertyRateRamp(t *testing.T) {
	histories := 150
	if testing.Short() {
		histories = 40
	}
	var ramped, reset, done, adaptiveMoves int
	for seed := range uint64(histories) {
		var key [32]byte
		binary.LittleEndian.PutUint64(key[:], seed+28_000)
		src := rand.NewChaCha8(key)
		r := rand.New(src)
		g := DefaultGroup("g")
		g.MaxInFlight = Percent(1 + r.IntN(100))
		g.CanaryCount = r.IntN(3)
		g.FailureThreshold = Percent(5 + r.IntN(60))
		per := []time.Duration{10 * time.Second, time.Minute, time.Hour}[r.IntN(3)]
		if per == 10*time.Second {
			per = time.Second
		}
		rc := &RateConfig{Start: RatePer{1 + r.IntN(30), per}}
		if r.IntN(4) != 0 {
			rc.Factor = 1 + 3*r.Float64()
			rc.Max = RatePer{rc.Start.N * (1 + r.IntN(20)), per}
		}
		g.Rate = rc
		g.AdaptiveInFlight = seed%2 == 1
		cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{g}}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		spec := DefaultSpec(v1, v2)
		spec.Schedule = ScheduleImmediate
		n := 1 + r.IntN(200)
		type agent struct {
			AgentView
			updating, fails bool
		}
		agents := make([]*agent, n)
		for i := range agents {
			id, err := NewAgentID(src)
			if err != nil {
				t.Fatal(err)
			}
			agents[i] = &agent{AgentView: AgentView{ID: id, ActiveVersion: v1}}
		}
		pLand, pFail := 0.2+0.8*r.Float64(), 0.15*r.Float64()
		now := time.Date(2024, 3, 4, 10, 0, 0, 0, time.UTC)
		var st GroupStatus
		var period time.Time
		periodStarts, periodMax := 0, 0
		for step := 0; step < 400; step++ {
			views := make([]AgentView, len(agents))
			for i, a := range agents {
				views[i] = a.AgentView
			}
			in := Input{Config: cfg, Group: "g", Spec: spec, Prev: st, Agents: views, Counts: CountAgents(views), Now: now, HeartbeatInterval: time.Second}
			if r.IntN(6) == 0 {
				in.HeartbeatLag, in.HeartbeatBacklog = time.Duration(r.IntN(5000))*time.Millisecond, r.IntN(1000)
			}
			prev := st
			st, _ = Next(in)
			if err := st.Validate(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			started, inFlight := 0, 0
			for _, a := range agents {
				if a.ActiveVersion == v2 || rolledBackFrom(a.AgentView, v2) {
					continue
				}
				_, before := Decide(a.ID, spec, prev, ModeEnabled)
				_, now := Decide(a.ID, spec, st, ModeEnabled)
				if now {
					inFlight++
					if !before && !st.IsCanary(a.ID) {
						started++
					}
				}
			}
			if st.State == StateActive && !st.Halted {
				rs := st.Rate
				if rs == nil {
					t.Fatalf("seed %d step %d: active without a rate status", seed, step)
				}
				if rs.Allowance < rc.Start.N || rs.Allowance > rc.MaxAllowance() {
					t.Fatalf("seed %d step %d: allowance %d outside %d..%d", seed, step, rs.Allowance, rc.Start.N, rc.MaxAllowance())
				}
				if prev.Rate != nil && rs.Allowance > prev.Rate.Allowance {
					ramped++
				}
				if strings.HasPrefix(rs.Reason, "reset") {
					reset++
				}
				if !rs.PeriodStart.Equal(period) {
					period, periodStarts, periodMax = rs.PeriodStart, 0, 0
				}
				periodStarts += started
				periodMax = max(periodMax, rs.Allowance)
				if periodStarts > periodMax || periodStarts > rc.MaxAllowance() || periodStarts != rs.Started {
					t.Fatalf("seed %d step %d: %d started in the period from %s (status says %d), allowance up to %d, max %d",
						seed, step, periodStarts, period.Format(time.TimeOnly), rs.Started, periodMax, rc.MaxAllowance())
				}
				w := InFlightWindow(g.MaxInFlight, st.InitialCount)
				bound := w
				if g.AdaptiveInFlight {
					a := st.Adaptive
					if a == nil || a.Bound < 1 || a.Bound > w {
						t.Fatalf("seed %d step %d: adaptive %+v, window %d", seed, step, a, w)
					}
					if prev.Adaptive != nil && a.Since != prev.Adaptive.Since {
						adaptiveMoves++
					}
					bound = a.Bound
				}
				if started > 0 && inFlight > bound {
					t.Fatalf("seed %d step %d: %d started with %d in flight, more than the bound %d (window %d)", seed, step, started, inFlight, bound, w)
				}
			}
			if st.State == StateDone || st.Halted {
				if st.State == StateDone {
					done++
				}
				break
			}
			for _, a := range agents {
				switch {
				case a.updating:
					if r.Float64() >= pLand {
						break
					}
					a.updating = false
					switch {
					case !a.fails:
						a.ActiveVersion, a.Error = v2, ""
					case r.IntN(2) == 0:
						a.Rollback, a.RollbackFrom = true, v2
					default:
						a.Error = "health check failed"
					}
				default:
					if v, update := Decide(a.ID, spec, st, ModeEnabled); update && v == v2 && a.ActiveVersion != v2 && !a.Rollback {
						a.updating, a.fails, a.StartTime, a.Error = true, r.Float64() < pFail, now, ""
					}
				}
			}
			now = now.Add(time.Duration(1+r.IntN(180)) * time.Second)
		}
	}
	if ramped == 0 || reset == 0 || done == 0 || adaptiveMoves == 0 {
		t.Errorf("coverage: %d ramps, %d resets, %d done, %d adaptive moves; want some of each", ramped, reset, done, adaptiveMoves)
	}
	t.Logf("%d histories: %d ramps, %d steps after a reset, %d done, %d adaptive moves", histories, ramped, reset, done, adaptiveMoves)
}

// TestRateConfigDecode: a bare "10/min" is a flat rate; an unknown field
// in the object is refused (the rest of the config refuses them too).
func TestRateConfigDecode(t *testing.T) {
	for _, tc := range []struct {
		in, err string
		want    RateConfig
	}{
		{in: `"10/min"`, want: RateConfig{Start: RatePer{10, time.Minute}}},
		{in: `{"start": "5/s", "factor": 2, "max": "40/s"}`, want: RateConfig{Start: RatePer{5, time.Second}, Factor: 2, Max: RatePer{40, time.Second}}},
		{in: `{"start": "10/min", "facter": 2}`, err: `unknown field "facter"`},
		{in: `"10/minute"`, err: `rate "10/minute"`},
		{in: `12`, err: `want a JSON object`},
	} {
		var got RateConfig
		err := json.Unmarshal([]byte(tc.in), &got)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want it to contain %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.in, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("%s: %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// FuzzRateConfig: any input decodes or is refused without a panic; a
// rate that decodes and validates writes back to itself.
func FuzzRateConfig(f *testing.F) {
	for _, s := range []string{`"10/min"`, `{"start":"5/s","factor":2,"max":"40/s"}`, `{"start":"1/h"}`, `{"facter":2}`, `null`, `"0/s"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var c RateConfig
		if json.Unmarshal([]byte(in), &c) != nil || c.validate() != nil {
			return
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var back RateConfig
		if err := json.Unmarshal(b, &back); err != nil || back != c {
			t.Fatalf("%s → %s → %+v (%v), want %+v", in, b, back, err, c)
		}
		if c.Start.N > 0 && (c.MaxAllowance() < c.Start.N) {
			t.Fatalf("%+v: max allowance %d below start", c, c.MaxAllowance())
		}
	})
}
