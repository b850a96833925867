package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestReasonsNameHosts (issue 25 point 7): every halt and quarantine
// reason that names an agent gives its host name beside its id, as
// "ID (web-3)": an operator knows hosts by name, and the id alone sent
// them to agents ls to find which host it is.
func TestReasonsNameHosts(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	now := start.Add(time.Hour)
	ids := spreadIDs(10, 0.5)
	host := func(i int) string { return fmt.Sprintf("web-%d.dc1", i) }
	release := AgentView{ActiveVersion: v1, Rollback: true, RollbackFrom: v2, Error: "unhealthy", ErrorClass: FailureRelease,
		StartTime: start.Add(time.Minute), ErrorOutput: "panic: open /etc/app.conf: no such file"}
	artifact := AgentView{ActiveVersion: v1, Error: "checksum mismatch", ErrorClass: FailureArtifact, ErrorCause: "checksum mismatch",
		StartTime: start.Add(time.Minute)}
	timedOut := AgentView{ActiveVersion: v1, UpdatingTo: v2, StartTime: start.Add(time.Minute)}
	tests := []struct {
		name    string
		state   State
		failing []AgentView
		want    string
	}{
		{name: "canary failed", state: StateCanary, failing: []AgentView{release},
			want: "canary " + string(ids[0]) + " (web-0.dc1) failed: rolled back from 2.0.0"},
		{name: "canary timed out", state: StateCanary, failing: []AgentView{timedOut},
			want: "canary " + string(ids[0]) + " (web-0.dc1) timed out"},
		{name: "failure threshold", state: StateActive, failing: []AgentView{release, release, release, release},
			want: "first: " + string(ids[0]) + " (web-0.dc1) rolled back from 2.0.0"},
		{name: "bad artifact", state: StateActive, failing: []AgentView{artifact},
			want: "bad artifact of 2.0.0 to " + string(ids[0]) + " (web-0.dc1): error on 1.0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agents := onVersion(ids, v1)
			for i := range agents {
				agents[i].Hostname = host(i)
			}
			for i, a := range tt.failing {
				a.ID, a.Hostname = ids[i], host(i)
				agents[i] = a
			}
			cfg := testConfig()
			cfg.Groups[0].FailureThreshold = 10
			cfg.Groups[0].UpdateTimeout = Duration(20 * time.Minute)
			in := Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: startedStatus(tt.state, start, ids[0]),
				Agents: agents, Counts: CountAgents(agents), Now: now}
			st, evs := Next(in)
			if !st.Halted || !strings.Contains(st.HaltReason, tt.want) {
				t.Fatalf("halted %v %q, want a reason with %q; %s %s %+v", st.Halted, st.HaltReason, tt.want, st.State, st.Waiting, evs)
			}
			// The halt and its alert carry the agents, with why each
			// failed and its app's last lines.
			n := 0
			for _, e := range evs {
				if e.Kind != EventHalt && e.Kind != EventAlert {
					continue
				}
				n++
				if len(e.Agents) == 0 || e.Agents[0].ID != ids[0] || e.Agents[0].Hostname != host(0) ||
					e.Agents[0].Error != tt.failing[0].Error || e.Agents[0].Output != tt.failing[0].ErrorOutput {
					t.Errorf("%s event's agents: %+v, want %s (%s) first with its error and output", e.Kind, e.Agents, ids[0], host(0))
				}
				if len(e.Agents) > MaxEventAgents || len(e.Agents) != min(len(tt.failing), MaxEventAgents) {
					t.Errorf("%s event names %d agents, want %d", e.Kind, len(e.Agents), min(len(tt.failing), MaxEventAgents))
				}
			}
			if n != 2 {
				t.Errorf("%d halt and alert events, want 2", n)
			}
		})
	}

	t.Run("quarantine", func(t *testing.T) {
		var agents []AgentView
		for i := range 3 {
			a := rolledBack(ids[i], v2, v1, FailureRelease, now)
			a.Hostname = host(i)
			agents = append(agents, a)
		}
		got := QuarantineFrom(agents, 3, QuarantineList{}, now)
		if len(got) != 1 {
			t.Fatalf("%d quarantines, want 1", len(got))
		}
		for i := range 3 {
			if want := string(ids[i]) + " (" + host(i) + ")"; !strings.Contains(got[0].Reason, want) {
				t.Errorf("quarantine reason %q does not name %q", got[0].Reason, want)
			}
		}
		if err := (QuarantineList{V: 1, Versions: got}).Validate(); err != nil {
			t.Errorf("the quarantine is not valid: %v", err)
		}
	})
	t.Run("long host names stay within a quarantine reason", func(t *testing.T) {
		var agents []AgentView
		for i := range 8 {
			a := rolledBack(ids[i], v2, v1, FailureRelease, now)
			a.Hostname = strings.Repeat("h", 200) + fmt.Sprint(i)
			agents = append(agents, a)
		}
		got := QuarantineFrom(agents, 3, QuarantineList{}, now)
		if len(got) != 1 || len(got[0].Reason) > maxQuarantineText || !strings.Contains(got[0].Reason, " more") {
			t.Fatalf("quarantine %+v: want one, its reason within %d bytes, ending in how many more", got, maxQuarantineText)
		}
		if err := (QuarantineList{V: 1, Versions: got}).Validate(); err != nil {
			t.Errorf("the quarantine is not valid: %v", err)
		}
	})
}

// TestEventBoundedAgents: an event names at most MaxEventAgents agents,
// their errors cut and their outputs cut at the front (the last lines say
// why).
func TestEventBoundedAgents(t *testing.T) {
	t.Parallel()
	var agents []EventAgent
	for i := range 5 {
		agents = append(agents, EventAgent{ID: AgentID(fmt.Sprint(i)), Error: strings.Repeat("e", 2000),
			Output: strings.Repeat("o", 2000) + "LAST"})
	}
	e := Event{Reason: "x", Agents: agents}.Bounded()
	if len(e.Agents) != MaxEventAgents {
		t.Fatalf("%d agents, want %d", len(e.Agents), MaxEventAgents)
	}
	for _, a := range e.Agents {
		if len(a.Error) > MaxEventAgentError || len(a.Output) > MaxEventAgentOutput || !strings.HasSuffix(a.Output, "LAST") ||
			!strings.HasPrefix(a.Output, "…") {
			t.Errorf("agent %s: error %d bytes, output %d bytes %.10q…%q", a.ID, len(a.Error), len(a.Output), a.Output, a.Output[len(a.Output)-4:])
		}
	}
	if len(agents[0].Error) != 2000 {
		t.Error("Bounded changed its receiver's agents")
	}
}

// TestCanaryKeepsItsHostName: a canary is recorded with its host name
// when chosen, so that a halt on it once it has gone missing (its
// heartbeat expired) still names the host.
func TestCanaryKeepsItsHostName(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	ids := spreadIDs(10, 0.5)
	agents := onVersion(ids, v1)
	for i := range agents {
		agents[i].Hostname = fmt.Sprintf("web-%d.dc1", i)
	}
	cfg := testConfig()
	prev := startedStatus(StateUnstarted, start, "")
	prev.Progress, prev.Canaries = 0, nil
	in := Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents),
		Now: start.Add(time.Hour)}
	in.Spec.Schedule = ScheduleImmediate
	st, _ := Next(in)
	if st.State != StateCanary || len(st.Canaries) == 0 {
		t.Fatalf("state %s with %d canaries, want canary", st.State, len(st.Canaries))
	}
	for _, c := range st.Canaries {
		if !strings.HasPrefix(c.Hostname, "web-") {
			t.Errorf("canary %s recorded with host name %q", c.ID, c.Hostname)
		}
	}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}

	// Gone missing past health_timeout: the halt names the host.
	c := st.Canaries[0]
	var rest []AgentView
	for _, a := range agents {
		if a.ID != c.ID {
			rest = append(rest, a)
		}
	}
	// It had reported on the target (one that never did is replaced:
	// TestNextLostCanary).
	st.Canaries = []Canary{{ID: c.ID, Hostname: c.Hostname, MissingSince: start, ReportedAt: start}}
	in = Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: st, Agents: rest, Counts: CountAgents(rest),
		Now: start.Add(time.Hour)}
	got, _ := Next(in)
	if want := "canary " + string(c.ID) + " (" + c.Hostname + ") missing since"; !got.Halted || !strings.Contains(got.HaltReason, want) {
		t.Errorf("halted %v %q, want a reason with %q", got.Halted, got.HaltReason, want)
	}
}

// TestQuarantineEventNamesAgents: the quarantine's event names the first
// agents that rolled back, with why and their apps' last lines.
func TestQuarantineEventNamesAgents(t *testing.T) {
	now := mustTime(t, "2024-03-04T10:00:00Z")
	ids := spreadIDs(5, 0.5)
	var views []AgentView
	for i := range 5 {
		a := rolledBack(ids[i], v2, v1, FailureRelease, now)
		a.Hostname, a.ErrorOutput = fmt.Sprintf("web-%d", i), "panic: boom"
		views = append(views, a)
	}
	got := QuarantineFrom(views, 3, QuarantineList{}, now)
	if len(got) != 1 {
		t.Fatalf("%d quarantines", len(got))
	}
	agents := QuarantineAgents(got[0], views)
	if len(agents) != MaxEventAgents {
		t.Fatalf("%d agents, want %d", len(agents), MaxEventAgents)
	}
	for i, a := range agents {
		if a.ID != got[0].Agents[i] || !strings.HasPrefix(a.Hostname, "web-") || a.Output != "panic: boom" || a.Error == "" {
			t.Errorf("agent %d: %+v", i, a)
		}
	}
}
