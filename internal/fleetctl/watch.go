package fleetctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// WatchOptions are the flags of "fleetctl watch".
type WatchOptions struct {
	*Global
	// Redraw shows a full-screen view: the status on top, the newest
	// events below, redrawn after events and every RedrawInterval, fitted
	// to Size. Set when the output is a terminal; otherwise each event is
	// printed as plain lines of at most 100 columns.
	Redraw bool
	// RedrawInterval defaults to 2s.
	RedrawInterval time.Duration
	// Output is text or json (one WatchLine a line; runWatchJSON).
	Output string
	// Size returns the terminal's columns and rows, asked before every
	// redraw (nil, or a size of 0: 80×24).
	Size func() (width, height int)
}

// Screen and line sizes.
const (
	// defaultWidth and defaultHeight are the size assumed when the
	// terminal does not tell.
	defaultWidth, defaultHeight = 80, 24
	// pipeWidth bounds the lines printed when the output is not a
	// terminal; a longer reason continues on indented lines.
	pipeWidth = 100
	// keptEvents is how many events a screen remembers: more than any
	// terminal shows.
	keptEvents = 200
	// minEventLines is how many event lines a screen keeps free when the
	// status is long (the status gets cut, with a note, instead).
	minEventLines = 5
)

// Terminal control: the alternate screen (the shell's screen comes back
// untouched on exit), cursor hidden while watching, clear and home.
const (
	enterScreen = "\x1b[?1049h\x1b[?25l"
	leaveScreen = "\x1b[?25h\x1b[?1049l"
	clearScreen = "\x1b[H\x1b[2J"
)

func newWatchCmd(g *Global) *cobra.Command {
	o := &WatchOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Follow rollout events live (full-screen status and events on a terminal)",
		Long: `Follow the rollout events on fleet.events.> (transitions, halts, alerts,
frozen/unfrozen, operator actions) until interrupted.

On a terminal, watch is a full-screen view fitted to the window: the status
(mode, version, one row per group with its updated, updating and waiting
agents, notes) on top and the newest events below it, newest first, each
line cut to the window's width. It is redrawn after events and every 2
seconds; Ctrl-C restores the screen.

When the output is a pipe, a file or a terminal with TERM=dumb, each event
is printed as it arrives:
time (UTC), group, kind, from → to, reason; a reason that does not fit 100
columns continues on lines indented by four spaces.

With -o json, one JSON object a line: the status first, then every event and
every change of the status.

Events published while the bus is lost are not received (they are core NATS
messages): watch says when it lost the bus and when it is back, with times,
in every form (a "bus" line piped, a DISCONNECTED title on a terminal,
"disconnected"/"reconnected" objects in JSON); fleetctl history shows what
was missed.`,
		Example: `  fleetctl watch
  fleetctl watch --app db
  fleetctl watch | grep -E ' (halt|alert) '
  fleetctl watch -o json | jq -c 'select(.type == "event") | .event'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(o.Output, writeFormats...); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			// A dumb terminal (an editor's shell buffer) cannot redraw.
			if _, _, ok := termSize(out); ok && os.Getenv("TERM") != "dumb" {
				o.Redraw = true
				o.Size = func() (int, int) {
					w, h, _ := termSize(out)
					return w, h
				}
			}
			return RunWatch(cmd.Context(), o)
		},
	}
	formatFlag(cmd, &o.Output, writeFormats...)
	appFlag(cmd, g)
	return cmd
}

// termSize returns the size of the terminal w writes to; ok is false when w
// is not a terminal (a pipe, a file, /dev/null).
func termSize(w io.Writer) (width, height int, ok bool) {
	f, isFile := w.(*os.File)
	if !isFile {
		return 0, 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0, false
	}
	return int(ws.Col), int(ws.Row), true
}

// connChange is the connection to the bus lost or back: events published
// meanwhile are not received (core NATS), so watch says so, with times.
type connChange struct {
	At   time.Time
	Lost bool
	// Err is why it was lost (may be nil).
	Err error
	// Server is the server reconnected to.
	Server string
}

// watchConn makes the connection report its losses and reconnects on the
// returned channel (buffered; a change that does not fit is dropped, the
// next one still says where the connection stands).
func (o *WatchOptions) watchConn() <-chan connChange {
	ch := make(chan connChange, 64)
	send := func(c connChange) {
		select {
		case ch <- c:
		default:
		}
	}
	o.connExtra = append(o.connExtra,
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { send(connChange{At: o.Now(), Lost: true, Err: err}) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { send(connChange{At: o.Now(), Server: nc.ConnectedUrlRedacted()}) }))
	return ch
}

// connTracker turns connection changes into lines for people: it knows
// since when the connection is lost.
type connTracker struct {
	since time.Time // zero: connected
}

// line is c as a line's kind-less text, e.g. "disconnected from the bus
// at 12:00:01 UTC: …".
func (t *connTracker) line(c connChange) (move, reason string) {
	if c.Lost {
		if t.since.IsZero() {
			t.since = c.At
		}
		why := ""
		if c.Err != nil {
			why = " (" + c.Err.Error() + ")"
		}
		return "disconnected", fmt.Sprintf("lost the bus%s: no event is received until it is back; reconnecting", why)
	}
	out := "back on the bus"
	if !t.since.IsZero() {
		lost := c.At.Sub(t.since)
		out = fmt.Sprintf("back on the bus after %s (lost at %s UTC): events of that time were not received; fleetctl history --since %dm shows them",
			lost.Round(time.Second), t.since.UTC().Format(time.TimeOnly), int(lost.Minutes())+2)
	}
	t.since = time.Time{}
	return "reconnected", out
}

// connLines renders a connection change as an event line would be
// (pipeLayout or screenLayout), kind "bus".
func connLines(t *connTracker, c connChange, layout eventLayout, width int) []string {
	move, reason := t.line(c)
	prefix := fmt.Sprintf("%s  %-*s  %-10s  %-*s  ", c.At.UTC().Format(layout.time), layout.group, "-", "bus", layout.move, move)
	if width <= 0 {
		return []string{cleanLine(prefix + reason)}
	}
	return wrapLine(cleanLine(prefix), cleanLine(reason), width)
}

// subscribeEvents connects and subscribes to every rollout event, both
// forms of watch: the events arrive on msgs from its return on; closeFn
// unsubscribes and disconnects.
func (o *WatchOptions) subscribeEvents(ctx context.Context) (f appFleet, msgs chan *nats.Msg, closeFn func(), err error) {
	f, done, err := o.openApp(ctx)
	if err != nil {
		return appFleet{}, nil, nil, err
	}
	nc := f.JS.Conn()
	msgs = make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(kv.EventsPrefix+">", msgs)
	if err != nil {
		done()
		return appFleet{}, nil, nil, fmt.Errorf("subscribe %s>: %w", kv.EventsPrefix, err)
	}
	closeFn = func() { _ = sub.Unsubscribe(); done() }
	fctx, cancel := o.withTimeout(ctx)
	err = nc.FlushWithContext(fctx) // the subscription is in place from here on
	cancel()
	if err != nil {
		closeFn()
		return appFleet{}, nil, nil, fmt.Errorf("subscribe %s>: %w", kv.EventsPrefix, err)
	}
	fmt.Fprintf(o.ErrOut, "Watching %s>%s (Ctrl-C to stop)\n", kv.EventsPrefix, f.appNote())
	return f, msgs, closeFn, nil
}

// RunWatch is "fleetctl watch". It returns nil when ctx is cancelled.
func RunWatch(ctx context.Context, o *WatchOptions) error {
	conn := o.watchConn()
	if o.Output == "json" {
		return runWatchJSON(ctx, o, conn)
	}
	f, msgs, closeFn, err := o.subscribeEvents(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	if !o.Redraw {
		var tracker connTracker
		for {
			select {
			case <-ctx.Done():
				return nil
			case c := <-conn:
				for _, l := range connLines(&tracker, c, pipeLayout, pipeWidth) {
					if _, err := fmt.Fprintln(o.Out, l); err != nil {
						return err
					}
				}
			case m := <-msgs:
				if !f.mine(m.Data) {
					continue
				}
				for _, l := range eventLines(m.Subject, m.Data, pipeWidth) {
					if _, err := fmt.Fprintln(o.Out, l); err != nil {
						return err
					}
				}
			}
		}
	}
	return o.watchScreen(ctx, f, msgs, conn)
}

// watchScreen is the full-screen view of RunWatch.
func (o *WatchOptions) watchScreen(ctx context.Context, f appFleet, msgs <-chan *nats.Msg, conn <-chan connChange) error {
	interval := o.RedrawInterval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	resized := make(chan os.Signal, 1)
	signal.Notify(resized, syscall.SIGWINCH)
	defer signal.Stop(resized)

	// The screen is terminal control by design: it goes around the
	// escaping writer fleetctl puts in front of the terminal (every line
	// on it is escaped by cleanLine).
	out := escape.Unwrap(o.Out)
	if _, err := io.WriteString(out, enterScreen); err != nil {
		return err
	}
	defer func() { _, _ = io.WriteString(out, leaveScreen) }()

	var s watchState
	var tracker connTracker
	status := func() {
		s.Now = o.Now()
		rctx, cancel := o.withTimeout(ctx)
		rep, err := readStatus(rctx, f, io.Discard, s.Now)
		cancel()
		s.Status, s.Err = &rep, err
		if err != nil {
			s.Status = nil
		}
	}
	draw := func() error {
		width, height := 0, 0
		if o.Size != nil {
			width, height = o.Size()
		}
		if width <= 0 || height <= 0 {
			width, height = defaultWidth, defaultHeight
		}
		var screen bytes.Buffer
		screen.WriteString(clearScreen)
		screen.WriteString(strings.Join(renderScreen(s, width, height), "\r\n"))
		_, err := out.Write(screen.Bytes())
		return err
	}
	status()
	if err := draw(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			if f.mine(m.Data) {
				s.add(screenEventLine(m.Subject, m.Data))
			}
			for more := true; more; { // take a burst in one redraw
				select {
				case m := <-msgs:
					if f.mine(m.Data) {
						s.add(screenEventLine(m.Subject, m.Data))
					}
				default:
					more = false
				}
			}
			status()
		case c := <-conn:
			for _, l := range connLines(&tracker, c, screenLayout, 0) {
				s.add(l)
			}
			s.Disconnected = tracker.since
			if !c.Lost {
				status()
			}
		case <-tick.C:
			if s.Disconnected.IsZero() { // a read would only time out
				status()
			}
		case <-resized:
		}
		if err := draw(); err != nil {
			return err
		}
	}
}

// watchState is what the watch screen shows.
type watchState struct {
	// Now is when Status was read.
	Now time.Time
	// Status is nil when it could not be read; Err says why.
	Status *StatusReport
	Err    error
	// Events are the event lines received, oldest first.
	Events []string
	// Disconnected is since when the bus is lost (zero: connected).
	Disconnected time.Time
}

func (s *watchState) add(line string) {
	s.Events = append(s.Events, line)
	if len(s.Events) > keptEvents {
		s.Events = s.Events[len(s.Events)-keptEvents:]
	}
}

// renderScreen lays s out on a width×height screen: a title line, the
// status, and the newest events below it, newest first. It returns at most
// height lines of at most width columns each: longer lines are cut with
// "…"; a status too long to leave minEventLines for events is cut with a
// note.
func renderScreen(s watchState, width, height int) []string {
	width, height = max(width, 1), max(height, 1)
	title := fmt.Sprintf("fleetctl watch   %s UTC   Ctrl-C to stop", s.Now.UTC().Format(time.TimeOnly))
	if !s.Disconnected.IsZero() {
		title = fmt.Sprintf("fleetctl watch   DISCONNECTED from the bus since %s UTC (%s): reconnecting; events are not received",
			s.Disconnected.UTC().Format(time.TimeOnly), s.Now.Sub(s.Disconnected).Round(time.Second))
	}
	status := statusLines(s)
	room := height - 3 // title, blank line, events heading
	keep := min(len(status), room-min(max(len(s.Events), 1), minEventLines))
	if keep < len(status) {
		keep = max(keep-1, 0)
		cut := len(status) - keep
		status = append(status[:keep:keep], fmt.Sprintf("… %d more lines: fleetctl status", cut))
	}
	lines := append([]string{title}, status...)
	lines = append(lines, "", fmt.Sprintf("Events on %s>, newest first:", kv.EventsPrefix))
	if len(s.Events) == 0 {
		lines = append(lines, "(none since watch started)")
	}
	for i := len(s.Events) - 1; i >= 0 && len(lines) < height; i-- {
		lines = append(lines, s.Events[i])
	}
	if len(lines) > height {
		lines = lines[:height]
	}
	for i, l := range lines {
		lines[i] = fitWidth(l, width)
	}
	return lines
}

// statusLines is the status part of the watch screen: the plan in one line,
// one row per group, and one line per note and problem (not wrapped: the
// screen cuts them); without a plan, agents per group and version.
func statusLines(s watchState) []string {
	if s.Status == nil {
		return []string{cleanLine(fmt.Sprintf("cannot read the status: %v", s.Err))}
	}
	rep := *s.Status
	var out []string
	if p := rep.Plan; p != nil {
		h := view.Header(rep)
		out = append(out, fmt.Sprintf("Version: %s   Mode: %s", h.Version, h.Mode))
		rows, notes := rolloutRows(rep, s.Now)
		out = append(out, rows...)
		out = append(out, notes...)
	} else {
		var buf bytes.Buffer
		_ = writeVersionTable(&buf, rep, s.Now)
		out = append(out, strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")...)
	}
	for _, p := range rep.Problems {
		out = append(out, fmt.Sprintf("warning: skipped %s: %s", p.Key, p.Error))
	}
	for i, l := range out {
		out[i] = cleanLine(l)
	}
	return out
}

// fitWidth cuts s to width columns, ending in "…" when cut. Every rune
// counts as one column (the table characters, "→" and "…", do).
func fitWidth(s string, width int) string {
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	if width <= 1 {
		return string([]rune(s)[:width])
	}
	return shorten(s, width)
}

// cleanLine is s on one line of the screen or of a pipe (escape.Text): a
// reason or a name read from the bus must not move the cursor, recolour
// the terminal or reorder what follows (C1 and bidirectional controls
// included), and must stay on its line: its controls, tabs and newlines
// show as escapes (\x1b, \t, \n, \u202e), never obeyed.
func cleanLine(s string) string { return escape.Text(s) }

// eventLayout is how an event's fixed columns are laid out: the time
// format and the widths the group and the move are padded to.
type eventLayout struct {
	time        string
	group, move int
}

var (
	// pipeLayout is the layout of printed lines: a date, room for the
	// longest moves.
	pipeLayout = eventLayout{time: time.RFC3339, group: 12, move: 22}
	// screenLayout is narrower, to leave the reason some of 80 columns:
	// the screen shows events since it started, so the time of day is
	// enough.
	screenLayout = eventLayout{time: time.TimeOnly, group: 8, move: 18}
)

// eventLines renders one event as it is printed to a pipe or a file:
// eventLine, with a reason that does not fit width columns continued on
// lines indented by four spaces, broken at spaces.
func eventLines(subject string, data []byte, width int) []string {
	prefix, reason := eventParts(subject, data, pipeLayout)
	return wrapLine(prefix, reason, width)
}

// wrapLine is prefix and reason on one line of at most width columns, or
// the reason continued on lines indented by four spaces, broken at spaces.
func wrapLine(prefix, reason string, width int) []string {
	line := prefix + reason
	if utf8.RuneCountInString(line) <= width || reason == "" {
		return []string{line}
	}
	const indent = "    "
	var lines []string
	// cur is the line being filled; bare while it holds only its lead
	// (the columns, or the indent), which the first word follows after two
	// spaces (as in eventLine) or none.
	cur, bare := strings.TrimSuffix(prefix, "  "), true
	for _, word := range strings.Fields(reason) {
		sep := " "
		switch {
		case bare && cur != "" && cur != indent:
			sep = "  "
		case bare:
			sep = ""
		}
		empty := bare && (cur == "" || cur == indent) // a word too long for any line is cut below
		if !empty && utf8.RuneCountInString(cur)+len(sep)+utf8.RuneCountInString(word) > width {
			lines = append(lines, cur)
			cur, sep = indent, ""
		}
		cur, bare = cur+sep+word, false
	}
	lines = append(lines, cur)
	for i, l := range lines {
		lines[i] = fitWidth(l, width) // only a word longer than a line is cut
	}
	return lines
}

// eventLine renders one event on one line: time (UTC), group, kind, from →
// to, reason.
func eventLine(subject string, data []byte) string {
	prefix, reason := eventParts(subject, data, pipeLayout)
	return prefix + reason
}

// screenEventLine is eventLine for the watch screen, in screenLayout.
func screenEventLine(subject string, data []byte) string {
	prefix, reason := eventParts(subject, data, screenLayout)
	return prefix + reason
}

// eventParts renders one event as its fixed columns (time, group, kind,
// from → to, padded as layout says) and its reason, each cleaned of control
// characters. Data that is not an event is all reason.
func eventParts(subject string, data []byte, layout eventLayout) (prefix, reason string) {
	var ev rollout.Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return "", cleanLine(fmt.Sprintf("%s: not an event (%v): %s", subject, err, shorten(strings.TrimSpace(string(data)), 80)))
	}
	if ev.Group == "" {
		ev.Group = strings.TrimPrefix(subject, kv.EventsPrefix)
	}
	move := view.EventMove(ev, false)
	if move == "" {
		move = "-"
	}
	prefix = fmt.Sprintf("%s  %-*s  %-10s  %-*s  ", ev.At.UTC().Format(layout.time), layout.group, ev.Group, ev.Kind, layout.move, move)
	return cleanLine(prefix), cleanLine(ev.Reason)
}
