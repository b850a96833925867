package controller_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// screenshot saves the page at 1280×800 as name under the test's artifact
// directory (go test -artifacts), and under $FLEETWAVE_SHOTS when set (to
// look at them without -artifacts).
func (b *browser) screenshot(t *testing.T, name, scrollTo string) {
	t.Helper()
	var shot []byte
	scroll := `window.scrollTo(0, 0); 1`
	if scrollTo != "" {
		scroll = fmt.Sprintf(`document.querySelector(%q).scrollIntoView(); 1`, scrollTo)
	}
	b.run(chromedp.EmulateViewport(1280, 800), chromedp.Evaluate(`document.activeElement.blur(); `+scroll, new(int)), chromedp.CaptureScreenshot(&shot))
	if len(shot) < 10_000 {
		t.Errorf("%s: %d bytes, not a page", name, len(shot))
	}
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv("FLEETWAVE_SHOTS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, name), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// expect is waitFor that reports a failure and lets the test go on: each
// piece of news is checked, whatever the page got wrong before it.
func (b *browser) expect(what, expr string) {
	b.t.Helper()
	err := natstest.Within(waitLong, func() error {
		var missing string
		if err := b.eval(expr, &missing); err != nil {
			return err
		}
		if missing != "" {
			return fmt.Errorf("%s: %s", what, missing)
		}
		return nil
	})
	if err != nil {
		b.t.Error(err)
	}
}

// clearErrors forgets the errors the page logged so far (requests the
// test blocked on purpose).
func (b *browser) clearErrors() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors = nil
}

// utcCell is how the page shows t: "15:04:05 UTC" today (UTC), with the
// date before.
func utcCell(t time.Time) string {
	t = t.UTC()
	if t.Format(time.DateOnly) == time.Now().UTC().Format(time.DateOnly) {
		return t.Format("15:04:05") + " UTC"
	}
	return t.Format("2006-01-02 15:04:05") + " UTC"
}

// TestDashboardBadNewsInBrowser (issue 25 point 6): in headless Chromium,
// with a real bus, controller and fleetctl, the page tells bad news as
// plainly as good news. Before any data it says loading, not "no plan". A
// group held by blocked agents gets a warning pill. A halt gets a banner
// and the top of the page says halted (the connection indicator is not a
// green "live"); the version bars colour by meaning (the version the
// group holds is not the target's colour, failed agents are red), and
// FAILED agrees with them. A group that has not started counts no failure
// of an earlier target. Timeline times are UTC, 24-hour, with the zone
// (the browser is in Los Angeles, en_US), and a retry reads as text. An
// unreachable agent says unreachable since when, its last state
// secondary. A pause and a quarantine get banners. Screenshots of the
// halt, the unreachable agent, the pause and the quarantine are saved.
func TestDashboardBadNewsInBrowser(t *testing.T) {
	f := newFixture(t)
	b := newBrowser(t)
	bin := buildFleetctl(t)

	cfg := rollout.DefaultConfig()
	blue, green := rollout.DefaultGroup("blue"), rollout.DefaultGroup("green")
	blue.CanaryCount, blue.MaxInFlight, blue.FailureThreshold, blue.DependsOn = 0, 20, 10, []string{} // tolerates 1 of 10
	green.CanaryCount, green.DependsOn = 0, []string{"blue"}
	cfg.Groups = []rollout.GroupConfig{blue, green}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	rc := f.startController("c1")
	srv, _ := servePage(t, f, rc)

	// Blue's agent 5 and green's agent 0 rolled back from 1.5.0, an
	// earlier target, an hour ago: they fail nothing of this rollout.
	agents := tenAgents()
	for i := range 3 {
		id := rollout.AgentID(fmt.Sprintf("%08x-0000-4000-8000-%012x", uint32(i+1)<<28, 100+i))
		agents = append(agents, &testAgent{hb: heartbeat.Heartbeat{AgentID: id, Group: "green", Hostname: fmt.Sprintf("green-%d", i), ActiveVersion: "1.0.0"}})
	}
	earlier := func(a *testAgent) {
		a.hb.Rollback, a.hb.RollbackFrom, a.hb.Error, a.hb.StartTime = true, "1.5.0", "1.5.0 did not become healthy", f.clk.Now().Add(-time.Hour).UTC()
	}
	earlier(agents[5])
	earlier(agents[10])

	// First paint, with the API out of reach: loading, not "no plan".
	b.run(network.Enable(), network.SetBlockedURLs([]string{"*/api/v1/*"}), chromedp.Navigate(srv.URL+"/"))
	b.expect("the first paint says loading", `(() => {
		if (document.readyState !== "complete") return "document " + document.readyState;
		const v = document.getElementById("plan-version").textContent;
		if (!v.includes("loading")) return "plan: " + v;
		const g = document.querySelector("#groups tbody").textContent;
		return g.includes("loading") ? "" : "groups: " + g;
	})()`)
	b.run(network.SetBlockedURLs([]string{}))
	b.clearErrors()

	f.startBlue(rc, agents)
	b.run(emulation.SetTimezoneOverride("America/Los_Angeles"), emulation.SetLocaleOverride().WithLocale("en_US"),
		chromedp.Navigate(srv.URL+"/"))
	b.expect("green, unstarted, fails nothing", `(() => {
		const row = document.querySelector('tr.group-row[data-group="green"]');
		if (!row) return "no green row";
		const failed = row.cells[5].textContent.trim();
		if (failed.split(" ")[0] !== "0") return "green FAILED " + failed;
		const item = document.querySelector('.vrow[data-group="green"] .vitem');
		return item && item.textContent.includes("1 failed earlier") ? "" : "green versions: " + (item && item.textContent);
	})()`)

	// Blue's two agents in flight are blocked on infrastructure: held.
	for _, i := range []int{0, 1} {
		a := &agents[i].hb
		a.Error, a.ErrorClass, a.ErrorCause, a.StartTime = "download: HTTP 503", heartbeat.ClassInfrastructure, "download failed (HTTP 503)", f.clk.Now().UTC()
	}
	if st := f.passWith(rc, agents); st.Held == "" {
		t.Fatalf("blue not held: %+v", st)
	}
	b.expect("blue's held pill", `(() => {
		const badge = document.querySelector('tr.group-row[data-group="blue"] .badge');
		if (!badge) return "no blue row";
		const bg = getComputedStyle(badge).backgroundColor, neutral = getComputedStyle(document.querySelector(".badge.active") || badge).backgroundColor;
		return badge.classList.contains("held") ? "" : "blue's pill " + badge.className + " " + badge.textContent + " " + bg + " " + neutral;
	})()`)

	// Agents 0 and 7 roll back from 2.0.0: more than the 1 tolerated.
	const hostileError = `2.0.0 did not become healthy: <img src=x onerror="window.__pwned=1">`
	agents[1].hb.Error, agents[1].hb.ErrorClass, agents[1].hb.ErrorCause = "", "", ""
	for _, i := range []int{0, 7} {
		a := &agents[i].hb
		a.Error, a.ErrorClass, a.ErrorCause, a.Rollback, a.RollbackFrom, a.StartTime = hostileError, heartbeat.ClassRelease, "unhealthy", true, "2.0.0", f.clk.Now().UTC()
	}
	st := f.passWith(rc, agents)
	if !st.Halted {
		t.Fatalf("blue not halted: %+v", st)
	}
	b.expect("the halt's banner, the top says halted", `(() => {
		const banner = document.querySelector('#banners .banner[data-kind="halt"][data-group="blue"]');
		if (!banner) return "no halt banner: " + document.getElementById("banners").textContent;
		if (!banner.textContent.includes("blue halted") || !banner.textContent.includes("2 agents failed 2.0.0")) return "banner: " + banner.textContent;
		const top = document.getElementById("fleet-state");
		if (!top || top.dataset.state !== "halted" || !top.textContent.includes("blue")) return "top: " + (top && top.textContent);
		const live = document.getElementById("live");
		if (live.textContent.trim() === "live" || getComputedStyle(live).backgroundColor === "rgb(46, 157, 91)") return "a green live";
		return "";
	})()`)
	b.expect("version bars by meaning, FAILED agrees", `(() => {
		const row = document.querySelector('.vrow[data-group="blue"]');
		if (!row) return "no blue versions";
		const segs = [...row.querySelectorAll(".vseg")];
		const onTarget = getComputedStyle(document.querySelector(".legend .sw-updated")).backgroundColor;
		const held = segs.find(s => s.dataset.version === "1.0.0" && s.dataset.role !== "failed");
		if (!held) return "no 1.0.0 segment";
		if (held.dataset.role !== "previous") return "1.0.0's role " + held.dataset.role;
		if (getComputedStyle(held).backgroundColor === onTarget) return "1.0.0 drawn in the colour of 'on the target'";
		if (segs.some(s => s.dataset.role === "target")) return "a segment on the target, and no agent is";
		const red = segs.find(s => s.dataset.role === "failed");
		if (!red || getComputedStyle(red).backgroundColor === getComputedStyle(held).backgroundColor) return "failed agents not drawn apart";
		const items = [...row.querySelectorAll(".vitem")].filter(i => i.dataset.role !== "target");
		const legendFailed = items.reduce((n, i) => n + Number((i.textContent.match(/\((\d+) failed/) || [0, 0])[1]), 0);
		const cell = document.querySelector('tr.group-row[data-group="blue"]').cells[5].textContent.trim();
		if (cell.split(" ")[0] !== String(legendFailed)) return "FAILED " + cell + " beside versions failing " + legendFailed;
		return legendFailed === 3 ? "" : "versions failing " + legendFailed + ", want 3";
	})()`)
	b.expect("the halt in the timeline, in UTC", fmt.Sprintf(`(() => {
		const ev = document.querySelector('#timeline li[data-what="halt"][data-group="blue"] time');
		if (!ev) return "no halt in the timeline";
		return ev.textContent === %q ? "" : "time " + ev.textContent + ", want " + %q;
	})()`, utcCell(st.HaltedAt), utcCell(st.HaltedAt)))
	b.screenshot(t, "halt.png", "")

	// Agent 9 falls silent for longer than three intervals.
	silent := agents[9]
	live := append(append([]*testAgent{}, agents[:9]...), agents[10:]...)
	for range 10 {
		f.passWith(rc, live)
	}
	var page controller.AgentsPage
	getJSON(t, srv.URL+"/api/v1/agents?state=unreachable", 200, &page)
	if len(page.Agents) != 1 || page.Agents[0].ID != silent.hb.AgentID {
		t.Fatalf("/api/v1/agents?state=unreachable: %+v; want agent 9", page.Agents)
	}
	if page.Agents[0].State != "unreachable" || page.Agents[0].LastState != "ok" {
		t.Errorf("/api/v1/agents?state=unreachable: %+v; want state unreachable, last state ok", page.Agents[0])
	}
	var v string
	b.run(chromedp.Evaluate(setSelect("f-state", "unreachable"), &v))
	b.expect("the unreachable agent says so, and since when", fmt.Sprintf(`(() => {
		const t = document.getElementById("agents");
		if (t.dataset.total !== "1") return "total " + t.dataset.total;
		const cell = t.tBodies[0].rows[0].cells[4];
		const pill = cell.querySelector(".badge");
		if (!pill || !pill.textContent.startsWith("unreachable since " + %q)) return "state " + cell.textContent;
		return cell.textContent.includes("last: ok") ? "" : "no last state: " + cell.textContent;
	})()`, utcCell(page.Agents[0].LastSeen)))
	b.screenshot(t, "unreachable.png", "#agents")
	b.run(chromedp.Evaluate(setSelect("f-state", "rolled_back"), &v))
	b.expect("an error from a host, as text", fmt.Sprintf(`(() => {
		const row = document.querySelector('#agents tr[data-agent=%q]');
		if (!row) return "no row of agent 0";
		const e = row.querySelector(".agent-error");
		if (!e || e.textContent !== %q) return "error " + (e && e.innerHTML);
		return document.querySelectorAll("#agents img").length === 0 && window.__pwned === undefined ? "" : "the error ran";
	})()`, agents[0].hb.AgentID, hostileError))
	b.run(chromedp.Evaluate(setSelect("f-state", ""), &v))

	// An operator resets blue and asks the two to retry: the timeline
	// says it in words.
	if out, errOut, code := f.fleetctlRun(bin, "reset", "--group", "blue", "--force", "--reason", "the health check was fixed"); code != 0 {
		t.Fatalf("fleetctl reset: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := f.fleetctlRun(bin, "retry", "--group", "blue", "--reason", "the health check was fixed"); code != 0 {
		t.Fatalf("fleetctl retry: exit %d\n%s%s", code, out, errOut)
	}
	b.expect("the retry, as text", `(() => {
		const li = document.querySelector('#timeline li[data-what="retry"]');
		if (!li) return "no retry in the timeline";
		const change = li.querySelector(".tl-change").textContent;
		return /[{}"]/.test(change) ? "change: " + change : "";
	})()`)

	// A pause: a banner, and the top says paused.
	if out, errOut, code := f.fleetctlRun(bin, "pause", "--reason", "change freeze"); code != 0 {
		t.Fatalf("fleetctl pause: exit %d\n%s%s", code, out, errOut)
	}
	b.expect("the pause's banner", `(() => {
		const banner = document.querySelector('#banners .banner[data-kind="paused"]');
		if (!banner || !banner.textContent.includes("fleetctl resume")) return "banner: " + document.getElementById("banners").textContent;
		const top = document.getElementById("fleet-state");
		return top.dataset.state === "paused" ? "" : "top: " + top.textContent;
	})()`)
	b.screenshot(t, "pause.png", "")
	if out, errOut, code := f.fleetctlRun(bin, "resume", "--reason", "freeze over"); code != 0 {
		t.Fatalf("fleetctl resume: exit %d\n%s%s", code, out, errOut)
	}

	// A quarantine, its operator's reason full of markup: a banner, as text.
	const reason = `crashes on start <img src=x onerror="window.__pwned=2">`
	if out, errOut, code := f.fleetctlRun(bin, "quarantine", "add", "2.0.0", "--reason", reason); code != 0 {
		t.Fatalf("fleetctl quarantine add: exit %d\n%s%s", code, out, errOut)
	}
	b.expect("the quarantine's banner", fmt.Sprintf(`(() => {
		const banner = document.querySelector('#banners .banner[data-kind="quarantine"][data-version="2.0.0"]');
		if (!banner) return "banners: " + document.getElementById("banners").textContent;
		if (!banner.textContent.includes(%q)) return "banner: " + banner.textContent;
		if (document.querySelector('#banners .banner[data-kind="paused"]')) return "still paused";
		const top = document.getElementById("fleet-state");
		if (top.dataset.state !== "quarantined" || !top.textContent.includes("2.0.0")) return "top: " + top.textContent;
		return document.querySelectorAll("#banners img").length === 0 && window.__pwned === undefined ? "" : "the reason ran";
	})()`, reason))
	b.screenshot(t, "quarantine.png", "")

	if errs := b.pageErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors:\n  %q", errs)
	}
}

// TestDashboardDoneInBrowser (issue 25 point 6): once every group finished
// the target, the page's Holds line says so (it said the start version
// was held until a group's turn) and the top says done.
func TestDashboardDoneInBrowser(t *testing.T) {
	f := newFixture(t)
	b := newBrowser(t)
	f.blueConfig(func(g *rollout.GroupConfig) { g.MinHealthyTime = 0 })
	rc := f.startController("c1")
	srv, dash := servePage(t, f, rc)
	agents := tenAgents()
	f.startBlue(rc, agents)
	for _, a := range agents {
		a.hb.ActiveVersion, a.hb.StartVersion, a.hb.StartTime = "2.0.0", "1.0.0", f.clk.Now().UTC()
	}
	done := false
	for range 30 {
		if st := f.passWith(rc, agents); st.State == rollout.StateDone {
			done = true
			break
		}
	}
	if !done {
		t.Fatal("blue never done")
	}
	b.run(chromedp.Navigate(srv.URL + "/"))
	b.expect("Holds, once every group is done", `(() => {
		const holds = document.getElementById("plan-holds").textContent;
		if (holds !== "2.0.0: every group finished it (new hosts install it)") return "holds: " + holds;
		const top = document.getElementById("fleet-state");
		return top && top.dataset.state === "done" ? "" : "top: " + (top && top.textContent);
	})()`)
	ov := dash.Overview(f.clk.Now())
	if data, _ := json.Marshal(ov.Banners); len(ov.Banners) != 0 {
		t.Errorf("banners of a done rollout: %s", data)
	}
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors:\n  %q", errs)
	}
}
