package fleetctl

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// WatchLine is one line of "fleetctl watch -o json": an event as it is
// published, or the status whenever it changes. Stable: fields are only
// ever added.
type WatchLine struct {
	// Type is "event", "status", "invalid" (a message on the events
	// subject that is not an event), "error" (the status could not be
	// read; the watch goes on), "disconnected" or "reconnected" (the
	// connection to the bus; Error says why it was lost).
	Type    string         `json:"type"`
	Subject string         `json:"subject,omitempty"`
	Event   *rollout.Event `json:"event,omitempty"`
	// Status is what "fleetctl status -o json" prints.
	Status *StatusReport `json:"status,omitempty"`
	Error  string        `json:"error,omitempty"`
	// Data is an invalid message's body.
	Data string `json:"data,omitempty"`
	// At is when the connection to the bus was lost ("disconnected") or
	// came back ("reconnected"); Seconds, on "reconnected", is how long
	// it was lost: events published meanwhile were not received.
	At      *time.Time `json:"at,omitempty"`
	Seconds *float64   `json:"seconds,omitempty"`
	// Server is the server reconnected to.
	Server string `json:"server,omitempty"`
}

// runWatchJSON is "fleetctl watch -o json": one JSON object a line, the
// status first, then every event and every change of the status (read
// after each event and every RedrawInterval), until ctx is cancelled.
func runWatchJSON(ctx context.Context, o *WatchOptions, conn <-chan connChange) error {
	f, msgs, closeFn, err := o.subscribeEvents(ctx)
	if err != nil {
		return err
	}
	defer closeFn()

	// One object a line: no indent; runes a terminal acts on as \u
	// escapes (writeJSON).
	enc := json.NewEncoder(escape.NewJSONWriter(o.Out))
	var last []byte
	status := func() error {
		rctx, cancel := o.withTimeout(ctx)
		rep, err := readStatus(rctx, f, nil, o.Now())
		cancel()
		line := WatchLine{Type: "status", Status: &rep}
		if err != nil {
			line = WatchLine{Type: "error", Error: "cannot read the status: " + err.Error()}
		}
		key, _ := json.Marshal(statusKey(line))
		if bytes.Equal(key, last) {
			return nil
		}
		last = key
		return enc.Encode(line)
	}
	interval := o.RedrawInterval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	if err := status(); err != nil {
		return err
	}
	var lostAt time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case c := <-conn:
			at := c.At.UTC()
			line := WatchLine{Type: "reconnected", At: &at, Server: c.Server}
			if c.Lost {
				line = WatchLine{Type: "disconnected", At: &at}
				if c.Err != nil {
					line.Error = c.Err.Error()
				}
				if lostAt.IsZero() {
					lostAt = c.At
				}
			} else if !lostAt.IsZero() {
				secs := c.At.Sub(lostAt).Seconds()
				line.Seconds, lostAt = &secs, time.Time{}
			}
			if err := enc.Encode(line); err != nil {
				return err
			}
			if !c.Lost {
				if err := status(); err != nil {
					return err
				}
			}
		case m := <-msgs:
			if !f.mine(m.Data) {
				continue
			}
			if err := enc.Encode(eventJSON(m.Subject, m.Data)); err != nil {
				return err
			}
			if err := status(); err != nil {
				return err
			}
		case <-t.C:
			if !lostAt.IsZero() {
				continue // a read would only time out
			}
			if err := status(); err != nil {
				return err
			}
		}
	}
}

// statusKey is line without what changes on every controller pass but is
// no change of the status: when each group's counts were published.
func statusKey(line WatchLine) WatchLine {
	if line.Status == nil {
		return line
	}
	rep := *line.Status
	rep.Groups = append([]GroupReport(nil), rep.Groups...)
	for i := range rep.Groups {
		rep.Groups[i].At = time.Time{}
	}
	line.Status = &rep
	return line
}

// eventJSON is one message on the events subject as a WatchLine.
func eventJSON(subject string, data []byte) WatchLine {
	var ev rollout.Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return WatchLine{Type: "invalid", Subject: subject, Error: "not an event: " + err.Error(),
			Data: shorten(strings.TrimSpace(string(data)), 200)}
	}
	if ev.Group == "" {
		ev.Group = strings.TrimPrefix(subject, kv.EventsPrefix)
	}
	return WatchLine{Type: "event", Subject: subject, Event: &ev}
}
