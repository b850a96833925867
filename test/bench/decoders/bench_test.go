package decoders

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// benchAt is a fixed clock, so that the payloads have the same length in
// every run (RFC 3339 drops a time's trailing zero nanoseconds).
var benchAt = time.Date(2026, 11, 1, 12, 34, 56, 123456789, time.UTC)

// benchAgents is how many distinct agents' heartbeats a benchmark cycles
// through, as the controller sees them: a decoder that caches strings
// (encoding/json/v2 does) must not be flattered by one payload decoded over
// and over.
const benchAgents = 1024

// plainHeartbeat is the heartbeat of test/bench/cmd/fleetbench's
// payloadsFrom for agent n of 10 groups at benchAt: 342 bytes.
func plainHeartbeat(n int) heartbeat.Heartbeat {
	return heartbeat.Heartbeat{
		V: 1, AgentID: rollout.AgentID(fmt.Sprintf("00000000-0000-4000-8000-%012x", n)),
		Hostname: "ip-10-12-34-56.eu-west-1.compute.internal",
		Group:    fmt.Sprintf("g%d", n%10), ActiveVersion: "14.3.7", StartVersion: "14.3.6",
		StartTime: benchAt.Add(-time.Hour), UpdaterVersion: "14.3.7", At: benchAt, Seq: 1,
	}
}

// errorHeartbeat is a failed agent's: an error text that needs escapes
// (quotes, newlines, a tab, non-ASCII runes) and error_class/error_cause.
func errorHeartbeat(n int) heartbeat.Heartbeat {
	h := plainHeartbeat(n)
	h.UpdatingTo = "14.3.8"
	h.Error = "install 14.3.8: health check \"GET /healthz\" failed 3 times:\n" +
		"\tdial tcp 127.0.0.1:8080: connect: connection refused\n" +
		"last body: \"überlastet — retry\""
	h.ErrorClass = heartbeat.ClassRelease
	h.ErrorCause = "health check failed"
	return h
}

// payload is one kind of heartbeat, from benchAgents agents.
type payload struct {
	name string // kind and length in bytes
	hbs  []heartbeat.Heartbeat
	data [][]byte // hbs encoded, all of the same length
}

func payloads(tb testing.TB) []payload {
	tb.Helper()
	var ps []payload
	for _, kind := range []struct {
		name string
		hb   func(int) heartbeat.Heartbeat
	}{
		{"plain", plainHeartbeat},
		{"error", errorHeartbeat},
	} {
		p := payload{hbs: make([]heartbeat.Heartbeat, benchAgents), data: make([][]byte, benchAgents)}
		for i := range benchAgents {
			p.hbs[i] = kind.hb(i)
			data, err := heartbeat.Encode(&p.hbs[i])
			if err != nil {
				tb.Fatalf("encode %s heartbeat: %v", kind.name, err)
			}
			if i > 0 && len(data) != len(p.data[0]) {
				tb.Fatalf("%s heartbeats of %d and %d bytes", kind.name, len(p.data[0]), len(data))
			}
			p.data[i] = data
		}
		p.name = fmt.Sprintf("%s%d", kind.name, len(p.data[0]))
		ps = append(ps, p)
	}
	return ps
}

// BenchmarkDecode decodes and validates the same heartbeats with every
// candidate: ns/op, B/op, allocs/op per heartbeat. The sub-benchmarks are
// named payload=P/dec=D, so that `benchstat -col /dec` puts the candidates
// side by side with their ratio to encoding/json's (the first column).
func BenchmarkDecode(b *testing.B) {
	for _, p := range payloads(b) {
		for _, c := range Candidates() {
			b.Run("payload="+p.name+"/dec="+c.Short, func(b *testing.B) {
				dec := c.New()
				for _, d := range p.data { // warm: first-use compilation, caches
					if _, err := dec(d); err != nil {
						b.Fatalf("%s rejects the %s payload: %v", c.Name, p.name, err)
					}
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(p.data[0])))
				cpu := cpuTime()
				i := 0
				for b.Loop() {
					if _, err := dec(p.data[i]); err != nil {
						b.Fatal(err)
					}
					if i++; i == len(p.data) {
						i = 0
					}
				}
				reportCPU(b, cpu)
			})
		}
	}
}

// cpuTime is the CPU time this process has used, user and system, with the
// garbage collector's on other threads.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-ns/op: CPU time per op since start. On a machine
// shared with other work, ns/op counts the time the benchmark waits for a
// core; cpu-ns/op does not, so its ratios between candidates are steadier.
func reportCPU(b *testing.B, start time.Duration) {
	if d := cpuTime() - start; start > 0 && b.N > 0 {
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkValidate is the part of every candidate's cost that is not
// decoding: Validate on the decoded heartbeats.
func BenchmarkValidate(b *testing.B) {
	for _, p := range payloads(b) {
		b.Run("payload="+p.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := cpuTime()
			i := 0
			for b.Loop() {
				if err := p.hbs[i].Validate(); err != nil {
					b.Fatal(err)
				}
				if i++; i == len(p.hbs) {
					i = 0
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// TestPayloads checks that every candidate decodes every benchmark payload
// to the heartbeat it was encoded from.
func TestPayloads(t *testing.T) {
	ps := payloads(t)
	if ps[0].name != "plain342" {
		t.Errorf("plain payload is %s, want 342 bytes as fleetbench's: %s", ps[0].name, ps[0].data[0])
	}
	for _, c := range Candidates() {
		dec := c.New()
		for _, p := range ps {
			for i, d := range p.data {
				got, err := dec(d)
				if err != nil {
					t.Fatalf("%s: %s: %v", p.name, c.Name, err)
				}
				if d := diff(&p.hbs[i], got); d != "" {
					t.Fatalf("%s: %s (-want +got):\n%s", p.name, c.Name, d)
				}
			}
		}
	}
}
