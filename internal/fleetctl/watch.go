package fleetctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// WatchOptions are the flags of "fleetctl watch".
type WatchOptions struct {
	*Global
	// Redraw clears the screen and draws the status after every event and
	// every RedrawInterval, with the latest events below it. Set when the
	// output is a terminal; otherwise only event lines are printed.
	Redraw bool
	// RedrawInterval defaults to 2s.
	RedrawInterval time.Duration
	// Output is text or json (one WatchLine a line; runWatchJSON).
	Output string
}

// recentEvents is how many event lines a redrawn screen keeps.
const recentEvents = 10

func newWatchCmd(g *Global) *cobra.Command {
	o := &WatchOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Follow rollout events live (and redraw the status on a terminal)",
		Long: `Follow the rollout events on fleet.events.> (transitions, halts, alerts,
frozen/unfrozen, operator actions) until interrupted. Each event is one line:
time (UTC), group, kind, from → to, reason. On a terminal the status is
redrawn after every event and every 2 seconds, with the latest events below
it; when the output is a pipe or a file, only the event lines are printed.
With -o json, one JSON object a line: the status first, then every event and
every change of the status.`,
		Example: `  fleetctl watch
  fleetctl watch | grep -E ' (halt|alert) '
  fleetctl watch -o json | jq -c 'select(.type == "event") | .event'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(o.Output, writeFormats...); err != nil {
				return err
			}
			o.Redraw = isTerminal(cmd.OutOrStdout())
			return RunWatch(cmd.Context(), o)
		},
	}
	formatFlag(cmd, &o.Output, writeFormats...)
	return cmd
}

// isTerminal reports whether w is a character device (a terminal; also
// /dev/null, where redrawing costs nothing).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// RunWatch is "fleetctl watch". It returns nil when ctx is cancelled.
func RunWatch(ctx context.Context, o *WatchOptions) error {
	if o.Output == "json" {
		return runWatchJSON(ctx, o)
	}
	f, closeFn, err := o.open(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	nc := f.JS.Conn()
	msgs := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(kv.EventsPrefix+">", msgs)
	if err != nil {
		return fmt.Errorf("subscribe %s>: %w", kv.EventsPrefix, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	fctx, cancel := o.withTimeout(ctx)
	err = nc.FlushWithContext(fctx) // the subscription is in place from here on
	cancel()
	if err != nil {
		return fmt.Errorf("subscribe %s>: %w", kv.EventsPrefix, err)
	}
	fmt.Fprintf(o.ErrOut, "Watching %s> (Ctrl-C to stop)\n", kv.EventsPrefix)

	var tick <-chan time.Time
	var recent []string
	redraw := func() {}
	if o.Redraw {
		interval := o.RedrawInterval
		if interval <= 0 {
			interval = 2 * time.Second
		}
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
		redraw = func() {
			var screen bytes.Buffer
			screen.WriteString("\x1b[H\x1b[2J") // home, clear
			now := o.Now()
			rctx, cancel := o.withTimeout(ctx)
			rep, err := readStatus(rctx, f, io.Discard, now)
			cancel()
			if err != nil {
				fmt.Fprintf(&screen, "cannot read the status: %v\n", err)
			} else {
				_ = writeStatusTable(&screen, rep, now)
				warnProblems(&screen, rep.Problems)
			}
			fmt.Fprintf(&screen, "\nEvents (%s, latest last), updated %s:\n", kv.EventsPrefix+">", now.UTC().Format(time.TimeOnly))
			for _, l := range recent {
				fmt.Fprintln(&screen, l)
			}
			_, _ = o.Out.Write(screen.Bytes())
		}
		redraw()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			line := eventLine(m.Subject, m.Data)
			if !o.Redraw {
				if _, err := fmt.Fprintln(o.Out, line); err != nil {
					return err
				}
				continue
			}
			recent = append(recent, line)
			if len(recent) > recentEvents {
				recent = recent[len(recent)-recentEvents:]
			}
			redraw()
		case <-tick:
			redraw()
		}
	}
}

// eventLine renders one event: time, group, kind, from → to, reason.
func eventLine(subject string, data []byte) string {
	var ev rollout.Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return fmt.Sprintf("%s: not an event (%v): %s", subject, err, shorten(strings.TrimSpace(string(data)), 80))
	}
	if ev.Group == "" {
		ev.Group = strings.TrimPrefix(subject, kv.EventsPrefix)
	}
	move := "-"
	switch {
	case ev.From != "" && ev.To != "" && ev.From != ev.To:
		move = string(ev.From) + " → " + string(ev.To)
	case ev.To != "":
		move = string(ev.To)
	case ev.From != "":
		move = string(ev.From)
	}
	return fmt.Sprintf("%s  %-12s  %-10s  %-22s  %s", ev.At.UTC().Format(time.RFC3339), ev.Group, ev.Kind, move, ev.Reason)
}
