package main

// What plan and tier report beside the latencies: the CPU each process
// spent during a round (the server's fan-out against the simulated agents'
// read loops against everything else on this machine), CPU profiles of the
// child processes, and the summary over repeated measurements.

import (
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clkTck is USER_HZ, the unit of /proc's CPU times (100 on every Linux
// this runs on).
const clkTck = 100

// procCPU is the user+system CPU time process pid has used so far, in
// /proc's 10 ms ticks; -1 when it cannot be read.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return -1
	}
	u, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
	k, _ := strconv.ParseInt(f[12], 10, 64) // stime, field 15
	return time.Duration(u+k) * time.Second / clkTck
}

// machineCPU is the busy CPU time of the whole machine so far (every
// process, every core: /proc/stat minus idle and iowait).
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest times are inside user
			continue
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clkTck
}

// cpuMeter takes the CPU used by named processes (and by the whole machine)
// between two points, and adds it up by class: "server" (nats-servers),
// "agents" (the simulated agents' processes), everything else in "rest".
type cpuMeter struct {
	names, classes []string
	pids           []int
	start          []time.Duration
	mach           time.Duration
	wall           time.Time
	total          cpuTotals
}

// cpuTotals are the CPU times of a number of rounds, by class.
type cpuTotals struct {
	server, agents, rest, wall time.Duration
	rounds                     int
}

func (t *cpuTotals) add(u cpuTotals) {
	t.server += u.server
	t.agents += u.agents
	t.rest += u.rest
	t.wall += u.wall
	t.rounds += u.rounds
}

// perRound says the mean CPU of a round; per agent, the server's share.
func (t cpuTotals) String(agents int) string {
	if t.rounds == 0 {
		return "cpu: n/a"
	}
	r := time.Duration(t.rounds)
	return fmt.Sprintf("cpu per plan change (mean of %d): servers %d ms (%.1f µs per agent), agent processes %d ms (%.1f µs per agent), rest of machine (incl. the bench process) %d ms; wall %d ms",
		t.rounds, (t.server / r).Milliseconds(), float64(t.server/r)/1e3/float64(agents), (t.agents / r).Milliseconds(),
		float64(t.agents/r)/1e3/float64(agents), (t.rest / r).Milliseconds(), (t.wall / r).Milliseconds())
}

func newCPUMeter() *cpuMeter { return &cpuMeter{} }

// add meters process pid under name; class is "server", "agents" or
// anything else (counted with the rest of the machine in the totals).
func (m *cpuMeter) add(name, class string, pid int) {
	m.names, m.classes, m.pids = append(m.names, name), append(m.classes, class), append(m.pids, pid)
}

func (m *cpuMeter) begin() {
	m.start = m.start[:0]
	for _, pid := range m.pids {
		m.start = append(m.start, procCPU(pid))
	}
	m.mach, m.wall = machineCPU(), time.Now()
}

// end says, for the time since begin, how many ms of CPU each process
// used, what the rest of the machine used, and the wall time, e.g.
// "cpu ms: hub 120, agents0 310, bench 10, rest of machine 40 (wall 260 ms)",
// and adds them to the totals. Its tick is 10 ms: small figures are coarse.
func (m *cpuMeter) end() string {
	var b strings.Builder
	b.WriteString("cpu ms:")
	var ours time.Duration
	var t cpuTotals
	for i, pid := range m.pids {
		d := procCPU(pid) - m.start[i]
		ours += d
		switch m.classes[i] {
		case "server":
			t.server += d
		case "agents":
			t.agents += d
		}
		fmt.Fprintf(&b, " %s %d,", m.names[i], d.Milliseconds())
	}
	others := max(0, machineCPU()-m.mach-ours)
	t.rest = machineCPU() - m.mach - t.server - t.agents
	t.wall, t.rounds = time.Since(m.wall), 1
	m.total.add(t)
	fmt.Fprintf(&b, " rest of machine %d (wall %d ms)", others.Milliseconds(), t.wall.Milliseconds())
	return b.String()
}

// loadavg is /proc/loadavg's first three fields.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// cpuProfile starts a CPU profile into path; stop ends it. An empty path
// profiles nothing.
type cpuProfile struct {
	path string
	f    *os.File
}

func (p *cpuProfile) start() error {
	if p.path == "" || p.f != nil {
		return nil
	}
	f, err := os.Create(p.path)
	if err != nil {
		return err
	}
	// 500 Hz instead of 100: a round lasts a few hundred ms. (The runtime
	// warns once on stderr that the rate was already set; harmless.)
	runtime.SetCPUProfileRate(500)
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	p.f = f
	return nil
}

func (p *cpuProfile) stop() {
	if p.f != nil {
		pprof.StopCPUProfile()
		p.f.Close()
		p.f = nil
	}
}

// quantiles are a latency sample's p50, p99 and max.
type quantiles struct{ p50, p99, max time.Duration }

func quantilesOf(lat []time.Duration) quantiles {
	s := slices.Clone(lat)
	slices.Sort(s)
	q := func(f float64) time.Duration { return s[min(len(s)-1, int(f*float64(len(s))))] }
	return quantiles{q(0.50), q(0.99), s[len(s)-1]}
}

func (q quantiles) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("p50 %v  p99 %v  max %v", r(q.p50), r(q.p99), r(q.max))
}

// latencies are one measurement's: from just before each plan put to each
// agent's handler, and (agents in child processes, on Linux) to the
// kernel's receive timestamp of the message at each agent's socket, i.e.
// when the server wrote it there.
type latencies struct {
	handler, wrote []time.Duration
	cpu            cpuTotals
}

func (l *latencies) add(m latencies) {
	l.handler = append(l.handler, m.handler...)
	l.wrote = append(l.wrote, m.wrote...)
	l.cpu.add(m.cpu)
}

// summaryRow is what repeatSummary found, for a table of several sizes.
type summaryRow struct {
	agents        int
	all, wrote    quantiles // over every latency of every repeat
	hasWrote      bool
	p99s          []time.Duration // each repeat's handler p99, sorted
	under, repeat int
	cpu           cpuTotals
	load          string
}

// repeatSummary prints, after every repeat of a measurement, each repeat's
// p50/p99/max, the same over every latency of every repeat, and whether
// the p99 stayed under target (reported, never asserted).
func repeatSummary(each []latencies, agents int, target time.Duration) summaryRow {
	row := summaryRow{agents: agents, repeat: len(each), load: loadavg()}
	series := []struct {
		name string
		of   func(latencies) []time.Duration
	}{
		{"agent's handler", func(l latencies) []time.Duration { return l.handler }},
		{"server wrote it (kernel receive stamp)", func(l latencies) []time.Duration { return l.wrote }},
	}
	for k, s := range series {
		var all, p99s []time.Duration
		under := 0
		for i, l := range each {
			lat := s.of(l)
			if len(lat) == 0 {
				continue
			}
			q := quantilesOf(lat)
			fmt.Printf("repeat %d, put to %s: %d latencies: %s\n", i+1, s.name, len(lat), q)
			all = append(all, lat...)
			p99s = append(p99s, q.p99)
			if q.p99 < target {
				under++
			}
		}
		if len(all) == 0 {
			continue
		}
		q := quantilesOf(all)
		slices.Sort(p99s)
		fmt.Printf("all %d repeats, put to %s: %d latencies: %s; p99 per repeat %v .. %v (median %v)\n", len(p99s), s.name, len(all), q,
			p99s[0].Round(time.Millisecond), p99s[len(p99s)-1].Round(time.Millisecond), p99s[len(p99s)/2].Round(time.Millisecond))
		verdict := "MET"
		if q.p99 >= target {
			verdict = "NOT MET"
		}
		fmt.Printf("criterion p99 < %v, put to %s: %s (p99 of all %v; %d of %d repeats under)\n", target, s.name, verdict, q.p99.Round(time.Millisecond), under, len(p99s))
		if k == 0 {
			row.all, row.p99s, row.under = q, p99s, under
		} else {
			row.wrote, row.hasWrote = q, true
		}
	}
	for _, l := range each {
		row.cpu.add(l.cpu)
	}
	fmt.Println(row.cpu.String(agents))
	return row
}

// sweepTable prints one line per size and where the p99 over all repeats
// first reaches target.
func sweepTable(rows []summaryRow, target time.Duration) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/1e6) }
	fmt.Printf("\n| agents | handler p50 / p99 / max ms (all repeats) | p99 per repeat, min / median / max ms | repeats under %v | server wrote it p99 ms | server CPU per change ms (µs per agent) | agent processes CPU ms | rest of machine CPU ms (other sessions + bench) | wall ms | load average after |\n|---|---|---|---|---|---|---|---|---|---|\n", target)
	cross := 0
	for _, r := range rows {
		wrote := "—"
		if r.hasWrote {
			wrote = ms(r.wrote.p99)
		}
		n := time.Duration(max(1, r.cpu.rounds))
		fmt.Printf("| %d | %s / %s / %s | %s / %s / %s | %d of %d | %s | %d (%.1f) | %d | %d | %d | %s |\n", r.agents,
			ms(r.all.p50), ms(r.all.p99), ms(r.all.max), ms(r.p99s[0]), ms(r.p99s[len(r.p99s)/2]), ms(r.p99s[len(r.p99s)-1]),
			r.under, r.repeat, wrote, (r.cpu.server / n).Milliseconds(), float64(r.cpu.server/n)/1e3/float64(r.agents),
			(r.cpu.agents / n).Milliseconds(), (r.cpu.rest / n).Milliseconds(), (r.cpu.wall / n).Milliseconds(), r.load)
		if cross == 0 && r.all.p99 >= target {
			cross = r.agents
		}
	}
	if cross == 0 {
		fmt.Printf("p99 over all repeats stayed under %v up to %d agents\n", target, rows[len(rows)-1].agents)
	} else {
		fmt.Printf("p99 over all repeats first reached %v at %d agents\n", target, cross)
	}
}

// printMachine prints what a figure needs beside it: date, CPUs, load.
func printMachine() {
	model := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	fmt.Printf("machine: %s, %d CPUs (%s); load average %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), model, loadavg())
}

// gcCycles is the number of garbage collections this process has run.
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
