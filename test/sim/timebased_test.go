package sim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/fleetwave/fleetwave/test/sim"
)

// TestTimeBasedWindows runs the time-based schedule on a compressed clock
// (one real second is two simulated hours): one group of 200 agents whose
// 6h window opens daily at 22:00 UTC, 3% in flight, so that no window is
// long enough. The real controller moves the group to done as each window
// closes (Teleport: active → done) and back to active as the next opens
// (done → active), no install of the target begins outside a window
// (agents check rollout.UpdateAllowed, as agentd does), and the in-flight
// bound holds.
func TestTimeBasedWindows(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four simulated days (about 50s)")
	}
	o := sim.Options{
		Agents: 200, Groups: 1, MaxInFlight: 3, CanaryCount: 2,
		InstallMin: 100 * time.Millisecond, InstallMax: 300 * time.Millisecond,
		ReconcileInterval: 50 * time.Millisecond, UpdateTimeout: 6 * time.Hour,
		Schedule: rollout.ScheduleTimeBased, Timezone: "UTC", TimeScale: 7200,
		Windows: []sim.Window{{StartHour: 22, Length: 6 * time.Hour}},
		SimFor:  4 * 24 * time.Hour, Timeout: 2 * time.Minute, Seed: 3, Log: natstest.Logger(t),
	}
	rep := run(t, o)
	if rep.Outcome != "done" && rep.Outcome != "sim-end" {
		t.Fatalf("outcome %s", rep.Outcome)
	}
	g := rep.Groups[0]
	if g.WindowCloses < 1 || g.WindowReopens < 1 {
		t.Errorf("window closed on the group %d times and reopened %d times, want both at least once", g.WindowCloses, g.WindowReopens)
	}
	if g.StartsOutsideWindow != 0 {
		t.Errorf("%d installs of the target began outside the window", g.StartsOutsideWindow)
	}
	if g.MaxInFlightActive > g.Bound {
		t.Errorf("%d agents updating at once, bound %d", g.MaxInFlightActive, g.Bound)
	}
	gc := rollout.DefaultGroup("g1")
	gc.StartHour, gc.WindowLength = 22, rollout.Duration(6*time.Hour)
	for _, tr := range g.Transitions {
		if (tr.To == rollout.StateCanary || tr.To == rollout.StateActive && tr.From == rollout.StateDone) && !gc.InWindow(tr.At, time.UTC) {
			t.Errorf("%s → %s at %s, outside the window", tr.From, tr.To, tr.At)
		}
		if tr.To == rollout.StateDone && strings.HasPrefix(tr.Reason, "window closed") && (gc.InWindow(tr.At, time.UTC) || tr.OnTarget >= 200) {
			t.Errorf("closed at %s with %d on the target: %s", tr.At, tr.OnTarget, tr.Reason)
		}
	}
	if rep.SimUntil.Sub(rep.SimFrom) < 24*time.Hour {
		t.Errorf("simulated %s → %s: less than a day", rep.SimFrom, rep.SimUntil)
	}
}

func TestParseWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want sim.Window
		err  string
	}{
		{in: "Mon,Wed@22+4h/5%", want: sim.Window{Days: []string{"Mon", "Wed"}, StartHour: 22, Length: 4 * time.Hour, MaxInFlight: 5}},
		{in: "*@3", want: sim.Window{Days: []string{"*"}, StartHour: 3}},
		{in: "Sat@23+6h", want: sim.Window{Days: []string{"Sat"}, StartHour: 23, Length: 6 * time.Hour}},
		{in: "Mon", err: "want DAYS@HOUR"},
		{in: "@3", err: "want DAYS@HOUR"},
		{in: "Mon@24", err: `hour "24": want 0-23`},
		{in: "Mon@3+soon", err: `length "soon"`},
		{in: "Mon@3+-1h", err: `length "-1h"`},
		{in: "Mon@3/12", err: "max_in_flight"},
	} {
		got, err := sim.ParseWindow(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseWindow(%q) = %v, want error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got.Days, ",") != strings.Join(tc.want.Days, ",") || got.StartHour != tc.want.StartHour ||
			got.Length != tc.want.Length || got.MaxInFlight != tc.want.MaxInFlight {
			t.Errorf("ParseWindow(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"Mon,Wed@22+4h/5%", "*@3", "Sat@23+6h", "@", "Mon@", "x@1+1h/1%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := sim.ParseWindow(s)
		if err != nil {
			return
		}
		if w.StartHour < 0 || w.StartHour > 23 || w.Length < 0 || len(w.Days) == 0 {
			t.Fatalf("ParseWindow(%q) = %+v", s, w)
		}
	})
}
