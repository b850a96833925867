package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestLabelSelectorMovesHostOnlyWhenNotUpdating (issue 28, point 8): a real
// agentd with a labels file, minted with --may-join '*', in group alpha;
// group beta has the selector pool=beta. Its label changes to pool=beta
// while it installs a release whose health check takes seconds: its
// heartbeats carry the new label at once, yet it stays in alpha as long as
// the install runs (no heartbeat in beta says updating), and moves to beta
// once the install is over and the selection held for --membership-settle;
// the controller then counts it in beta, not alpha. The label back to
// pool=alpha brings it back. Everything in operator mode: the controller
// publishes the groups key with its own creds, the agent reads it with its
// own, and nobody logs a permissions violation.
func TestLabelSelectorMovesHostOnlyWhenNotUpdating(t *testing.T) {
	alpha := groupConfig("alpha", 0, 100)
	beta := groupConfig("beta", 0, 100)
	beta.Selector = rollout.Selector{"pool": "beta"}
	beta.DependsOn = []string{} // its own rollout, at once
	f := startFleet(t, map[string]int{}, 0, func(f *fleet) {
		cfg := rollout.DefaultConfig()
		cfg.Groups = []rollout.GroupConfig{alpha, beta}
		f.setConfig(cfg)
		f.setSpec(func(s *rollout.Spec) { s.StartVersion, s.TargetVersion = "1.0.0", "1.0.0" })
	})
	natstest.Eventually(t, 30*time.Second, func() error {
		st := f.statuses()
		for _, g := range []string{"alpha", "beta"} {
			if _, ok := st[g]; !ok {
				return fmt.Errorf("no status for group %s yet", g)
			}
		}
		return nil
	})
	f.groups = []string{"alpha", "beta"}

	labels := filepath.Join(f.dir, "host.labels")
	writeLabels := func(content string) {
		t.Helper()
		if err := os.WriteFile(labels, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeLabels("# written by configuration management\npool=alpha\n")
	f.authFlags = []string{"--may-join", "*"}
	// A health check that takes 4 s: each install lasts long enough to
	// change the label in the middle of it.
	x := f.startAgent("alpha", false, "--labels-file", labels, "--membership-settle", "2s", "--health-command", "sleep 4")
	f.agents = append(f.agents, x)

	beat := func(cond func(hb heartbeat.Heartbeat) error) heartbeat.Heartbeat {
		t.Helper()
		var last heartbeat.Heartbeat
		natstest.Eventually(t, 60*time.Second, func() error {
			hb, ok := f.lastBeats()[x.id]
			if !ok {
				return fmt.Errorf("no heartbeat of %s yet", x.id)
			}
			last = hb
			return cond(hb)
		})
		return last
	}
	hb := beat(func(hb heartbeat.Heartbeat) error {
		if hb.Group != "alpha" || hb.ActiveVersion != "1.0.0" || hb.UpdatingTo != "" {
			return fmt.Errorf("group %s, on %q, updating to %q", hb.Group, hb.ActiveVersion, hb.UpdatingTo)
		}
		return nil
	})
	if v, _ := hb.Labels.Get("pool"); v != "alpha" {
		t.Fatalf("heartbeat labels %s, want pool=alpha among them", hb.Labels)
	}
	if v, _ := hb.Labels.Get("os"); v == "" {
		t.Errorf("heartbeat labels %s: no automatic os label", hb.Labels)
	}

	// The install of 1.1.0 begins; mid-install the label changes.
	f.setSpec(func(s *rollout.Spec) { s.TargetVersion = "1.1.0" })
	beat(func(hb heartbeat.Heartbeat) error {
		if hb.UpdatingTo != "1.1.0" {
			return fmt.Errorf("updating to %q, on %q", hb.UpdatingTo, hb.ActiveVersion)
		}
		return nil
	})
	changed := time.Now()
	writeLabels("pool=beta\n")
	beat(func(hb heartbeat.Heartbeat) error {
		if v, _ := hb.Labels.Get("pool"); v != "beta" {
			return fmt.Errorf("labels %s", hb.Labels)
		}
		return nil
	})
	// The label is heartbeated while the install still runs: the host
	// knew it belongs in beta, and stayed.
	seenMidInstall := false
	f.mu.Lock()
	for _, b := range f.beats {
		if v, _ := b.Labels.Get("pool"); b.AgentID == x.id && v == "beta" && b.UpdatingTo == "1.1.0" && b.Group == "alpha" {
			seenMidInstall = true
		}
	}
	f.mu.Unlock()
	if !seenMidInstall {
		t.Fatalf("no heartbeat with pool=beta during the install (the install ended before the label was read: make it slower)")
	}

	// Once installed, and the selection held, it moves.
	moved := beat(func(hb heartbeat.Heartbeat) error {
		if hb.Group != "beta" {
			return fmt.Errorf("group %s, on %q, updating to %q", hb.Group, hb.ActiveVersion, hb.UpdatingTo)
		}
		return nil
	})
	if moved.ActiveVersion != "1.1.0" || moved.UpdatingTo != "" {
		t.Errorf("first heartbeat in beta: on %q, updating to %q; want on 1.1.0, not updating", moved.ActiveVersion, moved.UpdatingTo)
	}
	f.mu.Lock()
	lastUpdating, firstBeta := -1, -1
	for i, b := range f.beats {
		if b.AgentID != x.id {
			continue
		}
		if b.UpdatingTo != "" {
			lastUpdating = i
		}
		if b.Group == "beta" && firstBeta < 0 {
			firstBeta = i
		}
		if b.Group == "beta" && b.UpdatingTo != "" {
			t.Errorf("heartbeat in beta while updating to %s: moved mid-install", b.UpdatingTo)
		}
	}
	f.mu.Unlock()
	if firstBeta < lastUpdating {
		t.Errorf("first heartbeat in beta (#%d) before the install's last (#%d)", firstBeta, lastUpdating)
	}
	if since := time.Since(changed); since < 2*time.Second {
		t.Errorf("moved %v after the label changed, before --membership-settle 2s", since)
	}
	uf, err := install.LoadUpdateFile(x.root)
	if err != nil {
		t.Fatal(err)
	}
	if uf.Spec.Group != "alpha" || uf.Spec.SelectedGroup != "beta" {
		t.Errorf("update.yaml: group %q, selected_group %q; want alpha (as given) and beta", uf.Spec.Group, uf.Spec.SelectedGroup)
	}

	// The controller counts it in beta, and no longer in alpha.
	natstest.Eventually(t, 30*time.Second, func() error {
		a, b := f.statusReport(t, "alpha"), f.statusReport(t, "beta")
		if a.Agents != 0 || b.Agents != 1 {
			return fmt.Errorf("status counts alpha %d, beta %d; want 0 and 1", a.Agents, b.Agents)
		}
		return nil
	})
	out, _ := fleetctl(t, f, 0, "agents", "ls")
	if !containsAll(out, "beta", "pool=beta") {
		t.Errorf("agents ls does not show the host in beta with its labels:\n%s", out)
	}

	// The label back: back to the group it was given.
	writeLabels("pool=alpha\n")
	beat(func(hb heartbeat.Heartbeat) error {
		if hb.Group != "alpha" {
			return fmt.Errorf("group %s", hb.Group)
		}
		return nil
	})
	natstest.Eventually(t, 30*time.Second, func() error {
		if uf, err := install.LoadUpdateFile(x.root); err != nil || uf.Spec.SelectedGroup != "" {
			return fmt.Errorf("selected_group %q (%v), want none", uf.Spec.SelectedGroup, err)
		}
		return nil
	})
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
