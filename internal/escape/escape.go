package escape

import (
	"encoding/json"
	"io"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Text returns s as it is safe to print on a terminal, in a table cell or
// on one line: every rune that is not rollout.Printable is written as a Go
// escape (\n, \t, \r, \x1b, \x7f, \u009b, \u202e, \U000e0041), and every
// byte of invalid UTF-8 as \xNN. A string of printable runes (the common
// case) is returned as it is, without allocating. A backslash is left as
// it is: an escape can be imitated by typing one, never turned into a
// control.
func Text(s string) string { return escape(s, false) }

// Lines is Text but keeps newlines and tabs: for a message printed on its
// own lines (an error on stderr), where a line break in it is a line
// break. A table cell or a one-line field takes Text.
func Lines(s string) string { return escape(s, true) }

func escape(s string, keepLayout bool) string {
	i := firstUnsafe(s, keepLayout)
	if i == len(s) {
		return s
	}
	buf := make([]byte, 0, len(s)+16)
	buf = append(buf, s[:i]...)
	return string(appendText(buf, s[i:], keepLayout))
}

// firstUnsafe is the index of the first byte of s that Text (Lines, with
// keepLayout) would change; len(s) when none.
func firstUnsafe(s string, keepLayout bool) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f || keepLayout && (c == '\n' || c == '\t') {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 || !rollout.Printable(r) {
			return i
		}
		i += size
	}
	return len(s)
}

func appendText(buf []byte, s string, keepLayout bool) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f || keepLayout && (c == '\n' || c == '\t') {
			buf = append(buf, c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			buf = appendHex(append(buf, `\x`...), uint32(c), 2)
		case rollout.Printable(r):
			buf = append(buf, s[i:i+size]...)
		default:
			buf = appendRune(buf, r)
		}
		i += size
	}
	return buf
}

// appendRune appends the Go escape of r, which is not printable.
func appendRune(buf []byte, r rune) []byte {
	switch r {
	case '\a':
		return append(buf, `\a`...)
	case '\b':
		return append(buf, `\b`...)
	case '\f':
		return append(buf, `\f`...)
	case '\n':
		return append(buf, `\n`...)
	case '\r':
		return append(buf, `\r`...)
	case '\t':
		return append(buf, `\t`...)
	case '\v':
		return append(buf, `\v`...)
	}
	switch {
	case r < utf8.RuneSelf:
		return appendHex(append(buf, `\x`...), uint32(r), 2)
	case r <= 0xffff:
		return appendHex(append(buf, `\u`...), uint32(r), 4)
	}
	return appendHex(append(buf, `\U`...), uint32(r), 8)
}

func appendHex(buf []byte, v uint32, digits int) []byte {
	const hex = "0123456789abcdef"
	for shift := 4 * (digits - 1); shift >= 0; shift -= 4 {
		buf = append(buf, hex[v>>uint(shift)&0xf])
	}
	return buf
}

// JSON returns data, JSON that encoding/json wrote, with every rune
// encoding/json leaves raw that is not rollout.Printable (DEL, the C1 and
// bidirectional controls, invisible format characters: it escapes only
// those below U+0020 and U+2028/U+2029) written as a \u escape, as a
// surrogate pair beyond U+FFFF, and invalid UTF-8 as \ufffd. The JSON
// means the same; whoever prints a field of it raw prints no control.
// Such runes can only be inside strings (JSON's syntax is ASCII), and
// below U+0080 only DEL needs it (encoding/json escapes the C0 controls,
// and whitespace between values stays as it is). Data without them (the
// common case) is returned as it is.
func JSON(data []byte) []byte {
	i := firstUnsafeJSON(data)
	if i == len(data) {
		return data
	}
	out := make([]byte, 0, len(data)+32)
	out = append(out, data[:i]...)
	for i < len(data) {
		c := data[i]
		if c < 0x7f {
			out = append(out, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			out = append(out, `\ufffd`...)
		case rollout.Printable(r):
			out = append(out, data[i:i+size]...)
		case r > 0xffff:
			r1, r2 := surrogates(r)
			out = appendHex(append(out, `\u`...), uint32(r1), 4)
			out = appendHex(append(out, `\u`...), uint32(r2), 4)
		default:
			out = appendHex(append(out, `\u`...), uint32(r), 4)
		}
		i += size
	}
	return out
}

func firstUnsafeJSON(data []byte) int {
	for i := 0; i < len(data); {
		c := data[i]
		if c < 0x7f {
			i++
			continue
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 || !rollout.Printable(r) {
			return i
		}
		i += size
	}
	return len(data)
}

// surrogates is r (> U+FFFF) as a UTF-16 surrogate pair.
func surrogates(r rune) (rune, rune) {
	r -= 0x10000
	return 0xd800 + r>>10&0x3ff, 0xdc00 + r&0x3ff
}

// MarshalJSON is json.Marshal with JSON applied: for JSON that people or
// peers read (an API answer, a webhook body, -o json).
func MarshalJSON(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return JSON(data), nil
}

// NewJSONWriter returns a writer that writes to w what it is given with
// JSON applied: wrap the writer of a json.Encoder, or of a slog JSON
// handler, with it. A rune split across two writes is held until its end
// arrives.
func NewJSONWriter(w io.Writer) io.Writer {
	return &writer{w: w, apply: func(dst, p []byte) []byte { return append(dst, JSON(p)...) }}
}

// NewWriter returns a writer that writes to w what it is given with Lines
// applied: the last wall in front of a terminal (fleetctl's stdout and
// stderr), for whatever a printer did not escape itself. Tabs and
// newlines pass, as a printer's own layout: a printer escapes the cells
// and lines it fills from peers with Text. A rune split across two writes
// is held until its end arrives. Unwrap returns w, for output that is
// terminal control by design (fleetctl watch's screen).
func NewWriter(w io.Writer) io.Writer {
	return &writer{w: w, apply: func(dst, p []byte) []byte { return appendText(dst, string(p), true) }}
}

// Unwrap returns the writer a NewWriter or NewJSONWriter writes to, and w
// itself when it is neither.
func Unwrap(w io.Writer) io.Writer {
	if ew, ok := w.(*writer); ok {
		return ew.w
	}
	return w
}

type writer struct {
	w     io.Writer
	apply func(dst, p []byte) []byte
	// held is the start of a rune the last write ended in.
	held []byte
	buf  []byte
}

func (ew *writer) Write(p []byte) (int, error) {
	n := len(p)
	data := p
	if len(ew.held) > 0 {
		data = append(ew.held, p...)
		ew.held = nil
	}
	// Hold back an incomplete rune at the end (at most 3 bytes); invalid
	// bytes are not held: they are escaped.
	if cut := incompleteTail(data); cut < len(data) {
		ew.held = append([]byte(nil), data[cut:]...)
		data = data[:cut]
	}
	ew.buf = ew.apply(ew.buf[:0], data)
	if _, err := ew.w.Write(ew.buf); err != nil {
		return 0, err
	}
	return n, nil
}

// incompleteTail is where the incomplete rune data ends in begins; len(data)
// when it ends in a whole rune (or in bytes that begin none).
func incompleteTail(data []byte) int {
	for i := len(data) - 1; i >= 0 && i >= len(data)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(data[i]) {
			if data[i] >= utf8.RuneSelf && !utf8.FullRune(data[i:]) {
				return i
			}
			break
		}
	}
	return len(data)
}
