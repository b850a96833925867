package agentd

import (
	"testing"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// TestPlanApplyOrdersByRevision: republished messages and direct gets race;
// the revision, not arrival order, decides.
func TestPlanApplyOrdersByRevision(t *testing.T) {
	f := &PlanFollower{Group: "blue", Log: natstest.Logger(t)}
	spec := func(target string) []byte {
		return []byte(`{"v":1,"start_version":"1.0.0","target_version":"` + target + `"}`)
	}
	f.apply(kv.KeySpec, spec("1.2.0"), 7)
	f.apply(kv.KeySpec, spec("1.1.0"), 5) // older, arrives late
	f.apply(kv.KeySpec, spec("9.9.9"), 7) // same revision again
	f.apply(kv.KeySpec, []byte("{garbage"), 9)
	if p := f.Plan(); p.Spec.TargetVersion != "1.2.0" || p.SpecRev != 7 {
		t.Fatalf("plan %+v, want target 1.2.0 at revision 7", p)
	}
	f.apply(kv.GroupKey("blue"), []byte(`{"v":1,"group":"blue","target_version":"1.2.0","state":"active","progress":0.25}`), 3)
	f.apply(kv.GroupKey("blue"), []byte(`{"v":1,"group":"blue","target_version":"1.2.0","state":"canary","progress":0}`), 2)
	if p := f.Plan(); p.Status.State != "active" || p.StatusRev != 3 {
		t.Fatalf("status %+v at %d, want active at revision 3", p.Status, p.StatusRev)
	}
}
