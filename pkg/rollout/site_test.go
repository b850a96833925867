package rollout

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestValidateSite(t *testing.T) {
	tests := []struct {
		site string
		ok   bool
	}{
		{"edge-berlin", true},
		{"EdgeBerlin", true},
		{"dc1.eu_west-2", true},
		{"a", true},
		{strings.Repeat("a", MaxSiteLen), true},
		{"", false},
		{strings.Repeat("a", MaxSiteLen+1), false},
		{"-edge", false},
		{"edge.", false},
		{"edge berlin", false},
		{"edge*", false},
		{"edge>", false},
		{"(none)", false},
		{"(other)", false},
		{"é", false},
		{"a\nb", false},
	}
	for _, tt := range tests {
		err := ValidateSite(tt.site)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateSite(%q) = %v, want ok %v", tt.site, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrBadSite) {
			t.Errorf("ValidateSite(%q) = %v, does not wrap ErrBadSite", tt.site, err)
		}
	}
}

func TestDescribeSites(t *testing.T) {
	at := func(sites ...string) []AgentView {
		var out []AgentView
		for _, s := range sites {
			out = append(out, AgentView{Site: s})
		}
		return out
	}
	tests := []struct {
		name   string
		agents []AgentView
		want   string
	}{
		{"none", nil, ""},
		{"no agent names a site", at("", ""), ""},
		{"one site", at("edge-a"), " (site: edge-a 1)"},
		{"most first", at("edge-b", "edge-a", "edge-a", "edge-a"), " (sites: edge-a 3, edge-b 1)"},
		{"ties by name", at("edge-b", "edge-a"), " (sites: edge-a 1, edge-b 1)"},
		{"agents without a site", at("edge-a", "", ""), " (sites: no site 2, edge-a 1)"},
		{"capped", at("a", "a", "a", "a", "b", "b", "b", "c", "c", "d", "e"), " (sites: a 4, b 3, c 2, 2 more)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describeSites(tt.agents); got != tt.want {
				t.Errorf("describeSites = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCountSites(t *testing.T) {
	ids := spreadIDs(6, 0.5)
	tests := []struct {
		name   string
		agents []AgentView
		want   SiteCounts
	}{
		{name: "no sites: no breakdown", agents: []AgentView{{ID: ids[0], ActiveVersion: v1}}},
		{name: "by site and version, lowest id left out",
			agents: []AgentView{
				{ID: ids[0], ActiveVersion: v1, Site: "edge-a"},
				{ID: ids[1], ActiveVersion: v2, Site: "edge-a"},
				{ID: ids[2], ActiveVersion: v1, Site: "edge-a", Rollback: true, RollbackFrom: v2},
				{ID: ids[3], ActiveVersion: v1, Site: "edge-b", Unreachable: true},
				{ID: ids[4], ActiveVersion: v1, Site: "edge-b", UpdatingTo: v2},
				{ID: ids[5], Site: ""},
			},
			want: SiteCounts{
				"edge-a": {v1: {Count: 2, FailedCount: 1}, v2: {Count: 1}},
				"edge-b": {v1: {Count: 2, Unreachable: 1, Updating: 1}},
				NoSite:   {NoVersion: {Count: 1}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, CountSites(tt.agents)); diff != "" {
				t.Errorf("CountSites (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCountSitesCapped: past MaxSites, the smallest sites are counted
// under OtherSites, so a fleet_stats entry stays small.
func TestCountSitesCapped(t *testing.T) {
	var agents []AgentView
	for i := range MaxSites + 5 {
		n := 1
		if i < MaxSites {
			n = 2 // the kept ones are the biggest
		}
		for range n {
			agents = append(agents, AgentView{ActiveVersion: v1, Site: fmt.Sprintf("s%03d", i)})
		}
	}
	got := CountSites(agents)
	if len(got) != MaxSites+1 {
		t.Fatalf("%d sites, want %d and %s", len(got), MaxSites, OtherSites)
	}
	if diff := cmp.Diff(Counts{v1: {Count: 5}}, got[OtherSites]); diff != "" {
		t.Errorf("%s (-want +got):\n%s", OtherSites, diff)
	}
	if got["s000"][v1].Count != 2 || got[fmt.Sprintf("s%03d", MaxSites)] != nil {
		t.Errorf("kept the wrong sites: %v", got)
	}
}

// TestNextHaltNamesSites (issue 15 point 8): a halt names the sites its
// failures came from; with no sites it reads as before.
func TestNextHaltNamesSites(t *testing.T) {
	start := mustTime(t, "2024-03-05T03:00:00Z")
	now := start.Add(time.Hour)
	ids := spreadIDs(10, 0.5)
	release := func(site string) AgentView {
		return AgentView{ActiveVersion: v1, Rollback: true, RollbackFrom: v2, Error: "unhealthy", ErrorClass: FailureRelease,
			StartTime: start.Add(time.Minute), Site: site}
	}
	artifact := func(site string) AgentView {
		return AgentView{ActiveVersion: v1, Error: "checksum mismatch", ErrorClass: FailureArtifact, ErrorCause: "checksum mismatch",
			StartTime: start.Add(time.Minute), Site: site}
	}
	tests := []struct {
		name    string
		state   State
		failing []AgentView // at ids[0], ids[1], ...
		want    string      // a substring of the halt reason
		notWant string
	}{
		{name: "threshold: two sites", state: StateActive,
			failing: []AgentView{release("edge-a"), release("edge-b"), release("edge-a")},
			want:    "3 agents failed 2.0.0 (sites: edge-a 2, edge-b 1), more than failure_threshold"},
		{name: "threshold: one site", state: StateActive,
			failing: []AgentView{release("edge-a"), release("edge-a")},
			want:    "2 agents failed 2.0.0 (site: edge-a 2), more than"},
		{name: "threshold: no sites, as before", state: StateActive,
			failing: []AgentView{release(""), release("")},
			want:    "2 agents failed 2.0.0, more than", notWant: "site"},
		{name: "threshold: many sites, capped", state: StateActive,
			failing: []AgentView{release("a"), release("b"), release("c"), release("d"), release("e")},
			want:    "(sites: a 1, b 1, c 1, 2 more)"},
		{name: "bad artifact: the sites of every agent that got it", state: StateActive,
			failing: []AgentView{artifact("edge-b"), artifact("edge-a")},
			want:    "bad artifact of 2.0.0 to " + string(ids[0]) + " (sites: edge-a 1, edge-b 1): error on 1.0.0"},
		{name: "canary failed: its site", state: StateCanary,
			failing: []AgentView{release("edge-c")},
			want:    "canary " + string(ids[0]) + " failed: rolled back from 2.0.0 to 1.0.0 (site: edge-c 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := startedStatus(tt.state, start, ids[0])
			agents := onVersion(ids, v1)
			for i, a := range tt.failing {
				a.ID = ids[i]
				agents[i] = a
			}
			cfg := testConfig()
			cfg.Groups[0].FailureThreshold = 10
			in := Input{Config: cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Agents: agents, Counts: CountAgents(agents), Now: now}
			st, events := Next(in)
			if !st.Halted || !strings.Contains(st.HaltReason, tt.want) {
				t.Fatalf("halted %v %q, want a reason with %q", st.Halted, st.HaltReason, tt.want)
			}
			if tt.notWant != "" && strings.Contains(st.HaltReason, tt.notWant) {
				t.Errorf("halt reason %q has %q", st.HaltReason, tt.notWant)
			}
			found := false
			for _, e := range events {
				found = found || e.Kind == EventHalt && e.Reason == st.HaltReason
			}
			if !found {
				t.Errorf("no halt event with the reason; events %+v", events)
			}
		})
	}
}
