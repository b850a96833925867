package view

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TimelineRow is one entry of the audit trail as fleetctl history and the
// dashboard's timeline show it: an operator's write or a rollout event.
type TimelineRow struct {
	// ID names the entry: its stream and sequence ("FLEET_EVENTS-42").
	ID string `json:"id"`
	// Stream and Seq say where it is stored (FLEET_AUDIT or FLEET_EVENTS).
	Stream string `json:"stream"`
	Seq    uint64 `json:"seq"`
	// Stored is when the bus stored it: the timeline's order.
	Stored time.Time `json:"stored"`
	// At is when it happened by the writer's own clock.
	At time.Time `json:"at"`
	// Kind is "audit" (a write fleetctl made) or "event" (the rollout's).
	Kind string `json:"kind"`
	// Group is the group the entry is about; absent for fleet-wide writes.
	Group string `json:"group,omitempty"`
	// Actor is who: the operator, or "controller" for events.
	Actor string `json:"actor"`
	// What is the command ("plan set") or the event's kind ("halt").
	What string `json:"what"`
	// Change is what changed, on one line.
	Change string `json:"change"`
	Reason string `json:"reason,omitempty"`
}

// Timeline kinds.
const (
	KindAudit = "audit"
	KindEvent = "event"
)

// MaxTimelineText bounds a row's change and reason, in bytes of their JSON
// encoding (JSONCut): a row is a line for people (the dashboard's timeline,
// fleetctl history), and its full record is one "fleetctl history -o json"
// away. The other fields are cut shorter: an event's kind and group are
// whatever its publisher wrote.
const MaxTimelineText = 512

// maxTimelineName bounds a row's actor, what and group the same way.
const maxTimelineName = 128

// TimelineRowOf renders one entry of the timeline.
func TimelineRowOf(e kv.TimelineEntry) TimelineRow {
	r := TimelineRow{ID: e.ID(), Stream: e.Stream, Seq: e.Seq, Stored: e.Stored, At: e.At(), Group: e.Group()}
	if a := e.Audit; a != nil {
		r.Kind, r.Actor, r.What, r.Reason, r.Change = KindAudit, a.Actor, a.Command, a.Reason, DescribeDiff(a)
	} else {
		ev := e.Event
		r.Kind, r.Actor, r.What, r.Reason, r.Change = KindEvent, "controller", string(ev.Kind), ev.Reason, EventMove(*ev, true)
		if ev.From != "" && ev.From == ev.To {
			r.Change = "in " + string(ev.From) // a halt or an alert: no move
		}
	}
	r.Change, r.Reason = JSONCut(r.Change, MaxTimelineText), JSONCut(r.Reason, MaxTimelineText)
	r.Actor, r.What, r.Group = JSONCut(r.Actor, maxTimelineName), JSONCut(r.What, maxTimelineName), JSONCut(r.Group, maxTimelineName)
	return r
}

// JSONCut is s cut on a character boundary so that its JSON string
// encoding (encoding/json's: control characters, <, >, &, U+2028, U+2029
// and invalid bytes take six bytes) is at most n bytes, "…" marking a cut.
func JSONCut(s string, n int) string {
	size := 0
	for i, r := range s {
		w := utf8.RuneLen(r)
		switch {
		case r == utf8.RuneError && w == 3 && !strings.HasPrefix(s[i:], "\uFFFD"):
			w = 6 // an invalid byte: \ufffd
		case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
			w = 2
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
			w = 6
		}
		if size+w > n-len("…") && size+jsonLen(s[i:]) > n {
			return s[:i] + "…"
		}
		size += w
	}
	return s
}

// jsonLen is the length of s's JSON string encoding, quotes left out.
func jsonLen(s string) int {
	b, _ := json.Marshal(s)
	return len(b) - 2
}

// EventMove is an event's states as "from → to", "→ to" (arrow: with
// arrow) or "to"; "" (dash: "-") when it names none.
func EventMove(ev rollout.Event, arrow bool) string {
	switch {
	case ev.From != "" && ev.To != "" && ev.From != ev.To:
		return string(ev.From) + " → " + string(ev.To)
	case ev.To != "" && ev.From == "" && arrow:
		return "→ " + string(ev.To)
	case ev.To != "":
		return string(ev.To)
	case ev.From != "":
		return string(ev.From)
	}
	return ""
}

// DescribeDiff is an audit record's changes on one line.
func DescribeDiff(a *kv.AuditRecord) string {
	if a.Deleted {
		return "deleted " + a.Bucket + "/" + a.Key
	}
	if len(a.Before) == 0 {
		return "created " + a.Bucket + "/" + a.Key
	}
	var parts []string
	// A group's state first: it is what people look for.
	diff := slices.Clone(a.Diff)
	slices.SortStableFunc(diff, func(x, y kv.FieldChange) int {
		return cmp.Compare(boolInt(x.Path != "state"), boolInt(y.Path != "state"))
	})
	for _, c := range diff {
		parts = append(parts, fmt.Sprintf("%s %s → %s", c.Path, showOrNone(c.Before), showOrNone(c.After)))
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, ", ")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func showOrNone(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "(none)"
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	return readable(v)
}

// readable is a JSON value for people, not JSON: a string as itself, an
// object as "key value, key value" (an approval reads "at …, by alice,
// reason …, stage start"), a list as its items, "; " between them, in
// brackets when there are several.
func readable(v any) string {
	switch v := v.(type) {
	case nil:
		return "(none)"
	case string:
		return v
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, k+" "+readable(v[k]))
		}
		if len(parts) == 0 {
			return "(empty)"
		}
		return "(" + strings.Join(parts, ", ") + ")"
	case []any:
		parts := make([]string, 0, len(v))
		for _, x := range v {
			parts = append(parts, readable(x))
		}
		switch len(parts) {
		case 0:
			return "(none)"
		case 1:
			return parts[0]
		}
		return "[" + strings.Join(parts, "; ") + "]"
	}
	data, _ := json.Marshal(v) // numbers and booleans
	return string(data)
}

// ShowJSON is a JSON value for people: a string without its quotes, else
// the JSON itself.
func ShowJSON(raw json.RawMessage) string {
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
