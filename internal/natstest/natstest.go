// Package natstest starts real, in-process JetStream servers for tests: a
// random loopback port, a temporary store, shut down by t.Cleanup.
package natstest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/natsembed"
	"github.com/fleetwave/fleetwave/internal/natsutil"
)

// Server is a running test server. Restart brings it back on the same port and
// store, so clients can prove they ride out an outage.
type Server struct {
	t          testing.TB
	ns         *server.Server
	port       int
	storeDir   string
	configFile string
}

// Start runs a JetStream server for the duration of the test.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartConfig(t, "")
}

// StartConfig runs a JetStream server from a nats-server config file (for
// example the resolver.conf "fleetctl auth init" writes, for operator mode)
// on a random port with a temporary store. An empty configFile is Start.
func StartConfig(t testing.TB, configFile string) *Server {
	t.Helper()
	s := &Server{t: t, storeDir: t.TempDir(), configFile: configFile}
	s.start("127.0.0.1:-1")
	t.Cleanup(s.Shutdown)
	return s
}

func (s *Server) start(listen string) {
	s.t.Helper()
	ns, err := natsembed.Start(natsembed.Options{Listen: listen, StoreDir: s.storeDir, ServerName: "test", ConfigFile: s.configFile})
	if err != nil {
		s.t.Fatalf("start nats-server: %v", err)
	}
	s.ns = ns
	s.port = ns.Addr().(*net.TCPAddr).Port
}

// URL is the client URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// Shutdown stops the server (idempotent).
func (s *Server) Shutdown() {
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		s.ns = nil
	}
}

// Restart starts the server again on the same port with the same store.
func (s *Server) Restart() {
	s.t.Helper()
	s.Shutdown()
	s.start(fmt.Sprintf("127.0.0.1:%d", s.port))
}

// Conn connects a client that is closed at the end of the test.
func (s *Server) Conn(name string) *nats.Conn {
	s.t.Helper()
	nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: s.URL(), Name: name, Log: Logger(s.t)})
	if err != nil {
		s.t.Fatalf("connect: %v", err)
	}
	s.t.Cleanup(nc.Close)
	return nc
}

// JetStream connects and returns a JetStream context.
func (s *Server) JetStream(name string) jetstream.JetStream {
	s.t.Helper()
	js, err := jetstream.New(s.Conn(name))
	if err != nil {
		s.t.Fatalf("jetstream: %v", err)
	}
	return js
}

// Logger returns a logger that writes to the test log when -v is given and
// is silent otherwise, and never writes after the test ended.
func Logger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	w := &tWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// tWriter forwards to t.Log until the test's cleanup starts; callbacks of
// closing connections may still log after that, and t.Log would panic.
type tWriter struct {
	t    testing.TB
	done atomic.Bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(string(p))
	}
	return len(p), nil
}

// Eventually polls cond every 10ms until it returns nil or timeout passes,
// then fails the test with cond's last error.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Within(timeout, cond); err != nil {
		t.Fatal(err)
	}
}

// Consistently checks cond every 20ms for d and fails the test at the
// first error: an invariant that must hold throughout (an attack that must
// change nothing), not an outcome to wait for.
func Consistently(t testing.TB, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if err := cond(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Millisecond) // polling an invariant, not waiting for an outcome
	}
}

// Within is Eventually that returns the failure instead of failing the
// test, for a caller that reports it with more context.
func Within(timeout time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("condition not met within %v: %w", timeout, err)
		case <-tick.C:
		}
	}
}

// Buffer is a bytes.Buffer safe for a process writing (logs, command
// output) in one goroutine while the test reads in another.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Cluster is a JetStream cluster of in-process servers on loopback, no
// auth, each with its own temporary store, whose nodes start only when
// told: tests of what a forming cluster does to its first clients.
type Cluster struct {
	opts  []*server.Options
	nodes []*server.Server
}

// NewCluster prepares n nodes routed to each other (none started) and shuts
// down whatever was started when the test ends.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{opts: make([]*server.Options, n), nodes: make([]*server.Server, n)}
	var routes []*url.URL
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: FreePort(t),
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		}
		o.Cluster.Name, o.Cluster.Host, o.Cluster.Port = "test", "127.0.0.1", FreePort(t)
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", o.Cluster.Port)})
		c.opts[i] = o
	}
	for _, o := range c.opts {
		o.Routes = routes
	}
	t.Cleanup(func() {
		for _, ns := range c.nodes {
			if ns != nil {
				ns.Shutdown()
				ns.WaitForShutdown()
			}
		}
	})
	return c
}

// Start starts node i and waits until it accepts clients.
func (c *Cluster) Start(t testing.TB, i int) {
	t.Helper()
	ns, err := server.NewServer(c.opts[i])
	if err != nil {
		t.Fatal(err)
	}
	c.nodes[i] = ns // shut down by the cleanup, ready or not
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		t.Fatalf("node %d not ready", i)
	}
}

// URL is node i's client URL.
func (c *Cluster) URL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.opts[i].Port) }

// FreePort is a loopback port nobody listens on right now, for a server
// that must know its port before it starts (cluster routes). It is drawn
// below the kernel's ephemeral range (Linux: 32768-60999): a port the
// kernel hands out (":0") is the kind it also gives to outgoing
// connections, and a parallel test's client could take it before the
// server binds it. A port is handed out once per test process: two servers
// of one test must not be given the same one before either binds it.
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		port := 20000 + rand.IntN(12000)
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		portsGiven[port] = true
		return port
	}
	t.Fatal("no free loopback port in 20000-31999")
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ClientNames are the names of the clients connected now (nats.Name), one
// per connection.
func (s *Server) ClientNames() []string {
	cz, err := s.ns.Connz(&server.ConnzOptions{Limit: 10000})
	if err != nil {
		s.t.Fatalf("connz: %v", err)
	}
	names := make([]string, 0, len(cz.Conns))
	for _, c := range cz.Conns {
		names = append(names, c.Name)
	}
	return names
}
