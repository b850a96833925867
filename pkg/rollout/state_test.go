package rollout

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestGroupStatusValidate(t *testing.T) {
	good := func() GroupStatus {
		return GroupStatus{V: 1, Group: "prod", State: StateActive, Mode: ModeEnabled, TargetVersion: v2, StartVersion: v1,
			InitialCount: 10, Progress: 0.5, Canaries: []Canary{{ID: idAt(0.2)}}, HealthTimeout: DefaultHealthTimeout}
	}
	for _, tc := range []struct {
		name string
		edit func(*GroupStatus)
		want string // "" valid
	}{
		{"valid", func(*GroupStatus) {}, ""},
		{"unstarted before any valid spec", func(s *GroupStatus) {
			*s = GroupStatus{V: 1, Group: "prod", State: StateUnstarted, Reason: "waiting for a valid plan spec"}
		}, ""},
		{"done at progress 1", func(s *GroupStatus) { s.State, s.Progress = StateDone, 1 }, ""},
		{"zero value (a JSON object without our fields)", func(s *GroupStatus) { *s = GroupStatus{} }, "v 0"},
		{"v 2", func(s *GroupStatus) { s.V = 2 }, "v 2"},
		{"no group", func(s *GroupStatus) { s.Group = "" }, "group"},
		{"group not a subject token", func(s *GroupStatus) { s.Group = "a.b" }, "group"},
		{"unknown state", func(s *GroupStatus) { s.State = "halted" }, `state "halted"`},
		{"bad target", func(s *GroupStatus) { s.TargetVersion = "v2.0.0" }, "target_version"},
		{"bad start", func(s *GroupStatus) { s.StartVersion = "latest" }, "start_version"},
		{"unknown mode", func(s *GroupStatus) { s.Mode = "on" }, `mode "on"`},
		{"progress above 1", func(s *GroupStatus) { s.Progress = 1.01 }, "progress"},
		{"negative progress", func(s *GroupStatus) { s.Progress = -0.1 }, "progress"},
		{"negative failed count", func(s *GroupStatus) { s.FailedCount = -1 }, "failed_count"},
		{"negative health timeout", func(s *GroupStatus) { s.HealthTimeout = -1 }, "health_timeout"},
		{"bad canary id", func(s *GroupStatus) { s.Canaries = append(s.Canaries, Canary{ID: "host-1"}) }, "canaries[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := good()
			tc.edit(&st)
			err := st.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tc.want == "":
			case !errors.Is(err, ErrBadStatus) || !strings.Contains(err.Error(), tc.want):
				t.Errorf("err = %v, want ErrBadStatus saying %q", err, tc.want)
			}
		})
	}
}

// TestNextWritesValidStatuses: whatever Next returns passes Validate, even
// for a spec or config that is not valid. A controller skips a group whose
// stored status does not validate, so a status it wrote itself and could
// not read back would stop the group for good.
func TestNextWritesValidStatuses(t *testing.T) {
	now := mustTime(t, "2024-03-05T03:10:00Z")
	badCfg := testConfig()
	badCfg.Groups[0].StartHour = 24
	agents := onVersion(spreadIDs(10, 0.5), v1)
	prevs := []GroupStatus{
		{},
		{V: 1, Group: "staging", State: StateActive, TargetVersion: v2, StartVersion: v1, InitialCount: 10, Progress: 0.3},
		{V: 1, Group: "staging", State: StateCanary, TargetVersion: v2, StartVersion: v1, InitialCount: 10,
			Canaries: []Canary{{ID: agents[0].ID, MissingSince: now.Add(-time.Hour)}}},
		{V: 1, Group: "staging", State: StateDone, TargetVersion: "1.5.0", StartVersion: v1, Progress: 1},
	}
	for _, cfg := range []Config{testConfig(), badCfg} {
		for _, spec := range []Spec{DefaultSpec(v1, v2), {V: 1}} {
			for _, prev := range prevs {
				st, _ := Next(Input{Config: cfg, Group: "staging", Spec: spec, Prev: prev,
					Counts: CountAgents(agents), Agents: agents, Now: now})
				if err := st.Validate(); err != nil {
					t.Errorf("Next from %s (spec valid: %v, config valid: %v) wrote a status that does not validate: %v",
						prev.State, spec.Validate() == nil, cfg.Validate() == nil, err)
				}
			}
		}
	}
}
