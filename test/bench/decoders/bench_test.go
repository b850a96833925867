package decoders

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// benchAt is a fixed clock, so that the payload has the same length in
// every run (RFC 3339 drops a time's trailing zero nanoseconds).
var benchAt = time.Date(2026, 11, 1, 12, 34, 56, 123456789, time.UTC)

// plainHeartbeat is the heartbeat of test/bench/cmd/fleetbench's
// payloadsFrom for agent 0 of 10 groups at benchAt: 342 bytes.
func plainHeartbeat() heartbeat.Heartbeat {
	return heartbeat.Heartbeat{
		V: 1, AgentID: rollout.AgentID(fmt.Sprintf("00000000-0000-4000-8000-%012x", 0)),
		Hostname: "ip-10-12-34-56.eu-west-1.compute.internal",
		Group:    fmt.Sprintf("g%d", 0%10), ActiveVersion: "14.3.7", StartVersion: "14.3.6",
		StartTime: benchAt.Add(-time.Hour), UpdaterVersion: "14.3.7", At: benchAt, Seq: 1,
	}
}

// errorHeartbeat is a failed agent's: an error text that needs escapes
// (quotes, newlines, a tab, non-ASCII runes) and error_class/error_cause.
func errorHeartbeat() heartbeat.Heartbeat {
	h := plainHeartbeat()
	h.UpdatingTo = "14.3.8"
	h.Error = "install 14.3.8: health check \"GET /healthz\" failed 3 times:\n" +
		"\tdial tcp 127.0.0.1:8080: connect: connection refused\n" +
		"last body: \"überlastet — retry\""
	h.ErrorClass = heartbeat.ClassRelease
	h.ErrorCause = "health check failed"
	return h
}

type payload struct {
	name string
	data []byte
}

func payloads(tb testing.TB) []payload {
	tb.Helper()
	var ps []payload
	for _, p := range []struct {
		name string
		h    heartbeat.Heartbeat
	}{
		{"plain", plainHeartbeat()},
		{"error", errorHeartbeat()},
	} {
		data, err := heartbeat.Encode(&p.h)
		if err != nil {
			tb.Fatalf("encode %s heartbeat: %v", p.name, err)
		}
		ps = append(ps, payload{fmt.Sprintf("%s%d", p.name, len(data)), data})
	}
	return ps
}

// BenchmarkDecode decodes and validates the same payload with every
// candidate: ns/op, B/op, allocs/op per heartbeat. The sub-benchmarks are
// named payload=P/dec=D, so that `benchstat -col /dec` puts the candidates
// side by side with their ratio to encoding/json's (the first column).
func BenchmarkDecode(b *testing.B) {
	for _, p := range payloads(b) {
		for _, c := range Candidates() {
			b.Run("payload="+p.name+"/dec="+c.Short, func(b *testing.B) {
				dec := c.New()
				if _, err := dec(p.data); err != nil {
					b.Fatalf("%s rejects the %s payload: %v", c.Name, p.name, err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(p.data)))
				cpu := cpuTime()
				for b.Loop() {
					if _, err := dec(p.data); err != nil {
						b.Fatal(err)
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
// decoding: Validate on the decoded payload.
func BenchmarkValidate(b *testing.B) {
	for _, p := range payloads(b) {
		h, err := heartbeat.Decode(p.data)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("payload="+p.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				if err := h.Validate(); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// TestPayloads checks that every candidate decodes both benchmark payloads
// to the heartbeat they were encoded from.
func TestPayloads(t *testing.T) {
	want := []heartbeat.Heartbeat{plainHeartbeat(), errorHeartbeat()}
	for i, p := range payloads(t) {
		if i == 0 && len(p.data) != 342 {
			t.Errorf("plain payload is %d bytes, want 342 as fleetbench's: %s", len(p.data), p.data)
		}
		for _, c := range Candidates() {
			got, err := c.New()(p.data)
			if err != nil {
				t.Errorf("%s: %s: %v", p.name, c.Name, err)
				continue
			}
			if d := diff(&want[i], got); d != "" {
				t.Errorf("%s: %s (-want +got):\n%s", p.name, c.Name, d)
			}
		}
	}
}
