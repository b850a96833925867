package heartbeat

import (
	"fmt"
	"math/rand/v2"
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
		"installer script":    func(h *Heartbeat) { h.Installer = "script" },
		"tarball installer":   func(h *Heartbeat) { h.Installer = "tarball" },
		"labels": func(h *Heartbeat) {
			h.Labels, _ = MakeLabelSet(rollout.Labels{"os": "linux", "arch": "amd64", "rack": `r"12`})
		},
		"everything odd": func(h *Heartbeat) {
			h.Rollback, h.RollbackFrom, h.Error = true, "1.3.0", "boom"
			h.ErrorClass, h.ErrorCause, h.UpdatingTo, h.Site = ClassRelease, "unhealthy", "1.3.1", "eu"
			h.ErrorOutput = "panic: boom\n\tat main.go:3"
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

// TestEntrySize: an agent's entry is 80 bytes; each byte more is a
// megabyte more for a million-host fleet.
func TestEntrySize(t *testing.T) {
	t.Parallel()
	if n := unsafe.Sizeof(entry{}); n > 80 {
		t.Errorf("entry is %d bytes, want at most 80", n)
	}
}

// TestAggregatorVersionsTableFull: past maxVersions distinct versions an
// agent's versions are kept with it, exactly.
func TestAggregatorVersionsTableFull(t *testing.T) {
	t.Parallel()
	a := NewAggregator(time.Second, time.Hour)
	at := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for i := range maxVersions + 2 {
		h := Heartbeat{V: 1, AgentID: rollout.AgentID(fmt.Sprintf("00000000-0000-4000-8000-%012x", i)), Group: "g",
			ActiveVersion: fmt.Sprintf("1.0.%d", i), StartVersion: "0.9.0", UpdaterVersion: fmt.Sprintf("1.0.%d", i), At: at}
		a.Observe(&h, at, false)
		got, ok := a.Lookup(h.AgentID, at)
		if !ok || got.Heartbeat != h {
			t.Fatalf("agent %d: got %+v, want %+v", i, got.Heartbeat, h)
		}
	}
	if n := len(a.versions.strs); n != maxVersions {
		t.Errorf("versions table holds %d, want %d", n, maxVersions)
	}
}

// TestAggregatorMatchesModel drives the Aggregator and a plain map of the
// same rules with random heartbeats (agents moving between groups, going
// silent, expiring, coming back) and compares every agent after each step:
// the per-group slices, their swap-on-remove and their shrinking must never
// lose, duplicate or mix up an agent.
func TestAggregatorMatchesModel(t *testing.T) {
	t.Parallel()
	type row struct {
		hb          Heartbeat
		first, last time.Time
	}
	const interval, expiry = 10 * time.Second, time.Minute
	a := NewAggregator(interval, expiry)
	model := map[rollout.AgentID]*row{}
	rnd := rand.New(rand.NewPCG(1, 2))
	now := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	groups := []string{"a", "b", "c"}
	for step := range 20000 {
		now = now.Add(time.Duration(rnd.IntN(300)) * time.Millisecond)
		switch {
		case rnd.IntN(500) == 0:
			now = now.Add(expiry) // everyone silent long enough to expire
		case rnd.IntN(50) == 0:
			a.Expire(now)
			for id, r := range model {
				if now.Sub(r.last) >= expiry {
					delete(model, id)
				}
			}
		default:
			id := rollout.AgentID(fmt.Sprintf("00000000-0000-4000-8000-%012x", rnd.IntN(3000)))
			hb := Heartbeat{V: 1, AgentID: id, Group: groups[rnd.IntN(len(groups))], At: now, Seq: uint64(step),
				Hostname: fmt.Sprintf("h%d", rnd.IntN(3)), ActiveVersion: "1.0.0"}
			if rnd.IntN(10) == 0 {
				hb.Rollback, hb.RollbackFrom = true, "1.1.0"
			}
			recovered := rnd.IntN(20) == 0
			a.Observe(&hb, now, recovered)
			r, ok := model[id]
			if !ok || now.Sub(r.last) >= expiry {
				first := now
				if recovered {
					first = now.Add(-interval)
				}
				model[id] = &row{hb: hb, first: first, last: now}
			} else {
				r.hb, r.last = hb, now
			}
		}
		if step%500 != 0 {
			continue
		}
		got := a.Agents("", now)
		want := 0
		for _, r := range model {
			if now.Sub(r.last) < expiry {
				want++
			}
		}
		if len(got) != want {
			t.Fatalf("step %d: %d agents, model has %d", step, len(got), want)
		}
		for _, g := range got {
			r := model[g.Heartbeat.AgentID]
			if r == nil || g.Heartbeat != r.hb || !g.FirstSeen.Equal(r.first) || !g.LastSeen.Equal(r.last) {
				t.Fatalf("step %d: agent %+v, model %+v", step, g, r)
			}
		}
		views := 0
		for _, g := range groups {
			views += len(a.Views(g, now))
		}
		counted := 0
		for _, r := range model {
			if now.Sub(r.last) < expiry && now.Sub(r.first) >= interval {
				counted++
			}
		}
		if views != counted {
			t.Fatalf("step %d: %d views, model counts %d", step, views, counted)
		}
	}
}
