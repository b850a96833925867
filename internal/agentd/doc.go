// Package agentd is the agent daemon's service: it keeps the host's identity
// and update.yaml (pkg/install) and heartbeats the host's status to the bus
// (pkg/heartbeat), riding out outages of the bus.
package agentd
