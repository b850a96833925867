// Package kv is fleetwave's typed access to JetStream: it creates the
// heartbeat stream and the config, plan and stats buckets with the settings of
// DESIGN §2, and reads and writes their JSON values with compare-and-swap on
// the revision, so concurrent writers never lose an update silently.
package kv
