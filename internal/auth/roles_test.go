package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/internal/attacktest"
	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestRoleGrants: who may change the target version. The controller writes
// group statuses, stats and events but neither the plan spec nor the config;
// the admin writes both; a leaf user cannot be used as a client at all.
func TestRoleGrants(t *testing.T) {
	e := newFleetEnv(t)
	if _, _, err := e.dir.IssueEdge("x", "", ""); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		creds  string
		bucket string
		key    string
		denied string // subject of the expected violation; "" = allowed
	}{
		{"controller writes a group status", auth.CredsFile(auth.UserController), kv.BucketPlan, kv.GroupKey("blue"), ""},
		{"controller writes stats", auth.CredsFile(auth.UserController), kv.BucketStats, kv.StatsKey("blue", "c1"), ""},
		{"controller may not change the target", auth.CredsFile(auth.UserController), kv.BucketPlan, kv.KeySpec, "$KV.fleet_plan.spec"},
		{"controller may not change the config", auth.CredsFile(auth.UserController), kv.BucketConfig, kv.KeyConfig, "$KV.fleet_config.config"},
		{"admin changes the target", auth.CredsFile(auth.UserAdmin), kv.BucketPlan, kv.KeySpec, ""},
		{"admin changes the config", auth.CredsFile(auth.UserAdmin), kv.BucketConfig, kv.KeyConfig, ""},
		// Another app's keys (DESIGN §9): the same split.
		{"controller writes an app's group status", auth.CredsFile(auth.UserController), kv.BucketPlan, kv.OtherNS("web").Group("blue"), ""},
		{"controller writes an app's quarantine", auth.CredsFile(auth.UserController), kv.BucketPlan, kv.OtherNS("web").Quarantine(), ""},
		{"controller writes an app's stats", auth.CredsFile(auth.UserController), kv.BucketStats, kv.OtherNS("web").Stats("blue", "c1"), ""},
		{"controller may not change an app's target", auth.CredsFile(auth.UserController), kv.BucketPlan, kv.OtherNS("web").Spec(), "$KV.fleet_plan.web.spec"},
		{"admin changes an app's target", auth.CredsFile(auth.UserAdmin), kv.BucketPlan, kv.OtherNS("web").Spec(), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := e.watched(c.creds)
			ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
			defer cancel()
			b, err := a.js.KeyValue(ctx, c.bucket)
			if err != nil {
				t.Fatal(err)
			}
			callCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := b.Put(callCtx, c.key, []byte(`{"v":1}`))
				done <- err
			}()
			if c.denied == "" {
				if err := <-done; err != nil {
					t.Errorf("put: %v (server said %q)", err, a.violations())
				}
				stop()
				return
			}
			if err := a.violation(ctx, c.denied); err != nil {
				t.Error(err)
			}
			stop()
			if err := <-done; err == nil {
				t.Error("denied put reported success")
			}
		})
	}
	t.Run("leaf user cannot connect as a client", func(t *testing.T) {
		nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: e.srv.URL(), Name: "test",
			Creds: filepath.Join(e.dir.Path, auth.CredsFile("edge-x")), Log: natstest.Logger(t)})
		if err == nil {
			nc.Close()
			t.Fatal("connected")
		}
		if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
			t.Errorf("got %v, want an authorization violation", err)
		}
	})
}

// TestControllerCannotChangeTheTarget tries, with the controller's minted
// credentials (a user of CONTROL), every way the controller's old grants
// (a user of FLEET with the whole JetStream API) let it write the plan spec
// or the config: direct KV writes; a direct get of a value it may write
// (group.evil, holding a spec of its choosing) answered onto the spec or the
// config; a stream-info answer and a write's ack aimed there; a consumer
// delivering group.evil onto the spec; a new stream republishing onto it;
// changing, deleting or re-creating the plan stream; a batched read aimed
// there. Afterwards the spec and the config keep their revisions, and the
// admin still writes both.
func TestControllerCannotChangeTheTarget(t *testing.T) {
	e := newFleetEnv(t)
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	specRev := e.put(e.fleet.Plan, kv.KeySpec, spec)
	cfgRev := e.put(e.fleet.Config, kv.KeyConfig, rollout.DefaultConfig())
	// One record in the audit trail, which the controller may read.
	if err := e.fleet.PublishAudit(e.ctx, kv.AuditRecord{V: 1, At: time.Now().UTC(), Actor: "alice", Command: "pause",
		Bucket: kv.BucketPlan, Key: kv.KeySpec}); err != nil {
		t.Fatal(err)
	}
	ctl := e.watched(auth.CredsFile(auth.UserController))
	evil := rollout.DefaultSpec("1.0.0", "6.6.6")
	evil.Schedule, evil.Strategy = rollout.ScheduleImmediate, rollout.StrategyGrouped
	evilJSON, err := json.Marshal(evil)
	if err != nil {
		t.Fatal(err)
	}
	// The controller may write group statuses: here one holding a spec.
	if _, err := ctl.js.Publish(e.ctx, kv.KeySubject(kv.BucketPlan, kv.GroupKey("evil")), evilJSON); err != nil {
		t.Fatalf("the controller writes a group key: %v", err)
	}
	specSubj, cfgSubj := kv.KeySubject(kv.BucketPlan, kv.KeySpec), kv.KeySubject(kv.BucketConfig, kv.KeyConfig)
	// Another app's spec (DESIGN §9): the controller may write that app's
	// group statuses and quarantine, never its spec.
	web := kv.OtherNS("web")
	webSpecRev := e.put(e.fleet.Plan, web.Spec(), spec)
	webSpecSubj := kv.KeySubject(kv.BucketPlan, web.Spec())
	if _, err := ctl.js.Publish(e.ctx, kv.KeySubject(kv.BucketPlan, web.Group("evil")), evilJSON); err != nil {
		t.Fatalf("the controller writes an app's group key: %v", err)
	}
	if _, err := ctl.js.Publish(e.ctx, kv.KeySubject(kv.BucketPlan, web.Quarantine()), evilJSON); err != nil {
		t.Fatalf("the controller writes an app's quarantine: %v", err)
	}
	// Sees the answers land in CONTROL, so the check below runs after them.
	observer := attacktest.Record(t, e.conn(attacktest.ObserverCreds(t, e.dir, auth.AccountControl)), specSubj, cfgSubj, webSpecSubj)
	request := func(subject string, body string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			m, err := ctl.nc.RequestWithContext(ctx, subject, []byte(body))
			if err != nil {
				return err
			}
			var resp struct {
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if json.Unmarshal(m.Data, &resp) == nil && resp.Error != nil {
				return errors.New(resp.Error.Description)
			}
			return nil
		}
	}
	reflect := func(subject, reply string, body []byte) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			if err := ctl.nc.PublishRequest(subject, reply, body); err != nil {
				return err
			}
			return ctl.nc.FlushWithContext(ctx)
		}
	}
	jsPublish := func(subject string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := ctl.js.Publish(ctx, subject, evilJSON)
			return err
		}
	}
	streamJSON := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	planGet := "$JS.API.DIRECT.GET." + kv.PlanStream + "."
	cases := []struct {
		name string
		run  func(ctx context.Context) error
		// refused: the call itself must fail (a denied or unanswerable
		// request); reflections cannot fail for the sender.
		refused bool
	}{
		{"KV put the spec", jsPublish(specSubj), true},
		{"KV put the config", jsPublish(cfgSubj), true},
		{"a direct get of group.evil answered onto the spec", reflect(planGet+kv.KeySubject(kv.BucketPlan, kv.GroupKey("evil")), specSubj, nil), false},
		{"a direct get of group.evil answered onto the config", reflect(planGet+kv.KeySubject(kv.BucketPlan, kv.GroupKey("evil")), cfgSubj, nil), false},
		{"a stream info answered onto the config", reflect("$JS.API.STREAM.INFO."+kv.PlanStream, cfgSubj, nil), false},
		{"a write's ack answered onto the spec", reflect(kv.KeySubject(kv.BucketPlan, kv.GroupKey("evil")), specSubj, evilJSON), false},
		{"a batched read answered onto the spec", reflect("$JS.API.DIRECT.GET."+kv.PlanStream, specSubj, []byte(`{"multi_last":["$KV.fleet_plan.>"]}`)), false},
		{"a batched audit trail read answered onto the spec", reflect("$JS.API.DIRECT.GET."+kv.StreamAudit, specSubj, []byte(`{"seq":1,"batch":10}`)), false},
		{"a consumer delivering group.evil onto the spec", request("$JS.API.CONSUMER.CREATE."+kv.PlanStream,
			`{"stream_name":"KV_fleet_plan","config":{"deliver_subject":"$KV.fleet_plan.spec","filter_subject":"$KV.fleet_plan.group.evil","deliver_policy":"last"}}`), true},
		{"a new stream republishing onto the spec", request("$JS.API.STREAM.CREATE.EVIL", streamJSON(jetstream.StreamConfig{
			Name: "EVIL", Subjects: []string{"fleet.events.evil"}, Storage: jetstream.MemoryStorage,
			RePublish: &jetstream.RePublish{Source: ">", Destination: specSubj}})), true},
		{"change the plan stream to take an events subject as the spec", request("$JS.API.STREAM.UPDATE."+kv.PlanStream, streamJSON(jetstream.StreamConfig{
			Name: kv.PlanStream, Subjects: []string{"$KV.fleet_plan.>", "fleet.events.evil"}})), true},
		{"re-create the plan stream with another config", request("$JS.API.STREAM.CREATE."+kv.PlanStream, streamJSON(jetstream.StreamConfig{
			Name: kv.PlanStream, Subjects: []string{"$KV.fleet_plan.>", "fleet.events.evil"}})), true},
		{"delete the plan bucket", request("$JS.API.STREAM.DELETE."+kv.PlanStream, ""), true},
		{"purge the config", request("$JS.API.STREAM.PURGE.KV_fleet_config", ""), true},
		{"delete the config message", request("$JS.API.STREAM.MSG.DELETE.KV_fleet_config", `{"seq":1}`), true},
		{"KV put an app's spec", jsPublish(webSpecSubj), true},
		{"a direct get of an app's group answered onto its spec", reflect(planGet+kv.KeySubject(kv.BucketPlan, web.Group("evil")), webSpecSubj, nil), false},
		{"a direct get of an app's spec answered onto it", reflect(planGet+webSpecSubj, webSpecSubj, nil), false},
		{"an app's group write's ack answered onto its spec", reflect(kv.KeySubject(kv.BucketPlan, web.Group("evil")), webSpecSubj, evilJSON), false},
		{"an app's quarantine write's ack answered onto its spec", reflect(kv.KeySubject(kv.BucketPlan, web.Quarantine()), webSpecSubj, evilJSON), false},
		{"a consumer delivering an app's group onto its spec", request("$JS.API.CONSUMER.CREATE."+kv.PlanStream,
			`{"stream_name":"KV_fleet_plan","config":{"deliver_subject":"$KV.fleet_plan.web.spec","filter_subject":"$KV.fleet_plan.web.group.evil","deliver_policy":"last"}}`), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
			defer cancel()
			err := c.run(ctx)
			if c.refused && err == nil {
				t.Errorf("the call succeeded")
			}
			t.Logf("%v", err)
		})
	}
	natstest.Eventually(t, 10*time.Second, func() error {
		// direct get, ack, a batch (spec, group.evil, end) and an audit
		// batch (the record, end) onto the spec; direct get and stream
		// info onto the config
		if s, c := observer.Count(specSubj), observer.Count(cfgSubj); s < 7 || c < 2 {
			return fmt.Errorf("answers seen in CONTROL: %d on the spec's subject, %d on the config's", s, c)
		}
		// two direct gets and two acks onto the app's spec
		if w := observer.Count(webSpecSubj); w < 4 {
			return fmt.Errorf("answers seen in CONTROL: %d on web's spec's subject", w)
		}
		return nil
	})
	// What is stored: the spec and the config as the admin wrote them.
	nc := e.fleet.JS.Conn()
	for _, k := range []struct {
		bucket, key string
		rev         uint64
	}{{kv.BucketPlan, kv.KeySpec, specRev}, {kv.BucketConfig, kv.KeyConfig, cfgRev}, {kv.BucketPlan, web.Spec(), webSpecRev}} {
		m, err := kv.DirectGetLast(e.ctx, nc, kv.StreamOf(k.bucket), kv.KeySubject(k.bucket, k.key))
		if err != nil {
			t.Fatal(err)
		}
		if m.Sequence != k.rev || m.Foreign {
			t.Errorf("%s/%s at revision %d (foreign %v), the admin wrote %d: %s", k.bucket, k.key, m.Sequence, m.Foreign, k.rev, m.Data)
		}
	}
	got, err := e.fleet.ReadSpec(e.ctx)
	if err != nil || got.Value.TargetVersion != "1.1.0" {
		t.Errorf("spec after the attempts: %+v, %v", got.Value, err)
	}
	// The admin may.
	if _, err := kv.Update(e.ctx, e.fleet.Plan, kv.KeySpec, evil, specRev); err != nil {
		t.Errorf("admin sets the target: %v", err)
	}
	if _, err := kv.Update(e.ctx, e.fleet.Config, kv.KeyConfig, rollout.DefaultConfig(), cfgRev); err != nil {
		t.Errorf("admin changes the config: %v", err)
	}
	t.Logf("controller credentials: %d ways to change the target or the config tried, none did", len(cases))
}

// TestControllerReadsTheTimeline: the controller's minted credentials (a
// user of CONTROL) read the timeline, FLEET_AUDIT and FLEET_EVENTS, with
// kv.ReadTimeline (an operator's record and the controller's own event, in
// order, with --since's start_time batch too) and as the controller's
// dashboard does (ReadTimelineQuery, ReadTimelineAfter); no violation.
func TestControllerReadsTheTimeline(t *testing.T) {
	e := newFleetEnv(t)
	rec := kv.AuditRecord{V: 1, At: time.Now().UTC(), Actor: "alice", Command: "pause", Bucket: kv.BucketPlan, Key: kv.KeySpec}
	if err := e.fleet.PublishAudit(e.ctx, rec); err != nil {
		t.Fatal(err)
	}
	ctl := e.watched(auth.CredsFile(auth.UserController))
	ev, err := json.Marshal(rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, Reason: "3 of 20 failed", At: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.js.Publish(e.ctx, kv.EventSubject("prod"), ev); err != nil {
		t.Fatalf("the controller publishes an event: %v", err)
	}
	// The controller's fleet, as controller.Run builds it.
	f, err := kv.Ensure(e.ctx, ctl.js, kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	for _, since := range []time.Time{{}, time.Now().Add(-time.Hour)} {
		entries, problems, err := f.ReadTimeline(ctx, since)
		if err != nil {
			t.Fatalf("ReadTimeline since %v with the controller's creds: %v (server said %q)", since, err, ctl.violations())
		}
		var got []string
		for _, en := range entries {
			switch {
			case en.Audit != nil:
				got = append(got, en.Audit.Actor+" "+en.Audit.Command)
			case en.Event != nil:
				got = append(got, "event "+string(en.Event.Kind)+" "+en.Event.Group)
			}
		}
		if want := "alice pause|event halt prod"; strings.Join(got, "|") != want || len(problems) != 0 {
			t.Errorf("timeline since %v: %q (problems %+v), want %q", since, got, problems, want)
		}
	}
	// What the controller's dashboard calls: the newest entries, then the
	// entries after a cursor.
	tl, err := f.ReadTimelineQuery(ctx, kv.TimelineQuery{Limit: 1})
	if err != nil || len(tl.Entries) != 2 || tl.Entries[1].Event == nil || tl.More || tl.Cursor != (kv.TimelineCursor{Audit: 1, Events: 1}) {
		t.Errorf("ReadTimelineQuery(limit 1) with the controller's creds: %+v, %v, want the record and the event, cursor 1/1", tl, err)
	}
	tl, err = f.ReadTimelineAfter(ctx, kv.TimelineCursor{Audit: 1}, 10)
	if err != nil || len(tl.Entries) != 1 || tl.Entries[0].Event == nil || tl.Entries[0].Stream != kv.StreamEvents {
		t.Errorf("ReadTimelineAfter(audit 1) with the controller's creds: %+v, %v, want the event of %s", tl, err, kv.StreamEvents)
	}
	if v := ctl.violations(); len(v) > 0 {
		t.Errorf("reading the timeline caused errors: %q", v)
	}
}
