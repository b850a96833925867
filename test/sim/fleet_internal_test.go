package sim

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// TestEventHeapPopsInTimeOrder: the typed heap gives events back earliest
// first, however they were pushed.
func TestEventHeapPopsInTimeOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h eventHeap
	var want []int64
	for i := range 5000 {
		at := r.Int64N(1000)
		h.push(event{at: at, idx: int32(i)})
		want = append(want, at)
		if i%7 == 0 { // pops between pushes, as the scheduler does
			e := h.pop()
			j := slices.Index(want, slices.Min(want))
			if e.at != want[j] {
				t.Fatalf("popped %d, earliest is %d", e.at, want[j])
			}
			want = slices.Delete(want, j, j+1)
		}
	}
	slices.Sort(want)
	for _, w := range want {
		if e := h.pop(); e.at != w {
			t.Fatalf("popped %d, want %d", e.at, w)
		}
	}
	if len(h) != 0 {
		t.Fatalf("%d events left", len(h))
	}
}

// TestAgentIsSmall: a million agents fit in 64 MB plus their ids.
func TestAgentIsSmall(t *testing.T) {
	if n := unsafe.Sizeof(agent{}); n > 64 {
		t.Errorf("agent is %d bytes, want at most 64", n)
	}
	if n := unsafe.Sizeof(event{}); n > 24 {
		t.Errorf("event is %d bytes, want at most 24", n)
	}
}

// TestAppendHeartbeatIsEncode: every kind of heartbeat the simulator
// sends (new host, installing, blocked on infrastructure, rolled back,
// updated) and a few with text JSON escapes is, byte for byte, what
// heartbeat.Encode writes, and valid.
func TestAppendHeartbeatIsEncode(t *testing.T) {
	s := &Sim{o: Options{Agents: 5, AgentsPerConn: 5}.withDefaults(), groups: []string{"g1", "g2"}, groupIndex: map[string]int{}}
	sh := newShard(s, 3, 5)
	now := time.Date(2026, 11, 28, 12, 0, 0, 123456789, time.Local).UnixNano()
	target := sh.ver("2.0.0")
	a := sh.agents[:]
	a[1].set(flInstalling, true)
	a[1].installTo, a[1].startVersion, a[1].startTime = target, a[1].active, now-int64(time.Second)
	a[2] = a[1]
	a[2].set(flBlocked, true)
	a[3].set(flRollback, true)
	a[3].rollbackFrom, a[3].badVersion, a[3].startTime = target, target, now-int64(time.Minute)
	a[4].active, a[4].startTime = target, now-500 // whole nanoseconds
	var hbs []heartbeat.Heartbeat
	for i := range sh.agents {
		sh.agents[i].seq = uint32(i * 1000)
		hbs = append(hbs, sh.heartbeat(i, now))
	}
	odd := hbs[2]
	// A name may hold no control (heartbeat.Validate); free text may.
	odd.Hostname, odd.Error, odd.Site = `host "quoted" \ <&> ünï`, "x < y & \"z\"\u2028\t\n", "eu-west"
	odd.ErrorCause, odd.UpdaterVersion = "cause", "1.2.3"
	hbs = append(hbs, odd)
	utc := hbs[0]
	utc.At = time.Unix(0, now).UTC()
	hbs = append(hbs, utc)
	// Another app than the default's, as a shard of an app's Sim sends it.
	s.setNS(kv.OtherNS("db"))
	hbs = append(hbs, sh.heartbeat(1, now))
	if hbs[len(hbs)-1].App != "db" {
		t.Fatalf("an app's heartbeat has app %q, want db", hbs[len(hbs)-1].App)
	}
	left := hbs[len(hbs)-1]
	left.Installer, left.Left = "script", true
	hbs = append(hbs, left)
	for i, hb := range hbs {
		want, err := heartbeat.Encode(&hb)
		if err != nil {
			t.Fatalf("heartbeat %d is not valid: %v", i, err)
		}
		if got := appendHeartbeat(nil, &hb); !bytes.Equal(got, want) {
			t.Errorf("heartbeat %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

// BenchmarkHeartbeatEncode: heartbeat.Encode against the simulator's
// appendHeartbeat on an installing agent's heartbeat.
func BenchmarkHeartbeatEncode(b *testing.B) {
	s := &Sim{o: Options{Agents: 1, AgentsPerConn: 1}.withDefaults(), groups: []string{"g1"}}
	sh := newShard(s, 0, 1)
	now := time.Now().UnixNano()
	sh.agents[0].set(flInstalling, true)
	sh.agents[0].installTo, sh.agents[0].startTime = sh.ver("2.0.0"), now
	hb := sh.heartbeat(0, now)
	b.Run("heartbeat.Encode", func(b *testing.B) {
		for b.Loop() {
			_, _ = heartbeat.Encode(&hb)
		}
	})
	b.Run("appendHeartbeat", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf = appendHeartbeat(buf[:0], &hb)
		}
	})
}
