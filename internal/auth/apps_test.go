package auth_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/internal/attacktest"
	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestAgentAppPermissions pins an agent's grants for other apps, subject for
// subject: each app's three publishes and two subscriptions in its own
// namespace, its own group and id only; '*' the app token a wildcard, with
// the default app's status of a group named "spec" (which "*.spec" would
// also name) denied. The default app alone is TestAgentPermissionsAreDesignSix.
func TestAgentAppPermissions(t *testing.T) {
	const id = rollout.AgentID("1b4e28ba-2fa1-4d2e-883f-0016d3cca427")
	get := func(key string) string { return "$JS.API.DIRECT.GET.KV_fleet_plan.$KV.fleet_plan." + key }
	inbox := "_INBOX_" + string(id) + ".>"
	cases := []struct {
		name  string
		group string
		g     auth.AppGrant
		want  jwt.Permissions
	}{
		{"the default app and db", "prod", auth.AppGrant{Apps: []string{"db"}, DefaultName: "web"}, jwt.Permissions{
			Pub: jwt.Permission{Allow: jwt.StringList{
				"fleet.hb.prod." + string(id), get("spec"), get("group.prod"),
				"fleet.hb.db.prod." + string(id), get("db.spec"), get("db.group.prod"),
			}},
			Sub: jwt.Permission{Allow: jwt.StringList{"fleet.plan.spec", "fleet.plan.group.prod", "fleet.plan.db.spec", "fleet.plan.db.group.prod", inbox}},
		}},
		{"web only, not the default app", "prod", auth.AppGrant{Apps: []string{"web"}, NoDefault: true}, jwt.Permissions{
			Pub: jwt.Permission{Allow: jwt.StringList{"fleet.hb.web.prod." + string(id), get("web.spec"), get("web.group.prod")}},
			Sub: jwt.Permission{Allow: jwt.StringList{"fleet.plan.web.spec", "fleet.plan.web.group.prod", inbox}},
		}},
		{"db in its own group", "prod", auth.AppGrant{Apps: []string{"db"}, Groups: map[string]string{"db": "green"}}, jwt.Permissions{
			Pub: jwt.Permission{Allow: jwt.StringList{
				"fleet.hb.prod." + string(id), get("spec"), get("group.prod"),
				"fleet.hb.db.green." + string(id), get("db.spec"), get("db.group.green"),
			}},
			Sub: jwt.Permission{Allow: jwt.StringList{"fleet.plan.spec", "fleet.plan.group.prod", "fleet.plan.db.spec", "fleet.plan.db.group.green", inbox}},
		}},
		{"any app", "prod", auth.AppGrant{Any: true}, jwt.Permissions{
			Pub: jwt.Permission{
				Allow: jwt.StringList{
					"fleet.hb.prod." + string(id), get("spec"), get("group.prod"),
					"fleet.hb.*.prod." + string(id), get("*.spec"), get("*.group.prod"),
				},
				Deny: jwt.StringList{get("group.spec")},
			},
			Sub: jwt.Permission{
				Allow: jwt.StringList{"fleet.plan.spec", "fleet.plan.group.prod", "fleet.plan.*.spec", "fleet.plan.*.group.prod", inbox},
				Deny:  jwt.StringList{"fleet.plan.group.spec"},
			},
		}},
		{"any app, in a group named spec", "spec", auth.AppGrant{Any: true}, jwt.Permissions{
			Pub: jwt.Permission{Allow: jwt.StringList{
				"fleet.hb.spec." + string(id), get("spec"), get("group.spec"),
				"fleet.hb.*.spec." + string(id), get("*.spec"), get("*.group.spec"),
			}},
			Sub: jwt.Permission{Allow: jwt.StringList{"fleet.plan.spec", "fleet.plan.group.spec", "fleet.plan.*.spec", "fleet.plan.*.group.spec", inbox}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, auth.AgentAppPermissions(id, c.group, c.g)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if diff := cmp.Diff(auth.AgentPermissions(id, "prod"), auth.AgentAppPermissions(id, "prod", auth.AppGrant{DefaultName: "web"})); diff != "" {
		t.Errorf("the default app named is not the default app's grants (-want +got):\n%s", diff)
	}

	// Minted: the zero grant is claim for claim an agent of before apps
	// (16 subscriptions, no app tag); others get room per app.
	op, err := auth.NewOperator("test", auth.DefaultJetStreamLimits)
	if err != nil {
		t.Fatal(err)
	}
	agentsPub, _ := op.AgentsKey.PublicKey()
	is := auth.Issuer{Account: agentsPub, Signer: op.AgentsSigner}
	for _, c := range []struct {
		g    auth.AppGrant
		subs int64
		tags []string
	}{
		{auth.AppGrant{}, 16, []string{"role:agent", "group:prod", "agent:" + string(id)}},
		{auth.AppGrant{Apps: []string{"db", "cache"}, DefaultName: "web"}, 32, []string{"role:agent", "group:prod", "agent:" + string(id), "apps:web,db,cache"}},
		{auth.AppGrant{Any: true}, 16 + 8*(rollout.MaxApps-1), []string{"role:agent", "group:prod", "agent:" + string(id), "apps:*"}},
	} {
		u, err := is.AgentApps(id, "prod", c.g)
		if err != nil {
			t.Fatal(err)
		}
		uc, err := jwt.DecodeUserClaims(u.JWT)
		if err != nil {
			t.Fatal(err)
		}
		if uc.Limits.Subs != c.subs || !slices.Equal([]string(uc.Tags), c.tags) || !cmp.Equal(uc.Permissions, auth.AgentAppPermissions(id, "prod", c.g)) {
			t.Errorf("%s: subs %d, tags %q, want %d, %q", c.g, uc.Limits.Subs, uc.Tags, c.subs, c.tags)
		}
	}
	for _, c := range []struct {
		g    auth.AppGrant
		want string
	}{
		{auth.AppGrant{NoDefault: true}, "no app"},
		{auth.AppGrant{Apps: []string{"group"}}, "reserved"},
		{auth.AppGrant{Apps: []string{"Web"}}, "invalid app name"},
		{auth.AppGrant{Apps: []string{"db.x"}}, "invalid app name"},
		{auth.AppGrant{Apps: []string{"*"}}, "invalid app name"},
		{auth.AppGrant{Apps: []string{"db", "db"}}, "named twice"},
		{auth.AppGrant{Apps: []string{"web"}, DefaultName: "web"}, "named twice"},
		{auth.AppGrant{Any: true, Apps: []string{"db"}}, "stands alone"},
		{auth.AppGrant{Any: true, Groups: map[string]string{"db": "green"}}, "stands alone"},
		{auth.AppGrant{Apps: []string{"db"}, Groups: map[string]string{"web": "green"}}, "not granted"},
		{auth.AppGrant{Apps: []string{"db"}, Groups: map[string]string{"db": "Green"}}, "group"},
		{auth.AppGrant{Apps: strings.Split("a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p", ",")}, "at most 16"},
	} {
		if _, err := is.AgentApps(id, "prod", c.g); !errors.Is(err, auth.ErrAppGrant) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %s", c.g, err, c.want)
		}
	}
}

// TestFleetExportsOverlapOnlyWhereSafe: two service imports of one account
// whose subjects meet both take a message on the subjects they share (the
// server forwards it once per import: a write stored twice). The app forms
// meet the default app's only at the default app's status of a group named
// "spec" (a read: two equal answers) and of a group named "quarantine" (a
// controller's write of that status, stored twice: the same value, and a
// compare-and-set write's second copy fails), and, since the groups keys
// of label selectors (issue 28: "groups", "<app>.groups"), at the status
// of a group named "groups" in the same two ways. docs/security.md, "Apps",
// says why these are harmless; any other meeting fails here.
func TestFleetExportsOverlapOnlyWhereSafe(t *testing.T) {
	for name, imports := range map[string]jwt.Imports{
		auth.AccountAgents: auth.AgentsImports("AFLEET"), auth.AccountControl: auth.ControlImports("AFLEET"), auth.AccountEdge: auth.EdgeImports("AFLEET"),
	} {
		var got []string
		for i, a := range imports {
			for _, b := range imports[i+1:] {
				if a.Type == jwt.Service && b.Type == jwt.Service {
					if m, ok := meet(string(a.Subject), string(b.Subject)); ok {
						got = append(got, m)
					}
				}
			}
		}
		var want []string
		switch name {
		case auth.AccountAgents:
			want = []string{"$JS.API.DIRECT.GET.KV_fleet_plan.$KV.fleet_plan.group.spec", "$JS.API.DIRECT.GET.KV_fleet_plan.$KV.fleet_plan.group.groups"}
		case auth.AccountControl:
			want = []string{"$JS.API.DIRECT.GET.KV_fleet_plan.$KV.fleet_plan.group.spec", "$JS.API.DIRECT.GET.KV_fleet_plan.$KV.fleet_plan.group.groups",
				"$KV.fleet_plan.group.quarantine", "$KV.fleet_plan.group.groups"}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: subjects two imports share (-want +got):\n%s", name, diff)
		}
	}
}

// meet is the subject pattern two patterns (of "*" and a final ">") both
// match, if any.
func meet(a, b string) (string, bool) {
	ta, tb := strings.Split(a, "."), strings.Split(b, ".")
	var out []string
	for i := 0; ; i++ {
		switch {
		case i == len(ta) && i == len(tb):
			return strings.Join(out, "."), true
		case i < len(ta) && ta[i] == ">":
			return strings.Join(append(out, tb[i:]...), "."), i < len(tb)
		case i < len(tb) && tb[i] == ">":
			return strings.Join(append(out, ta[i:]...), "."), i < len(ta)
		case i == len(ta) || i == len(tb):
			return "", false
		case ta[i] == tb[i] || tb[i] == "*":
			out = append(out, ta[i])
		case ta[i] == "*":
			out = append(out, tb[i])
		default:
			return "", false
		}
	}
}

// TestFleetExportsKeepTheGrantsBeforeApps: every export and import of a
// directory minted before apps (testdata of internal/attacktest, written by
// that code) is still there, unchanged: an upgrade only adds, and no
// credential issued then loses anything.
func TestFleetExportsKeepTheGrantsBeforeApps(t *testing.T) {
	old := attacktest.BeforeApps(t)
	now := map[string]*jwt.Export{}
	for _, e := range auth.FleetExports() {
		now[string(e.Subject)] = e
	}
	for _, e := range old.FleetExports {
		if n := now[string(e.Subject)]; n == nil || !cmp.Equal(*n, *e) {
			t.Errorf("export %s was %+v, now %+v", e.Subject, e, n)
		}
	}
	for acc, c := range map[string]struct {
		old []string
		now jwt.Imports
	}{auth.AccountAgents: {old.AgentsImports, auth.AgentsImports("A")}, auth.AccountControl: {old.ControlImports, auth.ControlImports("A")},
		auth.AccountEdge: {old.EdgeImports, auth.EdgeImports("A")}} {
		var now []string
		for _, im := range c.now {
			now = append(now, string(im.Subject))
		}
		for _, subj := range c.old {
			if !slices.Contains(now, subj) {
				t.Errorf("%s no longer imports %s", acc, subj)
			}
		}
	}
}

// TestAgentAppGrantsAndDenials runs, against an operator-mode server, the
// grants and the denials of agents minted for apps (DESIGN §9) in a fleet
// of three apps (core, the default, web and db): an agent of web in prod
// heartbeats and reads web's plan of prod, and nothing of db (neither
// heartbeat subject form, neither key, nor its plan changes), nothing of the
// default app, nothing of web's other groups; an agent minted '*' in prod
// heartbeats and reads every app's prod, yet cannot speak for another id or
// group or read another group's keys (the default app's group "spec"
// included); an agent minted without --apps (as before apps) reaches no
// other app. Each denial is the server's permissions violation naming the
// subject.
func TestAgentAppGrantsAndDenials(t *testing.T) {
	e := newFleetEnv(t)
	const (
		webAgent = rollout.AgentID("0e000000-0000-4000-8000-0000000000e1")
		dbAgent  = rollout.AgentID("0e000000-0000-4000-8000-0000000000e4") // the default app in prod, db in canary
		anyAgent = rollout.AgentID("0e000000-0000-4000-8000-0000000000e2")
		defAgent = rollout.AgentID("0e000000-0000-4000-8000-0000000000e3")
	)
	for id, g := range map[rollout.AgentID]auth.AppGrant{
		webAgent: {Apps: []string{"web"}, NoDefault: true},
		anyAgent: {Any: true},
		defAgent: {},
		dbAgent:  {Apps: []string{"db"}, Groups: map[string]string{"db": "canary"}},
	} {
		if _, _, err := e.dir.IssueAgentApps(id, "prod", g, ""); err != nil {
			t.Fatal(err)
		}
	}
	web, db := kv.OtherNS("web"), kv.OtherNS("db")
	core := kv.AppNS{} // the default app's namespace: today's keys
	revs := map[string]uint64{}
	for _, ns := range []kv.AppNS{core, web, db} {
		revs[ns.Spec()] = e.put(e.fleet.Plan, ns.Spec(), rollout.DefaultSpec("1.0.0", "1.1.0"))
		for _, g := range []string{"prod", "canary", "spec"} {
			revs[ns.Group(g)] = e.put(e.fleet.Plan, ns.Group(g), rollout.GroupStatus{V: 1, Group: g, State: rollout.StateUnstarted})
		}
		e.put(e.fleet.Plan, ns.Quarantine(), map[string]any{"v": 1})
	}
	hb := func(ns kv.AppNS, group string, id rollout.AgentID) []byte {
		data, err := heartbeat.Encode(&heartbeat.Heartbeat{V: heartbeat.SchemaVersion, AgentID: id, Group: group, App: ns.Key(),
			ActiveVersion: "1.0.0", UpdaterVersion: "0.1.0", At: time.Now().UTC(), Seq: 1})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	beat := func(ns kv.AppNS, group string, id rollout.AgentID) func(ctx context.Context, a *agentConn) error {
		return func(ctx context.Context, a *agentConn) error {
			subj := ns.HBSubject(group, id)
			ack, err := a.js.Publish(ctx, subj, hb(ns, group, id))
			if err != nil {
				return err
			}
			if ack.Stream != kv.StreamHB {
				return errors.New("acked by stream " + ack.Stream)
			}
			m, err := e.fleet.HB.GetLastMsgForSubject(ctx, subj)
			if err != nil {
				return err
			}
			_, err = heartbeat.DecodeFrom(m.Subject, m.Data)
			return err
		}
	}
	read := func(key string) func(ctx context.Context, a *agentConn) error {
		return func(ctx context.Context, a *agentConn) error {
			m, err := kv.DirectGetLast(ctx, a.nc, kv.PlanStream, kv.KeySubject(kv.BucketPlan, key))
			if err == nil && m.Sequence != revs[key] {
				err = fmt.Errorf("%s at revision %d, want %d", key, m.Sequence, revs[key])
			}
			return err
		}
	}
	follow := func(keys ...string) func(ctx context.Context, a *agentConn) error {
		return func(ctx context.Context, a *agentConn) error {
			got := make(chan *nats.Msg, len(keys))
			for _, k := range keys {
				if _, err := a.nc.ChanSubscribe(kv.PlanRepublish+k, got); err != nil {
					return err
				}
			}
			if err := a.nc.FlushWithContext(ctx); err != nil {
				return err
			}
			for _, k := range keys {
				m, err := kv.DirectGetLast(ctx, e.fleet.JS.Conn(), kv.PlanStream, kv.KeySubject(kv.BucketPlan, k))
				if err != nil {
					return err
				}
				rev, err := e.fleet.Plan.Put(ctx, k, m.Data)
				if err != nil {
					return err
				}
				revs[k] = rev
			}
			seen := map[string]bool{}
			for len(seen) < len(keys) {
				select {
				case m := <-got:
					seen[m.Subject] = true
				case <-ctx.Done():
					return fmt.Errorf("republished changes seen: %v, want %v", seen, keys)
				}
			}
			return nil
		}
	}
	grants := []struct {
		name string
		id   rollout.AgentID
		run  func(ctx context.Context, a *agentConn) error
	}{
		{"web's agent heartbeats web in prod", webAgent, beat(web, "prod", webAgent)},
		{"web's agent reads web.spec", webAgent, read(web.Spec())},
		{"web's agent reads web.group.prod", webAgent, read(web.Group("prod"))},
		{"web's agent follows web's spec and prod", webAgent, follow(web.Spec(), web.Group("prod"))},
		{"any app's agent heartbeats the default app", anyAgent, beat(core, "prod", anyAgent)},
		{"any app's agent heartbeats web", anyAgent, beat(web, "prod", anyAgent)},
		{"any app's agent heartbeats db", anyAgent, beat(db, "prod", anyAgent)},
		{"any app's agent reads spec, db.spec, group.prod, db.group.prod", anyAgent, func(ctx context.Context, a *agentConn) error {
			return errors.Join(read(core.Spec())(ctx, a), read(db.Spec())(ctx, a), read(core.Group("prod"))(ctx, a), read(db.Group("prod"))(ctx, a))
		}},
		{"any app's agent follows every app's spec and prod", anyAgent, follow(core.Spec(), core.Group("prod"), db.Spec(), db.Group("prod"), web.Group("prod"))},
		{"an agent of db in canary heartbeats and reads db of canary, and the default app of prod", dbAgent, func(ctx context.Context, a *agentConn) error {
			return errors.Join(beat(db, "canary", dbAgent)(ctx, a), read(db.Group("canary"))(ctx, a), read(db.Spec())(ctx, a),
				beat(core, "prod", dbAgent)(ctx, a), read(core.Group("prod"))(ctx, a))
		}},
		{"the default app's agent heartbeats and reads as before apps", defAgent, func(ctx context.Context, a *agentConn) error {
			return errors.Join(beat(core, "prod", defAgent)(ctx, a), read(core.Spec())(ctx, a), read(core.Group("prod"))(ctx, a))
		}},
	}
	var nGrants, nDenials int
	for _, g := range grants {
		nGrants++
		t.Run("grant/"+g.name, func(t *testing.T) {
			a := e.agent(g.id, auth.AgentCredsFile(g.id))
			ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
			defer cancel()
			if err := g.run(ctx, a); err != nil {
				t.Fatalf("granted call failed: %v (server said: %q)", err, a.violations())
			}
			if v := a.violations(); len(v) > 0 {
				t.Errorf("granted call caused errors: %q", v)
			}
		})
	}

	jsPublish := func(subject string, data []byte) func(context.Context, *agentConn) error {
		return func(ctx context.Context, a *agentConn) error {
			_, err := a.js.Publish(ctx, subject, data)
			return err
		}
	}
	directGet := func(key string) func(context.Context, *agentConn) error {
		return func(ctx context.Context, a *agentConn) error {
			_, err := kv.DirectGetLast(ctx, a.nc, kv.PlanStream, kv.KeySubject(kv.BucketPlan, key))
			return err
		}
	}
	subscribe := func(subject string) func(context.Context, *agentConn) error {
		return func(ctx context.Context, a *agentConn) error {
			if _, err := a.nc.SubscribeSync(subject); err != nil {
				return err
			}
			return a.nc.FlushWithContext(ctx)
		}
	}
	planGet := func(key string) string {
		return "$JS.API.DIRECT.GET." + kv.PlanStream + "." + kv.KeySubject(kv.BucketPlan, key)
	}
	hbDenied := func(ns kv.AppNS, group string, id rollout.AgentID) denial {
		return denial{"heartbeat " + ns.HBSubject(group, id), jsPublish(ns.HBSubject(group, id), hb(ns, group, id)), ns.HBSubject(group, id), false}
	}
	readDenied := func(key string) denial {
		return denial{"read " + key, directGet(key), planGet(key), false}
	}
	subDenied := func(subject string) denial {
		return denial{"subscribe " + subject, subscribe(subject), subject, true}
	}
	for _, c := range []struct {
		id    rollout.AgentID
		cases []denial
	}{
		// web in prod: nothing of db (either heartbeat form: db's own, and
		// the unprefixed one a default app has), nothing of the default
		// app, nothing of web's other groups.
		{webAgent, []denial{
			hbDenied(db, "prod", webAgent),
			hbDenied(core, "prod", webAgent),
			hbDenied(web, "canary", webAgent),
			hbDenied(web, "prod", anyAgent),
			readDenied(db.Spec()), readDenied(db.Group("prod")),
			readDenied(core.Spec()), readDenied(core.Group("prod")),
			readDenied(web.Group("canary")), readDenied(web.Quarantine()),
			subDenied("fleet.plan.db.>"), subDenied(kv.PlanRepublish + db.Spec()), subDenied(kv.PlanRepublish + db.Group("prod")),
			subDenied(kv.PlanRepublish + web.Group("canary")), subDenied("fleet.plan.web.>"), subDenied("fleet.plan.*.group.prod"),
			subDenied(kv.PlanRepublish + core.Spec()), subDenied("fleet.hb.web.>"),
			{"write web.group.prod", jsPublish(kv.KeySubject(kv.BucketPlan, web.Group("prod")), []byte(`{"v":1}`)), kv.KeySubject(kv.BucketPlan, web.Group("prod")), false},
			{"write web.spec", jsPublish(kv.KeySubject(kv.BucketPlan, web.Spec()), []byte(`{"v":1}`)), kv.KeySubject(kv.BucketPlan, web.Spec()), false},
		}},
		// any app in prod: still its own id and group only.
		{anyAgent, []denial{
			hbDenied(web, "prod", webAgent),
			hbDenied(core, "prod", defAgent),
			hbDenied(web, "canary", anyAgent),
			hbDenied(core, "canary", anyAgent),
			readDenied(web.Group("canary")), readDenied(core.Group("canary")),
			readDenied(core.Group("spec")), // "*.spec" would name it: denied
			readDenied(web.Quarantine()), readDenied(core.Quarantine()),
			subDenied("fleet.plan.>"), subDenied("fleet.plan.*.>"), subDenied(kv.PlanRepublish + web.Group("canary")),
			subDenied(kv.PlanRepublish + core.Group("spec")), subDenied("fleet.plan.*.group.*"),
			{"write db.spec", jsPublish(kv.KeySubject(kv.BucketPlan, db.Spec()), []byte(`{"v":1}`)), kv.KeySubject(kv.BucketPlan, db.Spec()), false},
		}},
		// db in canary, the default app in prod: neither app's other group.
		{dbAgent, []denial{
			hbDenied(db, "prod", dbAgent), hbDenied(core, "canary", dbAgent),
			readDenied(db.Group("prod")), readDenied(core.Group("canary")),
			subDenied(kv.PlanRepublish + db.Group("prod")),
		}},
		// minted without --apps, as every agent before apps: no other app.
		{defAgent, []denial{
			hbDenied(web, "prod", defAgent),
			readDenied(web.Spec()), readDenied(web.Group("prod")),
			subDenied(kv.PlanRepublish + web.Spec()), subDenied(kv.PlanRepublish + web.Group("prod")),
		}},
	} {
		for _, d := range c.cases {
			nDenials++
			t.Run("deny/"+string(c.id)[len(c.id)-2:]+"/"+d.name, func(t *testing.T) { d.expect(t, e, e.agent(c.id, auth.AgentCredsFile(c.id))) })
		}
	}
	// Nothing denied was stored: no heartbeat of another app, id or group;
	// the plan as the admin wrote it.
	for _, subj := range []string{db.HBSubject("prod", webAgent), core.HBSubject("prod", webAgent), web.HBSubject("canary", webAgent),
		web.HBSubject("canary", anyAgent), web.HBSubject("prod", defAgent)} {
		if m, err := e.fleet.HB.GetLastMsgForSubject(e.ctx, subj); err == nil {
			t.Errorf("%s stored: %s", subj, m.Data)
		}
	}
	for key, rev := range revs {
		m, err := kv.DirectGetLast(e.ctx, e.fleet.JS.Conn(), kv.PlanStream, kv.KeySubject(kv.BucketPlan, key))
		if err != nil || m.Sequence < rev || m.Foreign {
			t.Errorf("%s: %v, revision %d, foreign %v", key, err, m.Sequence, m.Foreign)
		}
	}
	t.Logf("app-granted agent credentials: %d grants, %d denials tested", nGrants, nDenials)
}
