package fleetctl

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestDescribeConfigChangeIssue28Settings: what config set and config
// apply print after a write names every setting of issue 28 that changed,
// also beside another change (the fallback diff only runs when nothing
// else did), and says what an omitted catch_all means.
func TestDescribeConfigChangeIssue28Settings(t *testing.T) {
	t.Parallel()
	decode := func(s string) rollout.Config {
		var c rollout.Config
		if err := json.Unmarshal([]byte(s), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	prev := decode(`{"v":1,"groups":[{"name":"canary"},{"name":"prod"}]}`)
	next := decode(`{"v":1,"mode":"paused","catch_all":"-","groups":[{"name":"canary"},
		{"name":"prod","rate":{"start":"10/min","factor":2,"max":"500/min"},"adaptive_in_flight":true,"selector":{"env":"prod"}}]}`)
	want := []string{
		"mode enabled → paused",
		"catch_all omitted (the last group, prod) → - (none)",
		`group "prod": rate none → {"start":"10/min","factor":2,"max":"500/min"}, adaptive_in_flight false → true, selector none → {"env":"prod"}`,
	}
	if diff := cmp.Diff(want, describeConfigChange(prev, next)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	back := describeConfigChange(next, decode(`{"v":1,"mode":"paused","catch_all":"canary","groups":[{"name":"canary"},
		{"name":"prod","rate":{"start":"10/min","factor":2,"max":"500/min"},"adaptive_in_flight":true,"selector":{"env":"prod"}}]}`))
	if diff := cmp.Diff([]string{"catch_all - (none) → canary"}, back); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
