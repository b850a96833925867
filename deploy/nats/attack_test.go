package deploy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/attacktest"
	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// TestAttackOnClusterNode replays internal/attacktest's reflections with the
// agents attached to a node of a 3-node cluster that leads neither the
// heartbeat stream nor the plan bucket: every answer reaches them over a
// route, the path on which a response could meet another node's import.
// Nothing reaches FLEET, no other agent acts, the controller keeps leading.
func TestAttackOnClusterNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ad, nodes := startCluster(t)
	all := urls(nodes...)
	ctl := runController(t, ctx, ad, all, 3)
	defer func() { _ = ctl.halt() }()
	admin := jsFor(t, connect(t, ad, all, auth.CredsFile(auth.UserAdmin)))
	var agentNode *node
	natstest.Eventually(t, 45*time.Second, func() error {
		leaders := map[string]bool{}
		for _, name := range []string{kv.StreamHB, kv.PlanStream} {
			s, err := within(ctx, 2*time.Second, func(ctx context.Context) (string, error) {
				st, err := admin.Stream(ctx, name)
				if err != nil {
					return "", err
				}
				if c := st.CachedInfo().Cluster; c != nil && c.Leader != "" {
					return c.Leader, nil
				}
				return "", fmt.Errorf("%s has no leader yet", name)
			})
			if err != nil {
				return err
			}
			leaders[s] = true
		}
		for _, n := range nodes {
			if !leaders[n.opts.ServerName] {
				agentNode = n
				return nil
			}
		}
		return fmt.Errorf("every node leads a stream: %v", leaders)
	})
	t.Logf("agents attach to %s, which leads neither %s nor %s", agentNode.opts.ServerName, kv.StreamHB, kv.PlanStream)
	rep := attacktest.Run(t, attacktest.Fleet{Dir: ad, AgentURL: agentNode.url(), AdminURLs: []string{all}, Controller: "c1"})
	t.Logf("%d hostile requests, %d answers landed in AGENTS and went no further; %d forbidden requests refused",
		rep.Attacks, rep.Answered, rep.Forbidden)
}

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
	dir, ad, hub := startHub(t)
	ctl := runController(t, ctx, ad, hub.url(), 1)
	defer func() { _ = ctl.halt() }()
	waitFleet(t, ctx, ad, hub)
	edge := addEdgeSite(t, ctx, dir, ad, hub, "berlin")
	rep := attacktest.Run(t, attacktest.Fleet{Dir: ad, AgentURL: edge.url(), AdminURLs: []string{hub.url(), edge.url()}, Controller: "c1"})
	t.Logf("%d hostile requests, %d answers landed in AGENTS and went no further; %d forbidden requests refused",
		rep.Attacks, rep.Answered, rep.Forbidden)
}
