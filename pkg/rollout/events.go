package rollout

import (
	"time"
	"unicode/utf8"
)

// EventKind classifies an Event.
type EventKind string

// Event kinds. Halt and alert events are the ones to page on; every halt is
// accompanied by an alert event so that a consumer of alerts alone misses
// nothing.
const (
	// EventTransition: the group changed state (From → To).
	EventTransition EventKind = "transition"
	// EventHalt: the group halted itself and waits for an operator.
	EventHalt EventKind = "halt"
	// EventAlert: something needs a human (alert_after passed, or a halt);
	// the rollout itself continues unless halted.
	EventAlert EventKind = "alert"
	// EventFrozen: progress is held because too many agents vanished.
	EventFrozen EventKind = "frozen"
	// EventUnfrozen: enough agents are back and progress moves again.
	EventUnfrozen EventKind = "unfrozen"
	// EventVanished: every present agent finished, but more of the
	// group's initial agents vanished than vanished_limit allows, so the
	// group is not done (see GroupStatus.DoneHeld); an alert event goes
	// with it.
	EventVanished EventKind = "vanished"
	// EventHeld: progress is held because agents in flight are blocked on
	// infrastructure (see GroupStatus.Held); not a failure.
	EventHeld EventKind = "held"
	// EventResumed: the blocked agents recovered and progress moves again.
	EventResumed EventKind = "resumed"
	// EventCanaryReplaced: a canary vanished before it reported on the
	// target and another agent took its place (see canary.go); not a
	// failure. Its Agents name the lost canary.
	EventCanaryReplaced EventKind = "canary_replaced"
	// EventOperator: an operator action that kept the state (reset, run).
	EventOperator EventKind = "operator"
	// EventApprovalNeeded: the group began to wait for an operator's
	// approval (fleetctl approve); not a failure.
	EventApprovalNeeded EventKind = "approval_needed"
	// EventAnalysis: a metric analysis check passed its count, turned
	// inconclusive (the group holds), or is conclusive again; a failing
	// check halts the group (EventHalt says why).
	EventAnalysis EventKind = "analysis"
	// EventQuarantine: the controller quarantined a version fleet-wide
	// (Group is "": published on fleet.events._fleet).
	EventQuarantine EventKind = "quarantine"
	// EventUnattributed: the controller found a revision of the plan spec
	// or the config that no audit record accounts for: written by
	// something other than fleetctl (a raw KV put, a leaf, a stolen
	// credential). Fleet-wide (Group ""); the rollout follows the value
	// all the same, a human must look.
	EventUnattributed EventKind = "unattributed"
)

// EventKinds are every kind of event the controller and fleetctl publish,
// for consumers that choose among them (the controller's webhooks). A new
// kind goes here too.
var EventKinds = []EventKind{
	EventTransition, EventHalt, EventAlert, EventApprovalNeeded, EventQuarantine,
	EventFrozen, EventUnfrozen, EventVanished, EventHeld, EventResumed, EventCanaryReplaced, EventOperator, EventAnalysis, EventUnattributed,
}

// MaxEventReason bounds an event's Reason, in bytes: every event fits the
// events stream's message size whatever went into its reason (a Prometheus
// label, an agent's error text, a list of versions), even with every byte
// escaped in JSON (kv.MaxEventSize).
const MaxEventReason = 1024

// Event is published on fleet.events.<group> when a group's status changes
// in a way a human should hear about.
type Event struct {
	V int `json:"v"`
	// App names the app whose rollout the event is about (DESIGN §9),
	// the default app's name included; empty, and left out, in events
	// written before apps existed, which are the default app's.
	App    string    `json:"app,omitempty"`
	Group  string    `json:"group"`
	Kind   EventKind `json:"kind"`
	From   State     `json:"from,omitempty"`
	To     State     `json:"to,omitempty"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Agents are the agents a halt (and its alert) is about: the failed
	// canary, or the first of the failures over the threshold, each with
	// its host name, error and the last lines of its app's output, so
	// that whoever is paged reads why without a shell on the host. At most
	// MaxEventAgents; absent for other events.
	Agents []EventAgent `json:"agents,omitempty"`
}

// EventAgent is one agent an event is about, as its last heartbeat told.
// Its fields are the agent's own text: escape them where they are shown.
type EventAgent struct {
	ID       AgentID `json:"id"`
	Hostname string  `json:"hostname,omitempty"`
	// Error is the agent's error (why it failed), cut to
	// MaxEventAgentError bytes; Output the last lines of its app's output
	// at the failure, their end kept, cut to MaxEventAgentOutput bytes.
	Error  string `json:"error,omitempty"`
	Output string `json:"output,omitempty"`
}

// Bounds of Event.Agents: the event still fits the events stream's message
// size (kv.EncodeEvent drops outputs, then agents, from one that would
// not).
const (
	MaxEventAgents      = 3
	MaxEventAgentError  = 300
	MaxEventAgentOutput = 1024
)

// eventAgents are the agents of as an event names them (at most
// MaxEventAgents).
func eventAgents(as []AgentView) []EventAgent {
	out := make([]EventAgent, 0, min(len(as), MaxEventAgents))
	for _, a := range as[:min(len(as), MaxEventAgents)] {
		out = append(out, EventAgent{ID: a.ID, Hostname: a.Hostname, Error: a.Error, Output: a.ErrorOutput})
	}
	return out
}

// QuarantineEvent is the fleet-wide event of the controller quarantining
// q.Version.
func QuarantineEvent(q Quarantine) Event {
	return newEvent("", EventQuarantine, "", "", "version "+q.Version+" quarantined: "+q.Reason, q.At)
}

// QuarantineAgents are the first agents (by id) that quarantined q, as
// its event names them (Event.Agents), from the views the rule read.
func QuarantineAgents(q Quarantine, views []AgentView) []EventAgent {
	var named []AgentView
	for _, id := range q.Agents[:min(len(q.Agents), MaxEventAgents)] {
		for _, a := range views {
			if a.ID == id {
				named = append(named, a)
				break
			}
		}
	}
	if len(named) == 0 {
		return nil
	}
	return eventAgents(named)
}

func newEvent(group string, kind EventKind, from, to State, reason string, at time.Time) Event {
	return Event{V: SchemaVersion, Group: group, Kind: kind, From: from, To: to, Reason: reason, At: at}.Bounded()
}

// Bounded is e with its Reason cut to MaxEventReason bytes (on a character
// boundary, "…" marking the cut).
func (e Event) Bounded() Event {
	e.Reason = CutText(e.Reason, MaxEventReason)
	if len(e.Agents) > 0 {
		agents := make([]EventAgent, 0, min(len(e.Agents), MaxEventAgents))
		for _, a := range e.Agents[:min(len(e.Agents), MaxEventAgents)] {
			a.Hostname = CutText(a.Hostname, 255)
			a.Error = CutText(a.Error, MaxEventAgentError)
			a.Output = cutHead(a.Output, MaxEventAgentOutput)
			agents = append(agents, a)
		}
		e.Agents = agents
	}
	return e
}

// cutHead is s cut to at most n bytes by dropping its beginning, on a
// UTF-8 character boundary, with "…" in front when something was cut:
// the last lines of an output are the ones that say why.
func cutHead(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	start := len(s) - max(n-len(ellipsis), 0)
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return ellipsis + s[start:]
}

// CutText is s cut to at most n bytes on a UTF-8 character boundary, with
// "…" at the end when something was cut (the "…" counted in n).
func CutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := max(n-len(ellipsis), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
