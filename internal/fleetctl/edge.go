package fleetctl

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// EdgeInitOptions are the flags of "fleetctl edge init".
type EdgeInitOptions struct {
	*Global
	HubDomain string
	Replicas  int
	// Output is text or json (a WriteResult, Value an EdgeInitReport).
	Output string
}

// EdgeInitReport is the Value of "fleetctl edge init -o json".
type EdgeInitReport struct {
	Bucket    string `json:"bucket"`
	HubDomain string `json:"hub_domain"`
	Mirrors   string `json:"mirrors"`
	// Lag and LastContact are the mirror's, when the server knows them.
	Lag         *uint64 `json:"lag,omitempty"`
	LastContact string  `json:"last_contact,omitempty"`
}

func newEdgeCmd(g *Global) *cobra.Command {
	edge := &cobra.Command{
		Use:   "edge",
		Short: "Set up edge sites: leaf nodes whose agents keep their plan when cut off",
	}
	o := &EdgeInitOptions{Global: g}
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create the site's mirror of the hub's plan bucket (run against the site's leaf node)",
		Long: `Create, in the JetStream domain of the server at --nats (an edge site's leaf
node, deploy/nats/leaf-edge.conf), a read-only mirror of the hub's fleet_plan
bucket under the same name. The site's agents connect to the leaf node with
their usual credentials: their heartbeats cross the leaf connection to the
hub's FLEET_HB stream, and they read (and follow) the plan from the local
mirror, which keeps answering while the site is cut off from the hub.
Idempotent; needs admin credentials. See docs/deployment.md.`,
		Example: `  fleetctl edge init --nats nats://edge-berlin:4222 --creds admin.creds --hub-domain hub`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			if o.HubDomain == "" {
				return cliutil.Usagef("--hub-domain is required: the JetStream domain of the hub (deploy/nats: hub)")
			}
			if o.Replicas < 1 || o.Replicas > 5 {
				return cliutil.Usagef("--replicas %d: must be 1-5", o.Replicas)
			}
			return RunEdgeInit(cmd.Context(), o)
		},
	}
	initCmd.Flags().StringVar(&o.HubDomain, "hub-domain", "hub", "JetStream domain of the hub that holds the plan")
	initCmd.Flags().IntVar(&o.Replicas, "replicas", 1, "replicas of the mirror (the site's own cluster size)")
	writeOutputFlag(initCmd, &o.Output)
	edge.AddCommand(initCmd)
	return edge
}

// RunEdgeInit is "fleetctl edge init".
func RunEdgeInit(ctx context.Context, o *EdgeInitOptions) error {
	ctx, cancel := o.withTimeout(ctx)
	defer cancel()
	nc, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{
		URL: o.NATSURL, Name: "fleetctl edge", Creds: o.Creds, TLS: o.TLS, Log: o.connLog(),
	})
	if err != nil {
		return err
	}
	defer nc.Close()
	b, err := kv.EnsurePlanMirror(ctx, js, o.HubDomain, kv.Options{Replicas: o.Replicas})
	if err != nil {
		return err
	}
	st, err := js.Stream(ctx, kv.PlanStream)
	if err != nil {
		return err
	}
	info := st.CachedInfo()
	if o.Output == "json" {
		r := EdgeInitReport{Bucket: b.Bucket(), HubDomain: o.HubDomain, Mirrors: kv.BucketPlan}
		if m := info.Mirror; m != nil && m.Active >= 0 {
			r.Lag, r.LastContact = &m.Lag, m.Active.Round(time.Millisecond).String()
		}
		return writeJSON(o.Out, WriteResult{Command: "edge init", Written: true, Value: r})
	}
	fmt.Fprintf(o.Out, "bucket %s mirrors domain %s's %s", b.Bucket(), o.HubDomain, kv.BucketPlan)
	if m := info.Mirror; m != nil && m.Active >= 0 {
		fmt.Fprintf(o.Out, " (lag %d, last contact %s ago)", m.Lag, m.Active.Round(time.Millisecond))
	}
	fmt.Fprintln(o.Out)
	return nil
}
