package rollout

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRetry (issue 15 point 7): fleetctl retry sets a retry request in the
// group status, keeping everything else; it is refused where it would
// change nothing or contradict the state, and says what to do instead.
func TestRetry(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	now := start.Add(2 * time.Hour)
	nowToken := "20240305T050000.000000000Z"
	a, b := idAt(0.25), idAt(0.5)
	base := func(s State, halted bool) GroupStatus {
		st := GroupStatus{V: 1, Group: "prod", State: s, Reason: "before", Since: start, Mode: ModeEnabled,
			TargetVersion: v2, StartVersion: v1, InitialCount: 100, Progress: 0.4, FailedCount: 3,
			FailuresSince: start, StartedAt: start, Canaries: []Canary{{ID: idAt(0.75)}}}
		if halted {
			st.Halted, st.HaltReason, st.HaltedAt = true, "too many failed", start.Add(time.Hour)
		}
		return st
	}
	withRetry := func(st GroupStatus, r RetryRequest) GroupStatus {
		st.Retry = r
		return st
	}
	tests := []struct {
		name    string
		prev    GroupStatus
		agents  []AgentID
		note    string
		want    RetryRequest // the status is prev with this request
		wantEv  string       // the event's reason
		wantErr []string     // parts of the refusal
	}{
		{name: "active, every agent", prev: base(StateActive, false), note: "release fixed",
			want:   RetryRequest{Token: nowToken, At: now, Note: "release fixed"},
			wantEv: "operator retry: release fixed (every agent that rolled back from 2.0.0 tries it once more)"},
		{name: "done, one agent", prev: base(StateDone, false), agents: []AgentID{a},
			want:   RetryRequest{Token: nowToken, Agents: []AgentID{a}, At: now},
			wantEv: "operator retry (agent " + string(a) + " tries 2.0.0 once more if it rolled back from it)"},
		{name: "canary, two agents, a duplicate dropped", prev: base(StateCanary, false), agents: []AgentID{b, a, b},
			want:   RetryRequest{Token: nowToken, Agents: []AgentID{b, a}, At: now},
			wantEv: "operator retry (2 named agents try 2.0.0 once more if they rolled back from it)"},
		{name: "a new request replaces the last one, with a later token",
			prev:   withRetry(base(StateActive, false), RetryRequest{Token: "20240305T040000.000000000Z", Agents: []AgentID{b}, At: now.Add(-time.Hour)}),
			want:   RetryRequest{Token: nowToken, At: now},
			wantEv: "operator retry (every agent that rolled back from 2.0.0 tries it once more)"},
		{name: "the token stays unique when the clock went back",
			prev:   withRetry(base(StateActive, false), RetryRequest{Token: "20240305T060000.000000000Z", At: now.Add(time.Hour)}),
			want:   RetryRequest{Token: "20240305T060000.000000001Z", At: now},
			wantEv: "operator retry (every agent that rolled back from 2.0.0 tries it once more)"},
		{name: "halted active refused, naming reset", prev: base(StateActive, true),
			wantErr: []string{`retry group "prod": it is halted (active)`, "fleetctl reset --group prod"}},
		{name: "halted canary refused", prev: base(StateCanary, true), wantErr: []string{"halted (canary)", "reset"}},
		{name: "unstarted refused", prev: base(StateUnstarted, false),
			wantErr: []string{"it is unstarted", "only a group in canary, active or done"}},
		{name: "rolled back refused", prev: base(StateRolledBack, false), wantErr: []string{"it is rolledback", "fleetctl run"}},
		{name: "a bad agent id refused", prev: base(StateActive, false), agents: []AgentID{"ABC"},
			wantErr: []string{"invalid agent id", `"ABC"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keep := tt.prev.Clone()
			got, ev, err := Retry(tt.prev, tt.agents, tt.note, now)
			if diff := cmp.Diff(keep, tt.prev); diff != "" {
				t.Errorf("Retry changed its input (-before +after):\n%s", diff)
			}
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("no error, want one containing %q", tt.wantErr)
				}
				for _, part := range tt.wantErr {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("error %q lacks %q", err, part)
					}
				}
				if diff := cmp.Diff(tt.prev, got); diff != "" {
					t.Errorf("a refused retry changed the status (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tt.prev.Clone()
			want.Retry = tt.want
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			wantEv := Event{V: 1, Group: "prod", Kind: EventOperator, From: tt.prev.State, To: tt.prev.State, Reason: tt.wantEv, At: now}
			if diff := cmp.Diff(wantEv, ev); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("the status Retry wrote is not valid: %v", err)
			}
		})
	}
	t.Run("too many agents refused", func(t *testing.T) {
		many := spreadIDs(MaxRetryAgents+1, 0.5)
		_, _, err := Retry(base(StateActive, false), many, "", now)
		if !errors.Is(err, ErrBadAction) || !strings.Contains(err.Error(), "at most 100") {
			t.Errorf("error %v, want ErrBadAction naming the limit", err)
		}
	})
}

func TestRetryIncludes(t *testing.T) {
	a, b := idAt(0.25), idAt(0.5)
	for _, tt := range []struct {
		name string
		r    RetryRequest
		id   AgentID
		want bool
	}{
		{"no request", RetryRequest{}, a, false},
		{"every agent", RetryRequest{Token: "t"}, a, true},
		{"named", RetryRequest{Token: "t", Agents: []AgentID{b, a}}, a, true},
		{"not named", RetryRequest{Token: "t", Agents: []AgentID{b}}, a, false},
	} {
		if got := tt.r.Includes(tt.id); got != tt.want {
			t.Errorf("%s: Includes = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestRetryEligible(t *testing.T) {
	ids := spreadIDs(5, 0.5)
	st := GroupStatus{TargetVersion: v2}
	agents := []AgentView{
		{ID: ids[0], ActiveVersion: v1, Rollback: true, RollbackFrom: v2},      // eligible
		{ID: ids[1], ActiveVersion: v2},                                        // on target
		{ID: ids[2], ActiveVersion: v1, Rollback: true, RollbackFrom: "1.5.0"}, // rolled back from another version
		{ID: ids[3], ActiveVersion: v1, Error: "unhealthy"},                    // failing, not rolled back: it may retry by itself
		{ID: ids[4], ActiveVersion: "", Rollback: true, RollbackFrom: v2},      // eligible (nothing installed before)
	}
	for _, tt := range []struct {
		name  string
		named []AgentID
		want  []AgentID
	}{
		{"every agent", nil, []AgentID{ids[0], ids[4]}},
		{"one named", []AgentID{ids[4]}, []AgentID{ids[4]}},
		{"named but not rolled back", []AgentID{ids[1], ids[3]}, nil},
		{"named but unknown", []AgentID{idAt(0.01)}, nil},
	} {
		if diff := cmp.Diff(tt.want, RetryEligible(st, agents, tt.named)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestRetryFailureCounting: Next keeps the retry request; an agent that
// retries (its rollback cleared, updating again) is no longer failed and is
// in flight; if it rolls back again it counts again; if it succeeds it is
// on target. A new target drops the request.
func TestRetryFailureCounting(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	now := start.Add(time.Hour)
	ids := spreadIDs(10, 0.5)
	rolledBack := func(id AgentID, at time.Time) AgentView {
		return AgentView{ID: id, ActiveVersion: v1, Rollback: true, RollbackFrom: v2, Error: "unhealthy", ErrorClass: FailureRelease, StartTime: at}
	}
	retry := RetryRequest{Token: "20240305T035000.000000000Z", Agents: []AgentID{ids[0]}, At: start.Add(50 * time.Minute)}
	prev := GroupStatus{V: 1, Group: "staging", State: StateActive, Since: start, Mode: ModeEnabled, TargetVersion: v2, StartVersion: v1,
		InitialCount: 10, Progress: 0.35, FailuresSince: start, StartedAt: start, FailedCount: 2, Retry: retry,
		JitterSeconds: 5, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime}
	tests := []struct {
		name       string
		first      AgentView // ids[0], the retried agent; ids[1] stays rolled back
		wantFailed int
		wantDone   bool
	}{
		{name: "before the retry: both rolled back count", first: rolledBack(ids[0], start.Add(time.Minute)), wantFailed: 2},
		{name: "retrying: no longer failed", first: AgentView{ID: ids[0], ActiveVersion: v1, UpdatingTo: v2, StartTime: now.Add(-time.Minute)},
			wantFailed: 1},
		{name: "retry cleared the rollback, install not begun yet: not failed", first: AgentView{ID: ids[0], ActiveVersion: v1, StartTime: start.Add(time.Minute)},
			wantFailed: 1},
		{name: "rolled back again: counts again", first: rolledBack(ids[0], now.Add(-time.Minute)), wantFailed: 2},
		{name: "succeeded: on target", first: AgentView{ID: ids[0], ActiveVersion: v2, StartTime: now.Add(-time.Minute)}, wantFailed: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agents := onVersion(ids, v1)
			agents[0], agents[1] = tt.first, rolledBack(ids[1], start.Add(2*time.Minute))
			cfg := testConfig()
			cfg.Groups[0].FailureThreshold = 50
			in := Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents), Now: now}
			st, _ := Next(in)
			if st.FailedCount != tt.wantFailed {
				t.Errorf("failed_count %d, want %d", st.FailedCount, tt.wantFailed)
			}
			if st.Halted || st.State != StateActive {
				t.Errorf("state %s halted %v (%s)", st.State, st.Halted, st.HaltReason)
			}
			if diff := cmp.Diff(retry, st.Retry); diff != "" {
				t.Errorf("Next did not keep the retry request (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("a new target drops the request", func(t *testing.T) {
		in := Input{Config: testConfig(), Group: "staging", Spec: DefaultSpec(v2, "3.0.0"), Prev: prev, Now: now}
		st, _ := Next(in)
		if st.TargetVersion != "3.0.0" || st.Retry.Token != "" {
			t.Errorf("target %s retry %+v, want the request gone with the old target", st.TargetVersion, st.Retry)
		}
	})
	t.Run("a canary reset drops it", func(t *testing.T) {
		c := prev.Clone()
		c.State = StateCanary
		st, _, err := Reset(c, "", now)
		if err != nil {
			t.Fatal(err)
		}
		if st.Retry.Token != "" {
			t.Errorf("retry %+v survived the canary phase's restart", st.Retry)
		}
	})
}

func TestValidateRetry(t *testing.T) {
	ok := GroupStatus{V: 1, Group: "prod", State: StateActive, TargetVersion: v2, StartVersion: v1}
	for _, tt := range []struct {
		name string
		r    RetryRequest
		want string // "" valid
	}{
		{"none", RetryRequest{}, ""},
		{"every agent", RetryRequest{Token: "20240305T035000.000000000Z", At: time.Now()}, ""},
		{"agents without a token", RetryRequest{Agents: []AgentID{idAt(0.5)}}, "retry: token missing"},
		{"a bad id", RetryRequest{Token: "t", Agents: []AgentID{"x"}}, "retry: agents[0]: invalid agent id"},
		{"an id twice", RetryRequest{Token: "t", Agents: []AgentID{idAt(0.5), idAt(0.5)}}, "is listed twice"},
		{"too many", RetryRequest{Token: "t", Agents: spreadIDs(MaxRetryAgents+1, 0.5)}, "101 agents, at most 100"},
		{"a huge token", RetryRequest{Token: strings.Repeat("t", 65)}, "longer than 64 bytes"},
	} {
		st := ok
		st.Retry = tt.r
		err := st.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (!errors.Is(err, ErrBadStatus) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want ErrBadStatus with %q", tt.name, err, tt.want)
		}
	}
}
