package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// fleetEnv is an operator-mode server started from what "auth init" wrote,
// with the stream and buckets created by the controller user.
type fleetEnv struct {
	t     *testing.T
	ctx   context.Context
	dir   auth.Dir
	srv   *natstest.Server
	fleet *kv.Fleet // as the admin
}

func newFleetEnv(t *testing.T) *fleetEnv {
	t.Helper()
	e := newFleetEnvBare(t)
	if _, err := kv.Ensure(e.ctx, e.js(auth.CredsFile(auth.UserController)), kv.Options{Memory: true}); err != nil {
		t.Fatalf("controller creates the bus: %v", err)
	}
	f, err := kv.Open(e.ctx, e.js(auth.CredsFile(auth.UserAdmin)))
	if err != nil {
		t.Fatal(err)
	}
	e.fleet = f
	return e
}

// newFleetEnvBare is the server alone: no stream, no buckets.
func newFleetEnvBare(t *testing.T) *fleetEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	dir := auth.Dir{Path: t.TempDir()}
	if _, err := dir.Init("test", auth.DefaultJetStreamLimits); err != nil {
		t.Fatal(err)
	}
	srv := natstest.StartConfig(t, filepath.Join(dir.Path, auth.FileResolverConf))
	return &fleetEnv{t: t, ctx: ctx, dir: dir, srv: srv}
}

// runController runs the real controller (controller.Run, with the
// controller's minted creds and fast intervals) until ctx ends, as "c1". Its
// log is shown when the test fails; done reports how it ended.
func (e *fleetEnv) runController(ctx context.Context) (done <-chan error, log *natstest.Buffer) {
	e.t.Helper()
	log = &natstest.Buffer{}
	e.t.Cleanup(func() {
		if e.t.Failed() {
			e.t.Logf("controller log:\n%s", log.String())
		}
	})
	ch := make(chan error, 1)
	go func() {
		ch <- controller.Run(ctx, &controller.RunOptions{
			NATSURL: e.srv.URL(), Creds: filepath.Join(e.dir.Path, auth.CredsFile(auth.UserController)), ID: "c1",
			StatsInterval: 100 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, AgentExpiry: time.Minute,
			ReconcileInterval: 100 * time.Millisecond, LeaseTTL: 2 * time.Second, Replicas: 1,
		}, slog.New(slog.NewTextHandler(log, nil)))
	}()
	return ch, log
}

// conn connects with creds (relative to the auth dir, or absolute).
func (e *fleetEnv) conn(creds string, extra ...nats.Option) *nats.Conn {
	e.t.Helper()
	if !filepath.IsAbs(creds) {
		creds = filepath.Join(e.dir.Path, creds)
	}
	nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: e.srv.URL(), Name: "test", Creds: creds,
		Log: natstest.Logger(e.t), Extra: extra})
	if err != nil {
		e.t.Fatalf("connect with %s: %v", creds, err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

func (e *fleetEnv) js(creds string) jetstream.JetStream {
	e.t.Helper()
	js, err := jetstream.New(e.conn(creds))
	if err != nil {
		e.t.Fatal(err)
	}
	return js
}

func (e *fleetEnv) put(b jetstream.KeyValue, key string, v any) uint64 {
	e.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		e.t.Fatal(err)
	}
	rev, err := b.Put(e.ctx, key, data)
	if err != nil {
		e.t.Fatal(err)
	}
	return rev
}

// agentConn is a connection with an agent's creds that records every
// asynchronous error the server sends it (permission violations).
type agentConn struct {
	nc *nats.Conn
	js jetstream.JetStream

	mu     sync.Mutex
	errs   []string
	signal chan struct{}
}

func (e *fleetEnv) agent(id rollout.AgentID, creds string) *agentConn {
	e.t.Helper()
	return e.watched(creds, nats.CustomInboxPrefix(kv.AgentInboxPrefix(string(id))))
}

// watched connects with creds, recording asynchronous errors.
func (e *fleetEnv) watched(creds string, extra ...nats.Option) *agentConn {
	e.t.Helper()
	a := &agentConn{signal: make(chan struct{}, 1)}
	a.nc = e.conn(creds, append(extra,
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			a.mu.Lock()
			a.errs = append(a.errs, err.Error())
			a.mu.Unlock()
			select {
			case a.signal <- struct{}{}:
			default:
			}
		}))...)
	js, err := jetstream.New(a.nc)
	if err != nil {
		e.t.Fatal(err)
	}
	a.js = js
	return a
}

// violation waits until the server reported a permissions violation
// naming subject (or, when subject ends in "…", a subject starting so).
// denial is a call an agent's credentials must be refused.
type denial struct {
	name    string
	run     func(ctx context.Context, a *agentConn) error
	subject string // the subject the server names in the violation
	// silent calls cannot fail for the caller: a core publish or
	// subscription is refused asynchronously.
	silent bool
}

// expect makes the call as a and checks the server refused it.
func (d denial) expect(t *testing.T, e *fleetEnv, a *agentConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	// The call runs until the server has said no; a denied request would
	// otherwise only time out.
	callCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.run(callCtx, a) }()
	if err := a.violation(ctx, d.subject); err != nil {
		t.Error(err)
	}
	stop()
	if err := <-done; err == nil && !d.silent {
		t.Errorf("denied call reported success")
	}
}

func (a *agentConn) violation(ctx context.Context, subject string) error {
	quoted := `"` + subject + `"`
	if s, ok := strings.CutSuffix(subject, "…"); ok {
		quoted = `"` + s
	}
	for {
		a.mu.Lock()
		for _, e := range a.errs {
			if strings.Contains(strings.ToLower(e), "permissions violation") && strings.Contains(e, quoted) {
				a.mu.Unlock()
				return nil
			}
		}
		errs := append([]string(nil), a.errs...)
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return errors.New("no permissions violation for " + subject + "; errors seen: " + strings.Join(errs, "; "))
		case <-a.signal:
		}
	}
}

func (a *agentConn) violations() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.errs...)
}

const (
	agentA = rollout.AgentID("0a000000-0000-4000-8000-00000000000a")
	agentB = rollout.AgentID("0b000000-0000-4000-8000-00000000000b")
)

func hbData(t *testing.T, id rollout.AgentID, group string) []byte {
	t.Helper()
	data, err := heartbeat.Encode(&heartbeat.Heartbeat{V: heartbeat.SchemaVersion, AgentID: id, Group: group,
		ActiveVersion: "1.0.0", UpdaterVersion: "0.1.0", At: time.Now().UTC(), Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestAgentGrantsAndDenials runs every grant of DESIGN §6 with an agent's
// minted credentials (a user of the AGENTS account) against an
// operator-mode server, and every denial: each denied call must be refused
// by the server with a permissions violation naming the subject (the caller
// itself only sees a timeout). docs/security.md lists the same table; the
// test logs its counts.
func TestAgentGrantsAndDenials(t *testing.T) {
	e := newFleetEnv(t)
	for _, a := range []struct {
		id    rollout.AgentID
		group string
	}{{agentA, "blue"}, {agentB, "blue"}} {
		if _, _, err := e.dir.IssueAgent(a.id, a.group, ""); err != nil {
			t.Fatal(err)
		}
	}
	credsA := auth.AgentCredsFile(agentA)
	spec := rollout.Spec{V: 1, StartVersion: "1.0.0", TargetVersion: "1.1.0"}
	specRev := e.put(e.fleet.Plan, kv.KeySpec, spec)
	blue := rollout.GroupStatus{V: 1, Group: "blue", State: rollout.StateUnstarted}
	blueRev := e.put(e.fleet.Plan, kv.GroupKey("blue"), blue)
	e.put(e.fleet.Plan, kv.GroupKey("red"), rollout.GroupStatus{V: 1, Group: "red", State: rollout.StateUnstarted})
	e.put(e.fleet.Config, kv.KeyConfig, rollout.DefaultConfig())
	if _, err := e.fleet.JS.Publish(e.ctx, heartbeat.SubjectFor("blue", agentB), hbData(t, agentB, "blue")); err != nil {
		t.Fatal(err)
	}
	directGetKey := func(key string) func(ctx context.Context, a *agentConn) (uint64, error) {
		return func(ctx context.Context, a *agentConn) (uint64, error) {
			m, err := kv.DirectGetLast(ctx, a.nc, kv.PlanStream, kv.KeySubject(kv.BucketPlan, key))
			return m.Sequence, err
		}
	}

	var grants, denials int
	t.Run("grants", func(t *testing.T) {
		cases := []struct {
			name string
			run  func(ctx context.Context, a *agentConn) error
		}{
			{"publish own heartbeat with JetStream ack", func(ctx context.Context, a *agentConn) error {
				ack, err := a.js.Publish(ctx, heartbeat.SubjectFor("blue", agentA), hbData(t, agentA, "blue"))
				if err != nil {
					return err
				}
				if ack.Stream != kv.StreamHB {
					return errors.New("acked by stream " + ack.Stream)
				}
				m, err := e.fleet.HB.GetLastMsgForSubject(ctx, heartbeat.SubjectFor("blue", agentA))
				if err != nil {
					return err
				}
				_, err = heartbeat.DecodeFrom(m.Subject, m.Data)
				return err
			}},
			{"direct get of the spec", func(ctx context.Context, a *agentConn) error {
				rev, err := directGetKey(kv.KeySpec)(ctx, a)
				if err == nil && rev != specRev {
					err = fmt.Errorf("spec at revision %d, want %d", rev, specRev)
				}
				return err
			}},
			{"direct get of its own group's status", func(ctx context.Context, a *agentConn) error {
				rev, err := directGetKey(kv.GroupKey("blue"))(ctx, a)
				if err == nil && rev != blueRev {
					err = fmt.Errorf("status at revision %d, want %d", rev, blueRev)
				}
				return err
			}},
			{"follow spec and own group republished", func(ctx context.Context, a *agentConn) error {
				got := make(chan *nats.Msg, 2)
				for _, subj := range []string{kv.PlanRepublish + kv.KeySpec, kv.PlanRepublish + kv.GroupKey("blue")} {
					if _, err := a.nc.ChanSubscribe(subj, got); err != nil {
						return err
					}
				}
				if err := a.nc.FlushWithContext(ctx); err != nil {
					return err
				}
				e.put(e.fleet.Plan, kv.KeySpec, spec)
				e.put(e.fleet.Plan, kv.GroupKey("blue"), blue)
				seen := map[string]bool{}
				for len(seen) < 2 {
					select {
					case m := <-got:
						seen[m.Subject] = m.Header.Get(jetstream.SequenceHeader) != ""
					case <-ctx.Done():
						return errors.New("republished plan changes not received")
					}
				}
				return nil
			}},
		}
		for _, g := range cases {
			grants++
			t.Run(g.name, func(t *testing.T) {
				a := e.agent(agentA, credsA)
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
	})

	t.Run("denials", func(t *testing.T) {
		directGet := func(stream, subject string) func(context.Context, *agentConn) error {
			return func(ctx context.Context, a *agentConn) error {
				_, err := a.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
				return err
			}
		}
		request := func(subject string) func(context.Context, *agentConn) error {
			return func(ctx context.Context, a *agentConn) error {
				_, err := a.nc.RequestWithContext(ctx, subject, []byte("{}"))
				return err
			}
		}
		jsPublish := func(subject string, data []byte) func(context.Context, *agentConn) error {
			return func(ctx context.Context, a *agentConn) error {
				_, err := a.js.Publish(ctx, subject, data)
				return err
			}
		}
		publish := func(subject string) func(context.Context, *agentConn) error {
			return func(ctx context.Context, a *agentConn) error {
				if err := a.nc.Publish(subject, []byte("{}")); err != nil {
					return err
				}
				return a.nc.FlushWithContext(ctx)
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
		cases := []denial{
			// Writes to the plan: no agent may change what any agent does.
			{"KV put fleet_plan spec", jsPublish("$KV.fleet_plan.spec", []byte(`{"v":1}`)), "$KV.fleet_plan.spec", false},
			{"KV put own group status", jsPublish("$KV.fleet_plan.group.blue", []byte(`{"v":1}`)), "$KV.fleet_plan.group.blue", false},
			// fleetctl retry's request lives in the group status: no agent
			// may ask itself (or others) to retry.
			{"KV put a retry request into own group status", jsPublish("$KV.fleet_plan.group.blue",
				[]byte(`{"v":1,"group":"blue","state":"active","target_version":"2.0.0","retry":{"token":"20260101T000000.000000000Z","at":"2026-01-01T00:00:00Z"}}`)),
				"$KV.fleet_plan.group.blue", false},
			// fleetctl approve's approval lives in the group status too: no
			// agent may approve its own group's rollout.
			{"KV put an approval into own group status", jsPublish("$KV.fleet_plan.group.blue",
				[]byte(`{"v":1,"group":"blue","state":"unstarted","target_version":"2.0.0","awaiting_approval":{"stage":"start","since":"2026-01-01T00:00:00Z"},"approvals":[{"stage":"start","by":"agent","reason":"self","at":"2026-01-01T00:00:00Z"}]}`)),
				"$KV.fleet_plan.group.blue", false},
			{"KV delete spec", func(ctx context.Context, a *agentConn) error {
				m := nats.NewMsg("$KV.fleet_plan.spec")
				m.Header.Set("KV-Operation", "DEL")
				_, err := a.js.PublishMsg(ctx, m)
				return err
			}, "$KV.fleet_plan.spec", false},
			// The fleet-wide quarantine: no agent may lift one, or
			// quarantine a good version to stall the fleet.
			{"KV put the quarantine list", jsPublish(kv.KeySubject(kv.BucketPlan, kv.KeyQuarantine), []byte(`{"v":1,"versions":[]}`)),
				kv.KeySubject(kv.BucketPlan, kv.KeyQuarantine), false},
			{"read the quarantine list", directGet(kv.PlanStream, kv.KeySubject(kv.BucketPlan, kv.KeyQuarantine)),
				"$JS.API.DIRECT.GET.KV_fleet_plan." + kv.KeySubject(kv.BucketPlan, kv.KeyQuarantine), false},
			{"publish a fleet-wide event", publish(kv.EventSubject("")), kv.EventSubject(""), true},
			{"fake a republished plan to other agents", publish("fleet.plan.spec"), "fleet.plan.spec", true},
			{"fake another group's republished status", publish("fleet.plan.group.red"), "fleet.plan.group.red", true},
			{"write fleet_config", publish("$KV.fleet_config.config"), "$KV.fleet_config.config", true},
			{"take the leader lease", publish("$KV.fleet_stats.leader"), "$KV.fleet_stats.leader", true},
			{"publish an event", publish("fleet.events.blue"), "fleet.events.blue", true},
			{"publish anywhere else in fleet.>", publish("fleet.x"), "fleet.x", true},
			// The audit trail: no agent may write who did what.
			{"audit record with JetStream ack", jsPublish(kv.AuditSubject(""), []byte(`{"v":1}`)), kv.AuditSubject(""), false},
			{"audit record for its own group", publish(kv.AuditSubject("blue")), kv.AuditSubject("blue"), true},
			{"read the audit trail", directGet(kv.StreamAudit, kv.AuditSubject("")),
				"$JS.API.DIRECT.GET." + kv.StreamAudit + "." + kv.AuditSubject(""), false},
			{"read the audit trail's timeline (batched, as the controller may)", func(ctx context.Context, a *agentConn) error {
				_, err := kv.DirectGetBatch(ctx, a.nc, kv.StreamAudit, kv.BatchRequest{Seq: 1, Batch: 10}, func(kv.StoredMsg) error { return nil })
				return err
			}, "$JS.API.DIRECT.GET." + kv.StreamAudit, false},
			{"read the rollout events (batched, as the controller may)", func(ctx context.Context, a *agentConn) error {
				_, err := kv.DirectGetBatch(ctx, a.nc, kv.StreamEvents, kv.BatchRequest{Seq: 1, Batch: 10}, func(kv.StoredMsg) error { return nil })
				return err
			}, "$JS.API.DIRECT.GET." + kv.StreamEvents, false},
			{"the timeline's stream info", request("$JS.API.STREAM.INFO." + kv.StreamEvents), "$JS.API.STREAM.INFO." + kv.StreamEvents, false},
			{"purge the rollout events", request("$JS.API.STREAM.PURGE." + kv.StreamEvents), "$JS.API.STREAM.PURGE." + kv.StreamEvents, false},
			{"purge the audit trail", request("$JS.API.STREAM.PURGE." + kv.StreamAudit), "$JS.API.STREAM.PURGE." + kv.StreamAudit, false},
			// Heartbeats: only its own subject.
			{"heartbeat as another agent", jsPublish(heartbeat.SubjectFor("blue", agentB), hbData(t, agentB, "blue")),
				heartbeat.SubjectFor("blue", agentB), false},
			{"heartbeat in another group", jsPublish(heartbeat.SubjectFor("red", agentA), hbData(t, agentA, "red")),
				heartbeat.SubjectFor("red", agentA), false},
			// Reads beyond its two plan keys.
			{"bind the plan bucket (stream info)", func(ctx context.Context, a *agentConn) error {
				_, err := a.js.KeyValue(ctx, kv.BucketPlan)
				return err
			}, "$JS.API.STREAM.INFO.KV_fleet_plan", false},
			{"direct get another group's status", directGet(kv.PlanStream, "$KV.fleet_plan.group.red"),
				"$JS.API.DIRECT.GET.KV_fleet_plan.$KV.fleet_plan.group.red", false},
			{"direct get by sequence", request("$JS.API.DIRECT.GET.KV_fleet_plan"), "$JS.API.DIRECT.GET.KV_fleet_plan", false},
			{"bind fleet_config", func(ctx context.Context, a *agentConn) error {
				_, err := a.js.KeyValue(ctx, kv.BucketConfig)
				return err
			}, "$JS.API.STREAM.INFO.KV_fleet_config", false},
			{"direct get fleet_config", directGet("KV_fleet_config", "$KV.fleet_config.config"),
				"$JS.API.DIRECT.GET.KV_fleet_config.$KV.fleet_config.config", false},
			{"bind fleet_stats", func(ctx context.Context, a *agentConn) error {
				_, err := a.js.KeyValue(ctx, kv.BucketStats)
				return err
			}, "$JS.API.STREAM.INFO.KV_fleet_stats", false},
			{"direct get the leader lease", directGet("KV_fleet_stats", "$KV.fleet_stats.leader"),
				"$JS.API.DIRECT.GET.KV_fleet_stats.$KV.fleet_stats.leader", false},
			// The release catalog (issue 27): the controller's listing of the
			// repository; an agent neither forges nor reads it (agents read
			// the repository itself).
			{"write the release catalog", jsPublish(kv.KeySubject(kv.BucketStats, kv.KeyReleases), []byte(`{"v":1}`)),
				kv.KeySubject(kv.BucketStats, kv.KeyReleases), false},
			{"read the release catalog", directGet(kv.StreamOf(kv.BucketStats), kv.KeySubject(kv.BucketStats, kv.KeyReleases)),
				"$JS.API.DIRECT.GET.KV_fleet_stats." + kv.KeySubject(kv.BucketStats, kv.KeyReleases), false},
			{"heartbeat stream info", func(ctx context.Context, a *agentConn) error {
				_, err := a.js.Stream(ctx, kv.StreamHB)
				return err
			}, "$JS.API.STREAM.INFO.FLEET_HB", false},
			{"read another agent's heartbeat", directGet(kv.StreamHB, heartbeat.SubjectFor("blue", agentB)),
				"$JS.API.DIRECT.GET.FLEET_HB." + heartbeat.SubjectFor("blue", agentB), false},
			{"account info", func(ctx context.Context, a *agentConn) error {
				_, err := a.js.AccountInfo(ctx)
				return err
			}, "$JS.API.INFO", false},
			{"a system request", request("$SYS.REQ.SERVER.PING"), "$SYS.REQ.SERVER.PING", false},
			// Stream and consumer administration.
			{"delete the heartbeat stream", request("$JS.API.STREAM.DELETE.FLEET_HB"), "$JS.API.STREAM.DELETE.FLEET_HB", false},
			{"delete the plan bucket", request("$JS.API.STREAM.DELETE.KV_fleet_plan"), "$JS.API.STREAM.DELETE.KV_fleet_plan", false},
			{"purge the plan", request("$JS.API.STREAM.PURGE.KV_fleet_plan"), "$JS.API.STREAM.PURGE.KV_fleet_plan", false},
			{"change the plan stream", request("$JS.API.STREAM.UPDATE.KV_fleet_plan"), "$JS.API.STREAM.UPDATE.KV_fleet_plan", false},
			{"create a stream", func(ctx context.Context, a *agentConn) error {
				_, err := a.js.CreateStream(ctx, jetstream.StreamConfig{Name: "SNOOP", Subjects: []string{"fleet.hb.>"}})
				return err
			}, "$JS.API.STREAM.CREATE.SNOOP", false},
			{"watch the plan (a consumer per agent)", request("$JS.API.CONSUMER.CREATE.KV_fleet_plan"),
				"$JS.API.CONSUMER.CREATE.KV_fleet_plan", false},
			// Subscriptions: only the two plan subjects and its own inbox.
			{"subscribe to everything", subscribe(">"), ">", true},
			{"subscribe to every heartbeat", subscribe("fleet.hb.>"), "fleet.hb.>", true},
			{"subscribe to another group's plan", subscribe("fleet.plan.group.red"), "fleet.plan.group.red", true},
			{"subscribe to every plan change", subscribe("fleet.plan.>"), "fleet.plan.>", true},
			{"subscribe to events", subscribe("fleet.events.>"), "fleet.events.>", true},
			{"subscribe to the bucket subjects", subscribe("$KV.fleet_plan.>"), "$KV.fleet_plan.>", true},
			{"subscribe to another agent's inbox", subscribe(kv.AgentInboxPrefix(string(agentB)) + ".>"),
				kv.AgentInboxPrefix(string(agentB)) + ".>", true},
			{"subscribe to the shared inbox space", subscribe("_INBOX.>"), "_INBOX.>", true},
			{"subscribe to the JetStream API", subscribe("$JS.API.>"), "$JS.API.>", true},
		}
		for _, d := range cases {
			denials++
			t.Run(d.name, func(t *testing.T) { d.expect(t, e, e.agent(agentA, credsA)) })
		}
		// Nothing an agent tried reached the audit trail.
		audit, err := e.fleet.JS.Stream(e.ctx, kv.StreamAudit)
		if err != nil {
			t.Fatal(err)
		}
		if n := audit.CachedInfo().State.Msgs; n != 0 {
			t.Errorf("%s holds %d messages after the agent's attempts", kv.StreamAudit, n)
		}
	})
	t.Logf("agent credentials: %d grants, %d denials tested", grants, denials)
}
