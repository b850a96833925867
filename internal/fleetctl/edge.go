package fleetctl

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
)

// EdgeInitOptions are the flags of "fleetctl edge init".
type EdgeInitOptions struct {
	*Global
	HubDomain string
	// Site is the edge site's name, as "fleetctl edge add --site" gave it
	// at the hub: it names the site's consumer there.
	Site     string
	Replicas int
	// Output is text or json (a WriteResult, Value an EdgeInitReport).
	Output string
}

// EdgeInitReport is the Value of "fleetctl edge init -o json".
type EdgeInitReport struct {
	Bucket    string `json:"bucket"`
	HubDomain string `json:"hub_domain"`
	Mirrors   string `json:"mirrors"`
	Site      string `json:"site"`
	// Consumer is the site's durable consumer at the hub the mirror reads
	// through.
	Consumer string `json:"consumer"`
	// Lag and LastContact are the mirror's, when the server knows them.
	Lag         *uint64 `json:"lag,omitempty"`
	LastContact string  `json:"last_contact,omitempty"`
}

func newEdgeCmd(g *Global) *cobra.Command {
	edge := &cobra.Command{
		Use:   "edge",
		Short: "Set up edge sites: leaf nodes whose agents keep their plan when cut off",
		Long: `An edge site is a NATS leaf node (deploy/nats/leaf-edge.conf) in front of the
site's agents, attached to the hub with the site's own leaf credentials.
Set one up in two steps:

  1. at the hub:  fleetctl edge add --site NAME    (auth directory, admin creds)
  2. at the site: fleetctl edge init --site NAME   (against the site's leaf node)

docs/deployment.md, "Edge sites"; what a site's credentials can and cannot
do: docs/security.md.`,
	}
	edge.AddCommand(newEdgeAddCmd(g), newEdgeInitCmd(g))
	return edge
}

func newEdgeInitCmd(g *Global) *cobra.Command {
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

The mirror reads through the site's consumer at the hub, which
'fleetctl edge add --site NAME' created there: the site's leaf credentials
may reset that consumer and nothing else of the hub's JetStream. A new
mirror starts with a reset of that consumer to the start of the plan, so it
receives every key. A mirror made by an older fleetctl (which created its
own consumer at the hub) or for another site is deleted and made again: it
is only a copy, and the site's agents read the new one within seconds.
A plan bucket that is not a mirror (the hub's) is never touched.
Idempotent; needs admin credentials at the leaf node. See docs/deployment.md.`,
		Example: `  fleetctl edge init --nats nats://edge-berlin:4222 --creds admin.creds --site berlin --hub-domain hub`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			if o.HubDomain == "" {
				return cliutil.Usagef("--hub-domain is required: the JetStream domain of the hub (deploy/nats: hub)")
			}
			if o.Site == "" {
				return cliutil.Usagef("--site is required: the site's name, as 'fleetctl edge add --site' gave it at the hub")
			}
			if err := kv.ValidateEdgeSite(o.Site); err != nil {
				return cliutil.Usagef("--site: %v", err)
			}
			if o.Replicas < 1 || o.Replicas > 5 {
				return cliutil.Usagef("--replicas %d: must be 1-5", o.Replicas)
			}
			return RunEdgeInit(cmd.Context(), o)
		},
	}
	initCmd.Flags().StringVar(&o.HubDomain, "hub-domain", "hub", "JetStream domain of the hub that holds the plan")
	initCmd.Flags().StringVar(&o.Site, "site", "", "the site's name, as 'fleetctl edge add --site' gave it at the hub (required)")
	initCmd.Flags().IntVar(&o.Replicas, "replicas", 1, "replicas of the mirror (the site's own cluster size)")
	writeOutputFlag(initCmd, &o.Output)
	return initCmd
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
	b, err := kv.EnsurePlanMirror(ctx, js, o.HubDomain, o.Site, kv.Options{Replicas: o.Replicas})
	if err != nil {
		return err
	}
	st, err := js.Stream(ctx, kv.PlanStream)
	if err != nil {
		return err
	}
	info := st.CachedInfo()
	if o.Output == "json" {
		r := EdgeInitReport{Bucket: b.Bucket(), HubDomain: o.HubDomain, Mirrors: kv.BucketPlan, Site: o.Site, Consumer: kv.EdgeConsumer(o.Site)}
		if m := info.Mirror; m != nil && m.Active >= 0 {
			r.Lag, r.LastContact = &m.Lag, m.Active.Round(time.Millisecond).String()
		}
		return writeJSON(o.Out, WriteResult{Command: "edge init", Written: true, Value: r})
	}
	fmt.Fprintf(o.Out, "bucket %s mirrors domain %s's %s through consumer %s", b.Bucket(), o.HubDomain, kv.BucketPlan, kv.EdgeConsumer(o.Site))
	if m := info.Mirror; m != nil && m.Active >= 0 {
		fmt.Fprintf(o.Out, " (lag %d, last contact %s ago)", m.Lag, m.Active.Round(time.Millisecond))
	}
	fmt.Fprintln(o.Out)
	return nil
}

// EdgeAddOptions are the flags of "fleetctl edge add".
type EdgeAddOptions struct {
	*AuthOptions
	Site string
	// Name is the site's leaf user (default edge-<site>).
	Name string
	// CredsOut is where the site's creds are written (default
	// <dir>/creds/<name>.creds).
	CredsOut string
	// Output is text or json (a WriteResult, Value an EdgeAddReport).
	Output string
}

// EdgeAddReport is the Value of "fleetctl edge add -o json".
type EdgeAddReport struct {
	Site    string `json:"site"`
	User    string `json:"user"`
	UserKey string `json:"user_key"`
	Creds   string `json:"creds"`
	// Stream, Consumer and DeliverSubject are the site's consumer at the
	// hub: its plan mirror reads through it.
	Stream         string `json:"stream"`
	Consumer       string `json:"consumer"`
	DeliverSubject string `json:"deliver_subject"`
}

func newEdgeAddCmd(g *Global) *cobra.Command {
	o := &EdgeAddOptions{AuthOptions: &AuthOptions{Global: g}}
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Add an edge site at the hub: its consumer of the plan, and its leaf credentials",
		Long: `Add the edge site --site at the hub, in two parts:

  - on the hub's plan stream (--nats, admin creds: --creds, else
    <dir>/creds/admin.creds), the durable consumer the site's plan mirror
    reads through: it delivers the plan on fleet.edge.<site> and nowhere
    else;
  - in the auth directory (--dir, keys/EDGE-signing.nk), the site's leaf
    user (default name edge-<site>) in the EDGE account, written to
    creds/<name>.creds (0600). It attaches a leaf node only, and carries
    the site's agents' heartbeats in and the site's plan deliveries out,
    the reset and flow control of the site's own consumer, nothing else:
    no JetStream API of FLEET, no bucket write, no other site's traffic.

Ship the creds to the site's leaf node (leaf-edge.conf: credentials) with
resolver.conf and fleet-account.conf, then run 'fleetctl edge init --site
NAME' there. Running it again keeps the consumer (and its position) and
mints a new key: the old one stays valid until 'fleetctl auth revoke
--user NAME --keep-current'. 'fleetctl auth revoke --user NAME' cuts the
site off.

An edge site set up by an older fleetwave has a leaf user in the FLEET
account, which can do everything in it: add the site again with the same
--name, ship the new creds, run 'fleetctl edge init --site NAME' there,
and revoke the old key (docs/deployment.md, "Upgrading an edge site").

Audit trail: the mint is recorded in FLEET_AUDIT ('fleetctl history') over
the same connection: who (--actor, else the creds' user name), why
(--reason; required when the config says require_reason, checked before
anything is made), and the user's account, name, site, role and public
keys before and after (never a seed or a JWT). A hub that does not answer
gets nothing made and nothing minted; a record that is not stored is said
on stderr and exits 1 (the consumer and the creds are made: do not add the
site again for that).`,
		Example: `  fleetctl edge add --dir /etc/fleetwave/auth --nats nats://nats-a:4222 --site berlin
  fleetctl edge add --site berlin --name edge-berlin --out /srv/provision/berlin/leaf.creds -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			if o.Site == "" {
				return cliutil.Usagef("--site is required")
			}
			if err := kv.ValidateEdgeSite(o.Site); err != nil {
				return cliutil.Usagef("--site: %v", err)
			}
			return RunEdgeAdd(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dir, "dir", cliutil.Env("", "FLEETWAVE_AUTH_DIR"), "auth directory (env FLEETWAVE_AUTH_DIR)")
	f.StringVar(&o.Site, "site", "", "the site's name: 1-40 of a-z 0-9 - _ (required)")
	f.StringVar(&o.Name, "name", "", "the site's leaf user (default edge-<site>)")
	f.StringVar(&o.CredsOut, "out", "", "write the creds here (default <dir>/creds/<name>.creds)")
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunEdgeAdd is "fleetctl edge add".
func RunEdgeAdd(ctx context.Context, o *EdgeAddOptions) error {
	const command = "edge add"
	d, err := o.dir()
	if err != nil {
		return err
	}
	name := o.Name
	if name == "" {
		name = auth.UserEdge(o.Site)
	}
	// The hub first: a site whose consumer cannot be made gets no creds.
	audit, err := o.openAudit(ctx, command, func(err error) error {
		return fmt.Errorf("%w; nothing added: %s creates the site's consumer at the hub (--nats, admin creds)", err, command)
	})
	if err != nil {
		return err
	}
	defer audit.done()
	ci, err := kv.EnsureEdgeConsumer(audit.ctx, audit.f.JS, o.Site)
	if err != nil {
		return o.refused(command, err)
	}
	before, err := recordValue(func() (auth.Record, error) { return d.User(name) })
	if err != nil {
		return err
	}
	u, out, err := d.IssueEdge(o.Site, name, o.CredsOut)
	if err != nil {
		return err
	}
	o.recordMint(audit, command, func() (auth.Record, error) { return d.User(name) }, before)
	out = inDir(d, out)
	rep := EdgeAddReport{Site: o.Site, User: name, UserKey: u.PubKey, Creds: out,
		Stream: kv.PlanStream, Consumer: ci.Name, DeliverSubject: ci.Config.DeliverSubject}
	if o.Output == "json" {
		return writeJSON(o.Global.Out, WriteResult{Command: command, Written: true, Files: []string{out}, Value: rep})
	}
	w := o.Global.Out
	fmt.Fprintf(w, "edge site %s: consumer %s on %s delivers to %s\n", o.Site, rep.Consumer, rep.Stream, rep.DeliverSubject)
	fmt.Fprintf(w, "leaf user %s (%s): %s\ncreds written to %s (0600)\n", name, auth.AccountEdge, u.PubKey, out)
	fmt.Fprintf(w, "next: ship the creds, %s and %s to the site's leaf node; there: fleetctl edge init --site %s\n",
		auth.FileResolverConf, auth.FileAccountConf, o.Site)
	return nil
}
