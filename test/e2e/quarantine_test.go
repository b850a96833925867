package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/proctest"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestQuarantineEndToEnd is issue 15's "three agents in different groups
// roll back from V" with real agentd processes, real releases and the
// controller on a secured bus (its own credentials write the quarantine):
// groups a, b and c each roll 1.2.0 (a release that crashes) out to one
// canary, which rolls back; the third rollback quarantines 1.2.0
// fleet-wide, so d, still unstarted behind c, halts as well; "fleetctl plan
// set --target 1.2.0" is refused; a new host of d and one of a install the
// last good version, 1.1.0, and never download 1.2.0; "fleetctl quarantine
// ls" and "history" show it.
// fourGroups are a, b and c, each on its own, and d after c: one canary
// each, 50% in flight.
func fourGroups() []rollout.GroupConfig {
	var groups []rollout.GroupConfig
	for _, n := range []string{"a", "b", "c", "d"} {
		g := groupConfig(n, 1, 50)
		g.DependsOn = []string{}
		if n == "d" {
			g.DependsOn = []string{"c"}
		}
		groups = append(groups, g)
	}
	return groups
}

func TestQuarantineEndToEnd(t *testing.T) {
	cfg := rollout.DefaultConfig()
	cfg.Groups = fourGroups()
	f := startFleet(t, map[string]int{"a": 2, "b": 2, "c": 2, "d": 2}, 0, func(f *fleet) {
		f.setConfig(cfg)
		// Baseline: every new host installs 1.1.0.
		f.setSpec(func(s *rollout.Spec) { s.StartVersion, s.TargetVersion = "1.1.0", "1.1.0" })
	})
	f.waitDone("1.1.0", 2*time.Minute)

	t0 := f.setSpec(func(s *rollout.Spec) { s.StartVersion, s.TargetVersion = "1.1.0", "1.2.0" })
	var q rollout.Quarantine
	natstest.Eventually(t, 2*time.Minute, func() error {
		e, err := f.kv.ReadQuarantine(f.ctx)
		if err != nil {
			return err
		}
		var ok bool
		if q, ok = e.Value.Lookup("1.2.0"); !ok {
			return fmt.Errorf("1.2.0 not quarantined yet (%d versions)", len(e.Value.Versions))
		}
		return nil
	})
	if q.By != rollout.QuarantineByController || q.AgentCount != 3 || len(q.Agents) != 3 {
		t.Errorf("quarantine %+v: want by controller, 3 agents", q)
	}
	// The three are the canaries of a, b and c, each rolled back.
	last := f.lastBeats()
	groupsOf := map[string]bool{}
	for _, id := range q.Agents {
		hb := last[id]
		groupsOf[hb.Group] = true
		if !hb.Rollback || hb.RollbackFrom != "1.2.0" || hb.ActiveVersion != "1.1.0" {
			t.Errorf("quarantining agent %s: %+v", id, hb)
		}
	}
	if len(groupsOf) != 3 {
		t.Errorf("the agents come from groups %v, want 3 different ones", groupsOf)
	}
	// Every group rolling 1.2.0 halts; d before it ever started.
	natstest.Eventually(t, time.Minute, func() error {
		st := f.statuses()
		for _, g := range []string{"a", "b", "c", "d"} {
			if s := st[g]; !s.Halted || s.TargetVersion != "1.2.0" {
				return fmt.Errorf("group %s: %s on %s, halted %t", g, s.State, s.TargetVersion, s.Halted)
			}
		}
		return nil
	})
	d := f.statuses()["d"]
	if d.State != rollout.StateUnstarted || !strings.Contains(d.HaltReason, "quarantined: 3 agents rolled back from 1.2.0 (release failures") {
		t.Errorf("group d: %s, halt reason %q", d.State, d.HaltReason)
	}
	for _, id := range q.Agents {
		if !strings.Contains(d.HaltReason, string(id)) {
			t.Errorf("d's halt reason does not name %s: %q", id, d.HaltReason)
		}
	}
	quarantined := false
	for _, ev := range f.eventsSince(t0) {
		if ev.Kind == rollout.EventQuarantine && ev.Group == "" && strings.Contains(ev.Reason, "1.2.0") {
			quarantined = true
		}
	}
	if !quarantined {
		t.Errorf("no fleet-wide quarantine event")
	}

	// New hosts get the last good version, by the bus and by find.
	downloads := f.rel.Downloads("1.2.0")
	newD, newA := f.startAgent("d", false), f.startAgent("a", false)
	natstest.Eventually(t, time.Minute, func() error {
		for _, a := range []*agent{newD, newA} {
			if v := f.status(a).ActiveVersion; v != "1.1.0" {
				return fmt.Errorf("new host %s of %s runs %q", a.id, a.group, v)
			}
		}
		return nil
	})
	for _, a := range []*agent{newD, newA} {
		if _, err := os.Stat(filepath.Join(a.root, "versions", "1.2.0")); !os.IsNotExist(err) {
			t.Errorf("new host %s has versions/1.2.0 (%v)", a.id, err)
		}
		// The find endpoint learns the config's groups within its config
		// refresh (5s): until then it answers them 404, never 1.2.0.
		client := &httpfind.Client{URLs: []string{f.findURL}}
		natstest.Eventually(t, 30*time.Second, func() error {
			ans, err := client.Find(f.ctx, a.id, a.group)
			switch {
			case errors.Is(err, httpfind.ErrUnknownGroup):
				return err
			case err != nil || ans.Version != "1.1.0" || ans.Update:
				t.Fatalf("find for new host %s of %s: %+v %v, want 1.1.0", a.id, a.group, ans, err)
			}
			return nil
		})
	}
	if n := f.rel.Downloads("1.2.0"); n != downloads {
		t.Errorf("1.2.0 downloaded %d more times after the quarantine", n-downloads)
	}

	// The operator's side: plan set refuses it, ls and history show it.
	fleetctl(t, f, 0, "plan", "set", "--target", "1.3.0")
	before, err := kv.Get[rollout.Spec](f.ctx, f.kv.Plan, kv.KeySpec)
	if err != nil {
		t.Fatal(err)
	}
	_, errOut := fleetctl(t, f, 1, "plan", "set", "--target", "1.2.0") // the fleet's state refuses it: exit 1 (issue 25)
	if !strings.Contains(errOut, "--target 1.2.0 is quarantined") || !strings.Contains(errOut, "--force") {
		t.Errorf("plan set --target 1.2.0: %q", errOut)
	}
	if after, err := kv.Get[rollout.Spec](f.ctx, f.kv.Plan, kv.KeySpec); err != nil || after.Revision != before.Revision {
		t.Errorf("refused plan set wrote the spec: %v", err)
	}
	out, _ := fleetctl(t, f, 0, "quarantine", "ls", "-o", "json")
	var rep struct {
		Versions []rollout.Quarantine `json:"versions"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Versions) != 1 || rep.Versions[0].Version != "1.2.0" {
		t.Errorf("quarantine ls -o json: %v\n%s", err, out)
	}
	out, _ = fleetctl(t, f, 0, "history")
	if !strings.Contains(out, "controller  quarantine  (fleet)") {
		t.Errorf("history lacks the quarantine:\n%s", out)
	}
	fleetctl(t, f, 0, "--actor", "alice", "quarantine", "rm", "1.2.0", "--reason", "fixed build")
	out, _ = fleetctl(t, f, 0, "history", "-o", "json")
	if !strings.Contains(out, `"command": "quarantine rm"`) || !strings.Contains(out, `"actor": "alice"`) || !strings.Contains(out, `"reason": "version 1.2.0 quarantined: 3 agents rolled back`) {
		t.Errorf("history -o json lacks alice's quarantine rm:\n%s", proctest.Tail(out, 2000))
	}
}
