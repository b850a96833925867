package fleetctl

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// seedPattern matches an nkeys seed of a user, an account or an operator:
// 58 characters (a public key has 56, and may hold "SU" inside).
var seedPattern = regexp.MustCompile(`\bS[UAO][A-Z2-7]{56}\b`)

// authAuditRecords are the audit records of "auth" commands in history.
func authAuditRecords(rep HistoryReport) []*kv.AuditRecord {
	var out []*kv.AuditRecord
	for _, r := range rep.Records {
		if r.Audit != nil && strings.HasPrefix(r.Audit.Command, "auth ") {
			out = append(out, r.Audit)
		}
	}
	return out
}

func auditValue(t *testing.T, raw json.RawMessage) *authAuditValue {
	t.Helper()
	if len(raw) == 0 {
		return nil
	}
	var v authAuditValue
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("audit value %s: %v", raw, err)
	}
	return &v
}

// TestAuthWritesAreAudited: through the binary against an operator-mode
// server, "auth agent" and "auth user" with NATS_URL and "auth revoke"
// (which pushes) record who, why and what in FLEET_AUDIT: the actor from the
// directory's admin creds or --actor, the reason, the account, names,
// group, role and public keys before and after. Offline mints and
// --push=false revocations say on stderr that nothing was recorded, and
// record nothing. No seed and no JWT reaches the stream.
func TestAuthWritesAreAudited(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatal(stderr)
	}
	srv, connect := operatorServer(t, ctx, dir)
	bin := fleetctlBin(t)
	onBus := []string{"NATS_URL=" + srv.URL()}
	const id = rollout.AgentID("0a000000-0000-4000-8000-00000000000a")

	stdout, stderr, code := runBin(t, bin, onBus, "auth", "agent", "--dir", dir, "--id", string(id), "--group", "prod",
		"--reason", "new host web-42", "-o", "json")
	if code != 0 || strings.Contains(stderr, "no audit record") {
		t.Fatalf("auth agent on the bus: exit %d: %s", code, stderr)
	}
	var minted AuthAgentReport
	if err := json.Unmarshal([]byte(stdout), &minted); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	stdout, stderr, code = runBin(t, bin, onBus, "auth", "user", "--dir", dir, "--name", "alice", "--role", "admin", "--actor", "carol")
	if code != 0 {
		t.Fatalf("auth user on the bus: exit %d: %s", code, stderr)
	}
	aliceKey := strings.Fields(strings.SplitN(stdout, ": ", 2)[1])[0]
	if _, stderr, code = runBin(t, bin, onBus, "auth", "revoke", "--dir", dir, "--id", string(id), "--reason", "host retired"); code != 0 {
		t.Fatalf("auth revoke: exit %d: %s", code, stderr)
	}
	// Off the bus: said, not recorded.
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{nil, []string{"auth", "agent", "--dir", dir, "--group", "prod"}},
		{nil, []string{"auth", "user", "--dir", dir, "--name", "bob", "--role", "admin"}},
		{onBus, []string{"auth", "revoke", "--dir", dir, "--user", "alice", "--push=false"}},
	} {
		_, stderr, code := runBin(t, bin, c.env, c.args...)
		if code != 0 || !strings.Contains(stderr, "no audit record written") {
			t.Errorf("%v: exit %d, stderr %q: want a note that nothing was recorded", c.args, code, stderr)
		}
	}

	rep := historyOf(t, bin, append(onBus, "NATS_CREDS="+filepath.Join(dir, auth.CredsFile(auth.UserAdmin))))
	recs := authAuditRecords(rep)
	var got []string
	for _, r := range recs {
		got = append(got, r.Actor+" "+r.Command+" "+r.Reason)
	}
	if want := []string{"admin auth agent new host web-42", "carol auth user ", "admin auth revoke host retired"}; !cmp.Equal(got, want) {
		t.Fatalf("auth audit records (-want +got):\n%s", cmp.Diff(want, got))
	}
	agentFile := filepath.Join("agents", string(id)+".json")
	wantAgent := &authAuditValue{Account: auth.AccountAgents, Name: "agent-" + string(id), Role: auth.RoleAgent, AgentID: string(id),
		Group: "prod", Keys: []string{minted.UserKey}}
	revoked := *wantAgent
	revoked.Keys, revoked.Revoked = nil, []string{minted.UserKey}
	for i, c := range []struct {
		key           string
		before, after *authAuditValue
	}{
		{agentFile, nil, wantAgent},
		{filepath.Join("users", "alice.json"), nil, &authAuditValue{Account: auth.AccountFleet, Name: "alice", Role: auth.RoleAdmin, Keys: []string{aliceKey}}},
		{agentFile, wantAgent, &revoked},
	} {
		r := recs[i]
		if r.Bucket != "auth" || r.Key != c.key || r.Group != "" {
			t.Errorf("%s: bucket %q key %q group %q, want auth %s fleet-wide", r.Command, r.Bucket, r.Key, r.Group, c.key)
		}
		if diff := cmp.Diff(c.before, auditValue(t, r.Before)); diff != "" {
			t.Errorf("%s: before (-want +got):\n%s", r.Command, diff)
		}
		if diff := cmp.Diff(c.after, auditValue(t, r.After)); diff != "" {
			t.Errorf("%s: after (-want +got):\n%s", r.Command, diff)
		}
	}

	// Nothing secret in the stream: no seed of the directory, nothing
	// shaped like a seed, no JWT.
	admin, err := connect(filepath.Join(dir, auth.CredsFile(auth.UserAdmin)))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	secrets := seeds(t, dir)
	var stored int
	if _, err := kv.ScanFrom(ctx, admin, kv.StreamAudit, "", 1, func(m kv.StoredMsg) error {
		stored++
		data := string(m.Data)
		for _, s := range secrets {
			if strings.Contains(data, s) {
				t.Errorf("a seed of the auth directory is stored in %s (sequence %d)", kv.StreamAudit, m.Sequence)
			}
		}
		if seedPattern.MatchString(data) || strings.Contains(data, "eyJ") {
			t.Errorf("%s sequence %d holds a seed or a JWT: %s", kv.StreamAudit, m.Sequence, data)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if stored != 3 {
		t.Errorf("%s holds %d messages, want the 3 records", kv.StreamAudit, stored)
	}
}

// TestAuthAuditRefusalsAndFailures: on the bus, a mint without the --reason
// the config requires, or one whose bus does not answer, mints nothing
// (the directory is byte-identical); a revocation whose bus does not answer
// revokes all the same and says the record is missing; a mint whose record
// is not stored (no FLEET_AUDIT) writes the creds, says so and exits 1, and
// leaves a directory "auth ls" reads.
func TestAuthAuditRefusalsAndFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatal(stderr)
	}
	srv, connect := operatorServer(t, ctx, dir)
	bin := fleetctlBin(t)
	onBus := []string{"NATS_URL=" + srv.URL()}
	admin, err := connect(filepath.Join(dir, auth.CredsFile(auth.UserAdmin)))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := kv.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rollout.DefaultConfig()
	cfg.RequireReason = true
	if _, err := kv.Save(ctx, f.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runBin(t, bin, nil, "auth", "agent", "--dir", dir, "--id", "0a000000-0000-4000-8000-00000000000a", "--group", "prod"); code != 0 {
		t.Fatal(stderr)
	}

	unchanged := dirFiles(t, dir)
	for _, c := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"mint without the required reason", onBus, []string{"auth", "user", "--dir", dir, "--name", "bob", "--role", "admin"}, 2, "requires a reason"},
		{"revoke without the required reason", onBus, []string{"auth", "revoke", "--dir", dir, "--id", "0a000000-0000-4000-8000-00000000000a"}, 2, "requires a reason"},
		{"mint on a bus that does not answer", []string{"NATS_URL=nats://127.0.0.1:1"},
			[]string{"auth", "agent", "--dir", dir, "--group", "prod", "--reason", "x"}, 1, "nothing minted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := runBin(t, bin, c.env, c.args...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", code, c.code, c.want, stdout, stderr)
			}
			if diff := cmp.Diff(unchanged, dirFiles(t, dir)); diff != "" {
				t.Errorf("the directory changed (-before +after):\n%s", diff)
			}
		})
	}

	// The bus does not answer a revocation: it stands, the record is missing.
	stdout, stderr, code := runBin(t, bin, nil, "--nats", "nats://127.0.0.1:1", "--timeout", "2s",
		"auth", "revoke", "--dir", dir, "--id", "0a000000-0000-4000-8000-00000000000a", "--reason", "stolen")
	if code != 1 || !strings.Contains(stderr, "audit record was NOT stored") || !strings.Contains(stdout, "revoked 1 key(s)") {
		t.Errorf("revoke without a bus: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	rec, err := auth.Dir{Path: dir}.Agent("0a000000-0000-4000-8000-00000000000a")
	if err != nil || rec.Keys[0].RevokedAt.IsZero() {
		t.Errorf("agent record after the revocation: %+v, %v", rec, err)
	}

	// No FLEET_AUDIT: the creds are minted, the record is missing, exit 1.
	if err := js.DeleteStream(ctx, kv.StreamAudit); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = runBin(t, bin, onBus, "auth", "user", "--dir", dir, "--name", "dave", "--role", "admin", "--reason", "on-call")
	if code != 1 || !strings.Contains(stderr, "auth user: auth/users/dave.json was written, but the audit record was NOT stored") ||
		!strings.Contains(stdout, "creds written to") {
		t.Errorf("auth user without FLEET_AUDIT: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, auth.CredsFile("dave"))); err != nil {
		t.Error(err)
	}
	out, stderr, code := runBin(t, bin, nil, "auth", "ls", "--dir", dir, "-o", "json")
	if code != 0 || !strings.Contains(out, `"name": "dave"`) {
		t.Errorf("auth ls after a failed record: exit %d: %s\n%s", code, stderr, out)
	}
}
