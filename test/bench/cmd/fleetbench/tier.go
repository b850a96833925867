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
// connected, and once per plan change (the latencies, in microseconds).
type agentsReport struct {
	Agents  int     `json:"agents"`
	Connect float64 `json:"connect_s"`
	RSSKiB  int64   `json:"rss_kib"`
	Recv    []int64 `json:"recv_ns,omitempty"` // when each agent saw the change, unix nanos
	Missing int     `json:"missing,omitempty"`
}

// agents runs -n agents, each on its own connection to -url with the two
// plan subscriptions agentd.PlanFollower holds, each publishing one
// heartbeat on its own subject. Then, for every "round" line read on stdin,
// it answers "armed", and once every agent has seen a message on
// fleet.plan.spec (or after a minute), a JSON line of when each saw it.
func agents(args []string) error {
	fs := flag.NewFlagSet("agents", flag.ExitOnError)
	url := fs.String("url", "", "server to connect the agents to")
	n := fs.Int("n", 1000, "agents")
	first := fs.Int("first", 0, "number of the first agent (agent ids and groups follow from it)")
	groups := fs.Int("groups", 10, "groups")
	fs.Parse(args)
	subjects, data, err := payloadsFrom(*first, *n, *groups, 1)
	if err != nil {
		return err
	}
	var (
		armed atomic.Bool
		seen  = make([]atomic.Int64, *n)
		got   atomic.Int64
		done  = make(chan struct{}, 1)
	)
	ncs := make([]*nats.Conn, *n)
	start := time.Now()
	var wg sync.WaitGroup
	var cerr atomic.Value
	sem := make(chan struct{}, 32)
	for i := range ncs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			nc, err := nats.Connect(*url, nats.Name(fmt.Sprintf("agent-%d", *first+i)), nats.MaxReconnects(-1), nats.Timeout(time.Minute))
			if err != nil {
				cerr.Store(err)
				return
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
			if err == nil {
				err = nc.Publish(subjects[i], data[i])
			}
			if err == nil {
				err = nc.FlushTimeout(time.Minute)
			}
			if err != nil {
				cerr.Store(err)
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, nc := range ncs {
			if nc != nil {
				nc.Close()
			}
		}
	}()
	if e := cerr.Load(); e != nil {
		return fmt.Errorf("agents %d..%d: %v", *first, *first+*n-1, e)
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
		got.Store(0)
		for i := range seen {
			seen[i].Store(0)
		}
		select { // a stale "all seen" from a round that ended on time
		case <-done:
		default:
		}
		armed.Store(true)
		fmt.Println("armed")
		select {
		case <-done:
		case <-time.After(time.Minute):
		}
		armed.Store(false)
		r := agentsReport{Agents: *n, RSSKiB: vmRSS(os.Getpid())}
		for i := range seen {
			if d := seen[i].Load(); d != 0 {
				r.Recv = append(r.Recv, d)
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

func startAgentsProc(url string, first, n, groups int) (*agentsProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "agents", "-url", url, "-first", strconv.Itoa(first), "-n", strconv.Itoa(n), "-groups", strconv.Itoa(groups))
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

func tier(args []string) error {
	fs := flag.NewFlagSet("tier", flag.ExitOnError)
	n := fs.Int("agents", 10_000, "agents, each on its own connection")
	leaves := fs.Int("leaves", 0, "leaf nodes holding the agents' connections (0: every agent on the hub)")
	groups := fs.Int("groups", 10, "groups")
	rounds := fs.Int("rounds", 3, "plan changes to time")
	cache := fs.Bool("sublist-cache", false, "run every server with nats-server's sublist cache on (nats-server's default; fleetwave turns it off: docs/PERFORMANCE.md 2b)")
	fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	var common []string
	if *cache {
		common = []string{"-sublist-cache"}
	}
	leafPort, err := freePort()
	if err != nil {
		return err
	}
	hub, err := startServerProc(append(common, "-conf", fmt.Sprintf("server_name: hub\njetstream { domain: hub }\nleafnodes { listen: \"127.0.0.1:%d\" }\n", leafPort))...)
	if err != nil {
		return err
	}
	defer hub.close()
	adm, js, fleet, err := openFleet(ctx, hub.url)
	if err != nil {
		return err
	}
	defer adm.Close()
	// Agents (re)connect to a fleet that has a plan.
	spec, _ := json.Marshal(rollout.DefaultSpec("14.3.6", "14.3.7"))
	if _, err := fleet.Plan.Put(ctx, kv.KeySpec, spec); err != nil {
		return err
	}

	// Each leaf: its own JetStream domain and plan mirror, fleet.plan.>
	// kept off the leaf connection: leaf-edge.conf's arrangement.
	var leafs []*serverProc
	for k := range *leaves {
		lp, err := startServerProc(append(common, "-conf", fmt.Sprintf(`server_name: leaf%d
jetstream { domain: leaf%d }
leafnodes { remotes: [ { urls: ["nats-leaf://127.0.0.1:%d"], deny_imports: ["fleet.plan.>"], deny_exports: ["fleet.plan.>"] } ] }
`, k, k, leafPort))...)
		if err != nil {
			return err
		}
		defer lp.close()
		leafs = append(leafs, lp)
	}
	for k, lp := range leafs {
		nc, err := nats.Connect(lp.url)
		if err != nil {
			return err
		}
		defer nc.Close()
		ljs, _ := jetstream.New(nc)
		var mirror jetstream.KeyValue
		if err := waitFor(ctx, 30*time.Second, func() (err error) {
			mirror, err = kv.EnsurePlanMirror(ctx, ljs, "hub", kv.Options{})
			return err
		}); err != nil {
			return fmt.Errorf("leaf%d: %w", k, err)
		}
		if err := waitFor(ctx, 30*time.Second, func() error {
			_, err := mirror.Get(ctx, kv.KeySpec)
			return err
		}); err != nil {
			return fmt.Errorf("leaf%d: plan mirror: %w", k, err)
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
	per := (*n + len(holders) - 1) / len(holders)
	const maxPerProc = 15_000
	start := time.Now()
	for h, s := range holders {
		for first := h * per; first < min(*n, (h+1)*per); first += maxPerProc {
			p, err := startAgentsProc(s.url, first, min(maxPerProc, (h+1)*per-first, *n-first), *groups)
			if err != nil {
				return err
			}
			procs = append(procs, p)
		}
	}
	var clientRSS int64
	for _, p := range procs {
		r, err := p.report()
		if err != nil {
			return err
		}
		clientRSS += r.RSSKiB
	}
	setup := time.Since(start)
	hb, err := js.Stream(ctx, kv.StreamHB)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, time.Minute, func() error {
		info, err := hb.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != uint64(*n) {
			return fmt.Errorf("%d of %d heartbeats in %s", info.State.Msgs, *n, kv.StreamHB)
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Printf("tier: %d agents on their own connections, %d leaf nodes, %d agent processes, sublist-cache=%v\n", *n, *leaves, len(procs), *cache)
	fmt.Printf("connected, subscribed and one heartbeat each in the hub's %s: %v; agent processes' RSS %d MiB\n", kv.StreamHB, setup.Round(time.Millisecond), clientRSS>>10)
	for i, s := range servers {
		a := s.stats()
		name := "hub"
		if i > 0 {
			name = fmt.Sprintf("leaf%d", i-1)
		}
		b := before[i]
		fmt.Printf("%-6s conns %6d  leafnodes %2d  subs %6d  rss %7.1f MiB (+%.1f)  heap %6.1f MiB  goroutines %6d\n",
			name, a.Connections, a.LeafNodes, a.Subscriptions, float64(a.RSSKiB)/1024, float64(a.RSSKiB-b.RSSKiB)/1024, float64(a.HeapInuse)/(1<<20), a.Goroutines)
	}

	var all []time.Duration
	for r := range *rounds {
		for _, p := range procs {
			fmt.Fprintln(p.in, "round")
		}
		for _, p := range procs {
			if !p.out.Scan() || p.out.Text() != "armed" {
				return fmt.Errorf("agents process did not arm for round %d", r+1)
			}
		}
		t0 := time.Now().UnixNano()
		spec, _ := json.Marshal(rollout.DefaultSpec("14.3.6", fmt.Sprintf("14.3.%d", 8+r)))
		if _, err := fleet.Plan.Put(ctx, kv.KeySpec, spec); err != nil {
			return err
		}
		put := time.Duration(time.Now().UnixNano() - t0)
		var lat []time.Duration
		missing := 0
		for _, p := range procs {
			rep, err := p.report()
			if err != nil {
				return err
			}
			for _, at := range rep.Recv {
				lat = append(lat, time.Duration(at-t0))
			}
			missing += rep.Missing
		}
		if missing > 0 {
			return fmt.Errorf("round %d: %d of %d agents did not see the change within a minute", r+1, missing, *n)
		}
		// Latencies are from just before the put to each agent's handler.
		fmt.Printf("round %d: %d/%d notified (put %v): %s\n", r+1, len(lat), *n, put.Round(10*time.Microsecond), percentiles(slices.Clone(lat)))
		all = append(all, lat...)
	}
	fmt.Printf("all %d rounds: %s\n", *rounds, percentiles(all))
	return nil
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
