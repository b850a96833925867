package rollout

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fgroup is a group for the forecast tests: every setting at its default
// but those given, max_in_flight 100% unless set (one batch after the
// canaries, which keeps the hand computations short).
func fgroup(name string, days []string, hour int, set func(*GroupConfig)) GroupConfig {
	g := DefaultGroup(name)
	g.Days, g.StartHour, g.MaxInFlight = days, hour, 100
	if set != nil {
		set(&g)
	}
	return g
}

var weekdays5 = []string{"Mon", "Tue", "Wed", "Thu", "Fri"}

func canaries(n int) func(*GroupConfig) { return func(g *GroupConfig) { g.CanaryCount = n } }

// onV1 is n agents of every named group on v1.
func onV1(n int, groups ...string) map[string]Counts {
	out := map[string]Counts{}
	for _, g := range groups {
		out[g] = Counts{v1: {Count: n}}
	}
	return out
}

// groupSummary is what the tests compare of a GroupForecast: times in UTC
// (RFC 3339, "" for none) and waits as "kind from → until".
type groupSummary struct {
	Outcome            Outcome
	Start, Active, End string
	Waits              []string
}

func summarize(fc Forecast) map[string]groupSummary {
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	out := map[string]groupSummary{}
	for _, g := range fc.Groups {
		s := groupSummary{Outcome: g.Outcome, Start: ts(g.Start), Active: ts(g.Active), End: ts(g.Done)}
		if g.Outcome == OutcomeHalted {
			s.End = "halted " + ts(g.HaltedAt)
		}
		for _, w := range g.Waits {
			s.Waits = append(s.Waits, fmt.Sprintf("%s %s → %s", w.Kind, ts(w.From), ts(w.Until)))
		}
		out[g.Group] = s
	}
	return out
}

func TestForecastSchedules(t *testing.T) {
	spec := DefaultSpec(v1, v2)
	// Every case: install 2m, then the agent's own min_healthy_time (5m
	// unless set) before it reports the target, so an agent takes 7m; the
	// controller then watches canaries healthy for min_healthy_time (5m)
	// more. With max_in_flight 100% everyone else goes in one batch once
	// the canaries are through. A group with one canary and ten agents
	// thus takes 7m + 5m + 7m = 19m from its start to done.
	cases := []struct {
		name    string
		cfg     Config
		spec    Spec
		groups  map[string]GroupStatus
		counts  map[string]Counts
		now     string
		install time.Duration
		approve ApprovalHook
		quar    QuarantineList
		want    map[string]groupSummary
		// warnings: substrings of the forecast's warnings, and per group.
		warnings      []string
		groupWarnings map[string][]string
	}{
		{
			// dev: window Fri 16:00 UTC (now 15:30): starts 16:00, canary
			// on target 16:07, healthy 5m → active 16:12, the other nine
			// 16:12 + 7m → done 16:19.
			// prod (Mon–Fri 09:00): dev done Fri 16:19, after Friday's
			// window (09:00-10:00); no window Sat or Sun → Mon 11-30
			// 09:00, active 09:12, done 09:19.
			name: "Mon-Fri window across a weekend",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("dev", []string{"*"}, 16, canaries(1)),
				fgroup("prod", weekdays5, 9, canaries(1)),
			}},
			counts: onV1(10, "dev", "prod"),
			now:    "2026-11-27T15:30:00Z", // a Friday
			want: map[string]groupSummary{
				"dev": {Outcome: OutcomeFinishes, Start: "2026-11-27T16:00:00Z", Active: "2026-11-27T16:12:00Z", End: "2026-11-27T16:19:00Z",
					Waits: []string{"window 2026-11-27T15:30:00Z → 2026-11-27T16:00:00Z"}},
				"prod": {Outcome: OutcomeFinishes, Start: "2026-11-30T09:00:00Z", Active: "2026-11-30T09:12:00Z", End: "2026-11-30T09:19:00Z",
					Waits: []string{
						"predecessor 2026-11-27T15:30:00Z → 2026-11-27T16:19:00Z",
						"window 2026-11-27T16:19:00Z → 2026-11-30T09:00:00Z",
					}},
			},
		},
		{
			// a (daily 10:00) starts at now, no canaries: active at once,
			// all four told to update, 10:07 done.
			// b: wait_hours 2 → 12:07, past today's window (11:00-12:00)
			// → Wed 11:00, done 11:07.
			name: "wait_hours past the window into the next day's",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 10, canaries(0)),
				fgroup("b", []string{"*"}, 11, func(g *GroupConfig) { g.CanaryCount, g.WaitHours = 0, 2 }),
			}},
			counts: onV1(4, "a", "b"),
			now:    "2026-11-24T10:00:00Z", // a Tuesday
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeFinishes, Start: "2026-11-24T10:00:00Z", Active: "2026-11-24T10:00:00Z", End: "2026-11-24T10:07:00Z"},
				"b": {Outcome: OutcomeFinishes, Start: "2026-11-25T11:00:00Z", Active: "2026-11-25T11:00:00Z", End: "2026-11-25T11:07:00Z",
					Waits: []string{
						"predecessor 2026-11-24T10:00:00Z → 2026-11-24T10:07:00Z",
						"wait_hours 2026-11-24T10:07:00Z → 2026-11-24T12:07:00Z",
						"window 2026-11-24T12:07:00Z → 2026-11-25T11:00:00Z",
					}},
			},
		},
		{
			// Europe/Berlin, clocks go forward Sun 2026-03-29 02:00 CET →
			// 03:00 CEST. Now Sat 10:00 UTC = 11:00 CET, past Saturday's
			// 09:00-10:00 CET. Sunday 09:00 is CEST (UTC+2): 07:00 UTC, not
			// the 08:00 UTC of Saturday's window. a: start 07:00, active
			// 07:12, done 07:19 UTC.
			// b: wait_hours 24 → Mon 07:19 UTC = 09:19 CEST, inside
			// Monday's 09:00-10:00 CEST window: starts then, done 07:38.
			name: "time zone with DST change (spring forward)",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "Europe/Berlin", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 9, canaries(1)),
				fgroup("b", []string{"*"}, 9, func(g *GroupConfig) { g.CanaryCount, g.WaitHours = 1, 24 }),
			}},
			counts: onV1(10, "a", "b"),
			now:    "2026-03-28T10:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeFinishes, Start: "2026-03-29T07:00:00Z", Active: "2026-03-29T07:12:00Z", End: "2026-03-29T07:19:00Z",
					Waits: []string{"window 2026-03-28T10:00:00Z → 2026-03-29T07:00:00Z"}},
				"b": {Outcome: OutcomeFinishes, Start: "2026-03-30T07:19:00Z", Active: "2026-03-30T07:31:00Z", End: "2026-03-30T07:38:00Z",
					Waits: []string{
						"predecessor 2026-03-28T10:00:00Z → 2026-03-29T07:19:00Z",
						"wait_hours 2026-03-29T07:19:00Z → 2026-03-30T07:19:00Z",
					}},
			},
		},
		{
			// Clocks go back Sun 2026-10-25 03:00 CEST → 02:00 CET. Now Sat
			// 12:00 UTC (14:00 CEST, UTC+2). Sunday 09:00 is CET (UTC+1):
			// 08:00 UTC. Start 08:00, active 08:12, done 08:19.
			name: "time zone with DST change (fall back)",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "Europe/Berlin", Groups: []GroupConfig{
				fgroup("a", []string{"Sun"}, 9, canaries(1)),
			}},
			counts: onV1(10, "a"),
			now:    "2026-10-24T12:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeFinishes, Start: "2026-10-25T08:00:00Z", Active: "2026-10-25T08:12:00Z", End: "2026-10-25T08:19:00Z",
					Waits: []string{"window 2026-10-24T12:00:00Z → 2026-10-25T08:00:00Z"}},
			},
		},
		{
			// 02:00 on Sun 2026-03-29 does not exist in Berlin: the window
			// opens at the first instant after the jump, 03:00 CEST = 01:00
			// UTC. Done 01:19.
			name: "start hour skipped by DST opens after the jump",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "Europe/Berlin", Groups: []GroupConfig{
				fgroup("a", []string{"Sun"}, 2, canaries(1)),
			}},
			counts: onV1(10, "a"),
			now:    "2026-03-28T12:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeFinishes, Start: "2026-03-29T01:00:00Z", Active: "2026-03-29T01:12:00Z", End: "2026-03-29T01:19:00Z",
					Waits: []string{"window 2026-03-28T12:00:00Z → 2026-03-29T01:00:00Z"}},
			},
		},
		{
			// Ten agents, no canary, max_in_flight 20%: two in flight at a
			// time. Ids are spread at 0.05, 0.15, …, 0.95. Progress 0.2 at
			// 00:00 (0.05, 0.15 go), 0.4 at 00:07, 0.6 at 00:14, 0.8 at
			// 00:21, 1 at 00:28 (0.85, 0.95 go), all on target at 00:35.
			name: "backpressure batches",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 0, func(g *GroupConfig) { g.CanaryCount, g.MaxInFlight = 0, 20 }),
			}},
			counts: onV1(10, "a"),
			now:    "2026-11-23T00:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeFinishes, Start: "2026-11-23T00:00:00Z", Active: "2026-11-23T00:00:00Z", End: "2026-11-23T00:35:00Z"},
			},
		},
		{
			// a (Mondays 00:00) starts at now; its agents take 2m + 1h
			// (min_healthy_time 1h) → done 01:02, after Monday's window of
			// b (00:00-01:00): b waits a week, Mon 11-30 00:00, done 00:07:
			// 7d7m after a started, over the one-week limit. The config is
			// valid: its chain check counts waits and windows, not the
			// groups' own durations.
			name: "one-week limit",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"Mon"}, 0, func(g *GroupConfig) {
					g.CanaryCount, g.MinHealthyTime, g.UpdateTimeout = 0, Duration(time.Hour), Duration(2*time.Hour)
				}),
				fgroup("b", []string{"Mon"}, 0, canaries(0)),
			}},
			counts: onV1(2, "a", "b"),
			now:    "2026-11-23T00:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeFinishes, Start: "2026-11-23T00:00:00Z", Active: "2026-11-23T00:00:00Z", End: "2026-11-23T01:02:00Z"},
				"b": {Outcome: OutcomeFinishes, Start: "2026-11-30T00:00:00Z", Active: "2026-11-30T00:00:00Z", End: "2026-11-30T00:07:00Z",
					Waits: []string{
						"predecessor 2026-11-23T00:00:00Z → 2026-11-23T01:02:00Z",
						"window 2026-11-23T01:02:00Z → 2026-11-30T00:00:00Z",
					}},
			},
			warnings:      []string{"takes 168h7m from its first group's start", "longer than the one-week limit (168h)"},
			groupWarnings: map[string][]string{"b": {"done 168h7m after the first group started, over the one-week limit"}},
		},
		{
			// Three agents, canary_count 5: all three are canaries, on the
			// target at 12:07, healthy 5m → active at 12:12, and with
			// everyone on the target done in the same step.
			name: "fewer agents than canaries",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("lab", []string{"*"}, 12, nil),
			}},
			counts: onV1(3, "lab"),
			now:    "2026-11-23T12:00:00Z",
			want: map[string]groupSummary{
				"lab": {Outcome: OutcomeFinishes, Start: "2026-11-23T12:00:00Z", Active: "2026-11-23T12:12:00Z", End: "2026-11-23T12:12:00Z"},
			},
			groupWarnings: map[string][]string{"lab": {"3 agents, fewer than canary_count 5"}},
		},
		{
			// days [] never opens. Such a config is not valid, and the
			// controller moves no group until it is fixed: neither does
			// the forecast.
			name: "window never opens",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 0, nil),
				fgroup("b", []string{}, 9, nil),
			}},
			counts: onV1(10, "a", "b"),
			now:    "2026-11-23T12:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeWaits, Waits: []string{"hold 2026-11-23T12:00:00Z → "}},
				"b": {Outcome: OutcomeWaits, Waits: []string{"hold 2026-11-23T12:00:00Z → "}},
			},
			warnings:      []string{"the config is not valid", `group "b": days: empty`},
			groupWarnings: map[string][]string{"b": {"its window never opens"}},
		},
		{
			// No agents in a: it waits for agents for ever, b for a.
			name: "no agents",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 12, nil),
				fgroup("b", []string{"*"}, 12, nil),
			}},
			counts: onV1(10, "b"),
			now:    "2026-11-23T12:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeWaits, Waits: []string{"agents 2026-11-23T12:00:00Z → "}},
				"b": {Outcome: OutcomeWaits, Waits: []string{"predecessor 2026-11-23T12:00:00Z → "}},
			},
			groupWarnings: map[string][]string{"a": {"no agents counted"}},
		},
		{
			// a halted in canary: the forecast leaves it halted, and b
			// never starts. c depends on nothing and goes on (daily 12:00,
			// 19m).
			name: "halted group stops the groups after it",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 12, canaries(1)),
				fgroup("b", []string{"*"}, 12, canaries(1)),
				fgroup("c", []string{"*"}, 12, func(g *GroupConfig) { g.CanaryCount, g.DependsOn = 1, []string{} }),
			}},
			groups: map[string]GroupStatus{"a": {V: 1, Group: "a", State: StateCanary, TargetVersion: v2, StartVersion: v1,
				Halted: true, HaltReason: "canary x failed", HaltedAt: mustParse("2026-11-23T11:00:00Z"), StartedAt: mustParse("2026-11-23T10:00:00Z"),
				InitialCount: 10, Canaries: []Canary{{ID: idAt(0.5)}}}},
			counts: onV1(10, "a", "b", "c"),
			now:    "2026-11-23T12:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeHalted, Start: "2026-11-23T10:00:00Z", End: "halted 2026-11-23T11:00:00Z"},
				"b": {Outcome: OutcomeWaits, Waits: []string{"predecessor 2026-11-23T12:00:00Z → "}},
				"c": {Outcome: OutcomeFinishes, Start: "2026-11-23T12:00:00Z", Active: "2026-11-23T12:12:00Z", End: "2026-11-23T12:19:00Z"},
			},
		},
		{
			// a done at 09:00 for this target, b (daily 12:00, wait_hours
			// 1) may start from 10:00: at now, 12:00. Done 12:19.
			name: "done group",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 8, canaries(1)),
				fgroup("b", []string{"*"}, 12, func(g *GroupConfig) { g.CanaryCount, g.WaitHours = 1, 1 }),
			}},
			groups: map[string]GroupStatus{"a": {V: 1, Group: "a", State: StateDone, TargetVersion: v2, StartVersion: v1, Progress: 1,
				StartedAt: mustParse("2026-11-23T08:00:00Z"), DoneAt: mustParse("2026-11-23T09:00:00Z"), InitialCount: 10}},
			counts: map[string]Counts{"a": {v2: {Count: 10}}, "b": {v1: {Count: 10}}},
			now:    "2026-11-23T12:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeDone, Start: "2026-11-23T08:00:00Z", End: "2026-11-23T09:00:00Z"},
				"b": {Outcome: OutcomeFinishes, Start: "2026-11-23T12:00:00Z", Active: "2026-11-23T12:12:00Z", End: "2026-11-23T12:19:00Z"},
			},
		},
		{
			// The statuses are for an older target (done there): Next
			// resets them for v2 and the forecast starts from scratch.
			// a: daily 12:00, done 12:19.
			name: "statuses of another target are reset",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 12, canaries(1)),
			}},
			groups: map[string]GroupStatus{"a": {V: 1, Group: "a", State: StateDone, TargetVersion: "1.5.0", StartVersion: v1, Progress: 1,
				DoneAt: mustParse("2026-11-20T09:00:00Z"), InitialCount: 10}},
			counts: map[string]Counts{"a": {"1.5.0": {Count: 10}}},
			now:    "2026-11-23T12:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeFinishes, Start: "2026-11-23T12:00:00Z", Active: "2026-11-23T12:12:00Z", End: "2026-11-23T12:19:00Z"},
			},
		},
		{
			// Active at progress 0.2 since 11:00, 2 of 10 on the target
			// (ids 0.05, 0.15), max_in_flight 20%: progress 0.4 at 12:00
			// (0.25, 0.35 go), 0.6 at 12:07, 0.8 at 12:14, 1 at 12:21
			// (0.85, 0.95 go), all on target at 12:28.
			name: "group in progress carries on",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 11, func(g *GroupConfig) { g.CanaryCount, g.MaxInFlight = 0, 20 }),
			}},
			groups: map[string]GroupStatus{"a": {V: 1, Group: "a", State: StateActive, TargetVersion: v2, StartVersion: v1, Progress: 0.2,
				StartedAt: mustParse("2026-11-23T11:00:00Z"), FailuresSince: mustParse("2026-11-23T11:00:00Z"), InitialCount: 10, Alerted: true}},
			counts: map[string]Counts{"a": {v1: {Count: 8}, v2: {Count: 2}}},
			now:    "2026-11-23T12:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeFinishes, Start: "2026-11-23T11:00:00Z", End: "2026-11-23T12:28:00Z"},
			},
		},
		{
			// An install longer than update_timeout (30m): the canary,
			// told at 12:00, times out at 12:30 and the group halts, as
			// the controller would.
			name: "installs longer than update_timeout halt",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 12, canaries(1)),
			}},
			counts:  onV1(10, "a"),
			now:     "2026-11-23T12:00:00Z",
			install: 40 * time.Minute,
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeHalted, Start: "2026-11-23T12:00:00Z", End: "halted 2026-11-23T12:30:00Z"},
			},
		},
		{
			// The target is quarantined: Next halts every group that has
			// not finished it at its first step, started or not.
			name: "quarantined target halts",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 12, canaries(1)),
				fgroup("b", []string{"*"}, 12, canaries(1)),
			}},
			quar:   QuarantineList{V: 1, Versions: []Quarantine{{Version: v2, Reason: "bad", By: "alice", At: mustParse("2026-11-23T11:00:00Z")}}},
			counts: onV1(10, "a", "b"),
			now:    "2026-11-23T12:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeHalted, End: "halted 2026-11-23T12:00:00Z"},
				"b": {Outcome: OutcomeHalted, End: "halted 2026-11-23T12:00:00Z"},
			},
			warnings: []string{"target 2.0.0 is quarantined (bad)"},
		},
		{
			// A paused plan is forecast as if resumed now (with a warning).
			name: "paused rollout assumed resumed",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 12, canaries(1)),
			}},
			spec:   Spec{V: 1, StartVersion: v1, TargetVersion: v2, Schedule: ScheduleRegular, Strategy: StrategyBackpressure, Mode: ModePaused},
			counts: onV1(10, "a"),
			now:    "2026-11-23T12:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeFinishes, Start: "2026-11-23T12:00:00Z", Active: "2026-11-23T12:12:00Z", End: "2026-11-23T12:19:00Z"},
			},
			warnings: []string{"the rollout is paused (config enabled, plan paused): the forecast assumes it is resumed now"},
		},
		{
			// alert_after 10m: the one-canary group takes 19m, so an alert
			// is raised at 12:10 (the rollout continues).
			name: "alert_after passes",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 12, func(g *GroupConfig) { g.CanaryCount, g.AlertAfter = 1, Duration(10*time.Minute) }),
			}},
			counts: onV1(10, "a"),
			now:    "2026-11-23T12:00:00Z",
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeFinishes, Start: "2026-11-23T12:00:00Z", Active: "2026-11-23T12:12:00Z", End: "2026-11-23T12:19:00Z"},
			},
			groupWarnings: map[string][]string{"a": {"not done within alert_after 10m: an alert is raised at Mon 2026-11-23 12:10 UTC"}},
		},
		{
			// The hook sees every status after a step; this one plays an
			// approval gate in front of the window: a group waiting for
			// its window "awaits approval", and granting it is what
			// fleetctl run does. So a starts at now, 13:00, not 14:00;
			// done 13:19. The wait the hook granted is the approval's
			// (here Next's window wait; with a real gate, Next's
			// "awaiting approval").
			name: "approval assumed at the moment it is asked",
			cfg: Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{
				fgroup("a", []string{"*"}, 14, canaries(1)),
			}},
			counts: onV1(10, "a"),
			now:    "2026-11-23T13:00:00Z",
			approve: func(gc GroupConfig, st GroupStatus, now time.Time) (GroupStatus, bool) {
				if st.State != StateUnstarted || !strings.HasPrefix(st.Waiting, "window:") {
					return st, false
				}
				st.RunRequested = true
				return st, true
			},
			want: map[string]groupSummary{
				"a": {Outcome: OutcomeFinishes, Start: "2026-11-23T13:00:00Z", Active: "2026-11-23T13:12:00Z", End: "2026-11-23T13:19:00Z",
					Waits: []string{"approval 2026-11-23T13:00:00Z → 2026-11-23T13:00:00Z"}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := spec
			if tc.spec.V != 0 {
				s = tc.spec
			}
			in := ForecastInput{Config: tc.cfg, Spec: s, Groups: tc.groups, Counts: tc.counts,
				Now: mustParse(tc.now), InstallTime: 2 * time.Minute, Approve: tc.approve, Quarantine: tc.quar}
			if tc.install != 0 {
				in.InstallTime = tc.install
			}
			fc := Simulate(in)
			if diff := cmp.Diff(tc.want, summarize(fc)); diff != "" {
				t.Errorf("schedule (-want +got):\n%s", diff)
			}
			checkWarnings(t, "forecast", fc.Warnings, tc.warnings)
			for _, g := range fc.Groups {
				checkWarnings(t, "group "+g.Group, g.Warnings, tc.groupWarnings[g.Group])
			}
			if t.Failed() {
				b, _ := json.MarshalIndent(fc, "", "  ")
				t.Logf("forecast:\n%s", b)
			}
		})
	}
}

// checkWarnings fails unless every want is a substring of one of got, and
// every one of got is wanted.
func checkWarnings(t *testing.T, what string, got, want []string) {
	t.Helper()
	used := make([]bool, len(got))
	for _, w := range want {
		found := false
		for i, g := range got {
			if strings.Contains(g, w) {
				found, used[i] = true, true
			}
		}
		if !found {
			t.Errorf("%s: no warning contains %q; warnings: %q", what, w, got)
		}
	}
	for i, g := range got {
		if !used[i] {
			t.Errorf("%s: unexpected warning %q", what, g)
		}
	}
}

func mustParse(s string) time.Time {
	tm, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return tm
}

func TestForecastSaysApprovalAssumed(t *testing.T) {
	cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "Europe/Berlin", Groups: []GroupConfig{fgroup("a", []string{"*"}, 14, canaries(1))}}
	asked := 0
	fc := Simulate(ForecastInput{Config: cfg, Spec: DefaultSpec(v1, v2), Counts: onV1(10, "a"), Now: mustParse("2026-11-23T12:00:00Z"),
		Approve: func(gc GroupConfig, st GroupStatus, now time.Time) (GroupStatus, bool) {
			if gc.Name != "a" || st.Group != "a" {
				t.Errorf("hook called with group config %q and status %q", gc.Name, st.Group)
			}
			if st.State != StateUnstarted || st.RunRequested {
				return st, false
			}
			asked++
			st.RunRequested = true
			return st, true
		}})
	if asked != 1 {
		t.Errorf("approval granted %d times, want once", asked)
	}
	want := []ForecastWait{{Kind: WaitApproval, Reason: "approval assumed at Mon 2026-11-23 13:00 CET",
		From: mustParse("2026-11-23T12:00:00Z"), Until: mustParse("2026-11-23T12:00:00Z")}}
	if diff := cmp.Diff(want, fc.Groups[0].Waits); diff != "" {
		t.Errorf("waits (-want +got):\n%s", diff)
	}
}

// TestForecastAssumesRealApprovals: a group that asks for approval before
// it starts and after its canaries (the real gate of approval.go) is
// forecast as approved at once at both stages, and finishes; a status that
// awaits nothing is granted nothing.
func TestForecastAssumesRealApprovals(t *testing.T) {
	g := fgroup("a", []string{"*"}, 14, canaries(1))
	g.Approval = ApprovalGates{ApprovalStart, ApprovalAfterCanary}
	cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{g}}
	fc := Simulate(ForecastInput{Config: cfg, Spec: DefaultSpec(v1, v2), Counts: onV1(10, "a"), Now: mustParse("2026-11-23T12:00:00Z")})
	r := fc.Groups[0]
	if r.Outcome != OutcomeFinishes {
		t.Fatalf("outcome %s (%s), want finishes with both approvals assumed", r.Outcome, r.Reason)
	}
	approvals := 0
	for _, w := range r.Waits {
		if w.Kind == WaitApproval {
			approvals++
		}
	}
	if approvals != 2 {
		t.Errorf("waits %+v: %d approvals assumed, want 2 (start and after_canary)", r.Waits, approvals)
	}
	st := GroupStatus{V: 1, Group: "a", State: StateUnstarted, Waiting: "window: next opens …"}
	if got, ok := AssumeApproval(g, st, mustParse("2026-11-23T12:00:00Z")); ok || !cmp.Equal(got, st) {
		t.Errorf("AssumeApproval of a status awaiting nothing = %+v, %v; want it unchanged and false", got, ok)
	}
}

// TestForecastPassesMetricChecks: a group with a metric analysis check
// (count 3, every 10m) is forecast as its checks passing when due: it
// leaves canary only after three measurements, 20 minutes after the
// first, so its canary phase is at least 20 minutes longer than without
// the check, and it finishes.
func TestForecastPassesMetricChecks(t *testing.T) {
	g := fgroup("a", []string{"*"}, 14, canaries(1))
	cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{g}}
	now := mustParse("2026-11-23T12:00:00Z")
	plain := Simulate(ForecastInput{Config: cfg, Spec: DefaultSpec(v1, v2), Counts: onV1(10, "a"), Now: now}).Groups[0]
	cfg.AnalysisConfig = AnalysisConfig{PrometheusURL: "http://prometheus:9090", Analysis: []Check{{
		Name: "errors", Query: `max(app_error_rate{version="{{.Version}}"})`, Success: "< 0.01",
		Interval: Duration(10 * time.Minute), Count: 3, InconclusiveLimit: 5}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	checked := Simulate(ForecastInput{Config: cfg, Spec: DefaultSpec(v1, v2), Counts: onV1(10, "a"), Now: now}).Groups[0]
	if plain.Outcome != OutcomeFinishes || checked.Outcome != OutcomeFinishes {
		t.Fatalf("outcomes %s (%s) and with the check %s (%s), want both to finish", plain.Outcome, plain.Reason, checked.Outcome, checked.Reason)
	}
	if d, min := checked.Active.Sub(plain.Active), 20*time.Minute; d < min {
		t.Errorf("active %v with the check, %v without: %v later, want at least %v (3 passes 10m apart)", checked.Active, plain.Active, d, min)
	}
}

func TestForecastLeavesItsInputAlone(t *testing.T) {
	cfg := Config{V: 1, Mode: ModePaused, Timezone: "UTC", Groups: []GroupConfig{fgroup("a", []string{"*"}, 12, canaries(1))}}
	groups := map[string]GroupStatus{"a": {V: 1, Group: "a", State: StateCanary, TargetVersion: v2, StartVersion: v1,
		StartedAt: mustParse("2026-11-23T11:00:00Z"), FailuresSince: mustParse("2026-11-23T11:00:00Z"), InitialCount: 10,
		Canaries: []Canary{{ID: idAt(0.5)}}}}
	counts := onV1(10, "a")
	before, _ := json.Marshal([]any{cfg, groups, counts})
	fc := Simulate(ForecastInput{Config: cfg, Spec: DefaultSpec(v1, v2), Groups: groups, Counts: counts, Now: mustParse("2026-11-23T12:00:00Z")})
	after, _ := json.Marshal([]any{cfg, groups, counts})
	if string(before) != string(after) {
		t.Errorf("Simulate changed its input:\nbefore %s\nafter  %s", before, after)
	}
	// The stored canary keeps its id: told to update at 12:00, on the
	// target 12:07, healthy 12:12, the other nine done 12:19.
	if got, want := fc.Groups[0].Done, mustParse("2026-11-23T12:19:00Z"); !got.Equal(want) {
		t.Errorf("done %v, want %v", got, want)
	}
}

// tenGroups is two chains of five groups of 1,000 agents with default
// settings (5 canaries, 20% in flight): the first of each chain starts on
// Mon–Fri at 12:00, the others daily an hour earlier than the group before,
// so each starts the day after its predecessor. Starting on a Thursday, a
// rollout of five days over a weekend.
func tenGroups() ForecastInput {
	cfg := Config{V: 1, Mode: ModeEnabled, Timezone: "Europe/Berlin"}
	counts := map[string]Counts{}
	for i := range 10 {
		g := DefaultGroup(fmt.Sprintf("g%d", i))
		g.StartHour = 12 - i%5
		switch i {
		case 0:
			g.Days = weekdays5
		case 5:
			g.Days, g.DependsOn = weekdays5, []string{}
		}
		cfg.Groups = append(cfg.Groups, g)
		counts[g.Name] = Counts{v1: {Count: 900}, "0.9.0": {Count: 90}, NoVersion: {Count: 10}}
	}
	return ForecastInput{Config: cfg, Spec: DefaultSpec(v1, v2), Counts: counts, Now: mustParse("2026-11-26T06:00:00Z")}
}

// TestForecastJumpsInTime: a ten-group rollout over a weekend takes a few
// hundred steps, not one per simulated second or minute.
func TestForecastJumpsInTime(t *testing.T) {
	in := tenGroups()
	if err := in.Config.Validate(); err != nil {
		t.Fatal(err)
	}
	fc := Simulate(in)
	for _, g := range fc.Groups {
		if g.Outcome != OutcomeFinishes {
			t.Errorf("group %s: %s (%s)", g.Group, g.Outcome, g.Reason)
		}
	}
	// g4 and g9 start on the fifth day, Mon 11-30 08:00 CET.
	if got, want := fc.Groups[len(fc.Groups)-1].Start, mustParse("2026-11-30T07:00:00Z"); !got.Equal(want) {
		t.Errorf("last group starts %v, want %v", got, want)
	}
	if fc.Steps > 1000 {
		t.Errorf("%d steps, want at most 1000", fc.Steps)
	}
	t.Logf("%d steps, done %v, span %s", fc.Steps, fc.Done, fc.Span)
}

func BenchmarkForecastTenGroups(b *testing.B) {
	in := tenGroups()
	b.ReportAllocs()
	for b.Loop() {
		Simulate(in)
	}
}
