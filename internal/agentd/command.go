package agentd

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/internal/version"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// NewCommand is agentd's root command.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "agentd",
		Short: "fleetwave agent: keeps this host on the version its rollout group should run",
		Long: `agentd runs on every host. It owns the host's install tree and update.yaml under --root,
reports the host's status to the controllers as heartbeats over NATS JetStream, follows
its group's plan, and installs (and, when unhealthy, rolls back) the app's releases.

A host is set up once with 'agentd enable', then 'agentd run' keeps it current
(or 'agentd update' from cron or a systemd timer, without a daemon).

A host may run several of the fleet's apps: the default app lives at --root,
every other app NAME under <root>/apps/NAME ('agentd enable --app NAME');
every command takes --app NAME, and 'agentd run' runs all of them in one
process, installing one app at a time.
` + cliutil.ExitCodesHelp,
		Version: version.Version,
	}
	root.AddCommand(newRunCmd(), newEnableCmd(), newDisableCmd(), newUpdateCmd(), newStatusCmd(), newLinkCmd(), newUnlinkCmd())
	return root
}

// flags are what every agentd command that touches the bus or the app shares.
type flags struct {
	o        Options
	logFlags cliutil.LogFlags
	// holder, for a command that changes the root ("agentd run"), makes
	// load take the root lock as that holder; lock is it, held until
	// unlock.
	holder string
	lock   *install.Lock
	// appLocks are the locks of app trees taken beside the root's.
	appLocks []*install.Lock
	// lockLater: load does not take the lock; the command calls
	// lockAndLoad once its own checks passed (enable reads the plan first,
	// so that an unreachable bus leaves the root as it was, lock included).
	lockLater bool
	// metricsAddr is 'agentd run --metrics-addr'.
	metricsAddr string
}

func (f *flags) register(cmd *cobra.Command, withHeartbeat bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.o.Root, "root", DefaultRoot, "state directory (agent_id, update.yaml, versions/; a relative path is made absolute)")
	fl.StringVar(&f.o.NATSURL, "nats", cliutil.Env("", "NATS_URL"), "NATS server URL(s); saved default is update.yaml spec.nats (env NATS_URL)")
	fl.StringVar(&f.o.Creds, "creds", cliutil.Env("", "NATS_CREDS"), "NATS user credentials file (env NATS_CREDS)")
	f.o.TLS.Register(fl)
	fl.StringVar(&f.o.Group, "group", "", "rollout group of this host (saved in update.yaml)")
	fl.StringVar(&f.o.Site, "site", "", "site this host runs at, for counts and halt reasons by site (saved in update.yaml; --site= clears); default: the JetStream domain of the NATS server it connects to")
	fl.StringArrayVar(&f.o.Labels, "label", nil, "a label of this host, key=value (repeat; saved in update.yaml, replacing the saved ones; --label= clears them); os, arch and kernel are agentd's own; a group's selector over labels moves the host into it")
	fl.StringVar(&f.o.LabelsFile, "labels-file", "", "file of key=value lines, re-read every heartbeat interval: labels that change without a restart (saved; --labels-file= clears; --label wins on a key)")
	fl.StringVar(&f.o.Hostname, "hostname", "", "host name heartbeats report (saved in update.yaml; --hostname= clears it; default: the system's)")
	fl.StringVar(&f.o.App.URLTemplate, "url-template", "", "release URL, e.g. https://dl.example/app/{{.Version}}/app-{{.OS}}-{{.Arch}}.tar.gz (saved in update.yaml)")
	fl.StringVar(&f.o.App.ReleaseRepo, "release-repo", "", "TUF release repository URL (its metadata/ and targets/ below it): install only what its verified metadata names for this app, version, OS and arch (saved; excludes --url-template and --public-key; needs --release-root once)")
	fl.StringVar(&f.o.App.ReleaseRootFile, "release-root", "", "the release repository's root.json, given once out of band: checked and kept as the trusted root under the app's tree (<tree>/tuf/); root rotations are followed from it")
	fl.StringArrayVar(&f.o.FindURLs, "find-url", nil, "controller find endpoint, e.g. https://ctl-1:8080/v1/find, for when the bus is unreachable (repeat; saved in update.yaml)")
	// The app settings: enable and run save those given in update.yaml
	// (spec.app); every command uses the saved ones it is not given.
	fl.StringVar(&f.o.App.BinDir, "bin-dir", DefaultBinDir, "where links to the active version's binaries go (a relative path is made absolute; saved)")
	fl.StringVar(&f.o.Name, "app", "", "the app this command acts on: its tree is <root>/apps/NAME ([a-z][a-z0-9-]{0,31}); absent: the host's default app, at <root>")
	fl.StringVar(&f.o.App.Process, "process", "", "run bin/NAME of the active version as a child of agentd (hosts and containers without systemd; saved; was --app before apps)")
	fl.StringArrayVar(&f.o.App.ProcessArgs, "app-arg", nil, "argument for --process (repeat for several; saved)")
	fl.StringVar(&f.o.App.SystemdUnit, "systemd-unit", "", "restart this systemd unit to run a new version (saved)")
	fl.StringVar(&f.o.App.Systemctl, "systemctl", "", "absolute path of systemctl, never in the bin dir (saved; default: the first in "+install.SystemPath+"; never looked up in PATH)")
	fl.StringVar(&f.o.App.AppName, "app-name", "", "the app's name, which release signatures name ([a-z][a-z0-9-]{0,31}; saved; default: the release file's name without .tar.gz, e.g. app.tar.gz: app)")
	fl.StringVar(&f.o.App.HealthURL, "health-url", "", "a new version is healthy when this answers 2xx (saved; --health-url= clears)")
	fl.StringVar(&f.o.App.HealthShell, "health-command", "", "a new version is healthy when this shell command exits 0 (saved; --health-command= clears)")
	fl.StringVar(&f.o.App.DBPath, "db", "", "the app's SQLite database, backed up before every update and restored on rollback (saved)")
	fl.StringVar(&f.o.App.PublicKeyFile, "public-key", "", "file with the Ed25519 public key (hex or base64) that must have signed every release: app, version, file, size and sha256 (scripts/release.sh --key; saved)")
	fl.DurationVar(&f.o.App.DownloadStallTimeout, "download-stall-timeout", install.DefaultStallTimeout,
		fmt.Sprintf("give up a release download that gets no response, or under %d KiB, in this long; a later attempt resumes it (negative: never)", install.DefaultMinProgress>>10))
	fl.DurationVar(&f.o.App.DownloadDeadline, "download-deadline", install.DefaultDeadline,
		"give up a release download not finished in this long; a later attempt resumes it (negative: never)")
	f.o.App.KeepFree = install.DefaultSpaceMargin
	fl.Var(&f.o.App.KeepFree, "keep-free", "leave at least this much free on the root's file system (e.g. 512MiB, 2GiB) on top of what a release needs; an install that would leave less waits, blocked on \"disk full\", and is retried")
	fl.DurationVar(&f.o.App.ProgressInterval, "progress-interval", install.DefaultProgressEvery,
		"how often a release download's progress is logged (when stderr is not a terminal) and recorded for 'agentd status'")
	registerScriptFlags(fl, &f.o.App)
	if withHeartbeat {
		fl.DurationVar(&f.o.Interval, "heartbeat-interval", DefaultInterval, "time between heartbeats; must match the controller's --heartbeat-interval")
		fl.DurationVar(&f.o.Jitter, "heartbeat-jitter", DefaultJitter, "random spread (±) around the heartbeat interval (default: a tenth of it, at most 3s)")
	}
	f.logFlags.Register(cmd)
}

// agent builds the Agent the flags describe, saving the app settings
// given, as 'agentd run' does.
func (f *flags) agent(cmd *cobra.Command) (*Agent, error) {
	a, err := f.load(cmd, accessInstall, true)
	if err != nil {
		return nil, err
	}
	if err := a.save(); err != nil {
		return nil, err
	}
	return a, nil
}

// load builds the Agent the flags describe, checking everything and
// writing nothing (see load).
func (f *flags) load(cmd *cobra.Command, acc access, saveApp bool) (*Agent, error) {
	log, err := f.logFlags.Logger(cmd.ErrOrStderr())
	if err != nil {
		return nil, err
	}
	f.o.Log = log
	f.o.given = cmd.Flags().Changed
	if err := f.legacyApp(cmd); err != nil {
		return nil, err
	}
	if err := f.checkAppExists(); err != nil {
		return nil, err
	}
	if !f.o.given("bin-dir") {
		f.o.App.BinDir = ""
	}
	if f.o.App.ProgressInterval <= 0 {
		return nil, cliutil.Usagef("--progress-interval must be positive")
	}
	if isTerminal(os.Stderr) {
		f.o.App.Progress = os.Stderr
	}
	a, err := load(f.o, acc, saveApp)
	if err != nil || f.holder == "" || f.lockLater {
		return a, err
	}
	return f.lockAndLoad(acc, saveApp)
}

// lockAndLoad takes the root lock and builds the Agent again under it.
// Everything is checked first (load), so that a command refused for its
// flags creates nothing, not even the root or its lock; then, under the
// lock, read again: another process may have changed the root in between.
func (f *flags) lockAndLoad(acc access, saveApp bool) (*Agent, error) {
	if err := f.lockRoot(); err != nil {
		return nil, err
	}
	f.o.RootLocked = true
	a, err := load(f.o, acc, saveApp)
	if err != nil {
		f.unlock()
	}
	return a, err
}

// lockRoot takes the root lock (install.AcquireLock) for the command's
// life: one process changes a root at a time. The daemon keeps update.yaml
// in memory and writes it whole, so a one-shot command changing the root
// under it would be overwritten, or would install behind its back: while
// 'agentd run' holds the root, the others fail, naming it.
func (f *flags) lockRoot() error {
	root, err := filepath.Abs(f.o.Root)
	if err != nil {
		return fmt.Errorf("--root: %w", err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("--root: %w", err)
	}
	l, err := install.AcquireLock(install.Tree{Root: root}.LockPath(), f.holder)
	var le *install.LockedError
	if errors.As(err, &le) {
		hint := "; wait for it to end, or stop it"
		if strings.HasPrefix(le.Holder, "agentd run ") {
			hint = "; one agentd run per root"
			if f.holder != "agentd run" {
				hint = "; stop it first (while it runs, the daemon owns the root and installs what the plan says by itself)"
			}
		}
		return fmt.Errorf("root %s is in use by %s%s", root, le.Who(), hint)
	}
	if err != nil {
		return err
	}
	f.lock = l
	if f.o.Name != "" {
		// The app's own lock too, as its tree had it before apps.
		if err := f.lockApp(root, f.o.Name); err != nil {
			f.unlock()
			return err
		}
	}
	return nil
}

// lockApp takes the lock of app name's tree (<root>/apps/NAME/lock) for the
// command's life, beside the root lock.
func (f *flags) lockApp(root, name string) error {
	dir := appDir(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("app %s: %w", name, err)
	}
	l, err := install.AcquireLock(install.Tree{Root: dir}.LockPath(), f.holder)
	var le *install.LockedError
	if errors.As(err, &le) {
		return fmt.Errorf("app %s (%s) is in use by %s", name, dir, le.Who())
	}
	if err != nil {
		return err
	}
	f.appLocks = append(f.appLocks, l)
	return nil
}

// unlock releases the root lock and the apps' locks, if taken.
func (f *flags) unlock() {
	for _, l := range f.appLocks {
		_ = l.Release()
	}
	f.appLocks = nil
	_ = f.lock.Release()
	f.lock = nil
}

func readPublicKey(path string) (ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--public-key: %w", err)
	}
	s := strings.TrimSpace(string(data))
	for _, decode := range []func(string) ([]byte, error){hex.DecodeString, base64.StdEncoding.DecodeString} {
		if b, err := decode(s); err == nil && len(b) == ed25519.PublicKeySize {
			return ed25519.PublicKey(b), nil
		}
	}
	return nil, fmt.Errorf("--public-key %s: want a %d-byte Ed25519 public key in hex or base64", path, ed25519.PublicKeySize)
}

func newRunCmd() *cobra.Command {
	f := &flags{holder: "agentd run"}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent daemon",
		Long: `Run the agent until SIGINT or SIGTERM.

On first start it draws the host's agent id (kept in <root>/agent_id) and
writes <root>/update.yaml; --group, --site, --url-template (or --release-repo), --find-url and
the app settings (--app, --systemd-unit, --bin-dir, health, --db,
--public-key) are saved there, and used when not given. --nats is not (pass
it or NATS_URL each time, or save it as spec.nats with 'agentd enable'). It
heartbeats every --heartbeat-interval (± jitter) and at once after any
change, reconnects forever when the bus goes away, follows its group's plan,
and installs what the plan tells it to when update.yaml says enabled (see
'agentd enable').

Heartbeats name the host's site: --site, or else the JetStream domain of the
NATS server agentd is connected to (an edge site's leaf node has its own,
deploy/nats/leaf-edge.conf), or none. fleetctl status counts agents by site,
and a halt names the sites its failures came from.

It runs every app of the host in this one process, with one NATS
connection: the default app (at the root) and each <root>/apps/NAME with an
update.yaml ('agentd enable --app NAME' sets one up). The settings given
here are saved in the app --app names (default: the default app); the
others run on their saved settings. Installs of two apps run one at a time.

It holds <root>/lock for its whole life: another agentd run, enable,
disable, update, link or unlink on the same --root exits 1 naming its pid
('agentd status' works beside it).`,
		Example: `  agentd run --nats nats://controller.example:4222 --group staging
  agentd run --nats nats://edge-berlin.example:4222 --group prod --site edge-berlin
  agentd run --root /tmp/agent1 --process app --bin-dir /tmp/agent1/bin --health-url http://127.0.0.1:8080/healthz`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("heartbeat-jitter") && f.o.Interval > 0 {
				// The default spread is a tenth of the default interval:
				// keep it so for a shorter interval.
				f.o.Jitter = min(DefaultJitter, f.o.Interval/10)
			}
			if f.o.Interval <= 0 || f.o.Jitter < 0 || f.o.Jitter >= f.o.Interval {
				return cliutil.Usagef("--heartbeat-interval %v must be positive and --heartbeat-jitter %v at least 0 and less than it", f.o.Interval, f.o.Jitter)
			}
			if f.o.MembershipSettle <= 0 {
				return cliutil.Usagef("--membership-settle %v: must be positive", f.o.MembershipSettle)
			}
			if f.o.FallbackAfter <= 0 {
				return cliutil.Usagef("--fallback-after %v: must be positive (how long the bus must be lost before the find endpoint is asked)", f.o.FallbackAfter)
			}
			if f.o.FindInterval <= 0 {
				return cliutil.Usagef("--find-interval %v: must be positive", f.o.FindInterval)
			}
			if f.o.RetryBase <= 0 || f.o.RetryMax < f.o.RetryBase {
				return cliutil.Usagef("--retry-base %v, --retry-max %v: the base must be positive and the max at least the base", f.o.RetryBase, f.o.RetryMax)
			}
			if f.o.MetricsTextfile != "" {
				if err := checkTextfile(f.o.MetricsTextfile); err != nil {
					return err
				}
			}
			if f.metricsAddr != "" {
				_, port, err := net.SplitHostPort(f.metricsAddr)
				if n, perr := strconv.Atoi(port); err == nil && (perr != nil || n < 0 || n > 65535) {
					err = errors.New("port must be 0-65535")
				}
				if err != nil {
					return cliutil.Usagef("--metrics-addr %q: want host:port, e.g. 127.0.0.1:9469 or :9469: %v", f.metricsAddr, err)
				}
			}
			// Bound before the root is touched: a port in use fails the
			// start with nothing written.
			var metricsLn net.Listener
			if f.metricsAddr != "" {
				ln, err := ListenMetrics(f.metricsAddr)
				if err != nil {
					return err
				}
				metricsLn = ln
				defer ln.Close()
			}
			agents, err := f.hostAgents(cmd)
			if err != nil {
				return err
			}
			defer f.unlock()
			agents[0].o.MetricsListener = metricsLn
			err = runHost(cmd.Context(), agents)
			if errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
				f.o.Log.Info("agent stopping")
				return nil
			}
			return err
		},
	}
	cmd.Flags().DurationVar(&f.o.MembershipSettle, "membership-settle", DefaultMembershipSettle, "move to the group this host's labels select only once they have selected it this long (and never during an install)")
	cmd.Flags().BoolVar(&f.o.SelfUpdate, "self-update", true, "re-exec into a newer agentd shipped in the active version's bin/")
	cmd.Flags().DurationVar(&f.o.FallbackAfter, "fallback-after", DefaultFallbackAfter, "ask the find endpoint once the bus has been lost this long (lost: the connection is down, or 2 heartbeats in a row got no ack)")
	cmd.Flags().DurationVar(&f.o.FindInterval, "find-interval", DefaultFindInterval, "how often (± 20%) to ask the find endpoint during an outage")
	cmd.Flags().DurationVar(&f.o.RetryBase, "retry-base", DefaultRetryBase, "after an install blocked by an infrastructure failure (release site down, disk full), retry this long later, doubling each time (± 20%)")
	cmd.Flags().DurationVar(&f.o.RetryMax, "retry-max", DefaultRetryMax, "the longest wait between retries of a blocked install")
	cmd.Flags().StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at GET /metrics on this host:port (e.g. 127.0.0.1:9469); empty: off")
	cmd.Flags().StringVar(&f.o.MetricsTextfile, "metrics-textfile", "", "write Prometheus metrics to this file (a *.prom file in node_exporter's --collector.textfile.directory) every 15s and after each install; empty: off")
	f.register(cmd, true)
	return cmd
}

func newEnableCmd() *cobra.Command {
	f := &flags{holder: "agentd enable", lockLater: true}
	cmd := &cobra.Command{
		Use:   "enable",
		Short: "Set this host up for automatic updates and install the current version now",
		Long: `Write update.yaml (bus URL, group, release URL template, and how the app runs and
is judged: --process or --systemd-unit, --systemctl, --bin-dir, --health-url,
--health-command, --db, --public-key, --app-name) with updates enabled, then install the version the plan
gives this host's group at once: a new host gets the version its group runs,
whether or not a rollout is in progress. Later commands (run, update, status,
disable, link, unlink) read these settings; a flag given to them overrides.

Releases come from --url-template (with .sha256 and, with --public-key,
.sig files), or from a TUF release repository: --release-repo URL with
--release-root FILE, the repository's root.json, given once out of band.
The root is checked and kept under the app's tree in tuf/; agentd refreshes
the repository's metadata before every install, installs only the target
its verified metadata names for the app, the version and this host's OS and
architecture, and follows root rotations by itself (no re-enrolment). A
repository that is down, expired or does not verify is an infrastructure
failure: the host is left as it was and the install retried.

Every flag is checked, and (when it installs) the plan read from the bus,
before anything is written: a failed enable leaves update.yaml and agent_id
as they were.`,
		Example: `  agentd enable --nats nats://fleet.example:4222 --group canary \
    --url-template 'https://dl.example/app/{{.Version}}/app.tar.gz' --systemd-unit app.service
  agentd enable --nats nats://fleet.example:4222 --group canary --systemd-unit app.service \
    --release-repo https://releases.example/fleet --release-root ./root.json
  agentd enable --app db --group canary --systemd-unit db.service \
    --release-repo https://releases.example/fleet --release-root ./root.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := f.load(cmd, accessInstall, true)
			if err != nil {
				return err
			}
			// When it installs at once, the plan is read before anything
			// is written: a wrong bus URL or creds fails with the host as
			// it was. Otherwise the bus is not needed (install.sh stages a
			// host that cannot reach it yet; 'agentd run' reports a wrong
			// URL in its log).
			installs := a.installer != nil && !a.supervised()
			var p Plan
			var noPlan bool
			if installs {
				if a.o.NATSURL == "" {
					return cliutil.UsageError{Err: errNoNATS}
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
				p, err = a.readPlan(ctx)
				cancel()
				if noPlan = errors.Is(err, errNoPlan); err != nil && !noPlan {
					return fmt.Errorf("%w (nothing was changed)", err)
				}
			}
			if a, err = f.lockAndLoad(accessInstall, true); err != nil {
				return err
			}
			defer f.unlock()
			a.mu.Lock()
			a.update.Spec.Enabled = true
			if f.o.NATSURL != "" {
				a.update.Spec.NATS = f.o.NATSURL
			}
			a.mu.Unlock()
			if err := a.save(); err != nil {
				return err
			}
			a.warnGroup(cmd.Context(), cmd.ErrOrStderr(), p, installs && !noPlan)
			a.warnRepo(cmd.Context(), cmd.ErrOrStderr())
			out := cmd.OutOrStdout()
			switch {
			case a.installer == nil:
				fmt.Fprintln(out, "enabled; no --url-template or --release-repo yet, so nothing is installed")
				return nil
			case a.supervised():
				fmt.Fprintln(out, "enabled; 'agentd run' (which supervises the app) installs and starts it")
				return nil
			case noPlan:
				fmt.Fprintln(out, "enabled; no plan yet (fleetctl plan set), so nothing is installed")
				return nil
			}
			if err := a.repair(cmd.Context()); err != nil {
				return err
			}
			return a.act(cmd.Context(), out, p, false)
		},
	}
	f.register(cmd, false)
	return cmd
}

func newDisableCmd() *cobra.Command {
	f := &flags{holder: "agentd disable"}
	var remove, purge bool
	cmd := &cobra.Command{
		Use:   "disable",
		Short: "Stop automatic updates on this host (the agent keeps reporting), or stop running an app (--remove)",
		Long: `Without --remove: turn automatic updates off in the app's update.yaml; agentd
keeps heartbeating its status.

With --app NAME --remove: this host no longer runs app NAME. agentd sends
the app's last heartbeat, marked left, so that the controllers drop the
host from that app's inventory at once, then removes
<root>/apps/NAME/update.yaml: the next 'agentd run' does not run the app.
The installed versions stay under <root>/apps/NAME unless --purge is given,
and the app itself (its systemd unit, its links) is left as it is. When the
bus cannot be reached (10 s), the config is removed all the same and the
controllers drop the host once its last heartbeat expires (the fleet's
agent expiry, 1 h by default). Stop 'agentd run' first: it holds the root.`,
		Example: `  agentd disable --root /var/lib/fleetwave
  agentd disable --app db --remove
  agentd disable --app db --remove --purge`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if purge && !remove {
				return cliutil.Usagef("--purge goes with --remove")
			}
			if remove && f.o.Name == "" {
				return cliutil.Usagef("--remove needs --app NAME: the default app at the root also holds the host's settings; to stop updating it, 'agentd disable'")
			}
			a, err := f.load(cmd, accessWrite, false)
			if err != nil {
				return err
			}
			defer f.unlock()
			if remove {
				return a.removeApp(cmd.Context(), cmd.OutOrStdout(), purge)
			}
			a.mu.Lock()
			a.update.Spec.Enabled = false
			a.mu.Unlock()
			if err := a.save(); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "automatic updates disabled")
			return nil
		},
	}
	cmd.Flags().BoolVar(&remove, "remove", false, "with --app NAME: this host stops running the app: send its last heartbeat (left) and remove <root>/apps/NAME/update.yaml")
	cmd.Flags().BoolVar(&purge, "purge", false, "with --remove: remove <root>/apps/NAME entirely, installed versions included")
	f.register(cmd, false)
	return cmd
}

func newUpdateCmd() *cobra.Command {
	f := &flags{holder: "agentd update"}
	var force bool
	cmd := &cobra.Command{
		Use:   "update",
		Short: "Update once, if the plan says so (for cron, systemd timers, and by hand)",
		Long: `Read the plan, decide as the daemon would, and install if this host should
update now. Exits 0 when there was nothing to do or the update succeeded, 1 when
it failed (and was rolled back). --force also retries a version this host rolled
back from.`,
		Example: `  agentd update --root /var/lib/fleetwave
  agentd update --force`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := f.load(cmd, accessInstall, false)
			if err != nil {
				return err
			}
			defer f.unlock()
			if a.supervised() {
				return cliutil.Usagef("update with --process (given or saved by enable): the app is a child of agentd and would stop with this command; use 'agentd run', or --systemd-unit")
			}
			if err := a.save(); err != nil {
				return err
			}
			return a.updateOnce(cmd.Context(), cmd.OutOrStdout(), force)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "retry even a version this host rolled back from, and ignore 'enabled: false'")
	f.register(cmd, false)
	return cmd
}

// StatusReport is the JSON of "agentd status".
type StatusReport struct {
	AgentID string `json:"agent_id"`
	// Hostname is the name heartbeats carry (update.yaml's, else the
	// system's).
	Hostname string `json:"hostname"`
	Group    string `json:"group"`
	// Labels are the host's labels as heartbeated (os, arch, kernel,
	// its labels file's and --label's), LabelsError why its labels file
	// cannot be used (the last good labels stay).
	Labels      map[string]string `json:"labels,omitempty"`
	LabelsError string            `json:"labels_error,omitempty"`
	// Installer is how the app is installed: "tarball", "script", or ""
	// (no url_template: the agent only reports).
	Installer string `json:"installer,omitempty"`
	// GroupError says why the group gets nothing from the rollout: the
	// controllers' find endpoint says the config does not name it, or the
	// plan on the bus has no status for it (agentd's group.go).
	GroupError string `json:"group_error,omitempty"`
	Enabled    bool   `json:"enabled"`
	Installed  string `json:"installed"`
	// Desired is what the plan gives this host now ("" when the bus could
	// not be read; DesiredError says why).
	Desired      string    `json:"desired"`
	ShouldUpdate bool      `json:"should_update"`
	DesiredError string    `json:"desired_error,omitempty"`
	Previous     string    `json:"previous"`
	LastUpdate   time.Time `json:"last_update,omitzero"`
	Jitter       int       `json:"jitter_seconds"`
	Rollback     bool      `json:"rollback"`
	RollbackFrom string    `json:"rollback_from,omitempty"`
	Error        string    `json:"error,omitempty"`
	// ErrorClass is Error's failure class (release, artifact,
	// infrastructure) and ErrorCause a short reason ("disk full"): what
	// agentd does about it is in docs/agent.md "Failure classes".
	ErrorClass string `json:"error_class,omitempty"`
	ErrorCause string `json:"error_cause,omitempty"`
	// ErrorOutput is the app's last lines at the failure that rolled the
	// host back (what the heartbeat's error_output carries).
	ErrorOutput string `json:"error_output,omitempty"`
	// Site is the site heartbeats name, and SiteFrom where it comes from:
	// "update.yaml" (agentd --site) or "jetstream domain" (of the NATS
	// server the plan was read from); both absent when there is none.
	Site     string `json:"site,omitempty"`
	SiteFrom string `json:"site_from,omitempty"`
	// InstallStep and InstallTarget come from the install journal: an
	// install under way, or one a crash interrupted that the next run,
	// update, enable or link finishes.
	InstallStep   string `json:"install_step,omitempty"`
	InstallTarget string `json:"install_target,omitempty"`
	// Download is how far the release download of an install at step
	// "fetch" has got, as last recorded (every --progress-interval).
	Download     *install.DownloadProgress `json:"download,omitempty"`
	JournalError string                    `json:"journal_error,omitempty"`
	// ReleaseRepo is the trust state of the app's release repository
	// (repository mode, repo.go); absent without one.
	ReleaseRepo *RepoStatus `json:"release_repo,omitempty"`
	// Apps are every app of the host (apps.go), the default app first:
	// the top-level fields are the one --app selects (default: the
	// default app), as before apps.
	Apps []AppStatus `json:"apps,omitempty"`
}

// AppStatus is one app's entry of StatusReport.Apps: its name ("" and
// default true for the host's default app, at <root>) and its report.
type AppStatus struct {
	App     string `json:"app"`
	Default bool   `json:"default,omitempty"`
	StatusReport
}

func newStatusCmd() *cobra.Command {
	f := &flags{}
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show this host's installed and desired version as JSON",
		Long: `Print what update.yaml, agent_id and the install journal under --root say, and
what the plan on the bus gives this host, as JSON, with the site its
heartbeats name (site_from: "update.yaml" for --site, "jetstream domain"
for the domain of the NATS server it reached). It creates and changes
nothing: on a root where agentd has not run yet the id is empty and updates
are disabled; a --root that does not exist is an error.

On a host with several apps, the top-level fields are the app --app
selects (default: the default app, at the root), and "apps" lists every
app with the same fields; -o table prints one row per app.

An app whose releases come from a release repository (--release-repo) has
"release_repo": its URL, the trusted root's version and expiry (after any
rotation agentd followed), the targets version and earliest expiry the last
successful refresh verified, and the last refresh's error, if it failed
(-o table prints a line per such app below the table).`,
		Example: `  agentd status | jq .installed
  agentd status --root /tmp/agent1
  agentd status -o table
  agentd status --app db | jq '.apps[] | {app, installed, desired}'
  agentd status | jq '.apps[] | {app, release_repo}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "json" && output != "table" {
				return cliutil.Usagef("-o %q: want json or table", output)
			}
			a, err := f.load(cmd, accessRead, false)
			if err != nil {
				return err
			}
			rep, err := f.hostStatus(cmd.Context(), a)
			if err != nil {
				return err
			}
			if output == "table" {
				return writeStatusTable(cmd.OutOrStdout(), rep)
			}
			// The plan's reasons and the app's error texts are free text:
			// runes a terminal acts on go out as \u escapes.
			enc := json.NewEncoder(escape.NewJSONWriter(cmd.OutOrStdout()))
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "json", "json (the selected app's fields at the top, every app in apps) or table (one row per app)")
	f.register(cmd, false)
	return cmd
}

// warnGroup warns, for enable, when the host's group gets nothing from the
// rollout (group.go). p is the plan when read (read); otherwise it is
// read now if the bus is known, briefly: enable does not need the bus,
// and a host staged before it can reach the bus is not held up.
func (a *Agent) warnGroup(ctx context.Context, w io.Writer, p Plan, read bool) {
	var plan *Plan
	if read {
		plan = &p
	} else if a.o.NATSURL != "" {
		rctx, cancel := context.WithTimeout(ctx, groupCheckTimeout)
		if p, err := a.readPlan(rctx); err == nil {
			plan = &p
		}
		cancel()
	}
	if problem, _ := a.groupProblem(ctx, plan); problem != "" {
		fmt.Fprintf(w, "warning: %s\n", escape.Text(problem))
	}
}

// warnRepo warns, for enable in repository mode, when the repository
// cannot be read yet or has no release of the app by the name this host
// asks for (a fleet's default app is asked for as "default" unless
// --app-name names it): such a host would only ever hold on "release
// repository: no such release". Brief, like warnGroup: a host staged
// before it can reach the repository is not held up.
func (a *Agent) warnRepo(ctx context.Context, w io.Writer) {
	if a.repo == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, groupCheckTimeout)
	defer cancel()
	t, err := a.repo.Refresh(rctx)
	a.noteRefresh(t, err)
	if err != nil {
		fmt.Fprintf(w, "warning: the release repository cannot be read yet, so nothing installs until it can: %s\n", escape.Text(err.Error()))
		return
	}
	rs, _ := t.Releases()
	var apps []string
	for _, r := range rs {
		if r.App == a.appName() {
			return
		}
		if !slices.Contains(apps, r.App) {
			apps = append(apps, r.App)
		}
	}
	if len(apps) == 0 {
		fmt.Fprintf(w, "warning: the release repository has no release yet (of %q or any app); this host installs once one is published (fleetctl repo add)\n", a.appName())
		return
	}
	fmt.Fprintf(w, "warning: the release repository has no release of %q, the name this host asks for; it has releases of %s: if the app is named so there, pass --app-name NAME\n",
		a.appName(), escape.Text(strings.Join(apps, ", ")))
}

// supervised reports whether agentd itself runs the app as a child.
func (a *Agent) supervised() bool {
	_, ok := a.runner.(*install.ProcessRunner)
	return ok
}

func (a *Agent) enabled() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.update.Spec.Enabled
}

// readPlan reads the plan once from the bus.
func (a *Agent) readPlan(ctx context.Context) (Plan, error) {
	if a.o.NATSURL == "" {
		return Plan{}, errNoNATS
	}
	nc, err := natsutil.Connect(natsutil.ConnectOptions{URL: a.o.NATSURL, Name: "agentd " + string(a.id), Creds: a.o.Creds,
		TLS: a.o.TLS, InboxPrefix: kv.AgentInboxPrefix(string(a.id)),
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return Plan{}, err
	}
	defer nc.Close()
	a.mu.Lock()
	a.noteDomain(nc.ConnectedDomain())
	a.mu.Unlock()
	f := &PlanFollower{NC: nc, Group: a.Group(), NS: a.ns(), Log: a.o.Log}
	if err := f.read(ctx); err != nil {
		return Plan{}, fmt.Errorf("read the plan: %w", err)
	}
	p := f.Plan()
	if p.SpecRev == 0 {
		return p, errNoPlan
	}
	return p, nil
}

// errNoPlan: the bus answered, but no plan was ever set.
var errNoPlan = errors.New("no plan yet (fleetctl plan set)")

// updateOnce is one decision and, when due, one install (rollout.Act: a new
// host gets what its group runs even before the rollout reaches it).
func (a *Agent) updateOnce(ctx context.Context, out io.Writer, force bool) error {
	if a.installer == nil {
		return errors.New("no url_template or release_repo configured: pass --url-template or --release-repo (and --process or --systemd-unit), or --installer script")
	}
	// Finish what a crash interrupted before deciding anything: the
	// decision reads the active version, which the repair may change.
	if err := a.repair(ctx); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	p, err := a.readPlan(rctx)
	cancel()
	if err != nil {
		return err
	}
	return a.act(ctx, out, p, force)
}

// act decides on p and, when due, installs once.
func (a *Agent) act(ctx context.Context, out io.Writer, p Plan, force bool) error {
	st := a.Status()
	v, update := p.DecideAt(a.id, a.o.Clock.Now())
	switch {
	case v != "" && v == st.ActiveVersion:
		if a.settle(v) {
			fmt.Fprintf(out, "up to date: %s (cleared the error of an earlier install that is no longer wanted: %s)\n", v, escape.Text(st.Error))
			return nil
		}
		fmt.Fprintf(out, "up to date: %s\n", v)
		return nil
	case !rollout.Act(st.ActiveVersion, v, update):
		fmt.Fprintf(out, "nothing to do: installed %s, the plan says %s without updating now\n", orNone(st.ActiveVersion), orNone(v))
		return nil
	case !a.enabled() && !force:
		fmt.Fprintf(out, "update to %s due, but updates are disabled on this host: 'agentd enable' turns them on, or 'agentd update --force' installs it once\n", v)
		return nil
	}
	if force && st.Rollback && st.RollbackFrom == v {
		st.Rollback, st.RollbackFrom = false, ""
	} else if st.Rollback && st.RollbackFrom == v {
		// An operator's retry request (opretry.go) is honoured here too,
		// once; without one the version is not retried.
		d := a.planDecision(p)
		if retryVerdictOf(st, a.id, d, true) != retryHonour {
			fmt.Fprintf(out, "not retrying %s: this host rolled back from it; to try it once more, an operator runs 'fleetctl retry --group %s --agent %s', or, on this host, 'agentd update --force'\n", v, a.Group(), a.id)
			return nil
		}
		if !a.beginRetry(d, v) {
			return fmt.Errorf("could not record the operator's retry request (token %s) in %s", d.retry.Token, install.UpdateFileName)
		}
		fmt.Fprintf(out, "retrying %s once, as an operator asked (fleetctl retry, token %s)\n", v, d.retry.Token)
		st = a.Status()
	}
	fmt.Fprintf(out, "installing %s (from %s)\n", v, orNone(st.ActiveVersion))
	timeout, minHealthy := p.HealthTimes()
	next, err := a.installer.Install(ctx, st, v, timeout, minHealthy)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "installed %s\n", next.ActiveVersion)
	return nil
}

func orNone(v string) string {
	if v == "" {
		return "nothing"
	}
	return v
}

func newLinkCmd() *cobra.Command {
	f := &flags{holder: "agentd link"}
	var v string
	cmd := &cobra.Command{
		Use:   "link",
		Short: "Point the bin dir's links at an installed version (default: the active one)",
		Long: `Re-create the links in --bin-dir to the binaries of an installed version:
after an operator removed them, or to hand a host back to agentd after
'agentd unlink'. Only complete versions (with their sha256 marker) can be
linked. The app is not restarted.`,
		Example: `  agentd link
  agentd link --version 1.4.2 --bin-dir /usr/local/bin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := f.load(cmd, accessInstall, false)
			if err != nil {
				return err
			}
			defer f.unlock()
			if a.o.App.scripted() {
				return cliutil.Usagef("the script installer keeps no links: the host's package manager installs the app ('agentd unlink' removes links an earlier tarball install left)")
			}
			if err := a.save(); err != nil {
				return err
			}
			if err := a.repair(cmd.Context()); err != nil {
				return err
			}
			if v == "" {
				v = a.Status().ActiveVersion
			}
			if v == "" {
				return cliutil.Usagef("nothing is installed: pass --version")
			}
			tree := a.tree()
			if _, err := os.Stat(tree.MarkerPath(v)); err != nil {
				return fmt.Errorf("version %s is not completely installed under %s", v, tree.VersionsDir())
			}
			if _, err := tree.Link(v); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "linked %s into %s\n", v, tree.BinDir)
			return nil
		},
	}
	cmd.Flags().StringVar(&v, "version", "", "installed version to link")
	f.register(cmd, false)
	return cmd
}

func newUnlinkCmd() *cobra.Command {
	f := &flags{holder: "agentd unlink"}
	cmd := &cobra.Command{
		Use:   "unlink",
		Short: "Remove agentd's links from the bin dir (e.g. to let a system package own them)",
		Long: `Remove every link agentd created in --bin-dir (listed in <root>/links.yaml).
Links and files agentd did not create are left alone. Disable updates first
('agentd disable') or the next update links again.`,
		Example: `  agentd disable && agentd unlink --bin-dir /usr/local/bin`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := f.load(cmd, accessWrite, false)
			if err != nil {
				return err
			}
			defer f.unlock()
			if err := a.save(); err != nil {
				return err
			}
			n, err := a.tree().Unlink()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %d link(s) from %s\n", n, a.tree().BinDir)
			return nil
		},
	}
	f.register(cmd, false)
	return cmd
}

// repair finishes an install a crash interrupted. Without an installer (no
// url_template) it can only refuse to go on while one is unfinished.
func (a *Agent) repair(ctx context.Context) error {
	if a.installer != nil {
		_, err := a.installer.Repair(ctx, a.Status())
		return err
	}
	j, err := install.LoadJournal(a.tree())
	if err != nil {
		return err
	}
	if j != nil && j.Step != install.StepUndone {
		return fmt.Errorf("an install of %s was interrupted at step %q; run 'agentd update' or 'agentd run' (with the host's --url-template and runner flags) to finish it first", j.Target, j.Step)
	}
	return nil
}

// tree is the host's install tree.
func (a *Agent) tree() install.Tree {
	bin := a.o.App.BinDir
	if bin == "" {
		bin = DefaultBinDir
	}
	return install.Tree{Root: a.dir(), BinDir: bin}
}

// checkTextfile checks --metrics-textfile before anything starts: a file
// in an existing directory, named *.prom (node_exporter reads only those),
// and not a directory.
func checkTextfile(path string) error {
	if filepath.Ext(path) != ".prom" {
		return cliutil.Usagef("--metrics-textfile %q: node_exporter's textfile collector reads only files named *.prom", path)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return cliutil.Usagef("--metrics-textfile %q: directory %s does not exist (node_exporter's --collector.textfile.directory)", path, dir)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return cliutil.Usagef("--metrics-textfile %q is a directory; give a file in it, e.g. %s", path, filepath.Join(path, "fleetwave-agentd.prom"))
	}
	return nil
}
