package heartbeat_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// hostileRunes are what a hostile agent puts in a string to steer a
// terminal or a reader: a forged table row, an 8-bit CSI, DEL, ESC, a
// right-to-left override and the other bidirectional controls.
var hostileRunes = []struct{ name, s string }{
	{"newline", "\n"},
	{"tab", "\t"},
	{"carriage return", "\r"},
	{"ESC", "\x1b"},
	{"NUL", "\x00"},
	{"DEL", "\x7f"},
	{"C1 CSI U+009B", "\u009b"},
	{"C1 NEL U+0085", "\u0085"},
	{"RLO U+202E", "\u202e"},
	{"LRE U+202A", "\u202a"},
	{"LRI U+2066", "\u2066"},
	{"PDI U+2069", "\u2069"},
	{"LRM U+200E", "\u200e"},
	{"RLM U+200F", "\u200f"},
	{"ALM U+061C", "\u061c"},
	{"zero-width space U+200B", "\u200b"},
	{"line separator U+2028", "\u2028"},
}

// TestNamesRefuseUnprintable: a heartbeat whose name fields (every field
// that names something) hold a control, DEL, C1 or bidirectional rune is
// refused, by the fast path and by encoding/json alike, with an error that
// wraps rollout.ErrUnprintable (what the controller counts) and shows the
// rune as a code point, never raw. The same runes in the free-text error
// are accepted (but for the C0 controls other than tab and newline, refused
// there as before): printers escape them.
func TestNamesRefuseUnprintable(t *testing.T) {
	t.Parallel()
	// Each name field, and a value into which the hostile rune goes
	// (valid for the field without it).
	fields := []struct{ key, before, after string }{
		{"hostname", "web-9", "x"},
		{"group", "prod", "x"},
		{"active_version", "1.4.2", ""},
		{"start_version", "1.4.1", ""},
		{"rollback_from", "1.4.3", ""},
		{"updating_to", "1.4.3", ""},
		{"updater_version", "1.4.2", ""},
		{"site", "edge", "x"},
		{"agent_id", string(testID), ""},
	}
	for _, f := range fields {
		for _, r := range hostileRunes {
			t.Run(f.key+"/"+r.name, func(t *testing.T) {
				t.Parallel()
				value := f.before + r.s + f.after
				data := payload(t, func(m map[string]any) {
					m[f.key] = value
					if f.key == "rollback_from" {
						m["rollback"], m["error"] = true, "rolled back"
					}
				})
				h, err := heartbeat.Decode(data)
				sameAsStd(t, data, h, err)
				if !errors.Is(err, rollout.ErrUnprintable) || !errors.Is(err, heartbeat.ErrMalformed) {
					t.Fatalf("Decode of %s %q: %v, want ErrUnprintable and ErrMalformed", f.key, value, err)
				}
				if msg := err.Error(); rollout.ValidatePrintable(msg) != nil || !strings.Contains(msg, f.key+":") ||
					!strings.Contains(msg, fmt.Sprintf("%U", []rune(r.s)[0])) {
					t.Errorf("error %q: want it printable, naming %s and %U", msg, f.key, []rune(r.s)[0])
				}
				// The raw form, as agents write it and the fast path
				// reads it (no JSON escapes).
				if r.s >= " " {
					raw := strings.Replace(string(payload(t, func(m map[string]any) {
						m[f.key] = f.before + "HOSTILE" + f.after
						if f.key == "rollback_from" {
							m["rollback"], m["error"] = true, "rolled back"
						}
					})), "HOSTILE", r.s, 1)
					if !heartbeat.FastPath([]byte(raw)) {
						t.Fatalf("the fast path does not read %q", raw)
					}
					h, err := heartbeat.Decode([]byte(raw))
					sameAsStd(t, []byte(raw), h, err)
					if !errors.Is(err, rollout.ErrUnprintable) {
						t.Fatalf("Decode of raw %s %q: %v, want ErrUnprintable", f.key, value, err)
					}
				}
			})
		}
	}
	t.Run("error text keeps them", func(t *testing.T) {
		t.Parallel()
		// C0 controls other than tab and newline are refused in free text
		// too (JSON makes one byte of them six: the size bound); the rest
		// is kept as it came.
		var all strings.Builder
		for _, r := range hostileRunes {
			if r.s < " " && r.s != "\t" && r.s != "\n" {
				continue
			}
			all.WriteString("x" + r.s)
		}
		data := payload(t, func(m map[string]any) {
			m["rollback"], m["rollback_from"], m["error"] = true, "1.4.3", all.String()
		})
		h, err := heartbeat.Decode(data)
		sameAsStd(t, data, h, err)
		if err != nil {
			t.Fatalf("Decode of a hostile error text: %v (free text is escaped where printed, not refused)", err)
		}
		if h.Error != all.String() {
			t.Errorf("error = %q, want %q", h.Error, all.String())
		}
	})
}
