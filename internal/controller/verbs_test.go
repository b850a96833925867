package controller_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestRunSkipCanariesThroughController is issue 28 point 5 end to end: a
// real controller on a real bus with real agents, and the real fleetctl
// binary. dev and prod (prod depends on dev), their windows closed today;
// "fleetctl run --group prod --skip-canaries --reason R" makes the
// controller start prod straight in active (one transition unstarted →
// active naming R, no canary state, no canaries), its agents are told to
// update and do; then "fleetctl rollback --all" rolls prod back (dev,
// unstarted, is skipped) and the controller keeps it rolled back.
func TestRunSkipCanariesThroughController(t *testing.T) {
	f := newFixture(t)
	events := f.subscribeEvents()
	cfg := rollout.DefaultConfig()
	cfg.Groups = nil
	closed := f.clk.Now().UTC().Add(72 * time.Hour).Weekday().String()[:3] // a window three days away
	for _, name := range []string{"dev", "prod"} {
		g := rollout.DefaultGroup(name)
		g.Days, g.CanaryCount, g.MinHealthyTime, g.MaxInFlight = []string{closed}, 2, 0, 100
		cfg.Groups = append(cfg.Groups, g)
	}
	if _, err := kv.Save(f.ctx, f.fleet.Config, kv.KeyConfig, cfg, 0); err != nil {
		t.Fatal(err)
	}
	rc := f.startController("c1")
	for range 3 {
		f.startAgent("dev", "1.0.0", false)
		f.startAgent("prod", "1.0.0", false)
	}
	f.waitHeard(rc.c, time.Time{})
	f.step(interval) // every agent established
	if _, err := kv.Save(f.ctx, f.fleet.Plan, kv.KeySpec, rollout.DefaultSpec("1.0.0", "2.0.0"), 0); err != nil {
		t.Fatal(err)
	}
	var state *kv.State
	round := func() {
		t.Helper()
		f.advance(reconcileEvery)
		natstest.Eventually(t, waitLong, func() error {
			var err error
			if state, err = f.fleet.ReadState(f.ctx); err != nil {
				return err
			}
			for _, g := range []string{"dev", "prod"} {
				if st, ok := state.Groups[g]; !ok || st.Value.TargetVersion != "2.0.0" {
					return fmt.Errorf("group %s has no status for 2.0.0 yet", g)
				}
			}
			return nil
		})
		if f.obey(state) > 0 {
			f.waitVersions(rc)
		}
	}
	round()
	if prod := state.Groups["prod"].Value; prod.State != rollout.StateUnstarted || prod.Waiting == "" {
		t.Fatalf("prod is %s waiting %q: want unstarted, waiting", prod.State, prod.Waiting)
	}

	bin := filepath.Join(t.TempDir(), "fleetctl")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/fleetwave/fleetwave/cmd/fleetctl").CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/fleetctl: %v\n%s", err, out)
	}
	fleetctl := func(args ...string) (string, string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "NATS_URL=" + f.srv.URL(), "FLEETCTL_ACTOR=alice"}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		_ = cmd.Run()
		return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
	}
	reason := "INC-77: the fix must reach prod now"
	if stdout, stderr, code := fleetctl("run", "--group", "prod", "--skip-canaries", "--reason", reason); code != 0 {
		t.Fatalf("fleetctl run --skip-canaries: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for i := 0; i < 10 && state.Groups["prod"].Value.State != rollout.StateDone; i++ {
		round()
	}
	prod := state.Groups["prod"].Value
	if prod.State != rollout.StateDone || len(prod.Canaries) != 0 || prod.SkipCanaries != reason {
		t.Fatalf("prod is %s with %d canaries, skip_canaries %q: want done without canaries, the reason kept", prod.State, len(prod.Canaries), prod.SkipCanaries)
	}
	if got := events.transitions("prod"); fmt.Sprint(got) != "[→unstarted unstarted→active active→done]" {
		t.Errorf("prod transitions %v, want →unstarted, unstarted→active, active→done (no canary state)", got)
	}
	var start *rollout.Event
	events.mu.Lock()
	for i, ev := range events.events {
		if ev.Group == "prod" && ev.Kind == rollout.EventTransition && ev.To == rollout.StateActive {
			start = &events.events[i]
		}
	}
	events.mu.Unlock()
	if start == nil || !strings.Contains(start.Reason, "canaries skipped by an operator ("+reason+")") {
		t.Errorf("the transition to active does not name the operator's reason: %+v", start)
	}
	for _, ra := range f.live {
		want := "1.0.0"
		if ra.group == "prod" {
			want = "2.0.0"
		}
		if ra.version != want {
			t.Errorf("agent %s of %s runs %s, want %s", ra.agent.ID(), ra.group, ra.version, want)
		}
	}
	if dev := state.Groups["dev"].Value; dev.State != rollout.StateUnstarted {
		t.Errorf("dev is %s: the run of prod must not start it", dev.State)
	}

	stdout, stderr, code := fleetctl("rollback", "--all", "--reason", "INC-78: 2.0.0 corrupts the cache")
	if code != 0 || !strings.Contains(stdout, `group "prod": done → rolledback`) || !strings.Contains(stdout, `group "dev": skipped (unstarted)`) {
		t.Fatalf("fleetctl rollback --all: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for range 3 {
		round()
	}
	if prod := state.Groups["prod"].Value; prod.State != rollout.StateRolledBack {
		t.Errorf("prod is %s after rollback --all and three controller steps, want rolledback", prod.State)
	}
	for _, ra := range f.live {
		if ra.version != "1.0.0" {
			t.Errorf("agent %s of %s runs %s after the rollback, want 1.0.0", ra.agent.ID(), ra.group, ra.version)
		}
	}
}
