package agentd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/google/renameio/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/fleetwave/fleetwave/internal/version"
	"github.com/fleetwave/fleetwave/pkg/install"
)

// DefaultTextfileEvery is how often 'agentd run --metrics-textfile' writes
// the file besides after every install.
const DefaultTextfileEvery = 15 * time.Second

// Results of fleetwave_agent_installs_total.
const (
	installOK        = "ok"
	installFailed    = "failed"
	installAbandoned = "abandoned"
)

// agentMetrics are agentd's Prometheus metrics (docs/metrics.md), in a
// registry of the agent's own.
type agentMetrics struct {
	// reg holds this app's series; regr registers into it, with the label
	// app="NAME" for another app than the default (whose series are as
	// before apps). gatherer is what /metrics and the textfile show: reg,
	// or every app's (runHost).
	reg        *prometheus.Registry
	regr       prometheus.Registerer
	gatherer   prometheus.Gatherer
	busOnce    sync.Once
	installs   *prometheus.CounterVec
	rollbacks  prometheus.Counter
	lastResult prometheus.Gauge
	lastTime   prometheus.Gauge
	lastDur    prometheus.Gauge
	download   prometheus.Counter

	regOnce sync.Once

	mu       sync.Mutex
	bus      *busWatch
	received int64 // of the current download; -1 before its first figures
}

var descAgentInfo = prometheus.NewDesc("fleetwave_agent_info",
	"Always 1: the installed (active) version, the group and agentd's own version as labels.",
	[]string{"version", "group", "agentd_version"}, nil)

// infoCollector reads the agent's status at gather time.
type infoCollector struct{ a *Agent }

func (c infoCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descAgentInfo }

func (c infoCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.a.Status()
	v := st.ActiveVersion
	if v == "" {
		v = "none"
	}
	ch <- prometheus.MustNewConstMetric(descAgentInfo, prometheus.GaugeValue, 1, v, c.a.Group(), version.Version)
}

func newAgentMetrics(a *Agent) *agentMetrics {
	m := &agentMetrics{
		reg: prometheus.NewRegistry(),
		installs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetwave_agent_installs_total",
			Help: "Installs this agentd ran, by result (ok, failed, abandoned).",
		}, []string{"result"}),
		rollbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleetwave_agent_rollbacks_total",
			Help: "Installs that ended rolled back to the previous version.",
		}),
		lastResult: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetwave_agent_last_install_success",
			Help: "1 if the last install succeeded, 0 if it failed or was abandoned; absent before the first.",
		}),
		lastTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetwave_agent_last_install_timestamp_seconds",
			Help: "When the last install ended, Unix time.",
		}),
		lastDur: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleetwave_agent_last_install_duration_seconds",
			Help: "How long the last install took, download and health checks included.",
		}),
		download: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fleetwave_agent_download_bytes_total",
			Help: "Bytes of release tarballs received.",
		}),
		received: -1,
	}
	m.regr, m.gatherer = m.reg, m.reg
	if a.o.Name != "" {
		m.regr = prometheus.WrapRegistererWith(prometheus.Labels{"app": a.o.Name}, m.reg)
	}
	for _, r := range []string{installOK, installFailed, installAbandoned} {
		m.installs.WithLabelValues(r)
	}
	m.regr.MustRegister(m.installs, m.rollbacks, m.download, infoCollector{a},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fleetwave_agent_fallback",
			Help: "1 while the bus has been lost for --fallback-after and the agent follows the find endpoint instead.",
		}, func() float64 {
			if a.fallback.Load() {
				return 1
			}
			return 0
		}),
	)
	return m
}

// registerBus adds fleetwave_agent_bus_connected, the host's (one
// connection for every app: no app label), once.
func (m *agentMetrics) registerBus() {
	m.busOnce.Do(func() {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fleetwave_agent_bus_connected",
			Help: "1 while the NATS bus is reachable: connected, and heartbeats acked.",
		}, func() float64 {
			m.mu.Lock()
			bus := m.bus
			m.mu.Unlock()
			if bus == nil {
				return 0
			}
			if lost, _ := bus.state(); lost {
				return 0
			}
			return 1
		}))
	})
}

// setBus makes bus_connected follow bus (nil: off the bus).
func (m *agentMetrics) setBus(bus *busWatch) {
	m.mu.Lock()
	m.bus = bus
	m.mu.Unlock()
}

// startInstall resets the download tally for a new install.
func (m *agentMetrics) startInstall() {
	m.mu.Lock()
	m.received = -1
	m.mu.Unlock()
}

// progress counts what a download received since its last figures; the
// first figures of an install only set the base (bytes an earlier attempt
// left on disk are not received again).
func (m *agentMetrics) progress(p install.DownloadProgress) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.received >= 0 && p.Received > m.received {
		m.download.Add(float64(p.Received - m.received))
	}
	m.received = p.Received
}

// installed records how an install ended.
func (m *agentMetrics) installed(result string, took time.Duration, end time.Time, rolledBack bool) {
	m.installs.WithLabelValues(result).Inc()
	ok := 0.0
	if result == installOK {
		ok = 1
	}
	m.lastResult.Set(ok)
	m.lastTime.Set(float64(end.Unix()))
	m.lastDur.Set(took.Seconds())
	if rolledBack {
		m.rollbacks.Inc()
	}
	// Gauges of the last install appear only once there was one.
	m.regOnce.Do(func() { m.regr.MustRegister(m.lastResult, m.lastTime, m.lastDur) })
}

// text is the registry in the Prometheus text format.
func (m *agentMetrics) text() ([]byte, error) {
	fams, err := m.gatherer.Gather()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&buf, f); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// writeTextfile replaces path with the metrics, atomically (node_exporter
// never reads half a file), readable by node_exporter's user.
func (m *agentMetrics) writeTextfile(path string) error {
	b, err := m.text()
	if err != nil {
		return err
	}
	return renameio.WriteFile(path, b, 0o644)
}

// metricsLoops are the loops of --metrics-addr and --metrics-textfile.
func (a *Agent) metricsLoops() []func(context.Context) error {
	var loops []func(context.Context) error
	if ln := a.o.MetricsListener; ln != nil {
		a.o.MetricsListener = nil
		srv := &http.Server{
			Handler:           a.metricsHandler(),
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          slog.NewLogLogger(a.o.Log.Handler(), slog.LevelDebug),
		}
		loops = append(loops, func(ctx context.Context) error {
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			a.o.Log.Info("serving metrics", slog.String("addr", ln.Addr().String()))
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("--metrics-addr: %w", err)
			}
			<-ctx.Done()
			return ctx.Err()
		})
	}
	if path := a.o.MetricsTextfile; path != "" {
		loops = append(loops, func(ctx context.Context) error {
			every := a.o.TextfileEvery
			if every <= 0 {
				every = DefaultTextfileEvery
			}
			var lastErr string
			for {
				a.flushTextfile(&lastErr)
				t := a.o.Clock.NewTimer(every)
				select {
				case <-ctx.Done():
					t.Stop()
					// A last write, off the bus: a stopped agentd's file
					// must not say it is connected.
					a.metrics.setBus(nil)
					a.flushTextfile(&lastErr)
					return ctx.Err()
				case <-t.C():
				case <-a.textfileKick:
					t.Stop()
				}
			}
		})
	}
	return loops
}

// flushTextfile writes --metrics-textfile, logging a failure once until it
// changes.
func (a *Agent) flushTextfile(lastErr *string) {
	err := a.metrics.writeTextfile(a.o.MetricsTextfile)
	switch {
	case err == nil && *lastErr != "":
		a.o.Log.Info("writing the metrics textfile works again", slog.String("path", a.o.MetricsTextfile))
		*lastErr = ""
	case err != nil && err.Error() != *lastErr:
		*lastErr = err.Error()
		a.o.Log.Warn("writing the metrics textfile failed; retrying", slog.String("path", a.o.MetricsTextfile), slog.Any("err", err))
	}
}

// kickTextfile asks for the textfile to be written now (after an install).
func (a *Agent) kickTextfile() {
	select {
	case a.textfileKick <- struct{}{}:
	default:
	}
}

// metricsHandler serves GET /metrics.
func (a *Agent) metricsHandler() http.Handler {
	h := promhttp.HandlerFor(a.metrics.gatherer, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.Error(w, "not found; metrics are at /metrics", http.StatusNotFound)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ListenMetrics binds --metrics-addr, so that a port in use fails the
// start at once.
func ListenMetrics(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	return ln, nil
}
