package rollout

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultConfig(t *testing.T) {
	want := Config{
		V:        1,
		Mode:     ModeEnabled,
		Timezone: "UTC",
		Groups: []GroupConfig{{
			Name:             "default",
			Days:             []string{"*"},
			StartHour:        0,
			WaitHours:        0,
			JitterSeconds:    5,
			CanaryCount:      5,
			MaxInFlight:      20,
			AlertAfter:       Duration(4 * time.Hour),
			FailureThreshold: 5,
			HealthTimeout:    Duration(5 * time.Minute),
			MinHealthyTime:   Duration(5 * time.Minute),
			UpdateTimeout:    Duration(30 * time.Minute),

			InfrastructureHold: 50,
			VanishedLimit:      10,
		}},
		QuarantineAfter: 3,
	}
	got := DefaultConfig()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DefaultConfig() (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
	// An empty object decodes to the defaults.
	var dec Config
	if err := json.Unmarshal([]byte(`{}`), &dec); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, dec); diff != "" {
		t.Errorf("Unmarshal({}) (-want +got):\n%s", diff)
	}
}

func TestConfigJSON(t *testing.T) {
	in := `{"v":1,"mode":"paused","timezone":"Europe/Berlin","groups":[
		{"name":"staging","days":["Mon","tue"],"start_hour":3,"canary_count":0,"max_in_flight":"50%"},
		{"name":"prod","wait_hours":24,"alert_after":"90m","failure_threshold":"2.5%","depends_on":["staging"]},
		{"name":"lab","depends_on":[]}]}`
	var got Config
	if err := json.Unmarshal([]byte(in), &got); err != nil {
		t.Fatal(err)
	}
	staging := DefaultGroup("staging")
	staging.Days, staging.StartHour, staging.CanaryCount, staging.MaxInFlight = []string{"Mon", "tue"}, 3, 0, 50
	prod := DefaultGroup("prod")
	prod.WaitHours, prod.AlertAfter, prod.FailureThreshold, prod.DependsOn = 24, Duration(90*time.Minute), 2.5, []string{"staging"}
	lab := DefaultGroup("lab")
	lab.DependsOn = []string{}
	want := Config{V: 1, Mode: ModePaused, Timezone: "Europe/Berlin", Groups: []GroupConfig{staging, prod, lab}, QuarantineAfter: DefaultQuarantineAfter}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Unmarshal (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	// Round trip keeps everything, including null versus [] in depends_on.
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var back Config
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(b), `"depends_on":null`) || !strings.Contains(string(b), `"depends_on":[]`) {
		t.Errorf("Marshal lost the null/[] distinction of depends_on: %s", b)
	}
}

func TestConfigUnmarshalErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // substrings of the error
	}{
		{"unknown top-level field", `{"modes":"paused"}`, []string{`unknown field "modes"`}},
		{"unknown group field", `{"groups":[{"name":"prod","max_inflight":"20%"}]}`, []string{`group "prod"`, `unknown field "max_inflight"`}},
		{"percent without sign", `{"groups":[{"name":"prod","max_in_flight":20}]}`, []string{`group "prod"`, "max_in_flight", `"20%"`}},
		{"duration as number", `{"groups":[{"name":"prod","alert_after":4}]}`, []string{`group "prod"`, "alert_after", `"4h"`}},
		{"start hour as string", `{"groups":[{"name":"prod","start_hour":"3"}]}`, []string{"start_hour"}},
		{"not an object", `[]`, []string{"config", "object"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			err := json.Unmarshal([]byte(tt.in), &c)
			if err == nil {
				t.Fatalf("Unmarshal(%s) = nil error", tt.in)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	group := func(name string, f func(*GroupConfig)) GroupConfig {
		g := DefaultGroup(name)
		if f != nil {
			f(&g)
		}
		return g
	}
	tests := []struct {
		name   string
		config func(*Config)
		want   []string // substrings, each expected in the error; none: valid
	}{
		{name: "default", config: func(*Config) {}},
		{name: "bad v", config: func(c *Config) { c.V = 2 }, want: []string{"v 2"}},
		{name: "bad mode", config: func(c *Config) { c.Mode = "off" }, want: []string{`mode "off" must be enabled, paused or disabled`}},
		{name: "bad timezone", config: func(c *Config) { c.Timezone = "Mars/Olympus" }, want: []string{`timezone "Mars/Olympus"`}},
		{name: "local timezone", config: func(c *Config) { c.Timezone = "Local" }, want: []string{`timezone "Local" depends on the host`}},
		{name: "good timezone", config: func(c *Config) { c.Timezone = "America/New_York" }},
		{name: "no groups", config: func(c *Config) { c.Groups = nil }, want: []string{"at least one group"}},
		{name: "bad name", config: func(c *Config) { c.Groups[0].Name = "Prod" }, want: []string{`group "Prod": name: invalid group name`}},
		{name: "empty name", config: func(c *Config) { c.Groups[0].Name = "" }, want: []string{"group #1: name"}},
		{name: "duplicate", config: func(c *Config) { c.Groups = append(c.Groups, group("default", nil)) }, want: []string{`group "default": listed twice`}},
		{name: "start hour", config: func(c *Config) { c.Groups[0].StartHour = 24 }, want: []string{`group "default": start_hour 24 must be 0-23`}},
		{name: "negative start hour", config: func(c *Config) { c.Groups[0].StartHour = -1 }, want: []string{"start_hour -1 must be 0-23"}},
		{name: "wait hours", config: func(c *Config) { c.Groups[0].WaitHours = 169 }, want: []string{"wait_hours 169 must be 0-168"}},
		{name: "jitter", config: func(c *Config) { c.Groups[0].JitterSeconds = 3601 }, want: []string{"jitter_seconds 3601 must be 0-3600"}},
		{name: "canaries", config: func(c *Config) { c.Groups[0].CanaryCount = 11 }, want: []string{"canary_count 11 must be 0-10"}},
		{name: "zero canaries", config: func(c *Config) { c.Groups[0].CanaryCount = 0 }},
		{name: "max in flight high", config: func(c *Config) { c.Groups[0].MaxInFlight = 120 }, want: []string{`group "default": max_in_flight "120%" must be 1%-100%`}},
		{name: "max in flight zero", config: func(c *Config) { c.Groups[0].MaxInFlight = 0 }, want: []string{`max_in_flight "0%" must be 1%-100%`}},
		{name: "failure threshold", config: func(c *Config) { c.Groups[0].FailureThreshold = 101 }, want: []string{`failure_threshold "101%" must be 0%-100%`}},
		{name: "infrastructure hold", config: func(c *Config) { c.Groups[0].InfrastructureHold = -1 }, want: []string{`infrastructure_hold "-1%" must be 0%-100%`}},
		{name: "zero failure threshold", config: func(c *Config) { c.Groups[0].FailureThreshold = 0 }},
		{name: "alert after", config: func(c *Config) { c.Groups[0].AlertAfter = Duration(30 * time.Second) }, want: []string{`alert_after "30s" must be 1m-168h`}},
		{name: "health timeout", config: func(c *Config) { c.Groups[0].HealthTimeout = 0 }, want: []string{`health_timeout "0s" must be 10s-1h`}},
		{name: "update timeout 0", config: func(c *Config) { c.Groups[0].UpdateTimeout = 0 }, want: []string{`update_timeout "0s" must be 1m-168h`}},
		{name: "update timeout one minute", config: func(c *Config) {
			c.Groups[0].UpdateTimeout, c.Groups[0].HealthTimeout, c.Groups[0].MinHealthyTime = Duration(time.Minute), Duration(30*time.Second), 0
		}},
		{name: "update timeout a week", config: func(c *Config) { c.Groups[0].UpdateTimeout = Duration(7 * 24 * time.Hour) }},
		{name: "update timeout too short", config: func(c *Config) { c.Groups[0].UpdateTimeout = Duration(59 * time.Second) }, want: []string{`update_timeout "59s" must be 1m-168h`}},
		{name: "update timeout too long", config: func(c *Config) { c.Groups[0].UpdateTimeout = Duration(7*24*time.Hour + time.Second) }, want: []string{`update_timeout "168h1s" must be 1m-168h`}},
		{name: "update timeout negative", config: func(c *Config) { c.Groups[0].UpdateTimeout = Duration(-time.Minute) }, want: []string{`update_timeout "-1m0s" must be 1m-168h`}},
		{name: "update timeout within the agent's waits", config: func(c *Config) { c.Groups[0].UpdateTimeout = Duration(10 * time.Minute) },
			want: []string{`update_timeout "10m" must be longer than health_timeout + min_healthy_time (10m)`}},
		{name: "min healthy time", config: func(c *Config) { c.Groups[0].MinHealthyTime = Duration(25 * time.Hour) }, want: []string{`min_healthy_time "25h" must be 0s-24h`}},
		{name: "days empty", config: func(c *Config) { c.Groups[0].Days = []string{} }, want: []string{"days: empty"}},
		{name: "days bad", config: func(c *Config) { c.Groups[0].Days = []string{"Monday"} }, want: []string{`days: "Monday" is not a day`}},
		{name: "days star not alone", config: func(c *Config) { c.Groups[0].Days = []string{"*", "Mon"} }, want: []string{`"*" means every day and must be alone`}},
		{name: "self dependency", config: func(c *Config) { c.Groups[0].DependsOn = []string{"default"} }, want: []string{"cannot depend on itself"}},
		{name: "unknown dependency", config: func(c *Config) { c.Groups[0].DependsOn = []string{"nope"} }, want: []string{`depends_on "nope": no such group`}},
		{name: "cycle", config: func(c *Config) {
			c.Groups = []GroupConfig{
				group("a", func(g *GroupConfig) { g.DependsOn = []string{"c"} }),
				group("b", nil), // depends on a
				group("c", nil), // depends on b
			}
		}, want: []string{"dependency cycle a → c → b → a"}},
		{name: "chain too long", config: func(c *Config) {
			c.Groups = []GroupConfig{
				group("a", nil),
				group("b", func(g *GroupConfig) { g.WaitHours = 48 }),                                      // 48h + 24h
				group("c", func(g *GroupConfig) { g.Days = []string{"Mon"}; g.DependsOn = []string{"b"} }), // + 168h
			}
		}, want: []string{"dependency chain a → b → c may take 240h", "limit is 168h"}},
		{name: "several errors at once", config: func(c *Config) {
			c.Groups[0].StartHour = 30
			c.Groups[0].CanaryCount = 20
		}, want: []string{"start_hour 30", "canary_count 20"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.config(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error mentioning %q", tt.want)
			}
			if !errors.Is(err, ErrBadConfig) {
				t.Errorf("Validate() = %v, not ErrBadConfig", err)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Validate() = %q\nwant it to contain %q", err, s)
				}
			}
		})
	}
}

func TestCheckConfigChange(t *testing.T) {
	base := Config{V: 1, Mode: ModeEnabled, Timezone: "UTC", Groups: []GroupConfig{DefaultGroup("staging"), DefaultGroup("prod")}}
	edit := func(f func(*Config)) Config {
		c := base
		c.Groups = append([]GroupConfig(nil), base.Groups...)
		f(&c)
		return c
	}
	status := func(s State, halted bool) GroupStatus { return GroupStatus{V: 1, State: s, Halted: halted} }
	tests := []struct {
		name     string
		next     Config
		statuses map[string]GroupStatus
		want     string // substring of the error; "" for accepted
	}{
		{
			name:     "unstarted group may change",
			next:     edit(func(c *Config) { c.Groups[1].StartHour = 5 }),
			statuses: map[string]GroupStatus{"staging": status(StateDone, false), "prod": status(StateUnstarted, false)},
		},
		{
			name:     "active group may not change",
			next:     edit(func(c *Config) { c.Groups[1].MaxInFlight = 50 }),
			statuses: map[string]GroupStatus{"staging": status(StateDone, false), "prod": status(StateActive, false)},
			want:     `group "prod" is active; its schedule cannot change`,
		},
		{
			name:     "active group may change its vanished_limit",
			next:     edit(func(c *Config) { c.Groups[1].VanishedLimit = 50 }),
			statuses: map[string]GroupStatus{"staging": status(StateDone, false), "prod": status(StateActive, false)},
		},
		{
			name:     "halted canary group may not change",
			next:     edit(func(c *Config) { c.Groups[0].CanaryCount = 1 }),
			statuses: map[string]GroupStatus{"staging": status(StateCanary, true)},
			want:     `group "staging" is canary`,
		},
		{
			name:     "active group may not be removed",
			next:     edit(func(c *Config) { c.Groups = c.Groups[:1] }),
			statuses: map[string]GroupStatus{"prod": status(StateActive, false)},
			want:     `group "prod" is active; it cannot be removed or renamed`,
		},
		{
			name:     "active group may not be renamed",
			next:     edit(func(c *Config) { c.Groups[1].Name = "production" }),
			statuses: map[string]GroupStatus{"prod": status(StateActive, false)},
			want:     `group "prod" is active; it cannot be removed or renamed`,
		},
		{
			name:     "implicit dependency of an active group may not change",
			next:     edit(func(c *Config) { c.Groups[0], c.Groups[1] = c.Groups[1], c.Groups[0] }),
			statuses: map[string]GroupStatus{"prod": status(StateActive, false)},
			want:     `group "prod" is active`,
		},
		{
			name:     "same days spelled differently is no change",
			next:     edit(func(c *Config) { c.Groups[1].Days = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"} }),
			statuses: map[string]GroupStatus{"prod": status(StateActive, false)},
		},
		{
			name:     "mode may change while active",
			next:     edit(func(c *Config) { c.Mode = ModePaused }),
			statuses: map[string]GroupStatus{"prod": status(StateActive, false)},
		},
		{
			name:     "done and rolled back groups may change",
			next:     edit(func(c *Config) { c.Groups[0].StartHour = 1; c.Groups[1].StartHour = 2 }),
			statuses: map[string]GroupStatus{"staging": status(StateDone, false), "prod": status(StateRolledBack, false)},
		},
		{
			name: "invalid next config",
			next: edit(func(c *Config) { c.Groups[1].StartHour = 99 }),
			want: "start_hour 99",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckConfigChange(base, tt.next, tt.statuses)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckConfigChange() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckConfigChange() = %v, want an error containing %q", err, tt.want)
			}
			if !errors.Is(err, ErrConfigChange) && !errors.Is(err, ErrBadConfig) {
				t.Errorf("CheckConfigChange() = %v, want ErrConfigChange or ErrBadConfig", err)
			}
		})
	}
}

// TestUpdateTimeoutDefault: a group without update_timeout (a config
// written before it existed) decodes to 30m, or to health_timeout +
// min_healthy_time + 30m when the agent's own waits take 30m or more, so
// that an old config stays valid and never times out an update that passes
// them; an explicit value is kept. A Go value with 0 gets the same.
func TestUpdateTimeoutDefault(t *testing.T) {
	tests := []struct {
		name  string
		group string
		want  time.Duration
	}{
		{"absent", `{"name":"prod"}`, 30 * time.Minute},
		{"absent, long waits", `{"name":"prod","health_timeout":"1h","min_healthy_time":"24h"}`, 25*time.Hour + 30*time.Minute},
		{"absent, waits just under 30m", `{"name":"prod","health_timeout":"20m","min_healthy_time":"9m"}`, 30 * time.Minute},
		{"explicit", `{"name":"prod","update_timeout":"2h"}`, 2 * time.Hour},
		{"explicit 0 stays 0 (and is invalid)", `{"name":"prod","update_timeout":"0s"}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			if err := json.Unmarshal([]byte(`{"groups":[`+tt.group+`]}`), &c); err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); (err != nil) != (tt.want == 0) {
				t.Fatalf("Validate() = %v", err)
			}
			g := c.Groups[0]
			if got := g.UpdateTimeout.D(); got != tt.want {
				t.Errorf("update_timeout = %v, want %v", got, tt.want)
			}
			g.UpdateTimeout = 0
			if got := g.EffectiveUpdateTimeout(); got != tt.want && tt.want != 0 && tt.name != "explicit" {
				t.Errorf("EffectiveUpdateTimeout() with 0 = %v, want %v", got, tt.want)
			}
		})
	}
}
