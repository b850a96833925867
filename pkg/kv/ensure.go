package kv

import (
	"context"
	"fmt"
	"time"

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
	// Memory selects memory storage (tests, throw-away demos). Default file.
	Memory bool
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
}

// Ensure creates the stream and buckets, or brings existing ones to opts. It
// is idempotent: controllers call it on every start.
func Ensure(ctx context.Context, js jetstream.JetStream, opts Options) (*Fleet, error) {
	o := opts.withDefaults()
	storage := o.storage()
	f := &Fleet{JS: js}
	var err error
	f.HB, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
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
	})
	if err != nil {
		return nil, fmt.Errorf("ensure stream %s: %w", StreamHB, err)
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
		kv, err := js.CreateOrUpdateKeyValue(ctx, b.cfg)
		if err != nil {
			return nil, fmt.Errorf("ensure bucket %s: %w", b.cfg.Bucket, err)
		}
		*b.dst = kv
	}
	return f, nil
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
