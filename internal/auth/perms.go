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

// Agent limits: what a well-behaved agentd needs, with room to spare.
const (
	agentMaxSubs    = 16       // 2 plan subjects + the reply mux, per connection
	agentMaxPayload = 64 << 10 // the heartbeat stream's own message cap
)

// AgentPermissions are an agent's grants (DESIGN §6): publish its own
// heartbeat subject and the two JetStream API calls that read its plan keys
// (the plan stream's info and a direct get of "spec" and of its group's
// key); subscribe to the two republished plan subjects and its own inbox.
// Everything else is denied by omission: other agents' subjects, other
// groups' plan keys, writes to any bucket, fleet_config, fleet_stats,
// consumers, stream administration, events.
func AgentPermissions(id rollout.AgentID, group string) jwt.Permissions {
	directGet := "$JS.API.DIRECT.GET." + kv.PlanStream + ".$KV." + kv.BucketPlan + "."
	var p jwt.Permissions
	p.Pub.Allow.Add(
		heartbeat.SubjectFor(group, id),
		"$JS.API.STREAM.INFO."+kv.PlanStream,
		directGet+kv.KeySpec,
		directGet+kv.GroupKey(group),
	)
	p.Sub.Allow.Add(
		kv.PlanRepublish+kv.KeySpec,
		kv.PlanRepublish+kv.GroupKey(group),
		kv.AgentInboxPrefix(string(id))+".>",
	)
	p.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
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
