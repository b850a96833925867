package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Issue 28, adaptive in flight: the controller measures how old the
// heartbeats it reads are (their agents' "at" against its clock) and hands
// that lag to the engine. Forty agents whose heartbeats all reach it five
// intervals late: the group's adaptive bound starts at 2 (a tenth of
// max_in_flight's 20), then halves to 1 for lag; the lag is served as
// fleetwave_heartbeat_lag_seconds, the bound and its cause as group
// metrics, and fleetctl status says the bound and why it moved.
func TestAdaptiveBoundShrinksOnHeartbeatLag(t *testing.T) {
	f := newFixture(t)
	cfg := rollout.DefaultConfig()
	g := rollout.DefaultGroup("blue")
	g.CanaryCount, g.MaxInFlight, g.DependsOn, g.AdaptiveInFlight = 0, 50, []string{}, true
	g.Rate = &rollout.RateConfig{Start: rollout.RatePer{N: 5, Per: time.Minute}, Factor: 2, Max: rollout.RatePer{N: 20, Per: time.Minute}}
	cfg.Groups = []rollout.GroupConfig{g}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	const late = 5 * interval
	var ids []rollout.AgentID
	for i := range 40 {
		ids = append(ids, rollout.AgentID(fmt.Sprintf("%08x-0000-4000-8000-000000000001", i*0x06000000)))
	}
	beatAll := func() {
		t.Helper()
		for _, id := range ids {
			hb := heartbeat.Heartbeat{V: heartbeat.SchemaVersion, AgentID: id, Group: "blue", Hostname: "h", ActiveVersion: "1.0.0",
				UpdaterVersion: "0.1.0", At: f.clk.Now().UTC().Add(-late)}
			data, err := heartbeat.Encode(&hb)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(f.ctx, waitLong)
			if _, err := f.fleet.JS.Publish(ctx, heartbeat.SubjectFor("blue", id), data); err != nil {
				t.Fatal(err)
			}
			cancel()
		}
	}
	rc := f.startController("c1")
	srv := f.startDashboard(rc).serve()
	beatAll()
	natstest.Eventually(t, waitLong, func() error {
		if n := len(rc.c.Inventory().Agents("blue", f.clk.Now())); n != len(ids) {
			return fmt.Errorf("controller heard %d agents, want %d", n, len(ids))
		}
		return nil
	})
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true // the test's clock may be outside the start windows
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}
	f.advance(interval) // established
	var seen []string
	natstest.Eventually(t, waitLong, func() error {
		st, err := kv.Get[rollout.GroupStatus](f.ctx, f.fleet.Plan, kv.GroupKey("blue"))
		if err != nil {
			return err
		}
		if a := st.Value.Adaptive; a != nil && (len(seen) == 0 || seen[len(seen)-1] != a.Cause) {
			seen = append(seen, a.Cause)
		}
		if a := st.Value.Adaptive; a == nil || a.Cause != rollout.AdaptiveLag || st.Value.Rate == nil {
			f.settle()
			f.advance(reconcileEvery)
			return fmt.Errorf("group %s, adaptive %+v, rate %+v: want the bound moved for lag", st.Value.State, st.Value.Adaptive, st.Value.Rate)
		}
		if a := st.Value.Adaptive; a.Bound != 1 || a.Max != 20 || !strings.Contains(a.Reason, "halved from 2: heartbeats lag 2m30s") {
			t.Fatalf("adaptive %+v: want halved from 2 to 1 of 20 for a lag of 2m30s", a)
		}
		return nil
	})
	if seen[0] != rollout.AdaptiveStart {
		t.Errorf("causes seen %q, want start first", seen)
	}
	m := gather(t, rc.c)
	if got := m["fleetwave_heartbeat_lag_seconds"]; got < late.Seconds() || got > late.Seconds()+interval.Seconds() {
		t.Errorf("fleetwave_heartbeat_lag_seconds %v, want about %v", got, late.Seconds())
	}

	// The dashboard's row shows the bound beside the agents updating, and
	// its notes why it moved; the group metrics (read from the plan
	// mirror) the bound and its cause.
	natstest.Eventually(t, waitLong, func() error {
		var ov controller.Overview
		getJSON(t, srv.URL+controller.PathAPIStatus, http.StatusOK, &ov)
		for _, r := range ov.Rows {
			if r.Group == "blue" && r.InFlightBound == 1 && slices.ContainsFunc(r.Notes, func(n string) bool {
				return strings.HasPrefix(n, "in-flight bound 1 of 20 (adaptive)") && strings.Contains(n, "heartbeats lag")
			}) {
				return nil
			}
		}
		return fmt.Errorf("dashboard rows %+v: want blue's bound 1 and why", ov.Rows)
	})
	natstest.Eventually(t, waitLong, func() error {
		m := gather(t, rc.c)
		for k, want := range map[string]float64{
			`fleetwave_group_in_flight_bound{app="default",group="blue"}`:                    1,
			`fleetwave_group_in_flight_bound_max{app="default",group="blue"}`:                20,
			`fleetwave_group_in_flight_bound_cause{app="default",cause="lag",group="blue"}`:  1,
			`fleetwave_group_in_flight_bound_cause{app="default",cause="grew",group="blue"}`: 0,
			`fleetwave_group_rate_allowance{app="default",group="blue"}`:                     5,
		} {
			if got, ok := m[k]; !ok || got != want {
				return fmt.Errorf("%s = %v (served: %v), want %v", k, got, ok, want)
			}
		}
		return nil
	})

	// fleetctl status says the bound and why it moved.
	var out, errOut bytes.Buffer
	err := fleetctl.RunStatus(f.ctx, &fleetctl.StatusOptions{
		Global: &fleetctl.Global{NATSURL: f.srv.URL(), Timeout: waitLong, Out: &out, ErrOut: &errOut, Now: f.clk.Now},
		Output: "table",
	})
	if err != nil {
		t.Fatalf("fleetctl status: %v (stderr: %s)", err, errOut.String())
	}
	for _, want := range []string{"in-flight bound 1 of 20 (adaptive)", "heartbeats lag 2m30s", "rate: "} {
		if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), want) {
			t.Errorf("fleetctl status does not say %q:\n%s", want, out.String())
		}
	}
}
