package rollout

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
)

// Metric analysis (docs/rollout.md "Gates"): a group's rollout is judged by
// the app's own metrics as well as by its installs. The config names
// Prometheus queries (checks); the controller runs them and hands the
// results to Next as Measurements; this file judges them (Judge) and keeps
// each check's running state in the group status (CheckStatus), which
// decides promotion out of canary, a halt, or a hold.

// AnalysisConfig is the fleet-level part of the config about metric
// analysis: the Prometheus server the controller queries, and the checks
// every group runs. It is embedded in Config (its JSON fields are the
// config's own).
type AnalysisConfig struct {
	// PrometheusURL is the base URL of the Prometheus HTTP API
	// ("http://prometheus:9090"); required when any check is configured.
	PrometheusURL string `json:"prometheus_url,omitempty"`
	// PrometheusBearerTokenFile, when set, is a file on the controller's
	// host holding a bearer token sent with every query (read on every
	// query, so a rotated token is picked up).
	PrometheusBearerTokenFile string `json:"prometheus_bearer_token_file,omitempty"`
	// PrometheusCAFile, when set, is a PEM file of the CAs that an https
	// PrometheusURL's certificate is checked against (instead of the
	// system's).
	PrometheusCAFile string `json:"prometheus_ca_file,omitempty"`
	// PrometheusInsecureSkipVerify turns off the check of an https
	// PrometheusURL's certificate. For tests only.
	PrometheusInsecureSkipVerify bool `json:"prometheus_insecure_skip_verify,omitempty"`
	// Analysis are the checks every group runs (see Config.Checks for how
	// a group's own list combines with them).
	Analysis []Check `json:"analysis,omitempty"`
}

// fields are the JSON fields of a for decodeObject.
func (a *AnalysisConfig) fields() map[string]any {
	return map[string]any{
		"prometheus_url":                  &a.PrometheusURL,
		"prometheus_bearer_token_file":    &a.PrometheusBearerTokenFile,
		"prometheus_ca_file":              &a.PrometheusCAFile,
		"prometheus_insecure_skip_verify": &a.PrometheusInsecureSkipVerify,
		"analysis":                        &a.Analysis,
	}
}

// Check is one metric check: a PromQL query and the condition its value
// must meet.
type Check struct {
	// Name identifies the check in statuses, events, halt reasons and
	// metric labels: 1-63 of a-z, 0-9, '-' and '_'.
	Name string `json:"name"`
	// Query is PromQL, a text/template in which {{.Group}}, {{.Version}}
	// (the target version) and {{.StartVersion}} (the plan's start
	// version) are replaced; nothing else may appear in {{ }}.
	Query string `json:"query"`
	// Success is the condition a value must meet ("< 0.01").
	Success Condition `json:"success"`
	// Failure, when set, is the condition that fails a value ("> 0.05");
	// a value that meets neither is inconclusive. Without it, a value
	// that does not meet Success fails.
	Failure Condition `json:"failure,omitempty"`
	// Interval is how often the query runs (no more often than the
	// controller's rollout pass).
	Interval Duration `json:"interval"`
	// Count is how many successful measurements, taken in the canary
	// phase once every canary is healthy on the target, the group needs
	// before it may leave canary.
	Count int `json:"count"`
	// InconclusiveLimit is how many inconclusive measurements in a row
	// (no data, an error, Prometheus unreachable) halt the group; fewer
	// hold it.
	InconclusiveLimit int `json:"inconclusive_limit"`
}

// Defaults and limits of checks.
const (
	DefaultCheckInterval     = Duration(time.Minute)
	DefaultCheckCount        = 3
	DefaultInconclusiveLimit = 5
	// MaxChecks bounds a group's checks (the fleet's and its own).
	MaxChecks            = 20
	MaxCheckCount        = 1000
	MaxInconclusiveLimit = 1000
	MinCheckInterval     = time.Second
	MaxCheckInterval     = time.Hour
	// MaxQueryLen bounds a query template, and twice it a rendered query.
	MaxQueryLen = 4096
	// maxCheckNameLen bounds a check name (a metric label value).
	maxCheckNameLen = 63
	// MaxSeries bounds the series one measurement may have: a query that
	// returns more is inconclusive (TooManySeries), never judged on some of
	// them, since the series left out could be the failing ones. A check
	// that wants every instance judged aggregates (max, min) in PromQL.
	MaxSeries = 10
	// MaxSeriesLen bounds a sample's series as a measurement, a status or
	// a halt reason keeps it: Prometheus's labels are a peer's text.
	MaxSeriesLen = 256
)

// TooManySeries is why a measurement of n series (more than MaxSeries) is
// inconclusive.
func TooManySeries(n int) string {
	return fmt.Sprintf("the query returned %d series, at most %d: aggregate them, as in max(…) for a success like \"< 0.01\" or min(…) for \"> 0.99\"", n, MaxSeries)
}

// defaultCheck is a check with every setting at its default.
func defaultCheck() Check {
	return Check{Interval: DefaultCheckInterval, Count: DefaultCheckCount, InconclusiveLimit: DefaultInconclusiveLimit}
}

// UnmarshalJSON decodes a check over the defaults (interval 1m, count 3,
// inconclusive_limit 5), rejecting unknown fields.
func (c *Check) UnmarshalJSON(b []byte) error {
	d := defaultCheck()
	err := decodeObject(b, map[string]any{
		"name":               &d.Name,
		"query":              &d.Query,
		"success":            &d.Success,
		"failure":            &d.Failure,
		"interval":           &d.Interval,
		"count":              &d.Count,
		"inconclusive_limit": &d.InconclusiveLimit,
	}, true)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	*c = d
	return nil
}

// Condition compares a measured value with a number: one of <, <=, >, >=,
// ==, != followed by a finite number ("< 0.01", ">=99.5", "== 0").
type Condition string

var conditionOps = []string{"<=", ">=", "==", "!=", "<", ">"}

// Parse splits c into its operator and number.
func (c Condition) Parse() (op string, x float64, err error) {
	s := strings.TrimSpace(string(c))
	for _, o := range conditionOps {
		if rest, ok := strings.CutPrefix(s, o); ok {
			x, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
				return "", 0, fmt.Errorf("condition %q: after %s write a finite number, as in \"< 0.01\"", truncate(string(c), 40), o)
			}
			return o, x, nil
		}
	}
	return "", 0, fmt.Errorf("condition %q: write an operator (<, <=, >, >=, ==, !=) and a number, as in \"< 0.01\"", truncate(string(c), 40))
}

// Met reports whether v meets c; false for a condition that does not parse.
func (c Condition) Met(v float64) bool {
	op, x, err := c.Parse()
	if err != nil {
		return false
	}
	switch op {
	case "<":
		return v < x
	case "<=":
		return v <= x
	case ">":
		return v > x
	case ">=":
		return v >= x
	case "==":
		return v == x
	case "!=":
		return v != x
	}
	return false
}

// String is c with one space after the operator ("< 0.01").
func (c Condition) String() string {
	op, x, err := c.Parse()
	if err != nil {
		return string(c)
	}
	return op + " " + strconv.FormatFloat(x, 'g', -1, 64)
}

// QueryData is what a check's query template may name.
type QueryData struct {
	Group        string
	Version      string
	StartVersion string
}

var queryFields = []string{"Group", "Version", "StartVersion"}

// parseQuery parses a query template, allowing only text and the actions
// {{.Group}}, {{.Version}} and {{.StartVersion}}: no functions, pipelines,
// conditions or loops, so rendering is a plain substitution.
func parseQuery(q string) (*template.Template, error) {
	if strings.TrimSpace(q) == "" {
		return nil, errors.New("query is empty")
	}
	if len(q) > MaxQueryLen {
		return nil, fmt.Errorf("query is %d bytes, at most %d", len(q), MaxQueryLen)
	}
	t, err := template.New("query").Option("missingkey=error").Parse(q)
	if err != nil {
		return nil, fmt.Errorf("query: %v", err)
	}
	if t.Tree == nil || t.Tree.Root == nil {
		return t, nil
	}
	for _, n := range t.Tree.Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			continue
		case *parse.ActionNode:
			if len(n.Pipe.Decl) == 0 && len(n.Pipe.Cmds) == 1 && len(n.Pipe.Cmds[0].Args) == 1 {
				if f, ok := n.Pipe.Cmds[0].Args[0].(*parse.FieldNode); ok && len(f.Ident) == 1 && slices.Contains(queryFields, f.Ident[0]) {
					continue
				}
			}
		}
		return nil, fmt.Errorf("query: %q: only {{.Group}}, {{.Version}} and {{.StartVersion}} may appear between {{ and }}", truncate(n.String(), 40))
	}
	return t, nil
}

// Render is the check's query with the placeholders replaced.
func (c Check) Render(d QueryData) (string, error) {
	t, err := parseQuery(c.Query)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := t.Execute(&b, d); err != nil {
		return "", fmt.Errorf("query: %v", err)
	}
	out := b.String()
	if strings.TrimSpace(out) == "" {
		return "", errors.New("query renders empty")
	}
	if len(out) > 2*MaxQueryLen {
		return "", fmt.Errorf("query renders to %d bytes, at most %d", len(out), 2*MaxQueryLen)
	}
	return out, nil
}

func (c Check) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := validateCheckName(c.Name); err != nil {
		bad("name: %v", err)
	}
	if _, err := c.Render(QueryData{Group: "g", Version: "1.0.0", StartVersion: "1.0.0"}); err != nil {
		bad("%v", err)
	}
	if _, _, err := c.Success.Parse(); err != nil {
		bad("success: %v", err)
	}
	if c.Failure != "" {
		if _, _, err := c.Failure.Parse(); err != nil {
			bad("failure: %v", err)
		}
	}
	if d := c.Interval.D(); d < MinCheckInterval || d > MaxCheckInterval {
		bad("interval %q must be %s-%s", c.Interval, Duration(MinCheckInterval), Duration(MaxCheckInterval))
	}
	if c.Count < 1 || c.Count > MaxCheckCount {
		bad("count %d must be 1-%d", c.Count, MaxCheckCount)
	}
	if c.InconclusiveLimit < 1 || c.InconclusiveLimit > MaxInconclusiveLimit {
		bad("inconclusive_limit %d must be 1-%d", c.InconclusiveLimit, MaxInconclusiveLimit)
	}
	return errs
}

func validateCheckName(n string) error {
	if n == "" {
		return errors.New("empty")
	}
	if len(n) > maxCheckNameLen {
		return fmt.Errorf("%q: longer than %d characters", truncate(n, 70), maxCheckNameLen)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		alnum := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		if alnum || (c == '-' || c == '_') && i != 0 && i != len(n)-1 {
			continue
		}
		return fmt.Errorf("%q: use a-z, 0-9, '-' and '_', starting and ending with a letter or digit", truncate(n, 70))
	}
	return nil
}

// validateChecks checks one list of checks (where names it in errors).
func validateChecks(where string, checks []Check) []error {
	var errs []error
	seen := map[string]bool{}
	for i, c := range checks {
		name := fmt.Sprintf("%s[%d]", where, i)
		if c.Name != "" {
			name += fmt.Sprintf(" %q", c.Name)
		}
		for _, err := range c.validate() {
			errs = append(errs, fmt.Errorf("%s: %v", name, err))
		}
		if c.Name != "" && seen[c.Name] {
			errs = append(errs, fmt.Errorf("%s: listed twice; check names must be unique", name))
		}
		seen[c.Name] = true
	}
	return errs
}

// validateAnalysis checks the analysis settings of the fleet and of every
// group.
func (c Config) validateAnalysis() []error {
	errs := validateChecks("analysis", c.Analysis)
	hasChecks := len(c.Analysis) > 0
	for _, g := range c.Groups {
		if len(g.Analysis) == 0 {
			continue
		}
		hasChecks = true
		for _, err := range validateChecks("analysis", g.Analysis) {
			errs = append(errs, fmt.Errorf("group %q: %v", g.Name, err))
		}
	}
	for _, g := range c.Groups {
		checks := c.Checks(g.Name)
		if n := len(checks); n > MaxChecks {
			errs = append(errs, fmt.Errorf("group %q: %d analysis checks (the fleet's and its own), at most %d", g.Name, n, MaxChecks))
		}
		if n := queryBytes(g.Name, checks); n > MaxGroupQueryBytes {
			errs = append(errs, fmt.Errorf("group %q: its analysis queries take %d bytes in the group's status (as JSON, with versions of the longest form), at most %d: shorten them or use fewer checks",
				g.Name, n, MaxGroupQueryBytes))
		}
	}
	if c.PrometheusURL == "" {
		if hasChecks {
			errs = append(errs, errors.New("analysis checks need prometheus_url (the Prometheus server the controller queries, as \"http://prometheus:9090\")"))
		}
		if c.PrometheusBearerTokenFile != "" || c.PrometheusCAFile != "" || c.PrometheusInsecureSkipVerify {
			errs = append(errs, errors.New("prometheus_bearer_token_file, prometheus_ca_file and prometheus_insecure_skip_verify need prometheus_url"))
		}
		return errs
	}
	u, err := url.Parse(c.PrometheusURL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		errs = append(errs, fmt.Errorf("prometheus_url %q: want an http or https URL such as \"http://prometheus:9090\"", truncate(c.PrometheusURL, 80)))
	case u.User != nil:
		errs = append(errs, fmt.Errorf("prometheus_url: no credentials in the URL; use prometheus_bearer_token_file"))
	case u.RawQuery != "" || u.Fragment != "":
		errs = append(errs, fmt.Errorf("prometheus_url %q: no query or fragment; the base URL of the API only", truncate(c.PrometheusURL, 80)))
	case u.Scheme == "http" && (c.PrometheusCAFile != "" || c.PrometheusInsecureSkipVerify):
		errs = append(errs, errors.New("prometheus_ca_file and prometheus_insecure_skip_verify need an https prometheus_url"))
	}
	for _, f := range []struct{ field, v string }{{"prometheus_bearer_token_file", c.PrometheusBearerTokenFile}, {"prometheus_ca_file", c.PrometheusCAFile}} {
		if f.v != "" && !strings.HasPrefix(f.v, "/") {
			errs = append(errs, fmt.Errorf("%s %q: want an absolute path on the controller's host", f.field, truncate(f.v, 80)))
		}
	}
	return errs
}

// queryBytes is how many bytes the checks' rendered queries take in the
// JSON of group's status at most: rendered with versions of MaxVersionLen
// bytes. A check whose query does not parse counts 0 (validate reports it).
func queryBytes(group string, checks []Check) int {
	longest := strings.Repeat("9", MaxVersionLen)
	n := 0
	for _, c := range checks {
		t, err := parseQuery(c.Query)
		if err != nil {
			continue
		}
		var b strings.Builder
		if t.Execute(&b, QueryData{Group: group, Version: longest, StartVersion: longest}) != nil {
			continue
		}
		if data, err := json.Marshal(b.String()); err == nil {
			n += len(data)
		}
	}
	return n
}

// Checks returns the checks the group runs: the fleet's checks, in order,
// a group check with the same name as a fleet check taking its place, then
// the group's other checks in their order. A group cannot drop a fleet
// check, only redefine it.
func (c Config) Checks(group string) []Check {
	g, _ := c.Group(group)
	if len(c.Analysis) == 0 {
		return g.Analysis
	}
	out := slices.Clone(c.Analysis)
	for _, gc := range g.Analysis {
		if i := slices.IndexFunc(out, func(f Check) bool { return f.Name == gc.Name }); i >= 0 && i < len(c.Analysis) {
			out[i] = gc
			continue
		}
		out = append(out, gc)
	}
	return out
}

// Result is the outcome of one measurement (as Argo Rollouts names them).
type Result string

// Results.
const (
	ResultSuccessful   Result = "successful"
	ResultFailed       Result = "failed"
	ResultInconclusive Result = "inconclusive"
)

// Sample is one series of a query's result.
type Sample struct {
	// Series is the series' labels as PromQL writes them ("{instance=\"a\"}"),
	// "" for a scalar or a series without labels.
	Series string
	Value  float64
}

// Measurement is one run of a check's query, as the controller took it:
// the samples the query returned, or why there are none.
type Measurement struct {
	Group string
	Check string
	// Query is the rendered query that ran: a measurement of a query the
	// check no longer has (the config changed) is ignored.
	Query string
	At    time.Time
	// Samples are the result's series; none is "no data".
	Samples []Sample
	// Error, when set, is why the query gave no result (Prometheus
	// unreachable, an error it returned, a timeout).
	Error string
}

// Judgement is what Judge makes of a measurement.
type Judgement struct {
	Result Result
	// Value is the deciding sample's value, when there is one that is a
	// finite number (HasValue).
	Value    float64
	HasValue bool
	// Series names the deciding sample when the query returned several.
	Series string
	// Detail says why, for people: "0.2 does not meet success < 0.01",
	// "no data", the error.
	Detail string
}

// Judge judges one measurement of c. An error, no data, more than
// MaxSeries series, or a value that is not a finite number is inconclusive. A value that meets Failure fails;
// else one that meets Success succeeds; else it fails when c has no
// Failure, and is inconclusive when it has one (it is between the two).
// When the query returned several series each is judged and the worst
// decides (failed over inconclusive over successful; the first in the
// result of equals): every series must pass.
func Judge(c Check, m Measurement) Judgement {
	switch {
	case m.Error != "":
		return Judgement{Result: ResultInconclusive, Detail: truncate(m.Error, 300)}
	case len(m.Samples) == 0:
		return Judgement{Result: ResultInconclusive, Detail: "no data (the query returned no series)"}
	case len(m.Samples) > MaxSeries:
		return Judgement{Result: ResultInconclusive, Detail: TooManySeries(len(m.Samples))}
	}
	var worst Judgement
	for i, s := range m.Samples {
		j := judgeValue(c, s.Value)
		if len(m.Samples) > 1 {
			j.Series = ClipText(s.Series, MaxSeriesLen)
		}
		if i == 0 || severity(j.Result) > severity(worst.Result) {
			worst = j
		}
	}
	return worst
}

func severity(r Result) int {
	switch r {
	case ResultFailed:
		return 2
	case ResultInconclusive:
		return 1
	}
	return 0
}

func judgeValue(c Check, v float64) Judgement {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return Judgement{Result: ResultInconclusive, Detail: fmt.Sprintf("value %v is not a number to judge", v)}
	}
	j := Judgement{Value: v, HasValue: true}
	s := FormatValue(v)
	switch {
	case c.Failure != "" && c.Failure.Met(v):
		j.Result, j.Detail = ResultFailed, fmt.Sprintf("%s meets failure %s", s, c.Failure)
	case c.Success.Met(v):
		j.Result, j.Detail = ResultSuccessful, fmt.Sprintf("%s meets success %s", s, c.Success)
	case c.Failure == "":
		j.Result, j.Detail = ResultFailed, fmt.Sprintf("%s does not meet success %s", s, c.Success)
	default:
		j.Result, j.Detail = ResultInconclusive, fmt.Sprintf("%s meets neither success %s nor failure %s", s, c.Success, c.Failure)
	}
	return j
}

// FormatValue writes a measured value for people: at most 4 significant
// digits ("0.0123", "1.5e-05", "250").
func FormatValue(v float64) string {
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// CheckStatus is where one check stands in the group's rollout of its
// target: the check as the group runs it (its rendered query), and what
// its measurements found. Counting starts afresh when the group starts,
// when an operator resets it, and when the check's query or conditions
// change.
type CheckStatus struct {
	Name string `json:"name"`
	// Query is the rendered query the controller runs.
	Query             string    `json:"query"`
	Success           Condition `json:"success"`
	Failure           Condition `json:"failure,omitempty"`
	Interval          Duration  `json:"interval"`
	Count             int       `json:"count"`
	InconclusiveLimit int       `json:"inconclusive_limit"`
	// Since is when counting began (the group's failures_since then).
	Since time.Time `json:"since,omitzero"`
	// Measurements counts the measurements judged; Passes the successful
	// ones; Inconclusive the inconclusive ones since the last conclusive
	// one (in a row).
	Measurements int `json:"measurements"`
	Passes       int `json:"passes"`
	Inconclusive int `json:"inconclusive"`
	// Result, Value, Series, Detail and At are the last measurement's.
	Result Result    `json:"result,omitempty"`
	Value  *float64  `json:"value,omitempty"`
	Series string    `json:"series,omitempty"`
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at,omitzero"`
}

// Passed reports whether the check has passed its count and its last
// measurement succeeded: it lets the group leave canary.
func (c CheckStatus) Passed() bool {
	return c.Passes >= c.Count && c.Result == ResultSuccessful
}

// AnalysisRunning reports whether the group's checks are measured now: in
// active, and in canary once every canary is healthy on the target (before,
// a query about the target has no data yet); never while halted or not
// enabled, nor in canary without canaries (the checks run in active).
func (st GroupStatus) AnalysisRunning() bool {
	if st.Halted || len(st.Analysis) == 0 || (st.Mode != "" && st.Mode != ModeEnabled) {
		return false
	}
	switch st.State {
	case StateActive:
		return true
	case StateCanary:
		if len(st.Canaries) == 0 {
			return false
		}
		for _, c := range st.Canaries {
			if c.HealthySince.IsZero() {
				return false
			}
		}
		return true
	}
	return false
}

// ChecksDue are the group's checks to measure at now: all of them while
// AnalysisRunning, each once its interval has passed since it was last
// measured.
func (st GroupStatus) ChecksDue(now time.Time) []CheckStatus {
	if !st.AnalysisRunning() {
		return nil
	}
	var out []CheckStatus
	for _, c := range st.Analysis {
		if c.At.IsZero() || !now.Before(c.At.Add(c.Interval.D())) {
			out = append(out, c)
		}
	}
	return out
}

// analysisVerdict is what the checks let the group do in this step.
type analysisVerdict struct {
	halted  bool // a check halted the group
	hold    bool // a check is inconclusive: progress waits
	promote bool // every check passed its count: canary may end
}

// analyze brings the group's check statuses in line with the config,
// judges the new measurements of running checks, and decides: a failed
// measurement halts the group, inconclusive_limit inconclusive ones in a
// row halt it, fewer hold it (Waiting says so; never a halt), and in
// canary every check must have passed its count.
func (m *machine) analyze() analysisVerdict {
	st := &m.st
	checks := m.in.Config.Checks(m.in.Group)
	m.syncChecks(checks)
	if len(st.Analysis) == 0 || st.State == StateCanary && len(st.Canaries) == 0 {
		return analysisVerdict{promote: true}
	}
	if !st.AnalysisRunning() {
		return analysisVerdict{}
	}
	ms := slices.Clone(m.in.Measurements)
	slices.SortStableFunc(ms, func(a, b Measurement) int { return a.At.Compare(b.At) })
	for _, me := range ms {
		i := slices.IndexFunc(st.Analysis, func(c CheckStatus) bool { return c.Name == me.Check })
		if me.Group != m.in.Group || i < 0 {
			continue
		}
		cs := &st.Analysis[i]
		if me.Query != cs.Query || !me.At.After(cs.At) || me.At.Before(cs.Since) {
			continue // for another query, already judged, or before counting began
		}
		if m.measure(cs, checks[i], me) {
			return analysisVerdict{halted: true}
		}
	}
	v := analysisVerdict{promote: true}
	var waiting []string
	for _, c := range st.Analysis {
		switch {
		case c.Inconclusive > 0:
			v.hold, v.promote = true, false
			waiting = append(waiting, fmt.Sprintf("analysis inconclusive: check %q, %d of inconclusive_limit %d in a row (%s)",
				c.Name, c.Inconclusive, c.InconclusiveLimit, truncate(c.Detail, 120)))
		case !c.Passed():
			v.promote = false
			if st.State == StateCanary {
				waiting = append(waiting, fmt.Sprintf("analysis: check %q passed %d of %d", c.Name, c.Passes, c.Count))
			}
		}
	}
	if len(waiting) > 0 {
		what := "promotion waits"
		if v.hold {
			what = "the group holds until a conclusive measurement, or halts at the limit"
		}
		m.wait(truncate(strings.Join(waiting, "; ")+": "+what, 400), time.Time{})
	}
	return v
}

// syncChecks makes st.Analysis the group's checks, in config order,
// keeping the counts of each check whose query and conditions are the
// same and whose counting began at the group's failures_since, starting
// the others afresh.
func (m *machine) syncChecks(checks []Check) {
	st := &m.st
	if len(checks) == 0 {
		st.Analysis = nil
		return
	}
	out := make([]CheckStatus, 0, len(checks))
	for _, c := range checks {
		q, err := c.Render(QueryData{Group: m.in.Group, Version: st.TargetVersion, StartVersion: st.StartVersion})
		if err != nil {
			q = "" // Validate renders every check: not reached
		}
		cs := CheckStatus{Name: c.Name, Query: q, Success: c.Success, Failure: c.Failure, Since: st.FailuresSince}
		if i := slices.IndexFunc(st.Analysis, func(p CheckStatus) bool { return p.Name == c.Name }); i >= 0 {
			p := st.Analysis[i]
			if p.Query == q && p.Success == c.Success && p.Failure == c.Failure && p.Since.Equal(st.FailuresSince) {
				cs = p
			}
		}
		cs.Interval, cs.Count, cs.InconclusiveLimit = c.Interval, c.Count, c.InconclusiveLimit
		out = append(out, cs)
	}
	st.Analysis = out
}

// measure judges one measurement of cs and reports whether it halted the
// group. It emits an analysis event when the check passes its count in
// canary, when it turns inconclusive, and when it is conclusive again:
// not one per measurement.
func (m *machine) measure(cs *CheckStatus, c Check, me Measurement) bool {
	st := &m.st
	j := Judge(c, me)
	cs.Measurements++
	cs.At, cs.Result, cs.Series, cs.Detail, cs.Value = me.At, j.Result, j.Series, j.Detail, nil
	if j.HasValue {
		v := j.Value
		cs.Value = &v
	}
	wasInconclusive := cs.Inconclusive
	switch j.Result {
	case ResultSuccessful:
		cs.Passes++
		cs.Inconclusive = 0
		if wasInconclusive > 0 {
			m.emit(EventAnalysis, st.State, st.State, fmt.Sprintf("check %q conclusive again after %d inconclusive: %s", cs.Name, wasInconclusive, j.Detail))
		}
		if st.State == StateCanary && cs.Passes == cs.Count {
			m.emit(EventAnalysis, st.State, st.State, fmt.Sprintf("check %q passed %d of %d: %s", cs.Name, cs.Passes, cs.Count, j.Detail))
		}
	case ResultInconclusive:
		cs.Inconclusive++
		if cs.Inconclusive >= cs.InconclusiveLimit {
			m.halt(fmt.Sprintf("analysis inconclusive: check %q, %d inconclusive measurements in a row (inconclusive_limit %d), last: %s; query: %s",
				cs.Name, cs.Inconclusive, cs.InconclusiveLimit, j.Detail, truncate(cs.Query, 300)))
			return true
		}
		if cs.Inconclusive == 1 {
			m.emit(EventAnalysis, st.State, st.State, fmt.Sprintf("check %q inconclusive (%s): the group holds until a conclusive measurement, and halts after inconclusive_limit %d in a row",
				cs.Name, j.Detail, cs.InconclusiveLimit))
		}
	case ResultFailed:
		cs.Inconclusive = 0
		series := ""
		if j.Series != "" {
			series = " (series " + ClipText(j.Series, 120) + ")"
		}
		m.halt(fmt.Sprintf("analysis failed: check %q measured %s%s: %s; query: %s",
			cs.Name, FormatValue(j.Value), series, j.Detail, truncate(cs.Query, 300)))
		return true
	}
	return false
}

// validateAnalysis checks the check statuses of a stored group status.
func (st GroupStatus) validateAnalysis() []error {
	var errs []error
	for i, c := range st.Analysis {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("analysis[%d]: "+format, append([]any{i}, args...)...))
		}
		if err := validateCheckName(c.Name); err != nil {
			bad("name: %v", err)
		}
		if c.Measurements < 0 || c.Passes < 0 || c.Inconclusive < 0 || c.Count < 0 || c.InconclusiveLimit < 0 || c.Interval < 0 {
			bad("counts and interval must not be negative")
		}
		switch c.Result {
		case "", ResultSuccessful, ResultFailed, ResultInconclusive:
		default:
			bad("result %q must be successful, failed or inconclusive", truncate(string(c.Result), 40))
		}
		if c.Value != nil && (math.IsNaN(*c.Value) || math.IsInf(*c.Value, 0)) {
			bad("value must be a finite number")
		}
	}
	return errs
}

// analysisPassed is what a canary → active transition's reason adds about
// the checks: "" without checks.
func analysisPassed(checks []CheckStatus, canaries int) string {
	if len(checks) == 0 {
		return ""
	}
	if canaries == 0 {
		return fmt.Sprintf("; %d analysis checks run in active", len(checks))
	}
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = fmt.Sprintf("%s %d/%d", c.Name, c.Passes, c.Count)
	}
	return "; analysis passed: " + strings.Join(names, ", ")
}

// Satisfying is a value that meets c: the bound itself for <=, >= and ==,
// one past it for <, > and !=.
func (c Condition) Satisfying() float64 {
	op, x, _ := c.Parse()
	switch op {
	case "<":
		return x - 1
	case ">", "!=":
		return x + 1
	}
	return x
}

// PassingMeasurements are successful measurements, taken at now, of the
// group's checks that are due (ChecksDue): what a rollout whose metrics
// stay good would measure. For running the state machine over simulated
// time (a forecast) without Prometheus.
func (st GroupStatus) PassingMeasurements(now time.Time) []Measurement {
	var out []Measurement
	for _, c := range st.ChecksDue(now) {
		out = append(out, Measurement{Group: st.Group, Check: c.Name, Query: c.Query, At: now,
			Samples: []Sample{{Value: c.Success.Satisfying()}}})
	}
	return out
}
