package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/attacktest"
	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// rogueMark is in every payload the rogue sends: if it is ever seen in
// FLEET, something got through.
const rogueMark = "rogue-leaf-6.6.6"

// TestRogueLeaf is root on one edge box. The attacker holds site paris's
// leaf creds, as "fleetctl edge add --site paris" minted them, and attaches
// a plain nats-server of its own, with no auth of its own, to the hub's
// leafnode port; that server's unauthenticated local client tries what the
// old leaf creds (a user of FLEET) allowed: ">" (every heartbeat, the plan,
// the events), the hub's JetStream API through $JS.hub.API (info, stream
// list, stream create, a consumer on the plan delivering onto the config
// key), KV puts of the spec and the config, directly and through the API;
// and what one site could try on another: berlin's heartbeats and plan
// deliveries, a reset of berlin's consumer.
//
// A second rogue attaches with a user of the EDGE account that has no
// permissions at all: the account on its own (the first wall) refuses
// everything of FLEET; the site's own grants (the second wall, enforced by
// the hub) keep the site from other sites' traffic.
//
// Meanwhile a hub-side agent and an agent of site berlin (a leaf node from
// leaf-edge.conf with berlin's creds) heartbeat, the admin changes the
// plan and the controller moves a group: an observer in FLEET sees all of
// it, the rogues see none of it (paris sees its own plan deliveries and
// reply subjects only). At the end the spec's and the config's revisions,
// the hub's streams and their consumers, and berlin's consumer are as
// before, and nothing of the rogues' reached FLEET.
func TestRogueLeaf(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a hub, an edge site's leaf node and two rogue leaf nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dir, ad, hub := startHub(t)
	ctl := runController(t, ctx, ad, hub.url(), 1)
	defer func() { _ = ctl.halt() }()
	fleet := waitFleet(t, ctx, ad, hub)
	admin := fleet.JS

	// Everything published in FLEET at the hub.
	observer := attacktest.Record(t, connect(t, ad, hub.url(), auth.CredsFile(auth.UserAdmin)))

	// Site berlin, legitimately, and site paris, whose box is the
	// attacker's.
	berlin := addEdgeSite(t, ctx, dir, ad, hub, "berlin")
	parisCreds := edgeAdd(t, ctx, ad, hub, "paris")
	rogues := map[string]*nats.Conn{
		"paris":    rogueLeaf(t, hub, parisCreds),
		"edgeonly": rogueLeaf(t, hub, unscopedEdgeCreds(t, ad)),
	}
	natstest.Eventually(t, 20*time.Second, func() error {
		if n := hub.ns.NumLeafNodes(); n != 3 {
			return fmt.Errorf("%d leaf connections at the hub, want 3 (berlin and two rogues)", n)
		}
		return nil
	})
	// ">" and, for paris, its own plan deliveries by name (a wildcard
	// subscription from a leaf does not pull a stream import's messages
	// into EDGE; the site's mirror names its deliver subject).
	seen := map[string]*attacktest.Recorder{}
	for name, nc := range rogues {
		seen[name] = attacktest.Record(t, nc)
	}
	parisPlan := attacktest.Record(t, rogues["paris"], kv.EdgeDeliverSubject("paris"))

	// Traffic the rogues must not see: a hub-side agent's and a berlin
	// agent's heartbeats, all along; a plan and a config; the controller's
	// events as it moves group blue.
	hubAgent, berlinAgent := rollout.AgentID("0b000000-0000-4000-8000-0000000000b1"), rollout.AgentID("0b000000-0000-4000-8000-0000000000b2")
	var beats sync.WaitGroup
	defer beats.Wait()
	beatCtx, stopBeats := context.WithCancel(ctx)
	defer stopBeats()
	for _, a := range []struct {
		id  rollout.AgentID
		url string
	}{{hubAgent, hub.url()}, {berlinAgent, berlin.url()}} {
		_, creds, err := ad.IssueAgent(a.id, "blue", "")
		if err != nil {
			t.Fatal(err)
		}
		js := jsFor(t, connect(t, ad, a.url, creds, nats.CustomInboxPrefix(kv.AgentInboxPrefix(string(a.id)))))
		data, err := heartbeat.Encode(&heartbeat.Heartbeat{V: heartbeat.SchemaVersion, AgentID: a.id, Group: "blue",
			ActiveVersion: "1.0.0", UpdaterVersion: "0.1.0", At: time.Now().UTC(), Seq: 1})
		if err != nil {
			t.Fatal(err)
		}
		beats.Add(1)
		go func() {
			defer beats.Done()
			for beatCtx.Err() == nil {
				_, _ = within(beatCtx, 2*time.Second, func(ctx context.Context) (*jetstream.PubAck, error) {
					return js.Publish(ctx, heartbeat.SubjectFor("blue", a.id), data)
				})
				select {
				case <-beatCtx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	cfg := rollout.DefaultConfig()
	g := rollout.DefaultGroup("blue")
	g.CanaryCount = 1
	cfg.Groups = []rollout.GroupConfig{g}
	if _, err := kv.Save(ctx, fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, rollout.DefaultSpec("1.0.0", "1.1.0"), 0); err != nil {
		t.Fatal(err)
	}
	hubTraffic := []string{
		heartbeat.SubjectFor("blue", hubAgent), heartbeat.SubjectFor("blue", berlinAgent),
		kv.PlanRepublish + kv.KeySpec, kv.EventSubject("blue"), kv.EdgeDeliverSubject("berlin"),
		kv.KeySubject(kv.BucketConfig, kv.KeyConfig),
	}
	natstest.Eventually(t, 30*time.Second, func() error {
		for _, subj := range hubTraffic {
			if observer.Count(subj) == 0 {
				return fmt.Errorf("no %s seen in FLEET yet", subj)
			}
		}
		return nil
	})

	// What must not change.
	before := hubState(t, ctx, admin)
	observed := observer.Len()
	berlinSeq := lastDelivered(observer.Since(0), kv.EdgeConsumer("berlin"))
	if berlinSeq == 0 {
		t.Fatal("no delivery of berlin's consumer seen in FLEET: the reset check below would prove nothing")
	}

	// The attack, from each rogue's unauthenticated local client.
	hostileSpec := []byte(`{"v":1,"start_version":"1.0.0","target_version":"6.6.6","mode":"auto","note":"` + rogueMark + `"}`)
	hostileConfig := []byte(`{"v":1,"mode":"auto","groups":[],"note":"` + rogueMark + `"}`)
	hostileConsumer := []byte(`{"stream_name":"KV_fleet_plan","config":{"name":"evil","deliver_subject":"$KV.fleet_config.config",` +
		`"deliver_policy":"all","ack_policy":"none","description":"` + rogueMark + `"}}`)
	requests := []struct {
		what, subject string
		data          []byte
		// siteWall: refused by the site's own grants only; the EDGE
		// account allows it (a reset replays stored plan messages to the
		// consumer's own deliver subject), so the unscoped user does
		// not try it.
		siteWall bool
	}{
		{"account info", "$JS.hub.API.INFO", nil, false},
		{"stream list", "$JS.hub.API.STREAM.LIST", nil, false},
		{"stream names", "$JS.hub.API.STREAM.NAMES", nil, false},
		{"stream create", "$JS.hub.API.STREAM.CREATE.EVIL", []byte(`{"name":"EVIL","subjects":["evil.>"],"description":"` + rogueMark + `"}`), false},
		{"plan stream info", "$JS.hub.API.STREAM.INFO." + kv.PlanStream, nil, false},
		{"plan read", "$JS.hub.API.DIRECT.GET." + kv.PlanStream + "." + kv.KeySubject(kv.BucketPlan, kv.KeySpec), nil, false},
		{"consumer onto the config", "$JS.hub.API.CONSUMER.CREATE." + kv.PlanStream, hostileConsumer, false},
		{"named consumer onto the config", "$JS.hub.API.CONSUMER.CREATE." + kv.PlanStream + ".evil", hostileConsumer, false},
		{"durable consumer onto the config", "$JS.hub.API.CONSUMER.DURABLE.CREATE." + kv.PlanStream + ".evil", hostileConsumer, false},
		{"spec put through the API", "$JS.hub.API.$KV." + kv.BucketPlan + "." + kv.KeySpec, hostileSpec, false},
		{"config put through the API", "$JS.hub.API.$KV." + kv.BucketConfig + "." + kv.KeyConfig, hostileConfig, false},
		{"spec put", kv.KeySubject(kv.BucketPlan, kv.KeySpec), hostileSpec, false},
		{"config put", kv.KeySubject(kv.BucketConfig, kv.KeyConfig), hostileConfig, false},
		{"lease put", kv.KeySubject(kv.BucketStats, kv.KeyLeader), []byte(`{"v":1,"holder":"` + rogueMark + `"}`), false},
		{"stream create without a domain", "$JS.API.STREAM.CREATE.EVIL", []byte(`{"name":"EVIL","subjects":["evil.>"]}`), false},
		{"another site's consumer reset", kv.EdgeResetSubject("hub", "berlin"), []byte(`{"seq":1}`), true},
		{"event", kv.EventSubject("blue"), []byte(`{"v":1,"note":"` + rogueMark + `"}`), false},
		{"audit record", kv.AuditSubject(""), []byte(`{"v":1,"note":"` + rogueMark + `"}`), false},
	}
	for name, nc := range rogues {
		// All at once: each waits out its timeout (the rogue's own ">"
		// is interest enough for its server to wait for an answer).
		var asked sync.WaitGroup
		for _, r := range requests {
			if r.siteWall && name != "paris" {
				continue
			}
			asked.Go(func() {
				m, err := nc.Request(r.subject, r.data, time.Second)
				if err == nil {
					t.Errorf("rogue %s: %s (%s) answered: %.200s", name, r.what, r.subject, m.Data)
				} else if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
					t.Errorf("rogue %s: %s: %v", name, r.what, err)
				}
			})
		}
		asked.Wait()
		// And without waiting for answers, as a stream of plain publishes.
		for _, r := range requests {
			if r.siteWall && name != "paris" {
				continue
			}
			if err := nc.Publish(r.subject, r.data); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.FlushWithContext(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Nothing arrives in FLEET; watch for a while, answers take other paths.
	natstest.Consistently(t, 2*time.Second, func() error {
		if err := rogueInFleet(observer, observed); err != nil {
			return err
		}
		// A reset of berlin's consumer replays what it delivered.
		for _, m := range observer.Since(observed) {
			if seq, ok := deliveredSeq(m, kv.EdgeConsumer("berlin")); ok && seq <= berlinSeq {
				return fmt.Errorf("berlin's consumer delivered stream sequence %d again (had delivered up to %d): it was reset", seq, berlinSeq)
			}
		}
		return nil
	})
	if diff := before.diff(hubState(t, ctx, admin)); diff != "" {
		t.Errorf("the hub changed under the rogues: %s", diff)
	}
	// The rogues saw nothing of the hub: paris its own plan deliveries and
	// replies in EDGE only; the unscoped EDGE user, what crosses EDGE (the
	// edge sites' own traffic) but nothing of FLEET.
	for name, rec := range seen {
		bad := map[string]int{}
		for _, m := range rec.Since(0) {
			switch {
			case strings.HasPrefix(m.Subject, "_INBOX.") && m.Header.Get("Status") == "503":
				// Its own server: no responders.
			case strings.HasPrefix(m.Subject, "_R_.") || strings.HasPrefix(m.Subject, "$JSC.R."):
				// Replies inside EDGE: other sites' heartbeat
				// acknowledgements and mirror resets (docs/security.md).
			case name == "paris" && (m.Subject == kv.EdgeDeliverSubject("paris") || isDelivery(m, kv.EdgeConsumer("paris"))):
				// Its own plan.
			case name == "edgeonly" && (m.Subject == heartbeat.SubjectFor("blue", berlinAgent) || strings.HasPrefix(m.Subject, kv.EdgeDeliverPrefix) ||
				isDelivery(m, kv.EdgeConsumer("berlin")) || isDelivery(m, kv.EdgeConsumer("paris")) ||
				strings.HasPrefix(m.Subject, "$JS.FC."+kv.PlanStream+".")):
				// What crosses EDGE: the edge sites' own traffic, which
				// the sites' grants keep apart.
			default:
				bad[m.Subject]++
			}
		}
		for subj, n := range bad {
			t.Errorf("rogue %s saw %d message(s) on %s", name, n, subj)
		}
		t.Logf("rogue %s saw %d message(s), all its own site's or replies in EDGE", name, rec.Len())
	}
	if n := seen["edgeonly"].Count(heartbeat.SubjectFor("blue", hubAgent)); n != 0 {
		t.Errorf("the unscoped EDGE user saw %d heartbeats of the hub-side agent", n)
	}
	// The site's own plan does reach it (it is what a site is for), and
	// carries the plan, not the rogue's.
	natstest.Eventually(t, 10*time.Second, func() error {
		if parisPlan.Count(kv.EdgeDeliverSubject("paris")) == 0 {
			return errors.New("paris's consumer delivered nothing to the paris leaf")
		}
		return nil
	})
	for _, m := range seen["paris"].Since(0) {
		if isDelivery(m, kv.EdgeConsumer("paris")) && bytes.Contains(m.Data, []byte(rogueMark)) {
			t.Errorf("paris's plan delivery carries the rogue's write: %s", m.Data)
		}
	}
}

// rogueLeaf starts a plain nats-server, no auth, no JetStream, whose only
// leaf remote is the hub's leafnode port with creds (plainLeaf), waits
// until it is attached, and returns an unauthenticated client of it.
func rogueLeaf(t *testing.T, hub *node, creds string) *nats.Conn {
	t.Helper()
	ns := plainLeaf(t, hub, creds)
	natstest.Eventually(t, 20*time.Second, func() error {
		if ns.NumLeafNodes() != 1 {
			return errors.New("rogue not attached to the hub")
		}
		return nil
	})
	// No echo: what the client sees is what reached it, not its own
	// publishes.
	nc, err := nats.Connect(ns.ClientURL(), nats.NoEcho())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// unscopedEdgeCreds mints a user of the EDGE account with no permissions
// of its own (leaf connections only): what only the account allows.
func unscopedEdgeCreds(t *testing.T, ad auth.Dir) string {
	t.Helper()
	return attacktest.MintTestUser(t, ad, auth.AccountEdge, "edge-unscoped", func(uc *jwt.UserClaims) {
		uc.AllowedConnectionTypes.Add(jwt.ConnectionTypeLeafnode)
	})
}

// hubSnapshot is what a rogue must not change at the hub.
type hubSnapshot struct {
	spec, config uint64
	// consumers are the hub's streams, each with its consumers.
	consumers map[string][]string
}

func hubState(t *testing.T, ctx context.Context, js jetstream.JetStream) hubSnapshot {
	t.Helper()
	s := hubSnapshot{consumers: map[string][]string{}}
	for _, k := range []struct {
		dst    *uint64
		bucket string
		key    string
	}{{&s.spec, kv.BucketPlan, kv.KeySpec}, {&s.config, kv.BucketConfig, kv.KeyConfig}} {
		m, err := kv.DirectGetLast(ctx, js.Conn(), kv.StreamOf(k.bucket), kv.KeySubject(k.bucket, k.key))
		if err != nil {
			t.Fatal(err)
		}
		*k.dst = m.Sequence
	}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cs := []string{}
		l := st.ListConsumers(ctx)
		for ci := range l.Info() {
			cs = append(cs, ci.Name)
		}
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(cs)
		s.consumers[name] = cs
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s hubSnapshot) diff(after hubSnapshot) string {
	var out []string
	if s.spec != after.spec || s.config != after.config {
		out = append(out, fmt.Sprintf("spec revision %d→%d, config revision %d→%d", s.spec, after.spec, s.config, after.config))
	}
	if fmt.Sprint(s.consumers) != fmt.Sprint(after.consumers) {
		out = append(out, fmt.Sprintf("streams and consumers %v→%v", s.consumers, after.consumers))
	}
	return strings.Join(out, "; ")
}

// deliveredSeq is the stream sequence of a delivery by consumer on the
// plan stream, from its acknowledgement subject ($JS.ACK.<stream>.
// <consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>; a
// delivery goes out under the stored message's subject); false for
// anything else.
func deliveredSeq(m *nats.Msg, consumer string) (uint64, bool) {
	// Over a leaf connection the reply also names the stored subject
	// (…<pending>@<subject>).
	reply, _, _ := strings.Cut(m.Reply, "@")
	tok := strings.Split(reply, ".")
	if len(tok) != 9 || tok[0] != "$JS" || tok[1] != "ACK" || tok[2] != kv.PlanStream || tok[3] != consumer {
		return 0, false
	}
	var seq uint64
	if _, err := fmt.Sscan(tok[5], &seq); err != nil {
		return 0, false
	}
	return seq, true
}

// isDelivery: m is a delivery of consumer on the plan stream.
func isDelivery(m *nats.Msg, consumer string) bool {
	_, ok := deliveredSeq(m, consumer)
	return ok
}

// lastDelivered is the highest stream sequence consumer delivered.
func lastDelivered(msgs []*nats.Msg, consumer string) uint64 {
	var last uint64
	for _, m := range msgs {
		if seq, ok := deliveredSeq(m, consumer); ok {
			last = max(last, seq)
		}
	}
	return last
}

// rogueInFleet is an error naming the first message seen in FLEET, after
// the first from messages, that carries the rogues' mark or lands on a
// subject only they would write.
func rogueInFleet(r *attacktest.Recorder, from int) error {
	for _, m := range r.Since(from) {
		if bytes.Contains(m.Data, []byte(rogueMark)) || strings.HasPrefix(m.Subject, "evil") || strings.Contains(m.Subject, "EVIL") ||
			strings.Contains(fmt.Sprint(m.Header), rogueMark) {
			return fmt.Errorf("FLEET saw %s: %.200s", m.Subject, m.Data)
		}
		for _, key := range []string{kv.KeySubject(kv.BucketPlan, kv.KeySpec), kv.KeySubject(kv.BucketConfig, kv.KeyConfig)} {
			// Consumers deliver stored messages under their own
			// subjects, with an acknowledgement reply: not a write.
			if m.Subject == key && !strings.HasPrefix(m.Reply, "$JS.ACK.") {
				return fmt.Errorf("FLEET saw a write of %s during the attack: %.200s", key, m.Data)
			}
		}
	}
	return nil
}
