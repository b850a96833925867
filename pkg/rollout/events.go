package rollout

import "time"

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
	// EventHeld: progress is held because agents in flight are blocked on
	// infrastructure (see GroupStatus.Held); not a failure.
	EventHeld EventKind = "held"
	// EventResumed: the blocked agents recovered and progress moves again.
	EventResumed EventKind = "resumed"
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
)

// EventKinds are every kind of event the controller and fleetctl publish,
// for consumers that choose among them (the controller's webhooks). A new
// kind goes here too.
var EventKinds = []EventKind{
	EventTransition, EventHalt, EventAlert, EventApprovalNeeded, EventQuarantine,
	EventFrozen, EventUnfrozen, EventHeld, EventResumed, EventOperator, EventAnalysis,
}

// Event is published on fleet.events.<group> when a group's status changes
// in a way a human should hear about.
type Event struct {
	V      int       `json:"v"`
	Group  string    `json:"group"`
	Kind   EventKind `json:"kind"`
	From   State     `json:"from,omitempty"`
	To     State     `json:"to,omitempty"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// QuarantineEvent is the fleet-wide event of the controller quarantining
// q.Version.
func QuarantineEvent(q Quarantine) Event {
	return newEvent("", EventQuarantine, "", "", "version "+q.Version+" quarantined: "+q.Reason, q.At)
}

func newEvent(group string, kind EventKind, from, to State, reason string, at time.Time) Event {
	return Event{V: SchemaVersion, Group: group, Kind: kind, From: from, To: to, Reason: reason, At: at}
}
