package rollout

import (
	"strings"
	"testing"
	"time"
)

// TestNextFailureClasses (issue 15 point 1): only release failures (and
// errors from agents that do not classify) count toward failure_threshold
// and canary judging; an infrastructure failure the agent retries is not
// the release's fault; a bad artifact halts the group at once, whatever
// the threshold.
func TestNextFailureClasses(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	now := start.Add(time.Hour)
	ids := spreadIDs(10, 0.5)
	failing := func(class, cause string) AgentView {
		return AgentView{ActiveVersion: v1, Error: "install " + v2 + ": " + cause, ErrorClass: class, ErrorCause: cause, StartTime: start.Add(time.Minute)}
	}
	tests := []struct {
		name       string
		state      State
		threshold  Percent
		agent      AgentView // at index 0 (active) or the canary (canary)
		wantFailed int
		wantHalted string // a substring; "" for not halted
	}{
		{name: "active: an infrastructure failure is not a failure", state: StateActive, threshold: 5,
			agent: failing(FailureInfrastructure, "download failed (HTTP 503)")},
		{name: "active: a release failure halts at the threshold", state: StateActive, threshold: 5,
			agent: failing(FailureRelease, "unhealthy"), wantFailed: 1,
			wantHalted: "1 agents failed 2.0.0, more than failure_threshold 5% of 10"},
		{name: "active: an unclassified error counts as a release failure", state: StateActive, threshold: 5,
			agent: failing("", "x"), wantFailed: 1, wantHalted: "more than failure_threshold"},
		{name: "active: a bad artifact halts at once, below the threshold", state: StateActive, threshold: 50,
			agent: failing(FailureArtifact, "checksum mismatch"), wantFailed: 1,
			wantHalted: "the release site served a bad artifact of 2.0.0 to " + string(ids[0]) + ": error on 1.0.0 (artifact: checksum mismatch)"},
		{name: "active: rolled back from the target counts, whatever the class", state: StateActive, threshold: 5,
			agent: AgentView{ActiveVersion: v1, Rollback: true, RollbackFrom: v2, Error: "disk full", ErrorClass: FailureInfrastructure,
				StartTime: start.Add(time.Minute)},
			wantFailed: 1, wantHalted: "rolled back from 2.0.0"},
		{name: "canary: blocked by infrastructure, the canary waits", state: StateCanary, threshold: 50,
			agent: failing(FailureInfrastructure, "disk full")},
		{name: "canary: a bad artifact halts", state: StateCanary, threshold: 50,
			agent: failing(FailureArtifact, "signature does not verify"), wantFailed: 1, wantHalted: "(artifact: signature does not verify)"},
		{name: "canary: a release failure halts", state: StateCanary, threshold: 50,
			agent: failing(FailureRelease, "unhealthy"), wantFailed: 1, wantHalted: "canary " + string(ids[0]) + " failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := startedStatus(tt.state, start, ids[0])
			agents := onVersion(ids, v1)
			tt.agent.ID = ids[0]
			agents[0] = tt.agent
			cfg := testConfig()
			cfg.Groups[0].FailureThreshold = tt.threshold
			in := Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents), Now: now}
			st, _ := Next(in)
			if st.FailedCount != tt.wantFailed {
				t.Errorf("failed_count %d, want %d", st.FailedCount, tt.wantFailed)
			}
			if st.Halted != (tt.wantHalted != "") || !strings.Contains(st.HaltReason, tt.wantHalted) {
				t.Errorf("halted = %v %q, want %q", st.Halted, st.HaltReason, tt.wantHalted)
			}
		})
	}
}
