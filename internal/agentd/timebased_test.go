package agentd_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/agentd"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/releases"
)

// TestTimeBasedWindowClosedNoUpdate: under the time-based schedule an
// agent does not start an update once its group's window has closed by
// its own clock, even while the status the controller wrote still says
// active (the controller writes done at its next step), nor when the
// group is done; inside the window it updates. The one-shot "agentd
// update" and "agentd status" decide as the daemon does (Plan.DecideAt).
func TestTimeBasedWindowClosedNoUpdate(t *testing.T) {
	srv := natstest.Start(t)
	ctx := context.Background()
	fleet, err := kv.Ensure(ctx, srv.JetStream("admin"), kv.Options{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	spec.Schedule = rollout.ScheduleTimeBased
	if _, err := kv.Save(ctx, fleet.Plan, kv.KeySpec, spec, 0); err != nil {
		t.Fatal(err)
	}
	st := rollout.GroupStatus{V: 1, Group: "blue", State: rollout.StateUnstarted, TargetVersion: "1.1.0", StartVersion: "1.0.0",
		Mode: rollout.ModeEnabled, HealthTimeout: rollout.Duration(10 * time.Second), MinHealthyTime: rollout.Duration(100 * time.Millisecond)}
	rev, err := kv.Save(ctx, fleet.Plan, kv.GroupKey("blue"), st, 0)
	if err != nil {
		t.Fatal(err)
	}
	rel := releaseServer(t, map[string]releases.Behaviour{"1.0.0": releases.Good, "1.1.0": releases.Good})
	root := t.TempDir()
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "systemctl"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := runAgentd(t, "enable", "--nats", srv.URL(), "--group", "blue", "--url-template", releases.URLTemplate(rel.URL),
		"--root", root, "--bin-dir", filepath.Join(root, "bin"), "--systemd-unit", "app.service",
		"--systemctl", filepath.Join(fake, "systemctl"), "--log-level", "error")
	if code != 0 || !strings.Contains(out, "installed 1.0.0") {
		t.Fatalf("agentd enable: exit %d:\n%s", code, out)
	}
	common := []string{"--root", root, "--log-level", "error"}
	save := func(st rollout.GroupStatus) {
		t.Helper()
		if rev, err = kv.Update(ctx, fleet.Plan, kv.GroupKey("blue"), st, rev); err != nil {
			t.Fatal(err)
		}
	}
	status := func() agentd.StatusReport {
		t.Helper()
		out, code := runAgentd(t, append([]string{"status"}, common...)...)
		var rep agentd.StatusReport
		if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
			t.Fatalf("agentd status: exit %d, %v:\n%s", code, err, out)
		}
		return rep
	}

	// Active with everyone told to update, but the window closed a
	// minute ago.
	st.State, st.Progress, st.WindowCloses = rollout.StateActive, 1, time.Now().Add(-time.Minute)
	save(st)
	out, code = runAgentd(t, append([]string{"update"}, common...)...)
	if code != 0 || !strings.Contains(out, "nothing to do: installed 1.0.0, the plan says 1.1.0 without updating now") {
		t.Fatalf("agentd update after the window closed: exit %d:\n%s", code, out)
	}
	if rep := status(); rep.ShouldUpdate || rep.Desired != "1.1.0" {
		t.Errorf("status after the window closed: desired %s, should_update %v", rep.Desired, rep.ShouldUpdate)
	}

	// Done under time-based (the window closed): nobody is told.
	st.State = rollout.StateDone
	save(st)
	out, code = runAgentd(t, append([]string{"update"}, common...)...)
	if code != 0 || !strings.Contains(out, "nothing to do") {
		t.Fatalf("agentd update with the group done: exit %d:\n%s", code, out)
	}

	// Active again, its window open for another hour: it updates.
	st.State, st.WindowCloses = rollout.StateActive, time.Now().Add(time.Hour)
	save(st)
	if rep := status(); !rep.ShouldUpdate {
		t.Errorf("status inside the window: should_update false")
	}
	out, code = runAgentd(t, append([]string{"update"}, common...)...)
	if code != 0 || !strings.Contains(out, "installed 1.1.0") {
		t.Fatalf("agentd update inside the window: exit %d:\n%s", code, out)
	}
}

// TestPlanDecideAt: DecideAt is Decide, except that a time-based group's
// agents are not told to update after its window closed.
func TestPlanDecideAt(t *testing.T) {
	t.Parallel()
	closes := time.Date(2024, 3, 5, 2, 0, 0, 0, time.UTC)
	spec := rollout.DefaultSpec("1.0.0", "1.1.0")
	st := rollout.GroupStatus{V: 1, Group: "blue", State: rollout.StateActive, TargetVersion: "1.1.0", StartVersion: "1.0.0",
		Mode: rollout.ModeEnabled, Progress: 1, WindowCloses: closes}
	id := rollout.AgentID("0b000000-0000-4000-8000-000000000000")
	regular := agentd.Plan{Spec: spec, SpecRev: 1, Status: st, StatusRev: 1}
	spec.Schedule = rollout.ScheduleTimeBased
	timeBased := agentd.Plan{Spec: spec, SpecRev: 1, Status: st, StatusRev: 1}
	for _, tc := range []struct {
		name string
		p    agentd.Plan
		now  time.Time
		want bool
	}{
		{"time-based, in the window", timeBased, closes.Add(-time.Second), true},
		{"time-based, window closed", timeBased, closes, false},
		{"regular ignores window_closes", regular, closes.Add(time.Hour), true},
	} {
		if v, update := tc.p.DecideAt(id, tc.now); v != "1.1.0" || update != tc.want {
			t.Errorf("%s: DecideAt = %s %v, want 1.1.0 %v", tc.name, v, update, tc.want)
		}
	}
}
