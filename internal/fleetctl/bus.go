package fleetctl

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// BusEnsureOptions are the flags of "fleetctl bus ensure".
type BusEnsureOptions struct {
	*Global
	Replicas    int
	AgentExpiry time.Duration
	// AuditMaxAge and AuditMaxBytes bound the audit trail, FLEET_AUDIT.
	AuditMaxAge   time.Duration
	AuditMaxBytes int64
	// EventsMaxAge and EventsMaxBytes bound the rollout events,
	// FLEET_EVENTS.
	EventsMaxAge   time.Duration
	EventsMaxBytes int64
	// Output is text or json (a WriteResult, Value a BusEnsureReport).
	Output string
}

// BusEnsureReport is the Value of "fleetctl bus ensure -o json".
type BusEnsureReport struct {
	Stream      string   `json:"stream"`
	Buckets     []string `json:"buckets"`
	Replicas    int      `json:"replicas"`
	AgentExpiry string   `json:"agent_expiry"`
	// AuditStream is FLEET_AUDIT, bounded by AuditMaxAge and AuditMaxBytes
	// (-1: unlimited).
	AuditStream   string `json:"audit_stream"`
	AuditMaxAge   string `json:"audit_max_age"`
	AuditMaxBytes int64  `json:"audit_max_bytes"`
	// EventsStream is FLEET_EVENTS, bounded by EventsMaxAge and
	// EventsMaxBytes (-1: unlimited).
	EventsStream   string `json:"events_stream"`
	EventsMaxAge   string `json:"events_max_age"`
	EventsMaxBytes int64  `json:"events_max_bytes"`
}

func newBusCmd(g *Global) *cobra.Command {
	bus := &cobra.Command{
		Use:   "bus",
		Short: "The stream and buckets themselves (admin)",
	}
	o := &BusEnsureOptions{Global: g}
	ensure := &cobra.Command{
		Use:   "ensure",
		Short: "Create the stream and buckets, or bring existing ones to these settings (admin creds)",
		Long: `Create FLEET_HB, the audit trail (FLEET_AUDIT for the operators' records,
FLEET_EVENTS for the rollout events) and the fleet_config, fleet_plan and
fleet_stats buckets, or bring existing ones to --replicas, --agent-expiry,
--audit-max-age, --audit-max-bytes, --events-max-age, --events-max-bytes and to
what this fleetwave needs of them (the heartbeat stream republishes every
heartbeat on fleet.inventory.>, which the controllers follow; FLEET_AUDIT no
longer stores the events: a bus created before FLEET_EVENTS has them moved
there, the events stored before staying readable in the timeline).

A controller creates what is missing on its own start, but on an operator-mode
server its credentials may not change an existing stream (docs/security.md):
after an upgrade, or to change the replicas or the agent expiry of a running
fleet, run this with admin credentials. A controller that finds a stream it
cannot use says so and names this command. Idempotent.`,
		Example: `  fleetctl bus ensure --creds admin.creds --nats nats://nats-a:4222 --replicas 3
  fleetctl bus ensure --creds admin.creds --agent-expiry 2h
  fleetctl bus ensure --creds admin.creds -o json | jq .value.replicas`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			if o.Replicas < 1 || o.Replicas > 5 {
				return cliutil.Usagef("--replicas %d: must be 1-5", o.Replicas)
			}
			if o.AgentExpiry <= 0 {
				return cliutil.Usagef("--agent-expiry must be positive, got %v", o.AgentExpiry)
			}
			if o.AuditMaxAge <= 0 {
				return cliutil.Usagef("--audit-max-age must be positive, got %v", o.AuditMaxAge)
			}
			if o.EventsMaxAge <= 0 {
				return cliutil.Usagef("--events-max-age must be positive, got %v", o.EventsMaxAge)
			}
			return RunBusEnsure(cmd.Context(), o)
		},
	}
	ensure.Flags().IntVar(&o.Replicas, "replicas", 1, "replicas of the stream and every bucket (3 on a 3-node cluster)")
	ensure.Flags().DurationVar(&o.AgentExpiry, "agent-expiry", kv.DefaultAgentExpiry, "how long an agent stays in the inventory without a heartbeat (the controllers' --agent-expiry)")
	ensure.Flags().DurationVar(&o.AuditMaxAge, "audit-max-age", kv.DefaultAuditMaxAge, "the audit trail (FLEET_AUDIT) keeps records this long")
	o.AuditMaxBytes = kv.DefaultAuditMaxBytes
	ensure.Flags().Var((*byteSize)(&o.AuditMaxBytes), "audit-max-bytes", "the audit trail keeps at most this much, the oldest records going first (e.g. 1GiB; -1 unlimited)")
	ensure.Flags().DurationVar(&o.EventsMaxAge, "events-max-age", kv.DefaultEventsMaxAge, "the rollout events (FLEET_EVENTS) are kept this long")
	o.EventsMaxBytes = kv.DefaultEventsMaxBytes
	ensure.Flags().Var((*byteSize)(&o.EventsMaxBytes), "events-max-bytes", "the rollout events take at most this much, the oldest going first (e.g. 256MiB; -1 unlimited)")
	writeOutputFlag(ensure, &o.Output)
	bus.AddCommand(ensure)
	return bus
}

// RunBusEnsure is "fleetctl bus ensure".
func RunBusEnsure(ctx context.Context, o *BusEnsureOptions) error {
	ctx, cancel := o.withTimeout(ctx)
	defer cancel()
	nc, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{
		URL: o.NATSURL, Name: "fleetctl bus", Creds: o.Creds, TLS: o.TLS, Log: o.connLog(),
	})
	if err != nil {
		return err
	}
	defer nc.Close()
	var drift []string
	_, err = kv.Ensure(ctx, js, kv.Options{Replicas: o.Replicas, AgentExpiry: o.AgentExpiry,
		AuditMaxAge: o.AuditMaxAge, AuditMaxBytes: o.AuditMaxBytes, EventsMaxAge: o.EventsMaxAge, EventsMaxBytes: o.EventsMaxBytes,
		OnDrift: func(what string, diffs []string) { drift = append(drift, what+": "+strings.Join(diffs, ", ")) }})
	if err != nil {
		return err
	}
	if len(drift) > 0 {
		return fmt.Errorf("these credentials may not update the stream and buckets (%s): use admin credentials",
			strings.Join(drift, "; "))
	}
	if o.Output == "json" {
		return writeJSON(o.Out, WriteResult{Command: "bus ensure", Written: true, Value: BusEnsureReport{
			Stream: kv.StreamHB, Buckets: []string{kv.BucketConfig, kv.BucketPlan, kv.BucketStats},
			Replicas: o.Replicas, AgentExpiry: o.AgentExpiry.String(),
			AuditStream: kv.StreamAudit, AuditMaxAge: o.AuditMaxAge.String(), AuditMaxBytes: o.AuditMaxBytes,
			EventsStream: kv.StreamEvents, EventsMaxAge: o.EventsMaxAge.String(), EventsMaxBytes: o.EventsMaxBytes}})
	}
	fmt.Fprintf(o.Out, "%s and buckets %s, %s, %s: %d replica(s), agent expiry %v\n",
		kv.StreamHB, kv.BucketConfig, kv.BucketPlan, kv.BucketStats, o.Replicas, o.AgentExpiry)
	fmt.Fprintf(o.Out, "%s (audit trail): records kept %v, at most %v\n", kv.StreamAudit, o.AuditMaxAge, byteSize(o.AuditMaxBytes))
	fmt.Fprintf(o.Out, "%s (rollout events): kept %v, at most %v\n", kv.StreamEvents, o.EventsMaxAge, byteSize(o.EventsMaxBytes))
	return nil
}
