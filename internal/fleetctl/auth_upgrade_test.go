package fleetctl

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// legacyDir turns a fresh auth directory into what fleetctl wrote before the
// AGENTS and CONTROL accounts existed: neither account, a FLEET account
// without exports, and agents and the controller minted as FLEET users. It
// mints one agent that way (creds returned), the controller user, and
// records a decommissioned agent (every key revoked).
func legacyDir(t *testing.T, dir string, id, gone rollout.AgentID) (creds string) {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(bytes.TrimSpace(b))
	}
	seed := func(name string) nkeys.KeyPair {
		kp, err := nkeys.FromSeed([]byte(read(name)))
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	for _, f := range []string{auth.FileAgentsJWT, auth.FileAgentsSeed, auth.FileAgentsSigningSeed,
		auth.FileControlJWT, auth.FileControlSeed, auth.FileControlSigningSeed} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	fc, err := jwt.DecodeAccountClaims(read(auth.FileFleetJWT))
	if err != nil {
		t.Fatal(err)
	}
	fc.Exports = nil
	fleetJWT, err := fc.Encode(seed(auth.FileOperatorSigningSeed))
	if err != nil {
		t.Fatal(err)
	}
	conf, err := auth.ResolverConf(read(auth.FileOperatorJWT), read(auth.FileSystemJWT), fleetJWT)
	if err != nil {
		t.Fatal(err)
	}
	fleet := auth.Issuer{Account: fc.Subject, Signer: seed(auth.FileFleetSigningSeed)}
	u, err := fleet.Agent(id, "blue")
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := fleet.User(auth.UserController, auth.RoleController)
	if err != nil {
		t.Fatal(err)
	}
	ctlRec, err := json.Marshal(auth.Record{V: 1, Name: auth.UserController, Role: auth.RoleController, Account: auth.AccountFleet,
		Keys: []auth.KeyRecord{{UserKey: ctl.PubKey, IssuedAt: ctl.IssuedAt}}})
	if err != nil {
		t.Fatal(err)
	}
	record := func(id rollout.AgentID, k auth.KeyRecord) auth.File {
		b, err := json.Marshal(auth.Record{V: 1, Name: "agent-" + string(id), Role: auth.RoleAgent, Account: auth.AccountFleet,
			AgentID: string(id), Group: "blue", Keys: []auth.KeyRecord{k}})
		if err != nil {
			t.Fatal(err)
		}
		return auth.File{Name: filepath.Join("agents", string(id)+".json"), Data: b}
	}
	if err := auth.WriteFiles(dir,
		auth.File{Name: auth.FileFleetJWT, Data: []byte(fleetJWT + "\n")},
		auth.File{Name: auth.FileResolverConf, Data: conf},
		auth.File{Name: auth.AgentCredsFile(id), Data: u.Creds, Secret: true},
		record(id, auth.KeyRecord{UserKey: u.PubKey, IssuedAt: u.IssuedAt}),
		record(gone, auth.KeyRecord{UserKey: "UAGONE", IssuedAt: u.IssuedAt, RevokedAt: u.IssuedAt}),
		auth.File{Name: auth.CredsFile(auth.UserController), Data: ctl.Creds, Secret: true},
		auth.File{Name: filepath.Join("users", auth.UserController+".json"), Data: ctlRec},
	); err != nil {
		t.Fatal(err)
	}
	// The host keeps its copy; "auth upgrade" rewrites the directory's.
	creds = filepath.Join(t.TempDir(), "legacy.creds")
	if err := os.WriteFile(creds, u.Creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return creds
}

// TestAuthUpgradeFromLegacyLayout walks the documented upgrade of a fleet
// minted before the AGENTS account, against a running operator-mode server:
// the old directory refuses to mint agents and names the command; "auth
// upgrade" mints AGENTS, re-mints the agent (not the decommissioned one) and
// pushes; new creds work in AGENTS while the old ones still work; running it
// again changes nothing; "--finish" revokes the old FLEET key, which is
// disconnected, and a restarted server keeps it out.
func TestAuthUpgradeFromLegacyLayout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const id, gone = rollout.AgentID("0a000000-0000-4000-8000-00000000000a"), rollout.AgentID("0a000000-0000-4000-8000-0000000000ff")
	dir := t.TempDir()
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatal(stderr)
	}
	legacyCreds := legacyDir(t, dir, id, gone)
	srv, connect := operatorServer(t, ctx, dir)
	agentConn := func(creds string) (*watchedConn, error) { return agentConnTo(t, srv.URL(), id, creds) }
	beat := func(nc *nats.Conn) error { return heartbeatLands(ctx, nc, id, "blue") }
	legacy, err := agentConn(legacyCreds)
	if err != nil {
		t.Fatal(err)
	}
	if err := beat(legacy.nc); err != nil {
		t.Fatalf("legacy agent before the upgrade: %v", err)
	}

	// The old directory cannot mint an agent, and says what to run.
	if _, stderr, code := execute(t, "auth", "agent", "--dir", dir, "--id", string(id), "--group", "blue"); code == 0 ||
		!strings.Contains(stderr, "fleetctl auth upgrade") {
		t.Errorf("auth agent on a legacy directory: exit %d, %s", code, stderr)
	}

	stdout, stderr, code := execute(t, "--nats", srv.URL(), "auth", "upgrade", "--dir", dir)
	if code != 0 {
		t.Fatalf("auth upgrade: %s", stderr)
	}
	for _, want := range []string{"minted account AGENTS", "minted account CONTROL", "new creds for 2 agent(s) and controller(s)",
		string(id), "creds/controller.creds", "skipped 1", "pushed to"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("auth upgrade output lacks %q:\n%s", want, stdout)
		}
	}
	fresh, err := agentConn(filepath.Join(dir, auth.AgentCredsFile(id)))
	if err != nil {
		t.Fatalf("new creds: %v", err)
	}
	natstest.Eventually(t, 10*time.Second, func() error { return beat(fresh.nc) })
	admin, err := connect(filepath.Join(dir, auth.CredsFile(auth.UserAdmin)))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := jetstreamPublish(ctx, admin, kv.KeySubject(kv.BucketPlan, kv.KeySpec), []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.DirectGetLast(ctx, fresh.nc, kv.PlanStream, kv.KeySubject(kv.BucketPlan, kv.KeySpec)); err != nil {
		t.Errorf("new creds read the spec: %v", err)
	}
	if err := beat(legacy.nc); err != nil {
		t.Errorf("legacy creds stop working before --finish: %v", err)
	}

	// Again: nothing to do.
	stdout, stderr, code = execute(t, "--nats", srv.URL(), "auth", "upgrade", "--dir", dir, "-o", "json")
	if code != 0 {
		t.Fatalf("auth upgrade again: %s", stderr)
	}
	var rep AuthUpgradeReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if len(rep.Created) != 0 || len(rep.Reissued) != 0 {
		t.Errorf("second upgrade did something: %+v", rep)
	}

	stdout, stderr, code = execute(t, "--nats", srv.URL(), "auth", "upgrade", "--dir", dir, "--finish")
	if code != 0 {
		t.Fatalf("auth upgrade --finish: %s", stderr)
	}
	if !strings.Contains(stdout, "revoked 2 key(s) in account FLEET") {
		t.Errorf("--finish output:\n%s", stdout)
	}
	natstest.Eventually(t, 10*time.Second, func() error { return legacy.saw("revoked") })
	if err := beat(fresh.nc); err != nil {
		t.Errorf("new creds after --finish: %v", err)
	}
	srv.Restart()
	if nc, err := connect(legacyCreds); err == nil {
		nc.Close()
		t.Error("legacy creds connect after --finish and a restart")
	}
	nc, err := connect(filepath.Join(dir, auth.AgentCredsFile(id)))
	if err != nil {
		t.Fatalf("new creds after a restart: %v", err)
	}
	nc.Close()
	if _, stderr, code := execute(t, "auth", "upgrade", "--dir", dir, "--finish", "--push=false"); code == 0 || !strings.Contains(stderr, "no agent or controller key left") {
		t.Errorf("second --finish: exit %d, %s", code, stderr)
	}
}

func jetstreamPublish(ctx context.Context, nc *nats.Conn, subject string, data []byte) (*jetstream.PubAck, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return js.Publish(ctx, subject, data)
}
