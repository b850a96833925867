package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// chromiumPath finds a Chromium or Chrome to drive: $CHROME_PATH, else the
// usual names on PATH. CI installs Debian's chromium (.ci/run).
func chromiumPath(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CHROME_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium to run the dashboard in: apt-get install chromium (.ci/run installs it), or set CHROME_PATH")
	return ""
}

// browser is a headless Chromium with a 1280×800 window. Every uncaught
// exception and every console or browser error (a refused script or style,
// a failed asset) is recorded: a page that logs one is broken.
type browser struct {
	t      testing.TB
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

// newBrowser starts headless Chromium. A start that fails (the browser
// exits before it listens, seen under a loaded machine) is tried again,
// three times in all, each with a fresh browser.
func newBrowser(t testing.TB) *browser {
	t.Helper()
	var err error
	for range 3 {
		var b *browser
		if b, err = startBrowser(t); err == nil {
			return b
		}
		t.Logf("start Chromium: %v; again", err)
	}
	t.Fatalf("start Chromium: %v", err)
	return nil
}

func startBrowser(t testing.TB) (*browser, error) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.WindowSize(1280, 800),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox will not start
		chromedp.Flag("disable-gpu", true),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel2 := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx}
	chromedp.ListenTarget(ctx, func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = "exception: " + ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				msg += " " + ev.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError {
				parts := make([]string, 0, len(ev.Args))
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				msg = "console.error: " + strings.Join(parts, " ")
			}
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.LevelError {
				msg = fmt.Sprintf("browser log (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
			}
		}
		if msg != "" {
			b.mu.Lock()
			b.errors = append(b.errors, msg)
			b.mu.Unlock()
		}
	})
	if err := chromedp.Run(ctx, cdplog.Enable(), runtime.Enable()); err != nil {
		cancel2()
		cancel()
		return nil, err
	}
	t.Cleanup(cancel)
	t.Cleanup(cancel2)
	return b, nil
}

func (b *browser) run(actions ...chromedp.Action) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitLong)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		b.t.Fatal(err)
	}
}

// eval evaluates expr in the page into out.
func (b *browser) eval(expr string, out any) error {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate(expr, out))
}

// waitFor waits until the page's JS expression expr (returning a string:
// "" when satisfied, else what is still missing) is satisfied.
func (b *browser) waitFor(what, expr string) {
	b.t.Helper()
	natstest.Eventually(b.t, waitLong, func() error {
		var missing string
		if err := b.eval(expr, &missing); err != nil {
			return err
		}
		if missing != "" {
			return fmt.Errorf("%s: %s", what, missing)
		}
		return nil
	})
}

func (b *browser) pageErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// setSelect picks value in the <select> with id, as a person would (the
// page reacts to the change event).
func setSelect(id, value string) string {
	return fmt.Sprintf(`(() => { const s = document.getElementById(%q); s.value = %q; s.dispatchEvent(new Event("change")); return s.value; })()`, id, value)
}

// clearSearch empties the agents search box as a person would.
const clearSearch = `(() => { const q = document.getElementById("f-q"); q.value = ""; q.dispatchEvent(new Event("input")); return 1; })()`

// TestDashboardInBrowser (issue 14 point 3): the controller's dashboard,
// loaded once in headless Chromium during a real rollout (a real server,
// controller and agents), shows the canary group's progress move without a
// reload, shows the prod group's halt with its reason in the group table
// and in the timeline, filters the agents table by group, state and search,
// and shows a hostname full of HTML as text. Screenshots of the page at
// 1280×800 are saved as test artifacts (go test -artifacts).
func TestDashboardInBrowser(t *testing.T) {
	f := newFixture(t)
	b := newBrowser(t)

	cfg := rollout.DefaultConfig()
	canary, prod := rollout.DefaultGroup("canary"), rollout.DefaultGroup("prod")
	canary.CanaryCount, canary.MaxInFlight = 1, 50
	canary.MinHealthyTime = rollout.Duration(20 * time.Second)
	prod.CanaryCount, prod.MaxInFlight = 1, 50
	prod.MinHealthyTime = rollout.Duration(0)
	prod.DependsOn = []string{"canary"}
	cfg.Groups = []rollout.GroupConfig{canary, prod}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	rc := f.startController("c1")
	srv, dash := servePage(t, f, rc)

	for range 2 {
		f.startAgent("canary", "1.0.0", false)
	}
	for range 4 {
		f.startAgent("prod", "1.0.0", false)
	}
	// A host whose name is markup: the page must show it as text.
	const hostile = `<img src=x onerror="window.__pwned=1">evil`
	f.startAgentOn("lab", "1.0.0", false, hostile)
	f.waitHeard(rc.c, time.Time{})
	f.step(interval) // every agent established

	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	spec.Critical = true // the test's clock may be outside the start windows
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}

	b.run(chromedp.Navigate(srv.URL + "/"))
	b.waitFor("page loaded and live", `(() => {
		const live = document.getElementById("live").dataset.state;
		if (live !== "open") return "live indicator " + live;
		if (!document.querySelector('tr.group-row[data-group="canary"]')) return "no canary row";
		return document.getElementById("plan-version").textContent.includes("1.0.0 → 2.0.0") ? "" : "plan not shown";
	})()`)
	// Survives only as long as the page is not reloaded.
	var marker int
	if err := b.eval(`window.__loadedOnce = 42`, &marker); err != nil {
		t.Fatal(err)
	}

	// The rollout: every agent does what it is told, except prod's first
	// agent told to update, which rolls back from 2.0.0: prod halts.
	seenCanary := map[string]bool{}
	var shown string
	if err := b.eval(`document.querySelector('tr.group-row[data-group="canary"] .progress').dataset.updated`, &shown); err != nil {
		t.Fatal(err)
	}
	seenCanary[shown] = true
	var failer *runningAgent
	halted := false
	for round := 0; round < 40 && !halted; round++ {
		f.advance(reconcileEvery)
		state, err := f.fleet.ReadState(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := state.Groups["prod"]; ok && st.Value.Halted {
			halted = true
			break
		}
		for _, ra := range f.live { // as obey, but for the failing one
			st, ok := state.Groups[ra.group]
			if !ok || ra == failer {
				continue
			}
			v, update := rollout.Decide(ra.agent.ID(), state.Spec.Value, st.Value, st.Value.Mode)
			if !update || v == "" || v == ra.version {
				continue
			}
			status := install.Status{ActiveVersion: v, StartVersion: ra.version, StartTime: f.clk.Now().UTC()}
			if ra.group == "prod" && failer == nil {
				failer = ra
				status = install.Status{ActiveVersion: ra.version, StartVersion: ra.version, Rollback: true, RollbackFrom: v,
					Error: v + " did not become healthy within health_timeout", StartTime: f.clk.Now().UTC()}
			}
			if err := ra.agent.SetStatus(status); err != nil {
				t.Fatal(err)
			}
			ra.version = status.ActiveVersion
		}
		f.waitVersions(rc)
		// What the page shows of canary's progress now, once the page has
		// caught up with the controller's numbers.
		want := dash.Overview(f.clk.Now())
		var wantUpdated string
		for _, r := range want.Rows {
			if r.Group == "canary" {
				wantUpdated = r.Updated
			}
		}
		b.waitFor("the page shows canary's numbers", fmt.Sprintf(`(() => {
			const td = document.querySelector('tr.group-row[data-group="canary"] .updated-cell');
			if (!td) return "no canary row";
			return td.textContent === %q ? "" : "updated cell " + td.textContent + ", want " + %q;
		})()`, wantUpdated, wantUpdated))
		if err := b.eval(`document.querySelector('tr.group-row[data-group="canary"] .progress').dataset.updated`, &shown); err != nil {
			t.Fatal(err)
		}
		seenCanary[shown] = true
	}
	if !halted {
		t.Fatal("prod never halted")
	}
	if !seenCanary["0"] || !seenCanary["1"] || len(seenCanary) < 2 {
		t.Errorf("canary's progress bar showed %v; want it to move from 0 to 1 without a reload", seenCanary)
	}

	// The halt, with its reason, in the group table and the timeline.
	b.waitFor("prod's halt and its reason", `(() => {
		const row = document.querySelector('tr.group-row[data-group="prod"]');
		if (!row || row.dataset.halted !== "true") return "prod row not halted";
		if (!row.querySelector(".badge").textContent.includes("halted")) return "no halted badge";
		const note = document.querySelector('tr.notes-row[data-group="prod"] .halt-reason');
		if (!note) return "no halt reason under prod";
		if (!note.textContent.includes("rolled back from 2.0.0")) return "halt reason: " + note.textContent;
		const ev = document.querySelector('#timeline li[data-what="halt"][data-group="prod"]');
		if (!ev) return "no halt in the timeline";
		return ev.textContent.includes("rolled back from 2.0.0") ? "" : "timeline halt: " + ev.textContent;
	})()`)
	if err := b.eval(`window.__loadedOnce`, &marker); err != nil || marker != 42 {
		t.Errorf("the page was reloaded (marker %d, %v): the numbers must arrive live", marker, err)
	}

	// Issue 14 point 4: the terminal and the page show the same cells.
	// fleetctl status (whose rows fleetctl watch draws) against the page's
	// rows, at one instant of the clock.
	f.statusAtNow()
	var table bytes.Buffer
	so := &fleetctl.StatusOptions{Global: &fleetctl.Global{NATSURL: f.srv.URL(), Timeout: waitLong, Out: &table, ErrOut: io.Discard, Now: f.clk.Now}}
	if err := fleetctl.RunStatus(f.ctx, so); err != nil {
		t.Fatal(err)
	}
	lines := map[string][]string{}
	for _, l := range strings.Split(table.String(), "\n") {
		cells := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), -1)
		if len(cells) == 8 {
			lines[cells[0]] = cells
		}
	}
	for _, r := range dash.Overview(f.clk.Now()).Rows {
		want := []string{r.Group, r.State, r.Since, r.Updated, r.Updating, r.Waiting, r.Failed, r.Allowed}
		if got := lines[r.Group]; !slices.Equal(got, want) {
			t.Errorf("group %s: fleetctl status shows %q, the page %q\n%s", r.Group, got, want, table.String())
		}
	}

	// The agents table: filter by group, then state, then search.
	var v string
	b.run(chromedp.Evaluate(setSelect("f-group", "prod"), &v))
	b.waitFor("agents of prod", `(() => {
		const t = document.getElementById("agents");
		if (t.dataset.total !== "4") return "total " + t.dataset.total;
		const groups = [...t.tBodies[0].rows].map(r => r.cells[1].textContent);
		return groups.length === 4 && groups.every(g => g === "prod") ? "" : "rows " + groups.join(",");
	})()`)
	b.run(chromedp.Evaluate(setSelect("f-state", "rolled_back"), &v))
	b.waitFor("prod's rolled back agent", fmt.Sprintf(`(() => {
		const t = document.getElementById("agents");
		if (t.dataset.total !== "1") return "total " + t.dataset.total;
		const r = t.tBodies[0].rows[0];
		if (r.dataset.agent !== %q) return "agent " + r.dataset.agent;
		return r.cells[4].textContent.includes("rolled back from 2.0.0") ? "" : "state " + r.cells[4].textContent;
	})()`, string(failer.agent.ID())))
	b.run(chromedp.Evaluate(setSelect("f-state", ""), &v), chromedp.Evaluate(setSelect("f-group", ""), &v),
		chromedp.SendKeys("#f-q", "HOST-CANARY", chromedp.ByQuery))
	b.waitFor("search by hostname, any case", `(() => {
		const t = document.getElementById("agents");
		return t.dataset.total === "2" ? "" : "total " + t.dataset.total;
	})()`)
	b.run(chromedp.Evaluate(clearSearch, new(int)), chromedp.SendKeys("#f-q", "<img", chromedp.ByQuery))
	b.waitFor("the markup hostname, as text", fmt.Sprintf(`(() => {
		const t = document.getElementById("agents");
		if (t.dataset.total !== "1") return "total " + t.dataset.total;
		if (t.tBodies[0].rows[0].cells[2].textContent !== %q) return "hostname cell " + t.tBodies[0].rows[0].cells[2].innerHTML;
		if (document.querySelectorAll("#agents img").length) return "an img element";
		return window.__pwned === undefined ? "" : "the hostname ran script";
	})()`, hostile))

	// Back to everything for the screenshot.
	b.run(chromedp.Evaluate(clearSearch, new(int)))
	b.waitFor("all agents", `document.getElementById("agents").dataset.total === "7" ? "" : "total " + document.getElementById("agents").dataset.total`)
	var shot, full []byte
	b.run(chromedp.EmulateViewport(1280, 800), chromedp.Evaluate(`document.activeElement.blur(); window.scrollTo(0, 0); 1`, new(int)),
		chromedp.CaptureScreenshot(&shot), chromedp.FullScreenshot(&full, 100))
	dir := t.ArtifactDir()
	for name, data := range map[string][]byte{"dashboard.png": shot, "dashboard-full.png": full} {
		if len(data) < 10_000 {
			t.Errorf("%s: %d bytes, not a page", name, len(data))
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s (kept with go test -artifacts)", dir)

	if errs := b.pageErrors(); len(errs) > 0 {
		t.Errorf("the page logged errors:\n  %q", errs)
	}
}

// BenchmarkDashboardInBrowser100k is the dashboard's first paint in headless
// Chromium with 100,000 agents in the controller's inventory (the
// inventory of BenchmarkDashboard100k): from navigation start to the
// page's User Timing marks for the numbers (fleetwave-status, from the
// live stream) and the agents table (fleetwave-agents, page 1 of 2,000),
// both drawn. The baseline, in the same run, is the same page over an
// inventory of 100 agents: what loading the page costs by itself.
// docs/PERFORMANCE.md §7.
func BenchmarkDashboardInBrowser100k(b *testing.B) {
	paint := func(b *testing.B, n int) (status, agents time.Duration) {
		c, _ := controller.BenchController(b, n)
		d := &controller.Dashboard{C: c, Ticker: clock.Real{}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = d.Run(ctx) }()
		srv := httptest.NewServer(c.HTTPHandler(http.NotFoundHandler(), d))
		defer func() {
			srv.CloseClientConnections()
			srv.Close()
		}()
		br := newBrowser(b)
		for range 3 { // a warm browser, as an operator's is
			br.run(chromedp.Navigate(srv.URL + "/"))
			var marks []float64
			natstest.Eventually(b, waitLong, func() error {
				if err := br.eval(`["fleetwave-status", "fleetwave-agents"].map(n => (performance.getEntriesByName(n)[0] || {startTime: -1}).startTime)`, &marks); err != nil {
					return err
				}
				if len(marks) != 2 || marks[0] < 0 || marks[1] < 0 {
					return fmt.Errorf("not painted yet: %v", marks)
				}
				return nil
			})
			status = time.Duration(marks[0] * float64(time.Millisecond))
			agents = time.Duration(marks[1] * float64(time.Millisecond))
		}
		var total string
		if err := br.eval(`document.getElementById("agents").dataset.total`, &total); err != nil || total != fmt.Sprint(n) {
			b.Fatalf("the agents table counts %q (%v), want %d", total, err, n)
		}
		if errs := br.pageErrors(); len(errs) > 0 {
			b.Fatalf("the page logged errors: %q", errs)
		}
		return status, agents
	}
	var status, agents, baseStatus, baseAgents time.Duration
	for b.Loop() {
		s, a := paint(b, 100_000)
		bs, ba := paint(b, 100)
		status, agents, baseStatus, baseAgents = status+s, agents+a, baseStatus+bs, baseAgents+ba
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	b.ReportMetric(ms(status), "ms_status_painted")
	b.ReportMetric(ms(agents), "ms_agents_painted")
	b.ReportMetric(ms(max(status, agents))/ms(max(baseStatus, baseAgents)), "x_100_agents")
}

// servePage serves rc's dashboard for a browser until the test ends, and
// returns it: the plan mirror and the dashboard's loop on the real clock,
// pushing every 200ms.
func servePage(t *testing.T, f *fixture, rc *runningController) (*httptest.Server, *controller.Dashboard) {
	t.Helper()
	mirror := &controller.PlanMirror{NC: f.srv.Conn("mirror"), Store: &httpfind.Store{}, Log: natstest.Logger(t)}
	rc.c.ServePlanFrom(mirror)
	go func() { _ = mirror.Run(f.ctx) }()
	dash := &controller.Dashboard{C: rc.c, Mirror: mirror, Refresh: 200 * time.Millisecond, Ticker: clock.Real{}, Log: natstest.Logger(t)}
	go func() { _ = dash.Run(f.ctx) }()
	srv := httptest.NewServer(rc.c.HTTPHandler(&httpfind.Handler{Store: mirror.Store, Ready: mirror.Ready}, dash))
	t.Cleanup(func() {
		srv.CloseClientConnections() // the page's live stream never ends by itself
		srv.Close()
	})
	return srv, dash
}
