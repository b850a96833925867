package fleetctl

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

const analysisYAML = `prometheus_url: http://prometheus:9090
analysis:
  - name: error-rate
    query: 'sum(rate(app_errors_total{version="{{.Version}}"}[5m])) / sum(rate(app_requests_total{version="{{.Version}}"}[5m]))'
    success: "< 0.01"
    interval: 1m
    count: 3
groups:
  - name: staging
  - name: prod
    analysis:
      - name: latency-p99
        query: 'histogram_quantile(0.99, sum by (le) (rate(app_request_seconds_bucket{group="{{.Group}}",version="{{.Version}}"}[5m])))'
        success: "< 0.3"
        failure: "> 1"
        inconclusive_limit: 10
`

// TestConfigApplyShowAnalysis: config apply stores the metric analysis
// settings (defaults for omitted check fields), config show prints them,
// and its output applies back unchanged.
func TestConfigApplyShowAnalysis(t *testing.T) {
	e := newEnv(t)
	e.mustRun(configApply(writeFile(t, "fleet.yaml", analysisYAML)))
	cfg := e.config().Value
	if cfg.PrometheusURL != "http://prometheus:9090" {
		t.Errorf("prometheus_url %q", cfg.PrometheusURL)
	}
	want := []rollout.Check{
		{Name: "error-rate", Query: `sum(rate(app_errors_total{version="{{.Version}}"}[5m])) / sum(rate(app_requests_total{version="{{.Version}}"}[5m]))`,
			Success: "< 0.01", Interval: rollout.Duration(time.Minute), Count: 3, InconclusiveLimit: rollout.DefaultInconclusiveLimit},
		{Name: "latency-p99", Query: `histogram_quantile(0.99, sum by (le) (rate(app_request_seconds_bucket{group="{{.Group}}",version="{{.Version}}"}[5m])))`,
			Success: "< 0.3", Failure: "> 1", Interval: rollout.DefaultCheckInterval, Count: rollout.DefaultCheckCount, InconclusiveLimit: 10},
	}
	if diff := cmp.Diff(want, cfg.Checks("prod")); diff != "" {
		t.Errorf("prod's checks (-want +got):\n%s", diff)
	}
	shown := e.mustRun(configShow("yaml"))
	for _, s := range []string{"prometheus_url: http://prometheus:9090", "name: latency-p99", `failure: '> 1'`, "inconclusive_limit: 10"} {
		if !strings.Contains(shown, s) {
			t.Errorf("config show lacks %q:\n%s", s, shown)
		}
	}
	rev := e.configRevision()
	out := e.mustRun(configApply(writeFile(t, "shown.yaml", shown)))
	if !strings.Contains(out, "unchanged") || e.configRevision() != rev {
		t.Errorf("applying config show's output changed the config:\n%s", out)
	}
}

func TestConfigApplyBadAnalysisWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		parts      []string
	}{
		{"no prometheus_url", "analysis: [{name: e, query: up, success: '< 1'}]\ngroups: [{name: prod}]\n",
			[]string{"analysis checks need prometheus_url"}},
		{"bad condition", "prometheus_url: http://p:9090\nanalysis: [{name: e, query: up, success: 'below 1'}]\ngroups: [{name: prod}]\n",
			[]string{`analysis[0] "e": success: condition "below 1": write an operator`}},
		{"bad placeholder", "prometheus_url: http://p:9090\ngroups: [{name: prod, analysis: [{name: e, query: 'x{v=\"{{.Target}}\"}', success: '< 1'}]}]\n",
			[]string{`group "prod": analysis[0] "e": query: "{{.Target}}": only {{.Group}}, {{.Version}} and {{.StartVersion}}`}},
		{"interval too short", "prometheus_url: http://p:9090\nanalysis: [{name: e, query: up, success: '< 1', interval: 100ms}]\ngroups: [{name: prod}]\n",
			[]string{`interval "100ms" must be 1s-1h`}},
		{"names not unique", "prometheus_url: http://p:9090\nanalysis: [{name: e, query: up, success: '< 1'}, {name: e, query: up, success: '< 2'}]\ngroups: [{name: prod}]\n",
			[]string{`analysis[1] "e": listed twice`}},
		{"unknown check field", "prometheus_url: http://p:9090\nanalysis: [{name: e, query: up, success: '< 1', threshold: 2}]\ngroups: [{name: prod}]\n",
			[]string{`unknown field "threshold"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.putConfig(rollout.DefaultConfig())
			before := e.config()
			_, err := e.run(configApply(writeFile(t, "c.yaml", tc.yaml)))
			mustContain(t, err, tc.parts...)
			if code := cliutil.ExitCode(err); code != cliutil.ExitUsage {
				t.Errorf("exit code %d, want %d", code, cliutil.ExitUsage)
			}
			if after := e.config(); after.Revision != before.Revision {
				t.Errorf("an invalid config wrote: revision %d → %d", before.Revision, after.Revision)
			}
		})
	}
}

// TestConfigAnalysisChangesWhileGroupRollsOut: a group in active may get
// its checks changed (a wrong query must be fixable mid-rollout); its
// schedule still may not.
func TestConfigAnalysisChangesWhileGroupRollsOut(t *testing.T) {
	e := newEnv(t)
	e.putConfig(rollout.DefaultConfig())
	e.putStatus(rollout.GroupStatus{V: 1, Group: "default", State: rollout.StateActive, TargetVersion: "1.4.0", StartVersion: "1.3.2"})
	e.mustRun(configApply(writeFile(t, "c.yaml", "prometheus_url: http://p:9090\ngroups: [{name: default, analysis: [{name: e, query: up, success: '< 1'}]}]\n")))
	if got := e.config().Value.Checks("default"); len(got) != 1 {
		t.Errorf("checks %v", got)
	}
}
