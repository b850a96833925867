package httpfind

import (
	"errors"
	"testing"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// A group the config does not name is answered from its copy of the
// catch-all group's status, exactly as the catch-all's own hosts are; one
// without a copy (past the bound, or catch_all "-") is still unknown.
func TestFindFollowsTheCatchAll(t *testing.T) {
	spec := rollout.DefaultSpec("1.0.0", "2.0.0")
	done := rollout.GroupStatus{V: 1, Group: "prod", State: rollout.StateDone, Mode: rollout.ModeEnabled, TargetVersion: "2.0.0", StartVersion: "1.0.0", JitterSeconds: 7}
	p := &Plan{Spec: spec, HasSpec: true, Configured: []string{"staging", "prod"},
		Groups: map[string]rollout.GroupStatus{"prod": done, "lab": rollout.FollowStatus(done, "lab")}}
	id := rollout.AgentID("3b241101-e2bb-4255-8caf-4136c566a962")
	want, err := p.Find(id, "prod")
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Find(id, "lab")
	if err != nil || got != want || !got.Update || got.Version != "2.0.0" {
		t.Errorf("lab answered %+v, %v; want the catch-all's %+v", got, err, want)
	}
	if _, err := p.Find(id, "edge"); !errors.Is(err, ErrUnknownGroup) {
		t.Errorf("a group with no copy: %v, want ErrUnknownGroup", err)
	}
}
