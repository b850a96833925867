package auth

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/jwt/v2"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Role is what a FLEET user is for; it fixes the user's grants.
type Role string

// Roles.
const (
	// RoleAgent is one host's agentd: DESIGN §6, nothing more.
	RoleAgent Role = "agent"
	// RoleController runs the controller, in the CONTROL account: reads
	// the plan, the config, the inventory and the audit trail, writes group statuses,
	// stats, the lease and events; never the plan spec or the config.
	RoleController Role = "controller"
	// RoleAdmin is fleetctl and the nats CLI: everything in the account.
	RoleAdmin Role = "admin"
	// RoleLeaf connects an edge site's leaf node to the hub: a user of the
	// EDGE account with its site's grants (EdgePermissions, IssueEdge).
	RoleLeaf Role = "leaf"
)

// ParseRole accepts the roles "fleetctl auth user" may mint (agents have
// their own command, edge sites' leaf users theirs: "fleetctl edge add").
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleController, RoleAdmin:
		return r, nil
	case RoleLeaf:
		return "", fmt.Errorf("%w: role leaf: a leaf user belongs to one edge site, in the EDGE account; mint it with 'fleetctl edge add --site NAME' (docs/deployment.md, \"Edge sites\")", ErrEdgeRole)
	}
	return "", fmt.Errorf("role %q: want controller or admin (a site's leaf user: 'fleetctl edge add')", s)
}

// What the FLEET account shares, and with whom: the only ways an agent (the
// AGENTS account) or a controller (the CONTROL account) reaches anything in
// FLEET. Services, so that every request crosses with its reply subject
// replaced by one the server makes up (_R_…): across a service import the
// reply lives in the importer's account, so no reply subject a host or a
// controller writes can name a FLEET subject. (Inside one account the server
// does not check a request's reply subject against the requester's
// permissions, and JetStream answers into whatever reply it is given: that
// is how one agent's credentials once overwrote fleet_config, the plan spec
// and the leader lease, and how the controller's could copy any value it
// may write onto the spec.) Plan changes and the inventory cross as
// streams, out of FLEET only.
//
// A response that lands in an importing account on a subject it imports as
// a service (a reply aimed at fleet.hb.<g>.<other id>) does not travel on
// into FLEET: JetStream answers from internal clients that skip
// service-import subscriptions, a response that arrives over a route is
// never re-imported, and one that comes back over a leaf connection is a
// cycle through the same export. internal/attacktest proves it.
type export struct {
	jwt.Export
	agents, control bool
}

// The heartbeat subjects of the default app (fleet.hb.<g>.<id>) and of
// every other app (fleet.hb.<app>.<g>.<id>).
const (
	hbDefault = heartbeat.SubjectPrefix + "*.*"
	hbApps    = heartbeat.SubjectPrefix + "*.*.*"
)

func planDirectGet(key string) string {
	return "$JS.API.DIRECT.GET." + kv.PlanStream + "." + kv.KeySubject(kv.BucketPlan, key)
}

// fleetStreams are the streams a controller may create and inspect.
var fleetStreams = []string{kv.StreamHB, kv.StreamAudit, kv.StreamEvents, kv.StreamOf(kv.BucketConfig), kv.PlanStream, kv.StreamOf(kv.BucketStats)}

func fleetExports() []export {
	svc := func(name, subject string, agents, control bool) export {
		return export{jwt.Export{Name: name, Subject: jwt.Subject(subject), Type: jwt.Service}, agents, control}
	}
	out := []export{
		svc("agent heartbeats", hbDefault, true, false),
		svc("plan spec", planDirectGet(kv.KeySpec), true, true),
		svc("group status", planDirectGet(kv.GroupKey("*")), true, true),
		{jwt.Export{Name: "plan changes", Subject: jwt.Subject(kv.PlanRepublish + ">"), Type: jwt.Stream}, true, true},
		// Every app but the default one (DESIGN §9, pkg/kv.AppNS): its
		// heartbeats fleet.hb.<app>.<g>.<id> (one token more than the
		// default app's, so the two exports never match the same subject),
		// and the direct gets of <app>.spec and <app>.group.<g>. Each
		// agent's own grants name its apps, group and id exactly
		// (AgentPermissions); the wildcards say only what the account may
		// reach. What else they match, and why that is safe:
		// docs/security.md, "Apps" (TestFleetExportsOverlapOnlyWhereSafe).
		svc("app heartbeats", hbApps, true, false),
		svc("app plan spec", planDirectGet("*."+kv.KeySpec), true, true),
		svc("app group status", planDirectGet("*."+kv.GroupKey("*")), true, true),
		// The groups and their selectors (issue 28, kv.KeyGroups), which
		// agents minted with --may-join read to choose their group by
		// their labels; the leader writes them. "*.groups" also matches
		// the default app's status of a group named "groups"
		// ("group.groups"), which the group status export above already
		// shares.
		svc("groups", planDirectGet(kv.KeyGroups), true, true),
		svc("app groups", planDirectGet("*."+kv.KeyGroups), true, true),
		// The controller's: read the config, the inventory and the stats;
		// write group statuses, the quarantine list, stats and the lease,
		// and events; create
		// the stream and buckets when they do not exist. Never the spec or
		// the config, never a consumer (a consumer's deliver subject is
		// written in the request's body, out of reach of any permission,
		// and would publish stored messages onto any subject in FLEET),
		// never a stream update or delete.
		svc("config", "$JS.API.DIRECT.GET."+kv.StreamOf(kv.BucketConfig)+"."+kv.KeySubject(kv.BucketConfig, kv.KeyConfig), false, true),
		svc("stats", "$JS.API.DIRECT.GET."+kv.StreamOf(kv.BucketStats)+".>", false, true),
		svc("group status writes", kv.KeySubject(kv.BucketPlan, kv.GroupKey("*")), false, true),
		svc("quarantine writes", kv.KeySubject(kv.BucketPlan, kv.KeyQuarantine), false, true),
		// The other apps' group statuses and quarantine lists; never
		// <app>.spec: who changes an app's target is the admin.
		svc("app group status writes", kv.KeySubject(kv.BucketPlan, "*."+kv.GroupKey("*")), false, true),
		svc("app quarantine writes", kv.KeySubject(kv.BucketPlan, "*."+kv.KeyQuarantine), false, true),
		svc("groups writes", kv.KeySubject(kv.BucketPlan, kv.KeyGroups), false, true),
		svc("app groups writes", kv.KeySubject(kv.BucketPlan, "*."+kv.KeyGroups), false, true),
		svc("stats writes", kv.KeySubject(kv.BucketStats, ">"), false, true),
		svc("events", kv.EventsPrefix+"*", false, true),
		{jwt.Export{Name: "inventory", Subject: jwt.Subject(kv.InventoryRepublish + ">"), Type: jwt.Stream}, false, true},
	}
	// Batched direct gets answer with many messages: the scan of the
	// inventory, the last value of every key of the plan, the revisions of
	// the spec and the config still in their history (the
	// unattributed-change check, kv.Fleet.Revisions), and the timeline,
	// FLEET_AUDIT and FLEET_EVENTS (kv.ReadTimeline: batches only, no
	// single gets). The timeline is the controller's to read (its
	// dashboard, its webhooks, the unattributed-change check), never an
	// agent's: it names every operator and every group.
	for _, st := range []string{kv.StreamHB, kv.PlanStream, kv.StreamOf(kv.BucketConfig), kv.StreamAudit, kv.StreamEvents} {
		batch := svc("batch read "+st, "$JS.API.DIRECT.GET."+st, false, true)
		batch.ResponseType = jwt.ResponseTypeStream
		out = append(out, batch)
	}
	// The account's JetStream info (limits and usage): nats.go asks for
	// it before it creates a bucket.
	out = append(out, svc("account info", "$JS.API.INFO", false, true))
	for _, st := range fleetStreams {
		out = append(out,
			svc("stream info "+st, "$JS.API.STREAM.INFO."+st, false, true),
			svc("stream create "+st, "$JS.API.STREAM.CREATE."+st, false, true))
	}
	return out
}

// FleetExports are the FLEET account's exports (see above), and those only
// the EDGE account imports (edge.go).
func FleetExports() jwt.Exports {
	var out jwt.Exports
	for _, e := range fleetExports() {
		out.Add(&e.Export)
	}
	for _, e := range edgeExports() {
		out.Add(&e)
	}
	return out
}

// AgentsImports are the AGENTS account's imports, from the FLEET account
// fleet, under the same subjects.
func AgentsImports(fleet string) jwt.Imports {
	return imports(fleet, func(e export) bool { return e.agents })
}

// ControlImports are the CONTROL account's imports, from the FLEET account
// fleet, under the same subjects.
func ControlImports(fleet string) jwt.Imports {
	return imports(fleet, func(e export) bool { return e.control })
}

func imports(fleet string, take func(export) bool) jwt.Imports {
	var out jwt.Imports
	for _, e := range fleetExports() {
		if take(e) {
			out.Add(&jwt.Import{Name: e.Name, Subject: e.Subject, Account: fleet, Type: e.Type})
		}
	}
	return out
}

// Agent limits: what a well-behaved agentd needs, with room to spare.
const (
	agentMaxSubs    = 16       // 2 plan subjects + the reply mux, per connection
	agentSubsPerApp = 8        // 2 plan subjects for each further app, with the same room
	agentMaxPayload = 64 << 10 // the heartbeat stream's own message cap
)

// agentSubs is the subscription limit of an agent granted g: what the
// default app alone needed before apps, and room for each further app (every
// app there may be when g is Any).
func agentSubs(g AppGrant) int64 {
	n := len(g.Apps)
	if g.Any {
		n = rollout.MaxApps - 1
	}
	return agentMaxSubs + int64(agentSubsPerApp*n)
}

// AgentPermissions are an agent's grants inside the AGENTS account
// (DESIGN §6) for the fleet's default app: publish its own heartbeat subject
// and the direct gets of the plan keys "spec" and its group's; subscribe to
// the two republished plan subjects and its own inbox. Everything else is
// denied by omission: other agents' subjects, other groups' plan keys, the
// imports' other subjects, every other app's. The account boundary does the
// rest: nothing else of FLEET is reachable at all. No stream info (agentd
// reads with bare direct gets) and no permission to answer requests (an
// agent serves none). These are, subject for subject, the grants of every
// agent minted before apps existed.
func AgentPermissions(id rollout.AgentID, group string) jwt.Permissions {
	return AgentAppPermissions(id, group, AppGrant{})
}

// AgentAppPermissions are an agent's grants for the apps of g: for each, the
// same three publishes and two subscriptions as AgentPermissions, in that
// app's namespace (kv.AppNS: <app>.spec, <app>.group.<group>,
// fleet.hb.<app>.<group>.<id>); its own group and id always. With g.Any the
// app token is a wildcard, except that "*.spec" would also name the default
// app's status of a group called "spec" (kv.GroupKey("spec") is
// "group.spec"): that one is denied unless it is the agent's own group.
func AgentAppPermissions(id rollout.AgentID, group string, g AppGrant) jwt.Permissions {
	var p jwt.Permissions
	add := func(ns kv.AppNS, grp string) {
		p.Pub.Allow.Add(ns.HBSubject(grp, id), planDirectGet(ns.Spec()), planDirectGet(ns.Group(grp)))
		p.Sub.Allow.Add(kv.PlanRepublish+ns.Spec(), kv.PlanRepublish+ns.Group(grp))
		if len(g.Join) == 0 {
			return
		}
		// The groups it may move to by its labels (issue 28): read the
		// groups key, and in each such group what it may in its own.
		p.Pub.Allow.Add(planDirectGet(ns.Groups()))
		p.Sub.Allow.Add(kv.PlanRepublish + ns.Groups())
		for _, j := range g.Join {
			p.Pub.Allow.Add(ns.HBSubject(j, id), planDirectGet(ns.Group(j)))
			p.Sub.Allow.Add(kv.PlanRepublish + ns.Group(j))
		}
	}
	if !g.NoDefault || g.Any {
		add(kv.AppNS{}, group)
	}
	switch {
	case g.Any:
		add(kv.OtherNS("*"), group) // the app token a wildcard: any app's subjects
		if other := kv.GroupKey(kv.KeySpec); group != kv.KeySpec && !g.mayJoin(kv.KeySpec) {
			p.Pub.Deny.Add(planDirectGet(other))
			p.Sub.Deny.Add(kv.PlanRepublish + other)
		}
		// "*.groups" likewise names the status of a group "groups".
		if other := kv.GroupKey(kv.KeyGroups); len(g.Join) > 0 && group != kv.KeyGroups && !g.mayJoin(kv.KeyGroups) {
			p.Pub.Deny.Add(planDirectGet(other))
			p.Sub.Deny.Add(kv.PlanRepublish + other)
		}
	default:
		for _, app := range g.Apps {
			ag := group
			if other, ok := g.Groups[app]; ok {
				ag = other
			}
			add(kv.OtherNS(app), ag)
		}
	}
	p.Sub.Allow.Add(kv.AgentInboxPrefix(string(id)) + ".>")
	return p
}

// AppGrant says which apps an agent's credentials speak for (DESIGN §9).
// The zero value is the fleet's default app only: the grants of an agent
// minted before apps existed, so a fleet that names its app keeps every
// host's credentials.
type AppGrant struct {
	// Apps are the apps other than the fleet's default one, by name
	// (rollout.ValidateAppName).
	Apps []string `json:"apps,omitempty"`
	// Groups are the groups of those of Apps the host runs in another
	// group than the agent's own (app name → group): an app's group is its
	// own update.yaml's on the host. The default app's is the agent's.
	Groups map[string]string `json:"groups,omitempty"`
	// NoDefault leaves the default app out: a host that runs only other
	// apps.
	NoDefault bool `json:"no_default,omitempty"`
	// DefaultName is the default app's name as the minter knew it, for
	// display only: its subjects carry no name.
	DefaultName string `json:"default_name,omitempty"`
	// Any is every app the fleet has or will have: the default app's
	// subjects and every other app's, by wildcard (still only the agent's
	// own group and id).
	Any bool `json:"any,omitempty"`
	// Join are the groups the host may move to by its labels (issue 28:
	// a group's selector takes it), besides its own; "*" alone is any
	// group. In each, for every app granted, it may heartbeat as itself
	// and read (never write) the group's status; and it may read the
	// groups key (the groups and their selectors). fleetctl auth agent
	// --may-join.
	Join []string `json:"join,omitempty"`
}

// JoinAny is Join's "any group".
const JoinAny = "*"

// mayJoin reports whether g lets the agent move to group.
func (g AppGrant) mayJoin(group string) bool {
	return slices.Contains(g.Join, JoinAny) || slices.Contains(g.Join, group)
}

// validateJoin checks Join: valid, distinct group names, or "*" alone.
func (g AppGrant) validateJoin() error {
	if len(g.Join) > rollout.MaxGroups {
		return fmt.Errorf("%w: may join %d groups, a config has at most %d ('*' is any)", ErrAppGrant, len(g.Join), rollout.MaxGroups)
	}
	for i, j := range g.Join {
		if j == JoinAny {
			if len(g.Join) > 1 {
				return fmt.Errorf("%w: may join '*' (any group) stands alone", ErrAppGrant)
			}
			continue
		}
		if err := rollout.ValidateGroupName(j); err != nil {
			return fmt.Errorf("%w: may join: %w", ErrAppGrant, err)
		}
		if slices.Contains(g.Join[:i], j) {
			return fmt.Errorf("%w: may join %q named twice", ErrAppGrant, j)
		}
	}
	return nil
}

// Validate checks g: valid, distinct app names, at most rollout.MaxApps
// apps, at least one app, nothing beside Any.
func (g AppGrant) Validate() error {
	if err := g.validateJoin(); err != nil {
		return err
	}
	if g.Any {
		if len(g.Apps) > 0 || g.NoDefault || len(g.Groups) > 0 {
			return fmt.Errorf("%w: '*' (any app) stands alone; it already grants %s", ErrAppGrant, strings.Join(g.Apps, ", "))
		}
		return nil
	}
	if g.NoDefault && len(g.Apps) == 0 {
		return fmt.Errorf("%w: no app granted", ErrAppGrant)
	}
	if n := len(g.Apps) + 1; n > rollout.MaxApps {
		return fmt.Errorf("%w: %d apps, a fleet has at most %d", ErrAppGrant, n, rollout.MaxApps)
	}
	for i, app := range g.Apps {
		if err := rollout.ValidateAppName(app); err != nil {
			return fmt.Errorf("%w: %w", ErrAppGrant, err)
		}
		if slices.Contains(g.Apps[:i], app) || app == g.DefaultName && !g.NoDefault {
			return fmt.Errorf("%w: app %q named twice", ErrAppGrant, app)
		}
	}
	if g.DefaultName != "" {
		if err := rollout.ValidateAppName(g.DefaultName); err != nil {
			return fmt.Errorf("%w: default app: %w", ErrAppGrant, err)
		}
	}
	for app, group := range g.Groups {
		if !slices.Contains(g.Apps, app) {
			return fmt.Errorf("%w: a group for app %q, which is not granted (the default app's group is the agent's)", ErrAppGrant, app)
		}
		if err := rollout.ValidateGroupName(group); err != nil {
			return fmt.Errorf("%w: app %s: %w", ErrAppGrant, app, err)
		}
	}
	return nil
}

// DefaultOnly reports whether g is the default app alone (today's grants,
// with or without Join).
func (g AppGrant) DefaultOnly() bool { return !g.Any && !g.NoDefault && len(g.Apps) == 0 }

// Plain reports whether g is the zero grant's: the default app alone, in
// its own group alone.
func (g AppGrant) Plain() bool { return g.DefaultOnly() && len(g.Join) == 0 }

// String names the apps of g: "*", or the names, the default app first
// ("(default)" when its name is not known), each app in another group than
// the agent's as app:group.
func (g AppGrant) String() string {
	if g.Any {
		return "*"
	}
	var names []string
	if !g.NoDefault {
		d := g.DefaultName
		if d == "" {
			d = "(default)"
		}
		names = append(names, d)
	}
	for _, app := range g.Apps {
		if group, ok := g.Groups[app]; ok {
			app += ":" + group
		}
		names = append(names, app)
	}
	return strings.Join(names, ",")
}

// RolePermissions are the grants of the non-agent roles.
func RolePermissions(r Role) jwt.Permissions {
	var p jwt.Permissions
	switch r {
	case RoleController:
		// A user of CONTROL, whose imports are the boundary (ControlImports:
		// no consumer, no stream update, neither the spec nor the config);
		// these grants say the same once more: the JetStream API it
		// imports, the keys the controller writes, events; replies and the
		// republished plan and inventory. Not $KV.fleet_plan.spec and not
		// $KV.fleet_config: who changes the target version is the admin.
		p.Pub.Allow.Add(
			"$JS.API.>",
			kv.KeySubject(kv.BucketPlan, kv.GroupKey("*")),
			kv.KeySubject(kv.BucketPlan, kv.KeyQuarantine),
			kv.KeySubject(kv.BucketPlan, "*."+kv.GroupKey("*")),
			kv.KeySubject(kv.BucketPlan, "*."+kv.KeyQuarantine),
			kv.KeySubject(kv.BucketPlan, kv.KeyGroups),
			kv.KeySubject(kv.BucketPlan, "*."+kv.KeyGroups),
			kv.KeySubject(kv.BucketStats, ">"),
			kv.EventsPrefix+"*",
		)
		p.Sub.Allow.Add("_INBOX.>", kv.PlanRepublish+">", kv.InventoryRepublish+">")
	case RoleAdmin:
		// Unrestricted inside the FLEET account: the account is the
		// boundary.
	case RoleLeaf:
		// Nothing: a leaf user's grants are its site's (EdgePermissions).
		p.Pub.Deny.Add(">")
		p.Sub.Deny.Add(">")
	}
	return p
}

// connectionTypes pins how each role may connect: an agent's or a
// controller's credentials cannot be used to attach a leaf node, and a leaf
// credential cannot be used as a client.
func connectionTypes(r Role) []string {
	switch r {
	case RoleLeaf:
		return []string{jwt.ConnectionTypeLeafnode}
	case RoleAdmin:
		return nil // fleetctl, the nats CLI, websockets: any
	default:
		return []string{jwt.ConnectionTypeStandard}
	}
}
