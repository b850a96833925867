package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Metric analysis, the controller's side (docs/rollout.md "Gates"): the
// leader runs each due check's query against Prometheus with the
// Prometheus Go API client, in the background so that a slow Prometheus
// never delays a rollout pass, and hands the measurements to the next
// pass's rollout.Next, which judges them. The rule lives in pkg/rollout;
// this file only fetches.

// Limits of one query. Prometheus is a peer the controller does not trust
// (docs/security.md): what it answers is read through these bounds, so
// that no answer can take the controller's memory, carry the bearer token
// elsewhere, or put more than a few small series into a group status.
const (
	// maxQueryTimeout bounds a query: a check's interval, at most this.
	maxQueryTimeout = 10 * time.Second
	// maxPromBody bounds the body of one answer: a check's few series take
	// a few KiB. A longer answer is not read (inconclusive).
	maxPromBody = 1 << 20
	// maxPromHeader bounds an answer's status line and headers (net/http's
	// default is 10 MB).
	maxPromHeader = 64 << 10
	// maxPromRedirects bounds the redirects followed, each to the
	// configured scheme, host and port only.
	maxPromRedirects = 3
	// maxQueries bounds the queries running at once, whatever the number
	// of groups and checks: with maxPromBody, what answers can hold.
	maxQueries = 4
	// maxLabelLen bounds each label name and value of a series as a
	// measurement keeps it (the whole series is cut at
	// rollout.MaxSeriesLen).
	maxLabelLen = 64
	// maxQueryErrorLen bounds the error of a measurement (part of it comes
	// from Prometheus).
	maxQueryErrorLen = 512
)

// Errors of the Prometheus client's bounds.
var (
	errPromTooLarge = fmt.Errorf("answer larger than %d bytes: not read", maxPromBody)
	errPromRedirect = errors.New("redirected to another host: not followed")
)

// analyzer runs the groups' checks for the leader.
type analyzer struct {
	c *Controller

	mu sync.Mutex
	// ctx is Run's: queries end when the controller stops.
	ctx context.Context
	// pending are the measurements not yet handed to Next, by app and
	// group (slotOf).
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
	// slots holds a token per query running (maxQueries).
	slots chan struct{}
}

// promClient is the API client for one set of Prometheus settings.
type promClient struct {
	settings rollout.AnalysisConfig // only the prometheus_* fields
	api      promv1.API
	err      error
}

func newAnalyzer(c *Controller) *analyzer {
	return &analyzer{c: c, ctx: context.Background(), pending: map[string][]rollout.Measurement{},
		running: map[string]bool{}, started: map[string]time.Time{}, lastErr: map[string]string{},
		slots: make(chan struct{}, maxQueries)}
}

// start makes queries end with ctx; stop waits for those running.
func (a *analyzer) start(ctx context.Context) {
	a.mu.Lock()
	a.ctx = ctx
	a.mu.Unlock()
}

func (a *analyzer) stop() { a.wg.Wait() }

// slotOf is the key of an app's group in the analyzer's maps: two apps'
// groups of one name are measured, and judged, apart.
func slotOf(ns kv.AppNS, group string) string { return ns.Key() + "\x00" + group }

// take hands the app's group's pending measurements to the caller; give
// them back with putBack when the pass that used them did not store its
// decision.
func (a *analyzer) take(ns kv.AppNS, group string) []rollout.Measurement {
	a.mu.Lock()
	defer a.mu.Unlock()
	slot := slotOf(ns, group)
	ms := a.pending[slot]
	delete(a.pending, slot)
	return ms
}

func (a *analyzer) putBack(ns kv.AppNS, group string, ms []rollout.Measurement) {
	if len(ms) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	slot := slotOf(ns, group)
	a.pending[slot] = append(ms, a.pending[slot]...)
}

// drop forgets every pending measurement: this controller no longer
// leads (the next leader measures for itself).
func (a *analyzer) drop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.pending)
}

// schedule starts the queries of the app's group's checks that are due at
// now (rollout.GroupStatus.ChecksDue) and not running or started within
// their interval.
func (a *analyzer) schedule(ns kv.AppNS, cfg rollout.Config, group string, st rollout.GroupStatus, now time.Time) {
	due := st.ChecksDue(now)
	if len(due) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	client := a.clientFor(cfg.AnalysisConfig)
	slot := slotOf(ns, group)
	for _, cs := range due {
		key := slot + "/" + cs.Name
		if a.running[key] {
			continue
		}
		if last, ok := a.started[key]; ok && last.After(cs.At) && now.Before(last.Add(cs.Interval.D())) {
			continue
		}
		a.running[key], a.started[key] = true, now
		ctx := a.ctx
		a.wg.Go(func() {
			m := a.measure(ctx, client, ns.Name, group, cs, now)
			a.mu.Lock()
			defer a.mu.Unlock()
			a.pending[slot] = append(a.pending[slot], m)
			delete(a.running, key)
			a.noteResult(key, ns.Name, group, cs, m)
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
// read once, and the bounds above: answers read up to maxPromBody, redirects
// followed only to the configured scheme, host and port (at most
// maxPromRedirects), and the token sent only there.
func newPromAPI(s rollout.AnalysisConfig) (promv1.API, error) {
	if s.PrometheusURL == "" {
		return nil, errors.New("no prometheus_url in the config")
	}
	base, err := url.Parse(s.PrometheusURL)
	if err != nil {
		return nil, fmt.Errorf("prometheus_url: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxResponseHeaderBytes = maxPromHeader
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
	client := &http.Client{
		Transport: &promTransport{base: base, tokenFile: s.PrometheusBearerTokenFile, next: tr},
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if !sameOrigin(r.URL, base) {
				return &redirectError{to: r.URL}
			}
			if len(via) > maxPromRedirects {
				return fmt.Errorf("stopped after %d redirects", maxPromRedirects)
			}
			return nil
		},
	}
	api, err := api.NewClient(api.Config{Address: s.PrometheusURL, Client: client})
	if err != nil {
		return nil, fmt.Errorf("prometheus_url: %w", err)
	}
	return promv1.NewAPI(api), nil
}

// sameOrigin reports whether u is on base's scheme, host and port: where
// the bearer token may go, and redirects may lead.
func sameOrigin(u, base *url.URL) bool {
	return strings.EqualFold(u.Scheme, base.Scheme) && strings.EqualFold(u.Host, base.Host)
}

// redirectError is a redirect to another origin, refused.
type redirectError struct{ to *url.URL }

func (e *redirectError) Error() string {
	return fmt.Sprintf("%v (to %s)", errPromRedirect, rollout.ClipText(e.to.Scheme+"://"+e.to.Host, 100))
}

func (e *redirectError) Unwrap() error { return errPromRedirect }

// promTransport adds "Authorization: Bearer <token>", with the token read
// from tokenFile on every request, to the requests for base's origin only,
// and bounds every answer's body to maxPromBody.
type promTransport struct {
	base      *url.URL
	tokenFile string
	next      http.RoundTripper
}

func (p *promTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if p.tokenFile != "" && sameOrigin(r.URL, p.base) {
		tok, err := os.ReadFile(p.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("prometheus_bearer_token_file: %w", err)
		}
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := p.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > maxPromBody {
		resp.Body.Close()
		return nil, errPromTooLarge
	}
	resp.Body = &limitedBody{rc: resp.Body, left: maxPromBody}
	return resp, nil
}

// limitedBody is a body that fails with errPromTooLarge past its bound,
// rather than end short (a cut JSON answer would read as a parse error).
type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the bound from a longer one.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, errPromTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// measure runs cs's query at Prometheus's now, bounded by cs's interval
// (at most maxQueryTimeout), and turns the answer into a measurement taken
// at at: its series, or why there are none.
func (a *analyzer) measure(ctx context.Context, client promClient, app, group string, cs rollout.CheckStatus, at time.Time) rollout.Measurement {
	m := rollout.Measurement{Group: group, Check: cs.Name, Query: cs.Query, At: at}
	if client.err != nil {
		m.Error = client.err.Error()
		a.c.m.analysisMeasurements.WithLabelValues(app, group, cs.Name, string(rollout.ResultInconclusive)).Inc()
		return m
	}
	select { // a slot first: the timeout is the query's own
	case a.slots <- struct{}{}:
		defer func() { <-a.slots }()
	case <-ctx.Done():
		m.Error = "not queried: the controller is stopping"
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
	m.Error = rollout.ClipText(m.Error, maxQueryErrorLen)
	j := rollout.Judge(rollout.Check{Success: cs.Success, Failure: cs.Failure}, m)
	a.c.m.analysisMeasurements.WithLabelValues(app, group, cs.Name, string(j.Result)).Inc()
	return m
}

// describeQueryError says why a query gave no result, for the check's
// status and the halt reason.
func describeQueryError(err error, url string, timeout time.Duration, timedOut bool) string {
	var apiErr *promv1.Error
	var redirect *redirectError
	switch {
	case errors.As(err, &apiErr) && apiErr.Type != promv1.ErrClient:
		return fmt.Sprintf("Prometheus %s answered %s: %s", url, rollout.ClipText(string(apiErr.Type), 40), rollout.ClipText(apiErr.Msg, 300))
	case errors.Is(err, errPromTooLarge):
		return fmt.Sprintf("Prometheus %s: %v (a check's query returns a few series: aggregate them)", url, errPromTooLarge)
	case errors.As(err, &redirect):
		return fmt.Sprintf("Prometheus %s %v: set prometheus_url to the address that answers", url, redirect)
	case timedOut:
		return fmt.Sprintf("Prometheus %s did not answer within %s", url, timeout)
	}
	return fmt.Sprintf("Prometheus %s unreachable: %v", url, err)
}

// samplesOf turns a query's answer into samples, sorted by series: an
// instant vector (each series; none is no data) or a scalar. A range
// vector or a string is an error: it has no one value per series. So is a
// vector of more than rollout.MaxSeries series (rollout.TooManySeries):
// never judged on some of them. Each series is cut (seriesOf).
func samplesOf(v model.Value) ([]rollout.Sample, error) {
	switch v := v.(type) {
	case model.Vector:
		if len(v) > rollout.MaxSeries {
			return nil, errors.New(rollout.TooManySeries(len(v)))
		}
		out := make([]rollout.Sample, 0, len(v))
		for _, s := range v {
			out = append(out, rollout.Sample{Series: seriesOf(s.Metric), Value: float64(s.Value)})
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

// seriesOf is m as PromQL writes it (model.Metric.String: name{a="x", b="y"})
// with each label name and value cut to maxLabelLen bytes, and the whole
// to rollout.MaxSeriesLen: a label of a megabyte never enters a
// measurement.
func seriesOf(m model.Metric) string {
	name, hasName := m[model.MetricNameLabel]
	labels := make([]string, 0, len(m))
	for l, v := range m {
		if l != model.MetricNameLabel {
			labels = append(labels, fmt.Sprintf("%s=%q", rollout.ClipText(string(l), maxLabelLen), rollout.ClipText(string(v), maxLabelLen)))
		}
	}
	var s string
	switch {
	case len(labels) == 0 && hasName:
		s = string(name)
	case len(labels) == 0:
		s = "{}"
	default:
		slices.Sort(labels)
		s = rollout.ClipText(string(name), maxLabelLen) + "{" + strings.Join(labels, ", ") + "}"
	}
	return rollout.ClipText(s, rollout.MaxSeriesLen)
}

// noteResult logs a check's query error when it changes, and that the
// check's queries work again. Called with a.mu held.
func (a *analyzer) noteResult(key, app, group string, cs rollout.CheckStatus, m rollout.Measurement) {
	log := a.c.o.Log.With(slog.String("app", app), slog.String("group", group), slog.String("check", cs.Name))
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
