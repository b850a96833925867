package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestEdgeUpgradeFromFleetLeaf walks docs/deployment.md's "Upgrading an
// edge site" on a site set up by the previous fleetwave: an auth directory
// without the EDGE account, the site's leaf user in FLEET (all of it), its
// mirror with its own consumer at the hub. "fleetctl auth upgrade" mints
// EDGE and names the leaf user; "fleetctl edge add" with the same name
// re-mints it in EDGE; the site restarts its leaf node with the new creds
// and runs "fleetctl edge init", which replaces the old mirror; "fleetctl
// auth revoke --keep-current" revokes the old key, which attaches no leaf
// node any more. The site's agent reads its plan and heartbeats
// throughout, apart from the restart.
func TestEdgeUpgradeFromFleetLeaf(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a hub and an edge site's leaf node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir, ad := stage(t)
	oldCreds := withoutEdgeAccount(t, dir, ad, "edge-berlin")
	hub := startNode(t, load(t, dir, "single.conf"))
	ctl := runController(t, ctx, ad, hub.url(), 1)
	defer func() { _ = ctl.halt() }()
	fleet := waitFleet(t, ctx, ad, hub)
	specRev, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, rollout.DefaultSpec("1.0.0", "1.1.0"), 0)
	if err != nil {
		t.Fatal(err)
	}

	// The site as the previous fleetwave set it up.
	edge := startEdge(t, dir, hub, oldCreds)
	waitLeafConnected(t, hub, edge)
	adminCreds := filepath.Join(ad.Path, auth.CredsFile(auth.UserAdmin))
	edgeJS := jsFor(t, connect(t, ad, edge.url(), auth.CredsFile(auth.UserAdmin)))
	if _, err := edgeJS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: kv.BucketPlan,
		Mirror: &jetstream.StreamSource{Name: kv.BucketPlan, Domain: "hub"}}); err != nil {
		t.Fatal(err)
	}
	agent := rollout.AgentID("0b000000-0000-4000-8000-0000000000b2")
	_, agentCreds, err := ad.IssueAgent(agent, "blue", "")
	if err != nil {
		t.Fatal(err)
	}
	siteAgent := connect(t, ad, edge.url(), agentCreds, nats.CustomInboxPrefix(kv.AgentInboxPrefix(string(agent))))
	works := func(wantSpec uint64) {
		t.Helper()
		natstest.Eventually(t, 20*time.Second, func() error {
			m, err := within(ctx, 2*time.Second, func(ctx context.Context) (kv.StoredMsg, error) {
				return kv.DirectGetLast(ctx, siteAgent, kv.PlanStream, kv.KeySubject(kv.BucketPlan, kv.KeySpec))
			})
			if err != nil {
				return fmt.Errorf("the site's agent reads the spec: %w", err)
			}
			if m.Sequence != wantSpec {
				return fmt.Errorf("the site's agent reads the spec at revision %d, want %d", m.Sequence, wantSpec)
			}
			data, err := heartbeat.Encode(&heartbeat.Heartbeat{V: heartbeat.SchemaVersion, AgentID: agent, Group: "blue",
				ActiveVersion: "1.0.0", UpdaterVersion: "0.1.0", At: time.Now().UTC(), Seq: uint64(time.Now().UnixNano())})
			if err != nil {
				return err
			}
			_, err = within(ctx, 2*time.Second, func(ctx context.Context) (*jetstream.PubAck, error) {
				return jsFor(t, siteAgent).Publish(ctx, heartbeat.SubjectFor("blue", agent), data)
			})
			if err != nil {
				return fmt.Errorf("the site's agent's heartbeat: %w", err)
			}
			return nil
		})
	}
	works(specRev)

	// 1. At the hub: EDGE, and the site named as still in FLEET.
	out := runFleetctl(t, ctx, "--nats", hub.url(), "auth", "upgrade", "--dir", ad.Path)
	for _, want := range []string{"minted account EDGE", "edge-berlin: fleetctl edge add --site SITE --name edge-berlin", "pushed to"} {
		if !strings.Contains(out, want) {
			t.Errorf("auth upgrade output lacks %q:\n%s", want, out)
		}
	}
	works(specRev) // nothing changed for the site yet

	// 2. At the hub: the site's consumer and new creds, same user.
	newCreds := edgeAdd(t, ctx, ad, hub, "berlin")
	rec, err := ad.User("edge-berlin")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Account != auth.AccountEdge || len(rec.Keys) != 2 || rec.Keys[0].Account != auth.AccountFleet {
		t.Fatalf("edge-berlin after edge add: %+v", rec)
	}

	// 3. At the site: the new creds, then edge init.
	edge.stop()
	edge.opts.LeafNode.Remotes[0].Credentials = newCreds
	edge.start()
	waitLeafConnected(t, hub, edge)
	edgeInit(t, ctx, ad, edge, "berlin")
	st, err := jsFor(t, connect(t, ad, edge.url(), auth.CredsFile(auth.UserAdmin))).Stream(ctx, kv.PlanStream)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.CachedInfo().Config.Mirror; m == nil || m.Consumer == nil || m.Consumer.Name != kv.EdgeConsumer("berlin") {
		t.Fatalf("the site's mirror after edge init: %+v", m)
	}
	specRev, err = kv.Save(ctx, fleet.Plan, kv.KeySpec, rollout.DefaultSpec("1.0.0", "1.2.0"), specRev)
	if err != nil {
		t.Fatal(err)
	}
	siteAgent = connect(t, ad, edge.url(), agentCreds, nats.CustomInboxPrefix(kv.AgentInboxPrefix(string(agent))))
	works(specRev)

	// 4. At the hub: the old key revoked; it attaches nothing any more.
	out = runFleetctl(t, ctx, "--nats", hub.url(), "--creds", adminCreds, "auth", "revoke", "--dir", ad.Path,
		"--user", "edge-berlin", "--keep-current", "--reason", "edge site upgraded")
	if !strings.Contains(out, "revoked 1 key(s) in account FLEET") {
		t.Errorf("auth revoke --keep-current:\n%s", out)
	}
	old := plainLeaf(t, hub, oldCreds)
	natstest.Consistently(t, 2*time.Second, func() error {
		if n := old.NumLeafNodes(); n != 0 {
			return errors.New("the old FLEET leaf key attached a leaf node after its revocation")
		}
		return nil
	})
	works(specRev)
}

// withoutEdgeAccount turns a staged auth directory into one minted before
// the EDGE account existed (no EDGE keys or JWT, FLEET exporting nothing
// of the edge sites', resolver.conf without EDGE, also the staged copy),
// with the leaf user name minted as fleetctl then did: a user of FLEET with
// no permissions of its own, leaf connections only. It returns its creds.
func withoutEdgeAccount(t *testing.T, dir string, ad auth.Dir, name string) string {
	t.Helper()
	read := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join(ad.Path, f))
		if err != nil {
			t.Fatal(err)
		}
		return bytes.TrimSpace(b)
	}
	seed := func(f string) nkeys.KeyPair {
		kp, err := nkeys.FromSeed(read(f))
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	for _, f := range []string{auth.FileEdgeJWT, auth.FileEdgeSeed, auth.FileEdgeSigningSeed} {
		if err := os.Remove(filepath.Join(ad.Path, f)); err != nil {
			t.Fatal(err)
		}
	}
	fc, err := jwt.DecodeAccountClaims(string(read(auth.FileFleetJWT)))
	if err != nil {
		t.Fatal(err)
	}
	fc.Exports = slices.DeleteFunc(fc.Exports, func(e *jwt.Export) bool {
		s := string(e.Subject)
		return strings.HasPrefix(s, "$JS.API.CONSUMER.RESET.") || strings.HasPrefix(s, "$JS.FC.") || strings.HasPrefix(s, kv.EdgeDeliverPrefix)
	})
	fleetJWT, err := fc.Encode(seed(auth.FileOperatorSigningSeed))
	if err != nil {
		t.Fatal(err)
	}
	conf, err := auth.ResolverConf(string(read(auth.FileOperatorJWT)), string(read(auth.FileSystemJWT)), fleetJWT,
		string(read(auth.FileAgentsJWT)), string(read(auth.FileControlJWT)))
	if err != nil {
		t.Fatal(err)
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	upub, _ := user.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Name = name
	uc.IssuerAccount = fc.Subject
	uc.AllowedConnectionTypes.Add(jwt.ConnectionTypeLeafnode)
	uc.Tags.Add("role:leaf")
	token, err := uc.Encode(seed(auth.FileFleetSigningSeed))
	if err != nil {
		t.Fatal(err)
	}
	back, err := jwt.DecodeUserClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	us, _ := user.Seed()
	creds, err := jwt.FormatUserConfig(token, us)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := json.Marshal(auth.Record{V: 1, Name: name, Role: auth.RoleLeaf, Account: auth.AccountFleet,
		Keys: []auth.KeyRecord{{UserKey: upub, IssuedAt: time.Unix(back.IssuedAt, 0).UTC()}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteFiles(ad.Path,
		auth.File{Name: auth.FileFleetJWT, Data: []byte(fleetJWT + "\n")},
		auth.File{Name: auth.FileResolverConf, Data: conf},
		auth.File{Name: auth.CredsFile(name), Data: creds, Secret: true},
		auth.File{Name: filepath.Join("users", name+".json"), Data: rec},
	); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, auth.FileResolverConf), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	// The site keeps its copy; "edge add" writes the new creds over the
	// directory's.
	kept := filepath.Join(t.TempDir(), "leaf.creds")
	if err := os.WriteFile(kept, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return kept
}
