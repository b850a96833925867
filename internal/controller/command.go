package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/natsembed"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/internal/run"
	"github.com/fleetwave/fleetwave/internal/version"
	"github.com/fleetwave/fleetwave/pkg/httpfind"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/release"
)

// RunOptions are the flags of "controller run".
type RunOptions struct {
	NATSURL           string
	Creds             string
	TLS               natsutil.TLS
	Listen            string
	ServerConfig      string
	AuthDir           string
	StoreDir          string
	ID                string
	StatsInterval     time.Duration
	HeartbeatInterval time.Duration
	AgentExpiry       time.Duration
	// AuditMaxAge and AuditMaxBytes bound FLEET_AUDIT when this controller
	// creates it.
	AuditMaxAge   time.Duration
	AuditMaxBytes int64
	// EventsMaxAge and EventsMaxBytes bound FLEET_EVENTS when this
	// controller creates it.
	EventsMaxAge      time.Duration
	EventsMaxBytes    int64
	ReconcileInterval time.Duration
	LeaseTTL          time.Duration
	// AttributionGrace: how long a revision of the spec or the config
	// may wait for its audit record (0: DefaultAttributionGrace).
	AttributionGrace time.Duration
	Replicas         int
	HTTPAddr         string
	HTTPCert         string
	HTTPKey          string
	// HTTPAllowedHosts are the Host names HTTPAddr answers
	// (--http-allowed-hosts); nil: the default (HostGuard).
	HTTPAllowedHosts []string
	// UI serves the dashboard on HTTPAddr; UIInsecure serves it on a
	// non-loopback address without TLS on a secured bus.
	UI         bool
	UIInsecure bool
	// Webhook: the leader POSTs rollout events (docs/controller.md#webhooks).
	Webhook WebhookFlags
	// ReleaseRepo is the release repository's base URL (--release-repo),
	// ReleaseRoot the file of its root the controller trusts
	// (--release-root), ReleaseRefresh how often the leader reads it, and
	// ReleaseTrustDir where the trusted metadata is kept (default
	// releaseTrustDir).
	ReleaseRepo     string
	ReleaseRoot     string
	ReleaseRefresh  time.Duration
	ReleaseTrustDir string
	Log             cliutil.LogFlags
}

// exitCodesHelp lists the codes the controller returns: it waits on no
// rollout, so never cliutil.ExitHalted.
var exitCodesHelp = fmt.Sprintf(`
Exit codes:
  %d  success ("run": stopped by SIGINT or SIGTERM)
  %d  failure (the error is printed on stderr)
  %d  usage error (bad flag, argument or value)`, cliutil.ExitOK, cliutil.ExitFailure, cliutil.ExitUsage)

// NewCommand is the controller's root command.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:     "controller",
		Short:   "fleetwave controller: counts agents and drives rollouts",
		Long:    "The controller follows agents' heartbeats on NATS JetStream, keeps the live inventory,\nwrites per-group, per-version counts to the fleet_stats bucket, and (the leader)\ndrives each group's rollout in the fleet_plan bucket.\n" + exitCodesHelp,
		Version: version.Version,
	}
	root.AddCommand(newRunCmd())
	return root
}

func newRunCmd() *cobra.Command {
	o := &RunOptions{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the controller (with an embedded NATS server unless --nats is given)",
		Long: `Run the controller until SIGINT or SIGTERM.

Without --nats, the controller starts an embedded JetStream-enabled NATS
server on --listen with its data in --store-dir, so one command gives a
working system; agents and fleetctl connect to that address. With --nats it
connects to an existing server or cluster instead. Only the flag decides:
NATS_URL, which fleetctl, agentd and the nats CLI read, is ignored here, so
exporting it for them does not turn the embedded server off. The first log
line says which it is and why.

The store directory belongs to one controller: a lock file in it
(fleetwave.lock, with the holder's pid) makes a second controller on the same
directory fail at once, naming the first. A --listen or --http-addr port in
use, or a store directory that cannot be created, also fails the start at
once, with the system's error.

Secured: with --auth-dir (the directory 'fleetctl auth init' wrote) the
embedded server runs in operator mode from its resolver.conf, so only holders
of minted credentials get in, and the controller connects with
creds/controller.creds. --server-config starts the embedded server from any
nats-server config instead (TLS, limits, a JetStream domain). See
docs/security.md.

On start it creates (or brings up to date) the FLEET_HB stream and the
fleet_config, fleet_plan and fleet_stats buckets; on a cluster that is still
forming it waits for it, saying so every few seconds, and it stops at once on
what waiting cannot fix (a config the server refuses, denied credentials).
It then rebuilds the inventory from the last heartbeat of every agent in the
stream, and writes counts every --stats-interval.

Several controllers may run against one bus: all of them count, one of them
(the holder of the leader lease in fleet_stats/leader) drives the rollout,
writing each group's status to fleet_plan/group.<name> every
--reconcile-interval with compare-and-swap, and publishing events on
fleet.events.<group>. When the leader stops, another takes over within
--lease-ttl (at once on a clean shutdown).

With --http-addr it serves the agents' HTTP find fallback (/v1/find),
Prometheus metrics (/metrics, docs/metrics.md) and a live, read-only
dashboard at / (docs/dashboard.md): the rollout as fleetctl status shows it,
the audit trail's timeline, and the agents, searchable. On a secured bus
(--auth-dir or --creds) the dashboard is refused on a non-loopback address
without TLS: bind 127.0.0.1 behind your SSO proxy, give --http-tls-cert and
--http-tls-key, or say --ui-insecure.

Against DNS rebinding, the HTTP port answers only the Host names it is
reached by, 421 otherwise. IP addresses and localhost are always answered.
With --http-allowed-hosts, exactly its names are, on every path. Without
it, the names are the --http-addr host and (when that is not loopback)
this machine's host name: the dashboard's paths check them for every
client, /v1/find, /metrics, /healthz and /readyz only for browsers, so that
agents and Prometheus reaching the controller by any name keep working.
Behind a proxy that passes the client's Host (oauth2-proxy does), list the
name users type. Each address may follow the live dashboard with at most
16 pages at once (256 in all).

With --webhook URL (repeatable) the leader POSTs every transition, halt,
alert, approval-needed and quarantine event to URL as JSON, with an id
receivers dedupe on and an X-Fleetwave-Signature HMAC-SHA256 keyed with the
contents of --webhook-secret-file; slack=URL posts a Slack message instead.
Deliveries follow the audit trail from a cursor on the bus, retry with
backoff for --webhook-max-age, and survive a change of leader; a receiver
that is down never holds the rollout (docs/controller.md#webhooks).

With --release-repo URL and --release-root FILE (the repository's
root.json), the leader reads the signed release repository (TUF,
docs/release-repo.md) every --release-refresh and lists its releases in
fleet_stats/releases: fleetctl releases ls and plan set's check read it,
the dashboard shows it, and /metrics counts the hosts on a version flagged
end_of_life or older than a security release. A root that is not a TUF
root signed by its own threshold fails the start. A repository that cannot
be read is not: the listing keeps its last good releases with the error
beside them (alert FleetwaveReleaseRepositoryStale). The listing is never a
grant: agents verify every install through the repository themselves.`,
		Example: `  # one-command system on this host
  controller run --store-dir /var/lib/fleetwave/nats

  # the same, secured: operator mode from 'fleetctl auth init --dir /etc/fleetwave/auth'
  controller run --auth-dir /etc/fleetwave/auth --listen 0.0.0.0:4222

  # against an existing cluster, with credentials and a private CA
  controller run --nats nats://nats-1:4222,nats://nats-2:4222 --creds controller.creds \
    --tls-ca /etc/fleetwave/ca.pem --replicas 3

  # the dashboard and find, answered only for the names clients use
  controller run --http-addr :8080 --http-allowed-hosts fleet.example.com,controller-1.example.com

  # POST events to an incident tool (signed) and to a Slack channel
  controller run --webhook https://hooks.example.com/fleetwave \
    --webhook slack=https://hooks.slack.com/services/T000/B000/XXXX \
    --webhook-secret-file /etc/fleetwave/webhook.secret

  # list the releases of a signed release repository, read every 5 minutes
  controller run --release-repo https://releases.example.com/fleet \
    --release-root /etc/fleetwave/release-root.json --release-refresh 5m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("nats") && strings.TrimSpace(o.NATSURL) == "" {
				return cliutil.Usagef("--nats is empty: give the URL(s) of the servers to connect to, or leave --nats out to start an embedded server")
			}
			if !cmd.Flags().Changed("http-allowed-hosts") {
				o.HTTPAllowedHosts = nil // the default, not an empty list
			} else if o.HTTPAllowedHosts == nil {
				o.HTTPAllowedHosts = []string{}
			}
			log, err := o.Log.Logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return Run(cmd.Context(), o, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.NATSURL, "nats", "", "NATS server URL(s), comma separated, to connect to; not given: start an embedded server (NATS_URL is not read)")
	f.StringVar(&o.Creds, "creds", cliutil.Env("", "NATS_CREDS"), "NATS user credentials file (env NATS_CREDS)")
	o.TLS.Register(f)
	f.StringVar(&o.AuthDir, "auth-dir", cliutil.Env("", "FLEETWAVE_AUTH_DIR"), "directory of 'fleetctl auth init': the embedded server runs in operator mode from its resolver.conf and the controller connects with its creds/controller.creds (env FLEETWAVE_AUTH_DIR)")
	f.StringVar(&o.ServerConfig, "server-config", "", "embedded server: start from this nats-server config file (operator mode, TLS, limits); --listen and --store-dir still apply")
	f.StringVar(&o.Listen, "listen", "127.0.0.1:4222", "embedded server: client listen address host:port")
	f.StringVar(&o.StoreDir, "store-dir", defaultStoreDir(), "embedded server: JetStream data directory")
	f.StringVar(&o.ID, "id", defaultID(), "controller id in fleet_stats keys; unique per controller")
	f.DurationVar(&o.StatsInterval, "stats-interval", DefaultStatsInterval, "how often to write counts to fleet_stats")
	f.DurationVar(&o.HeartbeatInterval, "heartbeat-interval", DefaultHeartbeatInterval, "agents' heartbeat interval; an agent counts once known this long")
	f.DurationVar(&o.AgentExpiry, "agent-expiry", kv.DefaultAgentExpiry, "forget agents silent this long (also the heartbeat stream's max age)")
	f.DurationVar(&o.ReconcileInterval, "reconcile-interval", DefaultReconcileInterval, "how often the leader recomputes every group's rollout status")
	f.DurationVar(&o.LeaseTTL, "lease-ttl", DefaultLeaseTTL, "how long leadership outlives a silent leader (must exceed --reconcile-interval)")
	f.DurationVar(&o.AttributionGrace, "attribution-grace", DefaultAttributionGrace, "how long a revision of the plan spec or the config may wait for its audit record before the leader raises an unattributed change")
	f.DurationVar(&o.AuditMaxAge, "audit-max-age", kv.DefaultAuditMaxAge, "the audit trail (FLEET_AUDIT) keeps records this long")
	f.Int64Var(&o.AuditMaxBytes, "audit-max-bytes", kv.DefaultAuditMaxBytes, "the audit trail keeps at most this many bytes, the oldest records going first (-1: unlimited)")
	f.DurationVar(&o.EventsMaxAge, "events-max-age", kv.DefaultEventsMaxAge, "the rollout events (FLEET_EVENTS) are kept this long")
	f.Int64Var(&o.EventsMaxBytes, "events-max-bytes", kv.DefaultEventsMaxBytes, "the rollout events take at most this many bytes, the oldest going first (-1: unlimited)")
	f.IntVar(&o.Replicas, "replicas", 1, "replicas of the stream and buckets (3 on a 3-node cluster)")
	f.StringVar(&o.HTTPAddr, "http-addr", "", "serve GET /v1/find, /metrics (Prometheus), /healthz, /readyz and the dashboard (/) on this address (e.g. 127.0.0.1:8080); empty: off")
	f.StringVar(&o.HTTPCert, "http-tls-cert", "", "TLS certificate for --http-addr (with --http-tls-key)")
	f.StringVar(&o.HTTPKey, "http-tls-key", "", "TLS key for --http-addr")
	f.StringSliceVar(&o.HTTPAllowedHosts, "http-allowed-hosts", nil, "Host names --http-addr answers on every path, comma separated (*.example.com for a domain's names, * for any); others get 421. IP addresses and localhost always answer. Not given: the --http-addr host and this host's name, checked on the dashboard's paths and for browsers (docs/dashboard.md)")
	f.BoolVar(&o.UI, "ui", true, "serve the read-only dashboard at / on --http-addr (see docs/dashboard.md)")
	f.BoolVar(&o.UIInsecure, "ui-insecure", false, "serve the dashboard on a non-loopback --http-addr without TLS although the bus is secured (behind a TLS-terminating SSO proxy)")
	f.StringVar(&o.ReleaseRepo, "release-repo", "", "the release repository's base URL (TUF; metadata under URL/metadata/): the leader lists its releases in fleet_stats/releases for fleetctl releases ls, plan set's check, the dashboard and the end-of-life and security metrics (docs/release-repo.md); with --release-root")
	f.StringVar(&o.ReleaseRoot, "release-root", "", "the repository's root.json this controller trusts (checked at start; rotations are followed from it)")
	f.DurationVar(&o.ReleaseRefresh, "release-refresh", DefaultReleaseRefresh, "how often the leader reads the release repository")
	f.StringVar(&o.ReleaseTrustDir, "release-trust-dir", "", "where the trusted repository metadata is kept (default: <store-dir>/release-trust with the embedded server, else release-trust-<id> beside --store-dir)")
	o.Webhook.Register(f)
	o.Log.Register(cmd)
	return cmd
}

// Run is "controller run".
func Run(ctx context.Context, o *RunOptions, log *slog.Logger) error {
	if err := o.validate(); err != nil {
		return err
	}
	// The secret file is read before anything starts: a missing one fails
	// at once.
	notify, err := o.Webhook.Notify(log)
	if err != nil {
		return err
	}
	// So is the release repository's root: a bad one fails the start.
	var releaseRoot []byte
	if o.ReleaseRepo != "" {
		if releaseRoot, err = ReadReleaseRoot(o.ReleaseRoot); err != nil {
			return cliutil.Usagef("%v", err)
		}
	}
	url, creds, serverConfig := o.NATSURL, o.Creds, o.ServerConfig
	if o.AuthDir != "" {
		if serverConfig == "" && url == "" {
			serverConfig = filepath.Join(o.AuthDir, auth.FileResolverConf)
		}
		if creds == "" {
			creds = filepath.Join(o.AuthDir, auth.CredsFile(auth.UserController))
		}
	}
	embedded := url == ""
	// A second controller on this store most likely holds the ports too:
	// say that rather than "address already in use".
	storeInUse := func(err error) error {
		if embedded {
			if held := natsembed.StoreHolder(o.StoreDir); held != nil {
				return held
			}
		}
		return err
	}
	// Bind --http-addr now, so that a port in use fails the start at once
	// rather than after the bus is up.
	var httpLn net.Listener
	if o.HTTPAddr != "" {
		ln, err := net.Listen("tcp", o.HTTPAddr)
		if err != nil {
			return storeInUse(fmt.Errorf("--http-addr: %w", err))
		}
		httpLn = ln
		defer func() {
			if httpLn != nil {
				httpLn.Close()
			}
		}()
	}
	if embedded {
		if err := natsembed.CheckListen(o.Listen); err != nil {
			return storeInUse(fmt.Errorf("--listen: %w", err))
		}
		lock, err := natsembed.LockStore(o.StoreDir, fmt.Sprintf("controller %s", o.ID))
		if err != nil {
			return err
		}
		defer lock.Release()
		// The trust dir is under the store dir, which is ours now.
		if err := o.trustReleaseRoot(releaseRoot, log); err != nil {
			return err
		}
		ns, err := natsembed.Start(natsembed.Options{Listen: o.Listen, StoreDir: o.StoreDir, ServerName: o.ID, ConfigFile: serverConfig})
		if err != nil {
			return err
		}
		defer func() {
			ns.Shutdown()
			ns.WaitForShutdown()
		}()
		url = ns.ClientURL()
		why := "no --nats given"
		if env := os.Getenv("NATS_URL"); env != "" {
			why += "; NATS_URL=" + env + " is for clients and not read by the controller"
		}
		log.Info("NATS: embedded JetStream server on "+url+", store "+o.StoreDir+" ("+why+")",
			slog.String("url", url), slog.String("store_dir", o.StoreDir))
	} else {
		if err := o.trustReleaseRoot(releaseRoot, log); err != nil {
			return err
		}
		log.Info("NATS: connecting to "+url+" (from --nats)", slog.String("url", url))
	}
	nc, js, err := natsutil.ConnectJetStream(natsutil.ConnectOptions{URL: url, Name: "fleetwave-controller " + o.ID, Creds: creds, TLS: o.TLS, Log: log})
	if err != nil {
		return err
	}
	defer nc.Close()
	// No deadline here: a bus that is still settling (a fresh cluster
	// electing its meta leader, other controllers creating the same
	// stream) is waited for, with a log line every few seconds, until the
	// operator stops us. Ensure fails at once on what waiting cannot fix.
	waiting := &settleLog{log: log, every: settleLogEvery, now: time.Now, switchServer: func() bool {
		if len(nc.Servers()) < 2 {
			return false
		}
		log.Warn("NATS server "+nc.ConnectedUrlRedacted()+" keeps answering \"JetStream not enabled for account\" "+
			"(a server of a forming cluster can hold this account half set up); reconnecting to another server",
			slog.String("server", nc.ConnectedServerName()))
		return nc.ForceReconnect() == nil
	}}
	fleet, err := kv.Ensure(ctx, js, kv.Options{Replicas: o.Replicas, AgentExpiry: o.AgentExpiry,
		AuditMaxAge: o.AuditMaxAge, AuditMaxBytes: o.AuditMaxBytes, EventsMaxAge: o.EventsMaxAge, EventsMaxBytes: o.EventsMaxBytes, Retry: kv.Retry{OnRetry: waiting.retrying},
		OnDrift: func(what string, diffs []string) {
			log.Warn("the bus differs from this controller's settings, and a controller may not change it: running with it as it is",
				slog.String("what", what), slog.String("differs", strings.Join(diffs, "; ")),
				slog.String("fix", fmt.Sprintf("fleetctl bus ensure --creds <admin creds> --replicas %d --agent-expiry %v", o.Replicas, o.AgentExpiry)))
		}})
	if err != nil {
		if ctx.Err() != nil {
			log.Info("controller stopping before the stream and buckets were ready", slog.Any("err", err))
			return nil
		}
		return err
	}
	waiting.ready()
	var releases *ReleaseRepo
	if o.ReleaseRepo != "" {
		releases = &ReleaseRepo{Refresh: o.ReleaseRefresh,
			Client: &release.Client{URL: o.ReleaseRepo, Dir: o.releaseTrustDir(), HTTP: releaseHTTPClient(o.ReleaseRepo)}}
	}
	c, err := New(fleet, Options{
		ID: o.ID, StatsInterval: o.StatsInterval, HeartbeatInterval: o.HeartbeatInterval,
		AgentExpiry: o.AgentExpiry, ReconcileInterval: o.ReconcileInterval, LeaseTTL: o.LeaseTTL, AttributionGrace: o.AttributionGrace, Notify: notify,
		Releases: releases, Log: log,
	})
	if err != nil {
		return err
	}
	log.Info("controller started", slog.String("id", o.ID), slog.String("version", version.Version))
	loops := []func(context.Context) error{c.Run}
	if o.HTTPAddr != "" {
		mirror := &PlanMirror{NC: nc, Store: &httpfind.Store{}, Log: log}
		c.ServePlanFrom(mirror)
		var dash *Dashboard
		if o.UI {
			dash = &Dashboard{C: c, Mirror: mirror, Log: log, Disabled: o.uiRefusal()}
			if dash.Disabled != "" {
				log.Warn("dashboard not served: "+dash.Disabled, slog.String("http_addr", o.HTTPAddr))
			} else {
				scheme := "http"
				if o.HTTPCert != "" {
					scheme = "https"
				}
				log.Info("dashboard on "+scheme+"://"+browseAddr(httpLn.Addr().String())+"/", slog.String("http_addr", o.HTTPAddr))
				loops = append(loops, dash.Run)
			}
		}
		guard, err := NewHostGuard(o.HTTPAllowedHosts, o.HTTPAddr,
			c.HTTPHandler(&httpfind.Handler{Store: mirror.Store, Apps: mirror.FindApp, Ready: mirror.Ready, Log: log}, dashHandler(dash)), log)
		if err != nil {
			return cliutil.Usagef("%v", err)
		}
		log.Info("HTTP: answering these host names (and IP addresses, localhost)", slog.Any("hosts", guard.Hosts),
			slog.Bool("every_request", guard.EveryRequest))
		srv := &httpfind.Server{Handler: guard, CertFile: o.HTTPCert, KeyFile: o.HTTPKey, Log: log}
		ln := httpLn
		httpLn = nil // Serve closes it
		loops = append(loops, mirror.Run, func(ctx context.Context) error { return srv.Serve(ctx, ln) })
	}
	err = run.All(ctx, loops...)
	if (err == nil || errors.Is(err, context.Canceled)) && ctx.Err() != nil {
		log.Info("controller stopping")
		return nil
	}
	return err
}

// releaseTrustDir is where the trusted metadata of the release repository
// is kept: --release-trust-dir, else under the embedded server's store
// dir (which the store's lock makes this controller's), else beside the
// store dir (unused by the server with --nats, and writable where the
// systemd unit puts it), named by the controller's id.
func (o *RunOptions) releaseTrustDir() string {
	switch {
	case o.ReleaseTrustDir != "":
		return o.ReleaseTrustDir
	case o.NATSURL == "":
		return filepath.Join(o.StoreDir, "release-trust")
	}
	return filepath.Join(filepath.Dir(o.StoreDir), "release-trust-"+o.ID)
}

// trustReleaseRoot sets up the trust dir from root (nil: no repository).
func (o *RunOptions) trustReleaseRoot(root []byte, log *slog.Logger) error {
	if root == nil {
		return nil
	}
	dir := o.releaseTrustDir()
	if err := TrustReleaseRoot(dir, root); err != nil {
		return err
	}
	log.Info("release repository: "+o.ReleaseRepo+", read every "+o.ReleaseRefresh.String()+" by the leader", slog.String("url", o.ReleaseRepo),
		slog.String("root", o.ReleaseRoot), slog.String("trust_dir", dir))
	return nil
}

// settleLogEvery is the least time between two "waiting for the bus" lines.
const settleLogEvery = 5 * time.Second

// settleLog tells the operator what the controller waits for while it
// creates the stream and buckets on a bus that is not ready: the first
// failure at once, then at most one line every interval, so a cluster that
// takes a minute to form does not flood the log.
type settleLog struct {
	log     *slog.Logger
	every   time.Duration
	now     func() time.Time
	last    time.Time // of the last line; zero before the first
	retries int       // failed attempts so far
	quiet   int       // failed attempts since the last line
	// switchServer, when set, moves the connection to another server of
	// the cluster, and says whether it did. It is called after
	// notEnabledSwitch answers in a row of "JetStream not enabled for
	// account": a server that learnt of the account over a route while
	// JetStream was starting can keep it half set up (nats-server issue
	// 2874), and waiting on that one server does not end it.
	switchServer func() bool
	notEnabled   int // consecutive "not enabled for account" answers
}

// notEnabledSwitch is how many "JetStream not enabled for account"
// answers in a row make the controller try another server.
const notEnabledSwitch = 3

// retrying is kv.Retry.OnRetry. Ensure calls it from one goroutine.
func (s *settleLog) retrying(r kv.Retrying) {
	s.retries++
	if errors.Is(r.Err, jetstream.ErrJetStreamNotEnabledForAccount) {
		s.notEnabled++
		if s.notEnabled >= notEnabledSwitch && s.switchServer != nil && s.switchServer() {
			s.notEnabled = 0
		}
	} else {
		s.notEnabled = 0
	}
	now := s.now()
	if !s.last.IsZero() && now.Sub(s.last) < s.every {
		s.quiet++
		return
	}
	s.log.Warn("waiting for the NATS JetStream bus to accept the stream and buckets; retrying",
		slog.String("ensuring", r.What), slog.Any("err", r.Err), slog.Int("attempt", r.Attempt),
		slog.Duration("retry_in", r.Delay), slog.Int("failures_since_last_line", s.quiet))
	s.last, s.quiet = now, 0
}

// ready says the wait is over, if there was one.
func (s *settleLog) ready() {
	if s.retries > 0 {
		s.log.Info("stream and buckets ready", slog.Int("failed_attempts", s.retries))
	}
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (o *RunOptions) validate() error {
	if !idPattern.MatchString(o.ID) {
		return cliutil.Usagef("--id %q: use 1-64 of A-Z a-z 0-9 _ -", o.ID)
	}
	for name, d := range map[string]time.Duration{
		"--stats-interval": o.StatsInterval, "--heartbeat-interval": o.HeartbeatInterval, "--agent-expiry": o.AgentExpiry,
		"--reconcile-interval": o.ReconcileInterval, "--lease-ttl": o.LeaseTTL,
	} {
		if d <= 0 {
			return cliutil.Usagef("%s must be positive, got %v", name, d)
		}
	}
	// Zero takes kv's defaults (a RunOptions built in code).
	if o.AuditMaxAge < 0 {
		return cliutil.Usagef("--audit-max-age must be positive, got %v", o.AuditMaxAge)
	}
	if o.AuditMaxBytes < -1 {
		return cliutil.Usagef("--audit-max-bytes must be positive, or -1 for unlimited, got %d", o.AuditMaxBytes)
	}
	if o.EventsMaxAge < 0 {
		return cliutil.Usagef("--events-max-age must be positive, got %v", o.EventsMaxAge)
	}
	if o.EventsMaxBytes < -1 {
		return cliutil.Usagef("--events-max-bytes must be positive, or -1 for unlimited, got %d", o.EventsMaxBytes)
	}
	if o.AgentExpiry <= o.HeartbeatInterval {
		return cliutil.Usagef("--agent-expiry (%v) must be longer than --heartbeat-interval (%v), or every agent expires between beats", o.AgentExpiry, o.HeartbeatInterval)
	}
	if o.AttributionGrace < 0 {
		return cliutil.Usagef("--attribution-grace must be positive, got %v", o.AttributionGrace)
	}
	if o.LeaseTTL <= o.ReconcileInterval {
		return cliutil.Usagef("--lease-ttl (%v) must be longer than --reconcile-interval (%v), which renews it", o.LeaseTTL, o.ReconcileInterval)
	}
	if (o.HTTPCert == "") != (o.HTTPKey == "") {
		return cliutil.Usagef("--http-tls-cert and --http-tls-key go together")
	}
	if o.ServerConfig != "" && o.NATSURL != "" {
		return cliutil.Usagef("--server-config configures the embedded server, and --nats means there is none: give one of them")
	}
	if err := o.TLS.Validate(); err != nil {
		return err
	}
	if err := o.Webhook.Validate(); err != nil {
		return err
	}
	switch {
	case o.ReleaseRepo != "" && o.ReleaseRoot == "":
		return cliutil.Usagef("--release-repo needs --release-root: the repository's root.json this controller trusts")
	case o.ReleaseRepo == "" && o.ReleaseRoot != "":
		return cliutil.Usagef("--release-root without --release-repo: give the repository's base URL too")
	case o.ReleaseRepo == "" && o.ReleaseTrustDir != "":
		return cliutil.Usagef("--release-trust-dir without --release-repo: there is no repository to trust")
	case o.ReleaseRepo != "":
		if err := checkReleaseURL(o.ReleaseRepo); err != nil {
			return cliutil.Usagef("%v", err)
		}
		if o.ReleaseRefresh < time.Second {
			return cliutil.Usagef("--release-refresh %v: must be at least 1s", o.ReleaseRefresh)
		}
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		return cliutil.Usagef("--replicas %d: must be 1-5", o.Replicas)
	}
	if o.NATSURL == "" {
		if _, _, err := natsembed.ParseListen(o.Listen); err != nil {
			return cliutil.Usagef("--listen: %v", err)
		}
		if o.StoreDir == "" {
			return cliutil.Usagef("--store-dir is empty: the embedded server needs a directory for its data")
		}
	}
	if o.HTTPAllowedHosts != nil {
		if o.HTTPAddr == "" {
			return cliutil.Usagef("--http-allowed-hosts without --http-addr: nothing is served over HTTP")
		}
		hosts, err := ParseAllowedHosts(o.HTTPAllowedHosts)
		if err != nil {
			return cliutil.Usagef("%v", err)
		}
		if len(hosts) == 0 {
			return cliutil.Usagef("--http-allowed-hosts is empty: give the host names clients use, or leave it out for the default")
		}
	}
	if o.HTTPAddr != "" {
		_, port, err := net.SplitHostPort(o.HTTPAddr)
		if n, perr := strconv.Atoi(port); err == nil && perr == nil && (n < 0 || n > 65535) {
			err = errors.New("port must be 0-65535")
		}
		if err != nil {
			return cliutil.Usagef("--http-addr %q: want host:port, e.g. :8080 or 127.0.0.1:8080: %v", o.HTTPAddr, err)
		}
	}
	return nil
}

// uiRefusal is why the dashboard must not be served as configured, or "":
// on a secured bus (--auth-dir, --creds, or a --tls-cert the server
// verifies), the page shows the whole fleet, so it is served in the clear
// only on a loopback address (where an SSO proxy on the same host fronts
// it) unless --ui-insecure says otherwise.
func (o *RunOptions) uiRefusal() string {
	secured := o.AuthDir != "" || o.Creds != "" || o.TLS.Cert != ""
	if !secured || o.HTTPCert != "" || o.UIInsecure {
		return ""
	}
	host, _, err := net.SplitHostPort(o.HTTPAddr)
	if err == nil && isLoopback(host) {
		return ""
	}
	return fmt.Sprintf("the bus is secured (--auth-dir, --creds or --tls-cert) and --http-addr %s is not a loopback address and has no TLS: "+
		"give --http-tls-cert and --http-tls-key, bind --http-addr to 127.0.0.1 behind your SSO proxy, "+
		"or pass --ui-insecure if a TLS-terminating proxy is in front (--ui=false turns the page off and this warning with it)", o.HTTPAddr)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// browseAddr is a listener address as a browser on this host reaches it.
func browseAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

func dashHandler(d *Dashboard) http.Handler {
	if d == nil {
		return nil
	}
	return d
}

func defaultStoreDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/fleetwave/nats"
	}
	if dir, err := os.UserHomeDir(); err == nil {
		return filepath.Join(dir, ".local", "state", "fleetwave", "nats")
	}
	return "fleetwave-nats"
}

// defaultID is the host name, made safe for a KV key.
func defaultID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "controller"
	}
	h, _, _ = strings.Cut(h, ".")
	id := regexp.MustCompile(`[^A-Za-z0-9_-]`).ReplaceAllString(h, "-")
	if len(id) > 64 {
		id = id[:64]
	}
	return id
}
