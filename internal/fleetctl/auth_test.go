package fleetctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// seeds returns every seed stored under dir: nkey files and the seed half of
// every creds file.
func seeds(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch filepath.Ext(path) {
		case ".nk":
			out = append(out, strings.TrimSpace(string(data)))
		case ".creds":
			kp, err := jwt.ParseDecoratedNKey(data)
			if err != nil {
				return err
			}
			seed, err := kp.Seed()
			if err != nil {
				return err
			}
			out = append(out, string(seed))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAuthInitWritesSecretsPrivatelyAndNeverPrintsThem(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	stdout, stderr, code := execute(t, "auth", "init", "--dir", dir, "--js-disk", "1GiB")
	if code != 0 {
		t.Fatalf("auth init: exit %d: %s", code, stderr)
	}
	var secret, public []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		mode := info.Mode().Perm()
		isSecret := strings.HasSuffix(path, ".nk") || strings.HasSuffix(path, ".creds")
		switch {
		case d.IsDir() && (rel == "keys" || rel == "creds") && mode != 0o700:
			t.Errorf("%s/ is %v, want 0700", rel, mode)
		case !d.IsDir() && isSecret && mode != 0o600:
			t.Errorf("%s is %v, want 0600", rel, mode)
		case !d.IsDir() && !isSecret && mode != 0o644:
			t.Errorf("%s is %v, want 0644", rel, mode)
		}
		if !d.IsDir() {
			if isSecret {
				secret = append(secret, rel)
			} else {
				public = append(public, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantSecret := []string{"creds/admin.creds", "creds/controller.creds", "creds/sys.creds", "keys/AGENTS-signing.nk",
		"keys/AGENTS.nk", "keys/CONTROL-signing.nk", "keys/CONTROL.nk", "keys/EDGE-signing.nk", "keys/EDGE.nk", "keys/FLEET-signing.nk", "keys/FLEET.nk", "keys/SYS.nk",
		"keys/operator-signing.nk", "keys/operator.nk"}
	if diff := cmp.Diff(wantSecret, secret); diff != "" {
		t.Errorf("secret files (-want +got):\n%s", diff)
	}
	allSeeds := seeds(t, dir)
	for _, s := range allSeeds {
		if strings.Contains(stdout+stderr, s) {
			t.Errorf("a seed was printed:\n%s", stdout)
		}
	}
	for _, f := range public {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range allSeeds {
			if strings.Contains(string(data), s) {
				t.Errorf("public file %s holds a seed", f)
			}
		}
	}
	// The FLEET account carries the JetStream limits.
	token, err := os.ReadFile(filepath.Join(dir, auth.FileFleetJWT))
	if err != nil {
		t.Fatal(err)
	}
	ac, err := jwt.DecodeAccountClaims(strings.TrimSpace(string(token)))
	if err != nil {
		t.Fatal(err)
	}
	if got := ac.Limits.JetStreamLimits.DiskStorage; got != 1<<30 {
		t.Errorf("FLEET disk limit %d, want 1GiB", got)
	}

	// A second init would lock out everything issued so far.
	_, stderr, code = execute(t, "auth", "init", "--dir", dir)
	if code != cliutil.ExitFailure || !strings.Contains(stderr, "already initialised") {
		t.Errorf("second init: exit %d, stderr %q; want a refusal", code, stderr)
	}
}

func TestAuthUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"auth", "init"}, // no --dir
		{"auth", "agent", "--dir", dir, "--group", "Bad.Group"},
		{"auth", "agent", "--dir", dir, "--group", "blue", "--id", "not-a-uuid"},
		{"auth", "user", "--dir", dir, "--name", "x", "--role", "root"},
		{"auth", "revoke", "--dir", dir},
		{"auth", "revoke", "--dir", dir, "--id", "0a000000-0000-4000-8000-00000000000a", "--user", "admin"},
		{"auth", "init", "--dir", dir, "--js-disk", "lots"},
		{"edge", "init", "--hub-domain", "", "--site", "berlin"},
		{"edge", "init", "--site", ""},
		{"edge", "init", "--site", "ber.lin"},
		{"edge", "add", "--dir", dir},
		{"edge", "add", "--dir", dir, "--site", "Berlin"},
		// A leaf user is one site's: "edge add".
		{"auth", "user", "--dir", dir, "--name", "edge-x", "--role", "leaf"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Setenv("FLEETWAVE_AUTH_DIR", "")
			if _, stderr, code := execute(t, args...); code != cliutil.ExitUsage {
				t.Errorf("exit %d, want %d (stderr: %s)", code, cliutil.ExitUsage, stderr)
			}
		})
	}
}

// watchedConn is a connection that records why it was disconnected and why
// it could not reconnect.
// operatorServer starts a server in operator mode from the auth directory
// dir, creates the stream and buckets with the controller's creds, and
// returns it with a function that connects to it with creds.
func operatorServer(t *testing.T, ctx context.Context, dir string) (*natstest.Server, func(creds string, extra ...nats.Option) (*nats.Conn, error)) {
	t.Helper()
	srv := natstest.StartConfig(t, filepath.Join(dir, auth.FileResolverConf))
	connect := func(creds string, extra ...nats.Option) (*nats.Conn, error) {
		return natsutil.Connect(natsutil.ConnectOptions{URL: srv.URL(), Name: "test", Creds: creds, Log: natstest.Logger(t), Extra: extra})
	}
	ctl, err := connect(filepath.Join(dir, auth.CredsFile(auth.UserController)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctl.Close)
	js, err := jetstream.New(ctl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Ensure(ctx, js, kv.Options{Memory: true}); err != nil {
		t.Fatal(err)
	}
	return srv, connect
}

// agentConnTo connects to url as agent id with creds, recording the
// connection's asynchronous errors (disconnects, refusals).
func agentConnTo(t *testing.T, url string, id rollout.AgentID, creds string) (*watchedConn, error) {
	t.Helper()
	w := &watchedConn{}
	nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: url, Name: "test", Creds: creds, Log: natstest.Logger(t),
		Extra: []nats.Option{nats.CustomInboxPrefix(kv.AgentInboxPrefix(string(id))),
			nats.DisconnectErrHandler(w.record), nats.ReconnectErrHandler(w.record),
			nats.ErrorHandler(func(nc *nats.Conn, _ *nats.Subscription, err error) { w.record(nc, err) })}})
	if err != nil {
		return nil, err
	}
	w.nc = nc
	t.Cleanup(nc.Close)
	return w, nil
}

// heartbeatLands publishes one heartbeat of agent id in group over nc and
// waits for the heartbeat stream's ack.
func heartbeatLands(ctx context.Context, nc *nats.Conn, id rollout.AgentID, group string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	data, err := heartbeat.Encode(&heartbeat.Heartbeat{V: 1, AgentID: id, Group: group, UpdaterVersion: "0.1.0", At: time.Now().UTC(), Seq: 1})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ack, err := js.Publish(ctx, heartbeat.SubjectFor(group, id), data)
	if err == nil && ack.Stream != kv.StreamHB {
		err = fmt.Errorf("acked by stream %s, not %s", ack.Stream, kv.StreamHB)
	}
	return err
}

type watchedConn struct {
	nc   *nats.Conn
	mu   sync.Mutex
	errs []string
}

func (w *watchedConn) record(_ *nats.Conn, err error) {
	if err == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, err.Error())
}

func (w *watchedConn) saw(substr string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.errs {
		if strings.Contains(strings.ToLower(e), substr) {
			return nil
		}
	}
	return errors.New("not yet " + substr + "; errors so far: " + strings.Join(w.errs, "; "))
}

// TestAuthRevokeDisconnectsAgent mints an agent, connects it, revokes it with
// "fleetctl auth revoke" (which pushes the account to the running server):
// the agent is disconnected at once, cannot reconnect, and stays locked out
// after a server restart. A rotation (mint again, revoke --keep-current)
// locks out the old creds and keeps the new ones.
func TestAuthRevokeDisconnectsAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatal(stderr)
	}
	srv, connect := operatorServer(t, ctx, dir)

	const id = rollout.AgentID("0a000000-0000-4000-8000-00000000000a")
	stdout, stderr, code := execute(t, "auth", "agent", "--dir", dir, "--id", string(id), "--group", "blue", "-o", "json")
	if code != 0 {
		t.Fatal(stderr)
	}
	var rep AuthAgentReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	agentConn := func(creds string) (*watchedConn, error) { return agentConnTo(t, srv.URL(), id, creds) }
	heartbeatOK := func(nc *nats.Conn) error { return heartbeatLands(ctx, nc, id, "blue") }
	first, err := agentConn(rep.Creds)
	if err != nil {
		t.Fatal(err)
	}
	if err := heartbeatOK(first.nc); err != nil {
		t.Fatalf("agent heartbeat before revocation: %v", err)
	}

	// Rotation: new creds for the same agent; both work until the old key
	// is revoked.
	rotated := filepath.Join(t.TempDir(), "agent.creds")
	if _, stderr, code := execute(t, "auth", "agent", "--dir", dir, "--id", string(id), "--group", "blue", "--out", rotated); code != 0 {
		t.Fatal(stderr)
	}
	second, err := agentConn(rotated)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = execute(t, "--nats", srv.URL(), "auth", "revoke", "--dir", dir, "--id", string(id), "--keep-current")
	if code != 0 {
		t.Fatalf("revoke --keep-current: %s", stderr)
	}
	if !strings.Contains(stdout, "revoked 1 key(s)") || !strings.Contains(stdout, "pushed to") {
		t.Errorf("revoke output:\n%s", stdout)
	}
	natstest.Eventually(t, 10*time.Second, func() error { return first.saw("revoked") })
	if err := heartbeatOK(second.nc); err != nil {
		t.Errorf("rotated creds after revoking the old key: %v", err)
	}

	// Decommission: every key of the agent.
	if _, stderr, code := execute(t, "--nats", srv.URL(), "auth", "revoke", "--dir", dir, "--id", string(id)); code != 0 {
		t.Fatalf("revoke: %s", stderr)
	}
	natstest.Eventually(t, 10*time.Second, func() error { return second.saw("revoked") })
	// Its reconnects are refused, and so is a new connection.
	natstest.Eventually(t, 20*time.Second, func() error { return second.saw("authorization violation") })
	if second.nc.IsConnected() {
		t.Error("revoked agent is connected again")
	}
	for _, creds := range []string{rep.Creds, rotated} {
		if nc, err := connect(creds); err == nil {
			nc.Close()
			t.Errorf("revoked creds %s still connect", filepath.Base(creds))
		}
	}

	// The revocation is in resolver.conf and in the server's resolver: a
	// restarted server keeps the agent out and lets the admin in.
	srv.Restart()
	if nc, err := connect(rotated); err == nil {
		nc.Close()
		t.Error("revoked creds connect after a server restart")
	}
	nc, err := connect(filepath.Join(dir, auth.CredsFile(auth.UserAdmin)))
	if err != nil {
		t.Fatalf("admin after restart: %v", err)
	}
	nc.Close()

	out, _, _ := execute(t, "auth", "ls", "--dir", dir, "-o", "json")
	var ls AuthListReport
	if err := json.Unmarshal([]byte(out), &ls); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range ls.Users {
		if r.AgentID != string(id) {
			continue
		}
		found = true
		if len(r.Keys) != 2 || r.Keys[0].RevokedAt.IsZero() || r.Keys[1].RevokedAt.IsZero() {
			t.Errorf("agent record after revoking both keys: %+v", r)
		}
	}
	if !found {
		t.Fatalf("auth ls lists no record of agent %s:\n%s", id, out)
	}
	var table bytes.Buffer
	o := &AuthListOptions{AuthOptions: &AuthOptions{Global: &Global{Out: &table, Now: time.Now}, Dir: dir}, Output: "table"}
	if err := RunAuthList(ctx, o); err != nil {
		t.Fatal(err)
	}
	checkWidth(t, table.String())
}
