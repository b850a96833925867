package heartbeat

import (
	"testing"
	"time"
	"unsafe"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestAggregatorKeepsHeartbeatsExactly: whatever the Aggregator stores
// compactly comes back identical (==: the same instants in the same zones,
// the same strings), for steady agents and for every field an odd one sets.
func TestAggregatorKeepsHeartbeatsExactly(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 28, 10, 5, 0, 123456789, time.UTC)
	steady := Heartbeat{
		V: 1, AgentID: "00000000-0000-4000-8000-000000000001", Hostname: "h1", Group: "prod",
		ActiveVersion: "1.2.3", StartVersion: "1.2.2", StartTime: at.Add(-time.Hour), UpdaterVersion: "1.2.3",
		At: at, Seq: 7,
	}
	tests := map[string]func(h *Heartbeat){
		"steady":              func(*Heartbeat) {},
		"no start time":       func(h *Heartbeat) { h.StartTime = time.Time{} },
		"zero time elsewhere": func(h *Heartbeat) { h.StartTime = time.Time{}.In(time.FixedZone("x", 3600)) },
		"offset at":           func(h *Heartbeat) { h.At = at.In(time.FixedZone("", 2*3600)) },
		"local start":         func(h *Heartbeat) { h.StartTime = at.Local() },
		"year 9999":           func(h *Heartbeat) { h.At = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC) },
		"year 1":              func(h *Heartbeat) { h.At = time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC) },
		"min nanos":           func(h *Heartbeat) { h.StartTime = time.Unix(0, noTime).UTC() },
		"other schema":        func(h *Heartbeat) { h.V = 0 },
		"everything odd": func(h *Heartbeat) {
			h.Rollback, h.RollbackFrom, h.Error = true, "1.3.0", "boom"
			h.ErrorClass, h.ErrorCause, h.UpdatingTo, h.Site = ClassRelease, "unhealthy", "1.3.1", "eu"
		},
	}
	a := NewAggregator(time.Second, time.Hour)
	for name, edit := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := steady
			h.AgentID = rollout.AgentID("00000000-0000-4000-8000-" + name[:1] + "00000000000")
			edit(&h)
			a.Observe(&h, at, false)
			got, ok := a.Lookup(h.AgentID, at)
			if !ok {
				t.Fatal("not found")
			}
			if got.Heartbeat != h {
				t.Errorf("stored %+v\ngot back %+v", h, got.Heartbeat)
			}
			// And back to a steady heartbeat: nothing odd stays behind.
			s := steady
			s.AgentID = h.AgentID
			a.Observe(&s, at.Add(time.Second), false)
			if got, _ := a.Lookup(h.AgentID, at.Add(time.Second)); got.Heartbeat != s {
				t.Errorf("after a steady heartbeat: %+v, want %+v", got.Heartbeat, s)
			}
		})
	}
}

// TestEntrySize: an agent's entry is one allocation of 128 bytes; a field
// more puts every agent of a million-host fleet in the next size class.
func TestEntrySize(t *testing.T) {
	t.Parallel()
	if n := unsafe.Sizeof(entry{}); n != 128 {
		t.Errorf("entry is %d bytes, want 128", n)
	}
}
