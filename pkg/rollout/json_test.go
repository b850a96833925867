package rollout

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestJSONGolden pins the bus shapes of Config, Spec, GroupStatus and Event:
// snake_case, "v": 1, durations and percentages as strings. Run with -update
// after an intended change and review the diff.
func TestJSONGolden(t *testing.T) {
	at := time.Date(2024, 3, 5, 3, 0, 0, 0, time.UTC)
	status := GroupStatus{
		V: 1, Group: "prod", State: StateActive, Reason: "all 2 canaries healthy on 1.4.0 for min_healthy_time 5m", Since: at.Add(30 * time.Minute),
		Mode: ModeEnabled, TargetVersion: "1.4.0", StartVersion: "1.3.2", InitialCount: 432,
		Canaries: []Canary{
			{ID: "1b4e28ba-2fa1-4d2e-883f-0016d3cca427", HealthySince: at.Add(20 * time.Minute)},
			{ID: "9f0e28ba-2fa1-4d2e-883f-0016d3cca427", HealthySince: at.Add(20 * time.Minute)},
		},
		Progress: 0.532, FailedCount: 3, FailuresSince: at, StartedAt: at,
		JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime,
	}
	waiting := GroupStatus{
		V: 1, Group: "edge", State: StateUnstarted, Reason: "new target_version 1.4.0", Since: at, Mode: ModeEnabled,
		TargetVersion: "1.4.0", StartVersion: "1.3.2", Waiting: "window: next opens Tue 2024-03-05 22:00 CET (* 22:00-23:00 Europe/Berlin)",
		WaitingUntil: at.Add(18 * time.Hour), JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime,
	}
	awaiting := status
	awaiting.State, awaiting.Progress, awaiting.Reason = StateCanary, 0, "window open: starting with 432 agents, 2 canaries; approved by alice: CHG-1234"
	awaiting.AwaitingApproval = ApprovalWait{Stage: ApprovalAfterCanary, Since: at.Add(20 * time.Minute)}
	awaiting.Waiting = AwaitingText("prod", ApprovalAfterCanary)
	awaiting.Approvals = []Approval{{Stage: ApprovalStart, By: "alice", Reason: "CHG-1234", At: at.Add(-time.Minute)}}
	halted := status
	halted.FailedCount, halted.Halted, halted.HaltReason, halted.HaltedAt, halted.Alerted = 23, true, "23 agents failed 1.4.0, more than failure_threshold 5% of 432 (21.60); first: …", at.Add(time.Hour), true
	tests := []struct {
		name string
		v    any
		into any
	}{
		{"config_default", DefaultConfig(), &Config{}},
		{"spec", DefaultSpec("1.3.2", "1.4.0"), &Spec{}},
		{"status_active", status, &GroupStatus{}},
		{"status_waiting", waiting, &GroupStatus{}},
		{"status_halted", halted, &GroupStatus{}},
		{"status_awaiting_approval", awaiting, &GroupStatus{}},
		{"event_halt", newEvent("prod", EventHalt, StateActive, StateActive, halted.HaltReason, at.Add(time.Hour)), &Event{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.MarshalIndent(tt.v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", tt.name+".golden.json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", path, diff)
			}
			// And it reads back to the same value.
			if err := json.NewDecoder(bytes.NewReader(want)).Decode(tt.into); err != nil {
				t.Fatal(err)
			}
			back, err := json.MarshalIndent(tt.into, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), string(back)+"\n"); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}
