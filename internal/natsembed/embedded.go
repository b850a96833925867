// Package natsembed runs a JetStream-enabled nats-server inside this process:
// the controller's one-command default and every test's bus. Only the
// controller and tests import it, so agentd and fleetctl stay small.
package natsembed

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configure the in-process JetStream server.
type Options struct {
	// Listen is host:port for clients; port -1 picks a free one.
	Listen string
	// StoreDir is where JetStream keeps its data.
	StoreDir string
	// ServerName names the server in logs and cluster views. With a
	// ConfigFile that names the server, empty keeps the file's name.
	ServerName string
	// ConfigFile, when set, is a nats-server configuration file the server
	// starts from: operator mode (what "fleetctl auth init" writes as
	// resolver.conf), TLS, a JetStream domain, limits. Listen and StoreDir
	// still apply and replace the file's listen and store_dir; JetStream
	// is always on (the controller needs it), and so is no_sublist_cache
	// (unless SublistCache).
	// An operator-mode file without a resolver gets a full directory
	// resolver in StoreDir/jwt, so pushed account updates (revocations)
	// persist.
	ConfigFile string
	// Debug routes the server's own log to stderr.
	Debug bool
	// SublistCache turns nats-server's subscription match cache back on,
	// for benchmarks that compare; fleetwave runs without it (see Start).
	SublistCache bool
}

// Start starts a JetStream-enabled nats-server in this process and
// waits until it accepts clients.
func Start(o Options) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: want host:port, e.g. 127.0.0.1:4222: %w", o.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < -1 || port > 65535 {
		return nil, fmt.Errorf("listen address %q: port must be 0-65535 (or -1 for any free port)", o.Listen)
	}
	if o.StoreDir == "" {
		return nil, fmt.Errorf("embedded server: a store directory is required (--store-dir)")
	}
	opts := &server.Options{}
	if o.ConfigFile != "" {
		if opts, err = server.ProcessConfigFile(o.ConfigFile); err != nil {
			return nil, fmt.Errorf("embedded server: config %s: %w", o.ConfigFile, err)
		}
	}
	if noResolver(opts) {
		res, err := server.NewDirAccResolver(filepath.Join(o.StoreDir, "jwt"), 0, 2*time.Minute, server.NoDelete)
		if err != nil {
			return nil, fmt.Errorf("embedded server: account resolver: %w", err)
		}
		opts.AccountResolver = res
	}
	if o.ServerName != "" || opts.ServerName == "" {
		opts.ServerName = o.ServerName
	}
	opts.Host, opts.Port = host, port
	opts.JetStream, opts.StoreDir = true, o.StoreDir
	opts.NoSigs = true // the controller owns signal handling
	// Agents subscribe the same few plan subjects by the thousand; with
	// the sublist cache a mass (re)connect is O(n^2) in their number, and
	// the cache cannot help heartbeats (one subject per agent). As in
	// every deploy/nats config; docs/PERFORMANCE.md section 2b.
	opts.NoSublistCache = !o.SublistCache
	opts.NoLog = !o.Debug
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	if o.Debug {
		ns.ConfigureLogger()
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded server: not accepting clients on %s after 10s (port in use?)", o.Listen)
	}
	return ns, nil
}

// noResolver reports an operator-mode config without a resolver of its own.
// (nats-server then derives a URL resolver from the operator JWT's account
// server URL, a bogus one when the JWT has none.)
func noResolver(opts *server.Options) bool {
	if len(opts.TrustedOperators) == 0 {
		return false
	}
	_, isURL := opts.AccountResolver.(*server.URLAccResolver)
	return opts.AccountResolver == nil || isURL && opts.TrustedOperators[0].AccountServerURL == ""
}
