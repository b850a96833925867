package rollout

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSelectCanaries(t *testing.T) {
	ids := spreadIDs(100, 0.5)
	agents := onVersion(ids, "1.0.0")
	tests := []struct {
		name   string
		agents []AgentView
		n      int
		want   []AgentID
	}{
		{name: "middle of each fifth", agents: agents, n: 5, want: []AgentID{ids[10], ids[30], ids[50], ids[70], ids[90]}},
		{name: "one is the median", agents: agents, n: 1, want: []AgentID{ids[50]}},
		{name: "none asked", agents: agents, n: 0, want: nil},
		{name: "fewer candidates than asked", agents: agents[:3], n: 5, want: []AgentID{ids[0], ids[1], ids[2]}},
		{name: "no agents", agents: nil, n: 5, want: []AgentID{}},
		{
			name: "agents on target and rolled back from it are not candidates",
			agents: []AgentView{
				{ID: ids[0], ActiveVersion: "2.0.0"},
				{ID: ids[1], ActiveVersion: "1.0.0", Rollback: true, RollbackFrom: "2.0.0"},
				{ID: ids[2], ActiveVersion: "1.0.0", Rollback: true, RollbackFrom: "1.5.0"},
				{ID: ids[3]},
			},
			n:    5,
			want: []AgentID{ids[2], ids[3]},
		},
		{name: "duplicates counted once", agents: append(onVersion(ids[:2], "1.0.0"), onVersion(ids[:2], "1.0.0")...), n: 5, want: []AgentID{ids[0], ids[1]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SelectCanaries(tt.agents, tt.n, "2.0.0")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("SelectCanaries (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSelectCanariesDeterministicAndSpread: the pick does not depend on the
// order agents are listed in, and with random ids lands in every slice of the
// id space.
func TestSelectCanariesDeterministicAndSpread(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	agents := make([]AgentView, 2000)
	for i := range agents {
		agents[i] = AgentView{ID: idAt(r.Float64()), ActiveVersion: "1.0.0"}
	}
	want := SelectCanaries(agents, 10, "2.0.0")
	for range 20 {
		r.Shuffle(len(agents), func(i, j int) { agents[i], agents[j] = agents[j], agents[i] })
		if diff := cmp.Diff(want, SelectCanaries(agents, 10, "2.0.0")); diff != "" {
			t.Fatalf("order changed the pick (-want +got):\n%s", diff)
		}
	}
	for i, id := range want {
		mid := (2*float64(i) + 1) / 20
		if f := id.Fraction(); math.Abs(f-mid) > 0.05 {
			t.Errorf("canary %d at %.3f, not in its tenth of the id space around %.2f", i, f, mid)
		}
	}
}
