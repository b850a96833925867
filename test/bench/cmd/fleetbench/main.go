// Command fleetbench measures what docs/PERFORMANCE.md reports: controller
// heartbeat ingest against the raw JetStream publish rate (ingest), the cost
// and latency of agents following the plan (plan), agents on their own
// connections behind leaf nodes in front of a hub (tier), and the
// controller's memory at a given fleet size (rss), the real agentd's
// rollback of a release that fails its health check (rollback) and its
// cost while idle (idle). Every mode starts its own real nats-servers
// (internal/natsembed) on temporary stores; serve and agents are the child
// processes plan and tier start, app the app agentd runs in rollback and
// idle.
//
//	go run ./test/bench/cmd/fleetbench ingest -agents 100000
//	go run ./test/bench/cmd/fleetbench plan -agents 10000 -mode shared
//	go run ./test/bench/cmd/fleetbench tier -agents 100000 -leaves 7
//	go run ./test/bench/cmd/fleetbench rss -agents 100000 -controller /tmp/controller
//	go run ./test/bench/cmd/fleetbench rollback -runs 20 -agentd /tmp/agentd
//	go run ./test/bench/cmd/fleetbench idle -duration 10m -agentd /tmp/agentd
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natsembed"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fleetbench ingest|plan|tier|rss|rollback|idle|serve|agents|app [flags]")
		os.Exit(2)
	}
	raiseNoFile()
	var err error
	switch os.Args[1] {
	case "ingest":
		err = ingest(os.Args[2:])
	case "plan":
		err = plan(os.Args[2:])
	case "rss":
		err = rss(os.Args[2:])
	case "serve":
		err = serve(os.Args[2:])
	case "tier":
		err = tier(os.Args[2:])
	case "agents":
		err = agents(os.Args[2:])
	case "rollback":
		err = rollback(os.Args[2:])
	case "idle":
		err = idle(os.Args[2:])
	case "app":
		err = app(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(1)
	}
}

// raiseNoFile lifts the soft open-file limit to the hard one: one
// connection per agent needs one descriptor each.
func raiseNoFile() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// startServerConf starts the embedded server; a non-empty conf is written
// to a nats-server configuration file the server starts from; cache turns
// the sublist cache on.
func startServerConf(conf string, cache bool) (*server.Server, string, func(), error) {
	dir, err := os.MkdirTemp("", "fleetbench-")
	if err != nil {
		return nil, "", nil, err
	}
	o := natsembed.Options{Listen: "127.0.0.1:-1", StoreDir: dir, ServerName: "bench", SublistCache: cache}
	if strings.Contains(conf, "server_name") {
		o.ServerName = "" // the configuration's
	}
	if conf != "" {
		o.ConfigFile = dir + "/server.conf"
		if err := os.WriteFile(o.ConfigFile, []byte(conf), 0o600); err != nil {
			return nil, "", nil, err
		}
	}
	ns, err := natsembed.Start(o)
	if err != nil {
		return nil, "", nil, err
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", ns.Addr().(*net.TCPAddr).Port)
	return ns, url, func() { ns.Shutdown(); ns.WaitForShutdown(); os.RemoveAll(dir) }, nil
}

func agentID(n int) rollout.AgentID {
	return rollout.AgentID(fmt.Sprintf("00000000-0000-4000-8000-%012x", n))
}

func groupOf(n, groups int) string { return fmt.Sprintf("g%d", n%groups) }

// payloadsFrom are n realistic (~340 byte) heartbeats of the distinct agents
// first .. first+n-1, the same shape as pkg/heartbeat's
// BenchmarkAggregateDecodeObserve.
func payloadsFrom(first, n, groups int, seq uint64) (subjects []string, data [][]byte, err error) {
	subjects, data = make([]string, n), make([][]byte, n)
	now := time.Now().UTC()
	for i := range n {
		hb := heartbeat.Heartbeat{
			V: 1, AgentID: agentID(first + i), Hostname: "ip-10-12-34-56.eu-west-1.compute.internal",
			Group: groupOf(first+i, groups), ActiveVersion: "14.3.7", StartVersion: "14.3.6",
			StartTime: now.Add(-time.Hour), UpdaterVersion: "14.3.7", At: now, Seq: seq,
		}
		if data[i], err = heartbeat.Encode(&hb); err != nil {
			return nil, nil, err
		}
		subjects[i] = heartbeat.SubjectFor(hb.Group, hb.AgentID)
	}
	return subjects, data, nil
}

// publishAll publishes every payload with async JetStream publish (at most
// 4,000 outstanding) and waits for every ack.
func publishAll(ctx context.Context, js jetstream.JetStream, subjects []string, data [][]byte) (time.Duration, error) {
	start := time.Now()
	for i := range subjects {
		if _, err := js.PublishAsync(subjects[i], data[i], jetstream.WithStallWait(30*time.Second)); err != nil {
			return 0, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return time.Since(start), nil
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

func ingest(args []string) error {
	fs := flag.NewFlagSet("ingest", flag.ExitOnError)
	n := fs.Int("agents", 100_000, "agents (distinct heartbeat subjects)")
	groups := fs.Int("groups", 10, "groups")
	cache := fs.Bool("sublist-cache", false, "run the server with nats-server's sublist cache on (nats-server's default; fleetwave turns it off: docs/PERFORMANCE.md 2b)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the live phase (publish while the controller follows) to this file")
	planSubs := fs.Int("plan-subs", 0, "before measuring, subscribe this many simulated agents' plan subscriptions (two each, as agentd.PlanFollower, on 100 connections) so the server's sublist is as large as a fleet's")
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, url, stop, err := startServerConf("", *cache)
	if err != nil {
		return err
	}
	defer stop()
	pubNC, js, _, err := openFleet(ctx, url, jetstream.WithPublishAsyncMaxPending(4000))
	if err != nil {
		return err
	}
	defer pubNC.Close()
	if *planSubs > 0 {
		start := time.Now()
		ncs, err := planSubscribers(url, *planSubs, 100, *groups)
		if err != nil {
			return err
		}
		for _, nc := range ncs {
			defer nc.Close()
		}
		fmt.Printf("plan subscriptions: %d agents on %d connections in %v\n", *planSubs, len(ncs), time.Since(start).Round(time.Millisecond))
	}
	subjects, data, err := payloadsFrom(0, *n, *groups, 1)
	if err != nil {
		return err
	}
	fmt.Printf("ingest: %d agents, %d groups, %d-byte heartbeats, file storage, all in one process, sublist-cache=%v\n", *n, *groups, len(data[0]), *cache)

	// 1. Baseline: raw JetStream publish into FLEET_HB, nobody consuming.
	d, err := publishAll(ctx, js, subjects, data)
	if err != nil {
		return err
	}
	base := rate(*n, d)
	fmt.Printf("baseline publish (no consumer):      %8d msgs in %7.3fs = %9.0f msgs/s\n", *n, d.Seconds(), base)

	// 1b. The bus's own speed with one follower: every agent's next
	// heartbeat published while a bare core subscription on the republish
	// subject counts them and does nothing else. What the server and a
	// client spend to deliver them is the part of the path no controller
	// can take away.
	bareNC, err := nats.Connect(url)
	if err != nil {
		return err
	}
	var bare atomic.Int64
	if _, err := bareNC.Subscribe(kv.InventoryRepublish+">", func(*nats.Msg) { bare.Add(1) }); err != nil {
		return err
	}
	if err := bareNC.Flush(); err != nil {
		return err
	}
	subjects, data, _ = payloadsFrom(0, *n, *groups, 2)
	start := time.Now()
	if _, err := publishAll(ctx, js, subjects, data); err != nil {
		return err
	}
	for bare.Load() < int64(*n) {
		if time.Since(start) > time.Minute {
			return fmt.Errorf("bare follower received %d of %d", bare.Load(), *n)
		}
		time.Sleep(time.Millisecond)
	}
	d = time.Since(start)
	bareNC.Close()
	follow := rate(*n, d)
	fmt.Printf("bare follower (publish → recv):      %8d msgs in %7.3fs = %9.0f msgs/s  (%.2f× baseline)\n", *n, d.Seconds(), follow, follow/base)

	// 2. Replay: a controller starts against the full stream and recovers
	// the inventory (ordered consumer, DeliverLastPerSubject).
	cNC, _, cfleet, err := openFleet(ctx, url)
	if err != nil {
		return err
	}
	defer cNC.Close()
	c, err := controller.New(cfleet, controller.Options{ID: "bench", Log: discard, StatsInterval: time.Hour, ReconcileInterval: time.Hour, LeaseTTL: 2 * time.Hour})
	if err != nil {
		return err
	}
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	start = time.Now()
	go c.Run(cctx)
	if err := waitReceived(ctx, c, uint64(*n)); err != nil {
		return err
	}
	d = time.Since(start)
	<-c.Ready()
	replay := rate(*n, d)
	fmt.Printf("controller replay (start → %d recv): %8d msgs in %7.3fs = %9.0f msgs/s  (%.2f× baseline)\n", *n, *n, d.Seconds(), replay, replay/base)

	// 3. Live: publish every agent's next heartbeat while the controller
	// follows; time until the controller has received all of them.
	subjects, data, _ = payloadsFrom(0, *n, *groups, 3)
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start = time.Now()
	pd, err := publishAll(ctx, js, subjects, data)
	if err != nil {
		return err
	}
	if err := waitReceived(ctx, c, uint64(2**n)); err != nil {
		return err
	}
	d = time.Since(start)
	if *cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	live := rate(*n, d)
	fmt.Printf("live publish with controller:        %8d msgs in %7.3fs = %9.0f msgs/s  (%.2f× baseline)\n", *n, pd.Seconds(), rate(*n, pd), rate(*n, pd)/base)
	fmt.Printf("controller live (publish → recv):    %8d msgs in %7.3fs = %9.0f msgs/s  (%.2f× baseline, %.2f× the bare follower)\n", *n, d.Seconds(), live, live/base, live/follow)
	_, rej := c.Counters()
	fmt.Printf("rejected: %d, inventory: %d agents\n", rej, c.Inventory().Len())

	// 4. One stats pass: expire + count + one CAS write per group (the
	// heartbeat interval has not elapsed: every agent counts).
	start = time.Now()
	if err := c.WriteStats(ctx); err != nil {
		return err
	}
	fmt.Printf("WriteStats (%d agents, %d groups): %v\n", c.Inventory().Len(), *groups, time.Since(start).Round(time.Microsecond))
	return nil
}

// subscribePlan subscribes for agent n exactly what agentd.PlanFollower
// does: two core subscriptions, the spec (onSpec runs for each change) and
// its group's status.
func subscribePlan(nc *nats.Conn, n, groups int, onSpec func()) error {
	if _, err := nc.Subscribe(kv.PlanRepublish+kv.KeySpec, func(*nats.Msg) { onSpec() }); err != nil {
		return err
	}
	_, err := nc.Subscribe(kv.PlanRepublish+kv.GroupKey(groupOf(n, groups)), func(*nats.Msg) {})
	return err
}

// planSubscribers opens conns connections and subscribes, for each of n
// simulated agents, the two subscriptions agentd.PlanFollower holds.
func planSubscribers(url string, n, conns, groups int) ([]*nats.Conn, error) {
	ncs := make([]*nats.Conn, conns)
	for j := range ncs {
		nc, err := nats.Connect(url)
		if err != nil {
			for _, c := range ncs[:j] {
				c.Close()
			}
			return nil, err
		}
		ncs[j] = nc
	}
	for i := range n {
		if err := subscribePlan(ncs[i%conns], i, groups, func() {}); err != nil {
			return ncs, err
		}
	}
	for _, nc := range ncs {
		if err := nc.FlushTimeout(2 * time.Minute); err != nil {
			return ncs, err
		}
	}
	return ncs, nil
}

// openFleet connects to url and ensures the fleet's stream and buckets
// there, as the controller does.
func openFleet(ctx context.Context, url string, opts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream, *kv.Fleet, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc, opts...)
	if err == nil {
		var fleet *kv.Fleet
		if fleet, err = kv.Ensure(ctx, js, kv.Options{}); err == nil {
			return nc, js, fleet, nil
		}
	}
	nc.Close()
	return nil, nil, nil, err
}

func waitReceived(ctx context.Context, c *controller.Controller, want uint64) error {
	for {
		if got, _ := c.Counters(); got >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			got, _ := c.Counters()
			return fmt.Errorf("controller received %d of %d: %w", got, want, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// ---- plan -----------------------------------------------------------------

// serverStats is what the serve subprocess reports about itself.
type serverStats struct {
	RSSKiB        int64  `json:"rss_kib"`
	HeapInuse     uint64 `json:"heap_inuse"`
	StackInuse    uint64 `json:"stack_inuse"`
	Goroutines    int    `json:"goroutines"`
	Connections   int    `json:"connections"`
	Subscriptions uint32 `json:"subscriptions"`
	LeafNodes     int    `json:"leafnodes"`
}

func vmRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return -1
}

// serve runs the embedded server alone in this process and answers one
// JSON line of stats for every line read on stdin.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	cache := fs.Bool("sublist-cache", false, "run the server with nats-server's sublist cache on (nats-server's default; fleetwave turns it off: docs/PERFORMANCE.md 2b)")
	conf := fs.String("conf", "", "nats-server configuration text to start from")
	prof := fs.String("cpuprofile", "", "write a CPU profile here, from the first 'prof' line read on stdin to the end")
	fs.Parse(args)
	ns, url, stop, err := startServerConf(*conf, *cache)
	if err != nil {
		return err
	}
	defer stop()
	cp := &cpuProfile{path: *prof}
	defer cp.stop()
	fmt.Println(url)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "prof" {
			if err := cp.start(); err != nil {
				return err
			}
			continue
		}
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		vz, _ := ns.Varz(nil)
		s := serverStats{RSSKiB: vmRSS(os.Getpid()), HeapInuse: ms.HeapInuse, StackInuse: ms.StackInuse, Goroutines: runtime.NumGoroutine()}
		if vz != nil {
			s.Connections, s.Subscriptions, s.LeafNodes = vz.Connections, vz.Subscriptions, vz.Leafs
		}
		b, _ := json.Marshal(s)
		fmt.Println(string(b))
	}
	return nil
}

type serverProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	url string
}

func startServerProc(args ...string) (*serverProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{"serve"}, args...)...)
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serverProc{cmd: cmd, in: in, out: bufio.NewScanner(outp)}
	if !p.out.Scan() {
		return nil, fmt.Errorf("server process did not start")
	}
	p.url = p.out.Text()
	return p, nil
}

func (p *serverProc) stats() serverStats {
	fmt.Fprintln(p.in)
	var s serverStats
	if p.out.Scan() {
		_ = json.Unmarshal(p.out.Bytes(), &s)
	}
	return s
}

// profile starts the CPU profile of a server started with -cpuprofile.
func (p *serverProc) profile() { fmt.Fprintln(p.in, "prof") }

func (p *serverProc) pid() int { return p.cmd.Process.Pid }

func (p *serverProc) close() { p.in.Close(); p.cmd.Wait() }

// planOpts are plan's flags.
type planOpts struct {
	n, conns, groups, rounds int
	mode                     string
	warm, cache              bool
	pprof                    string // directory for the children's CPU profiles
}

func plan(args []string) error {
	fs := flag.NewFlagSet("plan", flag.ExitOnError)
	var o planOpts
	fs.IntVar(&o.n, "agents", 1000, "watching agents")
	fs.StringVar(&o.mode, "mode", "shared", "conns: one connection per agent (production), the agents in child processes of their own (fleetbench agents, at most 15,000 each); shared: -conns connections, two core subscriptions per agent; fanout: -conns connections, one fleet.plan.> subscription per connection fanned out in process (as test/sim); watch: one kv.WatchFiltered (a JetStream consumer) per agent")
	fs.IntVar(&o.conns, "conns", 10, "connections in shared, fanout and watch mode")
	fs.IntVar(&o.groups, "groups", 10, "groups")
	fs.IntVar(&o.rounds, "rounds", 5, "plan changes to time in each repeat")
	fs.BoolVar(&o.warm, "warm", true, "put the spec (republished on fleet.plan.spec) before subscribing, as when agents (re)connect to a fleet that has a plan: the server then holds a cached match for that subject and copies it on every new subscription to it; false: subscribe first")
	fs.BoolVar(&o.cache, "sublist-cache", false, "run the server with nats-server's sublist cache on (nats-server's default; fleetwave turns it off: docs/PERFORMANCE.md 2b)")
	repeat := fs.Int("repeat", 1, "repeat the whole measurement (a new server, new agents, -rounds plan changes) this many times and summarise")
	target := fs.Duration("target", 250*time.Millisecond, "the p99 the summary compares against (reported, not asserted)")
	fs.StringVar(&o.pprof, "pprof", "", "conns mode: write CPU profiles of the server and agent processes, over the rounds, into this directory")
	sweep := fs.String("sweep", "", "comma-separated agent counts to measure in turn instead of -agents (each with -repeat), then a table of them and where the p99 reaches -target")
	fs.Parse(args)
	printMachine()
	sizes := []int{o.n}
	if *sweep != "" {
		sizes = nil
		for _, f := range strings.Split(*sweep, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || v <= 0 {
				return fmt.Errorf("-sweep: %q is not a number of agents", f)
			}
			sizes = append(sizes, v)
		}
	}
	var rows []summaryRow
	for _, size := range sizes {
		o.n = size
		var each []latencies
		for r := range *repeat {
			fmt.Printf("-- %d agents, repeat %d of %d (load average %s)\n", size, r+1, *repeat, loadavg())
			lat, err := planOnce(o, r)
			if err != nil {
				return err
			}
			if len(lat.handler) > 0 {
				each = append(each, lat)
			}
		}
		if len(each) > 0 {
			rows = append(rows, repeatSummary(each, size, *target))
		}
	}
	if len(sizes) > 1 && len(rows) > 0 {
		sweepTable(rows, *target)
	}
	return nil
}

// planOnce is one measurement: a server started, the agents subscribed,
// -rounds plan changes timed, everything stopped again. It returns every
// latency (none when no watcher could be made).
func planOnce(o planOpts, rep int) (latencies, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	var serveArgs []string
	if o.cache {
		serveArgs = append(serveArgs, "-sublist-cache")
	}
	profArgs := func(name string) []string {
		if o.pprof == "" || o.mode != "conns" {
			return nil
		}
		return []string{"-cpuprofile", fmt.Sprintf("%s/%s-r%d.pprof", o.pprof, name, rep+1)}
	}
	sp, err := startServerProc(append(serveArgs, profArgs("serve")...)...)
	if err != nil {
		return latencies{}, err
	}
	defer sp.close()
	adm, js, fleet, err := openFleet(ctx, sp.url)
	if err != nil {
		return latencies{}, err
	}
	defer adm.Close()
	spec, _ := json.Marshal(rollout.DefaultSpec("14.3.6", "14.3.7"))
	if o.warm {
		if _, err := fleet.Plan.Put(ctx, kv.KeySpec, spec); err != nil {
			return latencies{}, err
		}
	}
	before := sp.stats()

	// One latency slot per agent per round; handlers of the in-process
	// modes write theirs.
	var putAt atomic.Int64
	var got atomic.Int64
	lat := make([]time.Duration, o.n)
	done := make(chan struct{}, 1)
	record := func(i int) {
		lat[i] = time.Duration(time.Now().UnixNano() - putAt.Load())
		if got.Add(1) == int64(o.n) {
			done <- struct{}{}
		}
	}

	nconns := o.conns
	var ncs []*nats.Conn
	var procs []*agentsProc
	defer func() {
		for _, p := range procs {
			p.close()
		}
	}()
	start := time.Now()
	if o.mode == "conns" {
		// The agents in processes of their own, so that what the server
		// does and what the clients do are measured apart.
		nconns = o.n
		const maxPerProc = 15_000
		for first := 0; first < o.n; first += maxPerProc {
			p, err := startAgentsProc(sp.url, first, min(maxPerProc, o.n-first), o.groups,
				append([]string{"-heartbeat=false"}, profArgs(fmt.Sprintf("agents%d", len(procs)))...)...)
			if err != nil {
				return latencies{}, err
			}
			procs = append(procs, p)
		}
		for _, p := range procs {
			if _, err := p.report(); err != nil {
				return latencies{}, err
			}
		}
	} else {
		ncs = make([]*nats.Conn, nconns)
		cerr := inParallel(len(ncs), 64, func(i int) error {
			nc, err := nats.Connect(sp.url, nats.Name(fmt.Sprintf("agent-%d", i)), nats.MaxReconnects(-1))
			ncs[i] = nc
			return err
		})
		defer func() {
			for _, nc := range ncs {
				if nc != nil {
					nc.Close()
				}
			}
		}()
		if cerr != nil {
			return latencies{}, fmt.Errorf("connect: %v", cerr)
		}
	}
	var consumerErr error
	watchers := 0
	// progress prints the subscribe time of each further 10,000 agents
	// (flushed, so the server has processed them) when there are many.
	last := start
	progress := func(i int) error {
		if o.n < 20_000 || (i+1)%10_000 != 0 {
			return nil
		}
		for _, nc := range ncs {
			if err := nc.FlushTimeout(2 * time.Minute); err != nil {
				return err
			}
		}
		fmt.Printf("subscribed %7d agents: last 10,000 in %v\n", i+1, time.Since(last).Round(time.Millisecond))
		last = time.Now()
		return nil
	}
	switch o.mode {
	case "conns":
		watchers = o.n // subscribed by the agents processes before they reported
	case "shared":
		for i := range o.n {
			if err := subscribePlan(ncs[i%nconns], i, o.groups, func() { record(i) }); err != nil {
				return latencies{}, err
			}
			if err := progress(i); err != nil {
				return latencies{}, err
			}
		}
		for _, nc := range ncs {
			if err := nc.FlushTimeout(2 * time.Minute); err != nil {
				return latencies{}, err
			}
		}
		watchers = o.n
	case "fanout":
		// One subscription per connection, handed to that connection's
		// agents in process (what test/sim does): the server holds nconns
		// subscriptions whatever the number of agents.
		agents := make([][]int, nconns)
		for i := range o.n {
			agents[i%nconns] = append(agents[i%nconns], i)
		}
		for j, nc := range ncs {
			mine := agents[j]
			if _, err := nc.Subscribe(kv.PlanRepublish+">", func(m *nats.Msg) {
				if m.Subject != kv.PlanRepublish+kv.KeySpec {
					return
				}
				for _, i := range mine {
					record(i)
				}
			}); err != nil {
				return latencies{}, err
			}
		}
		for _, nc := range ncs {
			if err := nc.FlushTimeout(2 * time.Minute); err != nil {
				return latencies{}, err
			}
		}
		watchers = o.n
	case "watch":
		jss := make([]jetstream.KeyValue, nconns)
		for j, nc := range ncs {
			cj, _ := jetstream.New(nc)
			if jss[j], err = cj.KeyValue(ctx, kv.BucketPlan); err != nil {
				return latencies{}, err
			}
		}
		for i := range o.n + 1 { // one more than asked: show the limit
			w, err := jss[i%nconns].WatchFiltered(ctx, []string{kv.KeySpec, kv.GroupKey(groupOf(i, o.groups))}, jetstream.UpdatesOnly())
			if err != nil {
				consumerErr = fmt.Errorf("watcher %d: %w", i+1, err)
				break
			}
			if i == o.n {
				consumerErr = fmt.Errorf("watcher %d: accepted (no limit hit)", i+1)
				w.Stop()
				break
			}
			go func() {
				for e := range w.Updates() {
					if e != nil && e.Key() == kv.KeySpec {
						record(i)
					}
				}
			}()
			watchers++
		}
		if watchers < o.n {
			fmt.Printf("only %d watchers could be created: %v\n", watchers, consumerErr)
			o.n = watchers
		}
	default:
		return latencies{}, fmt.Errorf("unknown mode %q", o.mode)
	}
	setup := time.Since(start)
	time.Sleep(2 * time.Second) // let the server settle (watch: consumers created)
	after := sp.stats()
	si, err := js.Stream(ctx, kv.PlanStream)
	if err != nil {
		return latencies{}, err
	}
	info, err := si.Info(ctx)
	if err != nil {
		return latencies{}, err
	}
	fmt.Printf("plan: mode=%s agents=%d connections=%d agent processes=%d warm=%v sublist-cache=%v setup=%v\n", o.mode, watchers, nconns, len(procs), o.warm, o.cache, setup.Round(time.Millisecond))
	fmt.Printf("server before: rss %d KiB heap %d KiB conns %d subs %d goroutines %d\n", before.RSSKiB, before.HeapInuse>>10, before.Connections, before.Subscriptions, before.Goroutines)
	fmt.Printf("server after:  rss %d KiB heap %d KiB conns %d subs %d goroutines %d\n", after.RSSKiB, after.HeapInuse>>10, after.Connections, after.Subscriptions, after.Goroutines)
	fmt.Printf("server cost per agent: rss %.1f KiB, heap %.1f KiB, %.2f subscriptions, %.2f goroutines\n",
		float64(after.RSSKiB-before.RSSKiB)/float64(watchers), float64(int64(after.HeapInuse)-int64(before.HeapInuse))/1024/float64(watchers),
		float64(after.Subscriptions-before.Subscriptions)/float64(watchers), float64(after.Goroutines-before.Goroutines)/float64(watchers))
	fmt.Printf("JetStream consumers on %s: %d\n", kv.PlanStream, info.State.Consumers)
	if consumerErr != nil {
		fmt.Printf("consumer %d: %v\n", watchers+1, consumerErr)
	}
	if watchers == 0 {
		return latencies{}, nil
	}
	cpu := newCPUMeter()
	cpu.add("server", "server", sp.pid())
	for i, p := range procs {
		cpu.add(fmt.Sprintf("agents%d", i), "agents", p.cmd.Process.Pid)
	}
	// In-process modes: the agents are this process.
	cpu.add("bench", map[bool]string{true: "bench", false: "agents"}[o.mode == "conns"], os.Getpid())
	if o.pprof != "" && o.mode == "conns" {
		sp.profile()
	}
	lat = lat[:watchers]
	var all latencies
	for r := range o.rounds {
		spec, _ := json.Marshal(rollout.DefaultSpec("14.3.6", fmt.Sprintf("14.3.%d", 8+r)))
		var round latencies
		split := ""
		if o.mode == "conns" {
			if err := armRound(procs, r); err != nil {
				return latencies{}, err
			}
			cpu.begin()
			t0 := time.Now().UnixNano()
			if _, err := fleet.Plan.Put(ctx, kv.KeySpec, spec); err != nil {
				return latencies{}, err
			}
			if round, split, err = collectRound(procs, t0, watchers, r); err != nil {
				return latencies{}, err
			}
		} else {
			got.Store(0)
			clear(lat)
			cpu.begin()
			putAt.Store(time.Now().UnixNano())
			if _, err := fleet.Plan.Put(ctx, kv.KeySpec, spec); err != nil {
				return latencies{}, err
			}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				return latencies{}, fmt.Errorf("round %d: only %d of %d watchers saw the change in 30s", r, got.Load(), watchers)
			}
			round.handler = slices.Clone(lat)
		}
		fmt.Printf("round %d: %d/%d notified: %s\n", r+1, len(round.handler), watchers, quantilesOf(round.handler))
		if split != "" {
			fmt.Printf("  %s\n", split)
		}
		fmt.Printf("  %s\n", cpu.end())
		all.add(round)
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Printf("all %d rounds: %s\n", o.rounds, quantilesOf(all.handler))
	all.cpu = cpu.total
	return all, nil
}

// ---- rss ------------------------------------------------------------------

func rss(args []string) error {
	fs := flag.NewFlagSet("rss", flag.ExitOnError)
	n := fs.Int("agents", 100_000, "agents in the stream")
	groups := fs.Int("groups", 10, "groups")
	bin := fs.String("controller", "", "controller binary (go build -o /tmp/controller ./cmd/controller)")
	inproc := fs.Bool("inprocess", true, "first measure an in-process controller's heap growth")
	memLimit := fs.String("gomemlimit", "", "GOMEMLIMIT for the controller process only (e.g. 550MiB); empty: the Go default (none)")
	every := fs.Duration("heartbeat", 30*time.Second, "the fleet's heartbeat interval: during the live window every agent heartbeats once per interval (agents/interval heartbeats/s)")
	window := fs.Duration("for", 30*time.Second, "how long the live window lasts")
	fs.Parse(args)
	if *bin == "" {
		return fmt.Errorf("-controller is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	_, url, stop, err := startServerConf("", false)
	if err != nil {
		return err
	}
	defer stop()
	nc, js, fleet, err := openFleet(ctx, url, jetstream.WithPublishAsyncMaxPending(4000))
	if err != nil {
		return err
	}
	defer nc.Close()
	subjects, data, err := payloadsFrom(0, *n, *groups, 1)
	if err != nil {
		return err
	}
	if _, err := publishAll(ctx, js, subjects, data); err != nil {
		return err
	}
	info, _ := fleet.HB.Info(ctx)
	fmt.Printf("rss: stream %s holds %d heartbeats (%d bytes)\n", kv.StreamHB, info.State.Msgs, info.State.Bytes)

	if *inproc {
		// In process: the controller's heap alone (GC'd heap in use, delta).
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		c, err := controller.New(fleet, controller.Options{ID: "inproc", Log: discard})
		if err != nil {
			return err
		}
		cctx, ccancel := context.WithCancel(ctx)
		start := time.Now()
		stopped := make(chan error, 1)
		go func() { stopped <- c.Run(cctx) }()
		<-c.Ready()
		ready := time.Since(start)
		runtime.GC()
		runtime.ReadMemStats(&m1)
		fmt.Printf("in-process controller: ready in %v with %d agents; heap in use +%.1f MiB (%.0f bytes/agent; includes the embedded server's share of the consumer)\n",
			ready.Round(time.Millisecond), c.Inventory().Len(), float64(int64(m1.HeapInuse)-int64(m0.HeapInuse))/(1<<20), float64(int64(m1.HeapInuse)-int64(m0.HeapInuse))/float64(*n))
		ccancel()
		if err := <-stopped; err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("in-process controller: %w", err)
		}
	}

	// A rollout under way, so that every pass decides every group: the
	// config's groups and a spec for a new version.
	if err := writeRollout(ctx, fleet, *groups); err != nil {
		return err
	}

	// Separate process: the real cmd/controller against this server.
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(*bin, "run", "--nats", url, "--id", "rss", "--log-format", "json", "--http-addr", addr,
		"--heartbeat-interval", every.String())
	if *memLimit != "" {
		cmd.Env = append(os.Environ(), "GOMEMLIMIT="+*memLimit)
	}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	start := time.Now()
	sc := bufio.NewScanner(stderr)
	found := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), "inventory recovered") {
			found = true
			break
		}
	}
	if !found {
		cmd.Wait()
		return fmt.Errorf("controller exited before recovering the inventory")
	}
	go io.Copy(io.Discard, stderr)
	ready := time.Since(start)
	pid := cmd.Process.Pid
	fmt.Printf("controller process (pid %d, GOMEMLIMIT=%q): inventory of %d recovered in %v (incl. process start); VmRSS %.1f MiB\n",
		pid, *memLimit, *n, ready.Round(time.Millisecond), float64(vmRSS(pid))/1024)

	// The live window: every agent's next heartbeat, paced at agents per
	// heartbeat interval, while the controller's CPU and RSS are sampled.
	perSec := float64(*n) / every.Seconds()
	total := int(perSec * window.Seconds())
	subjects, data, err = payloadsFrom(0, min(total, *n), *groups, 2)
	if err != nil {
		return err
	}
	recv0, err := scrapeMetric(addr, "fleetwave_heartbeats_received_total")
	if err != nil {
		return err
	}
	cpu0, t0 := procCPU(pid), time.Now()
	var maxRSS int64
	sample := func() {
		if r := vmRSS(pid); r > maxRSS {
			maxRSS = r
		}
	}
	tick := time.NewTicker(10 * time.Millisecond)
	next := time.Now().Add(time.Second)
	for i := 0; i < total; {
		<-tick.C
		due := int(perSec * time.Since(t0).Seconds())
		for ; i < min(due, total); i++ {
			j := i % len(subjects)
			if _, err := js.PublishAsync(subjects[j], data[j], jetstream.WithStallWait(30*time.Second)); err != nil {
				return err
			}
		}
		if time.Now().After(next) {
			sample()
			next = next.Add(time.Second)
		}
	}
	tick.Stop()
	<-js.PublishAsyncComplete()
	for {
		got, err := scrapeMetric(addr, "fleetwave_heartbeats_received_total")
		if err != nil {
			return err
		}
		if got-recv0 >= float64(total) {
			break
		}
		if time.Since(t0) > *window+time.Minute {
			return fmt.Errorf("controller received %.0f of %d live heartbeats", got-recv0, total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	wall := time.Since(t0)
	sample()
	cpu := procCPU(pid) - cpu0
	pct := 100 * cpu.Seconds() / wall.Seconds()
	fmt.Printf("live window: %d heartbeats at %.0f/s over %v (all received after %v); controller CPU %.1f%% of one core (%.1f µs/heartbeat): headroom %.1f× on one core; VmRSS max %.1f MiB, now %.1f MiB\n",
		total, perSec, window, wall.Round(time.Millisecond), pct, cpu.Seconds()/float64(total)*1e6, 100/pct, float64(maxRSS)/1024, float64(vmRSS(pid))/1024)
	for _, h := range []string{"fleetwave_stats_write_duration_seconds", "fleetwave_rollout_pass_duration_seconds"} {
		sum, err1 := scrapeMetric(addr, h+"_sum")
		cnt, err2 := scrapeMetric(addr, h+"_count")
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		fmt.Printf("%s: %.0f passes, mean %.3fs\n", h, cnt, sum/max(cnt, 1))
	}
	fmt.Printf("bench process (embedded server + publisher) VmRSS %.1f MiB\n", float64(vmRSS(os.Getpid()))/1024)
	return nil
}

// writeRollout writes a config of groups g0..g(n-1) and a spec for a new
// version, so that a controller's every pass decides every group.
func writeRollout(ctx context.Context, fleet *kv.Fleet, n int) error {
	cfg := rollout.DefaultConfig()
	cfg.Groups = nil
	for i := range n {
		g := rollout.DefaultGroup(groupOf(i, n))
		g.DependsOn = []string{} // all at once: every pass moves every group
		cfg.Groups = append(cfg.Groups, g)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if _, err := kv.Save(ctx, fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		return err
	}
	spec := rollout.DefaultSpec("14.3.7", "14.4.0")
	spec.Critical = true
	_, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, 0)
	return err
}

// scrapeMetric reads one unlabelled sample from addr's /metrics.
func scrapeMetric(addr, name string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("/metrics has no %s", name)
}
