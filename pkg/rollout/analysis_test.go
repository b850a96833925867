package rollout

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestConditionParseAndMet(t *testing.T) {
	tests := []struct {
		cond    Condition
		wantErr string
		met     []float64
		notMet  []float64
		str     string
	}{
		{cond: "< 0.01", met: []float64{0, 0.0099, -1}, notMet: []float64{0.01, 1}, str: "< 0.01"},
		{cond: "<=0.01", met: []float64{0.01}, notMet: []float64{0.0100001}, str: "<= 0.01"},
		{cond: " > 99.5 ", met: []float64{100}, notMet: []float64{99.5}, str: "> 99.5"},
		{cond: ">= 1e-3", met: []float64{0.001}, notMet: []float64{0.0009}, str: ">= 0.001"},
		{cond: "== 0", met: []float64{0}, notMet: []float64{0.1}, str: "== 0"},
		{cond: "!= 0", met: []float64{2}, notMet: []float64{0}, str: "!= 0"},
		{cond: "", wantErr: "write an operator"},
		{cond: "0.01", wantErr: "write an operator"},
		{cond: "=< 1", wantErr: "write an operator"},
		{cond: "< abc", wantErr: "after < write a finite number"},
		{cond: "< NaN", wantErr: "finite number"},
		{cond: "> +Inf", wantErr: "finite number"},
		{cond: "<", wantErr: "finite number"},
	}
	for _, tc := range tests {
		t.Run(string(tc.cond), func(t *testing.T) {
			_, _, err := tc.cond.Parse()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse: %v, want an error with %q", err, tc.wantErr)
				}
				if tc.cond.Met(0) {
					t.Error("a condition that does not parse is met")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range tc.met {
				if !tc.cond.Met(v) {
					t.Errorf("%v does not meet %q", v, tc.cond)
				}
			}
			for _, v := range tc.notMet {
				if tc.cond.Met(v) {
					t.Errorf("%v meets %q", v, tc.cond)
				}
			}
			if got := tc.cond.String(); got != tc.str {
				t.Errorf("String() = %q, want %q", got, tc.str)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	lt := Check{Name: "errors", Success: "< 0.01"}
	band := Check{Name: "errors", Success: "< 0.01", Failure: "> 0.05"}
	one := func(v float64) Measurement { return Measurement{Samples: []Sample{{Value: v}}} }
	tests := []struct {
		name  string
		check Check
		m     Measurement
		want  Judgement
	}{
		{"success", lt, one(0.002), Judgement{Result: ResultSuccessful, Value: 0.002, HasValue: true, Detail: "0.002 meets success < 0.01"}},
		{"not success and no failure condition: failed", lt, one(0.2), Judgement{Result: ResultFailed, Value: 0.2, HasValue: true, Detail: "0.2 does not meet success < 0.01"}},
		{"meets failure", band, one(0.2), Judgement{Result: ResultFailed, Value: 0.2, HasValue: true, Detail: "0.2 meets failure > 0.05"}},
		{"between success and failure: inconclusive", band, one(0.03), Judgement{Result: ResultInconclusive, Value: 0.03, HasValue: true, Detail: "0.03 meets neither success < 0.01 nor failure > 0.05"}},
		{"meets both: failure wins", Check{Success: "< 1", Failure: "> 0"}, one(0.5), Judgement{Result: ResultFailed, Value: 0.5, HasValue: true, Detail: "0.5 meets failure > 0"}},
		{"no data", lt, Measurement{}, Judgement{Result: ResultInconclusive, Detail: "no data (the query returned no series)"}},
		{"error", lt, Measurement{Error: "Prometheus unreachable: connection refused"}, Judgement{Result: ResultInconclusive, Detail: "Prometheus unreachable: connection refused"}},
		{"error wins over samples", lt, Measurement{Error: "timeout", Samples: []Sample{{Value: 0}}}, Judgement{Result: ResultInconclusive, Detail: "timeout"}},
		{"NaN", lt, one(math.NaN()), Judgement{Result: ResultInconclusive, Detail: "value NaN is not a number to judge"}},
		{"+Inf", lt, one(math.Inf(1)), Judgement{Result: ResultInconclusive, Detail: "value +Inf is not a number to judge"}},
		{
			"several series: the worst decides", lt,
			Measurement{Samples: []Sample{{`{instance="a"}`, 0.001}, {`{instance="b"}`, math.NaN()}, {`{instance="c"}`, 0.3}, {`{instance="d"}`, 0.5}}},
			Judgement{Result: ResultFailed, Value: 0.3, HasValue: true, Series: `{instance="c"}`, Detail: "0.3 does not meet success < 0.01"},
		},
		{
			"several series: inconclusive over successful", lt,
			Measurement{Samples: []Sample{{`{instance="a"}`, 0.001}, {`{instance="b"}`, math.NaN()}}},
			Judgement{Result: ResultInconclusive, Series: `{instance="b"}`, Detail: "value NaN is not a number to judge"},
		},
		{
			"a series' labels are cut", lt,
			Measurement{Samples: []Sample{{`{instance="a"}`, 0.001}, {`{huge="` + strings.Repeat("é", 1<<20) + `"}`, 0.3}}},
			Judgement{Result: ResultFailed, Value: 0.3, HasValue: true, Series: `{huge="` + strings.Repeat("é", (MaxSeriesLen-7)/2) + "…", Detail: "0.3 does not meet success < 0.01"},
		},
		{
			"more than MaxSeries series: inconclusive, even with a failing one", lt,
			Measurement{Samples: append(make([]Sample, MaxSeries), Sample{`{instance="k"}`, 0.5})},
			Judgement{Result: ResultInconclusive, Detail: `the query returned 11 series, at most 10: aggregate them, as in max(…) for a success like "< 0.01" or min(…) for "> 0.99"`},
		},
		{
			"several series all pass", lt,
			Measurement{Samples: []Sample{{`{instance="a"}`, 0.001}, {`{instance="b"}`, 0.005}}},
			Judgement{Result: ResultSuccessful, Value: 0.001, HasValue: true, Series: `{instance="a"}`, Detail: "0.001 meets success < 0.01"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Judge(tc.check, tc.m)); diff != "" {
				t.Errorf("Judge (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckRender(t *testing.T) {
	d := QueryData{Group: "prod", Version: "2.0.0", StartVersion: "1.0.0"}
	tests := []struct {
		query   string
		want    string
		wantErr string
	}{
		{query: `max(app_error_rate{group="{{.Group}}",version="{{ .Version }}"})`, want: `max(app_error_rate{group="prod",version="2.0.0"})`},
		{query: `rate(x{v="{{.Version}}"}[5m]) / rate(x{v="{{.StartVersion}}"}[5m])`, want: `rate(x{v="2.0.0"}[5m]) / rate(x{v="1.0.0"}[5m])`},
		{query: `up`, want: `up`},
		{query: ``, wantErr: "query is empty"},
		{query: `  `, wantErr: "query is empty"},
		{query: `x{v="{{.Target}}"}`, wantErr: "only {{.Group}}, {{.Version}} and {{.StartVersion}}"},
		{query: `{{printf "%s" .Version}}`, wantErr: "only {{.Group}}"},
		{query: `{{.Version | printf "%q"}}`, wantErr: "only {{.Group}}"},
		{query: `{{range 1000000}}x{{end}}`, wantErr: "only {{.Group}}"},
		{query: `{{if .Group}}up{{end}}`, wantErr: "only {{.Group}}"},
		{query: `{{$x := .Group}}`, wantErr: "only {{.Group}}"},
		{query: `{{.Group.Name}}`, wantErr: "only {{.Group}}"},
		{query: `x{v="{{.Version}"}`, wantErr: "query: template: query"},
		{query: strings.Repeat("x", MaxQueryLen+1), wantErr: "at most 4096"},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			got, err := Check{Query: tc.query}.Render(d)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Render: %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Render: %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func goodCheck(name string) Check {
	return Check{Name: name, Query: `max(app_error_rate{version="{{.Version}}"})`, Success: "< 0.01",
		Interval: DefaultCheckInterval, Count: DefaultCheckCount, InconclusiveLimit: DefaultInconclusiveLimit}
}

func TestConfigValidateAnalysis(t *testing.T) {
	withChecks := func(edit func(c *Config)) Config {
		c := testConfig()
		c.PrometheusURL = "http://prometheus:9090"
		c.Analysis = []Check{goodCheck("errors")}
		edit(&c)
		return c
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr []string
	}{
		{name: "valid", cfg: withChecks(func(*Config) {})},
		{name: "valid, group checks only", cfg: withChecks(func(c *Config) {
			c.Analysis = nil
			c.Groups[1].Analysis = []Check{goodCheck("latency")}
		})},
		{name: "valid, https with CA and token", cfg: withChecks(func(c *Config) {
			c.PrometheusURL, c.PrometheusCAFile, c.PrometheusBearerTokenFile = "https://prom.example:9090/prometheus", "/etc/fleetwave/ca.pem", "/etc/fleetwave/token"
		})},
		{name: "no prometheus_url", cfg: withChecks(func(c *Config) { c.PrometheusURL = "" }),
			wantErr: []string{"analysis checks need prometheus_url"}},
		{name: "group checks without prometheus_url", cfg: withChecks(func(c *Config) {
			c.PrometheusURL, c.Analysis = "", nil
			c.Groups[0].Analysis = []Check{goodCheck("errors")}
		}), wantErr: []string{"analysis checks need prometheus_url"}},
		{name: "bad url", cfg: withChecks(func(c *Config) { c.PrometheusURL = "prometheus:9090" }),
			wantErr: []string{`prometheus_url "prometheus:9090": want an http or https URL`}},
		{name: "credentials in url", cfg: withChecks(func(c *Config) { c.PrometheusURL = "http://u:p@prometheus:9090" }),
			wantErr: []string{"no credentials in the URL"}},
		{name: "TLS settings over http", cfg: withChecks(func(c *Config) { c.PrometheusInsecureSkipVerify = true }),
			wantErr: []string{"need an https prometheus_url"}},
		{name: "relative token file", cfg: withChecks(func(c *Config) { c.PrometheusBearerTokenFile = "token" }),
			wantErr: []string{`prometheus_bearer_token_file "token": want an absolute path`}},
		{name: "token without url", cfg: withChecks(func(c *Config) { c.PrometheusURL, c.Analysis, c.PrometheusBearerTokenFile = "", nil, "/t" }),
			wantErr: []string{"need prometheus_url"}},
		{name: "every check field", cfg: withChecks(func(c *Config) {
			c.Analysis = []Check{{Name: "Bad Name", Query: "{{.Nope}}", Success: "0.01", Failure: "> x", Interval: Duration(time.Millisecond), Count: 0, InconclusiveLimit: 0}}
		}), wantErr: []string{
			`analysis[0] "Bad Name": name: "Bad Name": use a-z`,
			`analysis[0] "Bad Name": query: "{{.Nope}}": only {{.Group}}`,
			`analysis[0] "Bad Name": success: condition "0.01": write an operator`,
			`analysis[0] "Bad Name": failure: condition "> x"`,
			`analysis[0] "Bad Name": interval "1ms" must be 1s-1h`,
			`analysis[0] "Bad Name": count 0 must be 1-1000`,
			`analysis[0] "Bad Name": inconclusive_limit 0 must be 1-1000`,
		}},
		{name: "names unique", cfg: withChecks(func(c *Config) { c.Analysis = append(c.Analysis, goodCheck("errors")) }),
			wantErr: []string{`analysis[1] "errors": listed twice`}},
		{name: "group's check named", cfg: withChecks(func(c *Config) {
			bad := goodCheck("latency")
			bad.Success = ""
			c.Groups[1].Analysis = []Check{bad}
		}), wantErr: []string{`group "prod": analysis[0] "latency": success: condition ""`}},
		{name: "too many checks", cfg: withChecks(func(c *Config) {
			for i := range MaxChecks {
				c.Groups[0].Analysis = append(c.Groups[0].Analysis, goodCheck("c"+string(rune('a'+i))))
			}
		}), wantErr: []string{`group "staging": 21 analysis checks (the fleet's and its own), at most 20`}},
		{name: "queries that fit the status", cfg: withChecks(func(c *Config) {
			c.Analysis = nil
			for i := range MaxChecks {
				ch := goodCheck("c" + string(rune('a'+i)))
				ch.Query = longQuery(MaxGroupQueryBytes / MaxChecks)
				c.Groups[0].Analysis = append(c.Groups[0].Analysis, ch)
			}
		})},
		{name: "queries too long for the status", cfg: withChecks(func(c *Config) {
			c.Analysis = nil
			for i := range MaxChecks {
				ch := goodCheck("c" + string(rune('a'+i)))
				ch.Query = longQuery(MaxGroupQueryBytes/MaxChecks + 100)
				c.Groups[0].Analysis = append(c.Groups[0].Analysis, ch)
			}
		}), wantErr: []string{`group "staging": its analysis queries take 3`, `bytes in the group's status (as JSON, with versions of the longest form), at most 32768: shorten them or use fewer checks`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate: nil, want an error")
			}
			if !errors.Is(err, ErrBadConfig) {
				t.Errorf("error does not wrap ErrBadConfig: %v", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// longQuery is a valid query that names both versions and has
// characters JSON escapes (">" takes 6 bytes), and whose JSON rendered
// with the longest versions takes at most n bytes, and nearly n.
func longQuery(n int) string {
	q := `max(x{version="{{.Version}}",start="{{.StartVersion}}"}) > 0`
	for {
		more := q + " or vector(0) > 0"
		if len(more) > MaxQueryLen || queryBytes("g", []Check{{Query: more}}) > n {
			return q
		}
		q = more
	}
}

func TestConfigChecksMerge(t *testing.T) {
	c := testConfig()
	errs, lat := goodCheck("errors"), goodCheck("latency")
	prodErrs := goodCheck("errors")
	prodErrs.Success = "< 0.001"
	own := goodCheck("saturation")
	c.Analysis = []Check{errs, lat}
	c.Groups[1].Analysis = []Check{own, prodErrs}
	if diff := cmp.Diff([]Check{errs, lat}, c.Checks("staging")); diff != "" {
		t.Errorf("staging (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Check{prodErrs, lat, own}, c.Checks("prod")); diff != "" {
		t.Errorf("prod: the group's check replaces the fleet's of the same name in place (-want +got):\n%s", diff)
	}
	c.Analysis = nil
	if diff := cmp.Diff([]Check{own, prodErrs}, c.Checks("prod")); diff != "" {
		t.Errorf("prod without fleet checks (-want +got):\n%s", diff)
	}
	if got := c.Checks("staging"); got != nil {
		t.Errorf("staging without checks: %v", got)
	}
}

func TestCheckJSON(t *testing.T) {
	var cfg Config
	in := `{"v":1,"prometheus_url":"http://p:9090","analysis":[{"name":"errors","query":"up","success":"< 1"}],
	        "groups":[{"name":"prod","analysis":[{"name":"lat","query":"up","success":">0","failure":"< -1","interval":"10s","count":1,"inconclusive_limit":2}]}]}`
	if err := json.Unmarshal([]byte(in), &cfg); err != nil {
		t.Fatal(err)
	}
	want := []Check{{Name: "errors", Query: "up", Success: "< 1", Interval: DefaultCheckInterval, Count: DefaultCheckCount, InconclusiveLimit: DefaultInconclusiveLimit}}
	if diff := cmp.Diff(want, cfg.Analysis); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var again Config
	if err := json.Unmarshal(out, &again); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cfg, again); diff != "" {
		t.Errorf("round trip (-want +got):\n%s\n%s", diff, out)
	}
	for _, s := range []string{`"prometheus_url":"http://p:9090"`, `"analysis":[{"name":"errors"`, `"interval":"10s"`} {
		if !strings.Contains(string(out), s) {
			t.Errorf("JSON lacks %s:\n%s", s, out)
		}
	}
	// Without analysis the config's JSON is what it was before the fields.
	plain, _ := json.Marshal(DefaultConfig())
	if strings.Contains(string(plain), "prometheus") || strings.Contains(string(plain), "analysis") {
		t.Errorf("default config mentions analysis: %s", plain)
	}
	if err := json.Unmarshal([]byte(`{"v":1,"analysis":[{"name":"x","query":"up","success":"<1","treshold":1}]}`), &cfg); err == nil ||
		!strings.Contains(err.Error(), `unknown field "treshold"`) {
		t.Errorf("unknown check field: %v", err)
	}
}

func TestCheckConfigChangeAllowsAnalysis(t *testing.T) {
	prev := testConfig()
	prev.PrometheusURL = "http://p:9090"
	next := testConfig()
	next.PrometheusURL = "http://p:9090"
	next.Groups[0].Analysis = []Check{goodCheck("errors")}
	active := map[string]GroupStatus{"staging": {State: StateActive}}
	if err := CheckConfigChange(prev, next, active); err != nil {
		t.Errorf("adding a check to an active group: %v", err)
	}
	next.Groups[0].CanaryCount = 1
	if err := CheckConfigChange(prev, next, active); !errors.Is(err, ErrConfigChange) {
		t.Errorf("other changes of an active group are still refused: %v", err)
	}
}

// analysisFixture is group staging rolling v1 → v2 with one canary, 10
// agents, and checks on the fleet's Prometheus.
type analysisFixture struct {
	t      *testing.T
	start  time.Time
	ids    []AgentID
	cfg    Config
	checks []Check
}

func newAnalysisFixture(t *testing.T, checks ...Check) *analysisFixture {
	cfg := testConfig()
	cfg.PrometheusURL = "http://p:9090"
	cfg.Analysis = checks
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &analysisFixture{t: t, start: mustTime(t, "2024-03-05T03:00:00Z"), ids: spreadIDs(10, 0.5), cfg: cfg, checks: checks}
}

// canary is the group in canary, its one canary (ids[5]) healthy on the
// target since 10m after the start (min_healthy_time 5m), with the check
// statuses given.
func (f *analysisFixture) canary(checks ...CheckStatus) GroupStatus {
	st := startedStatus(StateCanary, f.start, f.ids[5])
	st.Canaries[0].HealthySince = f.start.Add(10 * time.Minute)
	st.Analysis = checks
	return st
}

func (f *analysisFixture) active(checks ...CheckStatus) GroupStatus {
	st := startedStatus(StateActive, f.start, "")
	st.Analysis = checks
	return st
}

// agents are the 10 agents, the first onTarget (and the canary) on v2.
func (f *analysisFixture) agents(onTarget int) []AgentView {
	out := onVersion(f.ids, v1)
	for i := range onTarget {
		out[i].ActiveVersion = v2
	}
	out[5].ActiveVersion = v2
	return out
}

// status is the check status of check c as the group starts counting it.
func (f *analysisFixture) status(c Check) CheckStatus {
	q, err := c.Render(QueryData{Group: "staging", Version: v2, StartVersion: v1})
	if err != nil {
		f.t.Fatal(err)
	}
	return CheckStatus{Name: c.Name, Query: q, Success: c.Success, Failure: c.Failure, Interval: c.Interval, Count: c.Count,
		InconclusiveLimit: c.InconclusiveLimit, Since: f.start}
}

func (f *analysisFixture) measure(c Check, at time.Duration, values ...float64) Measurement {
	m := Measurement{Group: "staging", Check: c.Name, Query: f.status(c).Query, At: f.start.Add(at)}
	for _, v := range values {
		m.Samples = append(m.Samples, Sample{Value: v})
	}
	return m
}

func (f *analysisFixture) failQuery(c Check, at time.Duration, err string) Measurement {
	m := f.measure(c, at)
	m.Error = err
	return m
}

func (f *analysisFixture) next(prev GroupStatus, agents []AgentView, now time.Duration, ms ...Measurement) (GroupStatus, []Event) {
	return Next(Input{Config: f.cfg, Group: "staging", Spec: DefaultSpec(v1, v2), Prev: prev, Counts: CountAgents(agents),
		Agents: agents, Now: f.start.Add(now), Measurements: ms})
}

func ptrTo[T any](v T) *T { return &v }

func TestNextAnalysisCanary(t *testing.T) {
	errs := goodCheck("errors")
	errs.Count = 2
	errs.InconclusiveLimit = 3
	f := newAnalysisFixture(t, errs)
	base := f.status(errs)
	with := func(edit func(*CheckStatus)) CheckStatus {
		c := base
		edit(&c)
		return c
	}
	const now = 20 * time.Minute
	tests := []struct {
		name         string
		prev         GroupStatus
		agents       []AgentView
		ms           []Measurement
		wantState    State
		wantHalted   string
		wantWaiting  string
		wantEvents   []string
		wantEventHas string
		wantChecks   []CheckStatus
	}{
		{
			name: "no measurement yet: promotion waits", prev: f.canary(), agents: f.agents(0),
			wantState: StateCanary, wantWaiting: `analysis: check "errors" passed 0 of 2: promotion waits`,
			wantChecks: []CheckStatus{base},
		},
		{
			name: "one pass of two: waits", prev: f.canary(base), agents: f.agents(0), ms: []Measurement{f.measure(errs, 19*time.Minute, 0.001)},
			wantState: StateCanary, wantWaiting: `passed 1 of 2`,
			wantChecks: []CheckStatus{with(func(c *CheckStatus) {
				c.Measurements, c.Passes, c.Result, c.Value, c.Detail, c.At = 1, 1, ResultSuccessful, ptrTo(0.001), "0.001 meets success < 0.01", f.start.Add(19*time.Minute)
			})},
		},
		{
			name: "count passes: active", prev: f.canary(base), agents: f.agents(0),
			ms:        []Measurement{f.measure(errs, 19*time.Minute, 0.001), f.measure(errs, 18*time.Minute, 0.002)},
			wantState: StateActive, wantEvents: []string{"analysis", "transition:canary→active"}, wantEventHas: `check "errors" passed 2 of 2: 0.001 meets success < 0.01`,
		},
		{
			name:   "canaries not yet healthy: measurements ignored, no promotion",
			prev:   func() GroupStatus { st := f.canary(base); st.Canaries[0].HealthySince = time.Time{}; return st }(),
			agents: onVersion(f.ids, v1), ms: []Measurement{f.measure(errs, 19*time.Minute, 0.5)},
			wantState: StateCanary, wantChecks: []CheckStatus{base},
		},
		{
			name: "canaries healthy but not for min_healthy_time: measured, not promoted",
			prev: func() GroupStatus {
				st := f.canary(base)
				st.Canaries[0].HealthySince = f.start.Add(18 * time.Minute)
				return st
			}(),
			agents: f.agents(0), ms: []Measurement{f.measure(errs, 19*time.Minute, 0.001), f.measure(errs, 19*time.Minute+time.Second, 0.001)},
			wantState: StateCanary, wantEvents: []string{"analysis"}, wantEventHas: `check "errors" passed 2 of 2`,
		},
		{
			name: "a failed measurement halts with name, value and query", prev: f.canary(base), agents: f.agents(0),
			ms:        []Measurement{f.measure(errs, 19*time.Minute, 0.25)},
			wantState: StateCanary, wantEvents: []string{"halt", "alert"},
			wantHalted: `analysis failed: check "errors" measured 0.25: 0.25 does not meet success < 0.01; query: max(app_error_rate{version="2.0.0"})`,
		},
		{
			name: "inconclusive holds, not a halt", prev: f.canary(base), agents: f.agents(0),
			ms:        []Measurement{f.failQuery(errs, 19*time.Minute, "Prometheus unreachable: connection refused")},
			wantState: StateCanary, wantEvents: []string{"analysis"}, wantEventHas: `check "errors" inconclusive (Prometheus unreachable: connection refused): the group holds`,
			wantWaiting: `analysis inconclusive: check "errors", 1 of inconclusive_limit 3 in a row (Prometheus unreachable: connection refused): the group holds`,
		},
		{
			name: "passed its count, then inconclusive: holds", prev: f.canary(with(func(c *CheckStatus) {
				c.Measurements, c.Passes, c.Result, c.At = 2, 2, ResultSuccessful, f.start.Add(15*time.Minute)
			})), agents: f.agents(0),
			ms:        []Measurement{f.measure(errs, 19*time.Minute)},
			wantState: StateCanary, wantEvents: []string{"analysis"}, wantWaiting: "no data",
		},
		{
			name: "inconclusive_limit in a row halts", prev: f.canary(with(func(c *CheckStatus) {
				c.Measurements, c.Inconclusive, c.Result, c.At = 1, 1, ResultInconclusive, f.start.Add(15*time.Minute)
			})), agents: f.agents(0),
			ms:        []Measurement{f.measure(errs, 16*time.Minute), f.failQuery(errs, 17*time.Minute, "timeout")},
			wantState: StateCanary, wantEvents: []string{"halt", "alert"},
			wantHalted: `analysis inconclusive: check "errors", 3 inconclusive measurements in a row (inconclusive_limit 3), last: timeout; query: max(app_error_rate{version="2.0.0"})`,
		},
		{
			name: "conclusive again: the hold ends, passes kept", prev: f.canary(with(func(c *CheckStatus) {
				c.Measurements, c.Passes, c.Inconclusive, c.Result, c.At = 3, 1, 2, ResultInconclusive, f.start.Add(15*time.Minute)
			})), agents: f.agents(0),
			ms:        []Measurement{f.measure(errs, 16*time.Minute, 0)},
			wantState: StateActive, wantEvents: []string{"analysis", "analysis", "transition:canary→active"},
			wantEventHas: `check "errors" conclusive again after 2 inconclusive: 0 meets success < 0.01`,
		},
		{
			name: "measurements already judged, of another query or before counting are ignored",
			prev: f.canary(with(func(c *CheckStatus) {
				c.Measurements, c.Passes, c.Result, c.At = 1, 1, ResultSuccessful, f.start.Add(15*time.Minute)
			})),
			agents: f.agents(0),
			ms: []Measurement{
				f.measure(errs, 15*time.Minute, 0.5),
				{Group: "staging", Check: "errors", Query: "old query", At: f.start.Add(16 * time.Minute), Samples: []Sample{{Value: 0.5}}},
				{Group: "prod", Check: "errors", Query: base.Query, At: f.start.Add(16 * time.Minute), Samples: []Sample{{Value: 0.5}}},
				{Group: "staging", Check: "other", Query: base.Query, At: f.start.Add(16 * time.Minute), Samples: []Sample{{Value: 0.5}}},
				f.measure(errs, -time.Minute, 0.5),
			},
			wantState: StateCanary, wantWaiting: "passed 1 of 2",
		},
		{
			name: "a changed query counts afresh", prev: f.canary(with(func(c *CheckStatus) {
				c.Query, c.Measurements, c.Passes, c.Result, c.At = "old", 2, 2, ResultSuccessful, f.start.Add(15*time.Minute)
			})), agents: f.agents(0),
			wantState: StateCanary, wantWaiting: "passed 0 of 2", wantChecks: []CheckStatus{base},
		},
		{
			name: "a reset (new failures_since) counts afresh", prev: func() GroupStatus {
				st := f.canary(with(func(c *CheckStatus) { c.Measurements, c.Passes, c.Result = 2, 2, ResultSuccessful }))
				st.FailuresSince = f.start.Add(time.Minute)
				return st
			}(), agents: f.agents(0),
			wantState: StateCanary, wantWaiting: "passed 0 of 2", wantChecks: []CheckStatus{with(func(c *CheckStatus) { c.Since = f.start.Add(time.Minute) })},
		},
		{
			name: "halted: nothing judged", prev: func() GroupStatus {
				st := f.canary(base)
				st.Halted, st.HaltReason = true, "x"
				return st
			}(), agents: f.agents(0), ms: []Measurement{f.measure(errs, 19*time.Minute, 0.5)},
			wantState: StateCanary, wantHalted: "x", wantChecks: []CheckStatus{base},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, evs := f.next(tc.prev, tc.agents, now, tc.ms...)
			if st.State != tc.wantState {
				t.Errorf("state %s, want %s (waiting %q, halt %q)", st.State, tc.wantState, st.Waiting, st.HaltReason)
			}
			if tc.wantHalted == "" && st.Halted {
				t.Errorf("halted: %s", st.HaltReason)
			}
			if tc.wantHalted != "" && (!st.Halted || !strings.Contains(st.HaltReason, tc.wantHalted)) {
				t.Errorf("halt %v %q, want %q", st.Halted, st.HaltReason, tc.wantHalted)
			}
			if !strings.Contains(st.Waiting, tc.wantWaiting) || (tc.wantWaiting == "" && st.Waiting != "") {
				t.Errorf("waiting %q, want %q", st.Waiting, tc.wantWaiting)
			}
			if diff := cmp.Diff(tc.wantEvents, kinds(evs)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if tc.wantEventHas != "" {
				found := false
				for _, e := range evs {
					found = found || strings.Contains(e.Reason, tc.wantEventHas)
				}
				if !found {
					t.Errorf("no event says %q: %+v", tc.wantEventHas, evs)
				}
			}
			if tc.wantChecks != nil {
				if diff := cmp.Diff(tc.wantChecks, st.Analysis); diff != "" {
					t.Errorf("checks (-want +got):\n%s", diff)
				}
			}
			if err := st.Validate(); err != nil {
				t.Errorf("status not valid: %v", err)
			}
		})
	}
}

func TestNextAnalysisActive(t *testing.T) {
	errs := goodCheck("errors")
	errs.InconclusiveLimit = 2
	band := goodCheck("latency")
	band.Query, band.Success, band.Failure = `histogram_quantile(0.99, rate(app_latency_seconds_bucket{version="{{.Version}}"}[1m]))`, "< 0.3", "> 1"
	band.InconclusiveLimit = 2
	f := newAnalysisFixture(t, errs, band)
	e, l := f.status(errs), f.status(band)
	const now = time.Hour
	tests := []struct {
		name         string
		prev         GroupStatus
		agents       []AgentView
		ms           []Measurement
		wantState    State
		wantProgress float64
		wantHalted   string
		wantWaiting  string
		wantEvents   []string
	}{
		{name: "passing: progress moves", prev: f.active(e, l), agents: f.agents(3),
			ms:        []Measurement{f.measure(errs, 59*time.Minute, 0), f.measure(band, 59*time.Minute, 0.1)},
			wantState: StateActive, wantProgress: 0.6},
		{name: "not measured yet in active: progress moves (the count is for canary)", prev: f.active(e, l), agents: f.agents(3),
			wantState: StateActive, wantProgress: 0.6},
		{name: "a failure halts in active", prev: f.active(e, l), agents: f.agents(3),
			ms:        []Measurement{f.measure(errs, 59*time.Minute, 0), f.measure(band, 59*time.Minute, 1.5)},
			wantState: StateActive, wantProgress: 0.2, wantEvents: []string{"halt", "alert"},
			wantHalted: `analysis failed: check "latency" measured 1.5: 1.5 meets failure > 1; query: histogram_quantile(0.99, rate(app_latency_seconds_bucket{version="2.0.0"}[1m]))`},
		{name: "between success and failure: inconclusive, progress held", prev: f.active(e, l), agents: f.agents(3),
			ms:        []Measurement{f.measure(band, 59*time.Minute, 0.5)},
			wantState: StateActive, wantProgress: 0.2, wantEvents: []string{"analysis"},
			wantWaiting: `analysis inconclusive: check "latency", 1 of inconclusive_limit 2 in a row (0.5 meets neither success < 0.3 nor failure > 1)`},
		{name: "inconclusive holds done back", prev: func() GroupStatus {
			c := e
			c.Inconclusive, c.Result, c.At = 1, ResultInconclusive, f.start.Add(50*time.Minute)
			st := f.active(c, l)
			st.Progress = 1
			return st
		}(), agents: f.agents(10), wantState: StateActive, wantProgress: 1, wantWaiting: "analysis inconclusive"},
		{name: "inconclusive_limit halts in active", prev: func() GroupStatus {
			c := e
			c.Inconclusive, c.Result, c.At = 1, ResultInconclusive, f.start.Add(50*time.Minute)
			return f.active(c, l)
		}(), agents: f.agents(3), ms: []Measurement{f.measure(errs, 59*time.Minute)},
			wantState: StateActive, wantProgress: 0.2, wantEvents: []string{"halt", "alert"}, wantHalted: `analysis inconclusive: check "errors", 2 inconclusive`},
		{name: "all on target and passing: done", prev: f.active(e, l), agents: f.agents(10),
			wantState: StateDone, wantProgress: 1, wantEvents: []string{"transition:active→done"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, evs := f.next(tc.prev, tc.agents, now, tc.ms...)
			if st.State != tc.wantState || st.Progress != tc.wantProgress {
				t.Errorf("state %s progress %v, want %s %v (waiting %q, halt %q)", st.State, st.Progress, tc.wantState, tc.wantProgress, st.Waiting, st.HaltReason)
			}
			if tc.wantHalted == "" && st.Halted {
				t.Errorf("halted: %s", st.HaltReason)
			}
			if tc.wantHalted != "" && (!st.Halted || !strings.Contains(st.HaltReason, tc.wantHalted)) {
				t.Errorf("halt %v %q, want %q", st.Halted, st.HaltReason, tc.wantHalted)
			}
			if !strings.Contains(st.Waiting, tc.wantWaiting) || (tc.wantWaiting == "" && st.Waiting != "") {
				t.Errorf("waiting %q, want %q", st.Waiting, tc.wantWaiting)
			}
			if diff := cmp.Diff(tc.wantEvents, kinds(evs)); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNextAnalysisNoCanaries: without canaries the canary phase has
// nothing to measure: the group goes to active at once, and its checks
// run there.
func TestNextAnalysisNoCanaries(t *testing.T) {
	errs := goodCheck("errors")
	f := newAnalysisFixture(t, errs)
	prev := f.canary()
	prev.Canaries = nil
	st, evs := f.next(prev, f.agents(0), time.Hour)
	if st.State != StateActive || len(st.Analysis) != 1 {
		t.Fatalf("state %s with %d checks, want active with 1", st.State, len(st.Analysis))
	}
	if !strings.Contains(evs[0].Reason, "no canaries; 1 analysis checks run in active") {
		t.Errorf("reason %q", evs[0].Reason)
	}
	if !st.AnalysisRunning() {
		t.Error("checks not running in active")
	}
}

// TestNextAnalysisStartsFresh: a new target, and an operator's restart of
// the canary phase, start the checks from nothing.
func TestNextAnalysisStartsFresh(t *testing.T) {
	errs := goodCheck("errors")
	f := newAnalysisFixture(t, errs)
	c := f.status(errs)
	c.Passes, c.Measurements, c.Result = 2, 2, ResultSuccessful
	prev := f.canary(c)
	st, _ := Next(Input{Config: f.cfg, Group: "staging", Spec: DefaultSpec(v1, "3.0.0"), Prev: prev, Now: f.start.Add(time.Hour)})
	if st.Analysis != nil {
		t.Errorf("a new target keeps the checks: %+v", st.Analysis)
	}
	reset, _, err := Reset(prev, "", f.start.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if reset.Analysis != nil {
		t.Errorf("a reset canary phase keeps the checks: %+v", reset.Analysis)
	}
}

func TestAnalysisRunningAndDue(t *testing.T) {
	f := newAnalysisFixture(t, goodCheck("errors"))
	c := f.status(goodCheck("errors"))
	now := f.start.Add(time.Hour)
	measured := func(ago time.Duration) CheckStatus { m := c; m.At = now.Add(-ago); return m }
	tests := []struct {
		name    string
		st      GroupStatus
		running bool
		due     int
	}{
		{"canary, canary healthy", f.canary(c), true, 1},
		{"canary, canary not healthy", func() GroupStatus { st := f.canary(c); st.Canaries[0].HealthySince = time.Time{}; return st }(), false, 0},
		{"canary without canaries", func() GroupStatus { st := f.canary(c); st.Canaries = nil; return st }(), false, 0},
		{"active", f.active(c), true, 1},
		{"active, measured 30s ago (interval 1m)", f.active(measured(30 * time.Second)), true, 0},
		{"active, measured 1m ago", f.active(measured(time.Minute)), true, 1},
		{"halted", func() GroupStatus { st := f.active(c); st.Halted = true; return st }(), false, 0},
		{"paused", func() GroupStatus { st := f.active(c); st.Mode = ModePaused; return st }(), false, 0},
		{"done", func() GroupStatus { st := f.active(c); st.State = StateDone; return st }(), false, 0},
		{"no checks", f.active(), false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.st.AnalysisRunning(); got != tc.running {
				t.Errorf("AnalysisRunning = %v, want %v", got, tc.running)
			}
			if got := len(tc.st.ChecksDue(now)); got != tc.due {
				t.Errorf("%d checks due, want %d", got, tc.due)
			}
		})
	}
}

func TestGroupStatusValidateAnalysis(t *testing.T) {
	st := startedStatus(StateActive, mustTime(t, "2024-03-05T03:00:00Z"), "")
	st.Analysis = []CheckStatus{{Name: "Bad", Passes: -1, Result: "great", Value: ptrTo(math.Inf(1))}}
	err := st.Validate()
	for _, w := range []string{`analysis[0]: name`, `must not be negative`, `result "great"`, `finite number`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate: %v; want %q", err, w)
		}
	}
}

// TestPassingMeasurementsPromote: fed PassingMeasurements every interval,
// a group with checks leaves canary after count intervals, as a forecast
// over simulated time needs.
func TestPassingMeasurementsPromote(t *testing.T) {
	for _, cond := range []Condition{"< 0.01", "<= 0", "> 99.5", ">= 1", "== 0", "!= 3"} {
		if !cond.Met(cond.Satisfying()) {
			t.Errorf("%q is not met by its Satisfying() %v", cond, cond.Satisfying())
		}
	}
	errs := goodCheck("errors")
	errs.Interval = Duration(time.Minute)
	f := newAnalysisFixture(t, errs)
	st := f.canary()
	var at time.Duration
	for at = 20 * time.Minute; st.State == StateCanary && at < time.Hour; at += time.Minute {
		st, _ = f.next(st, f.agents(0), at, st.PassingMeasurements(f.start.Add(at))...)
	}
	if st.State != StateActive || st.Halted {
		t.Fatalf("state %s halted=%v (%s) after passing measurements", st.State, st.Halted, st.HaltReason)
	}
	// First step: checks appear; three more: three passes.
	if want := 20*time.Minute + 4*time.Minute; at != want {
		t.Errorf("active after %v of simulated time, want %v", at, want)
	}
}
