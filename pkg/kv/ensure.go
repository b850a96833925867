package kv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options are the deployment choices for the stream and buckets.
type Options struct {
	// Replicas for the stream and every bucket: 1 on a single server, 3 on
	// a cluster. Default 1.
	Replicas int
	// AgentExpiry is how long an agent stays in the inventory without a
	// heartbeat: the heartbeat stream's MaxAge. Default 1h.
	AgentExpiry time.Duration
	// StatsTTL is the age at which fleet_stats entries disappear. Default 1h.
	// The bucket also holds the controllers' leader lease (KeyLeader).
	StatsTTL time.Duration
	// AuditMaxAge and AuditMaxBytes bound the audit trail (FLEET_AUDIT):
	// the oldest records go first. Defaults 90 days and 256 MiB (16 MiB
	// with Memory).
	AuditMaxAge   time.Duration
	AuditMaxBytes int64
	// EventsMaxAge and EventsMaxBytes bound the rollout events
	// (FLEET_EVENTS) the same way. Defaults 30 days and 64 MiB (8 MiB with
	// Memory).
	EventsMaxAge   time.Duration
	EventsMaxBytes int64
	// Memory selects memory storage (tests, throw-away demos). Default file.
	Memory bool
	// Retry paces Ensure while a JetStream cluster settles. Zero values
	// take the defaults of Retry.
	Retry Retry
	// OnDrift, when set, is told of an existing stream or bucket whose
	// settings differ from these options in ways these credentials may not
	// change (a controller may create but not update): Ensure goes on with
	// it as it is.
	OnDrift func(what string, diffs []string)
}

// Defaults for Options.
const (
	DefaultAgentExpiry = time.Hour
	DefaultStatsTTL    = time.Hour
	// maxHBMsgSize is the server-side cap on a heartbeat message. It sits
	// above heartbeat.MaxSize on purpose: the server drops absurd payloads,
	// the controller rejects (and counts) anything over heartbeat.MaxSize.
	maxHBMsgSize = 64 << 10
)

func (o Options) withDefaults() Options {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.AgentExpiry == 0 {
		o.AgentExpiry = DefaultAgentExpiry
	}
	if o.StatsTTL == 0 {
		o.StatsTTL = DefaultStatsTTL
	}
	if o.AuditMaxAge == 0 {
		o.AuditMaxAge = DefaultAuditMaxAge
	}
	if o.AuditMaxBytes == 0 {
		// The server reserves MaxBytes against the account's limits:
		// memory storage (tests, demos) takes a small share of it.
		o.AuditMaxBytes = DefaultAuditMaxBytes
		if o.Memory {
			o.AuditMaxBytes = DefaultAuditMaxBytesMemory
		}
	}
	if o.EventsMaxAge == 0 {
		o.EventsMaxAge = DefaultEventsMaxAge
	}
	if o.EventsMaxBytes == 0 {
		o.EventsMaxBytes = DefaultEventsMaxBytes
		if o.Memory {
			o.EventsMaxBytes = DefaultEventsMaxBytesMemory
		}
	}
	return o
}

// storage is the JetStream storage type Memory selects.
func (o Options) storage() jetstream.StorageType {
	if o.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// planHistory is how many revisions of each plan key are kept.
const planHistory = 5

// planRePublish republishes every plan change on fleet.plan.<key>.
func planRePublish() *jetstream.RePublish {
	return &jetstream.RePublish{Source: "$KV." + BucketPlan + ".>", Destination: PlanRepublish + ">"}
}

// Fleet is a handle on the stream and the three buckets.
type Fleet struct {
	JS     jetstream.JetStream
	HB     jetstream.Stream
	Config jetstream.KeyValue
	Plan   jetstream.KeyValue
	Stats  jetstream.KeyValue
	// LegacyAudit is set by Ensure when FLEET_AUDIT still captures the
	// events (LegacyAuditSubjects) and these credentials may not change it:
	// FLEET_EVENTS is then not created (streams may not share subjects),
	// and events go on landing in FLEET_AUDIT until fleetctl bus ensure.
	LegacyAudit bool
}

// Ensure creates the stream and buckets, or brings existing ones to opts. It
// is idempotent: controllers call it on every start, several at once.
//
// On a JetStream cluster that is still forming, or when several controllers
// create the same stream at the same instant, the server may leave a request
// unanswered: no error code comes back at all (nats-server 2.15.2, measured
// in TestEnsureConcurrentOnFreshCluster: until a node has had no meta leader
// for 10 s it drops JetStream API requests without a word, and concurrent
// creates and updates of one stream can go unanswered although they took
// effect). Ensure therefore bounds every attempt (opts.Retry) and tries each
// step again, with
// capped exponential backoff and jitter, until it succeeds, ctx ends, or the
// server gives an answer that retrying cannot change (see Transient): a
// config it rejects, a permissions violation, an existing stream whose config
// cannot be updated to ours.
func Ensure(ctx context.Context, js jetstream.JetStream, opts Options) (*Fleet, error) {
	o := opts.withDefaults()
	r := o.Retry.withDefaults()
	storage := o.storage()
	f := &Fleet{JS: js}
	hbCfg := jetstream.StreamConfig{
		Name:              StreamHB,
		Description:       "fleetwave heartbeats: the last one of every agent (the inventory)",
		Subjects:          []string{HBSubjects},
		MaxMsgsPerSubject: 1,
		MaxAge:            o.AgentExpiry,
		MaxMsgSize:        maxHBMsgSize,
		Discard:           jetstream.DiscardOld,
		Storage:           storage,
		Replicas:          o.Replicas,
		AllowDirect:       true,
		// Every stored heartbeat again on fleet.inventory.<group>.<id>:
		// controllers follow the inventory with a core subscription, not
		// a consumer (internal/controller/inventory.go).
		RePublish: &jetstream.RePublish{Source: HBSubjects, Destination: InventoryRepublish + ">"},
	}
	var err error
	f.HB, err = retry(ctx, js, r, "stream "+StreamHB, func(ctx context.Context) (jetstream.Stream, error) {
		return ensureStream(ctx, js, o, hbCfg)
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", StreamHB, err)
	}
	auditCfg := auditStreamConfig(o)
	audit, err := ensureTrail(ctx, js, o, r, auditCfg)
	if err != nil {
		return nil, err
	}
	if audit != nil && slices.Equal(audit.CachedInfo().Config.Subjects, LegacyAuditSubjects) {
		// A controller may not take fleet.events.> out of FLEET_AUDIT,
		// and FLEET_EVENTS cannot be created while it is in: the
		// controller runs as before (takeAsIs told OnDrift why and what
		// to run), its events still sharing FLEET_AUDIT.
		f.LegacyAudit = true
	} else if _, err := ensureTrail(ctx, js, o, r, eventsStreamConfig(o)); err != nil {
		return nil, err
	}
	buckets := []struct {
		dst *jetstream.KeyValue
		cfg jetstream.KeyValueConfig
	}{
		{&f.Config, jetstream.KeyValueConfig{
			Bucket:      BucketConfig,
			Description: "fleetwave rollout config",
			History:     10,
		}},
		{&f.Plan, jetstream.KeyValueConfig{
			Bucket:      BucketPlan,
			Description: "fleetwave plan spec and per-group status",
			History:     planHistory,
			RePublish:   planRePublish(),
		}},
		{&f.Stats, jetstream.KeyValueConfig{
			Bucket:      BucketStats,
			Description: "fleetwave per-group per-version agent counts, one key per controller",
			History:     1,
			TTL:         o.StatsTTL,
			// Per-key TTLs for the leader lease (KeyLeader).
			LimitMarkerTTL: time.Second,
		}},
	}
	for _, b := range buckets {
		b.cfg.Storage, b.cfg.Replicas = storage, o.Replicas
		kv, err := retry(ctx, js, r, "bucket "+b.cfg.Bucket, func(ctx context.Context) (jetstream.KeyValue, error) {
			return ensureBucket(ctx, js, o, b.cfg)
		})
		if err != nil {
			return nil, fmt.Errorf("ensure bucket %s: %w", b.cfg.Bucket, err)
		}
		*b.dst = kv
	}
	return f, nil
}

// ensureTrail ensures one of the audit trail's streams (FLEET_AUDIT,
// FLEET_EVENTS). Credentials that may not create it (the controller of an
// auth directory minted before it) leave it missing: the rollout goes on
// without it, OnDrift is told (nil stream, no error), and fleetctl bus
// ensure or fleetctl auth upgrade fix it.
func ensureTrail(ctx context.Context, js jetstream.JetStream, o Options, r Retry, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := retry(ctx, js, r, "stream "+cfg.Name, func(ctx context.Context) (jetstream.Stream, error) {
		s, err := ensureStream(ctx, js, o, cfg)
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			// FLEET_HB was just created or updated through the same
			// JetStream API: nobody answering for this stream means
			// these credentials' account does not import its create
			// (a controller of an auth directory minted before it).
			err = fmt.Errorf("%w: %v", &unreachableError{stream: cfg.Name}, err) // permanent: not retried
		}
		return s, err
	})
	if err == nil {
		return s, nil
	}
	var unreachable *unreachableError
	denied := errors.Is(err, nats.ErrPermissionViolation) || errors.As(err, &unreachable)
	if !denied || o.OnDrift == nil {
		return nil, fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	o.OnDrift("stream "+cfg.Name, []string{"missing, and these credentials may not create it (an auth directory minted before it: 'fleetctl auth upgrade' grants the controller its create and read; or create it with admin credentials: fleetctl bus ensure): " + err.Error()})
	return nil, nil
}

// Open binds to a stream and buckets that a controller already created. It
// never creates anything: fleetctl and agents must not change the bus's shape.
func Open(ctx context.Context, js jetstream.JetStream) (*Fleet, error) {
	f := &Fleet{JS: js}
	var err error
	if f.HB, err = js.Stream(ctx, StreamHB); err != nil {
		return nil, fmt.Errorf("open stream %s (is a controller running against this server?): %w", StreamHB, err)
	}
	for _, b := range []struct {
		dst  *jetstream.KeyValue
		name string
	}{{&f.Config, BucketConfig}, {&f.Plan, BucketPlan}, {&f.Stats, BucketStats}} {
		if *b.dst, err = js.KeyValue(ctx, b.name); err != nil {
			return nil, fmt.Errorf("open bucket %s (is a controller running against this server?): %w", b.name, err)
		}
	}
	return f, nil
}

// Retry is how Ensure waits out a JetStream cluster that is still settling.
type Retry struct {
	// AttemptTimeout bounds the first create-or-update of a stream or
	// bucket; each further attempt may take twice as long as the one
	// before, up to MaxAttemptTimeout. A request the cluster drops is
	// never answered: only this bound ends it, so it starts short (a
	// healthy cluster answers in milliseconds, an R3 create in well under
	// a second) and grows so that a slow cluster still gets its answer
	// through. Defaults 2s and 10s.
	AttemptTimeout, MaxAttemptTimeout time.Duration
	// MinDelay and MaxDelay bound the wait between attempts: it starts at
	// MinDelay and doubles up to MaxDelay, and each wait is drawn from
	// [d/2, d) so that controllers started together do not retry in step.
	// Defaults 250ms and 5s.
	MinDelay, MaxDelay time.Duration
	// After returns a channel that delivers once d has passed. Default
	// time.After; tests pass a manual clock's.
	After func(d time.Duration) <-chan time.Time
	// Rand returns a number in [0, 1) for the jitter. Default
	// math/rand/v2.Float64.
	Rand func() float64
	// OnRetry, when set, is told of every failed attempt Ensure retries,
	// before it waits: the controller logs what it is waiting for.
	OnRetry func(Retrying)
}

// Retrying is one failed attempt that Ensure retries.
type Retrying struct {
	// What is being ensured: "stream FLEET_HB", "bucket fleet_config".
	What string
	// Attempt counts the attempts at What so far, from 1.
	Attempt int
	// Err is why the attempt failed.
	Err error
	// Delay is the wait before the next attempt.
	Delay time.Duration
}

// Defaults of Retry.
const (
	DefaultAttemptTimeout    = 2 * time.Second
	DefaultMaxAttemptTimeout = 10 * time.Second
	DefaultMinRetryDelay     = 250 * time.Millisecond
	DefaultMaxRetryDelay     = 5 * time.Second
)

func (r Retry) withDefaults() Retry {
	if r.AttemptTimeout <= 0 {
		r.AttemptTimeout = DefaultAttemptTimeout
	}
	if r.MaxAttemptTimeout <= 0 {
		r.MaxAttemptTimeout = DefaultMaxAttemptTimeout
	}
	r.MaxAttemptTimeout = max(r.MaxAttemptTimeout, r.AttemptTimeout)
	if r.MinDelay <= 0 {
		r.MinDelay = DefaultMinRetryDelay
	}
	if r.MaxDelay <= 0 {
		r.MaxDelay = DefaultMaxRetryDelay
	}
	r.MaxDelay = max(r.MaxDelay, r.MinDelay)
	if r.After == nil {
		r.After = time.After
	}
	if r.Rand == nil {
		r.Rand = rand.Float64
	}
	return r
}

// Backoff is the wait after the attempt-th failed attempt (from 1): minD
// doubled attempt-1 times, capped at maxD, then scaled into [d/2, d) by
// jitter, a number in [0, 1).
func Backoff(attempt int, minD, maxD time.Duration, jitter float64) time.Duration {
	d := doubled(minD, attempt-1, maxD)
	return d/2 + time.Duration(jitter*float64(d/2))
}

// doubled is d doubled n times, capped at limit.
func doubled(d time.Duration, n int, limit time.Duration) time.Duration {
	for ; n > 0 && d < limit; n-- {
		d *= 2
	}
	return min(d, limit)
}

// retry runs op, each attempt bounded by a timeout that grows from
// r.AttemptTimeout, until it succeeds, fails for good, or ctx ends.
func retry[T any](ctx context.Context, js jetstream.JetStream, r Retry, what string, op func(context.Context) (T, error)) (T, error) {
	var zero T
	var last error // why the last attempt failed, unless ctx ended it
	for attempt := 1; ; attempt++ {
		before := js.Conn().LastError()
		timeout := doubled(r.AttemptTimeout, attempt-1, r.MaxAttemptTimeout)
		actx, cancel := context.WithTimeout(ctx, timeout)
		v, err := op(actx)
		cancel()
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil {
			if !isContextErr(err) {
				last = err
			}
			return zero, gaveUp(ctx, attempt, last)
		}
		if isNoAnswer(err) {
			// The server does not answer a request it denies either; the
			// reason only reaches the connection's error handler.
			if denied := newPermissionViolation(before, js.Conn().LastError()); denied != nil {
				return zero, fmt.Errorf("the server denied a JetStream API request: these credentials may not create or update streams (the controller's may): %w", denied)
			}
			err = fmt.Errorf("%w within %v: %w", errNoAnswer, timeout, err)
		}
		if errors.Is(err, nats.ErrNoResponders) {
			err = fmt.Errorf("nobody answers the JetStream API yet (JetStream still starting, or not enabled on the server or for the account): %w", err)
		}
		last = err
		if !Transient(err) {
			return zero, explain(err)
		}
		d := Backoff(attempt, r.MinDelay, r.MaxDelay, r.Rand())
		if r.OnRetry != nil {
			r.OnRetry(Retrying{What: what, Attempt: attempt, Err: err, Delay: d})
		}
		select {
		case <-ctx.Done():
			return zero, gaveUp(ctx, attempt, last)
		case <-r.After(d):
		}
	}
}

// Transient reports whether creating or updating a stream or bucket failed
// in a way another attempt can fix: the cluster has not answered (no meta
// leader yet, or a reply lost to a concurrent create), says it is not ready,
// the connection is reconnecting, or a concurrent creator raced us.
// Everything else (a config the server rejects, an existing stream whose
// config cannot be changed to ours, JetStream off, a closed connection) is
// for good.
func Transient(err error) bool {
	if isNoAnswer(err) || errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting) {
		return true
	}
	if errors.Is(err, nats.ErrNoResponders) {
		// Nobody answers the JetStream API yet: through CONTROL's
		// imports, FLEET's API has no responder on a node until FLEET's
		// JetStream is up there (seen on a forming cluster). A server
		// without JetStream keeps answering this; the controller logs it
		// at every retry, saying so.
		return true
	}
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode {
	case jsErrClusterNotAvail:
		// "JetStream system temporarily unavailable": no meta leader
		// for a while, or this node has lost contact with it.
		return true
	case jetstream.JSErrCodeJetStreamNotEnabledForAccount:
		// "JetStream not enabled for account": a controller reaches
		// FLEET's JetStream through CONTROL's imports, and the server
		// enables an account's JetStream when it first loads the
		// account, which can be just after the importer's first request
		// (seen under load). An account without JetStream at all keeps
		// answering this; the controller logs it at every retry.
		return true
	case jsErrStreamStoreFailed:
		// "error creating store for stream": the same race, when the
		// create arrives while the account's JetStream is still being
		// set up (seen under load, on a fresh operator-mode server).
		// A store that can never be created keeps answering this, and
		// the controller logs it at every retry.
		return true
	case jsErrClusterNoPeers:
		// "no suitable peers for placement": fewer nodes have joined
		// the cluster than the replicas asked for, so far.
		return true
	case jetstream.JSErrCodeStreamNameInUse:
		// The update found no stream, then the create found one with
		// another config: a concurrent creator (of another version)
		// won. The next attempt updates it, and that answer is final.
		return true
	}
	return false
}

// Error codes of nats-server that nats.go does not name.
const (
	jsErrClusterNotAvail jetstream.ErrorCode = 10008 // JSClusterNotAvailErr
	jsErrClusterNoPeers  jetstream.ErrorCode = 10005 // JSClusterNoPeersErrF
	// JSStreamStoreFailedF, "error creating store for stream".
	jsErrStreamStoreFailed jetstream.ErrorCode = 10049
)

// gaveUp is the error of a retry loop that ctx ended: it wraps both why it
// ended and the last failure, which says what the bus was doing meanwhile.
func gaveUp(ctx context.Context, attempts int, last error) error {
	if last == nil {
		return fmt.Errorf("gave up after %d attempts: %w", attempts, context.Cause(ctx))
	}
	return fmt.Errorf("gave up after %d attempts: %w (last error: %w)", attempts, context.Cause(ctx), last)
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// unreachableError: nobody answers a trail stream's create, although the
// heartbeat stream's was answered.
type unreachableError struct{ stream string }

func (e *unreachableError) Error() string {
	return "the JetStream API does not answer for " + e.stream + " (not exported to this account)"
}

// errNoAnswer marks an attempt the server left unanswered.
var errNoAnswer = errors.New("no answer from the JetStream cluster (no meta leader yet, or a reply lost to a concurrent create)")

// isNoAnswer: the request went unanswered within the attempt's bound.
func isNoAnswer(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// newPermissionViolation returns the connection's last error if it is a
// permissions violation on a JetStream API subject or on a subscription (the
// reply inbox) that arrived since before was read, and nil otherwise.
func newPermissionViolation(before, after error) error {
	// errors.Is first: after is then a pointer, so == cannot panic.
	if !errors.Is(after, nats.ErrPermissionViolation) || after == before {
		return nil
	}
	if msg := after.Error(); strings.Contains(msg, "$JS.") || strings.Contains(strings.ToLower(msg), "subscription") {
		return after
	}
	return nil
}

// explain adds what to do about the permanent failures an operator meets.
func explain(err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		return fmt.Errorf("JetStream is not enabled on the server (a jetstream block in its config): %w", err)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("JetStream is not enabled for this account (give it JetStream limits): %w", err)
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return fmt.Errorf("the server refuses it: %w", err)
	}
	return err
}

// ensureStream creates cfg's stream, or brings the existing one to cfg. A
// user that may create streams but not update them (a controller: the
// CONTROL account imports no STREAM.UPDATE) takes an existing stream as it
// is if it does what fleetwave needs (usable), and is told what differs.
func ensureStream(ctx context.Context, js jetstream.JetStream, o Options, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.CreateStream(ctx, cfg)
	if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return s, err
	}
	s, err = js.UpdateStream(ctx, cfg)
	if !cannotUpdate(err) {
		return s, err
	}
	if s, err = js.Stream(ctx, cfg.Name); err != nil {
		return nil, err
	}
	w := want{
		subjects: cfg.Subjects, republish: cfg.RePublish, perSubject: cfg.MaxMsgsPerSubject,
		maxAge: cfg.MaxAge, replicas: cfg.Replicas, storage: cfg.Storage,
	}
	if cfg.Name == StreamEvents {
		w.maxMsgSize = cfg.MaxMsgSize
	}
	if cfg.Name == StreamAudit {
		w.legacy = LegacyAuditSubjects
		w.legacyFix = "it still stores the rollout events beside the operators' records, so a flood of events (which the controller's credentials " +
			"can publish) evicts those records; this controller runs with it as it is, its events stored there, until " +
			"'fleetctl bus ensure' with admin credentials moves the events to " + StreamEvents
	}
	return s, o.takeAsIs("stream "+cfg.Name, s.CachedInfo().Config, w)
}

// ensureBucket is ensureStream for a KV bucket.
func ensureBucket(ctx context.Context, js jetstream.JetStream, o Options, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	b, err := js.CreateKeyValue(ctx, cfg)
	if !errors.Is(err, jetstream.ErrBucketExists) {
		return b, err
	}
	b, err = js.UpdateKeyValue(ctx, cfg)
	if !cannotUpdate(err) {
		return b, err
	}
	s, err := js.Stream(ctx, StreamOf(cfg.Bucket))
	if err != nil {
		return nil, err
	}
	history := int64(max(cfg.History, 1))
	if err := o.takeAsIs("bucket "+cfg.Bucket, s.CachedInfo().Config, want{
		subjects: []string{KeySubject(cfg.Bucket, ">")}, republish: cfg.RePublish, perSubject: history,
		maxAge: cfg.TTL, replicas: cfg.Replicas, storage: cfg.Storage, markers: cfg.LimitMarkerTTL > 0,
	}); err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, cfg.Bucket)
}

// cannotUpdate: the update was refused for lack of rights, not for its
// content (the account has no such API: JetStream is not enabled for it, or
// nobody answers).
func cannotUpdate(err error) bool {
	return errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) || errors.Is(err, nats.ErrNoResponders)
}

// want is what fleetwave needs of a stream it did not create itself.
type want struct {
	subjects   []string
	republish  *jetstream.RePublish
	perSubject int64
	markers    bool // per-message TTLs and delete markers (the lease)
	// legacy are subjects an older fleetwave gave the stream, which still
	// work: reported to OnDrift with legacyFix, not refused.
	legacy    []string
	legacyFix string
	// maxMsgSize, when set, is the largest message size the stream may
	// take: what its readers' bounds rest on (FLEET_EVENTS).
	maxMsgSize int32
	// Settings an older stream may differ in, harmlessly:
	maxAge   time.Duration
	replicas int
	storage  jetstream.StorageType
}

// takeAsIs checks an existing stream Ensure may not update. A stream that
// would not work, or that could write where fleetwave does not (other
// subjects, a republish or transform elsewhere, sources: what a stolen
// controller credential could have created before the fleet's first
// controller), is refused; mere drift is reported to OnDrift.
func (o Options) takeAsIs(what string, got jetstream.StreamConfig, w want) error {
	var bad, drift []string
	if w.legacy != nil && slices.Equal(got.Subjects, w.legacy) {
		drift = append(drift, fmt.Sprintf("subjects %v, want %v: %s", got.Subjects, w.subjects, w.legacyFix))
	} else if !slices.Equal(got.Subjects, w.subjects) {
		bad = append(bad, fmt.Sprintf("subjects %v, want %v", got.Subjects, w.subjects))
	}
	if !sameRePublish(got.RePublish, w.republish) {
		bad = append(bad, fmt.Sprintf("republishes %s, want %s", rePublishString(got.RePublish), rePublishString(w.republish)))
	}
	if got.SubjectTransform != nil || got.Mirror != nil || len(got.Sources) > 0 {
		bad = append(bad, "it transforms subjects, mirrors or sources another stream")
	}
	if !got.AllowDirect {
		bad = append(bad, "direct gets are off")
	}
	if w.maxMsgSize > 0 && (got.MaxMsgSize <= 0 || got.MaxMsgSize > w.maxMsgSize) {
		bad = append(bad, fmt.Sprintf("it takes messages of %d bytes, want at most %d", got.MaxMsgSize, w.maxMsgSize))
	}
	if unlimited(got.MaxMsgsPerSubject) != unlimited(w.perSubject) {
		bad = append(bad, fmt.Sprintf("keeps %d messages per subject, want %d", got.MaxMsgsPerSubject, w.perSubject))
	}
	if w.markers && (!got.AllowMsgTTL || got.SubjectDeleteMarkerTTL == 0) {
		bad = append(bad, "no per-message TTLs and delete markers (the leader lease needs them)")
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s exists with settings fleetwave cannot use (%s), and these credentials may not change them: "+
			"bring it up to date with admin credentials: fleetctl bus ensure (it was created by an older fleetwave, or by someone else)", what, strings.Join(bad, "; "))
	}
	if got.MaxAge != w.maxAge {
		drift = append(drift, fmt.Sprintf("max age %v, want %v", got.MaxAge, w.maxAge))
	}
	if got.Replicas != w.replicas {
		drift = append(drift, fmt.Sprintf("%d replicas, want %d", got.Replicas, w.replicas))
	}
	if got.Storage != w.storage {
		drift = append(drift, fmt.Sprintf("storage %v, want %v", got.Storage, w.storage))
	}
	if len(drift) > 0 && o.OnDrift != nil {
		o.OnDrift(what, drift)
	}
	return nil
}

// unlimited maps the ways a stream limit says "no limit" (0 asked, -1 as
// the server stores it) to -1, so that they compare equal.
func unlimited(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

func rePublishString(r *jetstream.RePublish) string {
	if r == nil {
		return "nothing"
	}
	return r.Source + " to " + r.Destination
}

func sameRePublish(a, b *jetstream.RePublish) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Source == b.Source && a.Destination == b.Destination && a.HeadersOnly == b.HeadersOnly
}
