package fleetctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// startWatch runs RunWatch until the test ends and waits until it is
// subscribed. stop cancels it and returns its error.
func startWatch(t *testing.T, e *env, redraw bool) (out *natstest.Buffer, stop func() error) {
	t.Helper()
	g, out, errOut := e.global()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunWatch(ctx, &WatchOptions{Global: g, Redraw: redraw, RedrawInterval: time.Hour})
	}()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("watch did not stop after its context was cancelled")
		}
	}
	t.Cleanup(func() { _ = stop() })
	natstest.Eventually(t, 10*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("watch ended early: %v", err)
		default:
		}
		if !strings.Contains(errOut.String(), "Watching fleet.events.>") {
			return errors.New("not subscribed yet")
		}
		return nil
	})
	return out, stop
}

func TestWatchPrintsEvents(t *testing.T) {
	e := newEnv(t)
	out, stop := startWatch(t, e, false)

	ev := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, From: rollout.StateActive, To: rollout.StateActive,
		Reason: "7 of 100 failed (threshold 5%)", At: testNow}
	if err := e.fleet.PublishEvent(ev); err != nil {
		t.Fatal(err)
	}
	ev2 := rollout.Event{V: 1, Group: "staging", Kind: rollout.EventTransition, From: rollout.StateCanary, To: rollout.StateActive,
		Reason: "2 canaries healthy for 5m", At: testNow.Add(time.Second)}
	if err := e.fleet.PublishEvent(ev2); err != nil {
		t.Fatal(err)
	}
	// The first is 102 columns: its reason goes on on the next line.
	want := "2026-11-23T12:00:00Z  prod          halt        active                  7 of 100 failed (threshold\n" +
		"    5%)\n" +
		"2026-11-23T12:00:01Z  staging       transition  canary → active         2 canaries healthy for 5m\n"
	natstest.Eventually(t, 10*time.Second, func() error {
		if got := out.String(); got != want {
			return fmt.Errorf("output %q, want %q", got, want)
		}
		return nil
	})
	if err := stop(); err != nil {
		t.Errorf("watch returned %v on interrupt, want nil", err)
	}
}

func TestWatchRedrawsStatusOnATerminal(t *testing.T) {
	e := rolloutFixture(t)
	out, stop := startWatch(t, e, true)
	// The first screen is drawn at once, on the alternate screen.
	natstest.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), "Version: 1.3.2 → 1.4.0") {
			return errors.New("no status drawn yet")
		}
		return nil
	})
	if !strings.HasPrefix(out.String(), enterScreen) {
		t.Errorf("output starts %q, want the alternate screen entered", shorten(out.String(), 20))
	}
	ev := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventTransition, From: rollout.StateUnstarted, To: rollout.StateCanary,
		Reason: "window open", At: testNow}
	if err := e.fleet.PublishEvent(ev); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, func() error {
		screens := strings.Split(out.String(), clearScreen)
		last := screens[len(screens)-1]
		if len(screens) < 3 || !strings.Contains(last, "GROUP    STATE") || !strings.Contains(last, "unstarted → canary") {
			return fmt.Errorf("no redraw with the event yet (%d screens):\n%s", len(screens)-1, last)
		}
		return nil
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out.String(), leaveScreen) {
		t.Errorf("output ends %q, want the terminal restored", out.String()[max(0, len(out.String())-40):])
	}
}

// longReason is a reason longer than any line.
var longReason = "canary 0b000000-0000-4000-8000-000000000000 missing since 2026-11-23T11:54:00Z " +
	"(longer than health_timeout 5m); " + strings.Repeat("and then some more words of explanation ", 5)

// screenFixture is a busy watch screen: twelve groups with notes and long
// reasons, and n events with long reasons, event i at testNow+i s.
func screenFixture(t *testing.T, n int) watchState {
	t.Helper()
	rep := StatusReport{
		Plan: &PlanReport{Mode: "enabled", ConfigMode: "enabled", PlanMode: "enabled", StartVersion: "1.3.2",
			TargetVersion: "1.4.0", Strategy: "backpressure", Schedule: "regular"},
	}
	for i, st := range []rollout.State{rollout.StateDone, rollout.StateCanary, rollout.StateActive, rollout.StateUnstarted, rollout.StateUnstarted,
		rollout.StateDone, rollout.StateDone, rollout.StateUnstarted, rollout.StateUnstarted,
		rollout.StateDone, rollout.StateDone, rollout.StateDone} {
		r := &GroupRollout{InConfig: true, Requires: []string{}, State: st, Since: testNow.Add(-time.Hour), Progress: 0.7,
			Agents: AgentSplit{Updated: 50, Unchanged: 50, Updating: 10, Waiting: 40}}
		if st == rollout.StateCanary {
			r.Halted, r.HaltedAt, r.HaltReason = true, testNow.Add(-time.Minute), longReason
		}
		if st == rollout.StateUnstarted {
			r.Waiting = "waiting for group to finish: " + longReason
		}
		rep.Groups = append(rep.Groups, GroupReport{Name: fmt.Sprintf("group-%d", i), Agents: 100, Versions: map[string]VersionReport{}, Rollout: r})
	}
	s := watchState{Now: testNow, Status: &rep}
	for i := range n {
		ev := rollout.Event{V: 1, Group: "group-1", Kind: rollout.EventHalt, From: rollout.StateCanary, To: rollout.StateCanary,
			Reason: fmt.Sprintf("event %d: %s", i, longReason), At: testNow.Add(time.Duration(i) * time.Second)}
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		s.add(screenEventLine("fleet.events.group-1", data))
	}
	return s
}

// notPrint reports a rune a terminal acts on or hides: a control (tab and
// newline included), DEL, a C1 or bidirectional control.
func notPrint(r rune) bool { return !unicode.IsPrint(r) }

// checkScreen fails unless lines fit width×height.
func checkScreen(t *testing.T, lines []string, width, height int) {
	t.Helper()
	if len(lines) > height {
		t.Errorf("%d lines on a screen of %d:\n%s", len(lines), height, strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > width {
			t.Errorf("line %d columns wide on a screen of %d: %q", n, width, l)
		}
		if strings.ContainsFunc(l, notPrint) {
			t.Errorf("control character in line %q", l)
		}
	}
}

func TestRenderScreenFits80x24(t *testing.T) {
	s := screenFixture(t, 30)
	lines := renderScreen(s, 80, 24)
	checkScreen(t, lines, 80, 24)
	if len(lines) != 24 {
		t.Errorf("%d lines, want the whole screen used (24)", len(lines))
	}
	idx := func(prefix string) int {
		for i, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return i
			}
		}
		return -1
	}
	header, events := idx("GROUP "), idx("Events on fleet.events.>, newest first:")
	if header < 0 || events < 0 || header > events {
		t.Fatalf("want the status table above the events:\n%s", strings.Join(lines, "\n"))
	}
	for _, g := range []string{"group-0", "group-1", "group-5"} {
		if idx(g+" ") < 0 {
			t.Errorf("no row for %s:\n%s", g, strings.Join(lines, "\n"))
		}
	}
	// Newest first, each cut with "…", at least minEventLines of them.
	shown := lines[events+1:]
	if len(shown) < minEventLines {
		t.Fatalf("%d event lines, want at least %d:\n%s", len(shown), minEventLines, strings.Join(lines, "\n"))
	}
	for i, l := range shown {
		want := fmt.Sprintf("%s  group-1   halt        canary              event %d: ",
			testNow.Add(time.Duration(29-i)*time.Second).Format(time.TimeOnly), 29-i)
		if !strings.HasPrefix(l, want) || !strings.HasSuffix(l, "…") {
			t.Errorf("event line %d: %q, want it to start %q and be cut with …", i, l, want)
		}
	}
	if i := idx("… "); i < 0 || i > events {
		t.Errorf("the status was cut without saying so:\n%s", strings.Join(lines, "\n"))
	}
}

func TestRenderScreenFitsAnySize(t *testing.T) {
	for _, n := range []int{0, 3, 300} {
		s := screenFixture(t, n)
		for _, size := range [][2]int{{80, 24}, {120, 50}, {40, 10}, {20, 4}, {1, 1}, {0, 0}, {300, 200}} {
			w, h := size[0], size[1]
			lines := renderScreen(s, w, h)
			checkScreen(t, lines, max(w, 1), max(h, 1))
			if len(lines) == 0 {
				t.Errorf("%d×%d, %d events: nothing drawn", w, h, n)
			}
		}
	}
	// No status: the error, in one line.
	lines := renderScreen(watchState{Now: testNow, Err: errors.New("nats: timeout\nsecond line")}, 80, 24)
	checkScreen(t, lines, 80, 24)
	if !strings.Contains(strings.Join(lines, "\n"), `cannot read the status: nats: timeout\nsecond line`) {
		t.Errorf("no error shown:\n%s", strings.Join(lines, "\n"))
	}
	if !strings.Contains(strings.Join(lines, "\n"), "(none since watch started)") {
		t.Errorf("no word on the missing events:\n%s", strings.Join(lines, "\n"))
	}
}

func TestEventLinesFit100Columns(t *testing.T) {
	ev := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventHalt, From: rollout.StateActive, To: rollout.StateActive,
		Reason: longReason + "\x1b[31mred\x1b[0m\nnext line \u009b31mRED\u202eXYZ\u007f", At: testNow}
	data, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	lines := eventLines("fleet.events.prod", data, pipeWidth)
	if len(lines) < 2 {
		t.Fatalf("one line for a %d-character reason: %q", len(ev.Reason), lines)
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > pipeWidth {
			t.Errorf("line %d: %d columns (max %d): %q", i, n, pipeWidth, l)
		}
		if strings.ContainsFunc(l, notPrint) {
			t.Errorf("control character in line %q", l)
		}
		if i > 0 && !strings.HasPrefix(l, "    ") {
			t.Errorf("continuation line %q is not indented", l)
		}
	}
	if lines[0] != "2026-11-23T12:00:00Z  prod          halt        active                  canary" {
		t.Errorf("first line %q", lines[0])
	}
	// Nothing of the reason is lost, only re-spaced.
	var words []string
	for _, l := range lines {
		words = append(words, strings.Fields(l)...)
	}
	got := strings.Join(words[4:], " ")
	if want := strings.Join(strings.Fields(cleanLine(ev.Reason)), " "); got != want {
		t.Errorf("reason across lines\n got %q\nwant %q", got, want)
	}
	// A short event is eventLine, one line.
	short := rollout.Event{V: 1, Group: "prod", Kind: rollout.EventAlert, Reason: "not done after 4h", At: testNow}
	data, _ = json.Marshal(short)
	if got, want := eventLines("fleet.events.prod", data, pipeWidth), []string{eventLine("fleet.events.prod", data)}; !slices.Equal(got, want) {
		t.Errorf("short event: %q, want %q", got, want)
	}
}

func TestEventLine(t *testing.T) {
	for _, tc := range []struct {
		name, subject, data, want string
	}{
		{"operator", "fleet.events.prod",
			`{"v":1,"group":"prod","kind":"operator","from":"active","to":"active","reason":"operator reset","at":"2026-11-23T12:00:00Z"}`,
			"2026-11-23T12:00:00Z  prod          operator    active                  operator reset"},
		{"alert without states", "fleet.events.prod",
			`{"v":1,"group":"prod","kind":"alert","reason":"not done after 4h","at":"2026-11-23T12:00:00+01:00"}`,
			"2026-11-23T11:00:00Z  prod          alert       -                       not done after 4h"},
		// Wider than the kind column: the line goes on, shifted.
		{"approval needed", "fleet.events.prod",
			`{"v":1,"group":"prod","kind":"approval_needed","from":"unstarted","to":"unstarted","reason":"awaiting approval to start (fleetctl approve --group prod --reason TEXT)","at":"2026-11-23T12:00:00Z"}`,
			"2026-11-23T12:00:00Z  prod          approval_needed  unstarted               awaiting approval to start (fleetctl approve --group prod --reason TEXT)"},
		{"garbage", "fleet.events.prod", `{"v":1,`, `fleet.events.prod: not an event (unexpected end of JSON input): {"v":1,`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := eventLine(tc.subject, []byte(tc.data)); got != tc.want {
				t.Errorf("eventLine\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestTermSizeOnlyForTerminals(t *testing.T) {
	if _, _, ok := termSize(&bytes.Buffer{}); ok {
		t.Error("a buffer is a terminal")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, _, ok := termSize(w); ok {
		t.Error("a pipe is a terminal")
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if _, _, ok := termSize(null); ok {
		t.Error("/dev/null is a terminal")
	}
}
