package kv

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// EnsurePlanMirror creates (or brings up to date), in the JetStream domain js
// talks to, a read-only mirror of the plan bucket of domain hubDomain, under
// the same name: agents attached to an edge site's leaf node read it with the
// very calls (and the very grants) they use at the hub, and keep reading it
// while the site is cut off from the hub. The mirror republishes what it
// receives on fleet.plan.<key> like the hub's bucket does, so the site's
// agents follow changes with a core subscription; a mirror keeps the hub's
// sequence numbers, so revisions mean the same on both sides.
//
// Only the plan is mirrored: heartbeats cross the leaf connection to the
// hub's stream, and an agent cannot read fleet_config or fleet_stats anyway.
func EnsurePlanMirror(ctx context.Context, js jetstream.JetStream, hubDomain string, opts Options) (jetstream.KeyValue, error) {
	if hubDomain == "" {
		return nil, fmt.Errorf("plan mirror: the hub's JetStream domain is required")
	}
	o := opts.withDefaults()
	b, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      BucketPlan,
		Description: "fleetwave plan, mirrored from JetStream domain " + hubDomain,
		History:     planHistory,
		Storage:     o.storage(),
		Replicas:    o.Replicas,
		Mirror:      &jetstream.StreamSource{Name: BucketPlan, Domain: hubDomain},
		RePublish:   planRePublish(),
	})
	if err != nil {
		return nil, fmt.Errorf("ensure plan mirror of domain %s: %w", hubDomain, err)
	}
	return b, nil
}
