package deploy_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
)

// confs are the server configs this directory ships.
var confs = []string{"single.conf", "cluster-a.conf", "cluster-b.conf", "cluster-c.conf", "leaf-edge.conf"}

// stage puts the shipped configs in a temporary directory next to what
// "fleetctl auth init" writes (resolver.conf, fleet-account.conf), as an
// operator would, and makes it the working directory: the configs' resolver
// directory "./jwt" is relative to it and created when a config is read.
func stage(t *testing.T) (dir string, ad auth.Dir) {
	t.Helper()
	src, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	ad = auth.Dir{Path: filepath.Join(dir, "auth")}
	if _, err := ad.Init("test", auth.DefaultJetStreamLimits); err != nil {
		t.Fatal(err)
	}
	copyFile := func(from, to string) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range confs {
		copyFile(filepath.Join(src, c), filepath.Join(dir, c))
	}
	for _, f := range []string{auth.FileResolverConf, auth.FileAccountConf} {
		copyFile(filepath.Join(ad.Path, f), filepath.Join(dir, f))
	}
	t.Chdir(dir)
	return dir, ad
}

// load reads a staged config and points it at loopback: free ports, a
// private store (and, in startNode, resolver directory), no monitoring port,
// no signal handlers. Everything else (operator, accounts, JetStream domain,
// cluster name, leaf remotes and their account and deny rules) is the file's.
func load(t *testing.T, dir, name string) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if r, ok := opts.AccountResolver.(*server.DirAccResolver); ok {
		r.Close() // "./jwt" is shared by every server of the test: each node gets its own
	}
	opts.Host, opts.Port = "127.0.0.1", natstest.FreePort(t)
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.StoreDir = t.TempDir()
	opts.NoSigs, opts.NoLog = true, !testing.Verbose()
	if opts.LeafNode.Port != 0 {
		opts.LeafNode.Host, opts.LeafNode.Port = "127.0.0.1", natstest.FreePort(t)
	}
	if opts.Cluster.Port != 0 {
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", natstest.FreePort(t)
	}
	return opts
}

// node is a running server that can be stopped and started again with the
// same options (ports, store).
type node struct {
	t           *testing.T
	opts        *server.Options
	resolverDir string
	ns          *server.Server
}

func startNode(t *testing.T, opts *server.Options) *node {
	t.Helper()
	n := &node{t: t, opts: opts, resolverDir: t.TempDir()}
	n.start()
	t.Cleanup(n.stop)
	return n
}

func (n *node) start() {
	n.t.Helper()
	opts := n.opts.Clone()
	res, err := server.NewDirAccResolver(n.resolverDir, 0, 2*time.Minute, server.NoDelete)
	if err != nil {
		n.t.Fatal(err)
	}
	opts.AccountResolver = res
	ns, err := server.NewServer(opts)
	if err != nil {
		n.t.Fatalf("%s: %v", n.opts.ServerName, err)
	}
	if testing.Verbose() {
		ns.ConfigureLogger()
	}
	go ns.Start()
	if !ns.ReadyForConnections(20 * time.Second) {
		n.t.Fatalf("%s: not ready", n.opts.ServerName)
	}
	n.ns = ns
}

func (n *node) stop() {
	if n.ns != nil {
		n.ns.Shutdown()
		n.ns.WaitForShutdown()
		n.ns = nil
	}
}

func (n *node) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.opts.Port) }

func urls(nodes ...*node) string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.url())
	}
	return strings.Join(out, ",")
}

func routeURL(opts *server.Options) *url.URL {
	return &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", opts.Cluster.Port)}
}

// connect opens a client connection with creds (relative to the auth dir).
func connect(t *testing.T, ad auth.Dir, serverURLs, creds string, extra ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: serverURLs, Name: "deploy-test",
		Creds: filepath.Join(ad.Path, creds), Log: natstest.Logger(t), Extra: extra})
	if err != nil {
		t.Fatalf("connect %s: %v", serverURLs, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func jsFor(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// within runs f with a context bounded by d.
func within[T any](ctx context.Context, d time.Duration, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(ctx)
}

// testController is "controller run" in this process, with the controller's
// credentials and fast intervals; its log is shown when the test fails.
type testController struct {
	log  natstest.Buffer
	done chan error
	stop context.CancelFunc
}

func runController(t *testing.T, ctx context.Context, ad auth.Dir, serverURLs string, replicas int) *testController {
	t.Helper()
	return startController(t, ctx, ad, serverURLs, replicas, "c1", nil)
}

// startController is runController for the controller named id, which
// starts when start is closed (nil: at once), so that several controllers
// can be started at the same instant. Its log is shown, under its id, when
// the test fails.
func startController(t *testing.T, ctx context.Context, ad auth.Dir, serverURLs string, replicas int, id string, start <-chan struct{}) *testController {
	t.Helper()
	c := &testController{done: make(chan error, 1)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller %s log:\n%s", id, c.log.String())
		}
	})
	ctx, c.stop = context.WithCancel(ctx)
	t.Cleanup(c.stop)
	go func() {
		if start != nil {
			select {
			case <-start:
			case <-ctx.Done():
				c.done <- ctx.Err()
				return
			}
		}
		c.done <- controller.Run(ctx, &controller.RunOptions{
			NATSURL: serverURLs, Creds: filepath.Join(ad.Path, auth.CredsFile(auth.UserController)), ID: id,
			StatsInterval: 200 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond, AgentExpiry: time.Minute,
			ReconcileInterval: 200 * time.Millisecond, LeaseTTL: 3 * time.Second, Replicas: replicas,
		}, slog.New(slog.NewTextHandler(&c.log, nil)))
	}()
	return c
}

// halt stops the controller and returns how it ended.
func (c *testController) halt() error {
	c.stop()
	return <-c.done
}

// startCluster starts the three nodes of cluster-*.conf on loopback, routed
// to each other, without waiting for a JetStream meta leader.
func startCluster(t *testing.T) (auth.Dir, []*node) {
	t.Helper()
	dir, ad := stage(t)
	opts := make([]*server.Options, 3)
	var routes []*url.URL
	for i, n := range []string{"a", "b", "c"} {
		opts[i] = load(t, dir, "cluster-"+n+".conf")
		routes = append(routes, routeURL(opts[i]))
	}
	var nodes []*node
	for _, o := range opts {
		o.Routes = routes
		nodes = append(nodes, startNode(t, o))
	}
	return ad, nodes
}

// plainLeaf starts a plain nats-server whose only leaf remote is the hub's
// leafnode port with creds, without waiting for the leaf connection.
func plainLeaf(t *testing.T, hub *node, creds string) *server.Server {
	t.Helper()
	opts := &server.Options{ServerName: "plain-" + filepath.Base(creds), Host: "127.0.0.1", Port: natstest.FreePort(t),
		NoSigs: true, NoLog: !testing.Verbose()}
	opts.LeafNode.Remotes = []*server.RemoteLeafOpts{{
		URLs:        []*url.URL{{Scheme: "nats-leaf", Host: fmt.Sprintf("127.0.0.1:%d", hub.opts.LeafNode.Port)}},
		Credentials: creds,
	}}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		ns.ConfigureLogger()
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("plain server not ready")
	}
	return ns
}
