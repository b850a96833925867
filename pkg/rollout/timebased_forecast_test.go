package rollout

import (
	"testing"
	"time"
)

// TestForecastTimeBased: the forecast runs the time-based rules: prod
// starts in its own window without waiting for staging (wait_hours and
// depends_on ignored), is done when its 4h window closes with agents left,
// active again in its next window, and finishes there; each window it
// updates in is listed with what it reached.
func TestForecastTimeBased(t *testing.T) {
	t.Parallel()
	staging, prod := DefaultGroup("staging"), DefaultGroup("prod")
	staging.Days, staging.StartHour = []string{"Fri"}, 9
	prod.Days, prod.StartHour, prod.WindowLength, prod.WaitHours, prod.MaxInFlight, prod.CanaryCount = []string{"Mon", "Wed"}, 22, Duration(4*time.Hour), 2, 10, 2
	cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{staging, prod}}
	spec := DefaultSpec(v1, v2)
	spec.Schedule = ScheduleTimeBased
	now := mustTime(t, "2024-03-04T12:00:00Z") // Monday noon
	fc := Simulate(ForecastInput{Config: cfg, Spec: spec, Now: now, InstallTime: 25 * time.Minute,
		Counts: map[string]Counts{"staging": {v1: {Count: 10}}, "prod": {v1: {Count: 100}}}})
	var p, s GroupForecast
	for _, g := range fc.Groups {
		switch g.Group {
		case "prod":
			p = g
		case "staging":
			s = g
		}
	}
	if !p.Start.Equal(mustTime(t, "2024-03-04T22:00:00Z")) || !s.Start.Equal(mustTime(t, "2024-03-08T09:00:00Z")) {
		t.Fatalf("prod starts %s, staging %s: want prod Monday 22:00 before staging Friday 09:00", p.Start, s.Start)
	}
	if p.Outcome != OutcomeFinishes || len(p.Windows) != 2 {
		t.Fatalf("prod: %s in %d windows %+v, want finishes in 2", p.Outcome, len(p.Windows), p.Windows)
	}
	first, second := p.Windows[0], p.Windows[1]
	if !first.Closes.Equal(mustTime(t, "2024-03-05T02:00:00Z")) || !first.Done.Equal(first.Closes) || first.OnTarget <= 0 || first.OnTarget >= 100 {
		t.Errorf("first window %+v: want done at its close, Tue 02:00, part of the agents on the target", first)
	}
	if !second.From.Equal(mustTime(t, "2024-03-06T22:00:00Z")) || second.OnTarget != 100 || !second.Done.Before(second.Closes) || !p.Done.Equal(second.Done) {
		t.Errorf("second window %+v, group done %s: want Wednesday 22:00, all 100 on the target before it closes", second, p.Done)
	}
	if !fc.Done.Equal(s.Done) || fc.Done.IsZero() {
		t.Errorf("forecast done %s, want staging's %s (the last)", fc.Done, s.Done)
	}
}

// TestForecastWindowLength: under the regular schedule a group whose
// window opened two hours ago and lasts four starts now, not tomorrow.
func TestForecastWindowLength(t *testing.T) {
	t.Parallel()
	g := DefaultGroup("prod")
	g.StartHour, g.WindowLength = 10, Duration(4*time.Hour)
	cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "Europe/Berlin", Groups: []GroupConfig{g}}
	now := mustTime(t, "2024-03-04T11:00:00Z") // 12:00 CET
	fc := Simulate(ForecastInput{Config: cfg, Spec: DefaultSpec(v1, v2), Now: now, Counts: map[string]Counts{"prod": {v1: {Count: 20}}}})
	if got := fc.Groups[0].Start; !got.Equal(now) {
		t.Errorf("starts %s, want now %s (window 10:00-14:00 CET)", got, now)
	}
}

// TestForecastTimeBasedNoChainWarning: under time-based an empty group
// holds no other, and the forecast does not say it does.
func TestForecastTimeBasedNoChainWarning(t *testing.T) {
	t.Parallel()
	cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{DefaultGroup("a"), DefaultGroup("b")}}
	for _, tc := range []struct {
		schedule Schedule
		want     string
	}{
		{ScheduleRegular, "no agents counted: it does not start until some are present (fleetctl mark-done skips it), and the groups after it wait for it"},
		{ScheduleTimeBased, "no agents counted: it does not start until some are present (fleetctl mark-done skips it)"},
	} {
		spec := DefaultSpec(v1, v2)
		spec.Schedule = tc.schedule
		fc := Simulate(ForecastInput{Config: cfg, Spec: spec, Now: mustTime(t, "2024-03-04T12:00:00Z"), Counts: map[string]Counts{"b": {v1: {Count: 3}}}})
		if got := fc.Groups[0].Warnings; len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: warnings %q, want %q", tc.schedule, got, tc.want)
		}
	}
}
