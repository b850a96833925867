// Package controller is the controller's service: it follows the heartbeat
// stream into an in-memory inventory (heartbeat.Aggregator) and writes
// per-group version counts to fleet_stats. The rollout decisions it will
// drive live in pkg/rollout; this package only reads, calls and writes.
package controller
