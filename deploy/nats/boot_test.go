package deploy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// Log lines of "controller run" that the test below waits for.
const (
	logReady   = "inventory recovered from the stream"
	logLeading = "leading: this controller now drives the rollout"
)

// TestClusterControllersBootTogether starts the three nodes of
// cluster-*.conf and, without waiting for the cluster to elect a JetStream
// meta leader, three controllers at the same instant, each creating the
// stream and buckets with three replicas (issue 11, point 5: they all died
// after 30 s with "ensure stream FLEET_HB: context deadline exceeded"). All
// three must come up with the inventory recovered, and exactly one must
// lead: the lease names it, and only its log says it leads.
func TestClusterControllersBootTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ad, nodes := startCluster(t)
	all := urls(nodes...)

	ids := []string{"c1", "c2", "c3"}
	start := make(chan struct{})
	ctls := make(map[string]*testController, len(ids))
	for _, id := range ids {
		ctls[id] = startController(t, ctx, ad, all, 3, id, start)
	}
	began := time.Now()
	close(start)

	// Every controller recovers the (empty) inventory, which it does only
	// once the stream and buckets exist and it follows the stream.
	natstest.Eventually(t, 45*time.Second, func() error {
		var waiting []string
		for _, id := range ids {
			c := ctls[id]
			select {
			case err := <-c.done:
				t.Fatalf("controller %s stopped: %v", id, err)
			default:
			}
			if !strings.Contains(c.log.String(), logReady) {
				waiting = append(waiting, id)
			}
		}
		if len(waiting) > 0 {
			return fmt.Errorf("controllers %v not ready", waiting)
		}
		return nil
	})
	t.Logf("all three controllers ready %v after they started", time.Since(began).Round(time.Millisecond))

	// Exactly one leads: the lease in fleet_stats names it, and its log,
	// and only its log, says so.
	admin := jsFor(t, connect(t, ad, all, auth.CredsFile(auth.UserAdmin)))
	fleet, err := within(ctx, 10*time.Second, func(ctx context.Context) (*kv.Fleet, error) { return kv.Open(ctx, admin) })
	if err != nil {
		t.Fatal(err)
	}
	var holder string
	natstest.Eventually(t, 20*time.Second, func() error {
		lease, err := within(ctx, 2*time.Second, func(ctx context.Context) (kv.Entry[kv.LeaseValue], error) {
			return kv.Get[kv.LeaseValue](ctx, fleet.Stats, kv.KeyLeader)
		})
		if err != nil {
			return fmt.Errorf("read the lease: %w", err)
		}
		holder = lease.Value.Holder
		if _, ok := ctls[holder]; !ok {
			return fmt.Errorf("the lease names %q, none of %v", holder, ids)
		}
		if !strings.Contains(ctls[holder].log.String(), logLeading) {
			return fmt.Errorf("the lease names %s, whose log does not say it leads yet", holder)
		}
		return nil
	})
	leads := make(map[string]int) // controller → times it logged that it leads
	for _, id := range ids {
		if n := strings.Count(ctls[id].log.String(), logLeading); n > 0 {
			leads[id] = n
		}
	}
	if diff := cmp.Diff(map[string]int{holder: 1}, leads); diff != "" {
		t.Errorf("controllers that logged %q, and how often: only the lease holder, once (-want +got):\n%s", logLeading, diff)
	}
	for _, id := range ids {
		if err := ctls[id].halt(); err != nil {
			t.Errorf("controller %s: %v", id, err)
		}
	}
}
