package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Metric analysis, the controller's side (docs/rollout.md "Gates"): the
// leader runs each due check's query against Prometheus with the
// Prometheus Go API client, in the background so that a slow Prometheus
// never delays a rollout pass, and hands the measurements to the next
// pass's rollout.Next, which judges them. The rule lives in pkg/rollout;
// this file only fetches.

// Limits of one query.
const (
	// maxQueryTimeout bounds a query: a check's interval, at most this.
	maxQueryTimeout = 10 * time.Second
	// maxSeries bounds the series one measurement keeps; a query that
	// returns more is an error (inconclusive), not a judgement of some.
	maxSeries = 1000
)

// analyzer runs the groups' checks for the leader.
type analyzer struct {
	c *Controller

	mu sync.Mutex
	// ctx is Run's: queries end when the controller stops.
	ctx context.Context
	// pending are the measurements not yet handed to Next, by group.
	pending map[string][]rollout.Measurement
	// running is the set of group/check whose query runs now; started
	// when each check's last query started (its status learns of it only
	// once the next pass judged it).
	running map[string]bool
	started map[string]time.Time
	// lastErr is each check's last query error, logged when it changes.
	lastErr map[string]string
	client  promClient
	wg      sync.WaitGroup
}

// promClient is the API client for one set of Prometheus settings.
type promClient struct {
	settings rollout.AnalysisConfig // only the prometheus_* fields
	api      promv1.API
	err      error
}

func newAnalyzer(c *Controller) *analyzer {
	return &analyzer{c: c, ctx: context.Background(), pending: map[string][]rollout.Measurement{},
		running: map[string]bool{}, started: map[string]time.Time{}, lastErr: map[string]string{}}
}

// start makes queries end with ctx; stop waits for those running.
func (a *analyzer) start(ctx context.Context) {
	a.mu.Lock()
	a.ctx = ctx
	a.mu.Unlock()
}

func (a *analyzer) stop() { a.wg.Wait() }

// take hands the group's pending measurements to the caller; give them
// back with putBack when the pass that used them did not store its
// decision.
func (a *analyzer) take(group string) []rollout.Measurement {
	a.mu.Lock()
	defer a.mu.Unlock()
	ms := a.pending[group]
	delete(a.pending, group)
	return ms
}

func (a *analyzer) putBack(group string, ms []rollout.Measurement) {
	if len(ms) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending[group] = append(ms, a.pending[group]...)
}

// drop forgets every pending measurement: this controller no longer
// leads (the next leader measures for itself).
func (a *analyzer) drop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.pending)
}

// schedule starts the queries of the group's checks that are due at now
// (rollout.GroupStatus.ChecksDue) and not running or started within their
// interval.
func (a *analyzer) schedule(cfg rollout.Config, group string, st rollout.GroupStatus, now time.Time) {
	due := st.ChecksDue(now)
	if len(due) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	client := a.clientFor(cfg.AnalysisConfig)
	for _, cs := range due {
		key := group + "/" + cs.Name
		if a.running[key] {
			continue
		}
		if last, ok := a.started[key]; ok && last.After(cs.At) && now.Before(last.Add(cs.Interval.D())) {
			continue
		}
		a.running[key], a.started[key] = true, now
		ctx := a.ctx
		a.wg.Go(func() {
			m := a.measure(ctx, client, group, cs, now)
			a.mu.Lock()
			defer a.mu.Unlock()
			a.pending[group] = append(a.pending[group], m)
			delete(a.running, key)
			a.noteResult(key, group, cs, m)
		})
	}
}

// clientFor returns the API client for the config's Prometheus settings,
// building a new one when they changed. Called with a.mu held.
func (a *analyzer) clientFor(cfg rollout.AnalysisConfig) promClient {
	settings := rollout.AnalysisConfig{PrometheusURL: cfg.PrometheusURL, PrometheusBearerTokenFile: cfg.PrometheusBearerTokenFile,
		PrometheusCAFile: cfg.PrometheusCAFile, PrometheusInsecureSkipVerify: cfg.PrometheusInsecureSkipVerify}
	if a.client.api != nil || a.client.err != nil {
		if a.client.settings.PrometheusURL == settings.PrometheusURL && a.client.settings.PrometheusBearerTokenFile == settings.PrometheusBearerTokenFile &&
			a.client.settings.PrometheusCAFile == settings.PrometheusCAFile && a.client.settings.PrometheusInsecureSkipVerify == settings.PrometheusInsecureSkipVerify {
			return a.client
		}
	}
	a.client = promClient{settings: settings}
	a.client.api, a.client.err = newPromAPI(settings)
	if a.client.err != nil {
		a.c.o.Log.Error("analysis: cannot set up the Prometheus client; every check is inconclusive until the config is fixed",
			slog.String("prometheus_url", settings.PrometheusURL), slog.Any("err", a.client.err))
	}
	return a.client
}

// newPromAPI is the Prometheus API client for settings: the bearer token
// file read on every request (a rotated token is picked up), the CA file
// read once.
func newPromAPI(s rollout.AnalysisConfig) (promv1.API, error) {
	if s.PrometheusURL == "" {
		return nil, errors.New("no prometheus_url in the config")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if s.PrometheusCAFile != "" || s.PrometheusInsecureSkipVerify {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: s.PrometheusInsecureSkipVerify} //nolint:gosec // an explicit, documented test setting
		if s.PrometheusCAFile != "" {
			pem, err := os.ReadFile(s.PrometheusCAFile)
			if err != nil {
				return nil, fmt.Errorf("prometheus_ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("prometheus_ca_file %s: no PEM certificate in it", s.PrometheusCAFile)
			}
			tc.RootCAs = pool
		}
		tr.TLSClientConfig = tc
	}
	var rt http.RoundTripper = tr
	if s.PrometheusBearerTokenFile != "" {
		rt = &bearerFile{file: s.PrometheusBearerTokenFile, next: tr}
	}
	client, err := api.NewClient(api.Config{Address: s.PrometheusURL, RoundTripper: rt})
	if err != nil {
		return nil, fmt.Errorf("prometheus_url: %w", err)
	}
	return promv1.NewAPI(client), nil
}

// bearerFile adds "Authorization: Bearer <token>" with the token read
// from file on every request.
type bearerFile struct {
	file string
	next http.RoundTripper
}

func (b *bearerFile) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, err := os.ReadFile(b.file)
	if err != nil {
		return nil, fmt.Errorf("prometheus_bearer_token_file: %w", err)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	return b.next.RoundTrip(r)
}

// measure runs cs's query at Prometheus's now, bounded by cs's interval
// (at most maxQueryTimeout), and turns the answer into a measurement taken
// at at: its series, or why there are none.
func (a *analyzer) measure(ctx context.Context, client promClient, group string, cs rollout.CheckStatus, at time.Time) rollout.Measurement {
	m := rollout.Measurement{Group: group, Check: cs.Name, Query: cs.Query, At: at}
	if client.err != nil {
		m.Error = client.err.Error()
		a.c.m.analysisMeasurements.WithLabelValues(group, cs.Name, string(rollout.ResultInconclusive)).Inc()
		return m
	}
	timeout := min(max(cs.Interval.D(), time.Second), maxQueryTimeout)
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	v, _, _, err := client.api.Query(qctx, cs.Query, time.Time{})
	a.c.m.analysisQuery.Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		m.Error = describeQueryError(err, client.settings.PrometheusURL, timeout, errors.Is(qctx.Err(), context.DeadlineExceeded))
	default:
		m.Samples, err = samplesOf(v)
		if err != nil {
			m.Error = err.Error()
		}
	}
	j := rollout.Judge(rollout.Check{Success: cs.Success, Failure: cs.Failure}, m)
	a.c.m.analysisMeasurements.WithLabelValues(group, cs.Name, string(j.Result)).Inc()
	return m
}

// describeQueryError says why a query gave no result, for the check's
// status and the halt reason.
func describeQueryError(err error, url string, timeout time.Duration, timedOut bool) string {
	var apiErr *promv1.Error
	switch {
	case errors.As(err, &apiErr) && apiErr.Type != promv1.ErrClient:
		return fmt.Sprintf("Prometheus %s answered %s: %s", url, apiErr.Type, apiErr.Msg)
	case timedOut:
		return fmt.Sprintf("Prometheus %s did not answer within %s", url, timeout)
	}
	return fmt.Sprintf("Prometheus %s unreachable: %v", url, err)
}

// samplesOf turns a query's answer into samples, sorted by series: an
// instant vector (each series; none is no data) or a scalar. A range
// vector or a string is an error: it has no one value per series.
func samplesOf(v model.Value) ([]rollout.Sample, error) {
	switch v := v.(type) {
	case model.Vector:
		if len(v) > maxSeries {
			return nil, fmt.Errorf("the query returned %d series, at most %d: aggregate them (max, sum by)", len(v), maxSeries)
		}
		out := make([]rollout.Sample, 0, len(v))
		for _, s := range v {
			out = append(out, rollout.Sample{Series: s.Metric.String(), Value: float64(s.Value)})
		}
		slices.SortFunc(out, func(a, b rollout.Sample) int { return strings.Compare(a.Series, b.Series) })
		return out, nil
	case *model.Scalar:
		return []rollout.Sample{{Value: float64(v.Value)}}, nil
	case nil:
		return nil, errors.New("no result from Prometheus")
	}
	return nil, fmt.Errorf("the query returned a %s; want an instant vector or a scalar", v.Type())
}

// noteResult logs a check's query error when it changes, and that the
// check's queries work again. Called with a.mu held.
func (a *analyzer) noteResult(key, group string, cs rollout.CheckStatus, m rollout.Measurement) {
	log := a.c.o.Log.With(slog.String("group", group), slog.String("check", cs.Name))
	if m.Error == "" {
		if a.lastErr[key] != "" {
			log.Info("analysis: the check's query works again")
		}
		delete(a.lastErr, key)
		log.Debug("analysis: measured", slog.Int("series", len(m.Samples)))
		return
	}
	if a.lastErr[key] != m.Error {
		log.Warn("analysis: the check's query failed; the measurement is inconclusive", slog.String("query", cs.Query), slog.String("err", m.Error))
	}
	a.lastErr[key] = m.Error
}
