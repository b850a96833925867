package auth_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/attacktest"
	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
)

// TestAgentCannotSteerTheFleet replays, with one agent's minted credentials
// against an operator-mode server and a leading controller, every
// reflection that once let a host steer the fleet (internal/attacktest):
// direct gets and heartbeat publishes answered onto another group's plan
// subject, the leader lease, the config, the spec, another agent's heartbeat
// subject, an events subject and another agent's inbox. Nothing reaches
// FLEET, the prod agents act on nothing, the controller keeps leading.
// deploy/nats runs the same attack on a cluster node and an edge leaf node.
//
// Checked against the layout before the AGENTS account (agents were users
// of FLEET): the same attack fails there at once, FLEET sees the direct-get
// answer stored as $KV.fleet_config.config (see the commit that adds this
// test for the output).
func TestAgentCannotSteerTheFleet(t *testing.T) {
	e := newFleetEnvBare(t)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var ctlLog natstest.Buffer
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(ctx, &controller.RunOptions{
			NATSURL: e.srv.URL(), Creds: filepath.Join(e.dir.Path, auth.CredsFile(auth.UserController)), ID: "c1",
			StatsInterval: 100 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, AgentExpiry: time.Minute,
			ReconcileInterval: 100 * time.Millisecond, LeaseTTL: 2 * time.Second, Replicas: 1,
		}, slog.New(slog.NewTextHandler(&ctlLog, nil)))
	}()
	defer func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("controller log:\n%s", ctlLog.String())
		}
	}()
	rep := attacktest.Run(t, attacktest.Fleet{Dir: e.dir, AgentURL: e.srv.URL(), AdminURLs: []string{e.srv.URL()}, Controller: "c1"})
	t.Logf("%d hostile requests, %d answers landed in AGENTS and went no further; %d forbidden requests refused",
		rep.Attacks, rep.Answered, rep.Forbidden)
}
