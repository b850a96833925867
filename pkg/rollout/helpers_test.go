package rollout

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// idAt returns a valid agent id whose Fraction is f rounded down to a
// multiple of 2^-53. Tests use it to place agents exactly in the id space.
func idAt(f float64) AgentID {
	if f < 0 || f >= 1 {
		panic(fmt.Sprintf("idAt(%v): want [0,1)", f))
	}
	v := uint64(math.Floor(f*(1<<53))) << 11
	h := fmt.Sprintf("%016x", v)
	return AgentID(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-8000-000000000000")
}

// spreadIDs returns n ids evenly spread over the id space, shifted by
// offset/n (offset in [0,1)), in increasing order.
func spreadIDs(n int, offset float64) []AgentID {
	ids := make([]AgentID, n)
	for i := range ids {
		ids[i] = idAt((float64(i) + offset) / float64(n))
	}
	return ids
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := loadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// startedStatus is group staging's status in state (canary or active) for
// v1 → v2, started at start with 10 agents: in active, progress 0.2; in
// canary, progress 0 and canary the one canary.
func startedStatus(state State, start time.Time, canary AgentID) GroupStatus {
	st := GroupStatus{V: 1, Group: "staging", State: state, Since: start, Mode: ModeEnabled, TargetVersion: v2, StartVersion: v1,
		InitialCount: 10, Progress: 0.2, FailuresSince: start, StartedAt: start,
		JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime}
	if state == StateCanary {
		st.Progress = 0
		st.Canaries = []Canary{{ID: canary}}
	}
	return st
}

// onVersion returns agents with the given ids running v.
func onVersion(ids []AgentID, v string) []AgentView {
	out := make([]AgentView, len(ids))
	for i, id := range ids {
		out[i] = AgentView{ID: id, ActiveVersion: v}
	}
	return out
}

func TestIDAt(t *testing.T) {
	for _, f := range []float64{0, 0.25, 0.5, 0.999, 1 - math.Pow(2, -53)} {
		id := idAt(f)
		if _, err := ParseAgentID(string(id)); err != nil {
			t.Errorf("idAt(%v) = %q: %v", f, id, err)
		}
		if got := id.Fraction(); got != f {
			t.Errorf("idAt(%v).Fraction() = %v", f, got)
		}
	}
}
