package deploy_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/attacktest"
)

// TestAttackThroughEdgeLeaf replays internal/attacktest's reflections with
// an agent attached to an edge site's leaf node (leaf-edge.conf): its
// answers come from the site's plan mirror and, for heartbeats, from the
// hub over the leaf connection. Nothing reaches the FLEET account of either
// server, no other agent acts, the hub's controller keeps leading.
func TestAttackThroughEdgeLeaf(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a hub and a leaf node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ad, hub, edge := startHubAndEdge(t)
	ctl := runController(t, ctx, ad, hub.url(), 1)
	defer func() { _ = ctl.halt() }()
	edgeInit(t, ctx, ad, edge)
	rep := attacktest.Run(t, attacktest.Fleet{Dir: ad, AgentURL: edge.url(), AdminURLs: []string{hub.url(), edge.url()}, Controller: "c1"})
	t.Logf("%d hostile requests, %d answers landed in AGENTS and went no further; %d forbidden requests refused",
		rep.Attacks, rep.Answered, rep.Forbidden)
}
