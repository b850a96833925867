package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/auth"
	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/natsutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// AuthOptions are the flags every "fleetctl auth" command shares.
type AuthOptions struct {
	*Global
	// Dir is the auth directory "auth init" writes and the others use.
	Dir string
	// Bus is set when --nats or NATS_URL names a bus: "auth agent" and
	// "auth user" then record their mint in the audit trail.
	Bus bool
}

func (o *AuthOptions) dir() (auth.Dir, error) {
	if o.Dir == "" {
		return auth.Dir{}, cliutil.Usagef("--dir is required (or set FLEETWAVE_AUTH_DIR)")
	}
	return auth.Dir{Path: o.Dir}, nil
}

func newAuthCmd(g *Global) *cobra.Command {
	o := &AuthOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Mint and revoke the fleet's NATS credentials (operator, accounts, users, agents)",
		Long: `fleetctl auth keeps the fleet's decentralized NATS security in one directory:
an operator, the system account, the FLEET account (the stream and buckets,
with JetStream limits; the controller, admin and sys users), and the AGENTS
account, which holds one user per agent and nothing but imports from FLEET:
an agent may publish only its own heartbeat and read only its own plan keys,
and no reply subject it writes can name anything in FLEET. The CONTROL
account holds the controllers, the EDGE account the edge sites' leaf users
('fleetctl edge add'), each likewise nothing but imports from FLEET. Seeds
and creds are written 0600 and never printed. What each identity may do:
docs/security.md.`,
	}
	cmd.PersistentFlags().StringVar(&o.Dir, "dir", cliutil.Env("", "FLEETWAVE_AUTH_DIR"), "auth directory (env FLEETWAVE_AUTH_DIR)")
	cmd.AddCommand(newAuthInitCmd(o), newAuthAgentCmd(o), newAuthUserCmd(o), newAuthRevokeCmd(o), newAuthPushCmd(o), newAuthListCmd(o),
		newAuthUpgradeCmd(o))
	return cmd
}

// AuthInitOptions are the flags of "fleetctl auth init".
type AuthInitOptions struct {
	*AuthOptions
	Name      string
	JetStream auth.JetStreamLimits
	// Output is text or json (a WriteResult, Value an AuthInitReport).
	Output string
}

// AuthInitReport is the Value of "fleetctl auth init -o json": the public
// keys minted (never a seed).
type AuthInitReport struct {
	Operator     string            `json:"operator"`
	OperatorName string            `json:"operator_name"`
	Accounts     map[string]string `json:"accounts"`
}

func newAuthInitCmd(ao *AuthOptions) *cobra.Command {
	o := &AuthInitOptions{AuthOptions: ao, JetStream: auth.DefaultJetStreamLimits}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Mint an operator, the SYS, FLEET, AGENTS, CONTROL and EDGE accounts and the controller, admin and sys users",
		Long: `Create the fleet's trust root in an empty --dir:

  resolver.conf        include in every nats-server config: operator JWT, system
                       account, every account JWT preloaded (no secrets)
  fleet-account.conf   FLEET_ACCOUNT, for leaf node remotes (deploy/nats/leaf-edge.conf)
  operator.jwt, accounts/{SYS,FLEET,AGENTS,CONTROL,EDGE}.jwt
  creds/controller.creds (CONTROL), creds/admin.creds (FLEET), creds/sys.creds   (0600)
  keys/*.nk            seeds (0600); operator.nk, SYS.nk, FLEET.nk, AGENTS.nk,
                       CONTROL.nk and EDGE.nk are needed by nothing after init:
                       keep them offline
  users/*.json         what was issued to whom, for revocation

It refuses to overwrite an existing operator: that would lock out every
credential already issued.`,
		Example: `  fleetctl auth init --dir /etc/fleetwave/auth
  fleetctl auth init --dir ./auth --js-disk 50GiB --js-memory 1GiB
  controller run --auth-dir /etc/fleetwave/auth    # embedded server in operator mode`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			return RunAuthInit(cmd.Context(), o)
		},
	}
	writeOutputFlag(cmd, &o.Output)
	f := cmd.Flags()
	f.StringVar(&o.Name, "name", "fleetwave", "operator name")
	f.Var((*byteSize)(&o.JetStream.MemoryBytes), "js-memory", "FLEET account JetStream memory limit (e.g. 256MiB; -1 unlimited)")
	f.Var((*byteSize)(&o.JetStream.DiskBytes), "js-disk", "FLEET account JetStream disk limit (e.g. 10GiB; -1 unlimited)")
	f.Int64Var(&o.JetStream.Streams, "js-streams", o.JetStream.Streams, "FLEET account stream limit (-1 unlimited)")
	f.Int64Var(&o.JetStream.Consumers, "js-consumers", o.JetStream.Consumers, "FLEET account consumer limit (-1 unlimited)")
	return cmd
}

// RunAuthInit is "fleetctl auth init".
func RunAuthInit(_ context.Context, o *AuthInitOptions) error {
	d, err := o.dir()
	if err != nil {
		return err
	}
	res, err := d.Init(o.Name, o.JetStream)
	if err != nil {
		return err
	}
	if o.Output == "json" {
		files := make([]string, len(res.Files))
		for i, f := range res.Files {
			files[i] = inDir(d, f)
		}
		return writeJSON(o.Out, WriteResult{Command: "auth init", Written: true, Files: files, Value: AuthInitReport{
			Operator: res.Operator, OperatorName: o.Name,
			Accounts: map[string]string{auth.AccountSystem: res.SystemAccount, auth.AccountFleet: res.FleetAccount,
				auth.AccountAgents: res.AgentsAccount, auth.AccountControl: res.ControlAccount, auth.AccountEdge: res.EdgeAccount},
		}})
	}
	js := o.JetStream
	fmt.Fprintf(o.Out, "operator %q %s\n", o.Name, res.Operator)
	fmt.Fprintf(o.Out, "  account SYS    %s\n", res.SystemAccount)
	fmt.Fprintf(o.Out, "  account FLEET  %s (JetStream: memory %s, disk %s, streams %s, consumers %s)\n", res.FleetAccount,
		byteSize(js.MemoryBytes), byteSize(js.DiskBytes), limit(js.Streams), limit(js.Consumers))
	fmt.Fprintf(o.Out, "  account AGENTS %s (one user per host; imports from FLEET only)\n", res.AgentsAccount)
	fmt.Fprintf(o.Out, "  account CONTROL %s (the controllers; imports from FLEET only)\n", res.ControlAccount)
	fmt.Fprintf(o.Out, "  account EDGE   %s (edge sites' leaf nodes; imports from FLEET only)\n", res.EdgeAccount)
	fmt.Fprintf(o.Out, "wrote %s:\n", d.Path)
	for _, f := range res.Files {
		fmt.Fprintf(o.Out, "  %s\n", f)
	}
	fmt.Fprintf(o.Out, "next: 'controller run --auth-dir %s', or include %s from a server config (deploy/nats);\n"+
		"      move keys/operator.nk, keys/SYS.nk, keys/FLEET.nk, keys/AGENTS.nk, keys/CONTROL.nk and keys/EDGE.nk offline\n", d.Path, filepath.Join(d.Path, auth.FileResolverConf))
	return nil
}

// AuthAgentOptions are the flags of "fleetctl auth agent".
type AuthAgentOptions struct {
	*AuthOptions
	ID    string
	Group string
	// Apps are the apps the agent speaks for (--apps): names (NAME:GROUP
	// for an app the host runs in another group than --group), or "*"
	// alone for any app; none is the fleet's default app only.
	Apps []string
	// appGroups are the groups --apps gave (app → group).
	appGroups map[string]string
	// DefaultApp names the fleet's default app (--default-app), whose
	// subjects carry no name; without it and with Apps, the config on the
	// bus says.
	DefaultApp string
	// MayJoin are the groups the host may move to by its labels
	// (--may-join; "*" any): a group's selector takes it (issue 28).
	MayJoin []string
	Out     string
	Output  string
}

// AuthAgentReport is the JSON of "fleetctl auth agent -o json": the
// WriteResult fields (files: the creds) and the agent's own beside them.
type AuthAgentReport struct {
	WriteResult
	AgentID string `json:"agent_id"`
	Group   string `json:"group"`
	// Apps are the apps the creds speak for ("*": any), the default app
	// first; absent for the default app alone.
	Apps []string `json:"apps,omitempty"`
	// MayJoin are the groups the host may move to by its labels ("*":
	// any); absent when none.
	MayJoin []string `json:"may_join,omitempty"`
	UserKey string   `json:"user_key"`
	Creds   string   `json:"creds"`
}

func newAuthAgentCmd(ao *AuthOptions) *cobra.Command {
	o := &AuthAgentOptions{AuthOptions: ao}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Mint one agent's credentials: its own heartbeat subject and its plan keys, nothing else",
		Long: `Mint a user for one agent in the AGENTS account. It may publish only
fleet.hb.<group>.<id>, read only the fleet_plan keys "spec" and "group.<group>"
(direct gets), subscribe only to fleet.plan.spec, fleet.plan.group.<group> and
its own inbox (_INBOX_<id>, which agentd uses), and connect only as a client.
It reaches FLEET only through the AGENTS account's imports, so no reply
subject it writes can name a bucket, the stream or another host's subject.

Apps (DESIGN §9): without --apps the creds are the fleet's default app's
only, exactly as before apps existed (a host that runs only the default app
needs nothing new). --apps a,b grants each app named the same in its own
namespace: fleet.hb.<app>.<group>.<id>, the keys "<app>.spec" and
"<app>.group.<group>", fleet.plan.<app>.spec and fleet.plan.<app>.group.<group>;
the default app, when named, keeps its unprefixed subjects. An app the host
runs in another group than --group (its own update.yaml's) is APP:GROUP. Which app is the
default comes from the config on the bus (--nats), which must list every app
named, or from --default-app NAME (offline). --apps '*' is every app, now
and later (the app a wildcard; still this host's group and id only). A host
that starts running another app needs new creds with the apps it runs; the
other hosts keep theirs.

Label selectors (docs/rollout.md, "Label selectors"): a group with a
selector takes the hosts whose labels match, and agentd moves itself into
it. --may-join g1,g2 (or '*' for any group) lets the host do so: it may
then also read the groups key ("groups", "<app>.groups": the groups and
their selectors) and, in each group named, heartbeat as itself and read
(never write) the group's status, for every app granted. Without it the
host stays in --group whatever its labels say (agentd logs why).

--id is the host's agent id (<root>/agent_id, 'agentd status'); without it a
new id is drawn and printed: write it to <root>/agent_id before agentd first
starts (deploy/systemd/install.sh --agent-id does). Minting again for the same
id (another group, a rotation) adds a key; the old one stays valid until
'auth revoke --id ID --keep-current'. Needs only keys/AGENTS-signing.nk.

` + mintAuditHelp,
		Example: `  fleetctl auth agent --dir /etc/fleetwave/auth --group prod --id 1b4e28ba-2fa1-4d2e-883f-0016d3cca427
  fleetctl auth agent --group canary -o json | jq -r .agent_id
  fleetctl auth agent --group prod --id "$ID" --out /srv/provision/$HOST/agent.creds
  fleetctl auth agent --group prod --nats nats://nats-a:4222 --reason "new host web-42"   # recorded
  fleetctl auth agent --group prod --id "$ID" --apps web,db --nats nats://nats-a:4222     # web is the default app
  fleetctl auth agent --group prod --id "$ID" --apps db --default-app web                 # offline: db only
  fleetctl auth agent --group prod --id "$ID" --may-join canary,eu                        # label selectors may move it`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			if err := rollout.ValidateGroupName(o.Group); err != nil {
				return cliutil.Usagef("--group: %v", err)
			}
			if o.ID != "" {
				if _, err := rollout.ParseAgentID(o.ID); err != nil {
					return cliutil.Usagef("--id: %v", err)
				}
			}
			if err := checkAgentApps(o, cmd.Flags().Changed("apps")); err != nil {
				return err
			}
			if cmd.Flags().Changed("may-join") && len(o.MayJoin) == 0 {
				return cliutil.Usagef("--may-join: name the groups the host may move to by its labels, or '*' for any")
			}
			if err := (auth.AppGrant{Join: o.MayJoin}).Validate(); err != nil {
				return cliutil.Usagef("--may-join: %v", err)
			}
			o.Bus = busNamed(cmd)
			return RunAuthAgent(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.ID, "id", "", "the agent's id (default: draw a new one)")
	cmd.Flags().StringVar(&o.Group, "group", "", "the agent's rollout group (required)")
	cmd.Flags().StringSliceVar(&o.Apps, "apps", nil, "the apps the host runs, comma-separated (APP:GROUP for one in another group than --group), or '*' for any (default: the fleet's default app only)")
	cmd.Flags().StringSliceVar(&o.MayJoin, "may-join", nil, "groups the host may move to when their selector matches its labels, comma-separated, or '*' for any (default: none, it stays in --group)")
	cmd.Flags().StringVar(&o.DefaultApp, "default-app", "", "the fleet's default app, when --apps is given and the config is not read from the bus")
	cmd.Flags().StringVar(&o.Out, "out", "", "write the creds here (default <dir>/agents/<id>.creds)")
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunAuthAgent is "fleetctl auth agent".
func RunAuthAgent(ctx context.Context, o *AuthAgentOptions) error {
	const command = "auth agent"
	d, err := o.dir()
	if err != nil {
		return err
	}
	id, drawn := rollout.AgentID(o.ID), false
	if id == "" {
		if id, err = rollout.NewAgentID(nil); err != nil {
			return err
		}
		drawn = true
	}
	var audit *authAudit
	if o.Bus {
		if audit, err = o.openAudit(ctx, command, mintOnBus(command)); err != nil {
			return err
		}
		defer audit.done()
	}
	grant, err := o.appGrant(audit)
	if err != nil {
		return err
	}
	grant.Join = o.MayJoin
	before, err := recordValue(func() (auth.Record, error) { return d.Agent(id) })
	if err != nil {
		return err
	}
	u, out, err := d.IssueAgentApps(id, o.Group, grant, o.Out)
	if err != nil {
		return err
	}
	o.recordMint(audit, command, func() (auth.Record, error) { return d.Agent(id) }, before)
	out = inDir(d, out)
	rep := AuthAgentReport{WriteResult: WriteResult{Command: "auth agent", Written: true, Files: []string{out}},
		AgentID: string(id), Group: o.Group, UserKey: u.PubKey, Creds: out}
	if !grant.DefaultOnly() {
		rep.Apps = strings.Split(grant.String(), ",")
	}
	rep.MayJoin = grant.Join
	if o.Output == "json" {
		return writeJSON(o.Global.Out, rep)
	}
	apps := ""
	switch {
	case rep.Apps != nil:
		apps = ", apps " + grant.String()
	case len(o.Apps) > 0:
		apps = ", apps " + strings.Join(o.Apps, ",") + " (the default app alone: the same grants as without --apps)"
	}
	if len(grant.Join) > 0 {
		apps += ", may join " + strings.Join(grant.Join, ",") + " by its labels"
	}
	fmt.Fprintf(o.Global.Out, "agent %s, group %s%s: user %s\ncreds written to %s (0600)\n", id, o.Group, apps, u.PubKey, out)
	if drawn {
		fmt.Fprintf(o.Global.Out, "new agent id: write it to <root>/agent_id on the host before agentd first starts\n")
	}
	return nil
}

// checkAgentApps checks the syntax of --apps and --default-app (given: the
// command line has --apps).
func checkAgentApps(o *AuthAgentOptions, given bool) error {
	if given && len(o.Apps) == 0 {
		return cliutil.Usagef("--apps: name at least one app, or '*' for any (leave --apps out for the default app only)")
	}
	if o.DefaultApp != "" {
		if len(o.Apps) == 0 {
			return cliutil.Usagef("--default-app says which of --apps is the fleet's default app; without --apps the creds are the default app's")
		}
		if err := rollout.ValidateAppName(o.DefaultApp); err != nil {
			return cliutil.Usagef("--default-app: %v", err)
		}
	}
	o.appGroups = nil
	for i, app := range o.Apps {
		app = strings.TrimSpace(app)
		if name, group, ok := strings.Cut(app, ":"); ok {
			if err := rollout.ValidateGroupName(group); err != nil {
				return cliutil.Usagef("--apps %s: %v", app, err)
			}
			if o.appGroups == nil {
				o.appGroups = map[string]string{}
			}
			if group != o.Group {
				o.appGroups[name] = group
			}
			app = name
		}
		o.Apps[i] = app
		switch {
		case app == "*" && len(o.Apps) > 1:
			return cliutil.Usagef("--apps: '*' (any app) stands alone")
		case app == "*":
		default:
			if err := rollout.ValidateAppName(app); err != nil {
				return cliutil.Usagef("--apps: %v", err)
			}
			if slices.Contains(o.Apps[:i], app) {
				return cliutil.Usagef("--apps: %q named twice", app)
			}
		}
	}
	if len(o.Apps) > rollout.MaxApps {
		return cliutil.Usagef("--apps: %d apps; a fleet has at most %d", len(o.Apps), rollout.MaxApps)
	}
	return nil
}

// appGrant is what --apps grants: the default app alone without it; any app
// with '*'; else the apps named, the fleet's default one (from
// --default-app, or the config read on the bus, which must list every app
// named) keeping its unprefixed subjects.
func (o *AuthAgentOptions) appGrant(audit *authAudit) (auth.AppGrant, error) {
	switch {
	case len(o.Apps) == 0:
		return auth.AppGrant{}, nil
	case len(o.Apps) == 1 && o.Apps[0] == "*":
		if len(o.appGroups) > 0 {
			return auth.AppGrant{}, cliutil.Usagef("--apps: '*' is every app in --group's group")
		}
		return auth.AppGrant{Any: true}, nil
	}
	def := o.DefaultApp
	if audit != nil {
		cfg, err := kv.Get[rollout.Config](audit.ctx, audit.f.Config, kv.KeyConfig)
		if err != nil {
			return auth.AppGrant{}, fmt.Errorf("--apps: read the config for its apps: %w (or mint offline with --default-app NAME)", err)
		}
		names := cfg.Value.AppNames()
		if def != "" && def != cfg.Value.DefaultApp() {
			return auth.AppGrant{}, cliutil.Usagef("--default-app %s: the config's default app is %s", def, cfg.Value.DefaultApp())
		}
		def = cfg.Value.DefaultApp()
		for _, app := range o.Apps {
			if !slices.Contains(names, app) {
				hint := ""
				if c, ok := rollout.ClosestGroupName(app, names); ok {
					hint = fmt.Sprintf(" (did you mean %s?)", c)
				}
				return auth.AppGrant{}, cliutil.Usagef("--apps: app %q is not in the config%s; its apps: %s (add it to the config's apps first)",
					app, hint, strings.Join(names, ", "))
			}
		}
	}
	if def == "" {
		return auth.AppGrant{}, cliutil.Usagef("--apps: which app is the fleet's default (its subjects carry no name)? Give --nats to read the config, or --default-app NAME")
	}
	g := auth.AppGrant{NoDefault: true}
	for _, app := range o.Apps {
		if app == def {
			if group, ok := o.appGroups[app]; ok {
				return auth.AppGrant{}, cliutil.Usagef("--apps %s:%s: %s is the default app, whose group is the agent's: --group %s", app, group, app, group)
			}
			g.NoDefault, g.DefaultName = false, def
			continue
		}
		g.Apps = append(g.Apps, app)
		if group, ok := o.appGroups[app]; ok {
			if g.Groups == nil {
				g.Groups = map[string]string{}
			}
			g.Groups[app] = group
		}
	}
	if err := g.Validate(); err != nil {
		return auth.AppGrant{}, cliutil.Usagef("--apps: %v", err)
	}
	return g, nil
}

// inDir is where a file the directory d wrote lives: a relative name is
// under d.Path, as auth.WriteFiles resolves it.
func inDir(d auth.Dir, name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(d.Path, name)
}

// AuthUserOptions are the flags of "fleetctl auth user".
type AuthUserOptions struct {
	*AuthOptions
	Name string
	Role string
	Out  string
	// Output is text or json (a WriteResult, Value an AuthUserReport).
	Output string
}

// AuthUserReport is the Value of "fleetctl auth user -o json".
type AuthUserReport struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	UserKey string `json:"user_key"`
	Creds   string `json:"creds"`
}

func newAuthUserCmd(ao *AuthOptions) *cobra.Command {
	o := &AuthUserOptions{AuthOptions: ao}
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Mint another user: a controller or an admin",
		Long: `Mint a named user with a role:

  controller  a user of the CONTROL account: reads the config, the plan and
              the inventory, writes group statuses, stats, the lease and
              events; not the plan spec, not the config, no consumers
  admin       everything in the FLEET account (fleetctl, the nats CLI)

An edge site's leaf user is minted with its site's grants, in the EDGE
account, by 'fleetctl edge add --site NAME' (which also creates the site's
consumer at the hub); --role leaf is refused.

Minting an existing name again adds a key (a rotation); revoke the old one
with 'auth revoke --user NAME --keep-current'.

` + mintAuditHelp,
		Example: `  fleetctl auth user --name alice --role admin
  fleetctl auth user --name ctl-b --role controller --out /etc/fleetwave/controller.creds
  fleetctl auth user --name bob --role admin --nats nats://nats-a:4222 --reason "joins on-call"   # recorded`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			if _, err := auth.ParseRole(o.Role); err != nil {
				return cliutil.Usagef("--role: %v", err)
			}
			if o.Name == "" {
				return cliutil.Usagef("--name is required")
			}
			o.Bus = busNamed(cmd)
			return RunAuthUser(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Name, "name", "", "user name (a-z 0-9 - _)")
	cmd.Flags().StringVar(&o.Role, "role", "", "controller or admin")
	cmd.Flags().StringVar(&o.Out, "out", "", "write the creds here (default <dir>/creds/<name>.creds)")
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunAuthUser is "fleetctl auth user".
func RunAuthUser(ctx context.Context, o *AuthUserOptions) error {
	const command = "auth user"
	d, err := o.dir()
	if err != nil {
		return err
	}
	role, err := auth.ParseRole(o.Role)
	if err != nil {
		return cliutil.UsageError{Err: err}
	}
	var audit *authAudit
	if o.Bus {
		if audit, err = o.openAudit(ctx, command, mintOnBus(command)); err != nil {
			return err
		}
		defer audit.done()
	}
	before, err := recordValue(func() (auth.Record, error) { return d.User(o.Name) })
	if err != nil {
		return err
	}
	u, out, err := d.IssueUser(o.Name, role, o.Out)
	if err != nil {
		return err
	}
	o.recordMint(audit, command, func() (auth.Record, error) { return d.User(o.Name) }, before)
	out = inDir(d, out)
	if o.Output == "json" {
		return writeJSON(o.Global.Out, WriteResult{Command: "auth user", Written: true, Files: []string{out},
			Value: AuthUserReport{Name: o.Name, Role: string(role), UserKey: u.PubKey, Creds: out}})
	}
	fmt.Fprintf(o.Global.Out, "user %s (%s): %s\ncreds written to %s (0600)\n", o.Name, role, u.PubKey, out)
	return nil
}

// AuthRevokeOptions are the flags of "fleetctl auth revoke".
type AuthRevokeOptions struct {
	*AuthOptions
	ID          string
	User        string
	Key         string
	KeepCurrent bool
	Push        bool
	SysCreds    string
	// Output is text or json (a WriteResult, Value an AuthRevokeReport).
	Output string
}

// AuthRevokeReport is the Value of "fleetctl auth revoke -o json" and, with
// only Pushed, of "fleetctl auth push -o json".
type AuthRevokeReport struct {
	Revoked []AuthRevoked `json:"revoked,omitempty"`
	// Pushed are the servers that took the account JWTs; absent with
	// --push=false.
	Pushed []AuthPushed `json:"pushed,omitempty"`
}

// AuthRevoked are the keys revoked in one account.
type AuthRevoked struct {
	Account string   `json:"account"`
	Keys    []string `json:"keys"`
}

// AuthPushed is one account JWT taken by a server.
type AuthPushed struct {
	URL    string `json:"url"`
	Server string `json:"server"`
}

func newAuthRevokeCmd(ao *AuthOptions) *cobra.Command {
	o := &AuthRevokeOptions{AuthOptions: ao}
	cmd := &cobra.Command{
		Use:   "revoke",
		Short: "Revoke an agent's or a user's credentials, and disconnect them now",
		Long: `Revoke every key issued to an agent (--id), a user (--user), or one key (--key):
the account JWT gets a revocation and is re-signed with keys/operator-signing.nk,
accounts/<account>.jwt and resolver.conf are rewritten, and the new account JWT
is pushed to the running servers over --nats with the system account's
credentials ($SYS.REQ.ACCOUNT.<id>.CLAIMS.UPDATE): connected clients using a
revoked key are disconnected at once and cannot reconnect.

--keep-current revokes all but the newest key: the last step of a rotation.
Servers the push does not reach (an edge leaf node on its own) need
'fleetctl auth push --nats <that server>', or a restart with the new resolver.conf.

Audit trail: with the push, the revocation is also recorded in FLEET_AUDIT
('fleetctl history') over --nats as an admin (--creds, else
<dir>/creds/admin.creds): who (--actor, else the creds' user name), why
(--reason; required when the config says require_reason, checked before
anything is revoked), and the user's account, name, agent id, group, role
and public keys (valid and revoked) before and after, never a seed or a JWT.
The revocation never waits for the trail: if the record is not stored (the
bus does not answer, no FLEET_AUDIT), the keys are revoked all the same,
stderr says the record is missing and the exit status is 1. With
--push=false nothing reaches the bus: stderr says no record was written
(revoke without --push=false to push and record).`,
		Example: `  fleetctl auth revoke --dir /etc/fleetwave/auth --id 1b4e28ba-2fa1-4d2e-883f-0016d3cca427
  fleetctl auth revoke --user alice --nats nats://nats-a:4222 --reason "left the team"
  fleetctl auth revoke --id "$ID" --keep-current      # after rotating the agent's creds
  fleetctl auth revoke --key UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4 --push=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n := 0
			for _, s := range []string{o.ID, o.User, o.Key} {
				if s != "" {
					n++
				}
			}
			if n != 1 {
				return cliutil.Usagef("give exactly one of --id, --user and --key")
			}
			if o.ID != "" {
				if _, err := rollout.ParseAgentID(o.ID); err != nil {
					return cliutil.Usagef("--id: %v", err)
				}
			}
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			if o.Key != "" && o.KeepCurrent {
				return cliutil.Usagef("--keep-current goes with --id or --user")
			}
			return RunAuthRevoke(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.ID, "id", "", "revoke this agent's keys")
	f.StringVar(&o.User, "user", "", "revoke this user's keys")
	f.StringVar(&o.Key, "key", "", "revoke this one user key (U…)")
	f.BoolVar(&o.KeepCurrent, "keep-current", false, "keep the newest key (end of a rotation)")
	f.BoolVar(&o.Push, "push", true, "push the updated account JWT to the running servers (--nats)")
	f.StringVar(&o.SysCreds, "sys-creds", "", "system account creds for the push (default <dir>/creds/sys.creds)")
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunAuthRevoke is "fleetctl auth revoke".
func RunAuthRevoke(ctx context.Context, o *AuthRevokeOptions) error {
	d, err := o.dir()
	if err != nil {
		return err
	}
	const command = "auth revoke"
	// The record goes over the bus the push takes; a bus that does not
	// answer does not hold the revocation up (reported after it).
	var audit *authAudit
	var unreachable error
	if o.Push {
		audit, err = o.openAudit(ctx, command, func(err error) error { unreachable = err; return nil })
		if err != nil {
			return err
		}
		if audit != nil {
			defer audit.done()
		}
	}
	read := o.revokeTarget(d)
	before, err := recordValue(read)
	if err != nil {
		return err
	}
	now := o.Now()
	var revs []auth.Revocation
	switch {
	case o.ID != "":
		revs, err = d.RevokeAgent(rollout.AgentID(o.ID), o.KeepCurrent, now)
	case o.User != "":
		revs, err = d.RevokeUser(o.User, o.KeepCurrent, now)
	default:
		var rev auth.Revocation
		rev, err = d.RevokeKey(o.Key, now)
		revs = []auth.Revocation{rev}
	}
	if err != nil {
		return err
	}
	o.recordRevocation(audit, unreachable, read, before, revs)
	if o.Output == "json" {
		return revocationsJSON(ctx, o.AuthOptions, "auth revoke", o.Push, o.SysCreds, revs...)
	}
	return reportRevocations(ctx, o.AuthOptions, o.Push, o.SysCreds, revs...)
}

// revocationsJSON is reportRevocations with -o json: the push goes first,
// so that the one object printed says where it went; a failed push is an
// error after the files were written, as in text.
func revocationsJSON(ctx context.Context, o *AuthOptions, command string, push bool, sysCreds string, revs ...auth.Revocation) error {
	d := auth.Dir{Path: o.Dir}
	r := AuthRevokeReport{}
	res := WriteResult{Command: command, Written: true}
	var tokens []string
	for _, rev := range revs {
		r.Revoked = append(r.Revoked, AuthRevoked{Account: rev.Account, Keys: rev.Keys})
		res.Files = append(res.Files, filepath.Join(d.Path, rev.File))
		tokens = append(tokens, rev.AccountJWT)
	}
	res.Files = append(res.Files, filepath.Join(d.Path, auth.FileResolverConf))
	var pushErr error
	if push {
		r.Pushed, pushErr = pushAccounts(ctx, o, o.Global.ErrOut, sysCreds, tokens...)
	}
	res.Value = r
	if err := writeJSON(o.Global.Out, res); err != nil {
		return err
	}
	return pushErr
}

// reportRevocations says what was revoked and pushes the account JWTs.
func reportRevocations(ctx context.Context, o *AuthOptions, push bool, sysCreds string, revs ...auth.Revocation) error {
	d := auth.Dir{Path: o.Dir}
	var tokens []string
	for _, rev := range revs {
		fmt.Fprintf(o.Global.Out, "revoked %d key(s) in account %s:\n", len(rev.Keys), rev.Account)
		for _, k := range rev.Keys {
			fmt.Fprintf(o.Global.Out, "  %s\n", k)
		}
		fmt.Fprintf(o.Global.Out, "rewrote %s and %s\n", filepath.Join(d.Path, rev.File), filepath.Join(d.Path, auth.FileResolverConf))
		tokens = append(tokens, rev.AccountJWT)
	}
	if !push {
		fmt.Fprintf(o.Global.Out, "not pushed: running servers still accept these keys until 'fleetctl auth push' or a restart with the new resolver.conf\n")
		return nil
	}
	_, err := pushAccounts(ctx, o, o.Global.Out, sysCreds, tokens...)
	return err
}

// pushAccounts sends account JWTs to the server at --nats as the system
// user, saying so on w, and returns where each went.
func pushAccounts(ctx context.Context, o *AuthOptions, w io.Writer, sysCreds string, tokens ...string) ([]AuthPushed, error) {
	if sysCreds == "" {
		sysCreds = filepath.Join(o.Dir, auth.CredsFile(auth.UserSystem))
	}
	ctx, cancel := o.withTimeout(ctx)
	defer cancel()
	nc, err := natsutil.Connect(natsutil.ConnectOptions{
		URL: o.NATSURL, Name: "fleetctl auth", Creds: sysCreds, TLS: o.TLS,
		Log: o.connLog(),
	})
	if err != nil {
		return nil, fmt.Errorf("%w; the change is saved in %s: push it with 'fleetctl auth push' once the server answers", err, o.Dir)
	}
	defer nc.Close()
	var pushed []AuthPushed
	for _, token := range tokens {
		server, err := auth.Push(ctx, nc, token)
		if err != nil {
			return pushed, fmt.Errorf("%w; the change is saved in %s: push it with 'fleetctl auth push' once the server answers", err, o.Dir)
		}
		fmt.Fprintf(w, "pushed to %s (server %s)\n", nc.ConnectedUrlRedacted(), server)
		pushed = append(pushed, AuthPushed{URL: nc.ConnectedUrlRedacted(), Server: server})
	}
	return pushed, nil
}

// AuthPushOptions are the flags of "fleetctl auth push".
type AuthPushOptions struct {
	*AuthOptions
	SysCreds string
	// Output is text or json (a WriteResult, Value an AuthRevokeReport
	// with only pushed).
	Output string
}

func newAuthPushCmd(ao *AuthOptions) *cobra.Command {
	o := &AuthPushOptions{AuthOptions: ao}
	cmd := &cobra.Command{
		Use:   "push",
		Short: "Push the directory's account JWTs (and their revocations) to a running server",
		Long: `Send accounts/FLEET.jwt, accounts/AGENTS.jwt and accounts/SYS.jwt to the
server at --nats as the system user. 'auth revoke' does this itself; use push for servers it could
not reach, such as an edge site's leaf node, or after '--push=false'.`,
		Example: `  fleetctl auth push --dir /etc/fleetwave/auth --nats nats://edge-berlin:4222`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			return RunAuthPush(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.SysCreds, "sys-creds", "", "system account creds (default <dir>/creds/sys.creds)")
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunAuthPush is "fleetctl auth push".
func RunAuthPush(ctx context.Context, o *AuthPushOptions) error {
	d, err := o.dir()
	if err != nil {
		return err
	}
	tokens, err := d.AccountJWTs()
	if err != nil {
		return err
	}
	if o.Output != "json" {
		_, err = pushAccounts(ctx, o.AuthOptions, o.Global.Out, o.SysCreds, tokens...)
		return err
	}
	pushed, err := pushAccounts(ctx, o.AuthOptions, o.Global.ErrOut, o.SysCreds, tokens...)
	if err != nil {
		return err
	}
	return writeJSON(o.Global.Out, WriteResult{Command: "auth push", Written: true, Value: AuthRevokeReport{Pushed: pushed}})
}

// AuthListOptions are the flags of "fleetctl auth ls".
type AuthListOptions struct {
	*AuthOptions
	Output string
}

// AuthListReport is the JSON of "fleetctl auth ls -o json".
type AuthListReport struct {
	// Users are the users and agents issued from the directory, with
	// every key issued to each.
	Users []auth.Record `json:"users"`
}

func newAuthListCmd(ao *AuthOptions) *cobra.Command {
	o := &AuthListOptions{AuthOptions: ao}
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the users and agents issued from the directory, with their keys",
		Example: `  fleetctl auth ls --dir /etc/fleetwave/auth
  fleetctl auth ls -o json | jq -r '.users[] | select(.role == "agent") | .agent_id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			return RunAuthList(cmd.Context(), o)
		},
	}
	outputFlag(cmd, &o.Output)
	return cmd
}

// RunAuthList is "fleetctl auth ls".
func RunAuthList(_ context.Context, o *AuthListOptions) error {
	d, err := o.dir()
	if err != nil {
		return err
	}
	recs, err := d.Records()
	if err != nil {
		return err
	}
	if o.Output == "json" {
		if recs == nil {
			recs = []auth.Record{}
		}
		return writeJSON(o.Global.Out, AuthListReport{Users: recs})
	}
	tw := newTable(o.Global.Out)
	// The APPS column only once an agent speaks for apps beside the
	// default one: a fleet of one app sees the table it always had.
	withApps := slices.ContainsFunc(recs, func(r auth.Record) bool { return r.Apps != nil })
	if withApps {
		fmt.Fprintln(tw, "NAME\tROLE\tGROUP\tAPPS\tKEY\tISSUED\tREVOKED")
	} else {
		fmt.Fprintln(tw, "NAME\tROLE\tGROUP\tKEY\tISSUED\tREVOKED")
	}
	for _, r := range recs {
		name := r.Name
		if r.AgentID != "" {
			name = r.AgentID
		}
		for i, k := range r.Keys {
			revoked := "-"
			if !k.RevokedAt.IsZero() {
				revoked = age(o.Now(), k.RevokedAt) + " ago"
			}
			group := r.Group
			if group == "" {
				group = "-"
			}
			n := name
			if i > 0 {
				n = ""
			}
			// An agent's apps are its current key's: older keys may have
			// had others.
			apps := "-"
			switch {
			case r.Role != auth.RoleAgent:
			case i < len(r.Keys)-1:
				apps = ""
			case r.Apps != nil:
				apps = r.Apps.String()
				if len(apps) > 16 { // the whole list: auth ls -o json
					apps = apps[:15] + "…"
				}
			default:
				apps = "(default)"
			}
			if withApps {
				group += "\t" + apps
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n, r.Role, group, shortKey(k.UserKey),
				k.IssuedAt.UTC().Format(time.DateOnly), revoked)
		}
	}
	return tw.Flush()
}

// shortKey keeps a user key recognisable in 100 columns.
func shortKey(k string) string {
	if len(k) <= 14 {
		return k
	}
	return k[:8] + "…" + k[len(k)-4:]
}

// byteSize is an int64 flag of bytes written with binary units (256MiB,
// 10GiB, 1T: cliutil.Bytes), or -1 for unlimited.
type byteSize int64

func (b byteSize) String() string {
	if b < 0 {
		return "unlimited"
	}
	return cliutil.Bytes(b).String()
}

func (b *byteSize) Set(s string) error {
	if s = strings.TrimSpace(s); s == "-1" || strings.EqualFold(s, "unlimited") {
		*b = -1
		return nil
	}
	n, err := cliutil.ParseBytes(s)
	if err != nil {
		return errors.New("want a size such as 512MiB, 10GiB, or -1 for unlimited")
	}
	*b = byteSize(n)
	return nil
}

func (b *byteSize) Type() string { return "size" }

func limit(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	return strconv.FormatInt(n, 10)
}

// AuthUpgradeOptions are the flags of "fleetctl auth upgrade".
type AuthUpgradeOptions struct {
	*AuthOptions
	Finish   bool
	Push     bool
	SysCreds string
	Output   string
}

// AuthUpgradeReport is the JSON of "fleetctl auth upgrade -o json": the
// WriteResult fields and the upgrade's own beside them.
type AuthUpgradeReport struct {
	WriteResult
	Created  []string       `json:"created"`
	Reissued []AuthReissued `json:"reissued"`
	Skipped  []string       `json:"skipped_revoked"`
	// Regranted are the accounts whose exports (FLEET) or imports (AGENTS,
	// CONTROL) were re-signed to this version's, with the subjects added
	// and removed.
	Regranted []auth.GrantChange `json:"regranted"`
	// LegacyLeaf are edge sites' leaf users still valid in the FLEET
	// account, where they can do everything: each needs 'fleetctl edge
	// add' (with --name NAME) before --finish revokes the old key.
	LegacyLeaf []string `json:"legacy_leaf_users"`
	// StaleControllers are controller users whose creds in the directory
	// lack this version's controller grants: each needs 'fleetctl auth
	// user --name NAME --role controller'.
	StaleControllers []string `json:"stale_controllers,omitempty"`
	Revoked          []string `json:"revoked,omitempty"`
}

// AuthReissued is one agent or controller given new creds by an upgrade.
type AuthReissued struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	AgentID string `json:"agent_id,omitempty"`
	Group   string `json:"group,omitempty"`
	Creds   string `json:"creds"`
}

func newAuthUpgradeCmd(ao *AuthOptions) *cobra.Command {
	o := &AuthUpgradeOptions{AuthOptions: ao}
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Bring an older auth directory up to date: the AGENTS, CONTROL and EDGE accounts, this version's grants",
		Long: `Directories minted by fleetctl before the AGENTS and CONTROL accounts existed
keep every agent and controller in the FLEET account, where their replies can
name the buckets (docs/security.md). Upgrade in three steps:

  1. fleetctl auth upgrade       mints the missing accounts, adds their
                                 imports to the FLEET account JWT, rewrites
                                 resolver.conf, writes new creds for every
                                 agent (agents/<id>.creds: same id, same
                                 group) and controller (creds/<name>.creds)
                                 with a valid key, and pushes the account
                                 JWTs to --nats
  2. ship each new creds file to its host or controller and restart agentd
     or the controller there (the old creds keep working meanwhile)
  3. fleetctl auth upgrade --finish
                                 revokes every agent, controller and leaf key
                                 still in FLEET and pushes: anything still on
                                 its old creds is disconnected

A directory minted before a grant this version needs (the controller's
create, info and read of FLEET_AUDIT, the audit trail) keeps the older FLEET
exports and CONTROL imports: its controllers warn and run without the audit
trail. Step 1 also re-signs (keys/operator-signing.nk) the FLEET account's
exports and the AGENTS and CONTROL accounts' imports that differ from this
version's, keeping their users' signing keys, limits and revocations, lists
the subjects added (+) and removed (-), and pushes. No creds change: the
ones issued gain the grants once the servers have the account JWTs, and a
controller creates FLEET_AUDIT on its next start.

A directory minted before the EDGE account gets it (with FLEET's exports
for it); edge sites whose leaf user still lives in FLEET, where it can do
everything, are listed: add each again with 'fleetctl edge add --site S
--name NAME', ship the new creds and run 'fleetctl edge init --site S' at
the site, then revoke the old key ('fleetctl auth revoke --user NAME
--keep-current', or step 3, which revokes every leaf key left in FLEET).

A directory minted before apps (DESIGN §9) gains, the same way, the
exports and imports of every app beside the default one: no agent's creds
change (those minted without --apps stay the default app's). The
controller's writes of an app's group statuses and quarantine are in the
controller user's own JWT: step 1 names each controller whose creds in the
directory lack them; mint it again ('fleetctl auth user --name NAME --role
controller') before a second app rolls out.

Servers the push does not reach (edge leaf nodes) need 'fleetctl auth push'
or a restart with the new resolver.conf. Running step 1 again resumes an
interrupted run and otherwise does nothing (and writes nothing). Agents and
controllers whose every key is revoked get no new creds.`,
		Example: `  fleetctl auth upgrade --dir /etc/fleetwave/auth --nats nats://nats-a:4222
  fleetctl auth upgrade -o json --push=false | jq -r '.reissued[].creds'
  fleetctl auth upgrade --finish --nats nats://nats-a:4222`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			return RunAuthUpgrade(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.Finish, "finish", false, "revoke every agent, controller and leaf key still in the FLEET account (the last step)")
	f.BoolVar(&o.Push, "push", true, "push the changed account JWTs to the running servers (--nats)")
	f.StringVar(&o.SysCreds, "sys-creds", "", "system account creds for the push (default <dir>/creds/sys.creds)")
	writeOutputFlag(cmd, &o.Output)
	return cmd
}

// RunAuthUpgrade is "fleetctl auth upgrade".
func RunAuthUpgrade(ctx context.Context, o *AuthUpgradeOptions) error {
	d, err := o.dir()
	if err != nil {
		return err
	}
	progress := o.Global.Out // where push progress goes: not into JSON
	if o.Output == "json" {
		progress = o.Global.ErrOut
	}
	rep := AuthUpgradeReport{WriteResult: WriteResult{Command: "auth upgrade"}, Created: []string{}, Reissued: []AuthReissued{}, Skipped: []string{},
		Regranted: []auth.GrantChange{}, LegacyLeaf: []string{}}
	if o.Finish {
		rev, err := d.RevokeLegacy(o.Now())
		if err != nil {
			return err
		}
		if o.Output != "json" {
			return reportRevocations(ctx, o.AuthOptions, o.Push, o.SysCreds, rev)
		}
		rep.Revoked = rev.Keys
		rep.Written = true
		rep.Files = []string{filepath.Join(d.Path, rev.File), filepath.Join(d.Path, auth.FileResolverConf)}
		if err := writeJSON(o.Global.Out, rep); err != nil || !o.Push {
			return err
		}
		_, err = pushAccounts(ctx, o.AuthOptions, progress, o.SysCreds, rev.AccountJWT)
		return err
	}
	res, err := d.Upgrade()
	if err != nil {
		return err
	}
	rep.Created = append(rep.Created, res.Created...)
	for _, r := range res.Reissued {
		ri := AuthReissued{Name: r.Name, Role: string(r.Role), AgentID: r.AgentID, Group: r.Group,
			Creds: inDir(d, auth.CredsFile(r.Name))}
		if r.Role == auth.RoleAgent {
			ri.Creds = inDir(d, auth.AgentCredsFile(rollout.AgentID(r.AgentID)))
		}
		rep.Reissued = append(rep.Reissued, ri)
		rep.Files = append(rep.Files, ri.Creds)
	}
	rep.Regranted = append(rep.Regranted, res.Regranted...)
	for _, g := range res.Regranted {
		file, _ := auth.AccountFiles(g.Account)
		rep.Files = append(rep.Files, inDir(d, file))
	}
	if len(res.Regranted) > 0 {
		rep.Files = append(rep.Files, inDir(d, auth.FileResolverConf))
	}
	rep.Written = len(res.Created) > 0 || len(res.Reissued) > 0 || len(res.Regranted) > 0
	for _, r := range res.Skipped {
		rep.Skipped = append(rep.Skipped, r.Name)
	}
	for _, r := range res.LegacyLeaf {
		rep.LegacyLeaf = append(rep.LegacyLeaf, r.Name)
	}
	for _, r := range res.StaleControllers {
		rep.StaleControllers = append(rep.StaleControllers, r.Name)
	}
	if o.Output == "json" {
		if err := writeJSON(o.Global.Out, rep); err != nil {
			return err
		}
	} else {
		w := o.Global.Out
		if !rep.Written {
			fmt.Fprintf(w, "nothing to do: accounts %s, %s and %s exist, every agent and controller is in its own, and the grants are this version's\n",
				auth.AccountAgents, auth.AccountControl, auth.AccountEdge)
			legacyLeafUsers(w, res.LegacyLeaf)
			staleControllers(w, res.StaleControllers)
			return nil
		}
		for _, name := range res.Created {
			fmt.Fprintf(w, "minted account %s; FLEET now exports what it imports\n", name)
		}
		for _, g := range res.Regranted {
			what := "imports"
			if g.Account == auth.AccountFleet {
				what = "exports"
			}
			fmt.Fprintf(w, "re-signed account %s with this version's %s (users, limits and revocations kept):\n", g.Account, what)
			for _, subj := range g.Added {
				fmt.Fprintf(w, "  + %s\n", subj)
			}
			for _, subj := range g.Removed {
				fmt.Fprintf(w, "  - %s\n", subj)
			}
		}
		if len(res.Created) > 0 || len(res.Reissued) > 0 {
			fmt.Fprintf(w, "new creds for %d agent(s) and controller(s)\n", len(rep.Reissued))
			for _, r := range rep.Reissued {
				fmt.Fprintf(w, "  %-10s %s\n", r.Role, r.Creds)
			}
		}
		if len(res.Skipped) > 0 {
			fmt.Fprintf(w, "skipped %d whose every key is revoked\n", len(res.Skipped))
		}
		switch {
		case len(res.Reissued) > 0:
			fmt.Fprintf(w, "next: ship each new creds file and restart agentd or the controller there; then 'fleetctl auth upgrade --finish'\n")
		case len(res.Regranted) > 0:
			fmt.Fprintf(w, "next: the creds already issued gain the grants once the account JWTs reach the servers (pushed below, or 'fleetctl auth push');\n"+
				"      a controller that runs without %s creates it when it next starts\n", kv.StreamAudit)
		}
		legacyLeafUsers(w, res.LegacyLeaf)
		staleControllers(w, res.StaleControllers)
	}
	if !o.Push || len(res.Created) == 0 && len(res.Regranted) == 0 {
		return nil
	}
	tokens, err := d.AccountJWTs()
	if err != nil {
		return err
	}
	_, err = pushAccounts(ctx, o.AuthOptions, progress, o.SysCreds, tokens...)
	return err
}

// staleControllers names the controller users whose creds lack this
// version's grants (another app's group statuses and quarantine): the
// account JWTs cannot give them, their own JWT must.
func staleControllers(w io.Writer, recs []auth.Record) {
	if len(recs) == 0 {
		return
	}
	fmt.Fprintf(w, "%d controller(s) whose creds lack this version's grants (the group statuses and quarantine of apps other than the default; docs/security.md, \"Apps\"):\n", len(recs))
	for _, r := range recs {
		fmt.Fprintf(w, "  %s: fleetctl auth user --name %s --role controller, ship %s and restart that controller\n", r.Name, r.Name, auth.CredsFile(r.Name))
	}
	fmt.Fprintf(w, "  (a fleet with one app needs nothing: the old creds have every grant it uses)\n")
}

// legacyLeafUsers names the edge sites' leaf users still in the FLEET
// account, whatever else an upgrade did: each is a site that can do
// everything in FLEET until it is added again ("edge add").
func legacyLeafUsers(w io.Writer, recs []auth.Record) {
	if len(recs) == 0 {
		return
	}
	fmt.Fprintf(w, "%d edge site leaf user(s) still in account %s, where a leaf user can do everything (docs/deployment.md, \"Upgrading an edge site\"):\n",
		len(recs), auth.AccountFleet)
	for _, r := range recs {
		fmt.Fprintf(w, "  %s: fleetctl edge add --site SITE --name %s, ship the creds, and at the site: fleetctl edge init --site SITE\n", r.Name, r.Name)
	}
	fmt.Fprintf(w, "  then 'fleetctl auth revoke --user NAME --keep-current' (or 'fleetctl auth upgrade --finish') revokes the old key\n")
}
