package kv_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

func TestValidateEdgeSite(t *testing.T) {
	for _, c := range []struct {
		site string
		ok   bool
	}{
		{"berlin", true}, {"edge-berlin", true}, {"b_2", true}, {"0", true},
		{"", false}, {"Berlin", false}, {"ber.lin", false}, {"ber lin", false}, {"-berlin", false}, {"berlin_", false},
		{"ber*", false}, {"ber>", false}, {strings.Repeat("s", rollout.MaxSiteLen+1), false}, {"berlin\u202e", false},
	} {
		err := kv.ValidateEdgeSite(c.site)
		if (err == nil) != c.ok {
			t.Errorf("ValidateEdgeSite(%q) = %v, want ok %v", c.site, err, c.ok)
		}
		if err != nil && !errors.Is(err, rollout.ErrBadSite) {
			t.Errorf("ValidateEdgeSite(%q) = %v, does not wrap ErrBadSite", c.site, err)
		}
	}
}

// hubAndLeaf starts a hub (JetStream domain "hub") with a leafnode port and
// a leaf node (domain "edge") attached to it, without auth: the mechanics
// of the plan mirror, apart from the grants (deploy/nats tests those).
func hubAndLeaf(t *testing.T) (hub, leaf *natstest.Server) {
	t.Helper()
	port := natstest.FreePort(t)
	dir := t.TempDir()
	conf := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hub = natstest.StartConfig(t, conf("hub.conf", fmt.Sprintf("jetstream { domain: hub }\nleafnodes { listen: \"127.0.0.1:%d\" }\n", port)))
	leaf = natstest.StartConfig(t, conf("leaf.conf", fmt.Sprintf(
		"jetstream { domain: edge }\nleafnodes { remotes: [ { urls: [\"nats-leaf://127.0.0.1:%d\"], deny_imports: [\"fleet.plan.>\"], deny_exports: [\"fleet.plan.>\"] } ] }\n", port)))
	return hub, leaf
}

// TestPlanMirrorThroughSiteConsumer: a site's mirror reads the hub's plan
// through the site's consumer, which the hub's admin made; every key
// arrives, also in a mirror made again after the consumer had delivered
// (the new, empty mirror starts from the start, not from where the old one
// was); an older mirror (its own consumer at the hub) is replaced, but not
// when the site's consumer does not answer; the
// hub's plan bucket itself is never touched; a site without a consumer at
// the hub gets an error that names the command.
func TestPlanMirrorThroughSiteConsumer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a hub and a leaf node")
	}
	hub, leaf := hubAndLeaf(t)
	hubJS, leafJS := hub.JetStream("hub"), leaf.JetStream("leaf")
	f, err := kv.Ensure(ctxT(t), hubJS, kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	if _, err := kv.Save(ctxT(t), f.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}
	// More writes than the spec: the spec stays at revision 1 below the
	// mirror's resume point.
	for i := range 5 {
		if _, err := f.Plan.Put(ctxT(t), kv.GroupKey("blue"), fmt.Appendf(nil, `{"v":1,"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}

	// No consumer at the hub yet: the site is told what to run.
	if _, err := kv.EnsurePlanMirror(ctxT(t), leafJS, "hub", "berlin", kv.Options{}); err == nil || !strings.Contains(err.Error(), "fleetctl edge add --site berlin") {
		t.Fatalf("mirror without a consumer at the hub: %v", err)
	}
	if _, err := leafJS.Stream(ctxT(t), kv.PlanStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("a mirror was made without a consumer at the hub: %v", err)
	}
	ci, err := kv.EnsureEdgeConsumer(ctxT(t), hubJS, "berlin")
	if err != nil {
		t.Fatal(err)
	}
	if ci.Config.DeliverSubject != "fleet.edge.berlin" || ci.Config.AckPolicy != jetstream.AckFlowControlPolicy {
		t.Errorf("site consumer: %+v", ci.Config)
	}
	waitMirror := func(b jetstream.KeyValue) {
		t.Helper()
		natstest.Eventually(t, 20*time.Second, func() error {
			for _, key := range []string{kv.KeySpec, kv.GroupKey("blue")} {
				if _, err := b.Get(ctxT(t), key); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
			}
			return nil
		})
	}
	// The leaf may not route the hub's JetStream API the instant the
	// consumer is made (no responders: seen under a loaded full run).
	var b jetstream.KeyValue
	natstest.Eventually(t, 20*time.Second, func() error {
		var err error
		b, err = kv.EnsurePlanMirror(ctxT(t), leafJS, "hub", "berlin", kv.Options{})
		return err
	})
	waitMirror(b)
	// The consumer learns what the mirror stored (flow control acks).
	natstest.Eventually(t, 10*time.Second, func() error {
		c, err := hubJS.PushConsumer(ctxT(t), kv.PlanStream, kv.EdgeConsumer("berlin"))
		if err != nil {
			return err
		}
		if got := c.CachedInfo().AckFloor.Stream; got < 6 {
			return fmt.Errorf("consumer's ack floor %d, want 6", got)
		}
		return nil
	})
	// Again: idempotent, the mirror stays.
	if _, err := kv.EnsurePlanMirror(ctxT(t), leafJS, "hub", "berlin", kv.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.EnsureEdgeConsumer(ctxT(t), hubJS, "berlin"); err != nil {
		t.Fatal(err)
	}

	// The mirror lost (a wiped site): made again, it holds every key.
	if err := leafJS.DeleteStream(ctxT(t), kv.PlanStream); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 20*time.Second, func() error { // the store race above
		var err error
		b, err = kv.EnsurePlanMirror(ctxT(t), leafJS, "hub", "berlin", kv.Options{})
		return err
	})
	waitMirror(b)

	// An older fleetwave's mirror (its own consumer at the hub): replaced.
	if err := leafJS.DeleteStream(ctxT(t), kv.PlanStream); err != nil {
		t.Fatal(err)
	}
	// A file stream made again at once after its delete may find its
	// store still being removed ("error creating store for stream", seen
	// under a loaded full run): the server's, not what is tested.
	natstest.Eventually(t, 20*time.Second, func() error {
		_, err := leafJS.CreateKeyValue(ctxT(t), jetstream.KeyValueConfig{Bucket: kv.BucketPlan,
			Mirror: &jetstream.StreamSource{Name: kv.BucketPlan, Domain: "hub"}})
		return err
	})
	// Not for a site whose consumer does not answer: the old copy stays.
	if _, err := kv.EnsurePlanMirror(ctxT(t), leafJS, "hub", "paris", kv.Options{}); err == nil {
		t.Fatal("mirror for a site without a consumer at the hub")
	}
	if st, err := leafJS.Stream(ctxT(t), kv.PlanStream); err != nil || st.CachedInfo().Config.Mirror.Consumer != nil {
		t.Fatalf("the old mirror after a failed edge init: %v", err)
	}
	natstest.Eventually(t, 20*time.Second, func() error { // the store race above
		var err error
		b, err = kv.EnsurePlanMirror(ctxT(t), leafJS, "hub", "berlin", kv.Options{})
		return err
	})
	waitMirror(b)
	st, err := leafJS.Stream(ctxT(t), kv.PlanStream)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.CachedInfo().Config.Mirror; m == nil || m.Consumer == nil || m.Consumer.Name != kv.EdgeConsumer("berlin") {
		t.Errorf("mirror after edge init: %+v", m)
	}

	// The hub's own bucket is never made a mirror.
	if _, err := kv.EnsurePlanMirror(ctxT(t), hubJS, "hub", "berlin", kv.Options{}); err == nil || !strings.Contains(err.Error(), "not a mirror") {
		t.Errorf("edge init against the hub: %v", err)
	}
	if e, err := f.Plan.Get(ctxT(t), kv.KeySpec); err != nil || e.Revision() != 1 {
		t.Errorf("the hub's spec after edge init against the hub: %v, %v", e, err)
	}
	if _, err := kv.EnsureEdgeConsumer(ctxT(t), hubJS, "ber.lin"); err == nil {
		t.Error("a consumer for a site name that is not a subject token")
	}
}
