package heartbeat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// SchemaVersion is the "v" of heartbeats this package writes and reads.
const SchemaVersion = 1

// MaxSize is the largest heartbeat accepted, in bytes. A real one is ~400;
// one carrying a failed app's last lines (ErrorOutput) up to ~3 KiB. It
// leaves room for every field at its bound (labels included: 32 labels of
// 63-byte keys and values, every value character escaped, ~6.2 KiB), so
// that whatever Validate accepts encodes within it.
const MaxSize = 20 << 10

// MaxErrorLen bounds the error text an agent puts in a heartbeat, so a long
// error never pushes the heartbeat over MaxSize.
const MaxErrorLen = 1024

// MaxOutputLen bounds the error_output field a controller accepts: a
// heartbeat with more is malformed. Agents cut what they send to
// OutputLines lines and OutputBytes bytes (CleanOutput), well within it.
const MaxOutputLen = 4096

// OutputLines and OutputBytes are what an agent sends of the app's output
// at a failure (error_output): its last OutputLines lines, at most
// OutputBytes bytes of them.
const (
	OutputLines = 10
	OutputBytes = 2048
)

// MaxHostnameLen bounds the hostname field.
const MaxHostnameLen = 255

// MaxCauseLen bounds the error_cause field.
const MaxCauseLen = 64

// The error classes (pkg/install's FailureClass values).
const (
	ClassRelease        = rollout.FailureRelease
	ClassArtifact       = rollout.FailureArtifact
	ClassInfrastructure = rollout.FailureInfrastructure
)

// ErrorClasses are the values error_class may have besides "".
var ErrorClasses = []string{ClassRelease, ClassArtifact, ClassInfrastructure}

// Heartbeat is one agent's report: the status block of its update.yaml plus
// who it is. Agents publish it on SubjectFor(group, agent_id).
type Heartbeat struct {
	V             int             `json:"v"`
	AgentID       rollout.AgentID `json:"agent_id"`
	Hostname      string          `json:"hostname"`
	Group         string          `json:"group"`
	ActiveVersion string          `json:"active_version"`
	StartVersion  string          `json:"start_version"`
	StartTime     time.Time       `json:"start_time,omitzero"`
	Rollback      bool            `json:"rollback"`
	RollbackFrom  string          `json:"rollback_from"`
	Error         string          `json:"error"`
	// ErrorClass is Error's failure class: "release", "artifact" or
	// "infrastructure" (ErrorClasses; pkg/install.FailureClass says what
	// each means), and ErrorCause a short reason for it ("disk full",
	// "download failed (HTTP 503)"). Both are empty, and left out, when
	// Error is, and when an older agent sent the heartbeat.
	ErrorClass string `json:"error_class,omitempty"`
	ErrorCause string `json:"error_cause,omitempty"`
	// ErrorOutput is the last lines of the app's own output at the failure
	// that made the agent fail or roll back (the app's stdout and stderr,
	// a systemd unit's journal, or the failing health command's output),
	// cut by the agent to OutputLines lines and OutputBytes bytes. Free
	// text from the host: escaped wherever it is shown. Empty, and left
	// out, when Error is, when the app said nothing, and from an older
	// agent.
	ErrorOutput string `json:"error_output,omitempty"`
	// UpdatingTo is the version the agent is installing right now (from the
	// moment it starts an install until it is committed, rolled back or
	// given up); empty, and left out, otherwise. StartTime is when that
	// install started.
	UpdatingTo     string    `json:"updating_to,omitempty"`
	UpdaterVersion string    `json:"updater_version"`
	At             time.Time `json:"at"`
	Seq            uint64    `json:"seq"`
	// Site is where the agent runs (agentd --site, by default the
	// JetStream domain of the server it is connected to; see
	// rollout.ValidateSite); empty, and left out, when it names none.
	Site string `json:"site,omitempty"`
	// App is the app this heartbeat reports on (DESIGN §9): a host sends
	// one heartbeat per app it runs, on SubjectForApp. Empty, and left
	// out, for the fleet's default app (rollout.Config.DefaultApp), whose
	// heartbeats keep the subject they had before apps existed.
	App string `json:"app,omitempty"`
	// Installer is how the host installs the app: rollout.InstallerTarball
	// or rollout.InstallerScript; empty, and left out, when the agent only
	// reports, and from an older agent.
	Installer string `json:"installer,omitempty"`
	// Left says the host no longer runs the app (its agentd config for
	// the app was removed): the last heartbeat it sends for the app, after
	// which controllers count it in none of the app's groups. The stream
	// keeps it as the subject's last message until it expires, so a
	// controller that starts later reads the same.
	Left bool `json:"left,omitempty"`
	// Labels are what the agent says about its host (agentd --label,
	// its labels file, and os, arch, kernel): a group with a selector
	// takes the agents whose labels match (rollout.Selector). Empty, and
	// left out, from an older agent. At most rollout.MaxLabels, each
	// passing rollout.ValidateLabel.
	Labels LabelSet `json:"labels,omitzero"`
}

// Failed reports whether the agent counts as failed: it rolled back, or its
// last update attempt left an error.
func (h *Heartbeat) Failed() bool { return h.Rollback || h.Error != "" }

// Version is the key this agent is counted under: its active version, or
// rollout.NoVersion when nothing is installed.
func (h *Heartbeat) Version() string {
	if h.ActiveVersion == "" {
		return rollout.NoVersion
	}
	return h.ActiveVersion
}

// Encode validates h and returns its JSON. The agent uses it so that it can
// never publish what a controller would reject.
func Encode(h *Heartbeat) ([]byte, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // '<' in an error text stays one byte, not six
	if err := enc.Encode(h); err != nil {
		return nil, fmt.Errorf("encode heartbeat: %w", err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), MaxSize)
	}
	return b, nil
}

// Decode parses and validates a heartbeat. It rejects payloads over MaxSize,
// anything but exactly one JSON object, a "v" other than SchemaVersion, and
// any field that fails Validate. Unknown fields are ignored so that a newer agent adding a field
// (without changing "v") is not dropped from the inventory of an older
// controller.
func Decode(data []byte) (*Heartbeat, error) {
	var h Heartbeat
	if err := decode(data, &h, nil); err != nil {
		return nil, err
	}
	return &h, nil
}

// decode is Decode into h, which must be the zero Heartbeat. The plain form
// every agent writes takes the fast path (decodeFast); anything else, and
// every error, is encoding/json's, so the fast path never changes what is
// accepted or what an error says.
func decode(data []byte, h *Heartbeat, in *interner) error {
	if len(data) > MaxSize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxSize)
	}
	if !decodeFast(data, h, in) {
		*h = Heartbeat{}
		// json.Unmarshal, unlike a json.Decoder, rejects anything after the
		// value (a json.Decoder's More() misses a stray '}').
		if err := json.Unmarshal(data, h); err != nil {
			if errors.Is(err, ErrBadLabels) {
				return fmt.Errorf("%w: %w", ErrMalformed, err)
			}
			return fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	return h.Validate()
}

// Decoder decodes heartbeats one after another, as a controller reads them,
// reusing one Heartbeat and sharing the strings that repeat across a fleet
// (groups, versions), so that a heartbeat in the form agents write costs no
// allocation but its host name and agent id. What it accepts and rejects is
// exactly Decode's. The zero Decoder is ready; it is not safe for
// concurrent use.
type Decoder struct {
	h  Heartbeat
	in interner
}

// DecodeFrom is DecodeFrom with d's buffers. The Heartbeat it returns is
// d's own and is overwritten by d's next call: copy what must outlive it.
func (d *Decoder) DecodeFrom(subject string, data []byte) (*Heartbeat, error) {
	app, group, id, err := ParseAppSubject(subject)
	if err != nil {
		return nil, err
	}
	d.h = Heartbeat{}
	if err := decode(data, &d.h, &d.in); err != nil {
		return nil, err
	}
	if err := matchSubject(&d.h, app, group, id); err != nil {
		return nil, err
	}
	return &d.h, nil
}

// Validate checks every field against the contract of DESIGN §2.
func (h *Heartbeat) Validate() error {
	if h.V != SchemaVersion {
		return fmt.Errorf("%w: v=%d, this build reads v=%d", ErrUnsupportedVersion, h.V, SchemaVersion)
	}
	if err := h.validateNames(); err != nil {
		return err
	}
	if _, err := rollout.ParseAgentID(string(h.AgentID)); err != nil {
		return fmt.Errorf("%w: agent_id: %w", ErrMalformed, err)
	}
	if err := rollout.ValidateGroupName(h.Group); err != nil {
		return fmt.Errorf("%w: group: %w", ErrMalformed, err)
	}
	if len(h.Hostname) > MaxHostnameLen {
		return fmt.Errorf("%w: hostname longer than %d bytes", ErrMalformed, MaxHostnameLen)
	}
	for _, f := range []struct{ name, value string }{ // each optional
		{"active_version", h.ActiveVersion},
		{"start_version", h.StartVersion},
		{"rollback_from", h.RollbackFrom},
		{"updater_version", h.UpdaterVersion},
		{"updating_to", h.UpdatingTo},
	} {
		if f.value == "" {
			continue
		}
		if err := rollout.ValidateVersion(f.value); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrMalformed, f.name, err)
		}
	}
	if h.Rollback && h.RollbackFrom == "" {
		return fmt.Errorf("%w: rollback is true but rollback_from is empty", ErrMalformed)
	}
	if err := checkText("error", h.Error, MaxErrorLen); err != nil {
		return err
	}
	switch h.ErrorClass {
	case "", ClassRelease, ClassArtifact, ClassInfrastructure:
	default:
		return fmt.Errorf("%w: error_class %.20q: want one of %v", ErrMalformed, h.ErrorClass, ErrorClasses)
	}
	if h.Error == "" && (h.ErrorClass != "" || h.ErrorCause != "") {
		return fmt.Errorf("%w: error_class and error_cause go with an error, and error is empty", ErrMalformed)
	}
	if h.Error == "" && h.ErrorOutput != "" {
		return fmt.Errorf("%w: error_output goes with an error, and error is empty", ErrMalformed)
	}
	if err := checkText("error_output", h.ErrorOutput, MaxOutputLen); err != nil {
		return err
	}
	if h.ErrorCause != "" && h.ErrorClass == "" {
		return fmt.Errorf("%w: error_cause without error_class", ErrMalformed)
	}
	if err := checkText("error_cause", h.ErrorCause, MaxCauseLen); err != nil {
		return err
	}
	if h.App != "" {
		if err := rollout.ValidateAppName(h.App); err != nil {
			return fmt.Errorf("%w: app: %w", ErrMalformed, err)
		}
	}
	switch h.Installer {
	case "", rollout.InstallerTarball, rollout.InstallerScript:
	default:
		return fmt.Errorf("%w: installer %.20q: want one of %v", ErrMalformed, h.Installer, rollout.Installers)
	}
	if h.Site != "" {
		if err := rollout.ValidateSite(h.Site); err != nil {
			return fmt.Errorf("%w: site: %w", ErrMalformed, err)
		}
	}
	if h.At.IsZero() {
		return fmt.Errorf("%w: at is missing", ErrMalformed)
	}
	return nil
}

// validateNames refuses a heartbeat in which any field that names
// something (who the agent is, where, what it runs) holds a rune that does
// not show as itself (rollout.ValidatePrintable): a control character, tab
// and newline included, DEL, a C1 control or a bidirectional override. A
// name is printed as it is, in every table, so such a heartbeat never
// reaches one; the error wraps rollout.ErrUnprintable, which the
// controller counts as its own rejection reason. Most of these fields have
// stricter rules of their own (Validate checks them next); this pass runs
// first so that a control character is reported, and counted, as one
// whichever field holds it.
func (h *Heartbeat) validateNames() error {
	for _, f := range [...]struct{ name, value string }{
		{"agent_id", string(h.AgentID)},
		{"hostname", h.Hostname},
		{"group", h.Group},
		{"site", h.Site},
		{"active_version", h.ActiveVersion},
		{"start_version", h.StartVersion},
		{"rollback_from", h.RollbackFrom},
		{"updating_to", h.UpdatingTo},
		{"updater_version", h.UpdaterVersion},
	} {
		if err := rollout.ValidatePrintable(f.value); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrMalformed, f.name, err)
		}
	}
	return nil
}

// checkText bounds a free-text field and rejects what JSON turns one byte of
// into six (control characters other than tab and newline, and invalid
// UTF-8). Everything else encodes to at most twice its length (a quote, a
// backslash, U+2028), so every heartbeat Validate accepts encodes within
// MaxSize.
func checkText(field, s string, limit int) error {
	if len(s) > limit {
		return fmt.Errorf("%w: %s longer than %d bytes", ErrMalformed, field, limit)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrMalformed, field)
	}
	for i, r := range s {
		if r < 0x20 && r != '\t' && r != '\n' {
			return fmt.Errorf("%w: %s has control character %U at byte %d", ErrMalformed, field, r, i)
		}
	}
	return nil
}

// CleanText makes s fit a heartbeat text field of at most limit bytes:
// control characters (except tab and newline) become spaces, invalid UTF-8
// becomes U+FFFD, and an over-long text is cut at a
// rune boundary and ends in "...". Agents pass error texts through it, so
// what they send is never rejected. (Free text may hold tab, newline, C1
// and bidirectional controls: printers escape them.)
func CleanText(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' && r != '\n' {
			return ' '
		}
		return r
	}, s)
	return cut(s, limit)
}

// CleanOutput makes an app's output fit error_output: colour and other
// CSI sequences removed, its last
// OutputLines lines (a trailing newline ends the last, it starts none),
// at most OutputBytes bytes of them (a first line too long keeps its end,
// after "..."), cleaned as CleanText cleans. "" when out holds nothing but
// white space.
func CleanOutput(out string) string {
	out = stripCSI(strings.ToValidUTF8(out, "\uFFFD"))
	out = strings.TrimRight(out, " \t\r\n")
	if strings.TrimSpace(out) == "" {
		return ""
	}
	lines := strings.Split(out, "\n")
	lines = lines[max(len(lines)-OutputLines, 0):]
	for i := range lines {
		lines[i] = strings.TrimSuffix(lines[i], "\r")
	}
	out = strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' && r != '\n' {
			return ' '
		}
		return r
	}, strings.Join(lines, "\n"))
	if len(out) > OutputBytes {
		const ellipsis = "..."
		start := len(out) - (OutputBytes - len(ellipsis))
		for start < len(out) && !utf8.RuneStart(out[start]) {
			start++
		}
		out = ellipsis + out[start:]
	}
	return out
}

// stripCSI removes the terminal control sequences an app's log lines
// commonly carry (colours: ESC '[' parameters, intermediates, a final
// byte), which would otherwise show as "[31m" once ESC is made a space.
func stripCSI(s string) string {
	if !strings.Contains(s, "\x1b[") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != 0x1b || i+1 == len(s) || s[i+1] != '[' {
			b.WriteByte(s[i])
			i++
			continue
		}
		j := i + 2
		for j < len(s) && s[j] >= 0x30 && s[j] <= 0x3f { // parameters
			j++
		}
		for j < len(s) && s[j] >= 0x20 && s[j] <= 0x2f { // intermediates
			j++
		}
		if j < len(s) && s[j] >= 0x40 && s[j] <= 0x7e { // final byte
			i = j + 1
			continue
		}
		b.WriteByte(s[i]) // not a whole sequence: ESC becomes a space below
		i++
	}
	return b.String()
}

// CleanName makes s fit a heartbeat name field (the hostname) of at most
// limit bytes: every rune that is not rollout.Printable (controls, tab and
// newline included, DEL, C1 and bidirectional controls) and invalid UTF-8
// become '?', and an over-long name is cut as CleanText cuts. agentd
// passes its host name through it, so a host with a strange name still
// heartbeats, under a name that shows as itself.
func CleanName(s string, limit int) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if !rollout.Printable(r) {
			return '?'
		}
		return r
	}, s)
	return cut(s, limit)
}

// cut cuts s to at most limit bytes at a rune boundary, ending in "..."
// when cut.
func cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	const ellipsis = "..."
	cut, tail := limit-len(ellipsis), ellipsis
	if cut < 0 { // no room for the ellipsis
		cut, tail = max(limit, 0), ""
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + tail
}
