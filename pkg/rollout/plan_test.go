package rollout

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSpecJSON(t *testing.T) {
	var got Spec
	if err := json.Unmarshal([]byte(`{"v":1,"start_version":"1.2.3","target_version":"1.3.0"}`), &got); err != nil {
		t.Fatal(err)
	}
	want := Spec{V: 1, StartVersion: "1.2.3", TargetVersion: "1.3.0", Schedule: ScheduleRegular, Strategy: StrategyBackpressure, Mode: ModeEnabled}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Unmarshal (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, DefaultSpec("1.2.3", "1.3.0")); diff != "" {
		t.Errorf("DefaultSpec (-want +got):\n%s", diff)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"v":1,"start_version":"1.2.3","target_version":"1.3.0","schedule":"regular","strategy":"backpressure","mode":"enabled","critical":false}`
	if diff := cmp.Diff(wantJSON, string(b)); diff != "" {
		t.Errorf("Marshal (-want +got):\n%s", diff)
	}
	// Unknown fields are skipped (an older agent reading a newer spec).
	if err := json.Unmarshal([]byte(`{"v":1,"start_version":"1.2.3","target_version":"1.3.0","canary_budget":3}`), &got); err != nil {
		t.Errorf("Unmarshal with an unknown field: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Unmarshal with an unknown field (-want +got):\n%s", diff)
	}
	if err := json.Unmarshal([]byte(`{"critical":"yes"}`), &got); err == nil || !strings.Contains(err.Error(), "plan spec: critical") {
		t.Errorf("Unmarshal with a bad field: %v", err)
	}
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{name: "default", edit: func(*Spec) {}},
		{name: "downgrade is fine", edit: func(s *Spec) { s.TargetVersion = "1.0.0" }},
		{name: "same version is fine", edit: func(s *Spec) { s.TargetVersion = s.StartVersion }},
		{name: "grouped immediate critical", edit: func(s *Spec) { s.Strategy, s.Schedule, s.Critical = StrategyGrouped, ScheduleImmediate, true }},
		{name: "v", edit: func(s *Spec) { s.V = 0 }, want: "v 0"},
		{name: "start version", edit: func(s *Spec) { s.StartVersion = "v1.2.3" }, want: "start_version: invalid version \"v1.2.3\""},
		{name: "target version", edit: func(s *Spec) { s.TargetVersion = "" }, want: "target_version: invalid version: empty"},
		{name: "schedule", edit: func(s *Spec) { s.Schedule = "nightly" }, want: `schedule "nightly" must be regular, immediate or time-based`},
		{name: "strategy", edit: func(s *Spec) { s.Strategy = "yolo" }, want: `strategy "yolo" must be backpressure or grouped`},
		{name: "mode", edit: func(s *Spec) { s.Mode = "on" }, want: `mode "on" must be enabled, paused or disabled`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := DefaultSpec("1.2.3", "1.3.0")
			tt.edit(&s)
			err := s.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrBadSpec) {
				t.Fatalf("Validate() = %v, want ErrBadSpec containing %q", err, tt.want)
			}
		})
	}
}

func TestSpecDowngrade(t *testing.T) {
	tests := []struct {
		start, target string
		want          bool
	}{
		{"1.2.3", "1.3.0", false},
		{"1.3.0", "1.2.3", true},
		{"1.3.0", "1.3.0-rc.1", true},
		{"1.3.0", "1.3.0", false},
		{"", "1.3.0", false},
	}
	for _, tt := range tests {
		if got := DefaultSpec(tt.start, tt.target).Downgrade(); got != tt.want {
			t.Errorf("Downgrade(%s → %s) = %v, want %v", tt.start, tt.target, got, tt.want)
		}
	}
}

func TestPlanPredecessors(t *testing.T) {
	cfg := Config{V: 1, Groups: []GroupConfig{DefaultGroup("staging"), DefaultGroup("prod"), DefaultGroup("edge")}}
	cfg.Groups[2].DependsOn = []string{"staging", "prod"}
	staging := GroupStatus{V: 1, Group: "staging", State: StateDone}
	p := Plan{Spec: DefaultSpec("1.0.0", "1.1.0"), Groups: map[string]GroupStatus{"staging": staging}}
	if diff := cmp.Diff(map[string]GroupStatus{"staging": staging}, p.Predecessors(cfg, "edge")); diff != "" {
		t.Errorf("Predecessors(edge) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]GroupStatus{}, p.Predecessors(cfg, "staging")); diff != "" {
		t.Errorf("Predecessors(staging) (-want +got):\n%s", diff)
	}
}
