// Package heartbeat owns the agent heartbeat: its wire type and strict
// decoder, the publisher agentd runs, and the aggregator the controller uses
// to turn the last heartbeat of every agent into per-group, per-version
// counts.
package heartbeat
