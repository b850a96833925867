package controller

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Headers of every webhook POST.
const (
	// HeaderWebhookEventID is the event's id, also in the body: receivers
	// drop an id they have seen (a delivery is at least once).
	HeaderWebhookEventID = "X-Fleetwave-Event-Id"
	// HeaderWebhookSignature is "sha256=" and the hex HMAC-SHA256 of the
	// body, keyed with the --webhook-secret-file's contents; absent when
	// no secret is configured.
	HeaderWebhookSignature = "X-Fleetwave-Signature"
)

// WebhookPayload is the body of a json webhook: one message of FLEET_AUDIT,
// a rollout event or (with audit records forwarded) an operator's write.
// The same message is the same body, byte for byte, whichever controller
// sends it and however often.
type WebhookPayload struct {
	V int `json:"v"`
	// ID identifies the message: the stream, its sequence there and the
	// time the stream stored it, so a stream re-created from scratch does
	// not reuse the ids of the one before.
	ID string `json:"id"`
	// Type is "event" or "audit".
	Type string `json:"type"`
	// Kind is the event's kind (halt, alert, transition, …), or "audit".
	Kind string `json:"kind"`
	// App is the app the message is about (DESIGN §9): the event's app
	// (the default app's name included), or for an operator's write of
	// another app's plan key, that app; absent for fleet-wide messages (a
	// config change) and for messages written before apps.
	App string `json:"app,omitempty"`
	// Group is the group the message is about; absent for fleet-wide ones
	// (a quarantine, a config change).
	Group string `json:"group,omitempty"`
	// Time is when it happened by its own account (the event's at).
	Time time.Time `json:"time"`
	// Stream and Sequence say where it is stored: nats stream get
	// FLEET_AUDIT <sequence> shows it.
	Stream   string `json:"stream"`
	Sequence uint64 `json:"sequence"`
	// Text is one readable line, the one the slack format sends: what a
	// peer wrote in it (a reason, an actor, a Prometheus series) has its
	// controls escaped (\n, \x1b, \u202e), so it stays one line.
	Text  string          `json:"text"`
	Event *rollout.Event  `json:"event,omitempty"`
	Audit *kv.AuditRecord `json:"audit,omitempty"`
}

// slackPayload is the body of a slack webhook: what a Slack incoming
// webhook (and Mattermost's, and Rocket.Chat's) posts as a message.
type slackPayload struct {
	Text string `json:"text"`
}

// webhookEventID is the id of the message stored at seq in stream at
// stored.
func webhookEventID(stream string, seq uint64, stored time.Time) string {
	return fmt.Sprintf("%s-%d-%d", stream, seq, stored.UnixNano())
}

// webhookPayloadOf builds the payload of one timeline entry read from m.
func webhookPayloadOf(e kv.TimelineEntry, m kv.StoredMsg) WebhookPayload {
	p := WebhookPayload{V: 1, ID: webhookEventID(m.Stream, m.Sequence, m.Time), Group: e.Group(), Time: e.At().UTC(),
		Stream: m.Stream, Sequence: m.Sequence, Text: webhookText(e), Event: e.Event, Audit: e.Audit}
	if e.Audit != nil {
		p.Type, p.Kind = "audit", "audit"
		p.App = auditApp(e.Audit)
	} else {
		p.Type, p.Kind = "event", string(e.Event.Kind)
		p.App = e.Event.App
	}
	return p
}

// auditApp is the app whose plan key an operator's record names: the
// prefixed key's app (kv.ParsePlanKey); "" for the default app's
// unprefixed keys and for the other buckets, where the record alone does
// not say which app (the same body whichever controller sends it, so not
// looked up in a config).
func auditApp(a *kv.AuditRecord) string {
	if a.Bucket != kv.BucketPlan {
		return ""
	}
	return kv.ParsePlanKey(a.Key).App
}

// appNamed reports whether a line names ev's app: not for an event without
// one (written before apps) nor of an app named rollout.DefaultAppName (a
// config without apps: its lines stay what they were); otherwise " of app
// <name>" follows the group, or "app <name>: " starts a fleet-wide text.
func appNamed(ev *rollout.Event) bool {
	return ev.App != "" && ev.App != rollout.DefaultAppName
}

// webhookBody renders p in format. The JSON has every rune a terminal or
// a reader would act on (DEL, C1 and bidirectional controls, which
// encoding/json leaves raw) as a \u escape (escape.JSON), so a receiver
// that prints a field prints no control.
func webhookBody(p WebhookPayload, format WebhookFormat) ([]byte, error) {
	if format == WebhookSlack {
		return escape.MarshalJSON(slackPayload{Text: slackEscape(p.Text)})
	}
	return escape.MarshalJSON(p)
}

// webhookSignature is the value of HeaderWebhookSignature for body.
func webhookSignature(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// VerifyWebhookSignature reports whether header (the value of
// X-Fleetwave-Signature) is body's signature with secret: what a receiver
// written in Go does, in constant time.
func VerifyWebhookSignature(secret, body []byte, header string) bool {
	return hmac.Equal([]byte(header), []byte(webhookSignature(secret, body)))
}

// webhookText is one readable line about e, with a Slack emoji in front,
// its controls escaped (escape.Text): reasons and actors are free text.
func webhookText(e kv.TimelineEntry) string { return escape.Text(webhookLine(e)) }

// webhookLine is webhookText before the escape.
func webhookLine(e kv.TimelineEntry) string {
	if a := e.Audit; a != nil {
		where := "fleet-wide"
		if a.Group != "" {
			where = "on group " + a.Group
		}
		if app := auditApp(a); app != "" {
			if a.Group != "" {
				where += " of app " + app
			} else {
				where = "for app " + app
			}
		}
		s := fmt.Sprintf(":memo: fleetwave: %s ran %q %s", a.Actor, "fleetctl "+a.Command, where)
		if a.Reason != "" {
			s += ": " + a.Reason
		}
		return s
	}
	ev := e.Event
	group := "group " + ev.Group
	fleetWide := ""
	if appNamed(ev) {
		group += " of app " + ev.App
		fleetWide = "app " + ev.App + ": "
	}
	switch ev.Kind {
	case rollout.EventHalt:
		return fmt.Sprintf(":rotating_light: fleetwave: %s halted in %s: %s", group, ev.From, ev.Reason) + lastWords(ev.Agents)
	case rollout.EventAlert:
		return fmt.Sprintf(":warning: fleetwave: %s: %s", group, ev.Reason)
	case rollout.EventTransition:
		icon := ":arrow_forward:"
		switch ev.To {
		case rollout.StateDone:
			icon = ":white_check_mark:"
		case rollout.StateRolledBack:
			icon = ":leftwards_arrow_with_hook:"
		}
		return fmt.Sprintf("%s fleetwave: %s %s → %s: %s", icon, group, orNone(ev.From), ev.To, ev.Reason)
	case rollout.EventQuarantine:
		return ":no_entry: fleetwave: " + fleetWide + ev.Reason + lastWords(ev.Agents)
	case rollout.EventApprovalNeeded:
		return fmt.Sprintf(":raised_hand: fleetwave: %s awaits approval: %s", group, ev.Reason)
	}
	if ev.Group == "" {
		return fmt.Sprintf(":information_source: fleetwave: %s%s: %s", fleetWide, ev.Kind, ev.Reason)
	}
	return fmt.Sprintf(":information_source: fleetwave: %s %s: %s", group, ev.Kind, ev.Reason)
}

// lastWords is, for the first agent a halt names that left output, the
// last line its app printed: the line that usually says why, in the one
// line a chat message shows (the JSON payload's event.agents has them all).
func lastWords(agents []rollout.EventAgent) string {
	for _, a := range agents {
		out := strings.TrimSpace(a.Output)
		if out == "" {
			continue
		}
		if i := strings.LastIndexByte(out, '\n'); i >= 0 {
			out = out[i+1:]
		}
		who := a.Hostname
		if who == "" {
			who = string(a.ID)
		}
		return fmt.Sprintf("; last output of %s: %s", who, rollout.CutText(out, 200))
	}
	return ""
}

func orNone(s rollout.State) string {
	if s == "" {
		return "(none)"
	}
	return string(s)
}

// slackEscape escapes the three characters Slack's message format gives a
// meaning (https://api.slack.com/reference/surfaces/formatting#escaping),
// so a reason holding "<" is shown, not parsed as a link, and "<!channel>",
// "<!here>" or "<@U123>" notifies nobody. Mattermost and Rocket.Chat, which
// take the same payload, also notify on a bare "@channel", "@all" or
// "@name": an "@" that starts a word becomes a full-width "＠" (U+FF20),
// which reads the same and mentions nobody ("alice@host" stays).
func slackEscape(s string) string {
	s = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
	if !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	prev := ' '
	for _, r := range s {
		if r == '@' && !wordRune(prev) {
			b.WriteRune('＠')
		} else {
			b.WriteRune(r)
		}
		prev = r
	}
	return b.String()
}

// wordRune reports whether r continues a word, an address or a host name
// (an "@" after it is not a mention).
func wordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '.' || r == '-'
}
