package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	fwctl "github.com/fleetwave/fleetwave/internal/fleetctl"
	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/promtest"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// startPrometheus runs a real Prometheus server (internal/promtest)
// scraping target's /metrics every second with deploy/prometheus's
// alerting rules, and returns its query API once it is ready. It fails,
// not skips, without prometheus.
func startPrometheus(t *testing.T, target string) promv1.API {
	t.Helper()
	rules, err := filepath.Abs("../../deploy/prometheus/fleetwave.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	return promtest.Start(t, promtest.Options{Targets: []string{target}, Job: "fleetwave-controller", RuleFiles: []string{rules}}).API
}

// promVector runs an instant query and returns its samples keyed by the
// values of labels, joined by "/".
func promVector(ctx context.Context, p promv1.API, query string, labels ...string) (map[string]float64, error) {
	v, _, _, err := p.Query(ctx, query, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", query, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("%s: a %s, want a vector", query, v.Type())
	}
	out := map[string]float64{}
	for _, s := range vec {
		var key []string
		for _, l := range labels {
			key = append(key, string(s.Metric[model.LabelName(l)]))
		}
		out[strings.Join(key, "/")] = float64(s.Value)
	}
	return out, nil
}

// promMatchesStatus compares what Prometheus scraped from the controller
// with "fleetctl status -o json": per group and version the agent count,
// and per group the progress.
func promMatchesStatus(ctx context.Context, p promv1.API, rep fwctl.StatusReport) error {
	versions, err := promVector(ctx, p, `max by (group, version) (sum without (state) (fleetwave_agents))`, "group", "version")
	if err != nil {
		return err
	}
	progress, err := promVector(ctx, p, `max by (group) (fleetwave_group_progress)`, "group")
	if err != nil {
		return err
	}
	want := map[string]float64{}
	var diffs []string
	for _, g := range rep.Groups {
		for v, vr := range g.Versions {
			want[g.Name+"/"+v] = float64(vr.Count)
		}
		if g.Rollout != nil && g.Rollout.State != "" {
			if got, ok := progress[g.Name]; !ok || math.Abs(got-g.Rollout.Progress) > 1e-9 {
				diffs = append(diffs, fmt.Sprintf("group %s: progress %v in Prometheus (present %v), %v in status", g.Name, got, ok, g.Rollout.Progress))
			}
		}
	}
	for k, n := range want {
		if versions[k] != n {
			diffs = append(diffs, fmt.Sprintf("%s: %v agents in Prometheus, %v in status", k, versions[k], n))
		}
	}
	for k, n := range versions {
		if _, ok := want[k]; !ok && n != 0 {
			diffs = append(diffs, fmt.Sprintf("%s: %v agents in Prometheus, none in status", k, n))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		return fmt.Errorf("%s", strings.Join(diffs, "; "))
	}
	return nil
}

// TestPrometheusScrapesRollout (issue 14 point 1): a real Prometheus server
// scrapes the controller process's /metrics through a rollout of real
// agentd processes. Its answers (agents per group and version, group
// progress) match "fleetctl status -o json" (the binary) mid-rollout, with
// prod holding in its canary phase, and once the rollout is done; it loaded
// deploy/prometheus's alerting rules, and FleetwaveNoLeader is not firing
// while a controller leads.
func TestPrometheusScrapesRollout(t *testing.T) {
	cfg := rollout.DefaultConfig()
	prod := groupConfig("prod", 1, 25)
	// Long enough that the canary phase is a steady state to compare.
	prod.MinHealthyTime = rollout.Duration(20 * time.Second)
	cfg.Groups = []rollout.GroupConfig{groupConfig("canary", 1, 50), prod}
	f := startFleet(t, map[string]int{"canary": 2, "prod": 4}, 0, func(f *fleet) {
		f.setConfig(cfg)
		f.setSpec(func(s *rollout.Spec) { s.StartVersion, s.TargetVersion = "1.0.0", "1.0.0" })
	})
	f.waitDone("1.0.0", 2*time.Minute)
	target := strings.TrimSuffix(strings.TrimPrefix(f.findURL, "http://"), "/v1/find")
	prom := startPrometheus(t, target)
	ctx := f.ctx

	status := func() fwctl.StatusReport {
		t.Helper()
		out, _ := fleetctl(t, f, 0, "status", "-o", "json")
		var rep fwctl.StatusReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("fleetctl status -o json: %v\n%s", err, out)
		}
		return rep
	}
	natstest.Eventually(t, time.Minute, func() error { return promMatchesStatus(ctx, prom, status()) })

	f.setSpec(func(s *rollout.Spec) { s.StartVersion, s.TargetVersion = "1.0.0", "1.1.0" })
	// Mid-rollout: canary done, prod in its canary phase with its canary on
	// the target and the others on 1.0.0.
	natstest.Eventually(t, 2*time.Minute, func() error {
		rep := status()
		for _, g := range rep.Groups {
			if g.Name == "prod" && (g.Rollout == nil || g.Rollout.State != rollout.StateCanary || g.Versions["1.1.0"].Count != 1) {
				return fmt.Errorf("prod not in its canary phase with the canary updated yet")
			}
		}
		return promMatchesStatus(ctx, prom, rep)
	})
	t.Log("mid-rollout: Prometheus matches fleetctl status")
	f.waitDone("1.1.0", 3*time.Minute)
	natstest.Eventually(t, time.Minute, func() error {
		rep := status()
		for _, g := range rep.Groups {
			if g.Name == "prod" && g.Versions["1.1.0"].Count != 4 {
				return fmt.Errorf("status has not counted prod on 1.1.0 yet")
			}
		}
		return promMatchesStatus(ctx, prom, rep)
	})
	// The group states as Prometheus last scraped them: prod may have
	// turned done after the last scrape, so wait for the next ones.
	natstest.Eventually(t, time.Minute, func() error {
		done, err := promVector(ctx, prom, `max by (group) (fleetwave_group_state{state="done"})`, "group")
		if err != nil {
			return err
		}
		if done["canary"] != 1 || done["prod"] != 1 {
			return fmt.Errorf("fleetwave_group_state{state=\"done\"}: %v, want 1 for canary and prod", done)
		}
		return nil
	})

	grafanaQueriesAnswer(t, ctx, prom)

	rules, err := prom.Rules(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]promv1.AlertingRule{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if a, ok := r.(promv1.AlertingRule); ok {
				alerts[a.Name] = a
			}
		}
	}
	if len(alerts) < 6 {
		t.Errorf("Prometheus loaded %d alerting rules, want the 6 of deploy/prometheus", len(alerts))
	}
	for name, a := range alerts {
		if a.Health != promv1.RuleHealthGood && a.Health != promv1.RuleHealthUnknown {
			t.Errorf("rule %s: health %s: %s", name, a.Health, a.LastError)
		}
	}
	if a := alerts["FleetwaveNoLeader"]; a.State != "inactive" {
		t.Errorf("FleetwaveNoLeader is %s while a controller leads", a.State)
	}
}

// grafanaQueriesAnswer runs every query of deploy/prometheus's Grafana
// dashboard (the $app and $group variables as every app and group) against the real
// Prometheus: each must evaluate, and those about the controller's numbers
// must return data; the $group variable's own query must list the groups.
// (No Grafana here: what it would send Prometheus is what is tested.)
func grafanaQueriesAnswer(t *testing.T, ctx context.Context, prom promv1.API) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	// Series only agentd, failures or a quarantine produce: none in this
	// run.
	mayBeEmpty := []string{"fleetwave_agent_", "heartbeats_rejected", "find_request", "fleetwave_version_quarantined"}
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				continue
			}
			n++
			q := strings.NewReplacer(`"$app"`, `".+"`, `"$group"`, `".+"`, "$__rate_interval", "1m", "$__range", "1h").Replace(tg.Expr)
			natstest.Eventually(t, time.Minute, func() error {
				v, warnings, _, err := prom.Query(ctx, q, time.Now())
				if err != nil {
					return fmt.Errorf("panel %q: %s: %w", p.Title, q, err)
				}
				if len(warnings) > 0 {
					return fmt.Errorf("panel %q: %s: warnings %v", p.Title, q, warnings)
				}
				vec, ok := v.(model.Vector)
				if !ok {
					return fmt.Errorf("panel %q: %s: a %s, want a vector", p.Title, q, v.Type())
				}
				for _, m := range mayBeEmpty {
					if strings.Contains(q, m) {
						return nil
					}
				}
				if len(vec) == 0 {
					return fmt.Errorf("panel %q: %s: no data from a controller mid-fleet", p.Title, q)
				}
				return nil
			})
		}
	}
	if n < 10 {
		t.Errorf("the Grafana dashboard has %d queries; the file was not read right", n)
	}
	groups, _, _, err := prom.LabelValues(ctx, "group", []string{"fleetwave_group_progress"}, time.Now().Add(-time.Hour), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The controller's first pass may run on the default config before
	// the test writes its own, leaving a status for group "default" (see
	// waitDone): a group with a status is a group the variable lists.
	var listed []string
	for _, g := range groups {
		if g != rollout.DefaultGroupName {
			listed = append(listed, string(g))
		}
	}
	if !slices.Equal(listed, []string{"canary", "prod"}) {
		t.Errorf("the $group variable's query lists %v, want canary and prod", groups)
	}
	t.Logf("all %d Grafana panel queries evaluate on Prometheus", n)
}
