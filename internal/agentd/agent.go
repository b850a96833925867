package agentd

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/clock"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/internal/version"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/release"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Options configure an agent.
type Options struct {
	// Root is the host's root (--root): agent_id, the lock, and the
	// default app's tree; every other app's tree is Root/apps/<Name>.
	Root string
	// Name is the app this agent runs (agentd --app, apps.go): "" is the
	// host's default app, at Root exactly as before apps existed.
	Name     string
	Group    string // overrides (and is saved into) update.yaml's spec.group
	NATSURL  string // overrides update.yaml's spec.nats
	Creds    string
	Hostname string
	// Site overrides (and is saved into) update.yaml's spec.site: where
	// the host runs. Without one the heartbeat names the JetStream domain
	// of the server the agent is connected to, if it has one (site.go).
	Site string
	// TLS are the client TLS files for the bus.
	TLS natsutil.TLS
	// Interval and Jitter of heartbeats.
	Interval time.Duration
	Jitter   time.Duration
	Clock    clock.Clock
	Log      *slog.Logger
	// FindURLs override (and are saved into) update.yaml's find_urls.
	FindURLs []string
	// FallbackAfter is how long the bus must be lost before the agent
	// asks the find endpoint; FindInterval how often it then asks.
	FallbackAfter time.Duration
	FindInterval  time.Duration
	// RetryBase and RetryMax pace the retries of an install blocked by an
	// infrastructure failure: RetryBase after the first, doubling up to
	// RetryMax, ±20% (defaults DefaultRetryBase, DefaultRetryMax).
	RetryBase time.Duration
	RetryMax  time.Duration
	// The bus is lost when the connection is down or MaxMissedAcks
	// heartbeats in a row got no ack within AckTimeout each (defaults
	// DefaultMaxMissedAcks, DefaultAckTimeout). PingInterval and
	// MaxPingsOut are the NATS client's (defaults DefaultPingInterval,
	// DefaultMaxPingsOut): a connection whose pongs stop is dropped and
	// redialled after at most (MaxPingsOut+1) × PingInterval.
	MaxMissedAcks int
	AckTimeout    time.Duration
	PingInterval  time.Duration
	MaxPingsOut   int
	// SelfUpdate lets the daemon re-exec into a newer agentd that the
	// active version ships in its bin/.
	SelfUpdate bool

	// MetricsListener, when set, serves GET /metrics (agentd run
	// --metrics-addr); Run closes it.
	MetricsListener net.Listener
	// MetricsTextfile, when set, is written with the metrics every
	// TextfileEvery (default DefaultTextfileEvery) and after every install,
	// for node_exporter's textfile collector.
	MetricsTextfile string
	TextfileEvery   time.Duration

	// RootLocked says the caller holds the root lock (install.AcquireLock
	// on <root>/lock) for as long as it uses the agent, as agentd's
	// commands do; otherwise each install takes it.
	RootLocked bool

	// App is how the managed app is installed and run. Without a URL
	// template (flag or update.yaml) the agent only reports. Settings not
	// given come from update.yaml's spec.app.
	App AppOptions

	// Labels are --label's values (k=v each; one "" clears the saved
	// labels), LabelsFile --labels-file's: both saved in update.yaml
	// (labels.go). Nil and "": the saved ones.
	Labels     []string
	LabelsFile string
	// MembershipSettle is how long the group the host's labels select
	// must stay the same before the host moves to it (selector.go;
	// default DefaultMembershipSettle).
	MembershipSettle time.Duration

	// given says which of agentd's app flags were given (nil: the App
	// fields that are set).
	given func(flag string) bool
}

// AppOptions say where releases come from and how the app runs.
type AppOptions struct {
	// URLTemplate overrides (and is saved into) update.yaml's url_template.
	URLTemplate string
	// ReleaseRepo overrides (and is saved into) update.yaml's release_repo:
	// releases come from this TUF release repository instead (repo.go).
	// It excludes URLTemplate and PublicKey.
	ReleaseRepo string
	// ReleaseRootFile is the repository's root metadata the host trusts
	// (--release-root): checked, and kept under the app's tree in tuf/.
	ReleaseRootFile string
	// PublicKey, when set, must have signed every release's statement
	// (app, version, file, size, sha256: install.Statement).
	PublicKey ed25519.PublicKey
	// AppName is the app release signatures must name (--app-name, kept in
	// update.yaml); "" means the one the release file's name implies
	// (install.AppNameFromFile).
	AppName string
	// BinDir receives the links to the active version's bin/.
	BinDir string
	// Exactly one of Process (a binary name in bin/, supervised by agentd)
	// and SystemdUnit runs the app.
	Process     string
	ProcessArgs []string
	SystemdUnit string
	// Systemctl is systemctl's absolute path (--systemctl, kept in
	// update.yaml); "" means the first in install.SystemPath. Never looked
	// up in PATH, never in the bin dir or the root.
	Systemctl string
	// HealthURL or HealthCommand judge a new version; with neither, it must
	// stay up.
	HealthURL     string
	HealthCommand []string
	// DBPath is the app's SQLite database, backed up around updates.
	DBPath string
	// HealthShell is a health command run by /bin/sh -c (agentd's
	// --health-command, kept in update.yaml) with PATH=install.SystemPath;
	// it sets HealthCommand.
	HealthShell string
	// PublicKeyFile holds PublicKey (--public-key, kept in update.yaml);
	// it sets PublicKey.
	PublicKeyFile string
	// Progress receives download progress (a terminal), or nil.
	Progress io.Writer
	// DownloadStallTimeout and DownloadDeadline are install.Fetcher's
	// StallTimeout and Deadline (0: its defaults).
	DownloadStallTimeout time.Duration
	// KeepFree is left free on the root's file system by every download
	// and extraction, on top of what the release needs (install.Fetcher's
	// SpaceMargin; 0: install.DefaultSpaceMargin). An install that would
	// leave less is blocked: "disk full", an infrastructure failure the
	// agent retries.
	KeepFree         cliutil.Bytes
	DownloadDeadline time.Duration
	// ProgressInterval is install.Fetcher's ProgressEvery (0: its default).
	ProgressInterval time.Duration
	// Installer is rollout.InstallerScript for the script installer
	// (InstallCmd, VersionCmd, ScriptTimeout: --installer script,
	// --install-cmd, --version-cmd, --script-timeout, kept in update.yaml;
	// script.go); "" or tarball for releases from URLTemplate.
	Installer     string
	InstallCmd    string
	VersionCmd    string
	ScriptTimeout time.Duration
}

// Defaults.
const (
	DefaultRoot     = "/var/lib/fleetwave"
	DefaultBinDir   = "/usr/local/bin"
	DefaultInterval = 30 * time.Second
	DefaultJitter   = 3 * time.Second
)

// errNoNATS is returned by what needs the bus when no URL is configured.
var errNoNATS = errors.New("no NATS server: pass --nats, set NATS_URL, or set spec.nats in update.yaml")

// Agent is one host's agent.
type Agent struct {
	o   Options
	id  rollout.AgentID
	pub *heartbeat.Publisher

	installer *install.Installer // nil: report only
	runner    install.Runner
	// repo reads the app's release repository (repository mode, repo.go);
	// nil without one.
	repo *release.Client
	// pendingRoot is the root --release-root gave, which save trusts
	// (nil: nothing to change).
	pendingRoot []byte
	// fallback is set while the bus is down and the find endpoint rules.
	fallback atomic.Bool
	// bus says whether the bus is lost (set by Run).
	bus *busWatch
	// skipLogged is the last rolled-back version whose skip was logged
	// (update loop only).
	skipLogged string
	// retry is what the last failed install of the target says about
	// trying it again (update loop only; retry.go).
	retry retryState

	// newID: agent_id does not exist yet (save writes id); stored:
	// update.yaml does, and loaded is its spec as read or last saved.
	newID  bool
	stored bool
	loaded install.UpdateSpec

	metrics      *agentMetrics
	textfileKick chan struct{}
	// gate is the host-wide install lock shared by the apps of one
	// agentd run (apps.go); nil: this agent installs alone.
	gate installGate

	mu     sync.Mutex
	update *install.UpdateFile
	// updatingTo is the version an install in progress moves to ("" when
	// none is): heartbeats carry it as updating_to.
	updatingTo string
	// blocked is the infrastructure failure the agent retries (retry.go),
	// which heartbeats carry while the retry runs, until its download
	// starts: an attempt that begins is not a recovery, and a group held
	// on blocked agents must not resume and hold again at every retry.
	blocked blockedNote
	// busConn is the bus connection (set by Run), and domainSite the
	// last JetStream domain of a server the agent was connected to, with
	// domainBad the last one that is not a valid site (logged once); see
	// site.go.
	busConn atomic.Pointer[nats.Conn]
	// follower follows the plan on the bus (set by Run; Plan reads it).
	follower   atomic.Pointer[PlanFollower]
	domainSite string
	domainBad  string
	// groupNote is the group's problem last logged (group.go).
	groupNote string
	// autoLabels are agentd's own labels (os, arch, kernel), fileLabels
	// the labels file's last good ones, labels the host's labels as
	// heartbeated, labelsErr the labels file's last error (labels.go).
	autoLabels rollout.Labels
	fileLabels rollout.Labels
	labels     heartbeat.LabelSet
	labelsErr  string
	// member is the membership by labels (selector.go).
	member membership
}

// New loads the agent's identity and update.yaml under o.Root, creating
// them on first use, and saves o's group, URL template, find URLs and app
// settings there.
func New(o Options) (*Agent, error) {
	a, err := load(o, accessInstall, true)
	if err != nil {
		return nil, err
	}
	if err := a.save(); err != nil {
		return nil, err
	}
	return a, nil
}

// access is what a command may do with the host.
type access int

const (
	// accessInstall: it may install, so the app's runner must be known.
	accessInstall access = iota
	// accessWrite: it writes update.yaml but never installs (disable,
	// unlink): the app's settings need not be complete.
	accessWrite
	// accessRead: it creates and writes nothing (status); the root must
	// exist, and a missing agent_id or update.yaml is reported as such.
	accessRead
)

// load builds the agent from o over what o.Root holds and checks all of it,
// writing nothing: save writes. saveApp keeps o's app settings in
// update.yaml (enable and run); otherwise they count for this command only.
// Settings o does not give (o.given says which it does) come from
// update.yaml's spec.app.
func load(o Options, acc access, saveApp bool) (*Agent, error) {
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.FallbackAfter <= 0 {
		o.FallbackAfter = DefaultFallbackAfter
	}
	if o.FindInterval <= 0 {
		o.FindInterval = DefaultFindInterval
	}
	if o.RetryBase <= 0 {
		o.RetryBase = DefaultRetryBase
	}
	if o.RetryMax <= 0 {
		o.RetryMax = max(DefaultRetryMax, o.RetryBase)
	}
	if o.MaxMissedAcks <= 0 {
		o.MaxMissedAcks = DefaultMaxMissedAcks
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = DefaultAckTimeout
	}
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.MaxPingsOut <= 0 {
		o.MaxPingsOut = DefaultMaxPingsOut
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	// Nothing may depend on the working directory: links into a relative
	// root are relative to the bin dir and dangle, and agentd run from
	// another directory would find another tree.
	var err error
	if o.Root, err = filepath.Abs(o.Root); err != nil {
		return nil, fmt.Errorf("--root: %w", err)
	}
	if o.Group != "" {
		if err := rollout.ValidateGroupName(o.Group); err != nil {
			return nil, cliutil.UsageError{Err: fmt.Errorf("--group: %w", err)}
		}
	}
	if o.Site != "" {
		if err := rollout.ValidateSite(o.Site); err != nil {
			return nil, cliutil.UsageError{Err: fmt.Errorf("--site: %w", err)}
		}
	}
	if err := install.ValidateHostname(o.Hostname); err != nil {
		return nil, cliutil.UsageError{Err: fmt.Errorf("--hostname %q: %w", o.Hostname, err)}
	}
	if len(o.FindURLs) > 0 && acc != accessRead {
		for _, u := range o.FindURLs {
			if err := checkHTTPURL(u); err != nil {
				return nil, cliutil.UsageError{Err: fmt.Errorf("--find-url: %w", err)}
			}
		}
	}
	if o.App.URLTemplate != "" && acc != accessRead {
		if _, err := (&install.Fetcher{URLTemplate: o.App.URLTemplate}).URL("1.0.0"); err != nil {
			return nil, cliutil.UsageError{Err: fmt.Errorf("--url-template: %w", err)}
		}
	}
	if o.App.ReleaseRepo != "" && acc != accessRead {
		switch {
		case o.App.URLTemplate != "":
			return nil, cliutil.Usagef("--release-repo and --url-template exclude each other: releases come from one source")
		case o.App.PublicKeyFile != "":
			return nil, cliutil.Usagef("--release-repo and --public-key exclude each other: the repository's own keys (its root, --release-root) sign its releases")
		}
		if err := checkHTTPURL(o.App.ReleaseRepo); err != nil {
			return nil, cliutil.UsageError{Err: fmt.Errorf("--release-repo: %w", err)}
		}
	}
	if acc == accessRead {
		fi, err := os.Stat(o.Root)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("%s does not exist: agentd has not run with this --root ('agentd enable' or 'agentd run' creates it)", o.Root)
		case err != nil:
			return nil, err
		case !fi.IsDir():
			return nil, fmt.Errorf("--root %s is not a directory", o.Root)
		}
	}
	if o.Name != "" && o.Log != nil {
		o.Log = o.Log.With(slog.String("app", o.Name))
	}
	a := &Agent{o: o, textfileKick: make(chan struct{}, 1)}
	a.metrics = newAgentMetrics(a)
	switch a.id, err = install.LoadAgentID(o.Root); {
	case errors.Is(err, fs.ErrNotExist):
		// Drawn now, so that enable can use it on the bus before it
		// writes anything; status shows none.
		a.newID = true
		if acc != accessRead {
			if a.id, err = rollout.NewAgentID(nil); err != nil {
				return nil, err
			}
		}
	case err != nil:
		return nil, err
	}
	if o.Name != "" {
		if err := rollout.ValidateAppName(o.Name); err != nil {
			return nil, cliutil.UsageError{Err: fmt.Errorf("--app: %w", err)}
		}
	}
	uf, err := install.LoadUpdateFile(appDir(o.Root, o.Name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		uf = install.NewUpdateFile(o.Group)
		if o.Name != "" {
			inheritHost(o.Root, uf)
		}
	case err != nil:
		return nil, err
	default:
		a.stored = true
	}
	a.loaded = cloneSpec(uf.Spec)
	if o.Group != "" {
		uf.Spec.Group = o.Group
	}
	if uf.Spec.Group == "" && acc != accessRead {
		return nil, cliutil.Usagef("no group: pass --group or set spec.group in update.yaml")
	}
	if o.Site != "" || o.given != nil && o.given("site") {
		uf.Spec.Site = o.Site // --site= clears it
	}
	if err := o.resolveLabels(&uf.Spec); err != nil {
		return nil, err
	}
	if o.Hostname != "" || o.given != nil && o.given("hostname") {
		uf.Spec.Hostname = o.Hostname // saved, as --group; --hostname= clears it
	}
	// What heartbeats carry: the saved name, else the system's.
	o.Hostname = uf.Spec.Hostname
	if o.Hostname == "" {
		o.Hostname, _ = os.Hostname()
	}
	o.Hostname = heartbeat.CleanName(o.Hostname, heartbeat.MaxHostnameLen)
	if o.NATSURL == "" {
		o.NATSURL = uf.Spec.NATS
	}
	if o.App.URLTemplate != "" {
		uf.Spec.URLTemplate = o.App.URLTemplate
		uf.Spec.ReleaseRepo = "" // back to the plain mode
	}
	if o.App.ReleaseRepo != "" {
		// Repository mode replaces the plain one: its keys, not a
		// public key, sign releases.
		uf.Spec.ReleaseRepo, uf.Spec.URLTemplate = o.App.ReleaseRepo, ""
		uf.Spec.App.PublicKey = ""
	}
	if len(o.FindURLs) > 0 {
		uf.Spec.FindURLs = o.FindURLs
	}
	app, err := o.App.resolve(uf.Spec.App, o.given)
	if err != nil {
		return nil, err
	}
	if saveApp {
		uf.Spec.App = app
	}
	if err := uf.Validate(); err != nil {
		return nil, cliutil.UsageError{Err: err}
	}
	var pendingRoot []byte
	if acc != accessRead {
		if pendingRoot, err = o.App.checkRepo(uf.Spec.ReleaseRepo, filepath.Join(appDir(o.Root, o.Name), tufDirName), acc == accessInstall); err != nil {
			return nil, err
		}
	}
	if o.App.Systemctl != "" && strings.HasPrefix(o.App.Systemctl, o.Root+string(filepath.Separator)) {
		return nil, cliutil.Usagef("--systemctl %s is under the root %s, where releases are extracted: name the system's", o.App.Systemctl, o.Root)
	}
	if o.App.PublicKey != nil && o.App.AppName == "" && uf.Spec.URLTemplate != "" && acc != accessRead {
		// Signatures name the app: without --app-name, the release file's
		// name must imply one, for every version.
		if err := checkAppFromTemplate(uf.Spec.URLTemplate); err != nil {
			return nil, cliutil.UsageError{Err: err}
		}
	}
	a.o, a.update, a.pendingRoot = o, uf, pendingRoot
	a.autoLabels = autoLabels()
	a.refreshLabels()
	if acc == accessInstall {
		if err := a.setupInstaller(); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// save writes what load found missing or changed: a new agent_id, then
// update.yaml (each atomically). Nothing when both are as read.
func (a *Agent) save() error {
	if a.newID {
		if err := install.WriteAgentID(a.o.Root, a.id); err != nil {
			return err
		}
		a.newID = false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pendingRoot != nil {
		if err := os.MkdirAll(a.dir(), 0o755); err != nil {
			return err
		}
		if err := a.trustRoot(); err != nil {
			return err
		}
	}
	if a.stored && reflect.DeepEqual(a.loaded, a.update.Spec) {
		return nil
	}
	if err := os.MkdirAll(a.dir(), 0o755); err != nil {
		return err
	}
	if err := a.update.Save(a.dir()); err != nil {
		return err
	}
	if from, to := a.loaded.Group, a.update.Spec.Group; a.stored && from != "" && from != to {
		a.o.Log.Info("moving to another group", slog.String("from", from), slog.String("to", to))
	}
	a.stored, a.loaded = true, cloneSpec(a.update.Spec)
	return nil
}

func cloneSpec(s install.UpdateSpec) install.UpdateSpec {
	s.FindURLs = slices.Clone(s.FindURLs)
	s.Labels = maps.Clone(s.Labels)
	s.App.Args = slices.Clone(s.App.Args)
	return s
}

// resolve lays the settings o gives over stored (given says which flags
// were given; nil: the non-empty ones) and checks them. It returns what
// update.yaml keeps; o is left as the agent runs: paths absolute, the
// health command and public key ready to use.
func (o *AppOptions) resolve(stored install.AppSpec, given func(flag string) bool) (install.AppSpec, error) {
	if given == nil {
		given = func(flag string) bool {
			switch flag {
			case "process":
				return o.Process != ""
			case "app-arg":
				return len(o.ProcessArgs) > 0
			case "systemd-unit":
				return o.SystemdUnit != ""
			case "systemctl":
				return o.Systemctl != ""
			case "app-name":
				return o.AppName != ""
			case "bin-dir":
				return o.BinDir != ""
			case "health-url":
				return o.HealthURL != ""
			case "health-command":
				return o.HealthShell != ""
			case "db":
				return o.DBPath != ""
			case "public-key":
				return o.PublicKeyFile != ""
			case "installer":
				return o.Installer != ""
			case "install-cmd":
				return o.InstallCmd != ""
			case "version-cmd":
				return o.VersionCmd != ""
			case "script-timeout":
				return o.ScriptTimeout != 0
			}
			return false
		}
	}
	abs := func(flag string, p *string) error {
		if *p == "" {
			return nil
		}
		v, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("--%s: %w", flag, err)
		}
		*p = v
		return nil
	}
	s := stored
	if given("process") || given("systemd-unit") {
		// The app runs one way: a new one replaces the stored one.
		if o.Process != "" && o.SystemdUnit != "" {
			return s, cliutil.Usagef("--process and --systemd-unit exclude each other: the app runs one way")
		}
		if o.Process != "" && !install.ValidBinaryName(o.Process) {
			return s, cliutil.Usagef("--process %q: want the name of a binary in the release's bin/", o.Process)
		}
		s.Process, s.Args, s.SystemdUnit = o.Process, o.ProcessArgs, o.SystemdUnit
	}
	if given("app-arg") {
		s.Args = o.ProcessArgs
	}
	if given("app-name") {
		if o.AppName != "" && !install.ValidAppName(o.AppName) {
			return s, cliutil.Usagef("--app-name %q: want a lowercase name ([a-z][a-z0-9-]{0,31}), as release signatures name it", o.AppName)
		}
		s.Name = o.AppName
	}
	if given("systemctl") {
		if err := abs("systemctl", &o.Systemctl); err != nil {
			return s, err
		}
		s.Systemctl = o.Systemctl
	}
	if given("bin-dir") {
		if err := abs("bin-dir", &o.BinDir); err != nil {
			return s, err
		}
		s.BinDir = o.BinDir
	}
	if err := o.resolveScript(&s, given); err != nil {
		return s, err
	}
	if given("health-url") {
		if o.HealthURL != "" {
			if err := checkHTTPURL(o.HealthURL); err != nil {
				return s, cliutil.UsageError{Err: fmt.Errorf("--health-url: %w", err)}
			}
		}
		s.HealthURL = o.HealthURL
	}
	if given("health-command") {
		s.HealthCommand = o.HealthShell
	}
	if given("db") {
		if err := abs("db", &o.DBPath); err != nil {
			return s, err
		}
		s.DB = o.DBPath
	}
	if given("public-key") {
		if err := abs("public-key", &o.PublicKeyFile); err != nil {
			return s, err
		}
		s.PublicKey = o.PublicKeyFile
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("update.yaml spec.app: %w", err)
	}
	o.Process, o.ProcessArgs, o.SystemdUnit, o.Systemctl, o.AppName = s.Process, s.Args, s.SystemdUnit, s.Systemctl, s.Name
	o.BinDir, o.HealthURL, o.HealthShell, o.DBPath, o.PublicKeyFile = s.BinDir, s.HealthURL, s.HealthCommand, s.DB, s.PublicKey
	if o.BinDir == "" {
		o.BinDir = DefaultBinDir
	}
	if o.Systemctl != "" && filepath.Dir(o.Systemctl) == filepath.Clean(o.BinDir) {
		return s, cliutil.Usagef("--systemctl %s is in the bin dir %s, where releases put their binaries: name the system's", o.Systemctl, o.BinDir)
	}
	if o.HealthShell != "" && o.HealthCommand == nil {
		o.HealthCommand = []string{install.ShellPath, "-c", o.HealthShell}
	}
	if o.PublicKeyFile != "" && o.PublicKey == nil {
		key, err := readPublicKey(o.PublicKeyFile)
		if err != nil {
			return s, cliutil.UsageError{Err: err}
		}
		o.PublicKey = key
	}
	return s, nil
}

// checkAppFromTemplate checks that the release file name the URL template
// renders implies an app name (install.AppNameFromFile), the same for two
// versions: it is what signatures must name when --app-name is not given.
func checkAppFromTemplate(tmpl string) error {
	var names []string
	for _, v := range []string{"1.0.0", "2.3.4-rc.1"} {
		raw, err := (&install.Fetcher{URLTemplate: tmpl}).URL(v)
		if err != nil {
			return err
		}
		u, err := url.Parse(raw)
		if err != nil {
			return err
		}
		file := path.Base(u.Path)
		name, ok := install.AppNameFromFile(file)
		if !ok {
			return fmt.Errorf("--public-key: release signatures name the app, and the release file %q (url_template) implies none: pass --app-name NAME (the name scripts/release.sh --app-name signs)", file)
		}
		names = append(names, name)
	}
	if names[0] != names[1] {
		return fmt.Errorf("--public-key: release signatures name the app, and the release file's name (url_template) changes with the version: pass --app-name NAME (the name scripts/release.sh --app-name signs)")
	}
	return nil
}

// checkHTTPURL checks that raw is an absolute http or https URL.
func checkHTTPURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: want an http:// or https:// URL", raw)
	}
	return nil
}

// setupInstaller builds the installer when releases can be fetched and the
// app can be run.
func (a *Agent) setupInstaller() error {
	app := a.o.App
	if app.scripted() {
		return a.setupScriptInstaller()
	}
	if a.update.Spec.URLTemplate == "" && a.update.Spec.ReleaseRepo == "" {
		return nil
	}
	tree := a.tree()
	switch {
	case app.SystemdUnit != "":
		a.runner = &install.SystemdRunner{Unit: app.SystemdUnit, Systemctl: app.Systemctl}
	case app.Process != "":
		a.runner = &install.ProcessRunner{
			Path: filepath.Join(tree.BinDir, app.Process), Args: app.ProcessArgs,
			// Both into agentd's log, in one stream: the app's last lines
			// at a failure are kept in the order it wrote them, and
			// heartbeated (error_output).
			Stdout: os.Stderr, Stderr: os.Stderr,
			PIDFile: tree.AppPIDPath(), Log: a.o.Log,
		}
	default:
		return cliutil.Usagef("a url_template or release_repo is set but nothing runs the app: pass --process NAME (agentd supervises bin/NAME) or --systemd-unit UNIT")
	}
	clk := a.o.Clock
	var resolve func(context.Context, string) (install.ResolvedTarget, error)
	if u := a.update.Spec.ReleaseRepo; u != "" {
		// The same HTTP client as the downloads (none set: Go's default)
		// and the agent's clock for expiry. A metadata request that takes
		// longer than the downloads' stall timeout has stalled.
		a.repo = &release.Client{URL: u, Dir: a.tufDir(), Now: clk.Now}
		if app.DownloadStallTimeout > 0 {
			a.repo.RequestTimeout = app.DownloadStallTimeout
		}
		resolve = a.resolveRelease
	}
	a.installer = &install.Installer{
		Tree: tree,
		Fetcher: &install.Fetcher{
			URLTemplate: a.update.Spec.URLTemplate, PublicKey: app.PublicKey, App: app.AppName, Progress: app.Progress,
			Resolve: resolve,
			// The stall rule and the deadline bound every request, not a
			// client timeout: a slow but moving download may finish.
			StallTimeout: app.DownloadStallTimeout, Deadline: app.DownloadDeadline, Log: a.o.Log,
			SpaceMargin:   int64(app.KeepFree),
			ProgressEvery: app.ProgressInterval,
			OnProgress: func(p install.DownloadProgress) {
				a.metrics.progress(p)
				a.transferStarted()
			},
		},
		Runner: a.runner,
		Health: install.Health{URL: app.HealthURL, Command: app.HealthCommand},
		DBPath: app.DBPath,
		Clock: install.Clock{Now: clk.Now, After: func(d time.Duration) <-chan time.Time {
			return clk.NewTimer(d).C()
		}},
		Log:      a.o.Log,
		Save:     a.SetStatus,
		LockHeld: a.o.RootLocked,
	}
	return nil
}

// ID is the agent's update id.
func (a *Agent) ID() rollout.AgentID { return a.id }

// Plan is the agent's view of the plan on the bus: the spec and its
// group's status as last read (zero before Run reads them).
func (a *Agent) Plan() Plan {
	if f := a.follower.Load(); f != nil {
		return f.Plan()
	}
	return Plan{}
}

// Group is the agent's rollout group: the one its labels moved it to
// (selector.go), else the one it was given.
func (a *Agent) Group() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.groupLocked()
}

func (a *Agent) groupLocked() string {
	if g := a.update.Spec.SelectedGroup; g != "" {
		return g
	}
	return a.update.Spec.Group
}

// Heartbeat is the agent's current status as a heartbeat (V, At and Seq are
// the publisher's to fill).
func (a *Agent) Heartbeat() heartbeat.Heartbeat {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.update.Status
	hb := heartbeat.Heartbeat{
		AgentID:        a.id,
		Hostname:       a.o.Hostname,
		Group:          a.groupLocked(),
		Labels:         a.labels,
		ActiveVersion:  st.ActiveVersion,
		StartVersion:   st.StartVersion,
		StartTime:      st.StartTime,
		Rollback:       st.Rollback,
		RollbackFrom:   st.RollbackFrom,
		Error:          heartbeat.CleanText(st.Error, heartbeat.MaxErrorLen),
		UpdatingTo:     a.updatingTo,
		UpdaterVersion: version.Version,
		Installer:      a.installerName(),
	}
	if a.o.Name != "" {
		// Another app than the default: its own subject and body
		// (kv.AppNS.HBSubject); the default app's are as before apps.
		hb.App = a.o.Name
	}
	hb.Site, _ = a.siteLocked()
	if b := a.blocked; st.Error == "" && a.updatingTo != "" && b.target == a.updatingTo {
		// A retry of an infrastructure failure is under way and has not
		// got past it yet: still blocked.
		st.Error, st.ErrorClass, st.ErrorCause = b.err, install.ClassInfrastructure, b.cause
		hb.Error = heartbeat.CleanText(st.Error, heartbeat.MaxErrorLen)
	}
	if st.Error != "" && hb.Error != "" {
		hb.ErrorOutput = heartbeat.CleanOutput(st.ErrorOutput)
	}
	if st.Error != "" && st.ErrorClass.Valid() {
		// A class this build does not know (update.yaml of a newer
		// agentd) is left out: the controller would refuse the heartbeat.
		hb.ErrorClass, hb.ErrorCause = string(st.ErrorClass), heartbeat.CleanText(st.ErrorCause, heartbeat.MaxCauseLen)
	}
	return hb
}

// SetStatus records a new status in update.yaml and heartbeats it at once.
func (a *Agent) SetStatus(st install.Status) error {
	a.mu.Lock()
	a.update.Status = st
	err := a.update.Save(a.dir())
	a.mu.Unlock()
	if err != nil {
		return err
	}
	if a.pub != nil {
		a.pub.Kick()
	}
	return nil
}

// Status is the host's current status (update.yaml).
func (a *Agent) Status() install.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.update.Status
}

// Run connects to the bus, heartbeats, follows the plan and installs what it
// says, until ctx is done. The bus being down at start or going away later
// is logged and waited out, never fatal. It runs this one app; 'agentd run'
// runs every app of the host in one process (runHost, apps.go).
func (a *Agent) Run(ctx context.Context) error {
	return runHost(ctx, []*Agent{a})
}

// checkRepo checks the release repository settings: --release-root (read
// and checked; returned when it changes what dir trusts, see planRoot),
// and, when it is going to install (installs), that an app with a
// repository has a root to trust, given now or kept in dir.
func (o *AppOptions) checkRepo(repo, dir string, installs bool) ([]byte, error) {
	if o.ReleaseRootFile != "" && repo == "" {
		return nil, cliutil.Usagef("--release-root goes with --release-repo URL, the repository it is the root of")
	}
	if repo == "" {
		return nil, nil
	}
	if o.ReleaseRootFile == "" {
		if !installs {
			return nil, nil
		}
		if _, err := release.TrustedRoot(dir); err != nil {
			return nil, cliutil.Usagef("release repository %s: no trusted root in %s: pass --release-root FILE (the repository's metadata/root.json, given once, out of band)", repo, dir)
		}
		return nil, nil
	}
	b, v, err := readRootFile(o.ReleaseRootFile)
	if err != nil {
		return nil, err
	}
	return planRoot(dir, b, v)
}
