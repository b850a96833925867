package heartbeat_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

const (
	aggInterval = 30 * time.Second
	aggExpiry   = 10 * time.Minute
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// idN is a canonical agent id whose numeric value is n.
func idN(n int) rollout.AgentID {
	return rollout.AgentID(fmt.Sprintf("00000000-0000-4000-8000-%012x", n))
}

// beat is a valid heartbeat of agent id in group on version (empty: nothing
// installed).
func beat(id rollout.AgentID, group, version string) *heartbeat.Heartbeat {
	return &heartbeat.Heartbeat{V: 1, AgentID: id, Group: group, ActiveVersion: version, At: t0, Hostname: "h-" + string(id[24:])}
}

func failedBeat(id rollout.AgentID, group, version string) *heartbeat.Heartbeat {
	h := beat(id, group, version)
	h.Rollback, h.RollbackFrom = true, "9.9.9"
	return h
}

func erroredBeat(id rollout.AgentID, group, version string) *heartbeat.Heartbeat {
	h := beat(id, group, version)
	h.Error = "download: HTTP 404"
	return h
}

// total is how many agents Counts reports over all groups.
func total(counts map[string]rollout.Counts) int {
	n := 0
	for _, c := range counts {
		n += c.Total()
	}
	return n
}

func TestAggregatorEstablished(t *testing.T) {
	t.Parallel()
	type observation struct {
		at        time.Duration // after t0
		recovered bool
	}
	tests := []struct {
		name    string
		observe []observation
		at      time.Duration // Counts at t0+at
		want    int
	}{
		{name: "just seen", observe: []observation{{0, false}}, at: 0, want: 0},
		{name: "1ns before one interval", observe: []observation{{0, false}}, at: aggInterval - time.Nanosecond, want: 0},
		{name: "exactly one interval", observe: []observation{{0, false}}, at: aggInterval, want: 1},
		{name: "long after", observe: []observation{{0, false}, {5 * time.Minute, false}}, at: 5 * time.Minute, want: 1},
		{name: "recovered counts at once", observe: []observation{{0, true}}, at: 0, want: 1},
		{name: "later beats keep the first-seen time", observe: []observation{{0, false}, {20 * time.Second, false}}, at: aggInterval, want: 1},
		{name: "second beat does not make a new agent established", observe: []observation{{0, false}, {10 * time.Second, false}}, at: 20 * time.Second, want: 0},
		{name: "recovered replay of a known agent keeps its clock", observe: []observation{{0, false}, {time.Second, true}}, at: 2 * time.Second, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := heartbeat.NewAggregator(aggInterval, aggExpiry)
			for _, o := range tc.observe {
				a.Observe(beat(idN(1), "prod", "1.0.0"), t0.Add(o.at), o.recovered)
			}
			now := t0.Add(tc.at)
			if got := total(a.Counts(now)); got != tc.want {
				t.Errorf("counted agents = %d, want %d", got, tc.want)
			}
			agents := a.Agents("", now)
			if len(agents) != 1 {
				t.Fatalf("Agents listed %d agents, want 1 (established or not)", len(agents))
			}
			if got, want := agents[0].Established, tc.want == 1; got != want {
				t.Errorf("Agents: Established = %v, want %v", got, want)
			}
		})
	}
}

func TestAggregatorExpiry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		at          time.Duration // after the last beat at t0
		wantCounted int
		wantListed  int
		wantRemoved int
	}{
		{name: "just seen", at: 0, wantCounted: 1, wantListed: 1},
		{name: "1ns before expiry", at: aggExpiry - time.Nanosecond, wantCounted: 1, wantListed: 1},
		{name: "at expiry", at: aggExpiry, wantRemoved: 1},
		{name: "long after", at: 24 * time.Hour, wantRemoved: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := heartbeat.NewAggregator(aggInterval, aggExpiry)
			a.Observe(beat(idN(1), "prod", "1.0.0"), t0, true)
			now := t0.Add(tc.at)
			if got := total(a.Counts(now)); got != tc.wantCounted {
				t.Errorf("Counts: %d agents, want %d", got, tc.wantCounted)
			}
			if got := len(a.Agents("", now)); got != tc.wantListed {
				t.Errorf("Agents: %d agents, want %d", got, tc.wantListed)
			}
			if got := a.Len(); got != 1 {
				t.Errorf("Len before Expire = %d, want 1 (only Expire prunes)", got)
			}
			if got := a.Expire(now); got != tc.wantRemoved {
				t.Errorf("Expire = %d, want %d", got, tc.wantRemoved)
			}
			if got, want := a.Len(), 1-tc.wantRemoved; got != want {
				t.Errorf("Len after Expire = %d, want %d", got, want)
			}
		})
	}
}

func TestAggregatorExpireCountsRemoved(t *testing.T) {
	t.Parallel()
	a := heartbeat.NewAggregator(aggInterval, aggExpiry)
	// Agents 0-4 last heard at t0, 5-7 at t0+5m, 8-9 at t0+9m.
	for i := range 10 {
		at := t0
		switch {
		case i >= 8:
			at = t0.Add(9 * time.Minute)
		case i >= 5:
			at = t0.Add(5 * time.Minute)
		}
		a.Observe(beat(idN(i), "prod", "1.0.0"), at, false)
	}
	steps := []struct {
		now         time.Time
		wantRemoved int
		wantLen     int
	}{
		{t0.Add(aggExpiry - time.Nanosecond), 0, 10},
		{t0.Add(aggExpiry), 5, 5},
		{t0.Add(aggExpiry), 0, 5},
		{t0.Add(5*time.Minute + aggExpiry), 3, 2},
		{t0.Add(time.Hour), 2, 0},
		{t0.Add(2 * time.Hour), 0, 0},
	}
	for i, s := range steps {
		if got := a.Expire(s.now); got != s.wantRemoved {
			t.Errorf("step %d: Expire(%v) = %d, want %d", i, s.now, got, s.wantRemoved)
		}
		if got := a.Len(); got != s.wantLen {
			t.Errorf("step %d: Len = %d, want %d", i, got, s.wantLen)
		}
	}
}

func TestAggregatorCounts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		observe []*heartbeat.Heartbeat // all recovered at t0
		want    map[string]rollout.Counts
	}{
		{name: "empty", want: map[string]rollout.Counts{}},
		{
			name: "per group and version",
			observe: []*heartbeat.Heartbeat{
				beat(idN(0x30), "prod", "1.0.0"),
				beat(idN(0x10), "prod", "1.0.0"),
				beat(idN(0x20), "prod", "1.0.0"),
				beat(idN(0x05), "prod", "1.1.0"),
				beat(idN(0x01), "staging", "1.1.0"),
			},
			want: map[string]rollout.Counts{
				"prod": {
					"1.0.0": {Count: 3, LowestID: idN(0x10)},
					"1.1.0": {Count: 1, LowestID: idN(0x05)},
				},
				"staging": {"1.1.0": {Count: 1, LowestID: idN(0x01)}},
			},
		},
		{
			name: "failed: rollback or error",
			observe: []*heartbeat.Heartbeat{
				beat(idN(1), "prod", "1.0.0"),
				failedBeat(idN(2), "prod", "1.0.0"),
				erroredBeat(idN(3), "prod", "1.0.0"),
				erroredBeat(idN(4), "prod", "1.1.0"),
			},
			want: map[string]rollout.Counts{"prod": {
				"1.0.0": {Count: 3, FailedCount: 2, LowestID: idN(1)},
				"1.1.0": {Count: 1, FailedCount: 1, LowestID: idN(4)},
			}},
		},
		{
			name: "nothing installed counts under NoVersion",
			observe: []*heartbeat.Heartbeat{
				beat(idN(7), "prod", ""),
				beat(idN(6), "prod", ""),
				beat(idN(8), "prod", "1.0.0"),
			},
			want: map[string]rollout.Counts{"prod": {
				rollout.NoVersion: {Count: 2, LowestID: idN(6)},
				"1.0.0":           {Count: 1, LowestID: idN(8)},
			}},
		},
		{
			name: "lowest id is numeric order over hex digits",
			observe: []*heartbeat.Heartbeat{
				beat("f0000000-0000-4000-8000-000000000000", "prod", "1.0.0"),
				beat("a0000000-0000-4000-8000-000000000000", "prod", "1.0.0"),
				beat("90000000-0000-4000-8000-000000000000", "prod", "1.0.0"),
				beat("0a000000-0000-4000-8000-000000000000", "prod", "1.0.0"),
			},
			want: map[string]rollout.Counts{"prod": {
				"1.0.0": {Count: 4, LowestID: "0a000000-0000-4000-8000-000000000000"},
			}},
		},
		{
			name: "a later beat replaces the earlier one",
			observe: []*heartbeat.Heartbeat{
				beat(idN(1), "prod", "1.0.0"),
				failedBeat(idN(1), "prod", "1.1.0"),
				beat(idN(1), "prod", "1.2.0"),
			},
			want: map[string]rollout.Counts{"prod": {"1.2.0": {Count: 1, LowestID: idN(1)}}},
		},
		{
			name: "an agent moving group leaves the old group",
			observe: []*heartbeat.Heartbeat{
				beat(idN(1), "prod", "1.0.0"),
				beat(idN(2), "prod", "1.0.0"),
				beat(idN(1), "staging", "1.0.0"),
			},
			want: map[string]rollout.Counts{
				"prod":    {"1.0.0": {Count: 1, LowestID: idN(2)}},
				"staging": {"1.0.0": {Count: 1, LowestID: idN(1)}},
			},
		},
		{
			name: "the last agent moving away removes the group",
			observe: []*heartbeat.Heartbeat{
				beat(idN(1), "prod", "1.0.0"),
				beat(idN(1), "staging", "1.0.0"),
			},
			want: map[string]rollout.Counts{"staging": {"1.0.0": {Count: 1, LowestID: idN(1)}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := heartbeat.NewAggregator(aggInterval, aggExpiry)
			for _, hb := range tc.observe {
				a.Observe(hb, t0, true)
			}
			if diff := cmp.Diff(tc.want, a.Counts(t0)); diff != "" {
				t.Errorf("Counts mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAggregatorObserveCopies: the aggregator keeps its own copy, so a caller
// reusing its heartbeat value cannot change the inventory.
func TestAggregatorObserveCopies(t *testing.T) {
	t.Parallel()
	a := heartbeat.NewAggregator(aggInterval, aggExpiry)
	hb := beat(idN(1), "prod", "1.0.0")
	a.Observe(hb, t0, true)
	hb.Group, hb.ActiveVersion = "staging", "2.0.0"
	want := map[string]rollout.Counts{"prod": {"1.0.0": {Count: 1, LowestID: idN(1)}}}
	if diff := cmp.Diff(want, a.Counts(t0)); diff != "" {
		t.Errorf("Counts mismatch (-want +got):\n%s", diff)
	}
}

func TestAggregatorEstablishedAndExpiredMix(t *testing.T) {
	t.Parallel()
	a := heartbeat.NewAggregator(aggInterval, aggExpiry)
	a.Observe(beat(idN(1), "prod", "1.0.0"), t0, false)                   // established at t0+30s
	a.Observe(beat(idN(2), "prod", "1.0.0"), t0.Add(aggExpiry), false)    // new at t0+10m
	a.Observe(beat(idN(3), "prod", "1.0.0"), t0.Add(aggExpiry/2), true)   // recovered at t0+5m
	a.Observe(beat(idN(4), "prod", "1.0.0"), t0.Add(-time.Minute), false) // gone at t0+9m
	now := t0.Add(aggExpiry)
	// idN(1) expires at exactly now; idN(2) is too new; idN(4) expired;
	// idN(3), silent for 5m, counts but is unreachable.
	want := map[string]rollout.Counts{"prod": {"1.0.0": {Count: 1, Unreachable: 1, LowestID: idN(3)}}}
	if diff := cmp.Diff(want, a.Counts(now)); diff != "" {
		t.Errorf("Counts mismatch (-want +got):\n%s", diff)
	}
}

func TestAggregatorViewsByGroup(t *testing.T) {
	t.Parallel()
	a := heartbeat.NewAggregator(aggInterval, aggExpiry)
	a.Observe(beat(idN(1), "prod", "1.0.0"), t0, true)
	a.Observe(failedBeat(idN(2), "prod", "1.1.0"), t0, true)
	a.Observe(erroredBeat(idN(3), "staging", "1.1.0"), t0, true)
	a.Observe(beat(idN(4), "staging", ""), t0, true)
	a.Observe(beat(idN(5), "staging", "1.0.0"), t0.Add(time.Minute), false) // not established yet
	a.Observe(beat(idN(6), "edge", "1.0.0"), t0.Add(-aggExpiry), false)     // expired
	a.Observe(beat(idN(7), "fresh", "1.0.0"), t0.Add(time.Minute), false)   // its group has no one established
	now := t0.Add(time.Minute)

	sorted := func(v []rollout.AgentView) []rollout.AgentView {
		v = slices.Clone(v)
		slices.SortFunc(v, func(x, y rollout.AgentView) int { return strings.Compare(string(x.ID), string(y.ID)) })
		return v
	}
	got := a.ViewsByGroup(now)
	want := map[string][]rollout.AgentView{
		"prod": {
			{ID: idN(1), Hostname: "h-000000000001", ActiveVersion: "1.0.0"},
			{ID: idN(2), Hostname: "h-000000000002", ActiveVersion: "1.1.0", Rollback: true, RollbackFrom: "9.9.9"},
		},
		"staging": {
			{ID: idN(3), Hostname: "h-000000000003", ActiveVersion: "1.1.0", Error: "download: HTTP 404"},
			{ID: idN(4), Hostname: "h-000000000004"},
		},
	}
	sortedGot := map[string][]rollout.AgentView{}
	for g, v := range got {
		sortedGot[g] = sorted(v)
	}
	if diff := cmp.Diff(want, sortedGot); diff != "" {
		t.Errorf("ViewsByGroup (-want +got):\n%s", diff)
	}
	for _, g := range []string{"prod", "staging", "edge", "fresh", "nobody"} {
		if diff := cmp.Diff(sorted(a.Views(g, now)), sorted(got[g])); diff != "" {
			t.Errorf("group %s: Views and ViewsByGroup differ (-Views +ViewsByGroup):\n%s", g, diff)
		}
	}
}

func TestAggregatorReappear(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		expire bool // call Expire before the agent comes back
	}{
		{name: "pruned by Expire", expire: true},
		{name: "not pruned yet"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := heartbeat.NewAggregator(aggInterval, aggExpiry)
			a.Observe(beat(idN(1), "prod", "1.0.0"), t0, false)
			if got := total(a.Counts(t0.Add(aggInterval))); got != 1 {
				t.Fatalf("before the outage: %d counted, want 1", got)
			}
			back := t0.Add(aggExpiry + time.Minute)
			if tc.expire {
				if got := a.Expire(back); got != 1 {
					t.Fatalf("Expire = %d, want 1", got)
				}
			}
			a.Observe(beat(idN(1), "prod", "1.1.0"), back, false)
			if got := total(a.Counts(back)); got != 0 {
				t.Errorf("right after coming back: %d counted, want 0 (first-seen clock restarts)", got)
			}
			if got := total(a.Counts(back.Add(aggInterval - time.Nanosecond))); got != 0 {
				t.Errorf("1ns before one interval after coming back: %d counted, want 0", got)
			}
			want := map[string]rollout.Counts{"prod": {"1.1.0": {Count: 1, LowestID: idN(1)}}}
			if diff := cmp.Diff(want, a.Counts(back.Add(aggInterval))); diff != "" {
				t.Errorf("one interval after coming back (-want +got):\n%s", diff)
			}
			agents := a.Agents("prod", back)
			if len(agents) != 1 || !agents[0].FirstSeen.Equal(back) {
				t.Errorf("Agents = %+v, want one agent first seen at %v", agents, back)
			}
		})
	}
}

// TestAggregatorNoGapJustBeforeExpiry: a beat 1ns before expiry keeps the
// agent's first-seen time.
func TestAggregatorNoGapJustBeforeExpiry(t *testing.T) {
	t.Parallel()
	a := heartbeat.NewAggregator(aggInterval, aggExpiry)
	a.Observe(beat(idN(1), "prod", "1.0.0"), t0, false)
	late := t0.Add(aggExpiry - time.Nanosecond)
	a.Observe(beat(idN(1), "prod", "1.0.0"), late, false)
	if got := total(a.Counts(late)); got != 1 {
		t.Errorf("counted = %d, want 1", got)
	}
	agents := a.Agents("", late)
	if len(agents) != 1 || !agents[0].FirstSeen.Equal(t0) || !agents[0].LastSeen.Equal(late) {
		t.Errorf("Agents = %+v, want first seen %v, last seen %v", agents, t0, late)
	}
}

func TestAggregatorAgents(t *testing.T) {
	t.Parallel()
	a := heartbeat.NewAggregator(aggInterval, aggExpiry)
	// Observed out of order on purpose.
	a.Observe(beat(idN(9), "staging", "1.0.0"), t0, false)
	a.Observe(beat(idN(3), "prod", "1.0.0"), t0, true)
	a.Observe(beat(idN(1), "prod", ""), t0.Add(20*time.Second), false)
	a.Observe(beat(idN(2), "canary", "1.1.0"), t0, false)
	a.Observe(beat(idN(5), "prod", "1.0.0"), t0.Add(-aggExpiry), false) // expired at t0
	a.Observe(beat(idN(4), "staging", "1.0.0"), t0.Add(10*time.Second), false)
	a.Observe(beat(idN(6), "prod", "1.0.0"), t0.Add(-aggExpiry/2), false)
	now := t0.Add(aggInterval)

	type row struct {
		ID          rollout.AgentID
		Group       string
		Established bool
		FirstSeen   time.Time
		LastSeen    time.Time
	}
	rows := func(agents []heartbeat.Agent) []row {
		out := []row{}
		for _, a := range agents {
			out = append(out, row{a.Heartbeat.AgentID, a.Heartbeat.Group, a.Established, a.FirstSeen, a.LastSeen})
		}
		return out
	}
	canary2 := row{idN(2), "canary", true, t0, t0}
	prod1 := row{idN(1), "prod", false, t0.Add(20 * time.Second), t0.Add(20 * time.Second)}
	prod3 := row{idN(3), "prod", true, t0.Add(-aggInterval), t0}
	prod6 := row{idN(6), "prod", true, t0.Add(-aggExpiry / 2), t0.Add(-aggExpiry / 2)}
	staging4 := row{idN(4), "staging", false, t0.Add(10 * time.Second), t0.Add(10 * time.Second)}
	staging9 := row{idN(9), "staging", true, t0, t0}

	tests := []struct {
		name  string
		group string
		want  []row
	}{
		{name: "all groups", group: "", want: []row{canary2, prod1, prod3, prod6, staging4, staging9}},
		{name: "one group", group: "prod", want: []row{prod1, prod3, prod6}},
		{name: "other group", group: "staging", want: []row{staging4, staging9}},
		{name: "unknown group", group: "nope", want: []row{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, rows(a.Agents(tc.group, now))); diff != "" {
				t.Errorf("Agents(%q) mismatch (-want +got):\n%s", tc.group, diff)
			}
		})
	}
}

// realisticHeartbeat is a heartbeat as agentd sends it, about 350 bytes.
func realisticHeartbeat(tb testing.TB, id rollout.AgentID, group string) []byte {
	tb.Helper()
	hb := heartbeat.Heartbeat{
		V:              1,
		AgentID:        id,
		Hostname:       "ip-10-12-34-56.eu-west-1.compute.internal",
		Group:          group,
		ActiveVersion:  "14.3.7",
		StartVersion:   "14.3.6",
		StartTime:      time.Date(2025, 3, 1, 9, 58, 12, 345678901, time.UTC),
		RollbackFrom:   "",
		Error:          "",
		UpdaterVersion: "14.3.7",
		At:             time.Date(2025, 3, 1, 10, 5, 0, 123456789, time.UTC),
		Seq:            18234,
	}
	data, err := heartbeat.Encode(&hb)
	if err != nil {
		tb.Fatalf("Encode: %v", err)
	}
	return data
}

// filledAggregator holds n agents spread over three groups.
func filledAggregator(tb testing.TB, n int) *heartbeat.Aggregator {
	tb.Helper()
	groups := []string{"canary", "prod", "staging"}
	versions := []string{"14.3.6", "14.3.7", ""}
	a := heartbeat.NewAggregator(aggInterval, aggExpiry)
	for i := range n {
		hb := beat(idN(i), groups[i%3], versions[(i/3)%3])
		if i%17 == 0 {
			hb.Error = "health check failed"
		}
		a.Observe(hb, t0, true)
	}
	if a.Len() != n {
		tb.Fatalf("aggregator holds %d agents, want %d", a.Len(), n)
	}
	return a
}

func BenchmarkAggregateDecodeObserve(b *testing.B) {
	a := filledAggregator(b, 10_000)
	payloads := make([][]byte, 10_000)
	for i := range payloads {
		payloads[i] = realisticHeartbeat(b, idN(i), "prod")
	}
	b.SetBytes(int64(len(payloads[0])))
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		hb, err := heartbeat.Decode(payloads[i%len(payloads)])
		if err != nil {
			b.Fatal(err)
		}
		a.Observe(hb, t0.Add(time.Second), false)
		i++
	}
}

func BenchmarkAggregateObserve(b *testing.B) {
	a := filledAggregator(b, 10_000)
	beats := make([]*heartbeat.Heartbeat, 10_000)
	for i := range beats {
		beats[i] = beat(idN(i), "prod", "14.3.7")
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		a.Observe(beats[i%len(beats)], t0.Add(time.Second), false)
		i++
	}
}

func BenchmarkAggregateCounts10k(b *testing.B) {
	a := filledAggregator(b, 10_000)
	b.ReportAllocs()
	for b.Loop() {
		if c := a.Counts(t0); len(c) != 3 {
			b.Fatalf("Counts has %d groups, want 3", len(c))
		}
	}
}

func TestRealisticHeartbeatSize(t *testing.T) {
	t.Parallel()
	// The benchmark is meant to decode a realistic (~350 byte) heartbeat.
	if n := len(realisticHeartbeat(t, idN(1), "prod")); n < 300 || n > 450 {
		t.Errorf("realistic heartbeat is %d bytes, want about 350", n)
	}
}

// TestAggregatorUnreachable: an agent not heard from for more than three
// intervals is unreachable in its view and its counts (still counted: it
// has not expired), and reachable again from its next heartbeat.
func TestAggregatorUnreachable(t *testing.T) {
	t.Parallel()
	a := heartbeat.NewAggregator(aggInterval, aggExpiry)
	quiet, chatty := idN(1), idN(2)
	for _, id := range []rollout.AgentID{quiet, chatty} {
		a.Observe(erroredBeat(id, "prod", "1.0.0"), t0, true)
	}
	cut := t0.Add(rollout.UnreachableAfter(aggInterval) + time.Second)
	a.Observe(erroredBeat(chatty, "prod", "1.0.0"), cut.Add(-aggInterval), false)

	unreachable := func(now time.Time) map[rollout.AgentID]bool {
		out := map[rollout.AgentID]bool{}
		for _, v := range a.ViewsByGroup(now)["prod"] {
			out[v.ID] = v.Unreachable
		}
		return out
	}
	at3 := t0.Add(rollout.UnreachableAfter(aggInterval))
	if diff := cmp.Diff(map[rollout.AgentID]bool{quiet: false, chatty: false}, unreachable(at3)); diff != "" {
		t.Errorf("at exactly three intervals (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[rollout.AgentID]bool{quiet: true, chatty: false}, unreachable(cut)); diff != "" {
		t.Errorf("past three intervals (-want +got):\n%s", diff)
	}
	want := rollout.Counts{"1.0.0": {Count: 2, FailedCount: 1, Unreachable: 1, LowestID: quiet}}
	if diff := cmp.Diff(want, a.Counts(cut)["prod"]); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	a.Observe(erroredBeat(quiet, "prod", "1.0.0"), cut, false)
	if diff := cmp.Diff(map[rollout.AgentID]bool{quiet: false, chatty: false}, unreachable(cut)); diff != "" {
		t.Errorf("after its heartbeat (-want +got):\n%s", diff)
	}
}

// TestAggregatorSites: views carry the heartbeat's site, and SiteCounts
// breaks the counted agents of a group down by site, only for groups where
// one names a site.
func TestAggregatorSites(t *testing.T) {
	t.Parallel()
	a := heartbeat.NewAggregator(aggInterval, aggExpiry)
	sited := func(h *heartbeat.Heartbeat, site string) *heartbeat.Heartbeat { h.Site = site; return h }
	a.Observe(sited(beat(idN(1), "prod", "1.0.0"), "edge-a"), t0, true)
	a.Observe(sited(failedBeat(idN(2), "prod", "1.0.0"), "edge-b"), t0, true)
	a.Observe(beat(idN(3), "prod", "1.1.0"), t0, true)
	a.Observe(sited(beat(idN(4), "prod", "1.1.0"), "edge-a"), t0.Add(time.Minute), false) // not established yet
	a.Observe(beat(idN(5), "staging", "1.0.0"), t0, true)
	now := t0.Add(time.Minute)
	want := map[string]rollout.SiteCounts{"prod": {
		"edge-a":       {"1.0.0": {Count: 1}},
		"edge-b":       {"1.0.0": {Count: 1, FailedCount: 1}},
		rollout.NoSite: {"1.1.0": {Count: 1}},
	}}
	if diff := cmp.Diff(want, a.SiteCounts(now)); diff != "" {
		t.Errorf("SiteCounts (-want +got):\n%s", diff)
	}
	for _, v := range a.Views("prod", now) {
		if want := map[rollout.AgentID]string{idN(1): "edge-a", idN(2): "edge-b"}[v.ID]; v.Site != want {
			t.Errorf("view of %s: site %q, want %q", v.ID, v.Site, want)
		}
	}
}

// The passes a controller makes over a million agents: the counts it writes
// every stats interval and the views every rollout pass decides on. Each
// holds the inventory's lock for its whole run, so heartbeats wait for it.
func BenchmarkAggregatePass1M(b *testing.B) {
	a := filledAggregator(b, 1_000_000)
	b.Run("CountsWithSites", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if c, _ := a.CountsWithSites(t0); len(c) != 3 {
				b.Fatalf("%d groups, want 3", len(c))
			}
		}
	})
	b.Run("Views", func(b *testing.B) { // what a rollout pass reads: each group, one at a time, in one slice
		b.ReportAllocs()
		var buf []rollout.AgentView
		for b.Loop() {
			n := 0
			for _, g := range []string{"canary", "prod", "staging"} {
				buf = a.AppendViews(buf[:0], g, t0)
				n += len(buf)
			}
			if n != 1_000_000 {
				b.Fatalf("%d views", n)
			}
			a.RolledBack(t0)
		}
	})
	b.Run("ViewsByGroup", func(b *testing.B) { // all at once, as before
		b.ReportAllocs()
		for b.Loop() {
			a.ViewsByGroup(t0)
		}
	})
}

// TestAggregatorPerApp: an app's inventory takes its own app's heartbeats
// only, gives them back with the app named, and drops an agent whose host
// says it left the app (until it heartbeats again without left).
func TestAggregatorPerApp(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	hb := func(app string, left bool) *heartbeat.Heartbeat {
		return &heartbeat.Heartbeat{V: 1, AgentID: "00000000-0000-4000-8000-00000000000a", Hostname: "h", Group: "prod",
			ActiveVersion: "1.0.0", At: at, App: app, Installer: "script", Left: left}
	}
	db := heartbeat.NewAppAggregator("db", time.Second, time.Hour)
	def := heartbeat.NewAggregator(time.Second, time.Hour)
	for _, a := range []*heartbeat.Aggregator{db, def} {
		a.Observe(hb("db", false), at, true)
	}
	if def.Len() != 0 {
		t.Errorf("the default app's inventory took app db's heartbeat: %d agents", def.Len())
	}
	got, ok := db.Lookup("00000000-0000-4000-8000-00000000000a", at)
	if !ok || got.Heartbeat != *hb("db", false) {
		t.Fatalf("app db's inventory gives back %+v (held %v), want %+v", got.Heartbeat, ok, *hb("db", false))
	}
	db.Observe(hb("db", true), at.Add(time.Second), false)
	if n := db.Len(); n != 0 {
		t.Errorf("after left: %d agents, want 0", n)
	}
	if c := db.Counts(at.Add(time.Second)); len(c) != 0 {
		t.Errorf("after left: counts %v, want none", c)
	}
	db.Observe(hb("db", false), at.Add(2*time.Second), false)
	if n := db.Len(); n != 1 {
		t.Errorf("back without left: %d agents, want 1", n)
	}
}
