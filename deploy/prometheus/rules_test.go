// Package prometheusdeploy tests deploy/prometheus: the scrape config and
// the alerting rules pass promtool, every alert has promtool unit tests that
// fire it, and every fleetwave metric the rules and the Grafana dashboard
// use is documented in docs/metrics.md.
package prometheusdeploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// promtool finds promtool (Debian package prometheus, which CI installs).
// It fails rather than skips: the rules are only known good when it ran.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (%v): install it (apt-get install prometheus; .ci/run does)", err)
	}
	return p
}

func TestPromtool(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "fleetwave.rules.yml"},
		{"check", "config", "prometheus.yml"},
		{"test", "rules", "fleetwave.rules_test.yml"},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestEveryAlertIsTested: each alert of the rules has a promtool case in
// which it fires.
func TestEveryAlertIsTested(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, "fleetwave.rules.yml", &rules)
	readYAML(t, "fleetwave.rules_test.yml", &tests)
	fired := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fired[a.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !fired[r.Alert] {
				t.Errorf("alert %s has no promtool case that fires it", r.Alert)
			}
		}
	}
	if n < 6 {
		t.Errorf("%d alerts; want at least the six of issue 14", n)
	}
}

var metricName = regexp.MustCompile(`\bfleetwave_[a-z_]+\b`)

// TestMetricsDocumented: every fleetwave_ metric in the rules and the
// dashboard is documented in docs/metrics.md (histograms by their base
// name), and the dashboard is valid JSON with a query in every panel.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := metricName.FindAllString(string(doc), -1)
	rules, err := os.ReadFile("fleetwave.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	dash, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dash, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 || p.Targets[0].Expr == "" {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
	}
	for _, name := range metricName.FindAllString(string(rules)+string(dash), -1) {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
		if !slices.Contains(documented, base) {
			t.Errorf("%s is used by the rules or the dashboard but not documented in docs/metrics.md", name)
		}
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
