package fleetctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/attacktest"
	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// appsConfig is a fleet of two apps: core (the default, today's keys) and web.
func appsConfig() rollout.Config {
	cfg := rollout.DefaultConfig()
	cfg.Groups = []rollout.GroupConfig{rollout.DefaultGroup("blue")}
	cfg.Apps = []rollout.AppConfig{{Name: "core"}, {Name: "web", Installer: rollout.InstallerScript}}
	return cfg
}

// appHeartbeat publishes one heartbeat of agent id in group for the app of
// ns over nc and waits for the heartbeat stream's ack (bounded: a subject no
// import carries has no responders, one the agent may not publish times
// out).
func appHeartbeat(ctx context.Context, nc *nats.Conn, ns kv.AppNS, id rollout.AgentID, group string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	data, err := heartbeat.Encode(&heartbeat.Heartbeat{V: 1, AgentID: id, Group: group, App: ns.Key(), UpdaterVersion: "0.1.0", At: time.Now().UTC(), Seq: 1})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ack, err := js.Publish(ctx, ns.HBSubject(group, id), data)
	if err == nil && ack.Stream != kv.StreamHB {
		err = fmt.Errorf("acked by stream %s, not %s", ack.Stream, kv.StreamHB)
	}
	return err
}

func readKey(ctx context.Context, nc *nats.Conn, key string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := kv.DirectGetLast(ctx, nc, kv.PlanStream, kv.KeySubject(kv.BucketPlan, key))
	return err
}

// TestAuthUpgradeGrantsApps: a deployment minted before apps (its account
// JWTs exactly as that code wrote them: internal/attacktest's testdata) with
// an agent and the controller on their creds of then. A second app's agent
// minted with --apps cannot heartbeat or read its app until "fleetctl auth
// upgrade" (the binary, against the running server) re-signs FLEET, AGENTS,
// CONTROL and EDGE, naming the subjects added, re-issuing no agent, and
// pushes: then the old agent, on the very same creds file, keeps
// heartbeating and reading its plan, the new agent heartbeats and reads web,
// and the controller, named as needing new creds for web's keys, writes
// them once re-minted. Run again, the upgrade changes no byte.
func TestAuthUpgradeGrantsApps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatal(stderr)
	}
	const (
		oldID = rollout.AgentID("0a000000-0000-4000-8000-0000000000a1")
		newID = rollout.AgentID("0a000000-0000-4000-8000-0000000000a2")
	)
	// The host of before apps: minted without --apps, its creds kept.
	if _, stderr, code := execute(t, "auth", "agent", "--dir", dir, "--group", "blue", "--id", string(oldID)); code != 0 {
		t.Fatal(stderr)
	}
	hostCreds, err := os.ReadFile(filepath.Join(dir, auth.AgentCredsFile(oldID)))
	if err != nil {
		t.Fatal(err)
	}
	attacktest.MakeBeforeApps(t, auth.Dir{Path: dir})

	srv, connect := operatorServer(t, ctx, dir)
	admin, err := connect(filepath.Join(dir, auth.CredsFile(auth.UserAdmin)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := kv.Open(ctx, ajs)
	if err != nil {
		t.Fatal(err)
	}
	cfg := appsConfig()
	if _, err := kv.Save(ctx, f.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	web := kv.OtherNS("web")
	core := kv.DefaultNS(cfg)
	for _, k := range []string{core.Spec(), core.Group("blue"), web.Spec(), web.Group("blue")} {
		if _, err := f.Plan.Put(ctx, k, []byte(`{"v":1}`)); err != nil {
			t.Fatal(err)
		}
	}

	// The host starts running web too: new creds for core and web, the
	// default app read from the config on the bus.
	stdout, stderr, code := execute(t, "--nats", srv.URL(), "auth", "agent", "--dir", dir, "--group", "blue", "--id", string(newID), "--apps", "core,web")
	if code != 0 || !strings.Contains(stdout, "apps core,web") {
		t.Fatalf("auth agent --apps core,web: exit %d\n%s%s", code, stdout, stderr)
	}
	rec, err := auth.Dir{Path: dir}.Agent(newID)
	if err != nil || rec.Apps == nil || rec.Apps.String() != "core,web" {
		t.Fatalf("record of the new agent: %+v, %v", rec.Apps, err)
	}
	hostFile := filepath.Join(t.TempDir(), "host.creds")
	if err := os.WriteFile(hostFile, hostCreds, 0o600); err != nil {
		t.Fatal(err)
	}
	agent := func(id rollout.AgentID, creds string) *nats.Conn {
		t.Helper()
		w, err := agentConnTo(t, srv.URL(), id, creds)
		if err != nil {
			t.Fatal(err)
		}
		return w.nc
	}
	oldAgent, newAgent := agent(oldID, hostFile), agent(newID, filepath.Join(dir, auth.AgentCredsFile(newID)))
	ctlConn := func() *nats.Conn {
		t.Helper()
		nc, err := connect(filepath.Join(dir, auth.CredsFile(auth.UserController)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ctl := ctlConn()
	ctlWrite := func(key string) error {
		js, err := jetstream.New(ctl)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err = js.Publish(ctx, kv.KeySubject(kv.BucketPlan, key), []byte(`{"v":1}`))
		return err
	}
	// Before the upgrade: the default app works for both, web for neither.
	for name, err := range map[string]error{
		"old agent heartbeats":         appHeartbeat(ctx, oldAgent, core, oldID, "blue"),
		"old agent reads spec":         readKey(ctx, oldAgent, core.Spec()),
		"new agent heartbeats core":    appHeartbeat(ctx, newAgent, core, newID, "blue"),
		"controller writes group.blue": ctlWrite(core.Group("blue")),
	} {
		if err != nil {
			t.Errorf("before the upgrade, %s: %v", name, err)
		}
	}
	if err := appHeartbeat(ctx, newAgent, web, newID, "blue"); err == nil {
		t.Fatal("before the upgrade the new agent heartbeats web: the directory already grants apps")
	}
	if err := readKey(ctx, newAgent, web.Spec()); err == nil {
		t.Fatal("before the upgrade the new agent reads web.spec")
	}

	bin := fleetctlBin(t)
	stdout, stderr, code = runBin(t, bin, nil, "--nats", srv.URL(), "auth", "upgrade", "--dir", dir)
	if code != 0 {
		t.Fatalf("auth upgrade: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"re-signed account FLEET with this version's exports",
		"+ fleet.hb.*.*.*",
		"+ $JS.API.DIRECT.GET.KV_fleet_plan.$KV.fleet_plan.*.spec",
		"+ $JS.API.DIRECT.GET.KV_fleet_plan.$KV.fleet_plan.*.group.*",
		"+ $KV.fleet_plan.*.group.*", "+ $KV.fleet_plan.*.quarantine",
		"re-signed account AGENTS with this version's imports",
		"re-signed account CONTROL with this version's imports",
		"re-signed account EDGE with this version's imports",
		"1 controller(s) whose creds lack this version's grants",
		"fleetctl auth user --name controller --role controller",
		"pushed to",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("auth upgrade output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "new creds") || strings.Contains(stdout, "\n  - ") {
		t.Errorf("auth upgrade re-issued creds or removed a grant:\n%s", stdout)
	}
	if b, err := os.ReadFile(filepath.Join(dir, auth.AgentCredsFile(oldID))); err != nil || string(b) != string(hostCreds) {
		t.Errorf("the old agent's creds were rewritten (%v)", err)
	}

	// After: the old host on its very creds file, the new one on web, both
	// on connections made before the upgrade and on new ones.
	oldAgain := agent(oldID, hostFile)
	for name, check := range map[string]func() error{
		"old agent heartbeats": func() error { return appHeartbeat(ctx, oldAgent, core, oldID, "blue") },
		"old agent reads spec and group.blue": func() error {
			return errors.Join(readKey(ctx, oldAgent, core.Spec()), readKey(ctx, oldAgent, core.Group("blue")))
		},
		"old agent, connected again": func() error { return appHeartbeat(ctx, oldAgain, core, oldID, "blue") },
		"new agent heartbeats web":   func() error { return appHeartbeat(ctx, newAgent, web, newID, "blue") },
		"new agent reads web.spec, web.group": func() error {
			return errors.Join(readKey(ctx, newAgent, web.Spec()), readKey(ctx, newAgent, web.Group("blue")))
		},
		"new agent still heartbeats core": func() error { return appHeartbeat(ctx, newAgent, core, newID, "blue") },
	} {
		if err := check(); err != nil {
			t.Errorf("after the upgrade, %s: %v", name, err)
		}
	}
	if err := appHeartbeat(ctx, oldAgent, web, oldID, "blue"); err == nil {
		t.Error("after the upgrade the old agent (no --apps) heartbeats web")
	}
	// The controller's own JWT lacks web's keys until it is minted again.
	if err := ctlWrite(web.Group("blue")); err == nil {
		t.Error("the controller's old creds write web.group.blue")
	}
	if _, stderr, code := execute(t, "auth", "user", "--dir", dir, "--name", auth.UserController, "--role", "controller"); code != 0 {
		t.Fatal(stderr)
	}
	ctl = ctlConn()
	if err := errors.Join(ctlWrite(web.Group("blue")), ctlWrite(web.Quarantine()), ctlWrite(core.Group("blue"))); err != nil {
		t.Errorf("the controller's new creds: %v", err)
	}
	if err := ctlWrite(web.Spec()); err == nil {
		t.Error("the controller's new creds write web.spec")
	}

	// Again: nothing to do, no byte changed, no controller named.
	before := dirFiles(t, dir)
	stdout, stderr, code = runBin(t, bin, nil, "--nats", srv.URL(), "auth", "upgrade", "--dir", dir, "-o", "json")
	if code != 0 {
		t.Fatalf("auth upgrade again: exit %d: %s", code, stderr)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if rep["written"] != false || rep["stale_controllers"] != nil {
		t.Errorf("second upgrade: %s", stdout)
	}
	after := dirFiles(t, dir)
	if len(before) != len(after) {
		t.Errorf("second upgrade changed the files: %d → %d", len(before), len(after))
	}
	for k, v := range before {
		if after[k] != v {
			t.Errorf("second upgrade changed %s", k)
		}
	}
}

// TestAuthAgentApps: --apps as a tired operator types it. Offline the
// default app must be named (--default-app); on the bus the config names it
// and every app named must be in it (a typo is refused with the closest
// name); the creds grant what was asked (the record says so); '*' stands
// alone; bad names and flags are usage errors; nothing is minted on a
// refusal.
func TestAuthAgentApps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	if _, stderr, code := execute(t, "auth", "init", "--dir", dir); code != 0 {
		t.Fatal(stderr)
	}
	t.Setenv("FLEETWAVE_AUTH_DIR", "")
	t.Setenv("NATS_URL", "")
	const id = "0a000000-0000-4000-8000-0000000000b1"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--apps", "Web"}, "invalid app name"},
		{[]string{"--apps", "group"}, "reserved"},
		{[]string{"--apps", "web,*"}, "stands alone"},
		{[]string{"--apps", "web,web"}, "named twice"},
		{[]string{"--apps", ""}, "name at least one app"},
		{[]string{"--default-app", "core"}, "without --apps"},
		{[]string{"--apps", "web", "--default-app", "Core"}, "--default-app"},
		{[]string{"--apps", "web"}, "--default-app NAME"},
		{[]string{"--apps", "web:Green", "--default-app", "core"}, "--apps web:Green"},
		{[]string{"--apps", "core:green,web", "--default-app", "core"}, "whose group is the agent's"},
		{[]string{"--apps", "*:green"}, "every app in --group's group"},
	} {
		args := append([]string{"auth", "agent", "--dir", dir, "--group", "blue", "--id", id}, c.args...)
		if _, stderr, code := execute(t, args...); code != cliutil.ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want a usage error saying %q", c.args, code, stderr, c.want)
		}
	}
	if _, err := (auth.Dir{Path: dir}).Agent(id); !errors.Is(err, auth.ErrUnknown) {
		t.Fatalf("refusals minted: %v", err)
	}

	// Offline, the default app named.
	stdout, stderr, code := execute(t, "auth", "agent", "--dir", dir, "--group", "blue", "--id", id, "--apps", "web", "--default-app", "core", "-o", "json")
	if code != 0 {
		t.Fatal(stderr)
	}
	var rep AuthAgentReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || strings.Join(rep.Apps, ",") != "web" {
		t.Errorf("report: %+v, %v\n%s", rep, err, stdout)
	}
	rec, err := auth.Dir{Path: dir}.Agent(id)
	if err != nil || rec.Apps == nil || !rec.Apps.NoDefault || strings.Join(rec.Apps.Apps, ",") != "web" {
		t.Errorf("record: %+v, %v", rec.Apps, err)
	}
	if _, stderr, code := execute(t, "auth", "agent", "--dir", dir, "--group", "blue", "--id", id, "--apps", "*"); code != 0 {
		t.Fatal(stderr)
	}
	if rec, err := (auth.Dir{Path: dir}).Agent(id); err != nil || rec.Apps == nil || !rec.Apps.Any || len(rec.Keys) != 2 || rec.Apps.Groups != nil {
		t.Errorf("record after --apps '*': %+v, %v", rec, err)
	}
	// An app the host runs in another group.
	if _, stderr, code := execute(t, "auth", "agent", "--dir", dir, "--group", "blue", "--id", id, "--apps", "core,web:green", "--default-app", "core"); code != 0 {
		t.Fatal(stderr)
	}
	if rec, err := (auth.Dir{Path: dir}).Agent(id); err != nil || rec.Apps == nil || rec.Apps.String() != "core,web:green" {
		t.Errorf("record after --apps core,web:green: %+v, %v", rec.Apps, err)
	}
	if _, stderr, code := execute(t, "auth", "agent", "--dir", dir, "--group", "blue", "--id", id, "--apps", "*"); code != 0 {
		t.Fatal(stderr)
	}
	// auth ls shows the current key's apps.
	if stdout, stderr, code := execute(t, "auth", "ls", "--dir", dir); code != 0 || !strings.Contains(stdout, "APPS") ||
		!strings.Contains(stdout, " *  ") {
		t.Errorf("auth ls: exit %d\n%s%s", code, stdout, stderr)
	}
	// Without --apps again: the default app only, as before apps.
	if _, stderr, code := execute(t, "auth", "agent", "--dir", dir, "--group", "blue", "--id", id); code != 0 {
		t.Fatal(stderr)
	}
	if rec, err := (auth.Dir{Path: dir}).Agent(id); err != nil || rec.Apps != nil {
		t.Errorf("record after no --apps: %+v, %v", rec.Apps, err)
	}

	// On the bus: the config says which app is the default, and which exist.
	srv, connect := operatorServer(t, ctx, dir)
	admin, err := connect(filepath.Join(dir, auth.CredsFile(auth.UserAdmin)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := kv.Open(ctx, ajs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Save(ctx, f.Config, kv.KeyConfig, appsConfig(), 0); err != nil {
		t.Fatal(err)
	}
	const id2 = "0a000000-0000-4000-8000-0000000000b2"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--apps", "wbe"}, `app "wbe" is not in the config (did you mean web?); its apps: core, web`},
		{[]string{"--apps", "web", "--default-app", "web"}, "the config's default app is core"},
	} {
		args := append([]string{"--nats", srv.URL(), "auth", "agent", "--dir", dir, "--group", "blue", "--id", id2}, c.args...)
		if _, stderr, code := execute(t, args...); code != cliutil.ExitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want a usage error saying %q", c.args, code, stderr, c.want)
		}
	}
	if _, err := (auth.Dir{Path: dir}).Agent(id2); !errors.Is(err, auth.ErrUnknown) {
		t.Fatalf("refusals on the bus minted: %v", err)
	}
	stdout, stderr, code = execute(t, "--nats", srv.URL(), "auth", "agent", "--dir", dir, "--group", "blue", "--id", id2, "--apps", "web")
	if code != 0 || !strings.Contains(stdout, "apps web") {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	if rec, err := (auth.Dir{Path: dir}).Agent(id2); err != nil || rec.Apps == nil || !rec.Apps.NoDefault || strings.Join(rec.Apps.Apps, ",") != "web" {
		t.Errorf("record: %+v, %v", rec.Apps, err)
	}
	// The mint is in the audit trail with its apps.
	entries, _, err := f.ReadTimeline(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, en := range entries {
		if en.Audit != nil && en.Audit.Command == "auth agent" && strings.Contains(string(en.Audit.After), `"apps":"web"`) {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit record of the mint naming its apps: %+v", entries)
	}
}

// FuzzAgentApps: whatever --apps holds, it is refused or it grants subjects
// of whole tokens (no empty token, no '>', a '*' only for '*'), each naming
// the agent's own id, and the grant validates: no --apps value widens an
// agent's creds beyond the apps and groups it names.
func FuzzAgentApps(f *testing.F) {
	for _, seed := range []string{"web", "core,web", "web:green", "*", "web,*", "web.x", "web:gr.een", "web:*", "web:>", ">", "a:b:c", " web , db ", "core:green", "group", ""} {
		f.Add(seed)
	}
	const id = rollout.AgentID("0a000000-0000-4000-8000-0000000000f1")
	f.Fuzz(func(t *testing.T, apps string) {
		o := &AuthAgentOptions{Group: "blue", DefaultApp: "core", Apps: strings.Split(apps, ",")}
		if checkAgentApps(o, true) != nil {
			return
		}
		g, err := o.appGrant(nil)
		if err != nil {
			return
		}
		if err := g.Validate(); err != nil {
			t.Fatalf("--apps %q: grant %+v does not validate: %v", apps, g, err)
		}
		p := auth.AgentAppPermissions(id, "blue", g)
		for _, subj := range append(p.Pub.Allow, p.Sub.Allow...) {
			for _, tok := range strings.Split(subj, ".") {
				if tok == "" || tok == ">" && !strings.HasPrefix(subj, "_INBOX_") || tok == "*" && !g.Any {
					t.Fatalf("--apps %q grants %q", apps, subj)
				}
			}
			if !strings.Contains(subj, "$JS.API.DIRECT.GET") && !strings.HasPrefix(subj, "fleet.plan.") && !strings.Contains(subj, string(id)) {
				t.Fatalf("--apps %q grants %q, which is not this agent's", apps, subj)
			}
		}
	})
}
