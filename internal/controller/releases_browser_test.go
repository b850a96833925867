package controller_test

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/fleetwave/fleetwave/pkg/release"
)

// TestReleasesInBrowser (issue 27 point 3): in headless Chromium, with a
// real bus, controller and a served release repository, the page shows the
// app's releases newest first with their flags and hosts, the catalog's
// age, and on blue's versions "6 hosts end of life" and "10 hosts behind
// security release 1.2.0". The notes are the repository's data: markup in
// them is shown as text and runs nothing. When the repository fails, the
// panel says so and keeps the list. A screenshot is saved.
func TestReleasesInBrowser(t *testing.T) {
	f := newFixture(t)
	b := newBrowser(t)
	f.blueConfig(nil)
	repo := newReleaseRepo(t)
	const hostile = `<img src=x onerror="window.__pwned=1">fixes CVE-1`
	repo.release("default", "1.0.0", func(c *release.Custom) { c.EndOfLife = true })
	repo.release("default", "1.1.0", nil)
	repo.release("default", "1.2.0", func(c *release.Custom) { c.Security, c.Notes = true, hostile })
	f.releases = repo.repoFor(t)
	rc := f.startController("c1")
	srv, _ := servePage(t, f, rc)
	agents := tenAgents()
	for _, i := range []int{6, 7, 8, 9} {
		agents[i].hb.ActiveVersion = "1.1.0"
	}
	f.publishHeartbeats(rc, agents)
	f.advance(interval)
	f.pass() // c1 leads and reads the repository

	b.run(chromedp.Navigate(srv.URL + "/"))
	b.waitFor("the releases panel", `(() => {
		const card = document.getElementById("releases-card");
		if (card.hidden) return "releases card hidden";
		const rows = [...document.querySelectorAll("#releases tr.release-row")];
		const got = rows.map(r => r.dataset.version + ":" + r.cells[1].textContent + ":" + r.cells[3].textContent).join(" ");
		if (got !== "1.2.0:security:0 1.1.0::4 1.0.0:end of life:6") return "rows " + got;
		if (rows[0].cells[4].textContent !== `+"`"+hostile+"`"+`) return "notes " + rows[0].cells[4].textContent;
		if (document.querySelector("#releases img")) return "the notes' markup became an element";
		const meta = document.getElementById("releases-meta").textContent;
		return meta.includes("read ") && meta.includes("ago") ? "" : "meta " + meta;
	})()`)
	b.waitFor("blue's badges", `(() => {
		const row = document.querySelector('.vrow[data-group="blue"]');
		if (!row) return "no blue versions";
		const badges = [...row.querySelectorAll(".rbadge")].map(e => e.textContent).join(" | ");
		return badges === "6 hosts end of life | 10 hosts behind security release 1.2.0" ? "" : "badges " + badges;
	})()`)
	b.screenshot(t, "releases.png", "#releases-card")
	b.screenshot(t, "releases-badges.png", "#versions")
	var pwned bool
	if err := b.eval(`window.__pwned === 1`, &pwned); err != nil || pwned {
		t.Errorf("the notes' markup ran: %v %v", pwned, err)
	}

	repo.broken.Store(true)
	repo.refresh(t, 1)
	b.waitFor("the failure in the panel, the list kept", `(() => {
		const err = document.getElementById("releases-error");
		if (err.hidden || !err.textContent.includes("503")) return "error " + err.hidden + " " + err.textContent;
		return document.querySelectorAll("#releases tr.release-row").length === 3 ? "" : "rows gone";
	})()`)
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors: %q", errs)
	}
}
