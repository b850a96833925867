package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes the report as indented JSON (durations in nanoseconds).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for humans.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "outcome %s after %v: %d agents on %d connections\n", r.Outcome, r.Duration.Round(time.Millisecond), r.Agents, r.Connections)
	if !r.SimFrom.IsZero() {
		fmt.Fprintf(tw, "simulated time: %s → %s (%s)\n", r.SimFrom.Format(simTimeLayout), r.SimUntil.Format(simTimeLayout), r.SimUntil.Sub(r.SimFrom).Round(time.Minute))
	}
	fmt.Fprintln(tw)
	if len(r.Apps) == 0 {
		writeGroups(tw, r.Groups)
	}
	for _, a := range r.Apps {
		fmt.Fprintf(tw, "app %s: outcome %s; plan write → agent notified p50 %v p99 %v (%d agents); %d heartbeats sent\n", a.Name, a.Outcome,
			a.NotifyP50.Round(time.Microsecond), a.NotifyP99.Round(time.Microsecond), a.Notified, a.HeartbeatsSent)
		writeGroups(tw, a.Groups)
	}
	if len(r.Apps) > 0 {
		fmt.Fprintf(tw, "(every app: the first app's figures below)\n")
	}
	fmt.Fprintf(tw, "plan write → agent notified\tp50 %v\tp99 %v\t(%d agents)\n", r.NotifyP50.Round(time.Microsecond), r.NotifyP99.Round(time.Microsecond), r.Notified)
	fmt.Fprintf(tw, "heartbeats\t%.0f/s ingested\t%d received, %d rejected, %d sent\n", r.HeartbeatsPerSec, r.HeartbeatsReceived, r.HeartbeatsRejected, r.HeartbeatsSent)
	fmt.Fprintf(tw, "process CPU\t%v\t(whole process: controller + embedded nats-server + simulator)\n", r.ProcessCPU.Round(time.Millisecond))
	fmt.Fprintf(tw, "controller passes\trollout %s\tstats write %s\n", r.RolloutPass, r.StatsWrite)
	fmt.Fprintf(tw, "RSS\t%.1f MiB\t(VmRSS of the whole process; peak %.1f MiB)\n", float64(r.RSSBytes)/(1<<20), float64(r.RSSPeakBytes)/(1<<20))
	if r.Churned > 0 {
		fmt.Fprintf(tw, "churn\t%d agents replaced\n", r.Churned)
	}
	return tw.Flush()
}

// writeGroups writes one app's groups: the table, then halts and checks.
func writeGroups(tw io.Writer, groups []GroupReport) {
	fmt.Fprintln(tw, "GROUP\tSTATE\tINITIAL\tON TARGET\tWALL TIME\tMAX IN FLIGHT (ACTIVE/BOUND)\tCANARY PHASE\tBAD-VERSION HOSTS\tFAILED (SIM/CTRL/LIMIT)\tSTARTS AFTER HALT\tSTUCK/TIMED OUT\tBLOCKED (HOSTS/MAX CTRL/HELD)")
	for _, g := range groups {
		state := string(g.State)
		if g.Halted {
			state += " (halted)"
		}
		wall := "-"
		if g.WallTime > 0 {
			wall = g.WallTime.Round(time.Millisecond).String()
		}
		held := "no"
		if g.HeldSeen {
			held = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d/%d\t%d\t%d\t%d/%d/%d\t%d\t%d/%d\t%d/%d/%s\n", g.Name, state, g.InitialCount, g.OnTarget, wall,
			g.MaxInFlightActive, g.Bound, g.MaxInFlightCanary, g.BadVersionHosts, g.Failed, g.FailedCount, g.FailureLimit, g.StartsAfterHalt,
			g.Stuck, g.TimedOut, g.BlockedHosts, g.MaxBlocked, held)
	}
	fmt.Fprintln(tw)
	for _, g := range groups {
		if g.Halted {
			fmt.Fprintf(tw, "%s halted with %d on the target: %s\n", g.Name, g.OnTargetAtHalt, g.HaltReason)
			if g.HaltAfter > 0 {
				fmt.Fprintf(tw, "%s halted %v after it started; %d hosts started the bad version\n", g.Name, g.HaltAfter.Round(time.Millisecond), g.BadVersionHosts)
			}
		}
		if a := g.Adaptive; a.Start > 0 {
			fmt.Fprintf(tw, "%s adaptive bound: started %d, min %d, max %d, last %d of %d; moves %v\n", g.Name, a.Start, a.Min, a.Max, a.Last, a.Window, a.Moves)
		}
		if r := g.Rate; len(r.Allowances) > 0 {
			fmt.Fprintf(tw, "%s rate: allowances %v, at most %d started in one period\n", g.Name, r.Allowances, r.MaxStarted)
		}
		writeWindows(tw, g)
		for _, c := range g.Analysis {
			fmt.Fprintf(tw, "%s check %s: %d measurements, %d passed (count %d), %d inconclusive in a row; last %s: %s\n",
				g.Name, c.Name, c.Measurements, c.Passes, c.Count, c.Inconclusive, orDash(string(c.Result)), orDash(c.Detail))
		}
	}
}

// WriteComparison writes r's figures as ratios to base's (a run of one
// app on the same hosts, in the same program run or just before): ingest
// rate, RSS peak, rollout pass and stats write mean, plan notification
// p50/p99 (r's slowest app), rollout duration; and whether every app of r
// held its in-flight bounds.
func WriteComparison(w io.Writer, base, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	apps := max(1, len(r.Apps))
	p50, p99 := r.NotifyP50, r.NotifyP99
	held := true
	groups := [][]GroupReport{r.Groups}
	if len(r.Apps) > 0 {
		groups = nil
		for _, a := range r.Apps {
			p50, p99 = max(p50, a.NotifyP50), max(p99, a.NotifyP99)
			groups = append(groups, a.Groups)
		}
	}
	for _, gs := range groups {
		for _, g := range gs {
			if g.MaxInFlightActive > g.Bound {
				held = false
			}
		}
	}
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", a/b)
	}
	fmt.Fprintf(tw, "FIGURE\t1 APP × %d HOSTS\t%d APPS × %d HOSTS\tRATIO\n", base.Agents, apps, r.Agents)
	fmt.Fprintf(tw, "heartbeats ingested/s\t%.0f\t%.0f\t%s\n", base.HeartbeatsPerSec, r.HeartbeatsPerSec, ratio(r.HeartbeatsPerSec, base.HeartbeatsPerSec))
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Fprintf(tw, "RSS peak MiB (whole process)\t%.0f\t%.0f\t%s\n", mib(base.RSSPeakBytes), mib(r.RSSPeakBytes), ratio(mib(r.RSSPeakBytes), mib(base.RSSPeakBytes)))
	fmt.Fprintf(tw, "rollout pass mean\t%v\t%v\t%s\n", base.RolloutPass.Mean.Round(10*time.Microsecond), r.RolloutPass.Mean.Round(10*time.Microsecond),
		ratio(float64(r.RolloutPass.Mean), float64(base.RolloutPass.Mean)))
	fmt.Fprintf(tw, "stats write mean\t%v\t%v\t%s\n", base.StatsWrite.Mean.Round(10*time.Microsecond), r.StatsWrite.Mean.Round(10*time.Microsecond),
		ratio(float64(r.StatsWrite.Mean), float64(base.StatsWrite.Mean)))
	fmt.Fprintf(tw, "plan notification p50 (slowest app)\t%v\t%v\t%s\n", base.NotifyP50.Round(time.Millisecond), p50.Round(time.Millisecond), ratio(float64(p50), float64(base.NotifyP50)))
	fmt.Fprintf(tw, "plan notification p99 (slowest app)\t%v\t%v\t%s\n", base.NotifyP99.Round(time.Millisecond), p99.Round(time.Millisecond), ratio(float64(p99), float64(base.NotifyP99)))
	fmt.Fprintf(tw, "rollout duration\t%v\t%v\t%s\n", base.Duration.Round(time.Second), r.Duration.Round(time.Second), ratio(float64(r.Duration), float64(base.Duration)))
	fmt.Fprintf(tw, "process CPU during the rollout\t%v\t%v\t%s\n", base.ProcessCPU.Round(time.Second), r.ProcessCPU.Round(time.Second), ratio(float64(r.ProcessCPU), float64(base.ProcessCPU)))
	fmt.Fprintf(tw, "every in-flight bound held\t%v\t%v\t\n", boundsHeld(base.Groups), held)
	return tw.Flush()
}

func boundsHeld(groups []GroupReport) bool {
	for _, g := range groups {
		if g.MaxInFlightActive > g.Bound {
			return false
		}
	}
	return true
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// String is "N, mean M, slowest ≤ B".
func (p PassTimes) String() string {
	if p.Count == 0 {
		return "none"
	}
	slowest := "≤ " + p.AtMost.String()
	if p.AtMost < 0 && len(p.bounds) > 0 {
		slowest = "> " + time.Duration(p.bounds[len(p.bounds)-1]*float64(time.Second)).String()
	}
	return fmt.Sprintf("%d, mean %v, slowest %s", p.Count, p.Mean.Round(10*time.Microsecond), slowest)
}

// WriteProgress writes p as one line: phase and time, each group's
// state, hosts on the target and in flight, heartbeats received per
// second, the controller's passes since the last line, RSS, goroutines.
func WriteProgress(w io.Writer, p Progress) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %6s:", p.Phase, p.Elapsed.Round(time.Second))
	for _, g := range p.Groups {
		state := string(g.State)
		if state == "" {
			state = "-"
		}
		if g.Halted {
			state += "(halted)"
		}
		fmt.Fprintf(&b, " %s %s %d/%d in-flight %d;", g.Name, state, g.OnTarget, g.Initial, g.InFlight)
	}
	fmt.Fprintf(&b, " inventory %d; hb %.0f/s; rollout pass %s; stats write %s; RSS %.0f MiB; %d goroutines\n",
		p.Inventory, p.HeartbeatsPerSec, p.RolloutPass, p.StatsWrite, float64(p.RSSBytes)/(1<<20), p.Goroutines)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteAdaptiveComparison writes, group by group, how a run with
// adaptive_in_flight halted against one with the fixed bound on the same
// hosts and release (issue 28): when (started_at → halted_at), how many
// hosts had started the bad version by the end, and how many failed.
func WriteAdaptiveComparison(w io.Writer, fixed, adaptive *Report) {
	fmt.Fprintln(w, "\nadaptive vs fixed bound:")
	for i, a := range adaptive.Groups {
		if i >= len(fixed.Groups) {
			break
		}
		f := fixed.Groups[i]
		if !a.Halted || !f.Halted {
			fmt.Fprintf(w, "%s: halted: adaptive %v, fixed %v (no comparison of halts); ", a.Name, a.Halted, f.Halted)
		}
		fmt.Fprintf(w, "%s: halt after %v vs %v; hosts that started the bad version %d vs %d; failed %d vs %d; bound %d..%d (started %d) vs %d\n",
			a.Name, a.HaltAfter.Round(time.Millisecond), f.HaltAfter.Round(time.Millisecond), a.BadVersionHosts, f.BadVersionHosts,
			a.Failed, f.Failed, a.Adaptive.Min, a.Adaptive.Max, a.Adaptive.Start, f.Bound-1)
	}
}

const simTimeLayout = "Mon 01-02 15:04 MST"

// writeWindows writes a windowed run's record of a group: the Teleport
// cases counted, installs begun outside the window, and each transition
// in simulated time.
func writeWindows(tw io.Writer, g GroupReport) {
	if len(g.Transitions) == 0 {
		return
	}
	fmt.Fprintf(tw, "%s: window closed on it %d times (active → done), reopened %d times (done → active); %d installs of the target begun outside its window\n",
		g.Name, g.WindowCloses, g.WindowReopens, g.StartsOutsideWindow)
	for _, t := range g.Transitions {
		fmt.Fprintf(tw, "  %s  %s → %s  on target %d: %s\n", t.At.Format(simTimeLayout), orDash(string(t.From)), t.To, t.OnTarget, t.Reason)
	}
}
