package rollout

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Strings from peers are data. A name (a host name, a group, a version, a
// site, an agent id, an actor) is shown in tables, keys and log lines
// exactly as it is, so it may hold only runes that show as themselves:
// ValidatePrintable refuses the rest at the door. Free text (an agent's
// error, a halt reason, a note, a Prometheus label) is kept as it came and
// escaped where it is printed (internal/escape, which uses Printable).

// Printable reports whether r shows as itself on a terminal and in a
// table cell: a letter, mark, number, punctuation, symbol or the ASCII
// space (unicode.IsPrint). Everything else is refused in names and escaped
// in free text: the C0 controls (tab and newline included: they move a
// cell or forge a row), DEL, the C1 controls (U+009B is an 8-bit CSI), the
// bidirectional controls (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F,
// U+061C: they reorder what a reader sees), other format characters
// (zero-width spaces, U+FEFF), line and paragraph separators, spaces
// other than U+0020, private-use and unassigned code points.
func Printable(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 0x20 && r < 0x7f
	}
	return unicode.IsPrint(r)
}

// ValidatePrintable checks that s is valid UTF-8 made of Printable runes
// only, as every name must be; the error (ErrUnprintable) names the first
// other rune by its code point, never raw.
func ValidatePrintable(s string) error {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f { // ASCII: the names fleets use
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return fmt.Errorf("%w: invalid UTF-8 at byte %d", ErrUnprintable, i)
		case !Printable(r):
			return fmt.Errorf("%w: %U at byte %d (control, bidirectional and other invisible characters are refused in names)", ErrUnprintable, r, i)
		}
		i += size
	}
	return nil
}

// ClipText is s cut to at most n bytes, at a character boundary, with "…"
// added when anything was cut: how a peer's text (a Prometheus label, an
// error it answered) is kept small before it enters a status, an event or
// a log line. n < 1 gives "" for any s.
func ClipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
