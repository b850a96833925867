package auth

import (
	"fmt"
	"time"

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
	// RoleController runs the controller: JetStream administration, writes
	// to group statuses, stats and events; never the plan spec or config.
	RoleController Role = "controller"
	// RoleAdmin is fleetctl and the nats CLI: everything in the account.
	RoleAdmin Role = "admin"
	// RoleLeaf connects an edge site's leaf node to the hub.
	RoleLeaf Role = "leaf"
)

// ParseRole accepts the roles "fleetctl auth user" may mint (agents have
// their own command).
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleController, RoleAdmin, RoleLeaf:
		return r, nil
	}
	return "", fmt.Errorf("role %q: want controller, admin or leaf", s)
}

// What the FLEET account shares with the AGENTS account: the only ways an
// agent reaches anything in FLEET. Services, so that every request crosses
// with its reply subject replaced by one the server makes up (_R_…): across a
// service import the reply lives in the importer's account, so no reply an
// agent writes can name a FLEET subject. (Inside one account the server does
// not check a request's reply subject against the requester's permissions,
// and JetStream answers into whatever reply it is given: that is how one
// agent's credentials once overwrote fleet_config, the plan spec and the
// leader lease.) The plan's changes cross as a stream, FLEET to AGENTS only.
//
// A response that lands in AGENTS on a subject AGENTS imports as a service
// (a reply aimed at fleet.hb.<g>.<other id>) does not travel on into FLEET:
// JetStream answers from internal clients that skip service-import
// subscriptions, a response that arrives over a route is never re-imported,
// and one that comes back over a leaf connection is a cycle through the same
// export. internal/auth/attack_test.go proves each case.
func planDirectGet(key string) string {
	return "$JS.API.DIRECT.GET." + kv.PlanStream + "." + kv.KeySubject(kv.BucketPlan, key)
}

// FleetExports are the FLEET account's exports (see above).
func FleetExports() jwt.Exports {
	return jwt.Exports{
		{Name: "agent heartbeats", Subject: jwt.Subject(heartbeat.SubjectPrefix + "*.*"), Type: jwt.Service},
		{Name: "plan spec", Subject: jwt.Subject(planDirectGet(kv.KeySpec)), Type: jwt.Service},
		{Name: "group status", Subject: jwt.Subject(planDirectGet(kv.GroupKey("*"))), Type: jwt.Service},
		{Name: "plan changes", Subject: jwt.Subject(kv.PlanRepublish + ">"), Type: jwt.Stream},
	}
}

// AgentsImports are the AGENTS account's imports: each of FleetExports, from
// the FLEET account fleet, under the same subject.
func AgentsImports(fleet string) jwt.Imports {
	var out jwt.Imports
	for _, e := range FleetExports() {
		out.Add(&jwt.Import{Name: e.Name, Subject: e.Subject, Account: fleet, Type: e.Type})
	}
	return out
}

// Agent limits: what a well-behaved agentd needs, with room to spare.
const (
	agentMaxSubs    = 16       // 2 plan subjects + the reply mux, per connection
	agentMaxPayload = 64 << 10 // the heartbeat stream's own message cap
)

// AgentPermissions are an agent's grants inside the AGENTS account
// (DESIGN §6): publish its own heartbeat subject and the direct gets of the
// plan keys "spec" and its group's; subscribe to the two republished plan
// subjects and its own inbox. Everything else is denied by omission: other
// agents' subjects, other groups' plan keys, the imports' other subjects.
// The account boundary does the rest: nothing else of FLEET is reachable at
// all. No stream info (agentd reads with bare direct gets) and no
// permission to answer requests (an agent serves none).
func AgentPermissions(id rollout.AgentID, group string) jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add(
		heartbeat.SubjectFor(group, id),
		planDirectGet(kv.KeySpec),
		planDirectGet(kv.GroupKey(group)),
	)
	p.Sub.Allow.Add(
		kv.PlanRepublish+kv.KeySpec,
		kv.PlanRepublish+kv.GroupKey(group),
		kv.AgentInboxPrefix(string(id))+".>",
	)
	return p
}

// RolePermissions are the grants of the non-agent roles.
func RolePermissions(r Role) jwt.Permissions {
	var p jwt.Permissions
	switch r {
	case RoleController:
		// The JetStream API (ensure the stream and buckets, consumers,
		// direct gets, watches and their flow control), the keys the
		// controller writes, and events. Not $KV.fleet_plan.spec and not
		// $KV.fleet_config: who changes the target version is the admin.
		p.Pub.Allow.Add(
			"$JS.API.>", "$JS.FC.>", "$JS.ACK.>",
			"$KV."+kv.BucketPlan+"."+kv.GroupKey(">"),
			"$KV."+kv.BucketStats+".>",
			kv.EventsPrefix+">",
		)
		p.Sub.Allow.Add("_INBOX.>", "fleet.>")
		p.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
	case RoleAdmin, RoleLeaf:
		// Unrestricted inside the FLEET account: the account is the
		// boundary. A leaf connection carries the site's agents' traffic,
		// its mirror's JetStream API calls and their replies.
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
