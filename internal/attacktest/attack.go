// Package attacktest replays, with one agent's own credentials, every
// reflection that once let a host steer the fleet, against a running
// operator-mode fleet (a single server, a cluster node, an edge leaf node),
// and checks that nothing reached the FLEET account and no other agent acted.
// Tests only.
package attacktest

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
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Fleet is a running fleet to attack: a controller leads it, the stream and
// buckets exist.
type Fleet struct {
	Dir auth.Dir
	// AgentURL is where agents (the attacker and its victims) connect: the
	// single server, a cluster node the plan's leader is not on, an edge
	// leaf node.
	AgentURL string
	// AdminURLs are where the admin watches the FLEET account from: every
	// server whose FLEET account a reflection could reach (the hub and an
	// edge leaf node are two accounts named FLEET).
	AdminURLs []string
	// Controller is the leading controller's id.
	Controller string
}

// The cast: C is the canary group's only agent and the attacker; P1 and P2
// are prod agents, P1 follows its plan as agentd does, P2 is the agent whose
// identity the attacker would like to overwrite.
const (
	attacker = rollout.AgentID("0c000000-0000-4000-8000-0000000000c1")
	victim1  = rollout.AgentID("0d000000-0000-4000-8000-0000000000d1")
	victim2  = rollout.AgentID("0d000000-0000-4000-8000-0000000000d2")
)

// Report is what Run observed, for the caller to print.
type Report struct {
	Attacks   int // requests sent with a hostile reply subject
	Answered  int // responses seen landing in the AGENTS account
	Forbidden int // requests outside the agent's grants, refused
}

// Run brings the canary group to done with the attacker as its canary and
// holds prod back (it waits a day after canary), then replays every
// reflection and asserts: nothing the attacker caused is seen or stored in
// FLEET, the plan's config and spec keep their revisions, another agent's
// stored heartbeat is untouched, the prod agent's view of its plan is
// unchanged (so it installs nothing), and the controller keeps the lease.
func Run(t *testing.T, f Fleet) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	fleet := openFleet(t, ctx, f)

	// Creds for the cast, and a plan that has canary done and prod waiting.
	// The attacker runs the default app and app web (DESIGN §9), so it may
	// make web's requests too: its heartbeat and its two plan keys.
	creds := map[rollout.AgentID]string{}
	for id, group := range map[rollout.AgentID]string{attacker: "canary", victim1: "prod", victim2: "prod"} {
		var apps auth.AppGrant
		if id == attacker {
			apps = auth.AppGrant{Apps: []string{web.Name}}
		}
		_, out, err := f.Dir.IssueAgentApps(id, group, apps, "")
		if err != nil {
			t.Fatal(err)
		}
		creds[id] = filepath.Join(f.Dir.Path, out)
	}
	cfg := rollout.DefaultConfig()
	canary, prod := rollout.DefaultGroup("canary"), rollout.DefaultGroup("prod")
	canary.CanaryCount, canary.MinHealthyTime = 1, 0
	prod.WaitHours = 24
	cfg.Groups = []rollout.GroupConfig{canary, prod}
	if _, err := kv.Save(ctx, fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	spec.Critical = true
	if _, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}

	c := connect(t, f.AgentURL, creds[attacker], nats.CustomInboxPrefix(kv.AgentInboxPrefix(string(attacker))))
	cjs, err := jetstream.New(c)
	if err != nil {
		t.Fatal(err)
	}
	var installed sync.Map // agent id → version it reports
	installed.Store(attacker, "1.0.0")
	beat := func(ctx context.Context, js jetstream.JetStream, id rollout.AgentID, group string) error {
		v, _ := installed.LoadOrStore(id, "1.0.0")
		_, err := js.Publish(ctx, heartbeat.SubjectFor(group, id), hbData(t, id, group, v.(string)))
		return err
	}
	// The attacker heartbeats as a real agent would, all along.
	beatCtx, stopBeats := context.WithCancel(ctx)
	defer stopBeats()
	go func() {
		for beatCtx.Err() == nil {
			_ = beat(beatCtx, cjs, attacker, "canary")
			select {
			case <-beatCtx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	// The prod agents beat until prod is counted, then fall silent: P2's
	// last heartbeat is a target.
	prodJS := map[rollout.AgentID]jetstream.JetStream{}
	for _, id := range []rollout.AgentID{victim1, victim2} {
		js, err := jetstream.New(connect(t, f.AgentURL, creds[id], nats.CustomInboxPrefix(kv.AgentInboxPrefix(string(id)))))
		if err != nil {
			t.Fatal(err)
		}
		prodJS[id] = js
	}
	natstest.Eventually(t, 30*time.Second, func() error {
		for id, js := range prodJS {
			if err := beat(ctx, js, id, "prod"); err != nil {
				return err
			}
		}
		return groupCounted(ctx, fleet, f.Controller, "prod", 2)
	})
	// Canary: the attacker becomes its canary, reports the target, the group
	// finishes; prod waits for a day.
	waitState(t, ctx, fleet, "canary", rollout.StateCanary)
	installed.Store(attacker, "1.1.0")
	waitState(t, ctx, fleet, "canary", rollout.StateDone)

	// What must not change.
	before := snapshot(t, ctx, fleet)
	follower := &agentd.PlanFollower{
		NC:    connect(t, f.AgentURL, creds[victim1], nats.CustomInboxPrefix(kv.AgentInboxPrefix(string(victim1)))),
		Group: "prod", Clock: clock.Real{}, Log: natstest.Logger(t),
	}
	go func() { _ = follower.Run(ctx) }()
	natstest.Eventually(t, 10*time.Second, func() error {
		// Settled: the controller has seen canary done and made prod
		// wait its day (before that, prod's status still moves).
		if p := follower.Plan(); p.SpecRev != before.spec || p.StatusRev == 0 || p.Status.WaitingUntil.IsZero() {
			return fmt.Errorf("prod agent's plan not read yet, or prod not yet waiting its day: %+v", p)
		}
		return nil
	})
	planBefore := follower.Plan()
	if v, update := planBefore.Decide(victim1); update {
		t.Fatalf("before the attack the prod agent is already told to update to %s: the scenario is wrong", v)
	}

	// Watch both accounts: everything published in FLEET (on every server
	// whose FLEET account a reflection could reach), and every answer that
	// lands in AGENTS.
	var spies []*Recorder
	for _, u := range f.AdminURLs {
		spies = append(spies, Record(t, connect(t, u, filepath.Join(f.Dir.Path, auth.CredsFile(auth.UserAdmin)))))
	}
	observer := Record(t, connect(t, f.AgentURL, ObserverCreds(t, f.Dir, auth.AccountAgents)))

	// The attack: every request the agent may make, with every reply subject
	// that once reached something.
	replies := []string{
		kv.PlanRepublish + kv.GroupKey("prod"),      // other prod agents follow it
		kv.PlanRepublish + kv.KeySpec,               // every agent follows it
		kv.KeySubject(kv.BucketStats, kv.KeyLeader), // the controllers' lease
		kv.KeySubject(kv.BucketConfig, kv.KeyConfig),
		kv.KeySubject(kv.BucketPlan, kv.KeySpec),
		kv.KeySubject(kv.BucketPlan, kv.GroupKey("prod")),
		heartbeat.SubjectFor("prod", victim2), // another agent's identity
		kv.EventSubject("prod"),
		kv.AuditSubject(""), // the audit trail: who did what
		kv.AuditSubject("prod"),
		kv.AgentInboxPrefix(string(victim2)) + ".x", // another agent's inbox
		// Another app's (DESIGN §9): its plan changes other agents follow,
		// its spec, status and quarantine, another agent's heartbeat of it,
		// its counts.
		kv.PlanRepublish + web.Group("prod"),
		kv.PlanRepublish + web.Spec(),
		kv.KeySubject(kv.BucketPlan, web.Spec()),
		kv.KeySubject(kv.BucketPlan, web.Group("prod")),
		kv.KeySubject(kv.BucketPlan, web.Quarantine()),
		web.HBSubject("prod", victim2),
		kv.KeySubject(kv.BucketStats, web.Stats("prod", f.Controller)),
	}
	hb := hbData(t, attacker, "canary", "1.1.0")
	webHB := hbAppData(t, web, attacker, "canary", "1.1.0")
	requests := []struct {
		subject string
		data    []byte
	}{
		{"$JS.API.DIRECT.GET." + kv.PlanStream + "." + kv.KeySubject(kv.BucketPlan, kv.KeySpec), nil},
		{"$JS.API.DIRECT.GET." + kv.PlanStream + "." + kv.KeySubject(kv.BucketPlan, kv.GroupKey("canary")), nil},
		{heartbeat.SubjectFor("canary", attacker), hb}, // a JetStream publish: its ack is the response
		{"$JS.API.DIRECT.GET." + kv.PlanStream + "." + kv.KeySubject(kv.BucketPlan, web.Spec()), nil},
		{"$JS.API.DIRECT.GET." + kv.PlanStream + "." + kv.KeySubject(kv.BucketPlan, web.Group("canary")), nil},
		{web.HBSubject("canary", attacker), webHB},
	}
	var rep Report
	for _, r := range replies {
		for _, q := range requests {
			if err := c.PublishMsg(&nats.Msg{Subject: q.subject, Reply: r, Data: q.data}); err != nil {
				t.Fatal(err)
			}
			rep.Attacks++
		}
	}
	// What the old layout allowed and the agent's grants no longer do: the
	// plan stream's info answered into the lease (stored: no controller led);
	// and what only a controller may: a batched read of the audit trail.
	for _, subj := range []string{"$JS.API.STREAM.INFO." + kv.PlanStream, "$JS.API.STREAM.INFO." + kv.StreamHB,
		"$JS.API.DIRECT.GET." + kv.StreamAudit} {
		if err := c.PublishRequest(subj, kv.KeySubject(kv.BucketStats, kv.KeyLeader), nil); err != nil {
			t.Fatal(err)
		}
		rep.Forbidden++
	}
	if err := c.FlushWithContext(ctx); err != nil {
		t.Fatal(err)
	}

	// The attack did fire: each reply subject receives an answer to each
	// request, in AGENTS.
	natstest.Eventually(t, 20*time.Second, func() error {
		for _, r := range replies {
			if n := observer.Count(r); n < len(requests) {
				return fmt.Errorf("%d of %d answers seen on %s in AGENTS", n, len(requests), r)
			}
		}
		return nil
	})
	for _, r := range replies {
		rep.Answered += observer.Count(r)
	}

	// And nothing of it crossed. Answers take other paths than the ones
	// observed (routes, leaf connections), so watch for a while.
	natstest.Consistently(t, 2*time.Second, func() error {
		for _, s := range spies {
			if err := s.foreign(replies, f.Controller); err != nil {
				return err
			}
		}
		if p := follower.Plan(); p.StatusRev != planBefore.StatusRev || p.SpecRev != planBefore.SpecRev {
			return fmt.Errorf("prod agent's plan moved from %+v to %+v", planBefore, p)
		}
		return nil
	})
	after := snapshot(t, ctx, fleet)
	if before.config != after.config || before.spec != after.spec || !bytes.Equal(before.victimHB, after.victimHB) {
		t.Errorf("FLEET changed: config revision %d→%d, spec revision %d→%d, %s's heartbeat %s→%s",
			before.config, after.config, before.spec, after.spec, victim2, before.victimHB, after.victimHB)
	}
	// Nothing of app web was ever written: whatever is stored there came
	// from the attack.
	for _, k := range []struct{ stream, subject string }{
		{kv.PlanStream, kv.KeySubject(kv.BucketPlan, web.Spec())},
		{kv.PlanStream, kv.KeySubject(kv.BucketPlan, web.Group("prod"))},
		{kv.PlanStream, kv.KeySubject(kv.BucketPlan, web.Quarantine())},
		{kv.StreamHB, web.HBSubject("prod", victim2)},
		{kv.StreamOf(kv.BucketStats), kv.KeySubject(kv.BucketStats, web.Stats("prod", f.Controller))},
	} {
		m, err := kv.DirectGetLast(ctx, fleet.JS.Conn(), k.stream, k.subject)
		if !errors.Is(err, kv.ErrNotFound) {
			t.Errorf("FLEET changed: %s holds %.120s (%v)", k.subject, m.Data, err)
		}
	}
	if after.leader != f.Controller {
		t.Errorf("lease held by %q after the attack, want %q", after.leader, f.Controller)
	}
	if v, update := follower.Plan().Decide(victim1); update {
		t.Errorf("prod agent told to update to %s by the attack", v)
	}
	return rep
}

func openFleet(t *testing.T, ctx context.Context, f Fleet) *kv.Fleet {
	t.Helper()
	js, err := jetstream.New(connect(t, f.AdminURLs[0], filepath.Join(f.Dir.Path, auth.CredsFile(auth.UserAdmin))))
	if err != nil {
		t.Fatal(err)
	}
	var fleet *kv.Fleet
	natstest.Eventually(t, 30*time.Second, func() (err error) {
		// Each attempt bounded: a cluster still electing leaders drops
		// requests without an answer.
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		fleet, err = kv.Open(actx, js)
		return err
	})
	return fleet
}

func connect(t *testing.T, url, creds string, extra ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: url, Name: "attacktest", Creds: creds, Log: natstest.Logger(t), Extra: extra})
	if err != nil {
		t.Fatalf("connect %s with %s: %v", url, filepath.Base(creds), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func hbData(t *testing.T, id rollout.AgentID, group, version string) []byte {
	t.Helper()
	return hbAppData(t, kv.AppNS{}, id, group, version)
}

// web is the other app the attacker runs: nothing of it is in the plan, so
// anything stored under its keys came from the attack.
var web = kv.OtherNS("web")

func hbAppData(t *testing.T, ns kv.AppNS, id rollout.AgentID, group, version string) []byte {
	t.Helper()
	data, err := heartbeat.Encode(&heartbeat.Heartbeat{V: heartbeat.SchemaVersion, AgentID: id, Group: group, App: ns.Key(),
		ActiveVersion: version, UpdaterVersion: "0.1.0", At: time.Now().UTC(), Seq: uint64(time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// groupCounted: the controller counts at least n agents in group.
func groupCounted(ctx context.Context, f *kv.Fleet, controller, group string, n int) error {
	var s kv.Stats
	if err := getJSON(ctx, f, kv.BucketStats, kv.StatsKey(group, controller), &s); err != nil {
		return err
	}
	if s.Agents < n {
		return fmt.Errorf("group %s: %d agents counted, want %d", group, s.Agents, n)
	}
	return nil
}

// getJSON decodes the value of key in bucket (one attempt, bounded: callers
// poll).
func getJSON(ctx context.Context, f *kv.Fleet, bucket, key string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err := kv.DirectGetLast(ctx, f.JS.Conn(), kv.StreamOf(bucket), kv.KeySubject(bucket, key))
	if err != nil {
		return err
	}
	return json.Unmarshal(m.Data, v)
}

func waitState(t *testing.T, ctx context.Context, f *kv.Fleet, group string, want rollout.State) {
	t.Helper()
	natstest.Eventually(t, 30*time.Second, func() error {
		var st rollout.GroupStatus
		if err := getJSON(ctx, f, kv.BucketPlan, kv.GroupKey(group), &st); err != nil {
			return err
		}
		if st.State != want || st.Halted {
			return fmt.Errorf("group %s is %s (halted %v: %s), want %s", group, st.State, st.Halted, st.HaltReason, want)
		}
		return nil
	})
}

// state is what the attack must not change.
type state struct {
	config, spec uint64
	victimHB     []byte
	leader       string
}

func snapshot(t *testing.T, ctx context.Context, f *kv.Fleet) state {
	t.Helper()
	nc := f.JS.Conn()
	var s state
	for _, k := range []struct {
		dst    *uint64
		bucket string
		key    string
	}{{&s.config, kv.BucketConfig, kv.KeyConfig}, {&s.spec, kv.BucketPlan, kv.KeySpec}} {
		m, err := kv.DirectGetLast(ctx, nc, kv.StreamOf(k.bucket), kv.KeySubject(k.bucket, k.key))
		if err != nil {
			t.Fatal(err)
		}
		if m.Foreign {
			t.Errorf("%s/%s holds a foreign value at %d: %s", k.bucket, k.key, m.Sequence, m.Data)
		}
		*k.dst = m.Sequence
	}
	m, err := kv.DirectGetLast(ctx, nc, kv.StreamHB, heartbeat.SubjectFor("prod", victim2))
	if err != nil {
		t.Fatal(err)
	}
	s.victimHB = m.Data
	lease, err := kv.DirectGetLast(ctx, nc, kv.StreamOf(kv.BucketStats), kv.KeySubject(kv.BucketStats, kv.KeyLeader))
	if err != nil {
		t.Fatal(err)
	}
	var lv kv.LeaseValue
	if err := json.Unmarshal(lease.Data, &lv); err != nil {
		t.Errorf("lease holds %q: %v", lease.Data, err)
	}
	s.leader = lv.Holder
	return s
}

// ObserverCreds mints, for a test, a user of account (AGENTS or CONTROL)
// that may subscribe to everything and publish nothing: it sees every
// answer that lands in the account, to prove an attack fired.
func ObserverCreds(t *testing.T, d auth.Dir, account string) string {
	t.Helper()
	return MintTestUser(t, d, account, "attacktest-observer", func(uc *jwt.UserClaims) {
		uc.Permissions.Pub.Deny.Add(">")
	})
}

// MintTestUser mints, for a test, a user named name of account with the
// account's signing key in d, shaped by set (grants, connection types),
// and returns the path of its creds file: a user no fleetctl command would
// mint, to show what the account alone allows.
func MintTestUser(t *testing.T, d auth.Dir, account, name string, set func(*jwt.UserClaims)) string {
	t.Helper()
	read := func(file string) []byte {
		b, err := os.ReadFile(filepath.Join(d.Path, file))
		if err != nil {
			t.Fatal(err)
		}
		return bytes.TrimSpace(b)
	}
	jwtFile, seedFile := auth.AccountFiles(account)
	ac, err := jwt.DecodeAccountClaims(string(read(jwtFile)))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := nkeys.FromSeed(read(seedFile))
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
	uc.IssuerAccount = ac.Subject
	set(uc)
	token, err := uc.Encode(signer)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := user.Seed()
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Recorder keeps every message one connection sees on ">".
type Recorder struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

// Record starts a Recorder on nc, for subjects (default ">").
func Record(t *testing.T, nc *nats.Conn, subjects ...string) *Recorder {
	t.Helper()
	r := &Recorder{}
	if len(subjects) == 0 {
		subjects = []string{">"}
	}
	for _, subj := range subjects {
		if _, err := nc.Subscribe(subj, func(m *nats.Msg) {
			r.mu.Lock()
			r.msgs = append(r.msgs, m)
			r.mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// Count is how many messages on subject the recorder saw.
func (r *Recorder) Count(subject string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if m.Subject == subject {
			n++
		}
	}
	return n
}

// Len is how many messages the recorder saw.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// Since are the messages the recorder saw after the first n.
func (r *Recorder) Since(n int) []*nats.Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs[min(n, len(r.msgs)):])
}

// Subjects are the subjects the recorder saw messages on, sorted.
func (r *Recorder) Subjects() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.msgs {
		if !slices.Contains(out, m.Subject) {
			out = append(out, m.Subject)
		}
	}
	slices.Sort(out)
	return out
}

// foreign is an error naming the first message seen in FLEET on one of the
// attack's reply subjects that is not what its legitimate writer sends
// there: the lease renewed by the controller, a group status or an event
// of prod written by the controller, a change republished by the plan
// bucket. Nothing else is legitimate on those subjects during the attack.
func (r *Recorder) foreign(replies []string, controller string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if !slices.Contains(replies, m.Subject) {
			continue
		}
		if why := legit(m, controller); why != "" {
			return fmt.Errorf("FLEET saw %s (%s): %.120s %v", m.Subject, why, m.Data, m.Header)
		}
	}
	return nil
}

func legit(m *nats.Msg, controller string) string {
	stored, storedErr := kv.ParseStored(m.Header, m.Data)
	switch {
	case strings.HasPrefix(m.Reply, "$JS.ACK."):
		// A consumer (a controller's watch) delivering a stored message
		// under its own subject. What is stored is checked at the end; a
		// stored answer would carry the server's headers.
		if len(m.Header.Values(jetstream.StreamHeader)) > 0 {
			return "a JetStream answer, stored"
		}
	case m.Subject == kv.KeySubject(kv.BucketStats, kv.KeyLeader):
		var lv kv.LeaseValue
		if err := json.Unmarshal(m.Data, &lv); err != nil || lv.Holder != controller || len(m.Header.Values(jetstream.StreamHeader)) > 0 {
			return "not the controller's lease"
		}
	case m.Subject == kv.KeySubject(kv.BucketPlan, kv.GroupKey("prod")):
		var st rollout.GroupStatus
		if err := json.Unmarshal(m.Data, &st); err != nil || st.Group != "prod" || len(m.Header.Values(jetstream.StreamHeader)) > 0 {
			return "not prod's status"
		}
	case m.Subject == kv.EventSubject("prod"):
		var ev rollout.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Group != "prod" {
			return "not an event of prod"
		}
	case strings.HasPrefix(m.Subject, kv.PlanRepublish):
		key := strings.TrimPrefix(m.Subject, kv.PlanRepublish)
		if storedErr != nil || stored.Foreign || stored.Subject != kv.KeySubject(kv.BucketPlan, key) {
			return "not a change of " + key + " republished by the plan bucket"
		}
	default:
		return "nothing is sent there"
	}
	return ""
}
