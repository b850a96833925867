package agentd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"log/slog"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/test/releases"
)

// partitioned is an agent that reaches the bus through a natstest.Proxy, with a
// find endpoint that records when it is asked.
type partitioned struct {
	t       *testing.T
	proxy   *natstest.Proxy
	fleet   *kv.Fleet
	logs    *natstest.Buffer
	metrics string

	mu    sync.Mutex
	finds []time.Time
}

func startPartitioned(t *testing.T, o agentd.Options) *partitioned {
	t.Helper()
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	fleet, err := kv.Ensure(ctx, srv.JetStream("setup"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	p := &partitioned{t: t, proxy: natstest.NewProxy(t, strings.TrimPrefix(srv.URL(), "nats://")), fleet: fleet, logs: &natstest.Buffer{}}
	find := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.finds = append(p.finds, time.Now())
		p.mu.Unlock()
		http.Error(w, "no controller on the bus", http.StatusServiceUnavailable)
	}))
	t.Cleanup(find.Close)
	rel := httptest.NewServer(releases.NewServer(nil)) // never asked: nothing is to be installed
	t.Cleanup(rel.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.metrics = "http://" + ln.Addr().String() + "/metrics"

	root := t.TempDir()
	o.Root, o.Group, o.NATSURL = root, "blue", p.proxy.URL()
	o.FindURLs = []string{find.URL + httpfind.PathFind}
	o.MetricsListener = ln
	o.Log = slog.New(slog.NewTextHandler(io.MultiWriter(p.logs, logWriter{t}), nil))
	o.App = agentd.AppOptions{URLTemplate: releases.URLTemplate(rel.URL), BinDir: filepath.Join(root, "bin"), Process: "app"}
	a, err := agentd.New(o)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("agent ended with %v", err)
		}
	})
	return p
}

// logWriter copies the agent's log to the test log with -v.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	if testing.Verbose() {
		w.t.Log(strings.TrimSpace(string(b)))
	}
	return len(b), nil
}

// gauge scrapes one of the agent's metrics.
func (p *partitioned) gauge(name string) (float64, error) {
	s, err := scrapeAgent(p.metrics)
	if err != nil {
		return 0, err
	}
	v, ok := s[name]
	if !ok {
		return 0, fmt.Errorf("no %s in /metrics", name)
	}
	return v, nil
}

// waitGauge waits until the agent's metric name is want.
func (p *partitioned) waitGauge(name string, want float64, within time.Duration) {
	p.t.Helper()
	natstest.Eventually(p.t, within, func() error {
		v, err := p.gauge(name)
		if err != nil {
			return err
		}
		if v != want {
			return fmt.Errorf("%s = %v, want %v\nlog:\n%s", name, v, want, p.logs.String())
		}
		return nil
	})
}

// seq is the sequence number of the agent's last heartbeat in the stream.
func (p *partitioned) seq() (uint64, error) {
	msgs, err := p.fleet.LastHeartbeats(context.Background(), "blue")
	if err != nil {
		return 0, err
	}
	if len(msgs) != 1 {
		return 0, fmt.Errorf("%d heartbeats in the stream, want 1", len(msgs))
	}
	hb, err := heartbeat.DecodeFrom(msgs[0].Subject, msgs[0].Data)
	if err != nil {
		return 0, err
	}
	return hb.Seq, nil
}

// waitBeatAfter waits for a heartbeat with a sequence number above seq.
func (p *partitioned) waitBeatAfter(seq uint64, within time.Duration) uint64 {
	p.t.Helper()
	var got uint64
	natstest.Eventually(p.t, within, func() error {
		s, err := p.seq()
		if err != nil {
			return err
		}
		if s <= seq {
			return fmt.Errorf("last heartbeat seq %d, waiting for one after %d", s, seq)
		}
		got = s
		return nil
	})
	return got
}

var logTime = regexp.MustCompile(`time=(\S+) level=\S+ msg="bus lost" cause="([^"]*)"`)

// lostLine is the time and cause of the agent's last "bus lost" line.
func (p *partitioned) lostLine() (time.Time, string) {
	p.t.Helper()
	m := logTime.FindAllStringSubmatch(p.logs.String(), -1)
	if len(m) == 0 {
		p.t.Fatalf("no \"bus lost\" line in the log:\n%s", p.logs.String())
	}
	last := m[len(m)-1]
	at, err := time.Parse(time.RFC3339Nano, last[1])
	if err != nil {
		p.t.Fatal(err)
	}
	return at, last[2]
}

func (p *partitioned) firstFind() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.finds) == 0 {
		return time.Time{}, false
	}
	return p.finds[0], true
}

// logSlack is how much earlier than its "bus lost" log line the agent may
// have recorded the loss (the fallback counts from the record): the line is
// written just after, with millisecond precision, and a busy machine can
// delay it by a few milliseconds more (CI saw 13 ms).
const logSlack = 100 * time.Millisecond

// TestPartitionDetected (issue 15 point 5): an agent cut off from the bus
// notices within a bound set by its options, not the NATS client's 4-6
// minute ping timeout; its find fallback starts --fallback-after later;
// once the path heals it is back on the bus and heartbeats again. The
// metrics fleetwave_agent_bus_connected and fleetwave_agent_fallback
// follow.
func TestPartitionDetected(t *testing.T) {
	const fallbackAfter = time.Second
	tests := []struct {
		name string
		o    agentd.Options
		cut  func(*natstest.Proxy)
		// bound is how soon after the cut the loss must be noticed.
		bound time.Duration
		cause string
	}{
		{
			// Beats every 100ms, acks due in 300ms: lost by about
			// 100ms + 2 × 300ms + the 500ms retry backoff. The client's
			// pings (an hour apart) cannot be what notices.
			name: "silent drop, noticed by unacked heartbeats",
			o: agentd.Options{Interval: 100 * time.Millisecond, AckTimeout: 300 * time.Millisecond,
				PingInterval: time.Hour},
			cut: (*natstest.Proxy).Silence, bound: 4 * time.Second, cause: "no heartbeat ack for 2 tries",
		},
		{
			// One beat at start and none after: only the client's pings
			// (every 100ms, 2 outstanding at most) can notice.
			name: "silent drop, noticed by the client's pings",
			o:    agentd.Options{Interval: time.Hour, PingInterval: 100 * time.Millisecond, MaxPingsOut: 2},
			cut:  (*natstest.Proxy).Silence, bound: 4 * time.Second, cause: "connection down",
		},
		{
			name: "connection closed",
			o:    agentd.Options{Interval: time.Hour},
			cut:  (*natstest.Proxy).Cut, bound: 4 * time.Second, cause: "connection down",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := tc.o
			o.FallbackAfter, o.FindInterval = fallbackAfter, time.Hour
			p := startPartitioned(t, o)
			p.waitGauge("fleetwave_agent_bus_connected", 1, 20*time.Second)
			before := p.waitBeatAfter(0, 20*time.Second)

			cut := time.Now()
			tc.cut(p.proxy)
			p.waitGauge("fleetwave_agent_bus_connected", 0, 30*time.Second)
			if took := time.Since(cut); took > tc.bound {
				t.Errorf("the loss was noticed %v after the cut, want within %v", took, tc.bound)
			}
			lostAt, cause := p.lostLine()
			if !strings.Contains(cause, tc.cause) {
				t.Errorf("bus lost because %q, want %q", cause, tc.cause)
			}
			if _, asked := p.firstFind(); asked {
				t.Errorf("find asked as soon as the bus was lost, before --fallback-after")
			}

			// The fallback: first ask --fallback-after after the loss.
			natstest.Eventually(t, 20*time.Second, func() error {
				if _, ok := p.firstFind(); !ok {
					return errors.New("find not asked yet")
				}
				return nil
			})
			first, _ := p.firstFind()
			if after := first.Sub(lostAt); after < fallbackAfter-logSlack || after > fallbackAfter+time.Second {
				t.Errorf("first find %v after the loss, want %v (+ up to 1s)", after, fallbackAfter)
			}
			p.waitGauge("fleetwave_agent_fallback", 1, 10*time.Second)

			// Healed: back on the bus, heartbeats again, fallback over.
			p.proxy.Heal()
			p.waitGauge("fleetwave_agent_bus_connected", 1, 30*time.Second)
			p.waitGauge("fleetwave_agent_fallback", 0, 10*time.Second)
			p.waitBeatAfter(before, 20*time.Second)
			if !strings.Contains(p.logs.String(), `msg="bus back"`) {
				t.Errorf("no \"bus back\" line:\n%s", p.logs.String())
			}
		})
	}
}

// TestAgentdRunFallbackFlagsChecked: a --fallback-after or --find-interval
// that is not positive is a usage error before anything is written.
func TestAgentdRunFallbackFlagsChecked(t *testing.T) {
	bin := buildAgentd(t)
	for _, args := range [][]string{
		{"--fallback-after", "0s"},
		{"--fallback-after", "-1m"},
		{"--find-interval", "0s"},
	} {
		root := filepath.Join(t.TempDir(), "root")
		d := startAgentd(t, bin, append([]string{"run", "--root", root, "--group", "blue", "--nats", "nats://127.0.0.1:1"}, args...)...)
		if code := d.wait(t, 20*time.Second); code != 2 {
			t.Errorf("agentd run %v: exit %d, want 2 (usage)\n%s", args, code, d.output())
		}
		if out := d.output(); !strings.Contains(out, "agentd: "+args[0]+" ") || !strings.Contains(out, "must be positive") {
			t.Errorf("agentd run %v: no clear error:\n%s", args, d.output())
		}
		if _, err := install.LoadUpdateFile(root); err == nil {
			t.Errorf("agentd run %v wrote update.yaml", args)
		}
	}
}

// busLine matches an agentd log's "bus lost" lines (time and cause) and
// "bus back" lines.
var busLine = regexp.MustCompile(`(?m)^time=(\S+) level=\S+ msg="bus (lost|back)" cause=("[^"]*"|\S+)`)

type busEvent struct {
	at    time.Time
	lost  bool
	cause string
}

func busEvents(t *testing.T, log string) []busEvent {
	t.Helper()
	var out []busEvent
	for _, m := range busLine.FindAllStringSubmatch(log, -1) {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, busEvent{at: at, lost: m[2] == "lost", cause: strings.Trim(m[3], `"`)})
	}
	return out
}

// TestAgentdNoticesCutsFast (issue 15 point 5, through the binary): 10
// agentd, 4 of them behind a TCP proxy. The proxy closes their
// connections, then, separately, silently drops everything: each time the
// 4 notice (the silent cut by unacked heartbeats: one 1s beat plus two 5s
// ack timeouts, well within the minute the defaults promise), ask the
// find endpoint --fallback-after later, and are back on the bus and
// heartbeating once the path heals; the other 6 never notice anything.
func TestAgentdNoticesCutsFast(t *testing.T) {
	bin := buildAgentd(t)
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fleet, err := kv.Ensure(ctx, srv.JetStream("setup"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	proxy := natstest.NewProxy(t, strings.TrimPrefix(srv.URL(), "nats://"))
	var mu sync.Mutex
	finds := map[string][]time.Time{} // by agent id
	find := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		finds[r.URL.Query().Get("host")] = append(finds[r.URL.Query().Get("host")], time.Now())
		mu.Unlock()
		http.Error(w, "no controller on the bus", http.StatusServiceUnavailable)
	}))
	t.Cleanup(find.Close)
	rel := httptest.NewServer(releases.NewServer(nil))
	t.Cleanup(rel.Close)

	const fallbackAfter = 2 * time.Second
	type agent struct {
		id  string
		cut bool
		d   *daemon
	}
	var agents []*agent
	for i := range 10 {
		root := t.TempDir()
		a := &agent{cut: i < 4}
		url := srv.URL()
		if a.cut {
			url = proxy.URL()
		}
		a.d = startAgentd(t, bin, "run", "--root", root, "--group", "blue", "--nats", url,
			"--heartbeat-interval", "1s", "--heartbeat-jitter", "100ms",
			"--fallback-after", fallbackAfter.String(), "--find-interval", "1h", "--find-url", find.URL+httpfind.PathFind,
			"--url-template", releases.URLTemplate(rel.URL), "--process", "app", "--bin-dir", filepath.Join(root, "bin"))
		natstest.Eventually(t, 20*time.Second, func() error {
			id, err := install.LoadAgentID(root)
			a.id = string(id)
			return err
		})
		agents = append(agents, a)
	}
	// seqs are the agents' last heartbeat sequence numbers.
	seqs := func() (map[string]uint64, error) {
		msgs, err := fleet.LastHeartbeats(ctx, "blue")
		if err != nil {
			return nil, err
		}
		out := map[string]uint64{}
		for _, m := range msgs {
			hb, err := heartbeat.DecodeFrom(m.Subject, m.Data)
			if err != nil {
				return nil, err
			}
			out[string(hb.AgentID)] = hb.Seq
		}
		return out, nil
	}
	// beating waits until every agent has beaten after the seqs in since.
	beating := func(since map[string]uint64) map[string]uint64 {
		t.Helper()
		var now map[string]uint64
		natstest.Eventually(t, 60*time.Second, func() error {
			var err error
			if now, err = seqs(); err != nil {
				return err
			}
			for _, a := range agents {
				if now[a.id] <= since[a.id] {
					return fmt.Errorf("agent %s: last heartbeat seq %d, want one after %d", a.id, now[a.id], since[a.id])
				}
			}
			return nil
		})
		return now
	}
	beat := beating(nil)

	for _, phase := range []struct {
		name  string
		cut   func()
		cause string
		bound time.Duration // from the cut to the "bus lost" line
	}{
		{"closed", proxy.Cut, "connection down", 5 * time.Second},
		{"silently dropped", proxy.Silence, "no heartbeat ack for 2 tries", 20 * time.Second},
	} {
		seen := make([]int, len(agents)) // bus lines before this phase
		mu.Lock()
		asked := make([]int, len(agents))
		for i, a := range agents {
			seen[i], asked[i] = len(busEvents(t, a.d.output())), len(finds[a.id])
		}
		mu.Unlock()
		cutAt := time.Now()
		phase.cut()
		// The cut-off agents notice, and ask the find endpoint
		// --fallback-after later.
		for i, a := range agents[:4] {
			var lost busEvent
			natstest.Eventually(t, 60*time.Second, func() error {
				ev := busEvents(t, a.d.output())[seen[i]:]
				if len(ev) == 0 {
					return fmt.Errorf("%s: agent %s has not noticed the cut", phase.name, a.id)
				}
				lost = ev[0]
				return nil
			})
			if !lost.lost || !strings.Contains(lost.cause, phase.cause) {
				t.Errorf("%s: agent %s logged bus lost=%v cause %q, want lost, %q", phase.name, a.id, lost.lost, lost.cause, phase.cause)
			}
			if took := lost.at.Sub(cutAt); took > phase.bound {
				t.Errorf("%s: agent %s noticed %v after the cut, want within %v", phase.name, a.id, took, phase.bound)
			}
			var first time.Time
			natstest.Eventually(t, 30*time.Second, func() error {
				mu.Lock()
				defer mu.Unlock()
				if len(finds[a.id]) <= asked[i] {
					return fmt.Errorf("%s: agent %s has not asked the find endpoint", phase.name, a.id)
				}
				first = finds[a.id][asked[i]]
				return nil
			})
			if after := first.Sub(lost.at); after < fallbackAfter-logSlack || after > fallbackAfter+time.Second {
				t.Errorf("%s: agent %s asked the find endpoint %v after noticing, want %v (+ up to 1s)", phase.name, a.id, after, fallbackAfter)
			}
		}
		proxy.Heal()
		beat = beating(beat)
		for i, a := range agents {
			ev := busEvents(t, a.d.output())[seen[i]:]
			switch {
			case a.cut && (len(ev) == 0 || ev[len(ev)-1].lost):
				natstest.Eventually(t, 30*time.Second, func() error {
					ev := busEvents(t, a.d.output())[seen[i]:]
					if ev[len(ev)-1].lost {
						return fmt.Errorf("%s: agent %s heartbeats again but has not logged \"bus back\"", phase.name, a.id)
					}
					return nil
				})
			case !a.cut && len(ev) > 0:
				t.Errorf("%s: agent %s, not cut off, logged %+v", phase.name, a.id, ev)
			}
			mu.Lock()
			n := len(finds[a.id])
			mu.Unlock()
			if !a.cut && n > 0 {
				t.Errorf("%s: agent %s, not cut off, asked the find endpoint", phase.name, a.id)
			}
		}
	}
}
