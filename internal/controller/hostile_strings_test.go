package controller_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chromedp/chromedp"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/controller"
	"github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The strings of the hostile-strings test: each carries a newline (a
// forged row), an 8-bit CSI (U+009B), DEL, a right-to-left override
// (U+202E) and, where the field takes it, ESC; Slack and Mattermost
// mentions; and a FORGED-… marker that a forged row would start with.
const (
	// hostilePromName is the __name__ of the series a hostile Prometheus
	// answers with (printed raw by Metric.String into the check's series,
	// the halt reason, the events).
	hostilePromName = "app\u009b31mRED\u202eXYZ\u007fb\x1b[2J\nFORGED-PROM <!channel> @here"
	// hostileError is an agent's error text (free text: no C0 control
	// but tab and newline gets through the heartbeat decoder).
	hostileError = "disk\u009b31mRED\u202eXYZ\u007fb\nFORGED-ERR\t<img src=x onerror=window.__pwned=1> <!here>"
	// hostileCause is its error_cause (at most 64 bytes).
	hostileCause = "dsk\u009bRED\u202e\u007f\nFORGED-CAUSE"
	// hostileNote is an operator's --actor and --reason.
	hostileNote = "op\u009b31mRED\u202eXYZ\u007fb\x1b[2J\nFORGED-NOTE @channel"
)

// identityRunes go into the name fields of heartbeats that must be
// refused.
var identityRunes = []struct{ name, s string }{
	{"newline", "\n"}, {"C1 CSI", "\u009b"}, {"DEL", "\x7f"}, {"RLO", "\u202e"}, {"ESC", "\x1b"},
}

// lockedBuffer is a bytes.Buffer written by several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// bodyRecorder is a webhook receiver that keeps every body as it came.
type bodyRecorder struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (r *bodyRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.bodies = append(r.bodies, body)
	r.mu.Unlock()
}

func (r *bodyRecorder) all() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Join(r.bodies, []byte("\n"))
}

// hostilePrometheus answers every query with two series, the failing one
// named hostilePromName.
func hostilePrometheus(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := float64(time.Now().UnixMilli()) / 1000
		body, err := json.Marshal(map[string]any{"status": "success", "data": map[string]any{
			"resultType": "vector",
			"result": []any{
				map[string]any{"metric": map[string]string{"__name__": hostilePromName, "instance": "a"}, "value": []any{now, "0.9"}},
				map[string]any{"metric": map[string]string{"__name__": "app_error_rate", "instance": "b"}, "value": []any{now, "0.001"}},
			},
		}})
		if err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// outputKind is how an output is checked.
type outputKind int

const (
	// terminal: printed text; its own newlines and tabs lay it out.
	terminal outputKind = iota
	// screen: fleetctl watch's full-screen view, whose own control
	// sequences (alternate screen, clear, \r\n) are taken out first.
	screen
)

// checkOutput fails when out holds anything a terminal acts on that the
// printer did not put there for its layout: a byte below 0x20 but newline
// and tab, DEL, a C1 control, a bidirectional control or another rune
// that is not printable, or invalid UTF-8; a line that starts with a
// forged marker; or the name of an agent whose heartbeat must have been
// refused.
func checkOutput(t *testing.T, name string, out []byte, kind outputKind) {
	t.Helper()
	s := string(out)
	if kind == screen {
		for _, seq := range []string{"\x1b[?1049h\x1b[?25l", "\x1b[?25h\x1b[?1049l", "\x1b[H\x1b[2J", "\r\n"} {
			s = strings.ReplaceAll(s, seq, "\n")
		}
	}
	if !utf8.ValidString(s) {
		t.Errorf("%s: not valid UTF-8: %q", name, s)
	}
	bad := 0
	for i, r := range s {
		if r == '\n' || r == '\t' || unicode.IsPrint(r) {
			continue
		}
		if bad++; bad <= 3 {
			lo, hi := max(i-40, 0), min(i+40, len(s))
			t.Errorf("%s: raw %U at byte %d: …%q…", name, r, i, s[lo:hi])
		}
	}
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "FORGED") {
			t.Errorf("%s: a forged line: %q", name, l)
		}
	}
	if strings.Contains(s, "evil-host") || strings.Contains(s, "9.9.8") {
		t.Errorf("%s: shows an agent whose heartbeat names it with a control character (it must be refused):\n%s", name, s)
	}
}

// TestHostileStringsEveryOutput (issue 24 point 8, "String tests"): a
// fleet with a hostile Prometheus (a series named with a newline, an 8-bit
// CSI, DEL, a right-to-left override, ESC and Slack mentions), an agent
// whose error text and cause carry them, an operator whose actor and
// reason carry them, and agents whose host name or version carries one
// of them. On every output path (fleetctl agents ls, status, watch as
// lines, screen and JSON, history, quarantine ls, -o json of each, the
// fleetctl binary's own stdout, the dashboard's API and live stream, the
// json and slack webhooks, the controller's text and JSON logs) nothing
// raw reaches a reader: no byte below 0x20 but the output's own newlines
// and tabs, no DEL, no C1 or bidirectional control; free text arrives
// escaped (each output shows the escapes, so the text did reach it); no
// forged row. The heartbeats with such a name are refused at decode,
// counted by fleetwave_heartbeats_rejected_total{reason="unprintable"},
// and shown nowhere. The dashboard, in headless Chromium, shows the
// hostile error text, halt reason and actor as text, each in a
// bidirectional isolate of its own.
func TestHostileStringsEveryOutput(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv := natstest.Start(t)
	fleet, err := kv.Ensure(ctx, srv.JetStream("setup"), kv.Options{AgentExpiry: time.Minute, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	prom := hostilePrometheus(t)
	jsonHook, slackHook := &bodyRecorder{}, &bodyRecorder{}
	jsonSrv, slackSrv := httptest.NewServer(jsonHook), httptest.NewServer(slackHook)
	t.Cleanup(jsonSrv.Close)
	t.Cleanup(slackSrv.Close)

	cfg := rollout.DefaultConfig()
	prod := rollout.DefaultGroup("prod")
	prod.CanaryCount, prod.MaxInFlight, prod.MinHealthyTime = 1, 50, 0
	prod.HealthTimeout = rollout.Duration(30 * time.Second)
	cfg.Groups = []rollout.GroupConfig{prod}
	// lab is not in the config and is not rolled out: it follows no
	// catch-all group.
	cfg.CatchAll = rollout.CatchAllNone
	cfg.PrometheusURL = prom.URL
	cfg.Analysis = []rollout.Check{{Name: "error-rate", Query: `app_error_rate`, Success: "< 0.05",
		Interval: rollout.Duration(time.Second), Count: 1, InconclusiveLimit: 3}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Save(ctx, fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}

	// The controller logs through the daemons' own loggers, text and JSON.
	var textLog, jsonLog lockedBuffer
	textLogger, err := (&cliutil.LogFlags{Level: "debug", Format: "text"}).Logger(&textLog)
	if err != nil {
		t.Fatal(err)
	}
	jsonLogger, err := (&cliutil.LogFlags{Level: "debug", Format: "json"}).Logger(&jsonLog)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewMultiHandler(textLogger.Handler(), jsonLogger.Handler(), natstest.Logger(t).Handler()))
	c, err := controller.New(fleet, controller.Options{
		ID: "c1", StatsInterval: 300 * time.Millisecond, HeartbeatInterval: 300 * time.Millisecond, AgentExpiry: time.Minute,
		ReconcileInterval: 200 * time.Millisecond, Clock: clock.Real{}, Log: log,
		Notify: controller.Notify{
			Webhooks: []controller.Webhook{{URL: jsonSrv.URL, Format: controller.WebhookJSON}, {URL: slackSrv.URL, Format: controller.WebhookSlack}},
			Kinds:    rollout.EventKinds, Audit: true, Poll: 100 * time.Millisecond,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	mirror := &controller.PlanMirror{NC: srv.Conn("mirror"), Store: &httpfind.Store{}, Log: natstest.Logger(t)}
	c.ServePlanFrom(mirror)
	dash := &controller.Dashboard{C: c, Mirror: mirror, Refresh: 200 * time.Millisecond, Ticker: clock.Real{}, Log: log}
	wg.Go(func() { _ = mirror.Run(runCtx) })
	wg.Go(func() { _ = dash.Run(runCtx) })
	wg.Go(func() {
		if err := c.Run(runCtx); err != nil && runCtx.Err() == nil {
			t.Errorf("controller stopped: %v", err)
		}
	})
	web := httptest.NewServer(c.HTTPHandler(&httpfind.Handler{Store: mirror.Store, Ready: mirror.Ready}, dash))
	t.Cleanup(func() { web.CloseClientConnections(); web.Close() })

	global := func(out, errOut io.Writer) *fleetctl.Global {
		return &fleetctl.Global{NATSURL: srv.URL(), Timeout: waitLong, Out: out, ErrOut: errOut, Now: time.Now}
	}

	// fleetctl watch in its three forms, from before anything happens.
	var watchLines, watchScreen, watchJSON, watchErr lockedBuffer
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watchWG sync.WaitGroup
	for _, w := range []struct {
		out    *lockedBuffer
		redraw bool
		output string
	}{{&watchLines, false, "text"}, {&watchScreen, true, "text"}, {&watchJSON, false, "json"}} {
		o := &fleetctl.WatchOptions{Global: global(w.out, &watchErr), Redraw: w.redraw, Output: w.output,
			RedrawInterval: 200 * time.Millisecond, Size: func() (int, int) { return 200, 60 }}
		watchWG.Go(func() {
			if err := fleetctl.RunWatch(watchCtx, o); err != nil {
				t.Errorf("fleetctl watch: %v", err)
			}
		})
	}
	natstest.Eventually(t, waitLong, func() error {
		if n := strings.Count(string(watchErr.Bytes()), "Watching"); n != 3 {
			return fmt.Errorf("%d of 3 watches subscribed", n)
		}
		return nil
	})

	// The agents: three in prod that do what they are told; in lab (not
	// rolled out), one with the hostile error; one whose error holds ESC
	// (refused: no C0 control but tab and newline in free text either);
	// and one per rune of identityRunes with it in its host name, and one
	// with it in its version (refused).
	type simAgent struct {
		hb  heartbeat.Heartbeat
		raw bool // published without Encode's validation, as a hostile agent does
	}
	var agents []*simAgent
	newID := func() rollout.AgentID {
		id, err := rollout.NewAgentID(nil)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	for i := range 3 {
		agents = append(agents, &simAgent{hb: heartbeat.Heartbeat{AgentID: newID(), Hostname: fmt.Sprintf("web-%d", i), Group: "prod", ActiveVersion: "1.0.0"}})
	}
	agents = append(agents,
		&simAgent{hb: heartbeat.Heartbeat{AgentID: newID(), Hostname: "lab-1", Group: "lab", ActiveVersion: "1.0.0",
			Error: hostileError, ErrorClass: heartbeat.ClassInfrastructure, ErrorCause: hostileCause}},
		&simAgent{raw: true, hb: heartbeat.Heartbeat{AgentID: newID(), Hostname: "evil-host-esc-error", Group: "lab", ActiveVersion: "1.0.0",
			Error: "evil-host\x1b[2J", ErrorClass: heartbeat.ClassInfrastructure, ErrorCause: "disk"}})
	for _, r := range identityRunes {
		agents = append(agents,
			&simAgent{raw: true, hb: heartbeat.Heartbeat{AgentID: newID(), Hostname: "evil-host-9" + r.s + "x  prod  9.9.9", Group: "lab", ActiveVersion: "1.0.0"}},
			&simAgent{raw: true, hb: heartbeat.Heartbeat{AgentID: newID(), Hostname: "web-v", Group: "lab", ActiveVersion: "9.9.8" + r.s}})
	}
	wg.Go(func() {
		nc := srv.Conn("agents")
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for seq := uint64(1); ; seq++ {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			state, stateErr := fleet.ReadState(runCtx)
			for _, a := range agents {
				if stateErr == nil && state.HasSpec && !a.raw {
					if st, ok := state.Groups[a.hb.Group]; ok {
						if to, update := rollout.Decide(a.hb.AgentID, state.Spec.Value, st.Value, st.Value.Mode); update && rollout.Act(a.hb.ActiveVersion, to, update) {
							a.hb.ActiveVersion = to
						}
					}
				}
				hb := a.hb
				hb.V, hb.At, hb.Seq = heartbeat.SchemaVersion, time.Now().UTC(), seq
				var data []byte
				var err error
				if a.raw {
					data, err = json.Marshal(&hb)
				} else {
					data, err = heartbeat.Encode(&hb)
				}
				if err != nil {
					t.Errorf("heartbeat of %s: %v", hb.Hostname, err)
					return
				}
				_ = nc.Publish(heartbeat.SubjectFor(hb.Group, hb.AgentID), data)
			}
		}
	})
	natstest.Eventually(t, waitLong, func() error {
		var rep fleetctl.StatusReport
		if err := jsonOut(func(o io.Writer) error {
			return fleetctl.RunStatus(ctx, &fleetctl.StatusOptions{Global: global(o, io.Discard), Output: "json"})
		}, &rep); err != nil {
			return err
		}
		n := map[string]int{}
		for _, g := range rep.Groups {
			n[g.Name] = g.Agents
		}
		if n["prod"] < 3 || n["lab"] < 1 {
			return fmt.Errorf("agents counted: %v, want 3 in prod and 1 in lab", n)
		}
		return nil
	})

	// An operator quarantines an unrelated version, with a hostile actor
	// and reason (the audit trail, the quarantine list, the event).
	qo := &fleetctl.QuarantineOptions{Global: global(io.Discard, io.Discard), Version: "0.9.0", Output: "text"}
	qo.Actor, qo.Reason = hostileNote, hostileNote
	if err := fleetctl.RunQuarantineAdd(ctx, qo); err != nil {
		t.Fatal(err)
	}
	// The release: its canary's check fails on the hostile series.
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	spec.Critical = true
	if _, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 90*time.Second, func() error {
		e, err := kv.Get[rollout.GroupStatus](ctx, fleet.Plan, kv.GroupKey("prod"))
		if err != nil {
			return err
		}
		if !e.Value.Halted || !strings.Contains(e.Value.HaltReason, "FORGED-PROM") {
			return fmt.Errorf("prod: %s halted=%v %q", e.Value.State, e.Value.Halted, e.Value.HaltReason)
		}
		return nil
	})
	natstest.Eventually(t, waitLong, func() error {
		for name, got := range map[string][]byte{"json webhook": jsonHook.all(), "slack webhook": slackHook.all(),
			"watch": watchLines.Bytes(), "watch screen": watchScreen.Bytes(), "watch -o json": watchJSON.Bytes()} {
			for _, want := range []string{"FORGED-PROM"} {
				if !bytes.Contains(got, []byte(want)) {
					return fmt.Errorf("%s: no %s yet", name, want)
				}
			}
		}
		return nil
	})
	stopWatch()
	watchWG.Wait()

	// Every output.
	run := func(f func(out, errOut io.Writer) error) []byte {
		t.Helper()
		var out bytes.Buffer
		if err := f(&out, &out); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		return out.Bytes()
	}
	agentsLs := func(output string) func(out, errOut io.Writer) error {
		return func(out, errOut io.Writer) error {
			return fleetctl.RunAgentsList(ctx, &fleetctl.AgentsOptions{Global: global(out, errOut), Output: output, Interval: 300 * time.Millisecond})
		}
	}
	status := func(output string) func(out, errOut io.Writer) error {
		return func(out, errOut io.Writer) error {
			return fleetctl.RunStatus(ctx, &fleetctl.StatusOptions{Global: global(out, errOut), Output: output})
		}
	}
	history := func(output string) func(out, errOut io.Writer) error {
		return func(out, errOut io.Writer) error {
			return fleetctl.RunHistory(ctx, &fleetctl.HistoryOptions{Global: global(out, errOut), Output: output})
		}
	}
	quarantine := func(out, errOut io.Writer) error {
		return fleetctl.RunQuarantineLs(ctx, &fleetctl.QuarantineOptions{Global: global(out, errOut), Output: "table"})
	}
	binary := func(out, errOut io.Writer) error { // the command as the binary runs it: fleetctl's own writers
		root := fleetctl.NewCommand()
		root.SetOut(out)
		root.SetErr(errOut)
		root.SetArgs([]string{"--nats", srv.URL(), "status"})
		return root.ExecuteContext(ctx)
	}
	get := func(path string) []byte {
		t.Helper()
		resp, err := http.Get(web.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v\n%s", path, resp.StatusCode, err, body)
		}
		return body
	}
	// Escapes as a terminal shows them, and as JSON carries them.
	textEsc := []string{`\u009b`, `\u202e`, `\x7f`}
	jsonEsc := []string{`\u009b`, `\u202e`, `\u007f`}
	outputs := []struct {
		name string
		out  []byte
		kind outputKind
		// want: what shows that the hostile text reached this output,
		// escaped.
		want []string
	}{
		{"agents ls", run(agentsLs("table")), terminal, append([]string{`blocked: dsk\u009bRED\u202e\x7f\nFORGED-CAUSE`, "warning: skipped"}, textEsc...)},
		{"agents ls -o json", run(agentsLs("json")), terminal, append([]string{"FORGED-ERR", "FORGED-CAUSE", `"invalid": 11`}, jsonEsc...)},
		{"status", run(status("table")), terminal, append([]string{`\x1b[2J\nFORGED-PROM`}, textEsc...)},
		{"status -o json", run(status("json")), terminal, append([]string{"FORGED-PROM"}, jsonEsc...)},
		{"fleetctl status (the binary's writers)", run(binary), terminal, append([]string{"FORGED-PROM"}, textEsc...)},
		{"watch", watchLines.Bytes(), terminal, append([]string{"FORGED-PROM"}, textEsc...)},
		{"watch (screen)", watchScreen.Bytes(), screen, append([]string{"FORGED-PROM"}, textEsc...)},
		{"watch -o json", watchJSON.Bytes(), terminal, append([]string{"FORGED-PROM"}, jsonEsc...)},
		{"history", run(history("table")), terminal, []string{`op\u009b3`}},
		{"history -o json", run(history("json")), terminal, append([]string{"FORGED-PROM", "FORGED-NOTE"}, jsonEsc...)},
		{"quarantine ls", run(quarantine), terminal, append([]string{`\nFORGED-N`}, textEsc...)},
		{"dashboard " + controller.PathAPIStatus, get(controller.PathAPIStatus), terminal, append([]string{"FORGED-PROM"}, jsonEsc...)},
		{"dashboard " + controller.PathAPIAgents, get(controller.PathAPIAgents), terminal, append([]string{"FORGED-ERR"}, jsonEsc...)},
		{"dashboard " + controller.PathAPIHistory, get(controller.PathAPIHistory), terminal, append([]string{"FORGED-PROM", "FORGED-NOTE"}, jsonEsc...)},
		{"dashboard " + controller.PathAPIStream, firstStreamEvent(t, web.URL+controller.PathAPIStream), terminal, append([]string{"FORGED-PROM"}, jsonEsc...)},
		{"json webhook", jsonHook.all(), terminal, append([]string{"FORGED-PROM", "FORGED-NOTE", `\\u009b`}, jsonEsc...)},
		{"slack webhook", slackHook.all(), terminal, []string{"FORGED-PROM", "FORGED-NOTE", `\\u009b`, `\\u202e`, `\\x7f`, `\\x1b`}},
		{"controller log (text)", textLog.Bytes(), terminal, []string{"FORGED-PROM", `\u009b`, `\u202e`, `\x7f`}},
		{"controller log (json)", jsonLog.Bytes(), terminal, append([]string{"FORGED-PROM"}, jsonEsc...)},
	}
	for _, o := range outputs {
		t.Run(o.name, func(t *testing.T) {
			checkOutput(t, o.name, o.out, o.kind)
			for _, want := range o.want {
				if !bytes.Contains(o.out, []byte(want)) {
					t.Errorf("%s: want %q in it:\n%s", o.name, want, o.out)
				}
			}
		})
	}
	t.Run("slack mentions", func(t *testing.T) {
		// What Slack reads: the text of each body.
		var texts []string
		for _, body := range bytes.Split(slackHook.all(), []byte("\n")) {
			var p struct{ Text string }
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatalf("slack body %s: %v", body, err)
			}
			texts = append(texts, p.Text)
		}
		all := strings.Join(texts, "\n")
		for _, m := range []string{"<!channel>", "<!here>", "@here", "@channel", "<img"} {
			if strings.Contains(all, m) {
				t.Errorf("slack webhook: %q in a text: Slack or Mattermost would act on it:\n%s", m, all)
			}
		}
		for _, want := range []string{"&lt;!channel&gt;", "＠here", "＠channel"} {
			if !strings.Contains(all, want) {
				t.Errorf("slack webhook: want %q in the texts:\n%s", want, all)
			}
		}
	})

	// The heartbeats naming an agent with a control character: refused
	// and counted, each agent at least once.
	t.Run("refused and counted", func(t *testing.T) {
		natstest.Eventually(t, waitLong, func() error {
			got := rejected(t, web.URL)
			if got["unprintable"] < float64(2*len(identityRunes)) || got["malformed"] < 1 {
				return fmt.Errorf("rejected %v: want unprintable >= %d and malformed >= 1", got, 2*len(identityRunes))
			}
			return nil
		})
	})

	// The page shows the hostile error as text: no element from it, no
	// script run, the text itself in the agent's row.
	t.Run("dashboard in Chromium", func(t *testing.T) {
		b := newBrowser(t)
		b.run(chromedp.Navigate(web.URL + "/"))
		b.waitFor("lab's agent, its error as text", `(() => {
			const rows = [...document.querySelectorAll("#agents tbody tr")];
			const lab = rows.find(r => r.cells[2] && r.cells[2].textContent === "lab-1");
			if (!lab) return "no lab-1 agent among " + rows.length + " rows";
			if (document.querySelectorAll("#agents img, #groups img, #timeline img").length) return "an img element";
			if (window.__pwned !== undefined) return "the error text ran script";
			const title = lab.querySelector("[title]");
			if (!title || !title.title.includes("<img src=x onerror=window.__pwned=1>")) return "error text not shown as text: " + lab.innerHTML;
			return "";
		})()`)
		b.waitFor("prod's halt reason as text", `(() => {
			const note = document.querySelector('tr.notes-row[data-group="prod"] .halt-reason');
			if (!note) return "no halt reason";
			return note.textContent.includes("FORGED-PROM") && note.children.length === 0 ? "" : "halt reason " + note.innerHTML;
		})()`)
		b.waitFor("the operator's actor, isolated", `(() => {
			const a = [...document.querySelectorAll("#timeline .tl-actor")].find(e => e.textContent.includes("FORGED-NOTE"));
			if (!a) return "no timeline entry by the hostile actor";
			if (a.children.length) return "actor " + a.innerHTML;
			return getComputedStyle(a).unicodeBidi === "isolate" ? "" : "actor's unicode-bidi is " + getComputedStyle(a).unicodeBidi;
		})()`)
		if errs := b.pageErrors(); len(errs) > 0 {
			t.Errorf("the page logged errors:\n  %q", errs)
		}
	})
}

// jsonOut runs f into a buffer and decodes what it printed into v.
func jsonOut(f func(io.Writer) error, v any) error {
	var buf bytes.Buffer
	if err := f(&buf); err != nil {
		return err
	}
	return json.Unmarshal(buf.Bytes(), v)
}

// rejected reads fleetwave_heartbeats_rejected_total by reason from the
// controller's /metrics.
func rejected(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + controller.PathMetrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	re := regexp.MustCompile(`(?m)^fleetwave_heartbeats_rejected_total\{reason="([a-z_]+)"\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		out[m[1]] = v
	}
	return out
}

// firstStreamEvent reads the dashboard's live stream up to its first
// event (the status), as a page receives it.
func firstStreamEvent(t *testing.T, url string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		if sc.Text() == "" && out.Len() > 0 {
			break
		}
		out.Write(sc.Bytes())
		out.WriteByte('\n')
	}
	return out.Bytes()
}
