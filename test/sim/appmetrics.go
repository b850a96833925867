package sim

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The simulated app's own metrics, for metric analysis (docs/rollout.md
// "Gates"): what an exporter of the app would report, from the
// simulator's knowledge of which hosts run which version.

// ErrorRateMetric is the gauge the simulated app serves: per group and
// version, the mean error rate of the group's hosts running the version.
const ErrorRateMetric = "sim_app_error_rate"

var (
	descErrorRate = prometheus.NewDesc(ErrorRateMetric,
		"The simulated app's error rate: the mean over the group's hosts running the version.", []string{"group", "version"}, nil)
	descAppHosts = prometheus.NewDesc("sim_app_hosts",
		"The group's simulated hosts running the version.", []string{"group", "version"}, nil)
)

// appCollector computes the app's metrics at scrape time.
type appCollector struct{ s *Sim }

func (c appCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descErrorRate
	ch <- descAppHosts
}

func (c appCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	perGroup := make([]map[string]int, len(s.groups))
	size := make([]int, len(s.groups))
	for i := range perGroup {
		perGroup[i] = map[string]int{}
	}
	for _, sh := range s.shards {
		sh.mu.Lock()
		for i := range sh.agents {
			a := &sh.agents[i]
			perGroup[a.group][sh.vers[a.active]]++
			size[a.group]++
		}
		sh.mu.Unlock()
	}
	for g, versions := range perGroup {
		for v, n := range versions {
			ch <- prometheus.MustNewConstMetric(descAppHosts, prometheus.GaugeValue, float64(n), s.groups[g], v)
			ch <- prometheus.MustNewConstMetric(descErrorRate, prometheus.GaugeValue, s.errorRate(v, n, size[g]), s.groups[g], v)
		}
	}
}

// errorRate is the error rate of a host running v in a group of size
// hosts of which n run v: ErrorRate[v] once ErrorRateFrom[v] of the group
// runs it, else BaseErrorRate.
func (s *Sim) errorRate(v string, n, size int) float64 {
	rate, bad := s.o.ErrorRate[v]
	if !bad || size == 0 || float64(n)/float64(size) < s.o.ErrorRateFrom[v] {
		return s.o.BaseErrorRate
	}
	return rate
}

// serveAppMetrics serves the app's metrics at http://addr/metrics until
// the returned function is called.
func (s *Sim) serveAppMetrics(addr string) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(appCollector{s})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sim: app metrics: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("app metrics server stopped", "err", err)
		}
	}()
	return func() { _ = srv.Close(); <-done }, nil
}
