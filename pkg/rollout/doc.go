// Package rollout holds fleetwave's pure rollout rules: versions, agent ids
// and group names; the config (fleet_config) and plan spec (fleet_plan) with
// their defaults and validation; each group's state machine (Next), its
// canaries and backpressure progress; the operator actions; and Decide, the
// one answer to "what should this agent run, and update now?" shared by
// agentd and /v1/find. It does no I/O (beyond resolving a time zone name,
// once per zone and process) and imports nothing of ours, so every
// rule is a plain function of its inputs, time included (docs/rollout.md).
package rollout
