package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// During a canary's install (and its health wait) the canary is still on
// the start version: fleetctl status must show it as updating, not leave
// every count at "0 updated" as if nothing happened.
func TestStatusShowsTheCanaryUpdating(t *testing.T) {
	f := newFixture(t)
	cfg := rollout.DefaultConfig()
	g := rollout.DefaultGroup("blue")
	g.CanaryCount, g.MaxInFlight, g.DependsOn = 1, 50, []string{}
	cfg.Groups = []rollout.GroupConfig{g}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	ids := []rollout.AgentID{"0a000000-0000-4000-8000-000000000001", "0a000000-0000-4000-8000-000000000002",
		"0a000000-0000-4000-8000-000000000003", "0a000000-0000-4000-8000-000000000004"}
	// beat publishes a heartbeat as agentd does: hb is the status part.
	beat := func(hb heartbeat.Heartbeat) {
		t.Helper()
		hb.V, hb.Group, hb.Hostname, hb.UpdaterVersion, hb.At = heartbeat.SchemaVersion, "blue", "h", "0.1.0", f.clk.Now().UTC()
		data, err := heartbeat.Encode(&hb)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(f.ctx, waitLong)
		defer cancel()
		if _, err := f.fleet.JS.Publish(ctx, heartbeat.SubjectFor("blue", hb.AgentID), data); err != nil {
			t.Fatal(err)
		}
	}
	rc := f.startController("c1")
	for _, id := range ids {
		beat(heartbeat.Heartbeat{AgentID: id, ActiveVersion: "1.0.0"})
	}
	heard := func(id rollout.AgentID, want func(heartbeat.Heartbeat) bool) {
		t.Helper()
		natstest.Eventually(t, waitLong, func() error {
			for _, a := range rc.c.Inventory().Agents("blue", f.clk.Now()) {
				if a.Heartbeat.AgentID == id && want(a.Heartbeat) {
					return nil
				}
			}
			return fmt.Errorf("controller has not heard %s's heartbeat yet", id)
		})
	}
	for _, id := range ids {
		heard(id, func(heartbeat.Heartbeat) bool { return true })
	}
	// The spec before the step: the pass the step runs must find it (saved
	// after, a fast pass would miss it and no later one would come).
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true // the test's clock may be outside the start windows
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}
	f.advance(interval) // established
	var canary rollout.AgentID
	natstest.Eventually(t, waitLong, func() error {
		st, err := kv.Get[rollout.GroupStatus](f.ctx, f.fleet.Plan, kv.GroupKey("blue"))
		if err != nil {
			return err
		}
		if st.Value.State != rollout.StateCanary || len(st.Value.Canaries) != 1 {
			f.settle()
			f.advance(reconcileEvery)
			return fmt.Errorf("group in state %s with %d canaries, want canary with 1", st.Value.State, len(st.Value.Canaries))
		}
		canary = st.Value.Canaries[0].ID
		return nil
	})

	// The canary starts installing: its heartbeat says so, and it is still
	// on 1.0.0.
	started := f.clk.Now().UTC()
	beat(heartbeat.Heartbeat{AgentID: canary, ActiveVersion: "1.0.0", StartVersion: "1.0.0", StartTime: started, UpdatingTo: "2.0.0"})
	heard(canary, func(h heartbeat.Heartbeat) bool { return h.UpdatingTo == "2.0.0" })
	f.settle()
	f.advance(statsEvery)
	rep := f.statusAtNow()
	if len(rep.Groups) != 1 || rep.Groups[0].Rollout == nil {
		t.Fatalf("status groups %+v, want blue with its rollout", rep.Groups)
	}
	want := fleetctl.AgentSplit{Updated: 0, Unchanged: 4, Failed: 0, Updating: 1, Waiting: 3}
	if got := rep.Groups[0].Rollout.Agents; got != want {
		t.Errorf("blue's agents during the canary's install: %+v, want %+v", got, want)
	}

	var out, errOut bytes.Buffer
	err := fleetctl.RunStatus(f.ctx, &fleetctl.StatusOptions{
		Global: &fleetctl.Global{NATSURL: f.srv.URL(), Timeout: waitLong, Out: &out, ErrOut: &errOut, Now: f.clk.Now},
		Output: "table",
	})
	if err != nil {
		t.Fatalf("fleetctl status: %v (stderr: %s)", err, errOut.String())
	}
	lines := strings.Split(out.String(), "\n")
	var header, row []string
	for _, l := range lines {
		if strings.HasPrefix(l, "GROUP ") && header == nil {
			header = strings.Fields(l)
		}
		if strings.HasPrefix(l, "blue ") && row == nil {
			row = strings.Fields(l)
		}
	}
	wantHeader := []string{"GROUP", "STATE", "SINCE", "UPDATED", "UPDATING", "WAITING", "FAILED", "ALLOWED"}
	if strings.Join(header, " ") != strings.Join(wantHeader, " ") {
		t.Fatalf("status header %q, want %q\n%s", header, wantHeader, out.String())
	}
	// UPDATED is "0 0%" (two fields).
	if len(row) < 7 || row[1] != "canary" || row[3] != "0" || row[5] != "1" || row[6] != "3" {
		t.Errorf("blue's row %q, want canary, 0 updated, 1 updating, 3 waiting\n%s", row, out.String())
	}
	for _, l := range lines {
		if n := len([]rune(l)); n > 100 {
			t.Errorf("line %d columns wide: %q", n, l)
		}
	}
}
