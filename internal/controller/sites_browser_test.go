package controller_test

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestDashboardSitesInBrowser (issue 15 point 8): in headless Chromium, the
// dashboard shows a line per site under its group, with the site's
// counts, and the halt reason names the sites of the failures.
func TestDashboardSitesInBrowser(t *testing.T) {
	f := newFixture(t)
	b := newBrowser(t)
	f.blueConfig(func(g *rollout.GroupConfig) { g.FailureThreshold = 10 }) // tolerates 1 of 10
	rc := f.startController("c1")
	srv, _ := servePage(t, f, rc)

	agents := tenAgents()
	for i, a := range agents {
		if i < 6 {
			a.hb.Site = "edge-a"
		} else {
			a.hb.Site = "edge-b"
		}
	}
	f.startBlue(rc, agents)
	for _, i := range []int{0, 7} {
		a := &agents[i].hb
		a.Rollback, a.RollbackFrom, a.Error, a.StartTime = true, "2.0.0", "unhealthy", f.clk.Now().UTC()
	}
	if st := f.passWith(rc, agents); !st.Halted {
		t.Fatalf("blue not halted: %+v", st)
	}
	f.statusAtNow()

	b.run(chromedp.Navigate(srv.URL + "/"))
	b.waitFor("site rows under blue, and the halt naming both sites", `(() => {
		const rows = [...document.querySelectorAll('tr.site-row[data-group="blue"]')];
		const got = rows.map(r => [...r.cells].map(c => c.textContent.trim()).join("|")).join(" / ");
		const want = "\u21b3 edge-a|||0 0%|0|1| / \u21b3 edge-b|||0 0%|0|1|";
		if (got !== want) return "site rows " + got + ", want " + want;
		const note = document.querySelector('tr.notes-row[data-group="blue"] .halt-reason');
		if (!note) return "no halt reason";
		return note.textContent.includes("(sites: edge-a 1, edge-b 1)") ? "" : "halt reason: " + note.textContent;
	})()`)
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors:\n  %q", errs)
	}
}
