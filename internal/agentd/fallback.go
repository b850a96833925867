package agentd

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/pkg/httpfind"
)

// Fallback defaults.
const (
	DefaultFallbackAfter = 5 * time.Minute
	DefaultFindInterval  = time.Minute
)

// fallbackLoop watches the bus connection. Once it has been down for
// FallbackAfter, the agent asks the controllers' find endpoints (update.yaml
// find_urls) every FindInterval (± 20%) and hands the answers to the update
// loop; when the bus is back, it stops asking and the plan rules again.
func (a *Agent) fallbackLoop(ctx context.Context, nc *nats.Conn, answers chan<- decision) error {
	a.mu.Lock()
	urls := append([]string(nil), a.update.Spec.FindURLs...)
	a.mu.Unlock()
	if len(urls) == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	after, every := a.o.FallbackAfter, a.o.FindInterval
	if after <= 0 {
		after = DefaultFallbackAfter
	}
	if every <= 0 {
		every = DefaultFindInterval
	}
	client := &httpfind.Client{URLs: urls, HTTP: &http.Client{Timeout: 30 * time.Second}}
	check := max(min(time.Second, after/4), 10*time.Millisecond)
	timer := a.o.Clock.NewTimer(check)
	defer timer.Stop()
	var downSince, nextFind time.Time
	failing := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C():
		}
		timer.Reset(check)
		now := a.o.Clock.Now()
		if nc.IsConnected() {
			if a.fallback.Swap(false) {
				a.o.Log.Info("the bus is back; following the plan on it again")
			}
			downSince = time.Time{}
			continue
		}
		if downSince.IsZero() {
			downSince = now
		}
		if now.Sub(downSince) < after || now.Before(nextFind) {
			continue
		}
		if !a.fallback.Swap(true) {
			a.o.Log.Warn("the bus has been unreachable too long; asking the find endpoint instead",
				slog.Duration("down_for", now.Sub(downSince).Round(time.Second)), slog.Any("urls", urls))
		}
		nextFind = now.Add(every + time.Duration((rand.Float64()*0.4-0.2)*float64(every)))
		ans, err := client.Find(ctx, a.id, a.Group())
		if err != nil {
			if !failing {
				a.o.Log.Warn("find endpoint unreachable too; keeping what runs", slog.Any("err", err))
				failing = true
			}
			continue
		}
		failing = false
		d := decision{version: ans.Version, update: ans.Update, jitter: ans.JitterSeconds, source: "find"}
		select {
		case answers <- d:
		default: // the update loop is busy installing; the next answer will do
		}
	}
}
