package auth_test

import (
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
	is := auth.Issuer{Account: fleetPub, Signer: op.FleetSigner}
	agent, err := auth.Issuer{Account: agentsPub, Signer: op.AgentsSigner}.Agent("1b4e28ba-2fa1-4d2e-883f-0016d3cca427", "prod")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := is.User("edge-1", auth.RoleLeaf)
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
		{"leaf", leaf, view{signerPub, fleetPub, []string{jwt.ConnectionTypeLeafnode}, -1, true}},
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
	exported := map[jwt.Subject]bool{}
	for _, e := range fc.Exports {
		exported[e.Subject] = true
	}
	for _, a := range []*jwt.AccountClaims{ac, cc} {
		if len(a.Exports) != 0 || a.Limits.IsJSEnabled() || len(a.Imports) == 0 {
			t.Errorf("%s account: %d exports, JetStream %v, %d imports", a.Name, len(a.Exports), a.Limits.IsJSEnabled(), len(a.Imports))
		}
		for _, im := range a.Imports {
			if im.Account != fleetPub || !exported[im.Subject] {
				t.Errorf("%s imports %s from %s, which FLEET does not export", a.Name, im.Subject, im.Account)
			}
			if im.Subject == "$KV.fleet_plan.spec" || strings.HasPrefix(string(im.Subject), "$KV.fleet_config") ||
				strings.Contains(string(im.Subject), "STREAM.UPDATE") || strings.Contains(string(im.Subject), "CONSUMER") {
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
