package fleetctl

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestEveryCommandHasOutputFlag: every command takes -o, and -o json of
// a write is the one WriteResult envelope (checked below per command).
func TestEveryCommandHasOutputFlag(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Name() != "help" && c.Name() != "completion" && c.Flags().Lookup("output") == nil {
			t.Errorf("%q has no -o/--output", c.CommandPath())
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(NewCommand())
}

// TestWriteCommandsJSON runs each write command on the bus with -o json:
// stdout is one WriteResult whose revision is the key's revision in the
// bucket now, whose previous revision is the one before, and whose value
// is what the bucket holds.
func TestWriteCommandsJSON(t *testing.T) {
	cfg := rollout.Config{V: 1, Mode: rollout.ModeEnabled, Timezone: "UTC",
		Groups: []rollout.GroupConfig{rollout.DefaultGroup("staging"), rollout.DefaultGroup("prod")}}
	paused := rollout.DefaultSpec("1.3.2", "1.4.0")
	paused.Mode = rollout.ModePaused
	file := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(file, []byte("groups:\n  - name: only\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type stored struct {
		rev   uint64
		value any
	}
	spec := func(e *env) stored { s := e.spec(); return stored{s.Revision, s.Value} }
	config := func(e *env) stored { c := e.config(); return stored{c.Revision, c.Value} }
	prod := func(e *env) stored { s := e.status("prod"); return stored{s.Revision, s.Value} }
	for _, tc := range []struct {
		name     string
		args     []string
		spec     *rollout.Spec
		status   *rollout.GroupStatus
		bucket   string
		key      string
		read     func(*env) stored
		written  bool
		noBefore bool // the key does not exist before
	}{
		{name: "pause", args: []string{"pause"}, spec: ptr(rollout.DefaultSpec("1.3.2", "1.4.0")),
			bucket: kv.BucketPlan, key: kv.KeySpec, read: spec, written: true},
		{name: "pause paused", args: []string{"pause"}, spec: &paused,
			bucket: kv.BucketPlan, key: kv.KeySpec, read: spec},
		{name: "resume", args: []string{"resume"}, spec: &paused,
			bucket: kv.BucketPlan, key: kv.KeySpec, read: spec, written: true},
		{name: "plan set create", args: []string{"plan", "set", "--start", "1.3.2", "--target", "1.4.0"},
			bucket: kv.BucketPlan, key: kv.KeySpec, read: spec, written: true, noBefore: true},
		{name: "plan set target", args: []string{"plan", "set", "--target", "1.5.0"}, spec: ptr(rollout.DefaultSpec("1.3.2", "1.4.0")),
			bucket: kv.BucketPlan, key: kv.KeySpec, read: spec, written: true},
		{name: "plan set unchanged", args: []string{"plan", "set", "--target", "1.4.0"}, spec: ptr(rollout.DefaultSpec("1.3.2", "1.4.0")),
			bucket: kv.BucketPlan, key: kv.KeySpec, read: spec},
		{name: "config set", args: []string{"config", "set", "--group", "prod", "--start-hour", "4"},
			bucket: kv.BucketConfig, key: kv.KeyConfig, read: config, written: true},
		{name: "config apply", args: []string{"config", "apply", "-f", file},
			bucket: kv.BucketConfig, key: kv.KeyConfig, read: config, written: true},
		{name: "config reset", args: []string{"config", "reset"},
			bucket: kv.BucketConfig, key: kv.KeyConfig, read: config, written: true},
		{name: "config delete-group", args: []string{"config", "delete-group", "--group", "staging"},
			bucket: kv.BucketConfig, key: kv.KeyConfig, read: config, written: true},
		{name: "rollback", args: []string{"rollback", "--group", "prod", "--note", "500s"}, spec: ptr(rollout.DefaultSpec("1.3.2", "1.4.0")),
			status: ptr(groupStatus(rollout.StateActive)), bucket: kv.BucketPlan, key: kv.GroupKey("prod"), read: prod, written: true},
		{name: "mark-done", args: []string{"mark-done", "--group", "prod"}, spec: ptr(rollout.DefaultSpec("1.3.2", "1.4.0")),
			status: ptr(groupStatus(rollout.StateCanary)), bucket: kv.BucketPlan, key: kv.GroupKey("prod"), read: prod, written: true},
		{name: "run", args: []string{"run", "--group", "prod"}, spec: ptr(rollout.DefaultSpec("1.3.2", "1.4.0")),
			status: ptr(groupStatus(rollout.StateUnstarted)), bucket: kv.BucketPlan, key: kv.GroupKey("prod"), read: prod, written: true},
		{name: "reset", args: []string{"reset", "--group", "prod"}, spec: ptr(rollout.DefaultSpec("1.3.2", "1.4.0")),
			status: ptr(groupStatus(rollout.StateActive)), bucket: kv.BucketPlan, key: kv.GroupKey("prod"), read: prod, written: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.putConfig(cfg)
			if tc.spec != nil {
				e.putSpec(*tc.spec)
			}
			if tc.status != nil {
				e.putStatus(*tc.status)
			}
			var before uint64
			if !tc.noBefore {
				before = tc.read(e).rev
			}
			args := append([]string{"--nats", e.srv.URL()}, tc.args...)
			stdout, stderr, code := execute(t, append(args, "-o", "json")...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var got struct {
				WriteResult
				// Value as the bucket's type decodes it back.
				Value json.RawMessage `json:"value"`
			}
			oneObject(t, stdout, &got)
			now := tc.read(e)
			if got.Command != strings.Join(tc.args[:len(tc.args)-countFlags(tc.args)], " ") {
				t.Errorf("command %q for %q", got.Command, tc.args)
			}
			if got.Written != tc.written || got.Bucket != tc.bucket || got.Key != tc.key {
				t.Errorf("written %t, %s/%s; want %t, %s/%s", got.Written, got.Bucket, got.Key, tc.written, tc.bucket, tc.key)
			}
			if got.Revision != now.rev {
				t.Errorf("revision %d, but %s/%s is at %d", got.Revision, tc.bucket, tc.key, now.rev)
			}
			if got.PreviousRevision != before {
				t.Errorf("previous_revision %d, want %d (the revision before the command)", got.PreviousRevision, before)
			}
			if tc.written == (now.rev == before) {
				t.Errorf("written %t but the revision went %d → %d", tc.written, before, now.rev)
			}
			var value any
			if err := json.Unmarshal(got.Value, &value); err != nil {
				t.Fatalf("value: %v", err)
			}
			sameJSON(t, "value against the bucket", value, now.value)
		})
	}
}

// countFlags counts the trailing flag words of args (each flag takes a value).
func countFlags(args []string) int {
	i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "-") })
	if i < 0 {
		return 0
	}
	return len(args) - i
}

// TestGroupActionJSONCarriesTheEvent: the event a group action publishes is
// the one its JSON reports.
func TestGroupActionJSONCarriesTheEvent(t *testing.T) {
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	e.putStatus(groupStatus(rollout.StateActive))
	nc := e.srv.Conn("events")
	sub, err := nc.SubscribeSync(kv.EventSubject("prod"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := execute(t, "--nats", e.srv.URL(), "rollback", "--group", "prod", "--note", "500s", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got WriteResult
	oneObject(t, out, &got)
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ev rollout.Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if got.Event == nil {
		t.Fatalf("no event in %s", out)
	}
	if diff := cmp.Diff(ev, *got.Event); diff != "" {
		t.Errorf("event (-published +reported):\n%s", diff)
	}
}

// TestWriteJSONThroughTheBinary: pause and plan set -o json, run as a
// binary, print one object whose revision is the spec's in fleet_plan.
func TestWriteJSONThroughTheBinary(t *testing.T) {
	bin := fleetctlBin(t)
	e := newEnv(t)
	env := []string{"NATS_URL=" + e.srv.URL()}
	for _, args := range [][]string{
		{"plan", "set", "--start", "1.3.2", "--target", "1.4.0", "-o", "json"},
		{"pause", "-o", "json"},
		{"plan", "set", "--target", "1.4.1", "-o", "json"},
		{"resume", "-o", "json"},
	} {
		before, err := e.fleet.ReadSpec(e.ctx)
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			t.Fatal(err)
		}
		stdout, stderr, code := runBin(t, bin, env, args...)
		if code != 0 {
			t.Fatalf("fleetctl %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		var got WriteResult
		oneObject(t, stdout, &got)
		s := e.spec()
		if got.Revision != s.Revision || got.PreviousRevision != before.Revision || got.Bucket != kv.BucketPlan || got.Key != kv.KeySpec || !got.Written {
			t.Errorf("fleetctl %s: %+v; want written fleet_plan/spec revision %d (was %d)", strings.Join(args, " "), got, s.Revision, before.Revision)
		}
		sameJSON(t, "value", got.Value, s.Value)
	}
	if m := e.spec().Value.Mode; m != rollout.ModeEnabled {
		t.Errorf("mode %q after pause and resume", m)
	}
}

// TestAuthWritesJSON: the auth commands that write files say which, in the
// same envelope as the bus writes.
func TestAuthWritesJSON(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	stdout, stderr, code := execute(t, "auth", "init", "--dir", dir, "-o", "json")
	if code != 0 {
		t.Fatalf("auth init: %s", stderr)
	}
	var res WriteResult
	oneObject(t, stdout, &res)
	if res.Command != "auth init" || !res.Written || !slices.Contains(res.Files, filepath.Join(dir, auth.FileResolverConf)) {
		t.Errorf("auth init -o json: %+v", res)
	}
	for _, f := range res.Files {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("reported file: %v", err)
		}
	}
	stdout, stderr, code = execute(t, "auth", "user", "--dir", dir, "--name", "alice", "--role", "admin", "-o", "json")
	if code != 0 {
		t.Fatalf("auth user: %s", stderr)
	}
	res = WriteResult{}
	oneObject(t, stdout, &res)
	if want := filepath.Join(dir, auth.CredsFile("alice")); res.Command != "auth user" || !cmp.Equal(res.Files, []string{want}) {
		t.Errorf("auth user -o json: %+v, want files [%s]", res, want)
	}
	stdout, stderr, code = execute(t, "auth", "revoke", "--dir", dir, "--user", "alice", "--push=false", "-o", "json")
	if code != 0 {
		t.Fatalf("auth revoke: %s", stderr)
	}
	res = WriteResult{}
	oneObject(t, stdout, &res)
	if res.Command != "auth revoke" || !res.Written || !slices.Contains(res.Files, filepath.Join(dir, "accounts", "FLEET.jwt")) {
		t.Errorf("auth revoke -o json: %+v", res)
	}
}

// TestResetOfBadStatusJSON: reset of a group status that is not valid
// deletes it; its JSON says so, with the revision it deleted.
func TestResetOfBadStatusJSON(t *testing.T) {
	e := newEnv(t)
	e.putSpec(rollout.DefaultSpec("1.3.2", "1.4.0"))
	rev := e.putRaw(kv.BucketPlan, kv.GroupKey("prod"), streamInfoResponse)
	stdout, stderr, code := execute(t, "--nats", e.srv.URL(), "reset", "--group", "prod", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got WriteResult
	oneObject(t, stdout, &got)
	if !got.Written || !got.Deleted || got.Key != kv.GroupKey("prod") || got.PreviousRevision != rev || got.Event == nil {
		t.Errorf("reset -o json: %+v; want deleted %s at revision %d, with the event", got, kv.GroupKey("prod"), rev)
	}
	if _, err := e.fleet.ReadGroupStatus(e.ctx, "prod"); !errors.Is(err, kv.ErrNotFound) {
		t.Errorf("after reset: %v, want no status", err)
	}
}
