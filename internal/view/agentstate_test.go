package view_test

import (
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/view"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
)

// TestAgentStateFailureClass: an agent blocked by the host or the network,
// or refusing what the release site served, says so and why; a release
// failure reads as before.
func TestAgentStateFailureClass(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		hb   heartbeat.Heartbeat
		want string
	}{
		{"disk full", heartbeat.Heartbeat{Error: "install 2.0.0: fetch: not enough free space", ErrorClass: heartbeat.ClassInfrastructure, ErrorCause: "disk full"}, "blocked: disk full"},
		{"site down", heartbeat.Heartbeat{Error: "x", ErrorClass: heartbeat.ClassInfrastructure, ErrorCause: "download failed (HTTP 503)"}, "blocked: download failed (HTTP 503)"},
		{"infrastructure without cause", heartbeat.Heartbeat{Error: "x", ErrorClass: heartbeat.ClassInfrastructure}, "blocked: infrastructure"},
		{"blocked after an older rollback", heartbeat.Heartbeat{Error: "x", ErrorClass: heartbeat.ClassInfrastructure, ErrorCause: "disk full", Rollback: true, RollbackFrom: "1.5.0"}, "blocked: disk full"},
		{"checksum", heartbeat.Heartbeat{Error: "x", ErrorClass: heartbeat.ClassArtifact, ErrorCause: "checksum mismatch"}, "artifact: checksum mismatch"},
		{"release rolled back", heartbeat.Heartbeat{Error: "rolled back from 2.0.0: unhealthy", ErrorClass: heartbeat.ClassRelease, ErrorCause: "unhealthy", Rollback: true, RollbackFrom: "2.0.0"}, "rolled back from 2.0.0"},
		{"release error", heartbeat.Heartbeat{Error: "x", ErrorClass: heartbeat.ClassRelease, ErrorCause: "invalid release tree"}, "error"},
		{"older agent: no class", heartbeat.Heartbeat{Error: "x"}, "error"},
		{"updating wins", heartbeat.Heartbeat{Error: "x", ErrorClass: heartbeat.ClassInfrastructure, ErrorCause: "disk full", UpdatingTo: "2.0.0"}, "updating → 2.0.0"},
		{"ok", heartbeat.Heartbeat{}, "ok"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := view.AgentState(&tc.hb, now); got != tc.want {
				t.Errorf("AgentState = %q, want %q", got, tc.want)
			}
		})
	}
}
