package heartbeat_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestFastPathTakesWhatAgentsWrite: every heartbeat Encode writes without an
// escape takes the fast path (else the controller would be no faster), and
// one that needs an escape falls back to encoding/json with the same result
// (FuzzDecode holds every input to that).
func TestFastPathTakesWhatAgentsWrite(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 28, 10, 5, 0, 123456789, time.UTC)
	base := heartbeat.Heartbeat{
		V: 1, AgentID: idN(7), Hostname: "ip-10-12-34-56.eu-west-1.compute.internal", Group: "prod",
		ActiveVersion: "14.3.7", StartVersion: "14.3.6", StartTime: at.Add(-time.Hour),
		UpdaterVersion: "14.3.7", At: at, Seq: 1<<64 - 1,
	}
	tests := []struct {
		name string
		edit func(h *heartbeat.Heartbeat)
		fast bool
	}{
		{name: "steady", edit: func(*heartbeat.Heartbeat) {}, fast: true},
		{name: "no version yet", edit: func(h *heartbeat.Heartbeat) { h.ActiveVersion, h.StartVersion, h.StartTime = "", "", time.Time{} }, fast: true},
		{name: "updating", edit: func(h *heartbeat.Heartbeat) { h.UpdatingTo = "14.4.0-rc.1+build.7" }, fast: true},
		{name: "rolled back", edit: func(h *heartbeat.Heartbeat) {
			h.Rollback, h.RollbackFrom = true, "14.4.0"
			h.Error, h.ErrorClass, h.ErrorCause = "health check failed after 30s: connection refused", heartbeat.ClassRelease, "unhealthy"
		}, fast: true},
		{name: "site and unicode host", edit: func(h *heartbeat.Heartbeat) { h.Site, h.Hostname = "eu-west", "hôte-01" }, fast: true},
		{name: "offset time", edit: func(h *heartbeat.Heartbeat) { h.At = at.In(time.FixedZone("", 2*3600)) }, fast: true},
		{name: "error with quotes", edit: func(h *heartbeat.Heartbeat) {
			h.Error, h.ErrorClass = `exit status 3: "bad flag"`, heartbeat.ClassRelease
		}, fast: false},
		{name: "error with newline", edit: func(h *heartbeat.Heartbeat) {
			h.Error, h.ErrorClass = "line one\nline two", heartbeat.ClassArtifact
		}, fast: false},
	}
	var d heartbeat.Decoder
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := base
			tc.edit(&h)
			data, err := heartbeat.Encode(&h)
			if err != nil {
				t.Fatal(err)
			}
			if got := heartbeat.FastPath(data); got != tc.fast {
				t.Errorf("fast path taken = %v, want %v for %s", got, tc.fast, data)
			}
			got, err := heartbeat.Decode(data)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			sameAsStd(t, data, got, err)
			dh, err := d.DecodeFrom(heartbeat.SubjectFor(h.Group, h.AgentID), data)
			if err != nil {
				t.Fatalf("Decoder.DecodeFrom: %v", err)
			}
			sameAsStd(t, data, dh, nil)
		})
	}
}

// TestDecoderKeepsNothingOfTheLastHeartbeat: a Decoder reused after an
// agent with every field set decodes a minimal heartbeat with the rest
// empty, and rejects a bad one with Decode's error.
func TestDecoderKeepsNothingOfTheLastHeartbeat(t *testing.T) {
	t.Parallel()
	var d heartbeat.Decoder
	full := heartbeat.Heartbeat{
		V: 1, AgentID: idN(1), Hostname: "h1", Group: "prod", ActiveVersion: "1.0.0", StartVersion: "0.9.0",
		StartTime: t0, Rollback: true, RollbackFrom: "1.1.0", Error: "boom", ErrorClass: heartbeat.ClassRelease,
		ErrorCause: "unhealthy", UpdatingTo: "1.2.0", UpdaterVersion: "1.0.0", At: t0, Seq: 9, Site: "eu", ErrorOutput: "bind: address in use",
	}
	data, err := heartbeat.Encode(&full)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.DecodeFrom(heartbeat.SubjectFor("prod", idN(1)), data); err != nil {
		t.Fatal(err)
	}
	minimal := `{"v":1,"agent_id":"` + string(idN(2)) + `","group":"stage","at":"2026-11-28T10:00:00Z"}`
	h, err := d.DecodeFrom(heartbeat.SubjectFor("stage", idN(2)), []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	want := heartbeat.Heartbeat{V: 1, AgentID: idN(2), Group: "stage", At: time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)}
	sameAsStd(t, []byte(minimal), &want, nil)
	sameAsStd(t, []byte(minimal), h, nil)
	bad := strings.Replace(minimal, `"v":1`, `"v":2`, 1)
	_, err = d.DecodeFrom(heartbeat.SubjectFor("stage", idN(2)), []byte(bad))
	_, want2 := heartbeat.DecodeFrom(heartbeat.SubjectFor("stage", idN(2)), []byte(bad))
	if err == nil || want2 == nil || err.Error() != want2.Error() {
		t.Errorf("bad heartbeat: Decoder says %v, DecodeFrom says %v", err, want2)
	}
}

// The decoders side by side on the same realistic heartbeat: encoding/json
// alone (what Decode was), Decode with its fast path, and a reused Decoder
// as the controller runs it. Each includes Validate.
func BenchmarkDecode(b *testing.B) {
	payloads := make([][]byte, 1000)
	subjects := make([]string, len(payloads))
	for i := range payloads {
		id := rollout.AgentID(idN(i))
		payloads[i], subjects[i] = realisticHeartbeat(b, id, "prod"), heartbeat.SubjectFor("prod", id)
	}
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(payloads[0])))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := heartbeat.DecodeStd(payloads[i%len(payloads)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("Decode", func(b *testing.B) {
		b.SetBytes(int64(len(payloads[0])))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := heartbeat.Decode(payloads[i%len(payloads)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("Decoder", func(b *testing.B) {
		var d heartbeat.Decoder
		b.SetBytes(int64(len(payloads[0])))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			j := i % len(payloads)
			if _, err := d.DecodeFrom(subjects[j], payloads[j]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
