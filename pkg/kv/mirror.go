package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// ValidateEdgeSite checks the name of an edge site. It names the site's
// consumer on the hub's plan stream, its deliver subject and its leaf user,
// so it is one subject token: 1-40 of a-z, 0-9, '-' and '_', starting and
// ending with a letter or digit (rollout.ValidateSite without '.' and
// capitals).
func ValidateEdgeSite(site string) error {
	bad := rollout.ValidateSite(site) != nil
	for i := 0; i < len(site) && !bad; i++ {
		c := site[i]
		bad = c == '.' || 'A' <= c && c <= 'Z'
	}
	if bad {
		// One rule, said whole: a site that is a valid agent site but not
		// one subject token would otherwise be told a rule it follows.
		shown := site
		if len(shown) > rollout.MaxSiteLen+10 {
			shown = shown[:rollout.MaxSiteLen+10] + "…"
		}
		return fmt.Errorf("%w %q: an edge site name is one subject token of at most %d bytes: use a-z, 0-9, '-' and '_', starting and ending with a letter or digit", rollout.ErrBadSite, shown, rollout.MaxSiteLen)
	}
	return nil
}

// Settings of an edge site's consumer that nats-server requires of a
// consumer a mirror uses (durable sourcing, nats-server 2.14+): acks by
// flow control, a 1 s heartbeat, no ack wait.
const (
	edgeHeartbeat = time.Second
	// edgeMaxAckPending bounds what is in flight to a site before a flow
	// control round trip acks it; plan messages are small.
	edgeMaxAckPending = 1024
	// edgeResetWait bounds the wait for the hub's answer to a reset: the
	// consumer answers at once; a consumer that does not exist answers
	// never (nothing at the hub serves its subject).
	edgeResetWait = 5 * time.Second
)

// EnsureEdgeConsumer creates (or brings up to date), on the plan stream of
// the JetStream domain js talks to (the hub), the durable consumer that
// site's plan mirror reads through (EnsurePlanMirror): it delivers every
// plan message to EdgeDeliverSubject(site), from the start, and learns what
// the mirror has stored from its flow control answers. The hub's admin
// creates it; the site's leaf credentials may only reset it and answer its
// flow control, never create one. Idempotent: an existing consumer keeps
// its position.
func EnsureEdgeConsumer(ctx context.Context, js jetstream.JetStream, site string) (*jetstream.ConsumerInfo, error) {
	if err := ValidateEdgeSite(site); err != nil {
		return nil, err
	}
	c, err := js.CreateOrUpdatePushConsumer(ctx, PlanStream, jetstream.ConsumerConfig{
		Durable:        EdgeConsumer(site),
		Description:    "fleetwave: the plan mirror of edge site " + site,
		DeliverSubject: EdgeDeliverSubject(site),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckFlowControlPolicy,
		FlowControl:    true,
		IdleHeartbeat:  edgeHeartbeat,
		MaxAckPending:  edgeMaxAckPending,
	})
	if err != nil {
		return nil, fmt.Errorf("edge site %s: consumer %s on %s: %w", site, EdgeConsumer(site), PlanStream, err)
	}
	return c.CachedInfo(), nil
}

// EdgeInboxPrefix is the reply prefix of the requests a site's fleetctl
// sends to the hub over the leaf connection (EnsurePlanMirror's reset): a
// site's leaf credentials may receive replies there and on no other inbox.
func EdgeInboxPrefix(site string) string { return "_INBOX_edge_" + site }

// EdgeResetSubject is the request that resets site's consumer, as sent
// from the site to the hub's JetStream domain hubDomain.
func EdgeResetSubject(hubDomain, site string) string {
	return "$JS." + hubDomain + ".API.CONSUMER.RESET." + PlanStream + "." + EdgeConsumer(site)
}

// EnsurePlanMirror creates (or brings up to date), in the JetStream domain js
// talks to, a read-only mirror of the plan bucket of domain hubDomain, under
// the same name: agents attached to an edge site's leaf node read it with the
// very calls (and the very grants) they use at the hub, and keep reading it
// while the site is cut off from the hub. The mirror republishes what it
// receives on fleet.plan.<key> like the hub's bucket does, so the site's
// agents follow changes with a core subscription; a mirror keeps the hub's
// sequence numbers, so revisions mean the same on both sides.
//
// The mirror reads through site's durable consumer at the hub
// (EnsureEdgeConsumer, made by the hub's admin): it only resets that
// consumer and answers its flow control, so the site's leaf credentials
// need no consumer create. A new mirror starts empty, so before creating
// one EnsurePlanMirror resets the consumer to the start of the stream (a
// consumer remembers what an earlier mirror stored). An existing mirror of
// another shape (an older fleetwave's, which created its own consumer at
// the hub; another site's) is deleted and made again: it is only a copy.
// A plan bucket that is not a mirror is never touched.
//
// Only the plan is mirrored: heartbeats cross the leaf connection to the
// hub's stream, and an agent cannot read fleet_config or fleet_stats anyway.
func EnsurePlanMirror(ctx context.Context, js jetstream.JetStream, hubDomain, site string, opts Options) (jetstream.KeyValue, error) {
	if hubDomain == "" {
		return nil, fmt.Errorf("plan mirror: the hub's JetStream domain is required")
	}
	if err := ValidateEdgeSite(site); err != nil {
		return nil, fmt.Errorf("plan mirror: %w", err)
	}
	o := opts.withDefaults()
	want := &jetstream.StreamSource{Name: BucketPlan, Domain: hubDomain, Consumer: &jetstream.StreamConsumerSource{
		Name: EdgeConsumer(site), DeliverSubject: EdgeDeliverSubject(site),
	}}
	cfg := jetstream.KeyValueConfig{
		Bucket:      BucketPlan,
		Description: "fleetwave plan, mirrored from JetStream domain " + hubDomain + " for edge site " + site,
		History:     planHistory,
		Storage:     o.storage(),
		Replicas:    o.Replicas,
		Mirror:      want,
		RePublish:   planRePublish(),
	}
	st, err := js.Stream(ctx, PlanStream)
	replace := err == nil
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return nil, fmt.Errorf("plan mirror: %w", err)
	case st.CachedInfo().Config.Mirror == nil:
		return nil, fmt.Errorf("plan mirror: %s here is the plan bucket itself, not a mirror: run 'fleetctl edge init' against the site's leaf node, never the hub", PlanStream)
	case sameMirror(st.CachedInfo().Config.Mirror, hubDomain, site):
		b, err := js.CreateOrUpdateKeyValue(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("plan mirror of domain %s: %w", hubDomain, err)
		}
		return b, nil
	}
	// The reset first: a site whose consumer does not answer keeps the
	// mirror it has.
	if err := resetEdgeConsumer(ctx, js.Conn(), hubDomain, site); err != nil {
		return nil, err
	}
	if replace {
		// A copy made another way: made again.
		if err := js.DeleteStream(ctx, PlanStream); err != nil {
			return nil, fmt.Errorf("plan mirror: replace the old mirror: %w", err)
		}
	}
	b, err := js.CreateKeyValue(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("plan mirror of domain %s: %w", hubDomain, err)
	}
	return b, nil
}

// sameMirror: m reads the plan of domain hubDomain through site's consumer.
func sameMirror(m *jetstream.StreamSource, hubDomain, site string) bool {
	return m.Name == PlanStream && m.External != nil && m.External.APIPrefix == "$JS."+hubDomain+".API" &&
		m.Consumer != nil && m.Consumer.Name == EdgeConsumer(site) && m.Consumer.DeliverSubject == EdgeDeliverSubject(site)
}

// resetEdgeConsumer moves site's consumer at the hub back to the start of
// the plan stream, so that a new, empty mirror receives every key.
func resetEdgeConsumer(ctx context.Context, nc *nats.Conn, hubDomain, site string) error {
	reply := EdgeInboxPrefix(site) + "." + strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix)
	sub, err := nc.SubscribeSync(reply)
	if err != nil {
		return fmt.Errorf("plan mirror: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(EdgeResetSubject(hubDomain, site), reply, []byte(`{"seq":1}`)); err != nil {
		return fmt.Errorf("plan mirror: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, edgeResetWait)
	defer cancel()
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return fmt.Errorf("plan mirror: the hub (domain %s) did not answer for edge site %s's consumer %s: %w "+
			"(did 'fleetctl edge add --site %s' run at the hub, and is this leaf node connected to the hub with the creds it minted?)",
			hubDomain, site, EdgeConsumer(site), err, site)
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("plan mirror: unreadable answer from the hub: %q", m.Data)
	}
	if resp.Error != nil {
		return fmt.Errorf("plan mirror: reset of %s at the hub (domain %s): %s", EdgeConsumer(site), hubDomain, resp.Error.Description)
	}
	return nil
}
