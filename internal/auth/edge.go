package auth

import (
	"errors"
	"fmt"

	"github.com/nats-io/jwt/v2"

	"github.com/fleetwave/fleetwave/pkg/kv"
)

// Edge sites. A site's leaf node attaches to the hub as a user of the EDGE
// account, which holds nothing but imports from FLEET: what a site's agents
// and its plan mirror need, and nothing else (DESIGN §6; docs/security.md,
// "Edge sites"). Its own JetStream API reaches FLEET only as the reset of
// the sites' durable consumers on the plan stream, never as a consumer
// create: a consumer's deliver subject is written in the request's body,
// out of reach of any permission, and nats-server refuses only a deliver
// subject that loops into the same stream, so a leaf allowed to create one
// could have plan messages delivered onto fleet_config, the lease or any
// agent's heartbeat subject. The hub's admin creates each site's consumer
// (kv.EnsureEdgeConsumer, "fleetctl edge add").
//
// A second wall: each site's leaf user carries permissions for its own
// site only (EdgePermissions), and the hub enforces a leaf user's
// permissions on the leaf connection, whatever the site's own server does.

// edgeExports are what FLEET shares with the EDGE account only, beside the
// agents' heartbeat service (fleetExports), which EDGE imports too.
func edgeExports() []jwt.Export {
	svc := func(name, subject string) jwt.Export {
		return jwt.Export{Name: name, Subject: jwt.Subject(subject), Type: jwt.Service}
	}
	return []jwt.Export{
		// A mirror using a durable consumer only resets it (to the ack
		// floor, or to a sequence: a replay to its own deliver subject) and
		// answers its flow control, which is how the consumer learns what
		// the mirror stored (AckFlowControl).
		svc("edge consumer reset", "$JS.API.CONSUMER.RESET."+kv.PlanStream+".*"),
		svc("edge flow control", edgeFlowControl("*")),
		{Name: "edge plan deliveries", Subject: jwt.Subject(kv.EdgeDeliverPrefix + "*"), Type: jwt.Stream},
	}
}

// edgeFlowControl is the subject a consumer on the plan stream named
// consumer takes flow control answers on (nats-server's default, v1 form
// $JS.FC.<stream>.<consumer>.<id>; a hub running with the js_ack_fc_v2
// feature flag uses another form, which no edge user is granted).
func edgeFlowControl(consumer string) string {
	return "$JS.FC." + kv.PlanStream + "." + consumer + ".*"
}

// EdgeImports are the EDGE account's imports, from the FLEET account fleet,
// under the same subjects: the agents' heartbeat service, the sites'
// consumers' reset and flow control, their deliveries.
func EdgeImports(fleet string) jwt.Imports {
	var out jwt.Imports
	for _, e := range fleetExports() {
		if e.Subject == hbDefault || e.Subject == hbApps {
			out.Add(&jwt.Import{Name: e.Name, Subject: e.Subject, Account: fleet, Type: e.Type})
		}
	}
	for _, e := range edgeExports() {
		out.Add(&jwt.Import{Name: e.Name, Subject: e.Subject, Account: fleet, Type: e.Type})
	}
	return out
}

// EdgePermissions are a site's leaf user's grants, enforced by the hub on
// the leaf connection. A leaf user's publish permissions are what the site
// may send into the hub, its subscribe permissions what the hub delivers to
// the site:
//
//   - send: heartbeats (any agent's, of any app: the site carries all of
//     its agents', whose ids and apps the hub does not tie to sites), the reset of its own
//     consumer as its plan mirror sends it ($JS.<hub domain>.API…, any hub
//     domain) and flow control answers to its own consumer;
//   - receive: its own consumer's deliveries, the replies of its mirror's
//     resets ($JSC.R.…) and of "fleetctl edge init"'s
//     (kv.EdgeInboxPrefix), and service replies (_R_.…: the heartbeats'
//     acknowledgements).
//
// nats-server lets service replies (_R_.…) and acknowledgements ($JS.ACK.…)
// in from a leaf whatever its permissions; the EDGE account imports
// neither, so they reach nothing in FLEET.
func EdgePermissions(site string) jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add(
		hbDefault,
		hbApps,
		"$JS.*.API.CONSUMER.RESET."+kv.PlanStream+"."+kv.EdgeConsumer(site),
		edgeFlowControl(kv.EdgeConsumer(site)),
	)
	p.Sub.Allow.Add(
		kv.EdgeDeliverSubject(site),
		"$JSC.R.>",
		kv.EdgeInboxPrefix(site)+".>",
		"_R_.>",
	)
	return p
}

// UserEdge is the default name of site's leaf user: edge-<site>, the name
// the docs gave the leaf users of older fleetwave, so that minting the
// site's new credentials is a rotation of its old ones.
func UserEdge(site string) string { return "edge-" + site }

// Edge mints the leaf user of edge site site: EdgePermissions, leaf
// connections only.
func (is Issuer) Edge(name, site string) (User, error) {
	if err := kv.ValidateEdgeSite(site); err != nil {
		return User{}, err
	}
	return is.user(name, RoleLeaf, func(u *jwt.UserClaims) {
		u.Permissions = EdgePermissions(site)
		u.Tags.Add("site:" + site)
	})
}

// IssueEdge mints the leaf user name (default UserEdge(site)) of edge site
// site in the EDGE account and writes its creds to out (default
// creds/<name>.creds). Minting again adds a key (a rotation); a leaf user
// minted by an older fleetwave in the FLEET account and given the same name
// is moved to EDGE, its old key kept valid until revoked ("auth revoke
// --user NAME --keep-current"). The site's consumer at the hub is
// kv.EnsureEdgeConsumer's.
func (d Dir) IssueEdge(site, name, out string) (User, string, error) {
	if err := kv.ValidateEdgeSite(site); err != nil {
		return User{}, "", err
	}
	if name == "" {
		name = UserEdge(site)
	}
	if !namePattern(name) {
		return User{}, "", fmt.Errorf("user name %q: use 1-64 of a-z 0-9 - _", name)
	}
	is, err := d.issuer(AccountEdge)
	if err != nil {
		return User{}, "", err
	}
	u, err := is.Edge(name, site)
	if err != nil {
		return User{}, "", err
	}
	rec, err := d.loadRecord(userRecordFile(name))
	switch {
	case errors.Is(err, ErrUnknown):
		rec = Record{V: 1, Name: name, Role: RoleLeaf, Account: AccountEdge}
	case err != nil:
		return User{}, "", err
	case rec.Role != RoleLeaf:
		return User{}, "", fmt.Errorf("user %q has role %s; give the site's leaf user another name (--name)", name, rec.Role)
	case rec.Site != "" && rec.Site != site:
		return User{}, "", fmt.Errorf("user %q is the leaf user of site %s; give site %s's another name (--name), or revoke it first", name, rec.Site, site)
	}
	rec.moveTo(AccountEdge)
	rec.Site = site
	if out == "" {
		out = CredsFile(name)
	}
	return u, out, d.saveIssued(rec, userRecordFile(name), u, out)
}
