package fleetctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// legacyDir turns a fresh auth directory into what fleetctl wrote before the
// AGENTS, CONTROL and EDGE accounts existed: none of them, a FLEET account
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
		auth.FileControlJWT, auth.FileControlSeed, auth.FileControlSigningSeed,
		auth.FileEdgeJWT, auth.FileEdgeSeed, auth.FileEdgeSigningSeed} {
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
	for _, want := range []string{"minted account AGENTS", "minted account CONTROL", "minted account EDGE", "new creds for 2 agent(s) and controller(s)",
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
	if _, stderr, code := execute(t, "auth", "upgrade", "--dir", dir, "--finish", "--push=false"); code == 0 || !strings.Contains(stderr, "no agent, controller or leaf key left") {
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

// withoutAuditGrants turns a fresh auth directory into one minted before
// FLEET_AUDIT existed: the FLEET account exports, and the CONTROL account
// imports, nothing of FLEET_AUDIT or FLEET_EVENTS (no create, no info, no
// read) and no batched read of fleet_config's history, both
// re-signed with the operator's signing key as fleetctl then did.
func withoutAuditGrants(t *testing.T, dir string) {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(bytes.TrimSpace(b))
	}
	signer, err := nkeys.FromSeed([]byte(read(auth.FileOperatorSigningSeed)))
	if err != nil {
		t.Fatal(err)
	}
	audit := func(subject jwt.Subject) bool {
		return strings.Contains(string(subject), kv.StreamAudit) || strings.Contains(string(subject), kv.StreamEvents) ||
			string(subject) == "$JS.API.DIRECT.GET."+kv.StreamOf(kv.BucketConfig) // the batched read of the config's history
	}
	fc, err := jwt.DecodeAccountClaims(read(auth.FileFleetJWT))
	if err != nil {
		t.Fatal(err)
	}
	n := len(fc.Exports)
	fc.Exports = slices.DeleteFunc(fc.Exports, func(e *jwt.Export) bool { return audit(e.Subject) })
	if len(fc.Exports) == n {
		t.Fatal("FLEET exports nothing of FLEET_AUDIT: nothing to take away")
	}
	cc, err := jwt.DecodeAccountClaims(read(auth.FileControlJWT))
	if err != nil {
		t.Fatal(err)
	}
	cc.Imports = slices.DeleteFunc(cc.Imports, func(i *jwt.Import) bool { return audit(i.Subject) })
	fleetJWT, err := fc.Encode(signer)
	if err != nil {
		t.Fatal(err)
	}
	controlJWT, err := cc.Encode(signer)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := auth.ResolverConf(read(auth.FileOperatorJWT), read(auth.FileSystemJWT), fleetJWT, read(auth.FileAgentsJWT), controlJWT)
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteFiles(dir,
		auth.File{Name: auth.FileFleetJWT, Data: []byte(fleetJWT + "\n")},
		auth.File{Name: auth.FileControlJWT, Data: []byte(controlJWT + "\n")},
		auth.File{Name: auth.FileResolverConf, Data: conf},
	); err != nil {
		t.Fatal(err)
	}
}

// dirFiles is every file under dir by relative path, with its content.
func dirFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAuthUpgradeGrantsTheAuditTrail: a directory minted before FLEET_AUDIT
// existed gives its controller neither the stream's create nor its read:
// the controller runs without an audit trail and cannot read one. "auth
// upgrade" (the binary, against the running server) re-signs the FLEET
// exports and the CONTROL imports to this version's, says what it added,
// keeps the FLEET account's limits and revocations, and pushes; then the
// controller's creds, unchanged, create FLEET_AUDIT and read the timeline,
// also after a server restart from the rewritten resolver.conf. Run again,
// it changes no byte.
func TestAuthUpgradeGrantsTheAuditTrail(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatal(stderr)
	}
	// A revoked admin, whose revocation the upgrade must keep.
	if _, stderr, code := execute(t, "auth", "user", "--dir", dir, "--name", "alice", "--role", "admin"); code != 0 {
		t.Fatal(stderr)
	}
	if _, stderr, code := execute(t, "auth", "revoke", "--dir", dir, "--user", "alice", "--push=false"); code != 0 {
		t.Fatal(stderr)
	}
	withoutAuditGrants(t, dir)
	fleetClaims := func() *jwt.AccountClaims {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, auth.FileFleetJWT))
		if err != nil {
			t.Fatal(err)
		}
		ac, err := jwt.DecodeAccountClaims(string(bytes.TrimSpace(b)))
		if err != nil {
			t.Fatal(err)
		}
		return ac
	}
	old := fleetClaims()
	if len(old.Revocations) != 1 {
		t.Fatalf("FLEET revocations before the upgrade: %v", old.Revocations)
	}

	srv := natstest.StartConfig(t, filepath.Join(dir, auth.FileResolverConf))
	connect := func(creds string) *nats.Conn {
		t.Helper()
		nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: srv.URL(), Name: "test", Creds: filepath.Join(dir, creds), Log: natstest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	// The controller, as controller.Run does it: Ensure, drift reported.
	controllerFleet := func(nc *nats.Conn) (*kv.Fleet, []string) {
		t.Helper()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		var drift []string
		f, err := kv.Ensure(ctx, js, kv.Options{Memory: true, OnDrift: func(what string, diffs []string) {
			drift = append(drift, what+": "+strings.Join(diffs, "; "))
		}})
		if err != nil {
			t.Fatalf("controller's ensure: %v", err)
		}
		return f, drift
	}
	ctl := connect(auth.CredsFile(auth.UserController))
	f, drift := controllerFleet(ctl)
	if _, _, err := f.ReadTimeline(ctx, time.Time{}); err == nil {
		t.Fatal("before the upgrade the controller reads a timeline")
	}
	if len(drift) != 2 || !strings.Contains(drift[0], kv.StreamAudit) || !strings.Contains(drift[0], "may not create it") ||
		!strings.Contains(drift[1], kv.StreamEvents) || !strings.Contains(drift[1], "may not create it") {
		t.Fatalf("before the upgrade the controller reports %q, want FLEET_AUDIT and FLEET_EVENTS missing", drift)
	}

	bin := fleetctlBin(t)
	stdout, stderr, code := runBin(t, bin, nil, "--nats", srv.URL(), "auth", "upgrade", "--dir", dir)
	if code != 0 {
		t.Fatalf("auth upgrade: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"re-signed account FLEET with this version's exports",
		"+ $JS.API.STREAM.CREATE." + kv.StreamAudit, "+ $JS.API.STREAM.INFO." + kv.StreamAudit, "+ $JS.API.DIRECT.GET." + kv.StreamAudit,
		"+ $JS.API.STREAM.CREATE." + kv.StreamEvents, "+ $JS.API.STREAM.INFO." + kv.StreamEvents, "+ $JS.API.DIRECT.GET." + kv.StreamEvents,
		"+ $JS.API.DIRECT.GET." + kv.StreamOf(kv.BucketConfig) + "\n",
		"re-signed account CONTROL with this version's imports", "pushed to",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("auth upgrade output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "account AGENTS") || strings.Contains(stdout, "new creds") {
		t.Errorf("auth upgrade touched AGENTS or minted creds:\n%s", stdout)
	}
	now := fleetClaims()
	if !cmp.Equal(now.Revocations, old.Revocations) || !cmp.Equal(now.Limits, old.Limits) || !cmp.Equal(now.SigningKeys.Keys(), old.SigningKeys.Keys()) {
		t.Errorf("FLEET account changed beyond its exports: revocations %v → %v, limits %+v → %+v, signing keys %v → %v",
			old.Revocations, now.Revocations, old.Limits, now.Limits, old.SigningKeys.Keys(), now.SigningKeys.Keys())
	}

	// Again: nothing to do, no byte changed.
	before := dirFiles(t, dir)
	stdout, stderr, code = runBin(t, bin, nil, "--nats", srv.URL(), "auth", "upgrade", "--dir", dir, "-o", "json")
	if code != 0 {
		t.Fatalf("auth upgrade again: exit %d: %s", code, stderr)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	for _, k := range []string{"created", "reissued", "regranted"} {
		if l, ok := rep[k].([]any); !ok || len(l) != 0 {
			t.Errorf("second upgrade: %s is %v, want []", k, rep[k])
		}
	}
	if rep["written"] != false {
		t.Errorf("second upgrade: written %v", rep["written"])
	}
	if diff := cmp.Diff(before, dirFiles(t, dir)); diff != "" {
		t.Errorf("second upgrade changed files (-before +after):\n%s", diff)
	}

	// The controller's creds, unchanged, now create FLEET_AUDIT and read it.
	readBack := func(nc *nats.Conn) error {
		f, drift := controllerFleet(nc)
		if len(drift) != 0 {
			return fmt.Errorf("controller reports drift: %q", drift)
		}
		ev, _ := json.Marshal(rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, Reason: "test", At: time.Now().UTC()})
		if _, err := jetstreamPublish(ctx, nc, kv.EventSubject("prod"), ev); err != nil {
			return fmt.Errorf("event into the audit trail: %w", err)
		}
		entries, _, err := f.ReadTimeline(ctx, time.Time{})
		if err != nil {
			return err
		}
		if len(entries) == 0 || entries[len(entries)-1].Event == nil || entries[len(entries)-1].Event.Kind != rollout.EventHalt {
			return fmt.Errorf("timeline without the halt last: %+v", entries)
		}
		return nil
	}
	natstest.Eventually(t, 10*time.Second, func() error { return readBack(ctl) })
	srv.Restart()
	if err := readBack(connect(auth.CredsFile(auth.UserController))); err != nil {
		t.Errorf("after a server restart: %v", err)
	}
	if nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: srv.URL(), Name: "test", Creds: filepath.Join(dir, auth.CredsFile("alice")),
		Log: natstest.Logger(t)}); err == nil {
		nc.Close()
		t.Error("the revoked admin connects after the upgrade")
	}
}
