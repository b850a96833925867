// Package escape shows strings that came from peers (agents, Prometheus,
// the bus) as data: every rune that does not show as itself
// (rollout.Printable: controls, DEL, C1 and bidirectional controls,
// invisible format characters) becomes a visible escape on a terminal
// (Text, Lines, NewWriter) and a \u escape in JSON (JSON, MarshalJSON,
// NewJSONWriter), so that no peer can move a cursor, recolour a terminal,
// forge a table row or reorder what a reader sees. Every printer of
// fleetctl, the controller and agentd calls it, as kubectl's printers call
// one terminal escape function (STYLE.md).
package escape
