package kv

import (
	"strings"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
)

// Every stream, bucket, key and subject name of the bus lives here.
const (
	// StreamHB holds the last heartbeat of every agent: it is the inventory.
	StreamHB = "FLEET_HB"
	// HBSubjects is the heartbeat subject space, fleet.hb.<group>.<agent_id>.
	HBSubjects = heartbeat.SubjectPrefix + ">"
	// InventoryRepublish is where the heartbeat stream republishes every
	// heartbeat it stores, as fleet.inventory.<group>.<agent_id>: the
	// controllers follow the inventory with a core subscription, not a
	// consumer (the CONTROL account may create none).
	InventoryRepublish = "fleet.inventory."

	// BucketConfig holds the rollout config under KeyConfig.
	BucketConfig = "fleet_config"
	KeyConfig    = "config"

	// BucketPlan holds the plan spec under KeySpec and each group's status
	// under GroupKey(name). Every change is republished on PlanRepublish.
	BucketPlan = "fleet_plan"
	KeySpec    = "spec"
	// KeyQuarantine holds the versions quarantined fleet-wide
	// (rollout.QuarantineList): written by the controller when the
	// quarantine rule fires and by fleetctl quarantine; never read by
	// agents (halted groups and their rejected versions tell them).
	KeyQuarantine = "quarantine"
	// KeyGroups holds the groups of the config in order with their
	// selectors (rollout.GroupList), written by the leader from the
	// config when any group has a selector: agents cannot read
	// fleet_config, and decide their group by their labels from it
	// (issue 28; AppNS.Groups is each app's). Not a ParsePlanKey kind:
	// readers of the plan's state pass over it.
	KeyGroups = "groups"
	// PlanRepublish is where the plan bucket republishes its changes, so
	// agents follow the plan with a core subscription, not a consumer.
	PlanRepublish = "fleet.plan."

	// PlanStream is the stream behind the plan bucket: agents' credentials
	// name it in the JetStream API subjects they may use.
	PlanStream = "KV_" + BucketPlan

	// BucketStats holds per-group, per-controller version counts.
	BucketStats = "fleet_stats"

	// EventsPrefix is the subject space of rollout events, fleet.events.<group>.
	EventsPrefix = "fleet.events."
	// StreamEvents stores the rollout events (EventsPrefix), apart from
	// the operators' records (StreamAudit): what the controller's
	// credentials may publish never evicts an operator's record.
	StreamEvents = "FLEET_EVENTS"
)

// Edge sites (docs/deployment.md, "Edge sites"). Each site's plan mirror
// reads the hub's plan bucket through one durable consumer the hub's admin
// creates for it (EnsureEdgeConsumer): the site never creates a consumer at
// the hub, since a consumer's deliver subject, written in the request's
// body, could name any subject of FLEET.
const (
	// EdgeDeliverPrefix is where each site's consumer delivers the plan:
	// fleet.edge.<site>, the one subject an edge account streams out of
	// FLEET per site.
	EdgeDeliverPrefix = "fleet.edge."
	// edgeConsumerPrefix starts the name of a site's consumer on the plan
	// stream: edge_<site>.
	edgeConsumerPrefix = "edge_"
)

// EdgeConsumer is the name of site's durable consumer on the plan stream.
func EdgeConsumer(site string) string { return edgeConsumerPrefix + site }

// EdgeDeliverSubject is where site's consumer delivers: fleet.edge.<site>.
func EdgeDeliverSubject(site string) string { return EdgeDeliverPrefix + site }

// groupKeyPrefix starts the fleet_plan key of every group's status.
const groupKeyPrefix = "group."

// GroupKey is the fleet_plan key of a group's status.
func GroupKey(group string) string { return groupKeyPrefix + group }

// GroupFromKey is the inverse of GroupKey: the group whose status a
// fleet_plan key holds, and false when the key is not a group status key.
func GroupFromKey(key string) (group string, ok bool) {
	return strings.CutPrefix(key, groupKeyPrefix)
}

// StatsKey is the fleet_stats key a controller writes a group's counts to.
func StatsKey(group, controllerID string) string { return group + "." + controllerID }

// HBFilter is the heartbeat subject filter for one group, or for all groups
// when group is empty.
func HBFilter(group string) string {
	if group == "" {
		return HBSubjects
	}
	return heartbeat.SubjectPrefix + group + ".*"
}

// EventSubject is the subject events of group are published on; a
// fleet-wide event (group "", a quarantine) goes on fleet.events._fleet.
func EventSubject(group string) string {
	if group == "" {
		return EventsPrefix + AuditFleet
	}
	return EventsPrefix + group
}

// AgentInboxPrefix is the inbox prefix an agent's connection uses for replies
// (nats.CustomInboxPrefix). It is derived from the agent id so that an
// agent's credentials can allow subscribing to its own inbox and no other:
// agentd connects with it and fleetctl auth grants exactly it.
func AgentInboxPrefix(agentID string) string { return "_INBOX_" + agentID }
