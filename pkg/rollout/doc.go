// Package rollout holds fleetwave's pure rollout rules: versions, agent ids,
// group names, and (as the engine grows) config, plan, the group state machine
// and the per-agent update decision. It does no I/O and imports nothing of
// ours, so every rule can be tested as a plain function of its inputs.
package rollout
