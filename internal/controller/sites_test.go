package controller_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestSitesHaltAndCounts (issue 15 point 8), on a real bus: 10 agents, 5 at
// site edge-a, 3 at edge-b, 2 naming none. Three fail 2.0.0, two at edge-a
// and one at edge-b: the halt names both sites; the controller's
// fleet_stats entry, fleetctl status' report and the dashboard's
// /api/v1/status break the counts down by site, the same way.
func TestSitesHaltAndCounts(t *testing.T) {
	f := newFixture(t)
	f.blueConfig(func(g *rollout.GroupConfig) { g.FailureThreshold = 20 }) // tolerates 2 of 10
	f.quarantineAfter(0)                                                   // the threshold's halt, not the fleet-wide quarantine's
	rc := f.startController("c1")
	srv := f.startDashboard(rc).serve()
	agents := tenAgents()
	for i, a := range agents {
		switch {
		case i < 5:
			a.hb.Site = "edge-a"
		case i < 8:
			a.hb.Site = "edge-b"
		}
	}
	st := f.startBlue(rc, agents)
	for _, i := range []int{0, 1, 5} {
		a := &agents[i].hb
		a.Rollback, a.RollbackFrom, a.Error = true, "2.0.0", "install 2.0.0: health check failed"
		a.ErrorClass, a.ErrorCause, a.StartTime = rollout.FailureRelease, "unhealthy", f.clk.Now().UTC()
	}
	st = f.passWith(rc, agents)
	want := "3 agents failed 2.0.0 (sites: edge-a 2, edge-b 1), more than failure_threshold"
	if !st.Halted || !strings.Contains(st.HaltReason, want) {
		t.Fatalf("halted %v: %q; want a halt naming both sites: %q", st.Halted, st.HaltReason, want)
	}

	rep := f.statusAtNow()
	if len(rep.Groups) != 1 {
		t.Fatalf("status groups %+v, want blue", rep.Groups)
	}
	type site struct {
		Site                             string
		Agents, Failed, Updated, Waiting int
	}
	var got []site
	for _, s := range rep.Groups[0].Sites {
		if s.Split == nil {
			t.Fatalf("site %s has no split, and there is a plan", s.Site)
		}
		got = append(got, site{s.Site, s.Agents, s.Failed, s.Split.Updated, s.Split.Waiting})
	}
	wantSites := []site{{"edge-a", 5, 2, 0, 3}, {"edge-b", 3, 1, 0, 2}, {rollout.NoSite, 2, 0, 0, 2}}
	if diff := cmp.Diff(wantSites, got); diff != "" {
		t.Errorf("status sites (-want +got):\n%s", diff)
	}

	// The dashboard shows the same report, and a row per site.
	now := f.clk.Now()
	var ov controller.Overview
	natstest.Eventually(t, waitLong, func() error {
		ov = controller.Overview{}
		getJSON(t, srv.URL+controller.PathAPIStatus, http.StatusOK, &ov)
		if !ov.At.Equal(now) {
			return fmt.Errorf("numbers at %v, want %v", ov.At, now)
		}
		if len(ov.Status.Groups) != 1 || ov.Status.Groups[0].Rollout == nil || !ov.Status.Groups[0].Rollout.Halted {
			return fmt.Errorf("dashboard does not show blue halted yet: %+v", ov.Status.Groups)
		}
		return nil
	})
	if diff := cmp.Diff(rep.Groups[0].Sites, ov.Status.Groups[0].Sites); diff != "" {
		t.Errorf("/api/v1/status sites differ from fleetctl status' (-fleetctl +dashboard):\n%s", diff)
	}
	if len(ov.Rows) != 1 {
		t.Fatalf("dashboard rows %+v, want blue's", ov.Rows)
	}
	wantRows := []view.SiteRow{
		{Site: "edge-a", Agents: 5, Updated: "0 0%", Updating: "0", Waiting: "3", Failed: "2", Unreachable: "0"},
		{Site: "edge-b", Agents: 3, Updated: "0 0%", Updating: "0", Waiting: "2", Failed: "1", Unreachable: "0"},
		{Site: rollout.NoSite, Agents: 2, Updated: "0 0%", Updating: "0", Waiting: "2", Failed: "0", Unreachable: "0"},
	}
	if diff := cmp.Diff(wantRows, ov.Rows[0].Sites); diff != "" {
		t.Errorf("dashboard site rows (-want +got):\n%s", diff)
	}
	if !strings.Contains(ov.Rows[0].HaltReason, "(sites: edge-a 2, edge-b 1)") {
		t.Errorf("dashboard halt reason %q does not name the sites", ov.Rows[0].HaltReason)
	}
}
