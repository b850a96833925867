package agentd

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/fleetwave/fleetwave/pkg/httpfind"
)

// Fallback defaults. DefaultFallbackAfter counts from when the bus is
// found lost (within a minute of a cut, docs/agent.md), so it only has to
// ride out a bus restart, not make up for slow detection.
const (
	DefaultFallbackAfter = 2 * time.Minute
	DefaultFindInterval  = time.Minute
)

// fallbackLoop watches the bus (a.bus). Once it has been lost for
// FallbackAfter, the agent asks the controllers' find endpoints (update.yaml
// find_urls) every FindInterval (± 20%) and hands the answers to the update
// loop; when the bus is back, it stops asking and the plan rules again.
func (a *Agent) fallbackLoop(ctx context.Context, answers chan<- decision) error {
	urls := a.findURLs()
	if len(urls) == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	after, every := a.o.FallbackAfter, a.o.FindInterval
	client := &httpfind.Client{URLs: urls, HTTP: &http.Client{Timeout: 30 * time.Second}}
	check := max(min(time.Second, after/4), 10*time.Millisecond)
	timer := a.o.Clock.NewTimer(check)
	defer timer.Stop()
	var nextFind time.Time
	failing := "" // what the last failed ask logged; "" after an answer
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C():
		}
		timer.Reset(check)
		now := a.o.Clock.Now()
		lost, since := a.bus.state()
		if !lost {
			if a.fallback.Swap(false) {
				a.o.Log.Info("the bus is back; following the plan on it again")
			}
			// The next outage asks FallbackAfter after it starts, not
			// FindInterval after this one's last ask.
			nextFind = time.Time{}
			continue
		}
		if due := later(since.Add(after), nextFind); now.Before(due) {
			// Wake when due, not at the next check: the first ask comes
			// FallbackAfter after the bus was found lost.
			timer.Reset(min(check, due.Sub(now)))
			continue
		}
		if !a.fallback.Swap(true) {
			a.o.Log.Warn("the bus has been lost too long; asking the find endpoint instead",
				slog.Duration("lost_for", now.Sub(since).Round(time.Second)), slog.Any("urls", urls))
		}
		nextFind = now.Add(every + time.Duration((rand.Float64()*0.4-0.2)*float64(every)))
		ans, err := client.Find(ctx, a.id, a.Group())
		switch {
		case errors.Is(err, httpfind.ErrUnknownGroup):
			// Not an outage: the controllers say this host's group is not
			// in the config, so it is never updated until someone fixes one
			// or the other. Said once per distinct answer, as an error.
			if msg := err.Error(); failing != msg {
				a.o.Log.Error("the controllers do not know this agent's group: it is never updated until update.yaml's group is fixed or the group is added to the config; keeping what runs",
					slog.String("group", a.Group()), slog.Any("err", err))
				failing = msg
			}
			continue
		case err != nil:
			if failing != "unreachable" {
				a.o.Log.Warn("find endpoint unreachable too; keeping what runs", slog.Any("err", err))
				failing = "unreachable"
			}
			continue
		}
		failing = ""
		d := decision{version: ans.Version, update: ans.Update, jitter: ans.JitterSeconds, source: "find"}
		select {
		case answers <- d:
		default: // the update loop is busy installing; the next answer will do
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
