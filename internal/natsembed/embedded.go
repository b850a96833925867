// Package natsembed runs a JetStream-enabled nats-server inside this process:
// the controller's one-command default and every test's bus. Only the
// controller and tests import it, so agentd and fleetctl stay small.
package natsembed

import (
	"fmt"
	"net"
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
	// ServerName names the server in logs and cluster views.
	ServerName string
	// Debug routes the server's own log to stderr.
	Debug bool
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
	opts := &server.Options{
		ServerName: o.ServerName,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true, // the controller owns signal handling
		NoLog:      !o.Debug,
	}
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
