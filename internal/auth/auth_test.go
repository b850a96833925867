package auth_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/jwt/v2"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestAgentPermissionsAreDesignSix pins an agent's grants to DESIGN §6,
// subject for subject: no stream info (agentd reads with bare direct gets)
// and no response permission (an agent answers no requests).
func TestAgentPermissionsAreDesignSix(t *testing.T) {
	const id = rollout.AgentID("1b4e28ba-2fa1-4d2e-883f-0016d3cca427")
	p := auth.AgentPermissions(id, "prod")
	want := jwt.Permissions{
		Pub: jwt.Permission{Allow: jwt.StringList{
			"fleet.hb.prod." + string(id),
			"$JS.API.DIRECT.GET.KV_fleet_plan.$KV.fleet_plan.spec",
			"$JS.API.DIRECT.GET.KV_fleet_plan.$KV.fleet_plan.group.prod",
		}},
		Sub: jwt.Permission{Allow: jwt.StringList{
			"fleet.plan.spec",
			"fleet.plan.group.prod",
			"_INBOX_" + string(id) + ".>",
		}},
	}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("agent permissions (-want +got):\n%s", diff)
	}
}

func TestMintedUsers(t *testing.T) {
	op, err := auth.NewOperator("test", auth.DefaultJetStreamLimits)
	if err != nil {
		t.Fatal(err)
	}
	fleetPub, _ := op.FleetKey.PublicKey()
	signerPub, _ := op.FleetSigner.PublicKey()
	agentsPub, _ := op.AgentsKey.PublicKey()
	agentsSignerPub, _ := op.AgentsSigner.PublicKey()
	edgePub, _ := op.EdgeKey.PublicKey()
	edgeSignerPub, _ := op.EdgeSigner.PublicKey()
	is := auth.Issuer{Account: fleetPub, Signer: op.FleetSigner}
	agent, err := auth.Issuer{Account: agentsPub, Signer: op.AgentsSigner}.Agent("1b4e28ba-2fa1-4d2e-883f-0016d3cca427", "prod")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := auth.Issuer{Account: edgePub, Signer: op.EdgeSigner}.Edge("edge-berlin", "berlin")
	if err != nil {
		t.Fatal(err)
	}
	// A leaf user minted by role alone, outside a site, may do nothing.
	bare, err := is.User("edge-1", auth.RoleLeaf)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := is.User("alice", auth.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		Issuer, IssuerAccount string
		ConnTypes             []string
		Subs                  int64
		Unrestricted          bool
	}
	cases := []struct {
		name string
		u    auth.User
		want view
	}{
		// Signed by the account's signing key: the identity key can stay offline.
		{"agent", agent, view{agentsSignerPub, agentsPub, []string{jwt.ConnectionTypeStandard}, 16, false}},
		{"leaf", leaf, view{edgeSignerPub, edgePub, []string{jwt.ConnectionTypeLeafnode}, -1, false}},
		{"leaf without a site", bare, view{signerPub, fleetPub, []string{jwt.ConnectionTypeLeafnode}, -1, false}},
		{"admin", admin, view{signerPub, fleetPub, nil, -1, true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			uc, err := jwt.DecodeUserClaims(c.u.JWT)
			if err != nil {
				t.Fatal(err)
			}
			vr := jwt.CreateValidationResults()
			uc.Validate(vr)
			if len(vr.Errors()) > 0 {
				t.Errorf("invalid: %v", vr.Errors())
			}
			got := view{uc.Issuer, uc.IssuerAccount, uc.AllowedConnectionTypes, uc.Limits.Subs, uc.Permissions.Pub.Empty() && uc.Permissions.Sub.Empty()}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			kp, err := jwt.ParseDecoratedUserNKey(c.u.Creds)
			if err != nil {
				t.Fatalf("creds: %v", err)
			}
			if pk, _ := kp.PublicKey(); pk != c.u.PubKey || uc.Subject != c.u.PubKey {
				t.Errorf("creds key %s, JWT subject %s, user %s", pk, uc.Subject, c.u.PubKey)
			}
		})
	}
	// The AGENTS account holds nothing but imports, each of a FLEET export.
	ac, err := jwt.DecodeAccountClaims(op.AgentsJWT)
	if err != nil {
		t.Fatal(err)
	}
	fc, err := jwt.DecodeAccountClaims(op.FleetJWT)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := jwt.DecodeAccountClaims(op.ControlJWT)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := jwt.DecodeAccountClaims(op.EdgeJWT)
	if err != nil {
		t.Fatal(err)
	}
	exported := map[jwt.Subject]bool{}
	for _, e := range fc.Exports {
		exported[e.Subject] = true
	}
	for _, a := range []*jwt.AccountClaims{ac, cc, ec} {
		if len(a.Exports) != 0 || a.Limits.IsJSEnabled() || len(a.Imports) == 0 {
			t.Errorf("%s account: %d exports, JetStream %v, %d imports", a.Name, len(a.Exports), a.Limits.IsJSEnabled(), len(a.Imports))
		}
		for _, im := range a.Imports {
			if im.Account != fleetPub || !exported[im.Subject] {
				t.Errorf("%s imports %s from %s, which FLEET does not export", a.Name, im.Subject, im.Account)
			}
			// A consumer's deliver subject is written in its create
			// request: any consumer create is a way to write anywhere.
			// EDGE may only reset its sites' consumers.
			reset := a == ec && im.Subject == "$JS.API.CONSUMER.RESET.KV_fleet_plan.*"
			if im.Subject == "$KV.fleet_plan.spec" || strings.HasPrefix(string(im.Subject), "$KV.fleet_config") ||
				strings.Contains(string(im.Subject), "STREAM.UPDATE") || strings.Contains(string(im.Subject), "CONSUMER") && !reset {
				t.Errorf("%s imports %s: a way to change the target or the config", a.Name, im.Subject)
			}
		}
	}
	if _, err := is.Agent("NOT-AN-ID", "prod"); err == nil {
		t.Error("agent with a bad id minted")
	}
	if _, err := is.Agent("1b4e28ba-2fa1-4d2e-883f-0016d3cca427", "a.b"); err == nil {
		t.Error("agent with a group that would widen its subjects minted")
	}

	// Revoking the agent's key revokes exactly that key.
	revoked, err := auth.Revoke(op.FleetJWT, op.OperatorSigner, []string{agent.PubKey}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ac, err = jwt.DecodeAccountClaims(revoked)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []auth.User{agent, admin} {
		uc, _ := jwt.DecodeUserClaims(u.JWT)
		if got, want := ac.IsClaimRevoked(uc), u.PubKey == agent.PubKey; got != want {
			t.Errorf("%s revoked: %v, want %v", u.Name, got, want)
		}
	}
	if got := ac.Limits.JetStreamLimits.DiskStorage; got != auth.DefaultJetStreamLimits.DiskBytes {
		t.Errorf("re-signed account lost its JetStream limits: disk %d", got)
	}
	if _, err := auth.Revoke(op.FleetJWT, op.OperatorSigner, []string{fleetPub}, time.Now()); err == nil {
		t.Error("revoked an account key as if it were a user")
	}
}

func TestIssueAgentKeepsEveryKey(t *testing.T) {
	d := auth.Dir{Path: t.TempDir()}
	if _, err := d.Init("test", auth.DefaultJetStreamLimits); err != nil {
		t.Fatal(err)
	}
	const id = rollout.AgentID("1b4e28ba-2fa1-4d2e-883f-0016d3cca427")
	u1, _, err := d.IssueAgent(id, "prod", "")
	if err != nil {
		t.Fatal(err)
	}
	u2, out, err := d.IssueAgent(id, "canary", filepath.Join(t.TempDir(), "moved.creds"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := d.Agent(id)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, k := range rec.Keys {
		keys = append(keys, k.UserKey)
	}
	if diff := cmp.Diff([]string{u1.PubKey, u2.PubKey}, keys); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	if rec.Group != "canary" {
		t.Errorf("record group %q, want the latest, canary", rec.Group)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("creds at --out: %v, mode %v", err, fi.Mode())
	}
	// auth agent needs only the FLEET signing key: the identity keys can
	// be offline.
	for _, f := range []string{auth.FileOperatorSeed, auth.FileFleetSeed, auth.FileSystemSeed, auth.FileOperatorSigningSeed} {
		if err := os.Remove(filepath.Join(d.Path, f)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := d.IssueAgent(id, "prod", ""); err != nil {
		t.Errorf("issuing with identity keys offline: %v", err)
	}
	// Revoking needs the operator's signing key, and says which is missing.
	_, err = d.RevokeAgent(id, false, time.Now())
	if err == nil || !strings.Contains(err.Error(), auth.FileOperatorSigningSeed) {
		t.Errorf("revoke without the operator signing key: %v", err)
	}
}

// TestEdgeGrants pins what an edge site may do, subject for subject: the
// EDGE account's imports (heartbeats in; the sites' consumers' reset, flow
// control and deliveries; no other JetStream API, no bucket), and one
// site's leaf user's grants within them (its own consumer, its own
// deliveries and replies; any agent's heartbeat, which a site carries).
func TestEdgeGrants(t *testing.T) {
	var imports []string
	for _, im := range auth.EdgeImports("AFLEET") {
		imports = append(imports, im.Type.String()+" "+string(im.Subject))
	}
	wantImports := []string{
		"service fleet.hb.*.*",
		"service fleet.hb.*.*.*", // every other app's heartbeats (DESIGN §9)
		"service $JS.API.CONSUMER.RESET.KV_fleet_plan.*",
		"service $JS.FC.KV_fleet_plan.*.*",
		"stream fleet.edge.*",
	}
	if diff := cmp.Diff(wantImports, imports); diff != "" {
		t.Errorf("EDGE imports (-want +got):\n%s", diff)
	}
	want := jwt.Permissions{
		Pub: jwt.Permission{Allow: jwt.StringList{
			"fleet.hb.*.*",
			"fleet.hb.*.*.*",
			"$JS.*.API.CONSUMER.RESET.KV_fleet_plan.edge_berlin",
			"$JS.FC.KV_fleet_plan.edge_berlin.*",
		}},
		Sub: jwt.Permission{Allow: jwt.StringList{
			"fleet.edge.berlin",
			"$JSC.R.>",
			"_INBOX_edge_berlin.>",
			"_R_.>",
		}},
	}
	if diff := cmp.Diff(want, auth.EdgePermissions("berlin")); diff != "" {
		t.Errorf("site berlin's grants (-want +got):\n%s", diff)
	}
	// Every import is of something FLEET exports.
	exported := map[string]bool{}
	for _, e := range auth.FleetExports() {
		exported[e.Type.String()+" "+string(e.Subject)] = true
	}
	for _, im := range imports {
		if !exported[im] {
			t.Errorf("EDGE imports %s, which FLEET does not export", im)
		}
	}
}

// TestIssueEdge: a site's leaf user lives in EDGE with its site's grants;
// minting it again is a rotation; a leaf user of an older fleetwave (in
// FLEET) given the same name moves to EDGE with its old key kept for
// revocation; bad site names and clashes with other users are refused;
// "auth user" refuses the leaf role.
func TestIssueEdge(t *testing.T) {
	d := auth.Dir{Path: t.TempDir()}
	if _, err := d.Init("test", auth.DefaultJetStreamLimits); err != nil {
		t.Fatal(err)
	}
	u1, out, err := d.IssueEdge("berlin", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if out != auth.CredsFile("edge-berlin") {
		t.Errorf("creds written to %s", out)
	}
	uc, err := jwt.DecodeUserClaims(u1.JWT)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(auth.EdgePermissions("berlin"), uc.Permissions); diff != "" {
		t.Errorf("minted grants (-want +got):\n%s", diff)
	}
	ec, err := jwt.DecodeAccountClaims(strings.TrimSpace(readFile(t, filepath.Join(d.Path, auth.FileEdgeJWT))))
	if err != nil {
		t.Fatal(err)
	}
	if uc.IssuerAccount != ec.Subject {
		t.Errorf("leaf user issued for account %s, EDGE is %s", uc.IssuerAccount, ec.Subject)
	}
	u2, _, err := d.IssueEdge("berlin", "", "")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := d.User("edge-berlin")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Site != "berlin" || rec.Account != auth.AccountEdge || rec.Role != auth.RoleLeaf || len(rec.Keys) != 2 || rec.Keys[1].UserKey != u2.PubKey {
		t.Errorf("record after a rotation: %+v", rec)
	}
	for _, c := range []struct{ site, name, want string }{
		{"Berlin", "", "one subject token"},
		{"ber.lin", "", "one subject token"},
		{"berlin", "admin", "has role admin"},
		{"paris", "edge-berlin", "leaf user of site berlin"},
		{"paris", "Bad Name", "use 1-64"},
	} {
		if _, _, err := d.IssueEdge(c.site, c.name, ""); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("IssueEdge(%q, %q): %v, want an error saying %q", c.site, c.name, err, c.want)
		}
	}
	if _, _, err := d.IssueUser("edge-paris", auth.RoleLeaf, ""); !errors.Is(err, auth.ErrEdgeRole) {
		t.Errorf("IssueUser with the leaf role: %v, want ErrEdgeRole", err)
	}
	if _, err := auth.ParseRole("leaf"); !errors.Is(err, auth.ErrEdgeRole) || !strings.Contains(err.Error(), "fleetctl edge add") {
		t.Errorf("ParseRole(leaf): %v", err)
	}

	// A leaf user minted in FLEET by an older fleetwave, under the name
	// the docs gave it: the site's new creds are a rotation of it.
	old := auth.Record{V: 1, Name: "edge-paris", Role: auth.RoleLeaf, Account: auth.AccountFleet,
		Keys: []auth.KeyRecord{{UserKey: "UOLDPARIS", IssuedAt: time.Now().UTC().Truncate(time.Second)}}}
	b, _ := json.Marshal(old)
	if err := auth.WriteFiles(d.Path, auth.File{Name: auth.RecordFile(old), Data: b}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.IssueEdge("paris", "", ""); err != nil {
		t.Fatal(err)
	}
	rec, err = d.User("edge-paris")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Account != auth.AccountEdge || len(rec.Keys) != 2 || rec.Keys[0].Account != auth.AccountFleet || rec.Keys[1].Account != "" {
		t.Errorf("legacy leaf user after edge add: %+v", rec)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
