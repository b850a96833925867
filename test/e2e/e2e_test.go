// Package e2e runs the whole system as an operator would, secured: the
// credentials minted with "fleetctl auth", a controller process with its
// embedded NATS server in operator mode and its find endpoint, a release
// site, and a dozen agentd processes, each with its own minted creds (a user
// of the AGENTS account), supervising their app; it checks a rollout from
// the heartbeats the agents publish. (scripts/demo.sh runs the open bus.)
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/internal/proctest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/releases"
)

var binDir string

func TestMain(m *testing.M) {
	os.Exit(proctest.Main(m, &binDir, "cmd/controller", "cmd/agentd", "cmd/fleetctl"))
}

// runCmd runs a binary to completion and fails the test if it fails.
func runCmd(t *testing.T, name string, args ...string) {
	t.Helper()
	proctest.Run(t, filepath.Join(binDir, name), args...)
}

// start runs a binary until the test ends (SIGTERM, then wait).
func start(t *testing.T, logPath, name string, args ...string) *exec.Cmd {
	t.Helper()
	return proctest.Start(t, logPath, filepath.Join(binDir, name), func(b []byte) {
		// Every process runs with the credentials minted for it: none
		// may be refused anything it does.
		if strings.Contains(strings.ToLower(string(b)), "permissions violation") {
			t.Errorf("%s logs a permissions violation", logPath)
		}
	}, args...)
}

// fleet is the running system.
type fleet struct {
	t       *testing.T
	ctx     context.Context
	natsURL string
	findURL string
	js      jetstream.JetStream
	kv      *kv.Fleet
	rel     *releases.Server
	agents  []*agent
	groups  []string // of the test's config
	proxy   *natstest.Proxy
	started int    // agents started, for their dirs and hostnames
	authDir string // fleetctl auth init's, with creds/admin.creds
	dir     string // the test's temp dir: agent roots and logs
	relURL  string // the release site
	// agentFlags are extra agentd flags of every agent (setup may set them).
	agentFlags []string
	// authFlags are extra flags of every agent's "fleetctl auth agent"
	// (--apps); prepare, when set, runs for every agent between its mint
	// and its agentd's start, with its creds (setup may set both).
	authFlags []string
	prepare   func(a *agent, creds string)

	mu     sync.Mutex
	beats  []heartbeat.Heartbeat
	events []rollout.Event
}

type agent struct {
	root  string
	group string
	cut   bool // connects through the proxy
	id    rollout.AgentID
	n     int      // its number, for its log's name
	args  []string // agentd's, without extra flags
	cmd   *exec.Cmd
	runs  int // restarts so far
}

func (f *fleet) record(nc *nats.Conn) {
	f.t.Helper()
	if _, err := nc.Subscribe(heartbeat.SubjectPrefix+">", func(m *nats.Msg) {
		if hb, err := heartbeat.DecodeFrom(m.Subject, m.Data); err == nil {
			f.mu.Lock()
			f.beats = append(f.beats, *hb)
			f.mu.Unlock()
		}
	}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := nc.Subscribe(kv.EventsPrefix+">", func(m *nats.Msg) {
		var ev rollout.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			f.mu.Lock()
			f.events = append(f.events, ev)
			f.mu.Unlock()
		}
	}); err != nil {
		f.t.Fatal(err)
	}
}

// connectAdmin connects to the fleet's bus with the admin's creds of
// f.authDir once the controller serves it, and records heartbeats and
// events from then on; it returns the connection.
func (f *fleet) connectAdmin() *nats.Conn {
	f.t.Helper()
	var nc *nats.Conn
	natstest.Eventually(f.t, 30*time.Second, func() error {
		c, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{URL: f.natsURL, Log: natstest.Logger(f.t),
			Creds: filepath.Join(f.authDir, "creds", "admin.creds")})
		if err != nil {
			return err
		}
		fl, err := kv.Open(f.ctx, js)
		if err != nil {
			c.Close()
			return err
		}
		nc, f.js, f.kv = c, js, fl
		return nil
	})
	f.t.Cleanup(nc.Close)
	f.record(nc)
	return nc
}

// lastBeats returns the latest heartbeat of every agent seen.
func (f *fleet) lastBeats() map[rollout.AgentID]heartbeat.Heartbeat {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[rollout.AgentID]heartbeat.Heartbeat{}
	for _, b := range f.beats {
		out[b.AgentID] = b
	}
	return out
}

func (f *fleet) statuses() map[string]rollout.GroupStatus {
	f.t.Helper()
	st, err := f.kv.ReadState(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]rollout.GroupStatus{}
	for g, e := range st.Groups {
		out[g] = e.Value
	}
	return out
}

func (f *fleet) setSpec(edit func(*rollout.Spec)) time.Time {
	f.t.Helper()
	e, err := kv.Get[rollout.Spec](f.ctx, f.kv.Plan, kv.KeySpec)
	spec, rev := rollout.DefaultSpec("1.0.0", "1.0.0"), uint64(0)
	if err == nil {
		spec, rev = e.Value, e.Revision
	}
	spec.Critical = true // the test runs at any hour
	edit(&spec)
	at := time.Now()
	if _, err := kv.Save(f.ctx, f.kv.Plan, kv.KeySpec, spec, rev); err != nil {
		f.t.Fatal(err)
	}
	return at
}

func (f *fleet) setConfig(cfg rollout.Config) {
	f.t.Helper()
	e, _, err := f.kv.ReadConfig(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := kv.Save(f.ctx, f.kv.Config, kv.KeyConfig, cfg, e.Revision); err != nil {
		f.t.Fatal(err)
	}
}

// waitDone waits until both groups are done on target.
func (f *fleet) waitDone(target string, timeout time.Duration) {
	f.t.Helper()
	natstest.Eventually(f.t, timeout, func() error {
		statuses := f.statuses()
		// The groups of the test's config. The controller's first pass may
		// run on the default config before the test sets its own, leaving a
		// status for group "default" that no agent is in.
		for _, g := range f.groups {
			st, ok := statuses[g]
			if !ok {
				return fmt.Errorf("no status for group %s yet", g)
			}
			if st.TargetVersion != target || st.State != rollout.StateDone {
				return fmt.Errorf("group %s: %s on %s (halted %v %s; waiting %s)", g, st.State, st.TargetVersion, st.Halted, st.HaltReason, st.Waiting)
			}
		}
		// A group is done once every agent it counts is on the target;
		// a host still installing its first version is not counted yet.
		for _, a := range f.agents {
			uf, err := install.LoadUpdateFile(a.root)
			if err != nil {
				return err
			}
			if uf.Status.ActiveVersion != target {
				return fmt.Errorf("agent %s (%s) is on %q", a.id, a.group, uf.Status.ActiveVersion)
			}
		}
		return nil
	})
}

func (f *fleet) status(a *agent) install.Status {
	f.t.Helper()
	uf, err := install.LoadUpdateFile(a.root)
	if err != nil {
		f.t.Fatal(err)
	}
	return uf.Status
}

func groupConfig(name string, canaries int, inFlight rollout.Percent) rollout.GroupConfig {
	g := rollout.DefaultGroup(name)
	g.CanaryCount, g.MaxInFlight = canaries, inFlight
	g.JitterSeconds = 0
	g.HealthTimeout = rollout.Duration(10 * time.Second)
	g.MinHealthyTime = rollout.Duration(time.Second)
	return g
}

// startFleet starts the controller, runs setup (config, plan), waits until
// the controller has written a status for every group, then starts the
// agents.
func startFleet(t *testing.T, groups map[string]int, cutOff int, setup func(*fleet), controllerFlags ...string) *fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir := t.TempDir()
	natsPort, httpPort := natstest.FreePort(t), natstest.FreePort(t)
	f := &fleet{t: t, ctx: ctx, natsURL: fmt.Sprintf("nats://127.0.0.1:%d", natsPort), findURL: fmt.Sprintf("http://127.0.0.1:%d/v1/find", httpPort)}

	f.rel = releases.NewServer(nil)
	for v, b := range map[string]releases.Behaviour{"1.0.0": releases.Good, "1.1.0": releases.Good, "1.2.0": releases.Crash, "1.3.0": releases.Good} {
		if err := f.rel.Add(v, b); err != nil {
			t.Fatal(err)
		}
	}
	relSrv := httptest.NewServer(f.rel)
	t.Cleanup(relSrv.Close)
	f.dir, f.relURL = dir, relSrv.URL

	authDir := filepath.Join(dir, "auth")
	f.authDir = authDir
	runCmd(t, "fleetctl", "auth", "init", "--dir", authDir)
	start(t, filepath.Join(dir, "controller.log"), "controller", append([]string{"run", "--auth-dir", authDir,
		"--listen", fmt.Sprintf("127.0.0.1:%d", natsPort), "--store-dir", filepath.Join(dir, "nats"),
		"--http-addr", fmt.Sprintf("127.0.0.1:%d", httpPort),
		"--heartbeat-interval", "1s", "--stats-interval", "1s", "--reconcile-interval", "500ms", "--lease-ttl", "5s"},
		controllerFlags...)...)
	f.connectAdmin()
	setup(f)
	natstest.Eventually(t, 30*time.Second, func() error {
		st := f.statuses()
		for g := range groups {
			if _, ok := st[g]; !ok {
				return fmt.Errorf("no status for group %s yet (have %d)", g, len(st))
			}
		}
		return nil
	})

	var names []string
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	f.groups = names
	f.proxy = natstest.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", natsPort))
	for _, g := range names {
		for n := range groups[g] {
			f.agents = append(f.agents, f.startAgent(g, g == names[len(names)-1] && n < cutOff))
		}
	}
	return f
}

// startAgent mints creds for a new agent of group and starts its agentd,
// connected through the proxy when cut, with extra flags if any.
func (f *fleet) startAgent(group string, cut bool, extra ...string) *agent {
	t := f.t
	t.Helper()
	f.started++
	i := f.started
	a := &agent{root: filepath.Join(f.dir, fmt.Sprintf("agent-%d", i)), group: group, cut: cut, n: i}
	url := f.natsURL
	if a.cut {
		url = f.proxy.URL()
	}
	uf := install.NewUpdateFile(group)
	uf.Spec.Enabled, uf.Spec.NATS = true, url
	uf.Spec.URLTemplate = releases.URLTemplate(f.relURL)
	uf.Spec.FindURLs = []string{f.findURL}
	if err := uf.Save(a.root); err != nil {
		t.Fatal(err)
	}
	id, err := install.LoadOrCreateAgentID(a.root)
	if err != nil {
		t.Fatal(err)
	}
	a.id = id
	creds := filepath.Join(f.authDir, "agents", string(id)+".creds")
	runCmd(t, "fleetctl", append([]string{"auth", "agent", "--dir", f.authDir, "--group", group, "--id", string(id)}, f.authFlags...)...)
	if f.prepare != nil {
		f.prepare(a, creds)
	}
	a.args = []string{"run", "--root", a.root, "--creds", creds,
		"--process", "app", "--bin-dir", filepath.Join(a.root, "bin"), "--hostname", fmt.Sprintf("host-%d", i),
		"--heartbeat-interval", "1s", "--heartbeat-jitter", "100ms",
		"--fallback-after", "2s", "--find-interval", "1s", "--log-level", "debug"}
	a.args = append(a.args, f.agentFlags...)
	a.cmd = start(t, filepath.Join(f.dir, fmt.Sprintf("agent-%d.log", i)), "agentd", append(a.args, extra...)...)
	return a
}

// restartAgent stops a's agentd (SIGTERM, as systemd would) and starts it
// again with its flags and extra ones.
func (f *fleet) restartAgent(a *agent, extra ...string) {
	t := f.t
	t.Helper()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _, _ = a.cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("agent %s did not stop within 15s of SIGTERM", a.id)
	}
	a.runs++
	a.cmd = start(t, filepath.Join(f.dir, fmt.Sprintf("agent-%d.%d.log", a.n, a.runs)), "agentd", append(a.args, extra...)...)
}
