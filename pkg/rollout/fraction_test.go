package rollout

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// fractionByDecode is Fraction as first written, with encoding/hex: the
// reference the allocation-free one must agree with.
func fractionByDecode(id AgentID) float64 {
	var b [8]byte
	src := string(id)
	if len(src) != 36 {
		return 0
	}
	if _, err := hex.Decode(b[:], []byte(src[0:8]+src[9:13]+src[14:18])); err != nil {
		return 0
	}
	return float64(binary.BigEndian.Uint64(b[:])>>11) / (1 << 53)
}

func TestFractionAgreesWithHexDecode(t *testing.T) {
	src := rand.NewChaCha8([32]byte{3})
	ids := []AgentID{"", "short", "00000000-0000-4000-8000-000000000000", "ffffffff-ffff-4fff-bfff-ffffffffffff",
		"1B4E28BA-2FA1-4D2E-883F-0016D3CCA427", "1b4e28ba-2fa1-4d2e-883f-0016d3cca427", "1b4e28bg-2fa1-4d2e-883f-0016d3cca427",
		"1b4e28ba+2fa1+4d2e-883f-0016d3cca427", "1b4e28ba-2fa1-4d2e-883f-0016d3cca42", "1b4e28ba-2fa1-4d2x-883f-0016d3cca427"}
	for range 10000 {
		id, _ := NewAgentID(src)
		ids = append(ids, id)
	}
	for _, id := range ids {
		if got, want := id.Fraction(), fractionByDecode(id); got != want {
			t.Errorf("%q.Fraction() = %v, want %v", id, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = ids[5].Fraction() }); n != 0 {
		t.Errorf("Fraction allocates %v times", n)
	}
}

// decideReference is Decide as written before the Decider: the reference
// a Decider's answers must agree with.
func decideReference(id AgentID, spec Spec, st GroupStatus, mode Mode) (version string, update bool) {
	if ValidateVersion(spec.TargetVersion) != nil {
		return "", false
	}
	v1, v2 := st.Hold(spec), spec.TargetVersion
	state, halted := st.State, st.Halted
	if st.TargetVersion != spec.TargetVersion || !state.Valid() {
		state, halted = StateUnstarted, false
	}
	switch lowestMode(mode, spec.Mode, st.Mode) {
	case ModeDisabled:
		return v2, false
	case ModePaused:
		switch {
		case halted:
			return v1, false
		case state == StateActive || state == StateDone:
			return v2, false
		}
		return v1, false
	}
	switch state {
	case StateCanary:
		if halted || !st.IsCanary(id) {
			return v1, false
		}
		return v2, true
	case StateActive:
		if halted {
			return v1, false
		}
		return v2, st.IsCanary(id) || id.Fraction() < st.Progress
	case StateDone:
		return v2, true
	case StateRolledBack:
		return v1, v1 != ""
	}
	return v1, false
}

// TestDeciderIsDecide: a Decider built once answers every agent as Decide
// did before it, in every state, mode, halt, target and hold.
func TestDeciderIsDecide(t *testing.T) {
	in := scaleGroup(2000)
	other := in.Spec
	other.TargetVersion = "3.0.0"
	bad := in.Spec
	bad.TargetVersion = "not a version"
	for _, spec := range []Spec{in.Spec, other, bad} {
		for _, state := range []State{StateUnstarted, StateCanary, StateActive, StateDone, StateRolledBack, "bogus"} {
			for _, mode := range []Mode{ModeEnabled, ModePaused, ModeDisabled} {
				for _, halted := range []bool{false, true} {
					for _, rejected := range [][]string{nil, {"1.0.0"}} {
						st := in.Prev.Clone()
						st.State, st.Halted, st.Mode, st.RejectedVersions = state, halted, mode, rejected
						for _, callerMode := range []Mode{ModeEnabled, ModePaused} {
							d := NewDecider(spec, st, callerMode)
							for _, a := range in.Agents {
								gv, gu := d.Decide(a.ID)
								wv, wu := decideReference(a.ID, spec, st, callerMode)
								if gv != wv || gu != wu {
									t.Fatalf("%s %s/%s/halted=%v rejected=%v %s: Decider (%q, %v), before (%q, %v)",
										spec.TargetVersion, state, mode, halted, rejected, a.ID, gv, gu, wv, wu)
								}
								if v, u := Decide(a.ID, spec, st, callerMode); v != wv || u != wu {
									t.Fatalf("Decide (%q, %v), before (%q, %v)", v, u, wv, wu)
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestCountAgentsIsAdd: the slice-tallied CountAgents gives what adding the
// agents one by one into the map gives, versions interleaved.
func TestCountAgentsIsAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	src := rand.NewChaCha8([32]byte{4})
	versions := []string{"", "1.0.0", "2.0.0", "3.0.0-rc.1", "none"}
	var agents []AgentView
	for range 5000 {
		id, _ := NewAgentID(src)
		a := AgentView{ID: id, ActiveVersion: versions[r.IntN(len(versions))], Unreachable: r.IntN(10) == 0}
		switch r.IntN(5) {
		case 0:
			a.Rollback, a.RollbackFrom = true, "2.0.0"
		case 1:
			a.Error, a.ErrorClass = "download: HTTP 503", FailureInfrastructure
		case 2:
			a.Error = "health check failed"
		case 3:
			a.UpdatingTo = "2.0.0"
		}
		agents = append(agents, a)
	}
	want := Counts{}
	for _, a := range agents {
		want.Add(a)
	}
	got := CountAgents(agents)
	if len(got) != len(want) {
		t.Fatalf("%d versions, want %d", len(got), len(want))
	}
	for v, w := range want {
		if got[v] != w {
			t.Errorf("%s: %+v, want %+v", v, got[v], w)
		}
	}
	if c := CountAgents(nil); c == nil || len(c) != 0 {
		t.Errorf("no agents: %v, want an empty map", c)
	}
}
