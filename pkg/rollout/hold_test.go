package rollout

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestHoldAfterNewTarget is issue 13's rule: after a new target resets the
// groups, each answers (to its unstarted agents and its new hosts) the last
// version it completed, never one it halted on or was rolled back from, and
// the spec's start version only when it has no history. The statuses before
// the new target come from Next and the operator actions themselves; each
// case checks the reset status and Decide's answer both before the
// controller's reset (a stale status) and after it.
func TestHoldAfterNewTarget(t *testing.T) {
	const (
		old    = "1.1.0" // what the fleet ran before the first plan
		broken = "1.2.0" // the release that halts or is rolled back
		next   = "1.5.0" // the operator's next target
	)
	start := mustTime(t, "2024-03-05T03:00:00Z")
	cfg := testConfig()
	cfg.Groups = append(cfg.Groups, DefaultGroup("edge"))
	ids := spreadIDs(10, 0.5)

	// staging's canary rolls back from broken: Next halts staging.
	canaryStatus := GroupStatus{V: 1, Group: "staging", State: StateCanary, Since: start, Mode: ModeEnabled,
		TargetVersion: broken, StartVersion: old, InitialCount: 10, Canaries: []Canary{{ID: ids[2]}},
		FailuresSince: start, StartedAt: start, HealthTimeout: DefaultHealthTimeout, MinHealthyTime: DefaultMinHealthyTime}
	agents := onVersion(ids, old)
	agents[2] = AgentView{ID: ids[2], ActiveVersion: old, Rollback: true, RollbackFrom: broken, StartTime: start.Add(time.Minute)}
	halted, _ := Next(Input{Config: cfg, Group: "staging", Spec: DefaultSpec(old, broken), Prev: canaryStatus,
		Agents: agents, Counts: CountAgents(agents), Now: start.Add(20 * time.Minute)})
	if !halted.Halted || !cmp.Equal(halted.RejectedVersions, []string{broken}) {
		t.Fatalf("staging did not halt and reject %s: halted %v, rejected %v", broken, halted.Halted, halted.RejectedVersions)
	}
	rolledBack, _, err := Rollback(halted, "", start.Add(30*time.Minute))
	if err != nil || !cmp.Equal(rolledBack.RejectedVersions, []string{broken}) {
		t.Fatalf("rollback: %v, rejected %v", err, rolledBack.RejectedVersions)
	}
	activeNotHalted := canaryStatus
	activeNotHalted.State = StateActive
	done, _, err := MarkDone(activeNotHalted, "", start.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	unstarted := func(group, target string) GroupStatus {
		return newStatus(group, DefaultSpec(old, target), start, "new target_version "+target)
	}
	// legacy is a status written before hold_version existed.
	legacy := func(group string) GroupStatus {
		var st GroupStatus
		raw := `{"v":1,"group":"` + group + `","state":"unstarted","reason":"x","target_version":"` + broken + `","start_version":"` + old + `","halted":false,"initial_count":0,"progress":0,"failed_count":0,"alerted":false,"jitter_seconds":0,"health_timeout":"5m0s","min_healthy_time":"5m0s"}`
		if err := json.Unmarshal([]byte(raw), &st); err != nil || st.Validate() != nil {
			t.Fatalf("legacy status: %v %v", err, st.Validate())
		}
		return st
	}

	type group struct {
		name string
		prev GroupStatus // zero: no status
		// wantHold is what Decide answers the group's unstarted agents and
		// new hosts under the new spec; wantRejected its rejected list.
		wantHold     string
		wantRejected []string
	}
	tests := []struct {
		name string
		// spec is the new plan; start is what plan set wrote (the old
		// default, the previous target, in the halted cases).
		spec   Spec
		groups []group
	}{
		{
			name: "halted → new target", spec: DefaultSpec(broken, next),
			groups: []group{
				{"staging", halted, old, []string{broken}},
				{"prod", unstarted("prod", broken), old, nil},
			},
		},
		{
			name: "rolled back → new target", spec: DefaultSpec(broken, next),
			groups: []group{
				{"staging", rolledBack, old, []string{broken}},
				{"prod", unstarted("prod", broken), old, nil},
			},
		},
		{
			name: "partly done fleet → new target", spec: DefaultSpec(broken, next),
			groups: []group{
				{"staging", done, broken, nil},
				{"prod", func() GroupStatus { st := activeNotHalted; st.Group = "prod"; return st }(), old, nil},
				{"edge", legacy("edge"), old, nil},
			},
		},
		{
			name: "first plan", spec: DefaultSpec(old, broken),
			groups: []group{
				{"staging", GroupStatus{}, old, nil},
				{"prod", GroupStatus{}, old, nil},
			},
		},
		{
			// The operator forced the broken start (plan set --start 1.2.0
			// --force): a group with no history follows it, the group that
			// rejected it does not.
			name: "forced bad start for a group with no history", spec: DefaultSpec(broken, next),
			groups: []group{
				{"staging", halted, old, []string{broken}},
				{"edge", GroupStatus{}, broken, nil},
			},
		},
		{
			name: "a group with nothing left to hold keeps what it has", spec: DefaultSpec(broken, next),
			groups: []group{
				{"staging", func() GroupStatus { st := halted; st.StartVersion = broken; return st }(), "", []string{broken}},
			},
		},
	}
	now := start.Add(2 * time.Hour)
	newHost := idAt(0.01)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, g := range tt.groups {
				if v, update := Decide(newHost, tt.spec, g.prev, ModeEnabled); v != g.wantHold || update {
					t.Errorf("%s before the reset: Decide = (%q, %v), want (%q, false)", g.name, v, update, g.wantHold)
				}
				st, _ := Next(Input{Config: cfg, Group: g.name, Spec: tt.spec, Prev: g.prev, Now: now})
				if st.TargetVersion != tt.spec.TargetVersion || st.State != StateUnstarted {
					t.Fatalf("%s not reset: %+v", g.name, st)
				}
				if err := st.Validate(); err != nil {
					t.Errorf("%s: reset status not valid: %v", g.name, err)
				}
				if diff := cmp.Diff(g.wantRejected, st.RejectedVersions); diff != "" {
					t.Errorf("%s rejected_versions (-want +got):\n%s", g.name, diff)
				}
				if got := st.Hold(tt.spec); got != g.wantHold {
					t.Errorf("%s: Hold = %q (hold_version %q), want %q", g.name, got, st.HoldVersion, g.wantHold)
				}
				for _, id := range []AgentID{newHost, idAt(0.99)} {
					if v, update := Decide(id, tt.spec, st, ModeEnabled); v != g.wantHold || update {
						t.Errorf("%s after the reset: Decide(%s) = (%q, %v), want (%q, false)", g.name, id, v, update, g.wantHold)
					}
				}
				if installs := Act("", g.wantHold, false); installs != (g.wantHold != "") {
					t.Errorf("%s: a new host installs %v", g.name, installs)
				}
			}
		})
	}
}

// TestHoldRejectedLifecycle checks how a group's rejected versions are kept:
// a halt and a rollback add the target, a reset and a new target keep them,
// completing the version removes it, and the list is bounded.
func TestHoldRejectedLifecycle(t *testing.T) {
	now := mustTime(t, "2024-03-05T03:00:00Z")
	st := GroupStatus{V: 1, Group: "prod", State: StateCanary, TargetVersion: v2, StartVersion: v1, HoldVersion: "0.9.0",
		Halted: true, RejectedVersions: []string{v2}, Canaries: []Canary{{ID: idAt(0.5)}}}
	reset, _, err := Reset(st, "", now)
	if err != nil || reset.HoldVersion != "0.9.0" || !cmp.Equal(reset.RejectedVersions, []string{v2}) {
		t.Fatalf("reset lost the history: %v %+v", err, reset)
	}
	finished, _, err := MarkDone(reset, "", now)
	if err != nil || finished.RejectedVersions != nil {
		t.Errorf("mark-done kept %s rejected: %v %v", v2, err, finished.RejectedVersions)
	}
	if reset.RejectedVersions == nil {
		t.Error("mark-done changed its input")
	}
	var many GroupStatus
	for i := range MaxRejected + 3 {
		many.reject(fmt.Sprintf("1.0.%d", i))
	}
	if len(many.RejectedVersions) != MaxRejected || many.RejectedVersions[0] != "1.0.3" {
		t.Errorf("rejected not bounded to the newest %d: %v", MaxRejected, many.RejectedVersions)
	}
}

func TestValidateHoldFields(t *testing.T) {
	ok := GroupStatus{V: 1, Group: "prod", State: StateUnstarted, TargetVersion: v2, StartVersion: v1}
	tests := []struct {
		name string
		edit func(*GroupStatus)
		want string // "" for valid
	}{
		{"none", func(*GroupStatus) {}, ""},
		{"hold and rejected", func(st *GroupStatus) { st.HoldVersion, st.RejectedVersions = "0.9.0", []string{"1.5.0"} }, ""},
		{"bad hold", func(st *GroupStatus) { st.HoldVersion = "v0.9" }, "hold_version"},
		{"bad rejected", func(st *GroupStatus) { st.RejectedVersions = []string{"1.5"} }, "rejected_versions[0]"},
		{"twice", func(st *GroupStatus) { st.RejectedVersions = []string{"1.5.0", "1.5.0"} }, "listed twice"},
		{"too many", func(st *GroupStatus) {
			for i := range MaxRejected + 1 {
				st.RejectedVersions = append(st.RejectedVersions, fmt.Sprintf("1.5.%d", i))
			}
		}, "at most 10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := ok
			tt.edit(&st)
			err := st.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}
