package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/version"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Webhooks: the leader POSTs rollout events to every configured URL.
//
// Each webhook follows the timeline (FLEET_EVENTS, where the rollout events
// are stored, and FLEET_AUDIT, the operators' records and the events of
// before FLEET_EVENTS) from a cursor of its own on the bus
// (kv.WebhookCursor): the leader reads the messages after it with batched
// direct gets, POSTs each one it forwards, in the order the bus stored
// them, one at a time, and moves the cursor past it once the
// receiver answered 2xx, or once the message is older than MaxAge (dropped,
// with a log line and a metric). A receiver that fails is retried with
// capped exponential backoff and jitter. Only the leader sends; a controller
// that takes the lead reads the cursor and goes on from there, so a change
// of leader delivers every message at least once (the one in flight when
// the old leader stopped may arrive twice: receivers drop an id they have
// seen). The senders run beside the rollout loop and share nothing with it
// but the connection: a slow or dead receiver never holds the rollout.

// WebhookFormat is how a webhook's body is rendered.
type WebhookFormat string

// Webhook formats.
const (
	// WebhookJSON posts WebhookPayload.
	WebhookJSON WebhookFormat = "json"
	// WebhookSlack posts {"text": "…"}, a Slack incoming webhook's message.
	WebhookSlack WebhookFormat = "slack"
)

// DefaultWebhookKinds are the event kinds a webhook forwards unless told
// otherwise: what a human must hear of (an unattributed change of the
// target or the config among them: someone wrote it around fleetctl).
var DefaultWebhookKinds = []rollout.EventKind{rollout.EventTransition, rollout.EventHalt, rollout.EventAlert, rollout.EventApprovalNeeded, rollout.EventQuarantine, rollout.EventUnattributed}

// Defaults of Notify.
const (
	DefaultWebhookMaxAge     = 24 * time.Hour
	DefaultWebhookTimeout    = 10 * time.Second
	DefaultWebhookPoll       = time.Second
	DefaultWebhookMinBackoff = time.Second
	DefaultWebhookMaxBackoff = time.Minute
	// webhookBatch is how many messages one read of a stream asks for.
	webhookBatch = 32
	// maxWebhookHeader bounds a receiver's status line and headers
	// (net/http's default is 10 MB).
	maxWebhookHeader = 64 << 10
)

// Webhook is one receiver.
type Webhook struct {
	URL    string
	Format WebhookFormat
}

// Name is the webhook's name in logs and metrics: the URL's host and a
// hash of the whole URL, never the URL itself (a Slack webhook's path is
// its secret).
func (w Webhook) Name() string {
	host := "webhook"
	if u, err := url.Parse(w.URL); err == nil && u.Host != "" {
		host = u.Host
	}
	sum := sha256.Sum256([]byte(w.URL))
	return host + "-" + hex.EncodeToString(sum[:4])
}

// ParseWebhook reads a --webhook value: a URL, or FORMAT=URL to give this
// webhook a format of its own (slack=https://hooks.slack.com/…); def is
// the format of a bare URL.
func ParseWebhook(s string, def WebhookFormat) (Webhook, error) {
	w := Webhook{URL: strings.TrimSpace(s), Format: def}
	for _, f := range []WebhookFormat{WebhookJSON, WebhookSlack} {
		if rest, ok := strings.CutPrefix(w.URL, string(f)+"="); ok {
			w.URL, w.Format = rest, f
		}
	}
	u, err := url.Parse(w.URL)
	switch {
	case err != nil || u.Scheme != "http" && u.Scheme != "https":
		return Webhook{}, fmt.Errorf("webhook %q: want an http:// or https:// URL, optionally after json= or slack=", s)
	case u.Host == "":
		return Webhook{}, fmt.Errorf("webhook %q: no host", s)
	}
	return w, ParseWebhookFormat(string(w.Format))
}

// ParseWebhookFormat checks a --webhook-format value.
func ParseWebhookFormat(s string) error {
	switch WebhookFormat(s) {
	case WebhookJSON, WebhookSlack:
		return nil
	}
	return fmt.Errorf("webhook format %q: want json or slack", s)
}

// ParseWebhookEvents reads --webhook-events: event kinds, "audit" for
// fleetctl's audit records, "all" for every kind and the audit records.
func ParseWebhookEvents(list []string) (kinds []rollout.EventKind, audit bool, err error) {
	for _, s := range list {
		s = strings.TrimSpace(s)
		switch {
		case s == "all":
			kinds, audit = append(kinds, rollout.EventKinds...), true
		case s == "audit":
			audit = true
		case slices.Contains(rollout.EventKinds, rollout.EventKind(s)):
			kinds = append(kinds, rollout.EventKind(s))
		default:
			names := make([]string, len(rollout.EventKinds))
			for i, k := range rollout.EventKinds {
				names[i] = string(k)
			}
			return nil, false, fmt.Errorf("webhook event %q: want one of %s, audit (fleetctl's audit records) or all", s, strings.Join(names, ", "))
		}
	}
	slices.Sort(kinds)
	return slices.Compact(kinds), audit, nil
}

// Notify configures the webhooks. No webhook: nothing is sent.
type Notify struct {
	Webhooks []Webhook
	// Secret keys the HMAC-SHA256 signature of every body; empty: the
	// POSTs are not signed.
	Secret []byte
	// Kinds are the event kinds forwarded (default DefaultWebhookKinds);
	// Audit forwards fleetctl's audit records too.
	Kinds []rollout.EventKind
	Audit bool
	// MaxAge bounds the retries: a message not delivered this long after
	// the stream stored it is dropped.
	MaxAge time.Duration
	// Timeout bounds one POST.
	Timeout time.Duration
	// Poll is how often the leader looks for new messages when it has
	// delivered everything.
	Poll time.Duration
	// MinBackoff and MaxBackoff bound the wait between attempts: it doubles
	// from MinBackoff up to MaxBackoff, each wait drawn from [d/2, d).
	MinBackoff, MaxBackoff time.Duration
	// Client makes the POSTs (default: one that follows no redirect).
	Client *http.Client
	// Clock times the polls, the backoff and the max age. Wall clock by
	// default, not the controller's: the stream stamps messages with the
	// server's time, and receivers answer in real time.
	Clock clock.Clock
	// Rand returns a number in [0, 1) for the jitter.
	Rand func() float64
}

func (n Notify) withDefaults() Notify {
	if len(n.Kinds) == 0 && !n.Audit {
		n.Kinds = DefaultWebhookKinds
	}
	if n.MaxAge <= 0 {
		n.MaxAge = DefaultWebhookMaxAge
	}
	if n.Timeout <= 0 {
		n.Timeout = DefaultWebhookTimeout
	}
	if n.Poll <= 0 {
		n.Poll = DefaultWebhookPoll
	}
	if n.MinBackoff <= 0 {
		n.MinBackoff = DefaultWebhookMinBackoff
	}
	if n.MaxBackoff <= 0 {
		n.MaxBackoff = DefaultWebhookMaxBackoff
	}
	n.MaxBackoff = max(n.MaxBackoff, n.MinBackoff)
	if n.Client == nil {
		// A receiver is a peer the controller does not trust
		// (docs/security.md): its answer's headers are bounded here, its
		// body in post, the whole exchange by Timeout.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxResponseHeaderBytes = maxWebhookHeader
		n.Client = &http.Client{
			Transport: tr,
			// A POST redirected would become a GET: a redirect is a failure
			// the operator fixes in the URL. Never followed, to any host:
			// the signed body goes only where the operator said.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if n.Clock == nil {
		n.Clock = clock.Real{}
	}
	if n.Rand == nil {
		n.Rand = rand.Float64
	}
	return n
}

func (n Notify) validate() error {
	seen := map[string]bool{}
	for _, w := range n.Webhooks {
		if _, err := ParseWebhook(string(w.Format)+"="+w.URL, WebhookJSON); err != nil {
			return err
		}
		key := kv.WebhookCursorKey(w.URL)
		if seen[key] {
			return fmt.Errorf("webhook %s given twice", w.Name())
		}
		seen[key] = true
	}
	return nil
}

// Outcomes of fleetwave_webhook_deliveries_total.
const (
	webhookOK      = "ok"
	webhookFailed  = "failed"
	webhookDropped = "dropped"
)

// webhookMetrics are the webhooks' metrics, labelled by Webhook.Name.
type webhookMetrics struct {
	deliveries *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	pending    *prometheus.GaugeVec
}

func newWebhookMetrics(reg prometheus.Registerer, hooks []Webhook) *webhookMetrics {
	m := &webhookMetrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetwave_webhook_deliveries_total",
			Help: "Webhook POSTs by outcome: ok (a message delivered, 2xx), failed (an attempt failed; retried), dropped (a message given up on after --webhook-max-age).",
		}, []string{"webhook", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleetwave_webhook_delivery_latency_seconds",
			Help:    "Time from the stream storing a message to its receiver's 2xx, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.05, 4, 12),
		}, []string{"webhook"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetwave_webhook_pending",
			Help: "Messages of FLEET_EVENTS and FLEET_AUDIT after the webhook's cursor (of the subjects it reads: events, or everything with audit records), as the leader last read; 0 on a controller not leading.",
		}, []string{"webhook"}),
	}
	for _, w := range hooks {
		for _, o := range []string{webhookOK, webhookFailed, webhookDropped} {
			m.deliveries.WithLabelValues(w.Name(), o)
		}
		m.pending.WithLabelValues(w.Name())
	}
	reg.MustRegister(m.deliveries, m.latency, m.pending)
	return m
}

// runWebhooks runs one sender per webhook until ctx ends.
func (c *Controller) runWebhooks(ctx context.Context) {
	var wg sync.WaitGroup
	for _, w := range c.o.Notify.Webhooks {
		s := &webhookSender{c: c, n: c.o.Notify, hook: w, name: w.Name(), key: kv.WebhookCursorKey(w.URL), m: c.wm}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx)
		}()
	}
	wg.Wait()
}

// webhookSender delivers to one webhook.
type webhookSender struct {
	c    *Controller
	n    Notify
	hook Webhook
	name string // Webhook.Name
	key  string // of its cursor in fleet_stats
	m    *webhookMetrics

	// The cursor, while leading: loaded is false until it has been read
	// (again) from the bus; dirty says seq moved past messages it does not
	// forward and is not written yet.
	loaded bool
	cursor kv.WebhookCursor
	rev    uint64
	dirty  bool

	failing  int       // attempts failed in a row
	warnedAt time.Time // of the last "failing" line
	readErr  string    // last error reading the stream or cursor, logged once
	writeErr string    // last error writing the cursor, logged once
}

// errNotLeading stops a delivery: another controller leads.
var errNotLeading = errors.New("not leading")

func (s *webhookSender) log() *slog.Logger {
	return s.c.o.Log.With(slog.String("webhook", s.name))
}

func (s *webhookSender) run(ctx context.Context) {
	t := s.n.Clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		s.pass(ctx)
		t.Reset(s.n.Poll)
	}
}

// pass delivers what the timeline holds after the cursor (FLEET_AUDIT's
// and FLEET_EVENTS's), until it is all handled, the lead is lost, the bus
// fails, or ctx ends.
func (s *webhookSender) pass(ctx context.Context) {
	if !s.c.leading.Load() {
		s.loaded = false
		s.m.pending.WithLabelValues(s.name).Set(0)
		return
	}
	if !s.loaded {
		if err := s.load(ctx); err != nil {
			if ctx.Err() == nil { // stopping is no failure to report
				s.noteReadErr("cannot read the webhook's cursor; retrying", err)
			}
			return
		}
		if !s.loaded {
			return // another controller wrote it first: read it again
		}
	}
	for ctx.Err() == nil {
		msgs, pending, err := s.read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.noteReadErr("cannot read "+kv.StreamAudit+" or "+kv.StreamEvents+"; retrying (an auth directory minted before them: fleetctl auth upgrade)", err)
			}
			return
		}
		s.readErr = ""
		if len(msgs) == 0 {
			s.m.pending.WithLabelValues(s.name).Set(0)
			s.flush(ctx)
			return
		}
		for i, m := range msgs {
			s.m.pending.WithLabelValues(s.name).Set(float64(uint64(len(msgs)-i) + pending))
			sent, err := s.handle(ctx, m)
			if err != nil {
				s.loaded = false // read it again when leading again
				return
			}
			if m.Stream == kv.StreamEvents {
				seq := m.Sequence
				s.cursor.EventsSeq = &seq
			} else {
				s.cursor.Seq = m.Sequence
			}
			s.dirty = true
			if sent {
				s.flush(ctx)
			}
			if !s.loaded {
				return
			}
		}
	}
}

// load reads the cursor. A webhook without one starts at the end of the
// streams: a new webhook does not replay the past.
func (s *webhookSender) load(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, s.n.Timeout)
	defer cancel()
	nc := s.c.fleet.JS.Conn()
	cur, rev, err := kv.ReadWebhookCursor(rctx, nc, s.key)
	switch {
	case err == nil:
		s.cursor, s.rev, s.loaded, s.dirty = cur, rev, true, false
		first, _, ierr := s.streamBounds(rctx, kv.StreamAudit)
		if ierr == nil && first > cur.Seq+1 {
			s.lost(kv.StreamAudit, cur.Seq+1, first-1)
			s.cursor.Seq, s.dirty = first-1, true
		}
		if cur.EventsSeq != nil {
			first, _, ierr := s.streamBounds(rctx, kv.StreamEvents)
			if ierr == nil && first > *cur.EventsSeq+1 {
				s.lost(kv.StreamEvents, *cur.EventsSeq+1, first-1)
				seq := first - 1
				s.cursor.EventsSeq, s.dirty = &seq, true
			}
		}
		s.log().Info("webhook delivering from its cursor", slog.Uint64("after_seq", s.cursor.Seq), slog.Any("after_events_seq", s.cursor.EventsSeq))
		return nil
	case errors.Is(err, kv.ErrNotFound), errors.Is(err, kv.ErrCorrupt):
		_, last, ierr := s.streamBounds(rctx, kv.StreamAudit)
		if ierr != nil {
			return ierr
		}
		_, lastEvents, ierr := s.streamBounds(rctx, kv.StreamEvents)
		if ierr != nil && !errors.Is(ierr, jetstream.ErrStreamNotFound) {
			return ierr
		}
		if errors.Is(err, kv.ErrCorrupt) {
			s.log().Error("the webhook's cursor is not valid; replacing it: delivering from the end of the streams", slog.Any("err", err))
		} else {
			s.log().Info("new webhook: delivering the events stored from now on", slog.Uint64("after_seq", last), slog.Uint64("after_events_seq", lastEvents))
		}
		s.cursor = kv.WebhookCursor{V: 1, Webhook: s.name, Seq: last, EventsSeq: &lastEvents}
		s.rev, s.loaded, s.dirty = rev, true, true
		s.flush(ctx)
		return nil
	}
	return err
}

func (s *webhookSender) lost(stream string, from, to uint64) {
	s.log().Error("messages of "+stream+" left the stream (its max age or max bytes) before this webhook had them: those it would have sent are lost",
		slog.String("stream", stream), slog.Uint64("from_seq", from), slog.Uint64("to_seq", to))
}

// streamBounds are a stream's first and last sequences.
func (s *webhookSender) streamBounds(ctx context.Context, stream string) (first, last uint64, err error) {
	st, err := s.c.fleet.JS.Stream(ctx, stream)
	if err != nil {
		return 0, 0, err
	}
	return st.CachedInfo().State.FirstSeq, st.CachedInfo().State.LastSeq, nil
}

// read reads the next messages after the cursor in both streams, in the
// order the bus stored them, and how many more are pending. Of a stream
// that has more than one batch pending, nothing stored after the last
// message read of it is returned yet: those come next time, in order.
func (s *webhookSender) read(ctx context.Context) ([]kv.StoredMsg, uint64, error) {
	rctx, cancel := context.WithTimeout(ctx, s.n.Timeout)
	defer cancel()
	filter := kv.EventsPrefix + ">" // the events FLEET_AUDIT stored before FLEET_EVENTS
	if s.n.Audit {
		filter = "" // every message: cheaper than a filter that matches all
	}
	nc := s.c.fleet.JS.Conn()
	var audit, events []kv.StoredMsg
	endA, err := kv.DirectGetBatch(rctx, nc, kv.StreamAudit,
		kv.BatchRequest{Seq: s.cursor.Seq + 1, NextFor: filter, Batch: webhookBatch}, func(m kv.StoredMsg) error {
			audit = append(audit, m)
			return nil
		})
	if err != nil {
		return nil, 0, err
	}
	endE, err := s.readEvents(rctx, func(m kv.StoredMsg) error {
		events = append(events, m)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	msgs := append(audit, events...)
	slices.SortStableFunc(msgs, func(a, b kv.StoredMsg) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Stream, b.Stream) // FLEET_AUDIT first
	})
	cut := len(msgs)
	for _, part := range []struct {
		msgs []kv.StoredMsg
		end  kv.BatchEnd
	}{{audit, endA}, {events, endE}} {
		if n := len(part.msgs); n > 0 && part.end.Pending > 0 {
			last := part.msgs[n-1]
			cut = min(cut, slices.IndexFunc(msgs, func(m kv.StoredMsg) bool { return m.Stream == last.Stream && m.Sequence == last.Sequence })+1)
		}
	}
	return msgs[:cut], endA.Pending + endE.Pending + uint64(len(msgs)-cut), nil
}

// readEvents reads the next batch of FLEET_EVENTS after the cursor. No
// FLEET_EVENTS (FLEET_AUDIT still stores the events, or no controller of
// this version created it yet) is no message. A cursor written before
// FLEET_EVENTS existed starts there after the cursor's time.
func (s *webhookSender) readEvents(ctx context.Context, fn func(kv.StoredMsg) error) (kv.BatchEnd, error) {
	nc := s.c.fleet.JS.Conn()
	if s.cursor.EventsSeq == nil {
		_, last, err := s.streamBounds(ctx, kv.StreamEvents)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return kv.BatchEnd{}, nil
		}
		if err != nil {
			return kv.BatchEnd{}, err
		}
		start := last
		at := s.cursor.At
		if _, err := kv.DirectGetBatch(ctx, nc, kv.StreamEvents, kv.BatchRequest{Batch: 1, StartTime: &at}, func(m kv.StoredMsg) error {
			start = m.Sequence - 1
			return nil
		}); err != nil {
			return kv.BatchEnd{}, err
		}
		s.log().Info("webhook cursor of an older controller: delivering the events of "+kv.StreamEvents+" stored since it was written",
			slog.Time("since", at), slog.Uint64("after_events_seq", start))
		s.cursor.EventsSeq, s.dirty = &start, true
	}
	end, err := kv.DirectGetBatch(ctx, nc, kv.StreamEvents, kv.BatchRequest{Seq: *s.cursor.EventsSeq + 1, Batch: webhookBatch}, fn)
	if errors.Is(err, nats.ErrNoResponders) {
		// Nobody serves FLEET_EVENTS's direct gets: no such stream, or
		// no grant to read it. Only the first is no error.
		if _, ierr := s.c.fleet.JS.Stream(ctx, kv.StreamEvents); errors.Is(ierr, jetstream.ErrStreamNotFound) {
			return kv.BatchEnd{}, nil
		}
	}
	return end, err
}

// flush writes the cursor if it moved. A write someone else's came before
// (another controller leads, or led since we read) makes the cursor be
// read again; any other failure is retried with the next write.
func (s *webhookSender) flush(ctx context.Context) {
	if !s.dirty {
		return
	}
	// Written even while stopping: a message delivered and not recorded
	// would be sent again by the next leader.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.n.Timeout)
	defer cancel()
	s.cursor.V, s.cursor.Webhook, s.cursor.At, s.cursor.By = 1, s.name, s.n.Clock.Now().UTC(), s.c.o.ID
	rev, err := kv.SaveWebhookCursor(wctx, s.c.fleet.JS, s.key, s.cursor, s.rev)
	switch {
	case errors.Is(err, kv.ErrConflict):
		s.log().Info("the webhook's cursor was moved by another controller; reading it again", slog.Any("err", err))
		s.loaded = false
	case err != nil:
		if msg := err.Error(); msg != s.writeErr {
			s.writeErr = msg
			s.log().Warn("cannot write the webhook's cursor; retrying (a controller taking the lead meanwhile sends the messages since the last write again)", slog.Any("err", err))
		}
	default:
		s.rev, s.dirty, s.writeErr = rev, false, ""
	}
}

func (s *webhookSender) noteReadErr(msg string, err error) {
	if ctx := err.Error(); ctx != s.readErr {
		s.readErr = ctx
		s.log().Warn(msg, slog.Any("err", err))
	}
}

// forwards reports whether the webhook forwards e.
func (s *webhookSender) forwards(e kv.TimelineEntry) bool {
	if e.Audit != nil {
		return s.n.Audit
	}
	return slices.Contains(s.n.Kinds, e.Event.Kind)
}

// handle delivers m if the webhook forwards it, retrying until the
// receiver answers 2xx or m is older than MaxAge. sent: a POST succeeded or
// m was dropped (the cursor is written at once). An error (the lead lost,
// ctx ended) leaves m for the next leader.
func (s *webhookSender) handle(ctx context.Context, m kv.StoredMsg) (sent bool, err error) {
	e, derr := kv.DecodeTimelineMsg(m)
	if derr != nil {
		s.log().Warn("not forwarding a message of "+m.Stream+" that fleetwave did not write", slog.Uint64("seq", m.Sequence), slog.String("subject", m.Subject), slog.Any("err", derr))
		return false, nil
	}
	if !s.forwards(e) {
		return false, nil
	}
	p := webhookPayloadOf(e, m)
	body, err := webhookBody(p, s.hook.Format)
	if err != nil {
		s.log().Error("cannot render the message; not forwarding it", slog.Uint64("seq", m.Sequence), slog.Any("err", err))
		return false, nil
	}
	deadline := m.Time.Add(s.n.MaxAge)
	for attempt := 1; ; attempt++ {
		if !s.c.leading.Load() {
			return false, errNotLeading
		}
		now := s.n.Clock.Now()
		if !now.Before(deadline) {
			s.m.deliveries.WithLabelValues(s.name, webhookDropped).Inc()
			s.log().Error("webhook message dropped: not delivered within --webhook-max-age",
				slog.String("id", p.ID), slog.String("kind", p.Kind), slog.String("group", p.Group),
				slog.Int("attempts", attempt-1), slog.Duration("max_age", s.n.MaxAge))
			return true, nil
		}
		err := s.post(ctx, p.ID, body)
		if err == nil {
			s.m.deliveries.WithLabelValues(s.name, webhookOK).Inc()
			s.m.latency.WithLabelValues(s.name).Observe(max(s.n.Clock.Now().Sub(m.Time).Seconds(), 0))
			if s.failing > 0 {
				s.log().Info("webhook delivering again", slog.Int("failed_attempts", s.failing))
				s.failing = 0
			}
			return true, nil
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		s.m.deliveries.WithLabelValues(s.name, webhookFailed).Inc()
		s.failing++
		wait := min(kv.Backoff(attempt, s.n.MinBackoff, s.n.MaxBackoff, s.n.Rand()), deadline.Sub(now))
		// The first failure, then one line a minute while it lasts.
		if s.failing == 1 || now.Sub(s.warnedAt) >= time.Minute {
			s.warnedAt = now
			s.log().Warn("webhook delivery failed; retrying (the rollout does not wait)",
				slog.String("id", p.ID), slog.Any("err", err), slog.Int("failed_attempts", s.failing),
				slog.Duration("retry_in", wait), slog.Time("gives_up_at", deadline))
		}
		t := s.n.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C():
		}
	}
}

// post sends one POST and wants a 2xx.
func (s *webhookSender) post(ctx context.Context, id string, body []byte) error {
	pctx, cancel := context.WithTimeout(ctx, s.n.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodPost, s.hook.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "fleetwave-controller/"+version.Version)
	req.Header.Set(HeaderWebhookEventID, id)
	if len(s.n.Secret) > 0 {
		req.Header.Set(HeaderWebhookSignature, webhookSignature(s.n.Secret, body))
	}
	resp, err := s.n.Client.Do(req)
	if err != nil {
		// The URL may hold a secret: say what failed without it.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return err
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // lets the connection be reused
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("receiver answered %s: %s", rollout.ClipText(resp.Status, 100), strings.TrimSpace(string(snippet)))
	}
	return nil
}

// webhookNames lists the names of hooks, sorted, for the start-up line.
func webhookNames(hooks []Webhook) []string {
	out := make([]string, len(hooks))
	for i, w := range hooks {
		out[i] = w.Name() + " (" + string(w.Format) + ")"
	}
	sort.Strings(out)
	return out
}
