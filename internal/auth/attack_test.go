package auth_test

import (
	"context"
	"testing"

	"github.com/fleetwave/fleetwave/internal/attacktest"
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
	done, _ := e.runController(ctx)
	defer func() {
		cancel()
		<-done
	}()
	rep := attacktest.Run(t, attacktest.Fleet{Dir: e.dir, AgentURL: e.srv.URL(), AdminURLs: []string{e.srv.URL()}, Controller: "c1"})
	t.Logf("%d hostile requests, %d answers landed in AGENTS and went no further; %d forbidden requests refused",
		rep.Attacks, rep.Answered, rep.Forbidden)
}
