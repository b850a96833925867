package main

// The tier mode: agents on their own connections, spread over leaf nodes
// that hold them, in front of one hub that holds the fleet's JetStream
// (docs/deployment.md, "Large fleets"). Every server and every group of
// agents is its own process, so each stays inside this machine's per-process
// file descriptor limit and each one's memory is measured apart.

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// freePort returns a loopback port nobody listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// agentsReport is what an agents process says: once when its agents are
// connected, and once per plan change.
type agentsReport struct {
	Agents  int     `json:"agents"`
	Connect float64 `json:"connect_s"`
	RSSKiB  int64   `json:"rss_kib"`
	Recv    []int64 `json:"recv_ns,omitempty"` // when each agent's handler saw the change, unix nanos
	// Arrive[i] is when the socket read that brought Recv[i]'s message
	// returned (the first read on that connection after arming), unix
	// nanos: Recv-Arrive is the client library's own part (parse, hand
	// over to the subscription's goroutine, schedule it).
	Arrive []int64 `json:"arrive_ns,omitempty"`
	// Kernel[i] is when the kernel received those bytes (SO_TIMESTAMPNS;
	// 0 if not stamped): on loopback, when the server wrote them.
	// Kernel-t0 is the server's fan-out and nothing of this process's.
	Kernel  []int64 `json:"kernel_ns,omitempty"`
	Missing int     `json:"missing,omitempty"`
	GCs     uint64  `json:"gcs,omitempty"` // garbage collections this process ran during the round
}

// stampConn remembers, for the first read that returns bytes after
// arming, when it returned (at) and when the kernel received those bytes
// (kernelAt, where the kernel stamps them).
type stampConn struct {
	net.Conn
	raw      syscall.RawConn // nil: no kernel timestamps
	armed    *atomic.Bool
	at       atomic.Int64
	kernelAt atomic.Int64
}

func (c *stampConn) Read(b []byte) (int, error) {
	var n int
	var stamp int64
	var err error
	// Every read through recvmsg: a read loop that blocked before arming
	// returns with the bytes that arrive after.
	if c.raw != nil {
		n, stamp, err = readStamped(c.raw, b)
	} else {
		n, err = c.Conn.Read(b)
	}
	if n > 0 && c.armed.Load() && c.at.Load() == 0 {
		c.kernelAt.Store(stamp)
		c.at.Store(time.Now().UnixNano())
	}
	return n, err
}

// stampDialer dials TCP and wraps each connection in a stampConn.
type stampDialer struct {
	armed *atomic.Bool
	conn  atomic.Pointer[stampConn] // the last one dialled; one dialer per agent
}

func (d *stampDialer) Dial(network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: time.Minute}).Dial(network, addr)
	if err != nil {
		return nil, err
	}
	sc := &stampConn{Conn: c, raw: kernelStamps(c), armed: d.armed}
	d.conn.Store(sc)
	return sc, nil
}

// agents runs -n agents, each on its own connection to -url with the two
// plan subscriptions agentd.PlanFollower holds, each publishing one
// heartbeat on its own subject (unless -heartbeat=false). Then, for every
// "round" line read on stdin, it answers "armed", and once every agent has
// seen a message on fleet.plan.spec (or after a minute), a JSON line of
// when each saw it.
func agents(args []string) error {
	fs := flag.NewFlagSet("agents", flag.ExitOnError)
	url := fs.String("url", "", "server to connect the agents to")
	n := fs.Int("n", 1000, "agents")
	first := fs.Int("first", 0, "number of the first agent (agent ids and groups follow from it)")
	groups := fs.Int("groups", 10, "groups")
	heartbeat := fs.Bool("heartbeat", true, "publish one heartbeat per agent after subscribing")
	prof := fs.String("cpuprofile", "", "write a CPU profile here, from the first round to the end")
	fs.Parse(args)
	cp := &cpuProfile{path: *prof}
	defer cp.stop()
	subjects, data, err := payloadsFrom(*first, *n, *groups, 1)
	if err != nil {
		return err
	}
	var (
		armed   atomic.Bool
		seen    = make([]atomic.Int64, *n)
		dialers = make([]*stampDialer, *n)
		got     atomic.Int64
		done    = make(chan struct{}, 1)
	)
	ncs := make([]*nats.Conn, *n)
	start := time.Now()
	cerr := inParallel(len(ncs), 32, func(i int) error {
		dialers[i] = &stampDialer{armed: &armed}
		nc, err := nats.Connect(*url, nats.Name(fmt.Sprintf("agent-%d", *first+i)), nats.MaxReconnects(-1),
			nats.Timeout(time.Minute), nats.SetCustomDialer(dialers[i]))
		if err != nil {
			return err
		}
		ncs[i] = nc
		err = subscribePlan(nc, *first+i, *groups, func() {
			if !armed.Load() || seen[i].Load() != 0 {
				return
			}
			seen[i].Store(time.Now().UnixNano())
			if got.Add(1) == int64(*n) {
				done <- struct{}{}
			}
		})
		if err == nil && *heartbeat {
			err = nc.Publish(subjects[i], data[i])
		}
		if err == nil {
			err = nc.FlushTimeout(time.Minute)
		}
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
		return fmt.Errorf("agents %d..%d: %v", *first, *first+*n-1, cerr)
	}
	out := json.NewEncoder(os.Stdout)
	if err := out.Encode(agentsReport{Agents: *n, Connect: time.Since(start).Seconds(), RSSKiB: vmRSS(os.Getpid())}); err != nil {
		return err
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() != "round" {
			return fmt.Errorf("want 'round', got %q", sc.Text())
		}
		if err := cp.start(); err != nil {
			return err
		}
		got.Store(0)
		for i := range seen {
			seen[i].Store(0)
			c := dialers[i].conn.Load()
			c.at.Store(0)
			c.kernelAt.Store(0)
		}
		select { // a stale "all seen" from a round that ended on time
		case <-done:
		default:
		}
		gc0 := gcCycles()
		armed.Store(true)
		fmt.Println("armed")
		select {
		case <-done:
		case <-time.After(time.Minute):
		}
		armed.Store(false)
		r := agentsReport{Agents: *n, RSSKiB: vmRSS(os.Getpid()), GCs: gcCycles() - gc0}
		for i := range seen {
			if d := seen[i].Load(); d != 0 {
				r.Recv = append(r.Recv, d)
				c := dialers[i].conn.Load()
				r.Arrive = append(r.Arrive, c.at.Load())
				r.Kernel = append(r.Kernel, c.kernelAt.Load())
			} else {
				r.Missing++
			}
		}
		if err := out.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// agentsProc is one running agents process.
type agentsProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startAgentsProc(url string, first, n, groups int, extra ...string) (*agentsProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{"agents", "-url", url, "-first", strconv.Itoa(first), "-n", strconv.Itoa(n), "-groups", strconv.Itoa(groups)}, extra...)...)
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(outp)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	return &agentsProc{cmd: cmd, in: in, out: sc}, nil
}

func (p *agentsProc) report() (agentsReport, error) {
	var r agentsReport
	if !p.out.Scan() {
		return r, fmt.Errorf("agents process ended (see its error above)")
	}
	return r, json.Unmarshal(p.out.Bytes(), &r)
}

func (p *agentsProc) close() { p.in.Close(); p.cmd.Wait() }

// tierOpts are tier's flags.
type tierOpts struct {
	n, leaves, groups, rounds int
	cache                     bool
	pprof                     string // directory for the children's CPU profiles
}

func tier(args []string) error {
	fs := flag.NewFlagSet("tier", flag.ExitOnError)
	var o tierOpts
	fs.IntVar(&o.n, "agents", 10_000, "agents, each on its own connection")
	fs.IntVar(&o.leaves, "leaves", 0, "leaf nodes holding the agents' connections (0: every agent on the hub)")
	fs.IntVar(&o.groups, "groups", 10, "groups")
	fs.IntVar(&o.rounds, "rounds", 3, "plan changes to time in each repeat")
	fs.BoolVar(&o.cache, "sublist-cache", false, "run every server with nats-server's sublist cache on (nats-server's default; fleetwave turns it off: docs/PERFORMANCE.md 2b)")
	repeat := fs.Int("repeat", 1, "repeat the whole measurement (new servers, new agents, -rounds plan changes) this many times and summarise")
	target := fs.Duration("target", 250*time.Millisecond, "the p99 the summary compares against (reported, not asserted)")
	fs.StringVar(&o.pprof, "pprof", "", "write CPU profiles of the servers and agent processes, over the rounds, into this directory")
	fs.Parse(args)
	printMachine()
	var each []latencies
	for r := range *repeat {
		if *repeat > 1 {
			fmt.Printf("-- repeat %d of %d (load average %s)\n", r+1, *repeat, loadavg())
		}
		lat, err := tierOnce(o, r)
		if err != nil {
			return err
		}
		each = append(each, lat)
	}
	repeatSummary(each, o.n, *target)
	return nil
}

// tierOnce is one measurement: servers and agents started, -rounds plan
// changes timed, everything stopped again. It returns every latency.
func tierOnce(o tierOpts, rep int) (latencies, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	var common []string
	if o.cache {
		common = []string{"-sublist-cache"}
	}
	profArgs := func(name string) []string {
		if o.pprof == "" {
			return nil
		}
		return []string{"-cpuprofile", fmt.Sprintf("%s/%s-r%d.pprof", o.pprof, name, rep+1)}
	}
	leafPort, err := freePort()
	if err != nil {
		return latencies{}, err
	}
	hubArgs := append(slices.Clone(common), profArgs("hub")...)
	hub, err := startServerProc(append(hubArgs, "-conf", fmt.Sprintf("server_name: hub\njetstream { domain: hub }\nleafnodes { listen: \"127.0.0.1:%d\" }\n", leafPort))...)
	if err != nil {
		return latencies{}, err
	}
	defer hub.close()
	adm, js, fleet, err := openFleet(ctx, hub.url)
	if err != nil {
		return latencies{}, err
	}
	defer adm.Close()
	// Agents (re)connect to a fleet that has a plan.
	spec, _ := json.Marshal(rollout.DefaultSpec("14.3.6", "14.3.7"))
	if _, err := fleet.Plan.Put(ctx, kv.KeySpec, spec); err != nil {
		return latencies{}, err
	}

	// Each leaf: its own JetStream domain and plan mirror, fleet.plan.>
	// kept off the leaf connection: leaf-edge.conf's arrangement.
	var leafs []*serverProc
	for k := range o.leaves {
		leafArgs := append(slices.Clone(common), profArgs(fmt.Sprintf("leaf%d", k))...)
		lp, err := startServerProc(append(leafArgs, "-conf", fmt.Sprintf(`server_name: leaf%d
jetstream { domain: leaf%d }
leafnodes { remotes: [ { urls: ["nats-leaf://127.0.0.1:%d"], deny_imports: ["fleet.plan.>"], deny_exports: ["fleet.plan.>"] } ] }
`, k, k, leafPort))...)
		if err != nil {
			return latencies{}, err
		}
		defer lp.close()
		leafs = append(leafs, lp)
	}
	for k, lp := range leafs {
		nc, err := nats.Connect(lp.url)
		if err != nil {
			return latencies{}, err
		}
		defer nc.Close()
		ljs, _ := jetstream.New(nc)
		// The site's consumer at the hub, as "fleetctl edge add" makes it.
		site := fmt.Sprintf("leaf%d", k)
		if _, err := kv.EnsureEdgeConsumer(ctx, js, site); err != nil {
			return latencies{}, err
		}
		var mirror jetstream.KeyValue
		if err := waitFor(ctx, 30*time.Second, func() (err error) {
			mirror, err = kv.EnsurePlanMirror(ctx, ljs, "hub", site, kv.Options{})
			return err
		}); err != nil {
			return latencies{}, fmt.Errorf("leaf%d: %w", k, err)
		}
		if err := waitFor(ctx, 30*time.Second, func() error {
			_, err := mirror.Get(ctx, kv.KeySpec)
			return err
		}); err != nil {
			return latencies{}, fmt.Errorf("leaf%d: plan mirror: %w", k, err)
		}
	}

	servers := append([]*serverProc{hub}, leafs...)
	before := make([]serverStats, len(servers))
	for i, s := range servers {
		before[i] = s.stats()
	}

	// One agents process per server that holds agents, at most 15,000
	// agents each (the per-process descriptor limit here is 20,000).
	holders := leafs
	if len(holders) == 0 {
		holders = []*serverProc{hub}
	}
	var procs []*agentsProc
	defer func() {
		for _, p := range procs {
			p.close()
		}
	}()
	per := (o.n + len(holders) - 1) / len(holders)
	const maxPerProc = 15_000
	start := time.Now()
	for h, s := range holders {
		for first := h * per; first < min(o.n, (h+1)*per); first += maxPerProc {
			p, err := startAgentsProc(s.url, first, min(maxPerProc, (h+1)*per-first, o.n-first), o.groups, profArgs(fmt.Sprintf("agents%d", len(procs)))...)
			if err != nil {
				return latencies{}, err
			}
			procs = append(procs, p)
		}
	}
	var clientRSS int64
	for _, p := range procs {
		r, err := p.report()
		if err != nil {
			return latencies{}, err
		}
		clientRSS += r.RSSKiB
	}
	setup := time.Since(start)
	hb, err := js.Stream(ctx, kv.StreamHB)
	if err != nil {
		return latencies{}, err
	}
	if err := waitFor(ctx, time.Minute, func() error {
		info, err := hb.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != uint64(o.n) {
			return fmt.Errorf("%d of %d heartbeats in %s", info.State.Msgs, o.n, kv.StreamHB)
		}
		return nil
	}); err != nil {
		return latencies{}, err
	}
	fmt.Printf("tier: %d agents on their own connections, %d leaf nodes, %d agent processes, sublist-cache=%v\n", o.n, o.leaves, len(procs), o.cache)
	fmt.Printf("connected, subscribed and one heartbeat each in the hub's %s: %v; agent processes' RSS %d MiB\n", kv.StreamHB, setup.Round(time.Millisecond), clientRSS>>10)
	cpu := newCPUMeter()
	for i, s := range servers {
		a := before[i]
		if os.Getenv("TMP_NOSTATS") == "" {
			a = s.stats()
		}
		name := "hub"
		if i > 0 {
			name = fmt.Sprintf("leaf%d", i-1)
		}
		cpu.add(name, "server", s.pid())
		b := before[i]
		fmt.Printf("%-6s conns %6d  leafnodes %2d  subs %6d  rss %7.1f MiB (+%.1f)  heap %6.1f MiB  stacks %6.1f MiB  goroutines %6d\n",
			name, a.Connections, a.LeafNodes, a.Subscriptions, float64(a.RSSKiB)/1024, float64(a.RSSKiB-b.RSSKiB)/1024, float64(a.HeapInuse)/(1<<20), float64(a.StackInuse)/(1<<20), a.Goroutines)
		if o.pprof != "" {
			s.profile()
		}
	}
	for i, p := range procs {
		cpu.add(fmt.Sprintf("agents%d", i), "agents", p.cmd.Process.Pid)
	}
	cpu.add("bench", "bench", os.Getpid())

	var all latencies
	for r := range o.rounds {
		if err := armRound(procs, r); err != nil {
			return latencies{}, err
		}
		cpu.begin()
		t0 := time.Now().UnixNano()
		spec, _ := json.Marshal(rollout.DefaultSpec("14.3.6", fmt.Sprintf("14.3.%d", 8+r)))
		if _, err := fleet.Plan.Put(ctx, kv.KeySpec, spec); err != nil {
			return latencies{}, err
		}
		put := time.Duration(time.Now().UnixNano() - t0)
		lat, sp, err := collectRound(procs, t0, o.n, r)
		if err != nil {
			return latencies{}, err
		}
		use := cpu.end()
		// Latencies are from just before the put to each agent's handler.
		fmt.Printf("round %d: %d/%d notified (put %v): %s\n  %s\n  %s\n", r+1, len(lat.handler), o.n, put.Round(10*time.Microsecond), quantilesOf(lat.handler), sp, use)
		all.add(lat)
	}
	fmt.Printf("all %d rounds: %s\n", o.rounds, quantilesOf(all.handler))
	all.cpu = cpu.total
	for i, s := range servers {
		if i == 0 || len(servers) < 4 {
			a := s.stats()
			fmt.Printf("after the rounds, server %d: rss %.1f MiB  heap %.1f MiB  stacks %.1f MiB\n", i, float64(a.RSSKiB)/1024, float64(a.HeapInuse)/(1<<20), float64(a.StackInuse)/(1<<20))
		}
	}
	return all, nil
}

// collectRound reads every agents process's report of a round that
// started at t0 (unix nanos) and returns the latencies (t0 to each agent's
// handler) and a line that splits them: t0 to the socket read that brought
// the message, and from that read to the handler.
// inParallel runs fn for 0..n-1, at most limit at a time, and returns the
// first error one returned.
func inParallel(n, limit int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, limit)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// armRound tells every agents process that round r (from 0) begins and
// waits until each has answered "armed".
func armRound(procs []*agentsProc, r int) error {
	for _, p := range procs {
		fmt.Fprintln(p.in, "round")
	}
	for _, p := range procs {
		if !p.out.Scan() || p.out.Text() != "armed" {
			return fmt.Errorf("agents process did not arm for round %d", r+1)
		}
	}
	return nil
}

func collectRound(procs []*agentsProc, t0 int64, n, round int) (latencies, string, error) {
	var lat, kernel, wake, arrive, client []time.Duration
	missing := 0
	var gcs uint64
	for _, p := range procs {
		rep, err := p.report()
		if err != nil {
			return latencies{}, "", err
		}
		for i, at := range rep.Recv {
			lat = append(lat, time.Duration(at-t0))
			if i < len(rep.Arrive) && rep.Arrive[i] != 0 {
				arrive = append(arrive, time.Duration(rep.Arrive[i]-t0))
				client = append(client, time.Duration(at-rep.Arrive[i]))
				if k := rep.Kernel[i]; k != 0 {
					kernel = append(kernel, time.Duration(k-t0))
					wake = append(wake, time.Duration(rep.Arrive[i]-k))
				}
			}
		}
		missing += rep.Missing
		gcs += rep.GCs
	}
	if missing > 0 {
		return latencies{}, "", fmt.Errorf("round %d: %d of %d agents did not see the change within a minute", round+1, missing, n)
	}
	split := "split: n/a"
	if len(arrive) > 0 {
		split = fmt.Sprintf("put to socket read: %s | socket read to handler: %s", quantilesOf(arrive), quantilesOf(client))
	}
	if len(kernel) > 0 {
		split = fmt.Sprintf("put to kernel receive (server wrote it): %s\n  kernel receive to socket read: %s\n  socket read to handler: %s",
			quantilesOf(kernel), quantilesOf(wake), quantilesOf(client))
	}
	split += fmt.Sprintf("\n  garbage collections in the agent processes during the round: %d", gcs)
	return latencies{handler: lat, wrote: kernel}, split, nil
}

// waitFor retries f until it succeeds or d passes.
func waitFor(ctx context.Context, d time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
