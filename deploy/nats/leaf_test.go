package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestLeafAgentReachesHub runs a hub (single.conf, JetStream domain "hub")
// and an edge site's leaf node (leaf-edge.conf, its own domain) connected by
// a leaf connection with the site's leaf user, which "fleetctl edge add"
// minted in the EDGE account with the site's grants. A real agentd with its
// usual credentials, attached to the leaf node, heartbeats into the hub's
// stream and reads (and follows) the plan from the site's mirror, made by
// "fleetctl edge init" on the site's consumer at the hub. With the hub gone the site's agents still read the
// plan; when it is back, heartbeats land again and plan changes arrive.
func TestLeafAgentReachesHub(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a hub and a leaf node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	dir, ad, hub := startHub(t)

	// The controller runs at the hub.
	ctl := runController(t, ctx, ad, hub.url(), 1)
	fleet := waitFleet(t, ctx, ad, hub)
	cfg := rollout.DefaultConfig()
	g := rollout.DefaultGroup("blue")
	g.CanaryCount = 1
	cfg.Groups = []rollout.GroupConfig{g}
	if _, err := kv.Save(ctx, fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	spec.Critical = true
	specRev, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, 0)
	if err != nil {
		t.Fatal(err)
	}

	edge := addEdgeSite(t, ctx, dir, ad, hub, "berlin")
	waitLeaf := func() { t.Helper(); waitLeafConnected(t, hub, edge) }

	// An agent of the site, attached to the leaf node.
	root := t.TempDir()
	id, err := install.LoadOrCreateAgentID(root)
	if err != nil {
		t.Fatal(err)
	}
	_, agentCredsRel, err := ad.IssueAgent(id, "blue", "")
	if err != nil {
		t.Fatal(err)
	}
	agentCreds := filepath.Join(ad.Path, agentCredsRel)
	var agentLog natstest.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", agentLog.String())
		}
	})
	a, err := agentd.New(agentd.Options{Root: root, Group: "blue", NATSURL: edge.url(), Creds: agentCreds,
		Interval: 100 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&agentLog, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetStatus(install.Status{ActiveVersion: "1.0.0"}); err != nil {
		t.Fatal(err)
	}
	agentCtx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(agentCtx) }()

	// Heartbeats cross the leaf connection into the hub's stream.
	lastBeat := func() (*heartbeat.Heartbeat, error) {
		m, err := within(ctx, 2*time.Second, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
			return fleet.HB.GetLastMsgForSubject(ctx, heartbeat.SubjectFor("blue", id))
		})
		if err != nil {
			return nil, err
		}
		return heartbeat.DecodeFrom(m.Subject, m.Data)
	}
	natstest.Eventually(t, 20*time.Second, func() error {
		_, err := lastBeat()
		return err
	})
	// Its heartbeats name its site: the leaf node's JetStream domain
	// (agentd's default without --site; issue 15 point 8).
	natstest.Eventually(t, 10*time.Second, func() error {
		hb, err := lastBeat()
		if err == nil && hb.Site != edge.opts.JetStreamDomain {
			err = fmt.Errorf("heartbeat names site %q, want the leaf node's domain %q", hb.Site, edge.opts.JetStreamDomain)
		}
		return err
	})
	// The hub's controller counts the site's agent: it becomes the canary.
	var status kv.Entry[rollout.GroupStatus]
	natstest.Eventually(t, 20*time.Second, func() (err error) {
		status, err = kv.Get[rollout.GroupStatus](ctx, fleet.Plan, kv.GroupKey("blue"))
		if err == nil && status.Value.State != rollout.StateCanary {
			err = fmt.Errorf("group blue %s, want canary", status.Value.State)
		}
		return err
	})

	// The agent's view at the site: the mirror, at the hub's revisions.
	siteAgent := connect(t, ad, edge.url(), agentCredsRel,
		nats.CustomInboxPrefix(kv.AgentInboxPrefix(string(id))))
	// The same bare direct gets agentd makes (its grants allow no more).
	sitePlan := func() (spec kv.Entry[rollout.Spec], st kv.Entry[rollout.GroupStatus], err error) {
		for _, k := range []struct {
			key string
			dst any
			rev *uint64
		}{{kv.KeySpec, &spec.Value, &spec.Revision}, {kv.GroupKey("blue"), &st.Value, &st.Revision}} {
			m, err := within(ctx, 2*time.Second, func(ctx context.Context) (kv.StoredMsg, error) {
				return kv.DirectGetLast(ctx, siteAgent, kv.PlanStream, kv.KeySubject(kv.BucketPlan, k.key))
			})
			if err != nil {
				return spec, st, err
			}
			if err := json.Unmarshal(m.Data, k.dst); err != nil {
				return spec, st, err
			}
			*k.rev = m.Sequence
		}
		return spec, st, nil
	}
	natstest.Eventually(t, 20*time.Second, func() error {
		s, st, err := sitePlan()
		if err != nil {
			return err
		}
		if diff := cmp.Diff([]uint64{specRev, status.Revision}, []uint64{s.Revision, st.Revision}); diff != "" {
			return fmt.Errorf("site revisions of spec and group.blue (-hub +site):\n%s", diff)
		}
		return nil
	})
	desired := func() agentd.StatusReport {
		t.Helper()
		var out, errOut bytes.Buffer
		cmd := agentd.NewCommand()
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs([]string{"status", "--root", root, "--nats", edge.url(), "--creds", agentCreds})
		cliutil.Prepare(cmd)
		if err := cmd.ExecuteContext(ctx); err != nil {
			t.Fatalf("agentd status: %v\n%s", err, errOut.String())
		}
		var rep agentd.StatusReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		return agentd.StatusReport{Desired: rep.Desired, ShouldUpdate: rep.ShouldUpdate, DesiredError: rep.DesiredError}
	}
	wantV, wantUpdate := rollout.Decide(id, spec, status.Value, status.Value.Mode)
	want := agentd.StatusReport{Desired: wantV, ShouldUpdate: wantUpdate}
	if diff := cmp.Diff(want, desired()); diff != "" {
		t.Errorf("plan read at the site (-want +got):\n%s", diff)
	}

	// Changes at the hub are republished at the site (by the mirror; the
	// leaf remote keeps the hub's own republish out) with the hub's revision.
	changes := make(chan *nats.Msg, 16)
	if _, err := siteAgent.ChanSubscribe(kv.PlanRepublish+kv.KeySpec, changes); err != nil {
		t.Fatal(err)
	}
	if err := siteAgent.Flush(); err != nil {
		t.Fatal(err)
	}
	spec.Critical = true
	if specRev, err = kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, specRev); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-changes:
		if got := m.Header.Get(jetstream.SequenceHeader); got != strconv.FormatUint(specRev, 10) {
			t.Errorf("republished at the site with revision %s, the hub wrote %d", got, specRev)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a plan change at the hub was not republished at the site")
	}

	t.Logf("%v: plan followed at the site", time.Since(start))
	// Cut off: the hub goes away. The site still answers the plan.
	hub.stop()
	natstest.Eventually(t, 10*time.Second, func() error {
		if n := edge.ns.NumLeafNodes(); n != 0 {
			return fmt.Errorf("%d leaf connections", n)
		}
		return nil
	})
	if diff := cmp.Diff(want, desired()); diff != "" {
		t.Errorf("plan read at the site while cut off (-want +got):\n%s", diff)
	}
	if s, _, err := sitePlan(); err != nil || s.Revision != specRev {
		t.Errorf("site plan while cut off: revision %d, err %v; want %d", s.Revision, err, specRev)
	}

	// Back: the leaf reconnects, heartbeats land again, and a new target
	// set at the hub reaches the site.
	t.Logf("%v: cut off, plan still read", time.Since(start))
	hub.start()
	waitLeaf()
	t.Logf("%v: leaf reconnected", time.Since(start))
	back := time.Now()
	natstest.Eventually(t, 30*time.Second, func() error {
		hb, err := lastBeat()
		if err != nil {
			return err
		}
		if hb.At.Before(back) {
			return fmt.Errorf("last heartbeat at %v, from before the hub came back", hb.At)
		}
		return nil
	})
	t.Logf("%v: heartbeats land again", time.Since(start))
	spec.TargetVersion = "1.2.0"
	natstest.Eventually(t, 20*time.Second, func() (err error) {
		_, err = within(ctx, 2*time.Second, func(ctx context.Context) (uint64, error) {
			return kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, specRev)
		})
		return err
	})
	t.Logf("%v: new target saved at the hub", time.Since(start))
	natstest.Eventually(t, 30*time.Second, func() error {
		s, _, err := sitePlan()
		if err != nil {
			return err
		}
		if s.Value.TargetVersion != "1.2.0" {
			return fmt.Errorf("site plan targets %s", s.Value.TargetVersion)
		}
		return nil
	})

	t.Logf("%v: the site has the new target", time.Since(start))
	stopAgent()
	<-agentDone
	_ = ctl.halt()
}

// startHub starts a hub (single.conf) from a staged directory.
func startHub(t *testing.T) (dir string, ad auth.Dir, hub *node) {
	t.Helper()
	dir, ad = stage(t)
	return dir, ad, startNode(t, load(t, dir, "single.conf"))
}

// waitFleet waits for the hub's stream and buckets (a controller creates
// them) and returns them as the admin sees them.
func waitFleet(t *testing.T, ctx context.Context, ad auth.Dir, hub *node) *kv.Fleet {
	t.Helper()
	adminJS := jsFor(t, connect(t, ad, hub.url(), auth.CredsFile(auth.UserAdmin)))
	var fleet *kv.Fleet
	natstest.Eventually(t, 20*time.Second, func() (err error) {
		fleet, err = within(ctx, 2*time.Second, func(ctx context.Context) (*kv.Fleet, error) { return kv.Open(ctx, adminJS) })
		return err
	})
	return fleet
}

// addEdgeSite sets up edge site site as docs/deployment.md says: at the
// hub, "fleetctl edge add" (the site's consumer of the plan, its leaf
// creds); the site's leaf node from leaf-edge.conf with those creds; there,
// "fleetctl edge init" (the plan mirror). The hub's fleet must exist.
func addEdgeSite(t *testing.T, ctx context.Context, dir string, ad auth.Dir, hub *node, site string) *node {
	t.Helper()
	creds := edgeAdd(t, ctx, ad, hub, site)
	edge := startEdge(t, dir, hub, creds)
	waitLeafConnected(t, hub, edge)
	edgeInit(t, ctx, ad, edge, site)
	return edge
}

// edgeAdd runs "fleetctl edge add" for site against the hub, with the
// directory's admin creds, and returns the path of the site's leaf creds.
func edgeAdd(t *testing.T, ctx context.Context, ad auth.Dir, hub *node, site string) string {
	t.Helper()
	out := runFleetctl(t, ctx, "--nats", hub.url(), "edge", "add", "--dir", ad.Path, "--site", site, "-o", "json")
	var res struct {
		Value fleetctl.EdgeAddReport `json:"value"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("fleetctl edge add -o json: %v\n%s", err, out)
	}
	return res.Value.Creds
}

// startEdge starts an edge site's leaf node from leaf-edge.conf, its leaf
// remote pointed at the hub with the given creds.
func startEdge(t *testing.T, dir string, hub *node, creds string) *node {
	t.Helper()
	edgeOpts := load(t, dir, "leaf-edge.conf")
	remote := edgeOpts.LeafNode.Remotes[0]
	remote.URLs = []*url.URL{{Scheme: "nats-leaf", Host: fmt.Sprintf("127.0.0.1:%d", hub.opts.LeafNode.Port)}}
	remote.Credentials = creds
	return startNode(t, edgeOpts)
}

func waitLeafConnected(t *testing.T, hub, edge *node) {
	t.Helper()
	natstest.Eventually(t, 20*time.Second, func() error {
		if hub.ns.NumLeafNodes() != 1 || edge.ns.NumLeafNodes() != 1 {
			return fmt.Errorf("leaf connections: hub %d, edge %d", hub.ns.NumLeafNodes(), edge.ns.NumLeafNodes())
		}
		return nil
	})
}

// edgeInit makes the site's plan mirror as an operator would: fleetctl edge
// init with admin creds, at the leaf node.
func edgeInit(t *testing.T, ctx context.Context, ad auth.Dir, edge *node, site string) {
	t.Helper()
	out := runFleetctl(t, ctx, "--nats", edge.url(), "--creds", filepath.Join(ad.Path, auth.CredsFile(auth.UserAdmin)),
		"edge", "init", "--hub-domain", "hub", "--site", site)
	t.Logf("fleetctl edge init: %s", out)
}

// runFleetctl runs fleetctl with args in this process and returns its
// stdout; a failure fails the test with its stderr.
func runFleetctl(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := fleetctl.NewCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cliutil.Prepare(cmd)
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("fleetctl %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// TestEdgeSiteOnClusterNode: an edge site attached to a node of a 3-node
// hub (cluster-*.conf) that does not lead the plan bucket: the site's
// consumer's reset, its flow control and its deliveries cross a route, and
// the site's mirror follows the plan all the same.
func TestEdgeSiteOnClusterNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster and a leaf node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ad, nodes := startCluster(t)
	dir, err := os.Getwd() // stage made the staged directory the working one
	if err != nil {
		t.Fatal(err)
	}
	all := urls(nodes...)
	ctl := runController(t, ctx, ad, all, 3)
	defer func() { _ = ctl.halt() }()
	admin := jsFor(t, connect(t, ad, all, auth.CredsFile(auth.UserAdmin)))
	var fleet *kv.Fleet
	var hub *node
	natstest.Eventually(t, 45*time.Second, func() error {
		f, err := within(ctx, 3*time.Second, func(ctx context.Context) (*kv.Fleet, error) { return kv.Open(ctx, admin) })
		if err != nil {
			return err
		}
		st, err := within(ctx, 3*time.Second, func(ctx context.Context) (jetstream.Stream, error) { return admin.Stream(ctx, kv.PlanStream) })
		if err != nil {
			return err
		}
		c := st.CachedInfo().Cluster
		if c == nil || c.Leader == "" {
			return fmt.Errorf("%s has no leader yet", kv.PlanStream)
		}
		for _, n := range nodes {
			if n.opts.ServerName != c.Leader {
				fleet, hub = f, n
				return nil
			}
		}
		return fmt.Errorf("no node but the leader %s", c.Leader)
	})
	rev, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, rollout.DefaultSpec("1.0.0", "1.1.0"), 0)
	if err != nil {
		t.Fatal(err)
	}
	edge := addEdgeSite(t, ctx, dir, ad, hub, "berlin")
	t.Logf("the site attaches to %s", hub.opts.ServerName)
	siteJS := jsFor(t, connect(t, ad, edge.url(), auth.CredsFile(auth.UserAdmin)))
	reads := func(want uint64) {
		t.Helper()
		natstest.Eventually(t, 30*time.Second, func() error {
			m, err := within(ctx, 2*time.Second, func(ctx context.Context) (kv.StoredMsg, error) {
				return kv.DirectGetLast(ctx, siteJS.Conn(), kv.PlanStream, kv.KeySubject(kv.BucketPlan, kv.KeySpec))
			})
			if err == nil && m.Sequence != want {
				err = fmt.Errorf("the site reads the spec at revision %d, want %d", m.Sequence, want)
			}
			return err
		})
	}
	reads(rev)
	if rev, err = kv.Save(ctx, fleet.Plan, kv.KeySpec, rollout.DefaultSpec("1.0.0", "1.2.0"), rev); err != nil {
		t.Fatal(err)
	}
	reads(rev)
}
