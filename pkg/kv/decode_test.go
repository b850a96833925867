package kv_test

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// JetStream API responses as the server sends them. A request whose reply
// subject is a bucket key gets its response stored there: these are the
// foreign values readers must refuse. None has "v"; encoding/json decodes
// each into a zero or default value without an error.
const (
	streamInfoResponse = `{"type":"io.nats.jetstream.api.v1.stream_info_response","total":0,"offset":0,"limit":0,` +
		`"config":{"name":"KV_fleet_plan","subjects":["$KV.fleet_plan.>"],"retention":"limits","max_msgs_per_subject":5},` +
		`"created":"2026-11-23T12:00:00Z","state":{"messages":3,"bytes":512,"first_seq":1,"last_seq":3,"consumer_count":0}}`
	consumerErrorResponse = `{"type":"io.nats.jetstream.api.v1.consumer_create_response",` +
		`"error":{"code":403,"err_code":10099,"description":"permission denied"}}`
	pubAckResponse = `{"stream":"KV_fleet_plan","seq":7}`
)

var reflected = map[string]string{
	"stream info response":    streamInfoResponse,
	"consumer error response": consumerErrorResponse,
	"publish ack":             pubAckResponse,
}

func statusJSON(t *testing.T, group string, edit func(*rollout.GroupStatus)) string {
	t.Helper()
	st := rollout.GroupStatus{
		V: 1, Group: group, State: rollout.StateActive, Reason: "window open", Mode: rollout.ModeEnabled,
		TargetVersion: "1.4.0", StartVersion: "1.3.2", InitialCount: 20, Progress: 0.4,
		Canaries: []rollout.Canary{{ID: agentID(1)}},
	}
	if edit != nil {
		edit(&st)
	}
	return string(mustJSON(t, st))
}

func statsJSON(t *testing.T, group, controller string, edit func(*kv.Stats)) string {
	t.Helper()
	s := kv.Stats{V: 1, ControllerID: controller, Group: group, At: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC), Agents: 3,
		Versions: rollout.Counts{"1.4.0": {Count: 2, LowestID: agentID(1)}, rollout.NoVersion: {Count: 1, FailedCount: 1}}}
	if edit != nil {
		edit(&s)
	}
	return string(mustJSON(t, s))
}

// TestDecodeValues feeds every typed decoder its own good values, the
// values of other keys, JetStream API responses, and broken variants. A
// value is accepted only when it is what its key should hold; everything
// else is ErrCorrupt with a reason.
func TestDecodeValues(t *testing.T) {
	t.Parallel()
	spec := string(mustJSON(t, rollout.DefaultSpec("1.3.2", "1.4.0")))
	config := string(mustJSON(t, rollout.DefaultConfig()))
	beat := string(mustJSON(t, heartbeat.Heartbeat{V: 1, AgentID: agentID(1), Group: "prod", At: time.Now().UTC()}))
	decoders := map[string]func(key, data string) error{
		"config":     func(_, data string) error { _, err := kv.DecodeConfig([]byte(data)); return err },
		"spec":       func(_, data string) error { _, err := kv.DecodeSpec([]byte(data)); return err },
		"status":     func(key, data string) error { _, err := kv.DecodeGroupStatus(key, []byte(data)); return err },
		"stats":      func(key, data string) error { _, err := kv.DecodeStats(key, []byte(data)); return err },
		"quarantine": func(_, data string) error { _, err := kv.DecodeQuarantine([]byte(data)); return err },
	}
	keys := map[string]string{"config": kv.KeyConfig, "spec": kv.KeySpec, "status": "group.prod", "stats": "prod.c1", "quarantine": kv.KeyQuarantine}
	quarantine := `{"v":1,"versions":[{"version":"1.4.0","reason":"3 agents rolled back","agents":["` + string(agentID(1)) +
		`"],"agent_count":3,"at":"2026-11-23T12:00:00Z","by":"controller"}],"lifted":[{"version":"1.3.9","at":"2026-11-22T12:00:00Z","by":"alice"}]}`

	type tc struct {
		decoder, name, key, data string
		want                     string // "" accepted, else a part of the error
	}
	cases := []tc{
		{"config", "default config", "", config, ""},
		{"config", "hand-written, defaults filled in", "", `{"v":1,"groups":[{"name":"prod"}]}`, ""},
		{"config", "no v", "", `{"groups":[{"name":"prod"}]}`, `no "v"`},
		{"config", "v 2", "", `{"v":2}`, `"v" 2`},
		{"config", "typo in a field", "", `{"v":1,"groups":[{"name":"prod","max_inflight":"10%"}]}`, `unknown field "max_inflight"`},
		{"config", "does not validate", "", `{"v":1,"groups":[{"name":"prod","start_hour":24}]}`, "start_hour 24"},
		{"config", "a spec", "", spec, "unknown field"},
		{"config", "a group status", "", statusJSON(t, "prod", nil), "unknown field"},
		{"config", "not JSON", "", `x`, "not a JSON object"},
		{"config", "JSON null", "", `null`, `no "v"`},

		{"spec", "default spec", "", spec, ""},
		{"spec", "hand-written, defaults filled in", "", `{"v":1,"start_version":"1.3.2","target_version":"1.4.0"}`, ""},
		{"spec", "a newer writer's extra field", "", `{"v":1,"start_version":"1.3.2","target_version":"1.4.0","canary_hosts":[]}`, ""},
		{"spec", "no v", "", `{"start_version":"1.3.2","target_version":"1.4.0"}`, `no "v"`},
		{"spec", "no target", "", `{"v":1,"start_version":"1.3.2"}`, "target_version"},
		{"spec", "bad strategy", "", `{"v":1,"start_version":"1.3.2","target_version":"1.4.0","strategy":"yolo"}`, `strategy "yolo"`},
		{"spec", "a group status (it carries both versions)", "", statusJSON(t, "prod", nil), `has "group"`},
		{"spec", "a config", "", config, "target_version"},
		{"spec", "a heartbeat", "", beat, `has "group"`},
		{"spec", "not JSON", "", `x`, "not a JSON object"},

		{"status", "its own status", "group.prod", statusJSON(t, "prod", nil), ""},
		{"status", "unstarted before any valid spec", "group.prod", `{"v":1,"group":"prod","state":"unstarted","reason":"waiting for a valid plan spec"}`, ""},
		{"status", "another group's status", "group.prod", statusJSON(t, "staging", nil), `status of group "staging" stored under the key of group "prod"`},
		{"status", "no group", "group.prod", statusJSON(t, "", nil), "group"},
		{"status", "no v", "group.prod", `{"group":"prod","state":"active"}`, `no "v"`},
		{"status", "unknown state", "group.prod", statusJSON(t, "prod", func(s *rollout.GroupStatus) { s.State = "paused" }), `state "paused"`},
		{"status", "progress above 1", "group.prod", statusJSON(t, "prod", func(s *rollout.GroupStatus) { s.Progress = 1.5 }), "progress 1.5"},
		{"status", "bad target", "group.prod", statusJSON(t, "prod", func(s *rollout.GroupStatus) { s.TargetVersion = "latest" }), "target_version"},
		{"status", "bad canary id", "group.prod", statusJSON(t, "prod", func(s *rollout.GroupStatus) { s.Canaries[0].ID = "x" }), "canaries[0]"},
		{"status", "negative count", "group.prod", statusJSON(t, "prod", func(s *rollout.GroupStatus) { s.InitialCount = -1 }), "initial_count -1"},
		{"status", "a spec", "group.prod", spec, "state"},
		{"status", "a heartbeat of the group", "group.prod", beat, "state"},
		{"status", "the group's stats", "group.prod", statsJSON(t, "prod", "c1", nil), "state"},
		{"status", "not a status key", "spec", statusJSON(t, "prod", nil), "not a group status key"},

		{"quarantine", "the controller's list", "", quarantine, ""},
		{"quarantine", "empty", "", `{"v":1,"versions":[]}`, ""},
		{"quarantine", "no v", "", `{"versions":[]}`, `no "v"`},
		{"quarantine", "unknown field", "", `{"v":1,"versions":[],"extra":1}`, `unknown field "extra"`},
		{"quarantine", "bad version", "", strings.Replace(quarantine, `"1.4.0"`, `"latest"`, 1), "versions[0]"},
		{"quarantine", "no reason", "", strings.Replace(quarantine, `"3 agents rolled back"`, `""`, 1), "reason"},
		{"quarantine", "a spec", "", spec, "unknown field"},
		{"quarantine", "a group status", "", statusJSON(t, "prod", nil), "unknown field"},
		{"quarantine", "not JSON", "", `x`, "not a JSON object"},

		{"stats", "its own count", "prod.c1", statsJSON(t, "prod", "c1", nil), ""},
		{"stats", "another group's count", "prod.c1", statsJSON(t, "staging", "c1", nil), `count of group "staging" by controller "c1"`},
		{"stats", "another controller's count", "prod.c1", statsJSON(t, "prod", "c2", nil), `by controller "c2"`},
		{"stats", "key x value x", "x", `x`, "not a JSON object"},
		{"stats", "a valid count under key x", "x", statsJSON(t, "prod", "c1", nil), "stored under key x"},
		{"stats", "no v", "prod.c1", `{"group":"prod","controller_id":"c1","at":"2026-11-23T12:00:00Z"}`, `no "v"`},
		{"stats", "no time", "prod.c1", statsJSON(t, "prod", "c1", func(s *kv.Stats) { s.At = time.Time{} }), "at: missing"},
		{"stats", "negative count", "prod.c1", statsJSON(t, "prod", "c1", func(s *kv.Stats) { s.Versions["1.4.0"] = rollout.VersionCount{Count: -1} }), "negative count"},
		{"stats", "bad version", "prod.c1", statsJSON(t, "prod", "c1", func(s *kv.Stats) { s.Versions["latest"] = rollout.VersionCount{Count: 1} }), "versions"},
		{"stats", "with sites", "prod.c1", statsJSON(t, "prod", "c1", func(s *kv.Stats) {
			s.Sites = rollout.SiteCounts{"edge-a": {"1.4.0": {Count: 2}}, rollout.NoSite: {rollout.NoVersion: {Count: 1, FailedCount: 1}}}
		}), ""},
		{"stats", "bad site name", "prod.c1", statsJSON(t, "prod", "c1", func(s *kv.Stats) { s.Sites = rollout.SiteCounts{"edge a": {"1.4.0": {Count: 1}}} }), "sites: invalid site name"},
		{"stats", "negative site count", "prod.c1", statsJSON(t, "prod", "c1", func(s *kv.Stats) { s.Sites = rollout.SiteCounts{"edge-a": {"1.4.0": {Count: -1}}} }), "negative count"},
		{"stats", "bad site version", "prod.c1", statsJSON(t, "prod", "c1", func(s *kv.Stats) { s.Sites = rollout.SiteCounts{"edge-a": {"latest": {Count: 1}}} }), `sites: "edge-a"`},
		{"stats", "a group status", "prod.c1", statusJSON(t, "prod", nil), "controller_id: empty"},
		{"stats", "a heartbeat", "prod.c1", beat, "controller_id: empty"},
	}
	for decoder, key := range keys {
		for name, data := range reflected {
			cases = append(cases, tc{decoder, name, key, data, `no "v"`})
		}
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].decoder+cases[i].name < cases[j].decoder+cases[j].name })
	for _, c := range cases {
		t.Run(c.decoder+"/"+c.name, func(t *testing.T) {
			key := c.key
			if key == "" {
				key = keys[c.decoder]
			}
			err := decoders[c.decoder](key, c.data)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case c.want == "":
			case !errors.Is(err, kv.ErrCorrupt):
				t.Fatalf("err = %v, want ErrCorrupt", err)
			case !strings.Contains(err.Error(), c.want):
				t.Errorf("err = %v, want it to say %q", err, c.want)
			}
		})
	}
}

// forge stores at key of bucket a message that carries JetStream's own
// headers, as a direct-get response reflected into the key's subject is
// stored, with claims of revision 999. It returns the stream's real
// sequence for it.
func forge(t *testing.T, js jetstream.JetStream, bucket, key, data string) uint64 {
	t.Helper()
	m := nats.NewMsg(kv.KeySubject(bucket, key))
	m.Data = []byte(data)
	m.Header.Set("Nats-Stream", kv.StreamOf(bucket))
	m.Header.Set("Nats-Subject", kv.KeySubject(bucket, key))
	m.Header.Set("Nats-Sequence", "999")
	m.Header.Set("Nats-Time-Stamp", "2026-11-23T12:00:00Z")
	ack, err := js.PublishMsg(ctxT(t), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// TestReadersReportTrueRevision stores values with forged headers, the one
// way jetstream's KeyValue.Get reports a revision the stream never had (and
// every compare-and-swap against it fails forever). The typed readers report
// the stream's own sequence, call the value corrupt even when its body is
// valid, and an update against that revision replaces it.
func TestReadersReportTrueRevision(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)
	ctx := ctxT(t)
	spec := rollout.DefaultSpec("1.3.2", "1.4.0")
	for _, tc := range []struct {
		name, bucket, key, data string
		read                    func() (uint64, error)
		write                   func(rev uint64) error
	}{
		{"config with a valid body", kv.BucketConfig, kv.KeyConfig, string(mustJSON(t, rollout.DefaultConfig())),
			func() (uint64, error) { e, _, err := f.ReadConfig(ctx); return e.Revision, err },
			func(rev uint64) error {
				_, err := kv.Update(ctx, f.Config, kv.KeyConfig, rollout.DefaultConfig(), rev)
				return err
			}},
		{"spec that is a stream info response", kv.BucketPlan, kv.KeySpec, streamInfoResponse,
			func() (uint64, error) { e, err := f.ReadSpec(ctx); return e.Revision, err },
			func(rev uint64) error { _, err := kv.Update(ctx, f.Plan, kv.KeySpec, spec, rev); return err }},
		{"group status with a valid body", kv.BucketPlan, "group.prod", statusJSON(t, "prod", nil),
			func() (uint64, error) { e, err := f.ReadGroupStatus(ctx, "prod"); return e.Revision, err },
			func(rev uint64) error {
				_, err := f.Plan.Update(ctx, "group.prod", []byte(statusJSON(t, "prod", nil)), rev)
				return err
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq := forge(t, f.JS, tc.bucket, tc.key, tc.data)
			rev, err := tc.read()
			var p *kv.Problem
			if !errors.As(err, &p) || !errors.Is(err, kv.ErrCorrupt) {
				t.Fatalf("read forged value: %v, want a *kv.Problem wrapping ErrCorrupt", err)
			}
			if rev != seq || p.Revision != seq || p.Where() != tc.bucket+"/"+tc.key {
				t.Errorf("read forged value: revision %d, problem %s at %d; want the stream's %d", rev, p.Where(), p.Revision, seq)
			}
			if !strings.Contains(err.Error(), "JetStream's own headers") || !strings.Contains(err.Error(), "to repair: ") {
				t.Errorf("error %q does not say what the value is and how to repair it", err)
			}
			if err := tc.write(rev); err != nil {
				t.Fatalf("replace with compare-and-swap on the true revision: %v", err)
			}
			if rev, err := tc.read(); err != nil || rev != seq+1 {
				t.Errorf("after the repair: revision %d, %v; want %d and no error", rev, err, seq+1)
			}
		})
	}
	if _, err := f.ReadGroupStatus(ctx, "none"); !errors.Is(err, kv.ErrNotFound) {
		t.Errorf("missing status: %v, want ErrNotFound", err)
	}
	if err := f.Config.Delete(ctx, kv.KeyConfig); err != nil {
		t.Fatal(err)
	}
	if e, isDefault, err := f.ReadConfig(ctx); err != nil || !isDefault || e.Revision != 0 {
		t.Errorf("deleted config: %+v default=%v %v, want the default at revision 0", e, isDefault, err)
	}
}

// TestReadStateSkipsBadValues: the state of a bucket with a bad spec and two
// bad group statuses has the good status and lists the rest, with their
// revisions, instead of failing.
func TestReadStateSkipsBadValues(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)
	ctx := ctxT(t)
	put := func(key, data string) uint64 {
		t.Helper()
		rev, err := f.Plan.Put(ctx, key, []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	specRev := put(kv.KeySpec, streamInfoResponse)
	goodRev := put("group.a", statusJSON(t, "a", nil))
	otherRev := put("group.b", statusJSON(t, "a", nil))
	garbageRev := put("group.c", "x")
	quarantineRev := put(kv.KeyQuarantine, `{"v":1,"versions":[{"version":"x"}]}`)

	st, err := f.ReadState(ctx)
	if err != nil {
		t.Fatalf("ReadState: %v", err)
	}
	if st.HasSpec || st.Spec.Revision != specRev {
		t.Errorf("spec: HasSpec %v revision %d; want false and %d (to replace it against)", st.HasSpec, st.Spec.Revision, specRev)
	}
	if diff := cmp.Diff(map[string]uint64{"a": goodRev}, revisions(st.Groups)); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	got := map[string]uint64{}
	for _, p := range st.Problems {
		if !errors.Is(&p, kv.ErrCorrupt) {
			t.Errorf("%s: %v does not wrap ErrCorrupt", p.Where(), p.Err)
		}
		got[p.Where()] = p.Revision
	}
	want := map[string]uint64{"fleet_plan/spec": specRev, "fleet_plan/group.b": otherRev, "fleet_plan/group.c": garbageRev, "fleet_plan/quarantine": quarantineRev}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if p, ok := st.Problem(kv.BucketPlan, "group.b"); !ok || !strings.Contains(p.Fix(), "fleetctl reset --group b") {
		t.Errorf("Problem(group.b) = %v, %v; want one naming fleetctl reset --group b", p, ok)
	}
	if _, ok := st.Problem(kv.BucketConfig, kv.KeyConfig); ok {
		t.Error("the default config is reported as a problem")
	}
	if st.Quarantine.Revision != quarantineRev || len(st.Quarantine.Value.Versions) != 0 {
		t.Errorf("quarantine: %+v; want the bad value's revision %d and no versions", st.Quarantine, quarantineRev)
	}
	if p, ok := st.Problem(kv.BucketPlan, kv.KeyQuarantine); !ok || !strings.Contains(p.Fix(), "fleetctl quarantine add") {
		t.Errorf("Problem(quarantine) = %v, %v; want one naming fleetctl quarantine add", p, ok)
	}
}

// A plan bucket with a quarantine list reads it into State.Quarantine, and
// it is neither a group nor a problem; none written reads as an empty list
// at revision 0.
func TestReadQuarantine(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)
	ctx := ctxT(t)
	e, err := f.ReadQuarantine(ctx)
	if err != nil || e.Revision != 0 || e.Value.V != 1 || len(e.Value.Versions) != 0 {
		t.Fatalf("none written: %+v, %v", e, err)
	}
	l, err := e.Value.Add(rollout.Quarantine{Version: "1.4.0", Reason: "bad", At: time.Now().UTC(), By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Save(ctx, f.Plan, kv.KeyQuarantine, l, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, err := f.ReadState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Problems) > 0 || len(st.Groups) > 0 || st.Quarantine.Revision != rev || !st.Quarantine.Value.Quarantined("1.4.0") {
		t.Errorf("state: problems %v, groups %v, quarantine %+v", st.Problems, st.Groups, st.Quarantine)
	}
	e, err = f.ReadQuarantine(ctx)
	if err != nil || e.Revision != rev || !e.Value.Quarantined("1.4.0") {
		t.Errorf("ReadQuarantine: %+v, %v", e, err)
	}
}

func revisions(groups map[string]kv.Entry[rollout.GroupStatus]) map[string]uint64 {
	out := map[string]uint64{}
	for g, e := range groups {
		out[g] = e.Revision
	}
	return out
}

// TestReadValidStats: garbage and another group's count under a key are
// skipped and named; the valid entries and the lease are read as before.
func TestReadValidStats(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)
	ctx := ctxT(t)
	for key, data := range map[string]string{
		"prod.c1":    statsJSON(t, "prod", "c1", nil),
		"x":          "x",
		"staging.c2": statsJSON(t, "prod", "c2", nil),
		kv.KeyLeader: `{"v":1,"holder":"c1","renewed":"2026-11-23T12:00:00Z"}`,
	} {
		if _, err := f.Stats.Put(ctx, key, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	entries, skipped, err := f.ReadValidStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range entries {
		keys = append(keys, kv.StatsKey(s.Group, s.ControllerID))
	}
	if diff := cmp.Diff([]string{"prod.c1"}, keys); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	var bad []string
	for _, p := range skipped {
		bad = append(bad, p.Where())
	}
	sort.Strings(bad)
	if diff := cmp.Diff([]string{"fleet_stats/staging.c2", "fleet_stats/x"}, bad); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	if _, err := f.ReadStats(ctx); !errors.Is(err, kv.ErrCorrupt) || !strings.Contains(err.Error(), "fleet_stats/x") {
		t.Errorf("ReadStats: %v, want ErrCorrupt naming fleet_stats/x", err)
	}
}

// TestStoredHeartbeatDecode reads heartbeats from the stream: a good one, a
// body that is not a heartbeat, and a good-looking body stored with
// JetStream's own headers.
func TestStoredHeartbeatDecode(t *testing.T) {
	t.Parallel()
	_, f := ensure(t)
	ctx := ctxT(t)
	publishBeat(t, f.JS, "prod", agentID(1), 1)
	if _, err := f.JS.Publish(ctx, heartbeat.SubjectFor("prod", agentID(2)), []byte("x")); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(heartbeat.SubjectFor("prod", agentID(3)))
	m.Data = mustJSON(t, heartbeat.Heartbeat{V: 1, AgentID: agentID(3), Group: "prod", At: time.Now().UTC()})
	m.Header.Set("Nats-Stream", kv.StreamHB)
	m.Header.Set("Nats-Sequence", "999")
	if _, err := f.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	stored, err := f.LastHeartbeats(ctx, "prod")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range stored {
		_, err := s.Decode()
		var p *kv.Problem
		switch {
		case err == nil:
			got[s.Subject] = "ok"
		case errors.As(err, &p) && errors.Is(err, kv.ErrCorrupt) && p.Where() == kv.StreamHB+"/"+s.Subject && p.Revision == s.Sequence:
			got[s.Subject] = "bad: foreign=" + map[bool]string{true: "yes", false: "no"}[s.Foreign]
		default:
			t.Errorf("%s: %v, want a *kv.Problem naming it", s.Subject, err)
		}
	}
	want := map[string]string{
		heartbeat.SubjectFor("prod", agentID(1)): "ok",
		heartbeat.SubjectFor("prod", agentID(2)): "bad: foreign=no",
		heartbeat.SubjectFor("prod", agentID(3)): "bad: foreign=yes",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
}
