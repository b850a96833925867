package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// attrEnv is an operator-mode server from "auth init", a controller running
// with its minted creds on a manual clock, and the admin's connection.
type attrEnv struct {
	t     *testing.T
	ctx   context.Context
	dir   string
	srv   *natstest.Server
	clk   *clock.Manual
	admin jetstream.JetStream
	c     *controller.Controller
	// metrics is the controller's /metrics.
	metrics string
}

const (
	attrGrace     = 30 * time.Second
	attrReconcile = 10 * time.Second
)

func newAttrEnv(t *testing.T) *attrEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	d := auth.Dir{Path: t.TempDir()}
	if _, err := d.Init("test", auth.DefaultJetStreamLimits); err != nil {
		t.Fatal(err)
	}
	e := &attrEnv{t: t, ctx: ctx, dir: d.Path, srv: natstest.StartConfig(t, filepath.Join(d.Path, auth.FileResolverConf)),
		clk: clock.NewManual(time.Now())}
	e.admin = e.js(auth.UserAdmin)
	fleet, err := kv.Ensure(ctx, e.js(auth.UserController), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	e.c, err = controller.New(fleet, controller.Options{ID: "c1", StatsInterval: time.Hour, ReconcileInterval: attrReconcile,
		AttributionGrace: attrGrace, Clock: e.clk, Log: natstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.c.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("controller: %v", err)
		}
	})
	srv := httptest.NewServer(promhttp.HandlerFor(e.c.Registry(), promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	e.metrics = srv.URL
	e.settled()
	return e
}

func (e *attrEnv) js(user string) jetstream.JetStream {
	e.t.Helper()
	nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: e.srv.URL(), Name: user, Creds: filepath.Join(e.dir, auth.CredsFile(user)),
		Log: natstest.Logger(e.t)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	return js
}

// settled waits until the controller's loop is idle: both its timers (stats,
// rollout pass) armed, so the last pass has ended.
func (e *attrEnv) settled() {
	e.t.Helper()
	if !e.clk.WaitPending(2, timeout(waitLong)) {
		e.t.Fatalf("controller loop not idle: %d timers pending", e.clk.Pending())
	}
}

// pass moves the clock to the next rollout pass and waits for it to end.
func (e *attrEnv) pass() {
	e.t.Helper()
	e.clk.Advance(attrReconcile)
	// The timer fires, the pass runs, the timer is armed again.
	natstest.Eventually(e.t, waitLong, func() error {
		if e.clk.Pending() < 2 {
			return errors.New("pass running")
		}
		return nil
	})
	e.settled()
}

// fleetctl runs fleetctl (the real command) with the admin's creds.
func (e *attrEnv) fleetctl(args ...string) string {
	e.t.Helper()
	cmd := fleetctl.NewCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"--nats", e.srv.URL(), "--creds", filepath.Join(e.dir, auth.CredsFile(auth.UserAdmin)), "--actor", "alice"}, args...))
	if err := cmd.ExecuteContext(e.ctx); err != nil {
		e.t.Fatalf("fleetctl %v: %v\n%s", args, err, errOut.String())
	}
	return out.String()
}

// unattributed are the unattributed-change events fleetctl history shows.
func (e *attrEnv) unattributed() []string {
	e.t.Helper()
	var rep fleetctl.HistoryReport
	if err := json.Unmarshal([]byte(e.fleetctl("history", "-o", "json")), &rep); err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, r := range rep.Records {
		if r.Event != nil && r.Event.Kind == rollout.EventUnattributed {
			out = append(out, r.Event.Reason)
		}
	}
	return out
}

// samples are the attribution metrics as /metrics serves them.
func (e *attrEnv) samples() map[string]float64 {
	e.t.Helper()
	all, err := scrape(e.t, e.metrics)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]float64{}
	for k, v := range all {
		if strings.HasPrefix(k, "fleetwave_unattributed_") {
			out[k] = v
		}
	}
	return out
}

func specRev(t *testing.T, ctx context.Context, js jetstream.JetStream) kv.StoredMsg {
	t.Helper()
	m, err := kv.DirectGetLast(ctx, js.Conn(), kv.PlanStream, kv.KeySubject(kv.BucketPlan, kv.KeySpec))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const (
	specChanges = `fleetwave_unattributed_changes_total{key="fleet_plan/spec"}`
	specCurrent = `fleetwave_unattributed_change{key="fleet_plan/spec"}`
)

// TestUnattributedChange: the leading controller (operator mode, its minted
// creds, a manual clock) raises a spec revision written around fleetctl (a
// raw KV put with the admin's creds) as an unattributed change: an event
// (in fleetctl history), the metrics, and, fed to promtool with the rules,
// the FleetwaveUnattributedChange alert; in the first pass once the grace
// has passed, not before. The revision fleetctl wrote just before raises
// nothing, and the spec written again by fleetctl clears the gauge.
func TestUnattributedChange(t *testing.T) {
	e := newAttrEnv(t)
	before := e.samples()
	if before[specChanges] != 0 || before[specCurrent] != 0 {
		t.Fatalf("metrics before any write: %v", before)
	}
	// Through fleetctl, then around it: a raw put with the admin's creds.
	e.fleetctl("plan", "set", "--start", "1.0.0", "--target", "1.1.0", "--reason", "release 1.1")
	signed := specRev(t, e.ctx, e.admin)
	plan, err := e.admin.KeyValue(e.ctx, kv.BucketPlan)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(rollout.DefaultSpec("1.0.0", "6.6.6"))
	if _, err := plan.Put(e.ctx, kv.KeySpec, data); err != nil {
		t.Fatal(err)
	}
	rogue := specRev(t, e.ctx, e.admin)
	if rogue.Sequence <= signed.Sequence {
		t.Fatalf("raw put revision %d, after %d", rogue.Sequence, signed.Sequence)
	}
	start := time.Now()
	passes := 0
	for {
		e.pass()
		passes++
		due := !e.clk.Now().Before(rogue.Time.Add(attrGrace))
		got := e.unattributed()
		if !due {
			if len(got) != 0 || e.samples()[specChanges] != 0 {
				t.Fatalf("raised within the grace (pass %d, %v after the write): %q", passes, e.clk.Now().Sub(rogue.Time), got)
			}
			continue
		}
		if len(got) != 1 || !strings.Contains(got[0], fmt.Sprintf("fleet_plan/spec revision %d ", rogue.Sequence)) {
			t.Fatalf("first pass after the grace: unattributed events %q, want one for revision %d (not fleetctl's %d)", got, rogue.Sequence, signed.Sequence)
		}
		break
	}
	if passes < 2 {
		t.Fatalf("raised in pass %d: the grace was never exercised", passes)
	}
	t.Logf("raised in pass %d after the write (%v on the controller's clock, %v real)", passes, e.clk.Now().Sub(rogue.Time).Round(time.Second), time.Since(start).Round(time.Millisecond))
	after := e.samples()
	want := map[string]float64{
		specChanges: 1, specCurrent: 1,
		`fleetwave_unattributed_changes_total{key="fleet_config/config"}`: 0, `fleetwave_unattributed_change{key="fleet_config/config"}`: 0,
	}
	for k, v := range want {
		if after[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, after[k], v, after)
		}
	}
	promtoolAlert(t, before, after)

	// Signed again through fleetctl: the gauge clears, nothing new raised.
	e.fleetctl("plan", "set", "--target", "1.1.0", "--reason", "undo the rogue target")
	for range attrGrace/attrReconcile + 1 {
		e.pass()
	}
	if got := e.samples(); got[specCurrent] != 0 || got[specChanges] != 1 {
		t.Errorf("after fleetctl signed the spec again: %v", got)
	}
	if got := e.unattributed(); len(got) != 1 {
		t.Errorf("unattributed events %q, want the one", got)
	}
}

// promtoolAlert runs promtool on the alerting rules with the scraped
// figures before and after as series: FleetwaveUnattributedChange fires for
// the spec (and only it) after, not before.
func promtoolAlert(t *testing.T, before, after map[string]float64) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (%v): install it (apt-get install prometheus; .ci/run does)", err)
	}
	rules, err := filepath.Abs("../../deploy/prometheus/fleetwave.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var series strings.Builder
	for k, a := range after {
		fmt.Fprintf(&series, "      - series: '%s'\n        values: '%g %g %gx10'\n", strings.Replace(k, "{", `{instance="c1:8080",`, 1), before[k], before[k], a)
	}
	test := fmt.Sprintf(`rule_files:
  - %s
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
%s    alert_rule_test:
      - eval_time: 1m
        alertname: FleetwaveUnattributedChange
        exp_alerts: []
      - eval_time: 3m
        alertname: FleetwaveUnattributedChange
        exp_alerts:
          - exp_labels:
              severity: page
              key: fleet_plan/spec
            exp_annotations:
              summary: "fleet_plan/spec was changed without an audit record"
              description: "A revision of fleet_plan/spec has no record in the audit trail: it was written by something other than fleetctl (a raw KV write, an edge site's leaf, a stolen credential), and the fleet follows it. See the 'unattributed' event in 'fleetctl history', check the value, and write it again with fleetctl to sign for it."
`, rules, series.String())
	path := filepath.Join(t.TempDir(), "scraped_test.yml")
	if err := os.WriteFile(path, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "test", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules on the scraped figures: %v\n%s\n%s", err, out, test)
	}
}

// TestUnattributedNoWolf: revisions stored before the audit trail reaches
// (here: written before FLEET_AUDIT existed, as on a fleet upgraded from a
// fleetwave without one) are not raised; a leader taking over does not
// raise again what was raised; a rogue write after them is.
func TestUnattributedNoWolf(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := srv.JetStream("admin")
	f, err := kv.Ensure(ctx, js, kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	put := func(target string) {
		t.Helper()
		data, _ := json.Marshal(rollout.DefaultSpec("1.0.0", target))
		if _, err := f.Plan.Put(ctx, kv.KeySpec, data); err != nil {
			t.Fatal(err)
		}
	}
	put("1.1.0")
	put("1.2.0")
	// FLEET_AUDIT made after them (created anew: the stream's creation
	// is what the trail reaches back to).
	if err := js.DeleteStream(ctx, kv.StreamAudit); err != nil {
		t.Fatal(err)
	}
	if f, err = kv.Ensure(ctx, js, kv.Options{Memory: true}); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Now().Add(time.Hour))
	start := func(id string) (*controller.Controller, func()) {
		t.Helper()
		c, err := controller.New(f, controller.Options{ID: id, StatsInterval: time.Hour, ReconcileInterval: attrReconcile,
			LeaseTTL: time.Hour, AttributionGrace: attrGrace, Clock: clk, Log: natstest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(rctx) }()
		return c, func() {
			stop()
			<-done
		}
	}
	checked := func(want uint64) {
		t.Helper()
		natstest.Eventually(t, waitLong, func() error {
			st, _, err := kv.ReadAttribution(ctx, js.Conn())
			if err != nil {
				return err
			}
			if got := st.Keys["fleet_plan/spec"].Checked; got < want {
				return fmt.Errorf("spec checked up to %d, want %d", got, want)
			}
			return nil
		})
	}
	events := func() []string {
		t.Helper()
		entries, _, err := f.ReadTimeline(ctx, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			if e.Event != nil && e.Event.Kind == rollout.EventUnattributed {
				out = append(out, e.Event.Reason)
			}
		}
		return out
	}
	c1, stop1 := start("c1")
	checked(specRev(t, ctx, js).Sequence)
	if got := events(); len(got) != 0 {
		t.Fatalf("revisions older than the audit trail raised %q", got)
	}
	if v := gather(t, c1)[specChanges]; v != 0 {
		t.Errorf("%s = %v", specChanges, v)
	}
	put("6.6.6")
	rogue := specRev(t, ctx, js).Sequence
	if !clk.WaitPending(2, timeout(waitLong)) {
		t.Fatal("controller loop not idle")
	}
	clk.Advance(attrReconcile)
	checked(rogue)
	if got := events(); len(got) != 1 || !strings.Contains(got[0], fmt.Sprintf("revision %d ", rogue)) {
		t.Fatalf("events %q, want the rogue revision %d", got, rogue)
	}
	stop1()
	// Another controller takes the lead (the lease released): nothing is
	// raised twice, and its gauge says the spec is still unsigned.
	c2, stop2 := start("c2")
	defer stop2()
	natstest.Eventually(t, waitLong, func() error {
		if v := gather(t, c2)[specCurrent]; v != 1 {
			return fmt.Errorf("%s on the new leader = %v, want 1", specCurrent, v)
		}
		return nil
	})
	if got := events(); len(got) != 1 {
		t.Errorf("after a change of leader: events %q, want the one", got)
	}
}

// gather reads the attribution metrics from the controller's registry.
func gather(t *testing.T, c *controller.Controller) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(c.Registry(), promhttp.HandlerOpts{}))
	defer srv.Close()
	all, err := scrape(t, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return all
}
