package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

var webhookSecret = []byte("test-secret")

// receiver is a real HTTP webhook receiver: it checks every POST's
// signature and event id header, and records the POSTs it accepted
// (duplicates included). While down it answers every POST with a failure
// of the chosen kind; with hold set, a POST it accepts waits for hold (or
// for the sender to give up) before it answers.
type receiver struct {
	t      *testing.T
	secret []byte
	format controller.WebhookFormat
	srv    *httptest.Server

	mu      sync.Mutex
	down    string // "", "503", "hang up", "no answer"
	got     []controller.WebhookPayload
	slack   []string // texts, for the slack format
	refused int
	hold    chan struct{}
	holdAt  int // the POST that waits for hold: after holdAt accepted
}

func newReceiver(t *testing.T, format controller.WebhookFormat) *receiver {
	t.Helper()
	r := &receiver{t: t, secret: webhookSecret, format: format}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
		r.t.Errorf("webhook request %s with Content-Type %q", req.Method, req.Header.Get("Content-Type"))
	}
	if sig := req.Header.Get(controller.HeaderWebhookSignature); !controller.VerifyWebhookSignature(r.secret, body, sig) {
		r.t.Errorf("webhook POST with a bad signature %q: %s", sig, body)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	r.mu.Lock()
	switch r.down {
	case "503":
		r.refused++
		r.mu.Unlock()
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	case "hang up":
		r.refused++
		r.mu.Unlock()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	case "no answer":
		r.refused++
		r.mu.Unlock()
		<-req.Context().Done() // the sender's timeout
		return
	}
	id := req.Header.Get(controller.HeaderWebhookEventID)
	if r.format == controller.WebhookSlack {
		var p map[string]string
		if err := json.Unmarshal(body, &p); err != nil || len(p) != 1 || p["text"] == "" {
			r.t.Errorf("slack webhook body %s: want exactly {\"text\": …}", body)
		}
		r.slack = append(r.slack, p["text"])
		r.mu.Unlock()
		return
	}
	var p controller.WebhookPayload
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		r.t.Errorf("webhook body %s: %v", body, err)
	}
	if p.ID == "" || p.ID != id {
		r.t.Errorf("webhook id %q, header %s %q", p.ID, controller.HeaderWebhookEventID, id)
	}
	r.got = append(r.got, p)
	hold := r.hold
	if hold != nil && len(r.got) <= r.holdAt {
		hold = nil
	}
	r.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-req.Context().Done():
			return // the sender gave up: no answer
		}
	}
}

func (r *receiver) setDown(how string) {
	r.mu.Lock()
	r.down = how
	r.mu.Unlock()
}

// holdAfter makes the POST after n accepted ones wait until release.
func (r *receiver) holdAfter(n int) {
	r.mu.Lock()
	r.hold, r.holdAt = make(chan struct{}), n
	r.mu.Unlock()
}

func (r *receiver) release() {
	r.mu.Lock()
	close(r.hold)
	r.hold = nil
	r.mu.Unlock()
}

func (r *receiver) accepted() []controller.WebhookPayload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func (r *receiver) refusedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

// dedupe is what a receiver does: the first POST of each id, in the order
// received.
func dedupe(posts []controller.WebhookPayload) []controller.WebhookPayload {
	seen := map[string]bool{}
	var out []controller.WebhookPayload
	for _, p := range posts {
		if !seen[p.ID] {
			seen[p.ID] = true
			out = append(out, p)
		}
	}
	return out
}

// testNotify is a webhook to each url with fast polls and a short,
// controlled backoff.
func testNotify(urls ...string) controller.Notify {
	n := controller.Notify{Secret: webhookSecret, Poll: 10 * time.Millisecond, Timeout: 2 * time.Second,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	for _, u := range urls {
		n.Webhooks = append(n.Webhooks, controller.Webhook{URL: u, Format: controller.WebhookJSON})
	}
	return n
}

// waitCursor waits until the leader has placed the webhook's cursor: the
// events stored from then on are the webhook's.
func (f *fixture) waitCursor(url string) kv.WebhookCursor {
	f.t.Helper()
	var c kv.WebhookCursor
	natstest.Eventually(f.t, waitLong, func() error {
		var err error
		c, _, err = kv.ReadWebhookCursor(f.ctx, f.fleet.JS.Conn(), kv.WebhookCursorKey(url))
		return err
	})
	return c
}

// forwarded lists what a webhook with the default kinds must get of
// FLEET_AUDIT after sequence after: each message's sequence, kind and
// group.
func (f *fixture) forwarded(after kv.WebhookCursor) []string {
	f.t.Helper()
	tl, err := f.fleet.ReadTimelineAfter(f.ctx, after.Timeline(), math.MaxInt)
	if err != nil || len(tl.Problems) > 0 {
		f.t.Fatalf("timeline: %v %v", err, tl.Problems)
	}
	entries := tl.Entries
	var out []string
	for _, e := range entries {
		if e.Event != nil && slices.Contains(controller.DefaultWebhookKinds, e.Event.Kind) {
			out = append(out, fmt.Sprintf("%d %s %s %s→%s", e.Seq, e.Event.Kind, e.Event.Group, e.Event.From, e.Event.To))
		}
	}
	return out
}

func describe(posts []controller.WebhookPayload) []string {
	out := make([]string, len(posts))
	for i, p := range posts {
		out[i] = fmt.Sprintf("%d %s %s %s→%s", p.Sequence, p.Kind, p.Group, p.Event.From, p.Event.To)
	}
	return out
}

// rollOut rolls canary then prod (4 agents each) from 1.0.0 to 2.0.0 with
// the fixture's controllers, to done.
func (f *fixture) rollOut() {
	f.t.Helper()
	state, err := f.fleet.ReadState(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true // the test's clock may be outside the start windows
	rev := uint64(0)
	if state.HasSpec {
		rev = state.Spec.Revision
	}
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, rev); err != nil {
		f.t.Fatal(err)
	}
	for round := 0; round < 40; round++ {
		f.advance(reconcileEvery)
		natstest.Eventually(f.t, waitLong, func() error {
			state, err = f.fleet.ReadState(f.ctx)
			if err != nil {
				return err
			}
			for _, g := range []string{"canary", "prod"} {
				if st, ok := state.Groups[g]; !ok || st.Value.TargetVersion != "2.0.0" {
					return fmt.Errorf("group %s has no status for 2.0.0 yet", g)
				}
			}
			return nil
		})
		done := 0
		for _, g := range []string{"canary", "prod"} {
			st := state.Groups[g].Value
			if st.Halted {
				f.t.Fatalf("group %s halted: %s", g, st.HaltReason)
			}
			if st.State == rollout.StateDone {
				done++
			}
		}
		if done == 2 {
			return
		}
		if f.obey(state) > 0 {
			for _, rc := range f.ctrls {
				f.waitVersions(rc)
			}
		}
	}
	f.t.Fatalf("rollout did not finish in 40 rounds")
}

// canaryThenProd is the config rollOut rolls: canary, then prod.
func (f *fixture) canaryThenProd() {
	f.t.Helper()
	cfg := rollout.DefaultConfig()
	canary, prod := rollout.DefaultGroup("canary"), rollout.DefaultGroup("prod")
	canary.CanaryCount, prod.CanaryCount = 1, 1
	canary.MinHealthyTime, prod.MinHealthyTime = 0, 0
	canary.MaxInFlight, prod.MaxInFlight = 50, 50
	prod.DependsOn = []string{"canary"}
	cfg.Groups = []rollout.GroupConfig{canary, prod}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		f.t.Fatal(err)
	}
}

// webhookSamples reads the webhook metrics of reg: outcome → count, and
// "pending" and "latency_count".
func webhookSamples(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, fam := range fams {
		for _, m := range fam.GetMetric() {
			switch fam.GetName() {
			case "fleetwave_webhook_deliveries_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" {
						out[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			case "fleetwave_webhook_pending":
				out["pending"] += m.GetGauge().GetValue()
			case "fleetwave_webhook_delivery_latency_seconds":
				out["latency_count"] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestWebhookReceiverDownRolloutGoesOn: with the receiver down the whole
// time (answering 503, hanging up, or not answering at all), a rollout of
// two groups still runs to done: it never waits on the webhook. Once the
// receiver is back, it gets every transition, halt, alert and quarantine
// event of FLEET_AUDIT, each exactly once, in stream order, signed (the
// receiver checks every signature).
func TestWebhookReceiverDownRolloutGoesOn(t *testing.T) {
	for _, down := range []string{"503", "hang up", "no answer"} {
		t.Run(down, func(t *testing.T) {
			f := newFixture(t)
			rcv := newReceiver(t, controller.WebhookJSON)
			rcv.setDown(down)
			f.notify = testNotify(rcv.srv.URL)
			f.notify.Timeout = 200 * time.Millisecond // what "no answer" waits
			f.canaryThenProd()
			rc := f.startController("c1")
			for range 4 {
				f.startAgent("canary", "1.0.0", false)
				f.startAgent("prod", "1.0.0", false)
			}
			f.waitHeard(rc.c, time.Time{})
			f.step(interval) // every agent established
			start := f.waitCursor(rcv.srv.URL)

			f.rollOut()
			natstest.Eventually(t, waitLong, func() error {
				if n := rcv.refusedCount(); n < 2 {
					return fmt.Errorf("%d POSTs refused, want the sender to have tried and retried", n)
				}
				return nil
			})
			if got := rcv.accepted(); len(got) != 0 {
				t.Fatalf("the receiver is down and accepted %d POSTs", len(got))
			}
			natstest.Eventually(t, waitLong, func() error {
				if m := webhookSamples(t, rc.c.Registry()); m["failed"] < 2 || m["ok"] != 0 || m["pending"] == 0 {
					return fmt.Errorf("metrics while the receiver is down: %v, want failed attempts, none ok, messages pending", m)
				}
				return nil
			})

			rcv.setDown("")
			want := f.forwarded(start)
			if len(want) < 8 {
				t.Fatalf("only %d events to forward: %q", len(want), want)
			}
			natstest.Eventually(t, waitLong, func() error {
				if diff := cmp.Diff(want, describe(rcv.accepted())); diff != "" {
					return fmt.Errorf("received (-want +got):\n%s", diff)
				}
				return nil
			})
			// One leader, no change of leader: not even a duplicate.
			if got := rcv.accepted(); len(dedupe(got)) != len(got) {
				t.Errorf("%d POSTs for %d events", len(got), len(dedupe(got)))
			}
			natstest.Eventually(t, waitLong, func() error {
				m := webhookSamples(t, rc.c.Registry())
				if m["ok"] != float64(len(want)) || m["latency_count"] != float64(len(want)) || m["pending"] != 0 || m["dropped"] != 0 {
					return fmt.Errorf("metrics once delivered: %v, want %d ok and latencies, none pending or dropped", m, len(want))
				}
				return nil
			})
			for _, p := range rcv.accepted() {
				if p.Type != "event" || p.Event == nil || p.Text == "" || p.Time.IsZero() || p.Stream != kv.StreamEvents ||
					!strings.HasPrefix(p.ID, fmt.Sprintf("%s-%d-", kv.StreamEvents, p.Sequence)) {
					t.Errorf("payload %+v", p)
				}
			}
		})
	}
}

// TestWebhookLeaderStoppedMidStream: two controllers on one bus, both with
// the webhook; only the leader sends. The leader is stopped while a POST
// is in flight (the receiver got it and has not answered); the other
// controller takes the lead and resumes from the cursor on the bus: the
// receiver gets every event at least once, the one in flight twice, and
// after dedupe by id every event exactly once, in order.
func TestWebhookLeaderStoppedMidStream(t *testing.T) {
	f := newFixture(t)
	rcv := newReceiver(t, controller.WebhookJSON)
	f.notify = testNotify(rcv.srv.URL)
	c1 := f.startController("c1")
	c2 := f.startController("c2")
	start := f.waitCursor(rcv.srv.URL)
	lease, err := kv.Get[kv.LeaseValue](f.ctx, f.fleet.Stats, kv.KeyLeader)
	if err != nil {
		t.Fatal(err)
	}
	leader, other := c1, c2
	if lease.Value.Holder == "c2" {
		leader, other = c2, c1
	}

	const n, inFlight = 20, 6
	rcv.holdAfter(inFlight - 1)
	kinds := []rollout.EventKind{rollout.EventTransition, rollout.EventHalt, rollout.EventAlert}
	for i := range n {
		ev := rollout.Event{V: 1, Group: []string{"blue", "green"}[i%2], Kind: kinds[i%3], From: rollout.StateCanary,
			To: rollout.StateActive, Reason: fmt.Sprintf("event %d", i), At: time.Now().UTC()}
		if err := f.fleet.PublishEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	natstest.Eventually(t, waitLong, func() error {
		if got := len(rcv.accepted()); got != inFlight {
			return fmt.Errorf("receiver has %d POSTs, want %d (the last one held)", got, inFlight)
		}
		return nil
	})
	leader.halt(t) // cuts the POST in flight off: not acknowledged
	f.ctrls = slices.DeleteFunc(f.ctrls, func(rc *runningController) bool { return rc == leader })
	rcv.release()
	if got := len(rcv.accepted()); got != inFlight {
		t.Fatalf("%d POSTs while nobody leads, want %d", got, inFlight)
	}
	f.pass() // the other controller campaigns: the lease was released

	want := f.forwarded(start)
	if len(want) != n {
		t.Fatalf("%d events in the stream, want %d", len(want), n)
	}
	natstest.Eventually(t, waitLong, func() error {
		if diff := cmp.Diff(want, describe(dedupe(rcv.accepted()))); diff != "" {
			return fmt.Errorf("received after dedupe (-want +got):\n%s", diff)
		}
		return nil
	})
	got := rcv.accepted()
	if len(got) != n+1 || got[inFlight].ID != got[inFlight-1].ID {
		t.Errorf("%d POSTs, want %d: every event once and the one in flight (%s) again at once: %q",
			len(got), n+1, got[inFlight-1].ID, describe(got))
	}
	// The receiver has the last POST before the controller has read its
	// answer and counted it.
	natstest.Eventually(t, waitLong, func() error {
		if m := webhookSamples(t, other.c.Registry()); m["ok"] != float64(n-inFlight+1) {
			return fmt.Errorf("the new leader's metrics: %v, want %d ok", m, n-inFlight+1)
		}
		return nil
	})
}

// TestWebhookDropsAfterMaxAge: a message the receiver refuses for longer
// than the max age is dropped (a metric and a log line) and the webhook
// goes on with the next; a second webhook, in the slack format, has its own
// cursor and gets both messages as Slack text, escaped.
func TestWebhookDropsAfterMaxAge(t *testing.T) {
	f := newFixture(t)
	rcv := newReceiver(t, controller.WebhookJSON)
	slack := newReceiver(t, controller.WebhookSlack)
	rcv.setDown("503")
	f.notify = testNotify(rcv.srv.URL)
	f.notify.Webhooks = append(f.notify.Webhooks, controller.Webhook{URL: slack.srv.URL, Format: controller.WebhookSlack})
	f.notify.MaxAge = 500 * time.Millisecond
	var logs natstest.Buffer
	rc := f.startControllerLogging("c1", &logs)
	f.waitCursor(rcv.srv.URL)
	f.waitCursor(slack.srv.URL)

	publish := func(ev rollout.Event) {
		t.Helper()
		ev.V, ev.At = 1, time.Now().UTC()
		if err := f.fleet.PublishEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	publish(rollout.Event{Group: "prod", Kind: rollout.EventHalt, From: rollout.StateCanary, To: rollout.StateCanary,
		Reason: "canary a1 failed: exit 3 <stderr> & more"})
	natstest.Eventually(t, waitLong, func() error {
		if m := webhookSamples(t, rc.c.Registry()); m["dropped"] != 1 {
			return fmt.Errorf("metrics %v, want 1 dropped", m)
		}
		return nil
	})
	if !strings.Contains(logs.String(), "webhook message dropped") {
		t.Errorf("no log line for the dropped message:\n%s", logs.String())
	}
	rcv.setDown("")
	publish(rollout.Event{Kind: rollout.EventQuarantine, Reason: "version 1.2.0 quarantined: 3 hosts rolled it back"})
	natstest.Eventually(t, waitLong, func() error {
		got := rcv.accepted()
		if len(got) != 1 || got[0].Kind != string(rollout.EventQuarantine) || got[0].Group != "" {
			return fmt.Errorf("received %q, want the quarantine alone", describe(got))
		}
		return nil
	})
	want := []string{
		":rotating_light: fleetwave: group prod halted in canary: canary a1 failed: exit 3 &lt;stderr&gt; &amp; more",
		":no_entry: fleetwave: version 1.2.0 quarantined: 3 hosts rolled it back",
	}
	natstest.Eventually(t, waitLong, func() error {
		slack.mu.Lock()
		defer slack.mu.Unlock()
		if diff := cmp.Diff(want, slack.slack); diff != "" {
			return fmt.Errorf("slack texts (-want +got):\n%s", diff)
		}
		return nil
	})
}

// TestWebhookForwardsChosenKindsAndAudit: --webhook-events picks the kinds;
// "audit" adds fleetctl's audit records.
func TestWebhookForwardsChosenKindsAndAudit(t *testing.T) {
	f := newFixture(t)
	rcv := newReceiver(t, controller.WebhookJSON)
	f.notify = testNotify(rcv.srv.URL)
	kinds, audit, err := controller.ParseWebhookEvents([]string{"held", "audit"})
	if err != nil {
		t.Fatal(err)
	}
	f.notify.Kinds, f.notify.Audit = kinds, audit
	f.startController("c1")
	f.waitCursor(rcv.srv.URL)
	for _, k := range []rollout.EventKind{rollout.EventHalt, rollout.EventHeld, rollout.EventTransition} {
		if err := f.fleet.PublishEvent(rollout.Event{V: 1, Group: "prod", Kind: k, Reason: "r", At: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	// The events (FLEET_EVENTS) stored before the record (FLEET_AUDIT):
	// the webhook sends in the order the bus stored them.
	natstest.Eventually(t, waitLong, func() error {
		entries, _, err := f.fleet.ReadTimeline(f.ctx, time.Time{})
		if err == nil && len(entries) < 3 {
			err = fmt.Errorf("%d events stored", len(entries))
		}
		return err
	})
	if err := f.fleet.PublishAudit(f.ctx, kv.AuditRecord{V: 1, At: time.Now().UTC(), Actor: "alice", Reason: "maintenance",
		Command: "pause", Group: "prod", Bucket: kv.BucketPlan, Key: kv.GroupKey("prod")}); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, waitLong, func() error {
		var got []string
		for _, p := range rcv.accepted() {
			got = append(got, p.Type+" "+p.Kind+" "+p.Text)
		}
		want := []string{
			"event held :information_source: fleetwave: group prod held: r",
			`audit audit :memo: fleetwave: alice ran "fleetctl pause" on group prod: maintenance`,
		}
		if diff := cmp.Diff(want, got); diff != "" {
			return fmt.Errorf("received (-want +got):\n%s", diff)
		}
		return nil
	})
	if p := rcv.accepted()[1]; p.Audit == nil || p.Audit.Actor != "alice" || p.Event != nil {
		t.Errorf("audit payload %+v", p)
	}
}

func TestParseWebhook(t *testing.T) {
	cases := []struct {
		in, def string
		want    controller.Webhook
		err     string
	}{
		{"https://hooks.example.com/x", "json", controller.Webhook{URL: "https://hooks.example.com/x", Format: "json"}, ""},
		{"https://hooks.example.com/x", "slack", controller.Webhook{URL: "https://hooks.example.com/x", Format: "slack"}, ""},
		{"slack=https://hooks.slack.com/services/T/B/X", "json", controller.Webhook{URL: "https://hooks.slack.com/services/T/B/X", Format: "slack"}, ""},
		{"json=http://127.0.0.1:9000/a,b", "slack", controller.Webhook{URL: "http://127.0.0.1:9000/a,b", Format: "json"}, ""},
		{"teams=https://x.example", "json", controller.Webhook{}, "want an http:// or https:// URL"},
		{"ftp://x.example/", "json", controller.Webhook{}, "want an http:// or https:// URL"},
		{"https:///nohost", "json", controller.Webhook{}, "no host"},
	}
	for _, c := range cases {
		got, err := controller.ParseWebhook(c.in, controller.WebhookFormat(c.def))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseWebhook(%q) = %v, %v; want an error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseWebhook(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	// The name in logs and metrics never holds the URL's path.
	if name := (controller.Webhook{URL: "https://hooks.slack.com/services/T000/B000/SECRET"}).Name(); strings.Contains(name, "SECRET") || !strings.HasPrefix(name, "hooks.slack.com-") {
		t.Errorf("name %q", name)
	}
}

func TestParseWebhookEvents(t *testing.T) {
	cases := []struct {
		in    []string
		kinds []rollout.EventKind
		audit bool
		err   bool
	}{
		{[]string{"halt", "alert", "halt"}, []rollout.EventKind{"alert", "halt"}, false, false},
		{[]string{"approval_needed", "audit"}, []rollout.EventKind{"approval_needed"}, true, false},
		{[]string{"audit"}, nil, true, false},
		{[]string{"all"}, []rollout.EventKind{"alert", "analysis", "approval_needed", "canary_replaced", "frozen", "halt", "held", "operator", "quarantine", "resumed", "transition", "unattributed", "unfrozen", "vanished"}, true, false},
		{[]string{"halted"}, nil, false, true},
	}
	for _, c := range cases {
		kinds, audit, err := controller.ParseWebhookEvents(c.in)
		if (err != nil) != c.err || audit != c.audit || !slices.Equal(kinds, c.kinds) {
			t.Errorf("ParseWebhookEvents(%q) = %q, %v, %v", c.in, kinds, audit, err)
		}
	}
}

// TestVerifyWebhookSignature against RFC 4231's test case 2.
func TestVerifyWebhookSignature(t *testing.T) {
	key, body := []byte("Jefe"), []byte("what do ya want for nothing?")
	const sig = "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
	if !controller.VerifyWebhookSignature(key, body, sig) {
		t.Error("RFC 4231 case 2 does not verify")
	}
	for _, bad := range []string{"", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", strings.Replace(sig, "5b", "5c", 1)} {
		if controller.VerifyWebhookSignature(key, body, bad) {
			t.Errorf("%q verifies", bad)
		}
	}
}

// TestRunWebhookFlags: bad webhook flags are usage errors naming the flag,
// found before anything starts; a secret file every user may read is a
// warning.
func TestRunWebhookFlags(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	empty := filepath.Join(dir, "empty")
	for _, file := range []struct {
		path string
		data string
	}{{secret, "s3cret\n"}, {empty, "\n"}} {
		if err := os.WriteFile(file.path, []byte(file.data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]struct {
		edit  func(w *controller.WebhookFlags)
		usage bool
	}{
		"--webhook":             {func(w *controller.WebhookFlags) { w.URLs = []string{"hooks.example.com/x"} }, true},
		"--webhook-format":      {func(w *controller.WebhookFlags) { w.Format = "teams" }, true},
		"--webhook-events":      {func(w *controller.WebhookFlags) { w.Events = []string{"halted"} }, true},
		"--webhook-max-age":     {func(w *controller.WebhookFlags) { w.MaxAge = -time.Second }, true},
		"--webhook-secret-file": {func(w *controller.WebhookFlags) { w.SecretFile = empty }, true},
		"given twice":           {func(w *controller.WebhookFlags) { w.URLs = append(w.URLs, "json=https://hooks.example.com/x") }, true},
		"no such file":          {func(w *controller.WebhookFlags) { w.SecretFile = filepath.Join(dir, "missing") }, false},
	}
	for name, c := range cases {
		o := runOptions()
		o.NATSURL = "nats://127.0.0.1:1" // never reached
		o.Webhook = controller.WebhookFlags{URLs: []string{"https://hooks.example.com/x"}, SecretFile: secret}
		c.edit(&o.Webhook)
		err := controller.Run(context.Background(), &o, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: got %v, want an error naming it", name, err)
		}
		if code := cliutil.ExitCode(err); c.usage != (code == cliutil.ExitUsage) {
			t.Errorf("%s: exit code %d", name, code)
		}
	}

	if err := os.Chmod(secret, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	w := controller.WebhookFlags{URLs: []string{"https://hooks.example.com/x"}, SecretFile: secret, MaxAge: time.Hour}
	n, err := w.Notify(slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil || string(n.Secret) != "s3cret" {
		t.Fatalf("Notify = %q, %v", n.Secret, err)
	}
	if !strings.Contains(logs.String(), "readable by every user") {
		t.Errorf("no warning for a world-readable secret file:\n%s", logs.String())
	}
}

// TestWebhookHaltSaysWhy (issue 25 point 7): a halt event naming its
// failed agents reaches a JSON receiver with them whole (id, host, error,
// the app's last lines: event.agents), and a Slack receiver with the
// app's last line at the end of the text, escaped for Slack.
func TestWebhookHaltSaysWhy(t *testing.T) {
	f := newFixture(t)
	rcv := newReceiver(t, controller.WebhookJSON)
	slack := newReceiver(t, controller.WebhookSlack)
	f.notify = testNotify(rcv.srv.URL)
	f.notify.Webhooks = append(f.notify.Webhooks, controller.Webhook{URL: slack.srv.URL, Format: controller.WebhookSlack})
	f.startController("c1")
	f.waitCursor(rcv.srv.URL)
	f.waitCursor(slack.srv.URL)
	agent := rollout.EventAgent{ID: "0b000000-0000-4000-8000-000000000000", Hostname: "web-3",
		Error:  "rolled back from 2.0.0: new version unhealthy: /opt/app/bin/app exited: exit status 3",
		Output: "loading /etc/app.conf\npanic: <!channel> no config\u202eevil\n"}
	ev := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, From: rollout.StateCanary, To: rollout.StateCanary,
		Reason: "canary 0b000000-0000-4000-8000-000000000000 (web-3) failed: rolled back from 2.0.0 to 1.0.0", At: time.Now().UTC(),
		Agents: []rollout.EventAgent{agent}}
	if err := f.fleet.PublishEvent(ev); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, waitLong, func() error {
		got := rcv.accepted()
		if len(got) != 1 || got[0].Event == nil {
			return fmt.Errorf("received %q, want the halt", describe(got))
		}
		if diff := cmp.Diff([]rollout.EventAgent{agent}, got[0].Event.Agents); diff != "" {
			return fmt.Errorf("the halt's agents (-want +got):\n%s", diff)
		}
		return nil
	})
	want := []string{":rotating_light: fleetwave: group prod halted in canary: canary 0b000000-0000-4000-8000-000000000000 (web-3) failed: " +
		`rolled back from 2.0.0 to 1.0.0; last output of web-3: panic: &lt;!channel&gt; no config\u202eevil`}
	natstest.Eventually(t, waitLong, func() error {
		slack.mu.Lock()
		defer slack.mu.Unlock()
		if diff := cmp.Diff(want, slack.slack); diff != "" {
			return fmt.Errorf("slack texts (-want +got):\n%s", diff)
		}
		return nil
	})
}

// TestWebhookNamesApp: a webhook's payload carries the event's app, and its
// one-line text names it, except for the app of a config without apps
// ("default"), whose lines stay what they were.
func TestWebhookNamesApp(t *testing.T) {
	f := newFixture(t)
	rcv := newReceiver(t, controller.WebhookJSON)
	f.notify = testNotify(rcv.srv.URL)
	f.startController("c1")
	f.waitCursor(rcv.srv.URL)
	at := time.Now().UTC()
	for _, ev := range []rollout.Event{
		{V: 1, App: "db", Group: "canary", Kind: rollout.EventHalt, From: rollout.StateCanary, To: rollout.StateCanary, Reason: "canary failed", At: at},
		{V: 1, App: rollout.DefaultAppName, Group: "prod", Kind: rollout.EventAlert, Reason: "slow", At: at},
		{V: 1, App: "db", Kind: rollout.EventQuarantine, Reason: "version 6.0.0 quarantined", At: at},
	} {
		if err := f.fleet.PublishEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	want := []struct{ app, text string }{
		{"db", ":rotating_light: fleetwave: group canary of app db halted in canary: canary failed"},
		{"default", ":warning: fleetwave: group prod: slow"},
		{"db", ":no_entry: fleetwave: app db: version 6.0.0 quarantined"},
	}
	natstest.Eventually(t, waitLong, func() error {
		got := rcv.accepted()
		if len(got) != len(want) {
			return fmt.Errorf("received %q, want %d payloads", describe(got), len(want))
		}
		for i, w := range want {
			if got[i].App != w.app || got[i].Text != w.text {
				return fmt.Errorf("payload %d: app %q text %q, want app %q text %q", i, got[i].App, got[i].Text, w.app, w.text)
			}
		}
		return nil
	})
}
