package escape_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave/internal/escape"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestText is the table of what a terminal is shown for each kind of rune.
func TestText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, text, lines string
	}{
		{"plain", "web-01.dc1 prod 1.4.2", "web-01.dc1 prod 1.4.2", "web-01.dc1 prod 1.4.2"},
		{"unicode letters and symbols", "hôte 日本 → … ✓", "hôte 日本 → … ✓", "hôte 日本 → … ✓"},
		{"forged row", "web-9\n<id>  prod  9.9.9", `web-9\n<id>  prod  9.9.9`, "web-9\n<id>  prod  9.9.9"},
		{"tab", "a\tb", `a\tb`, "a\tb"},
		{"carriage return", "ok\rFAILED", `ok\rFAILED`, `ok\rFAILED`},
		{"ESC sequence", "\x1b[2J\x1b]0;title\a", `\x1b[2J\x1b]0;title\a`, `\x1b[2J\x1b]0;title\a`},
		{"NUL, BS, VT, FF", "\x00\b\v\f", `\x00\b\v\f`, `\x00\b\v\f`},
		{"DEL", "a\x7fb", `a\x7fb`, `a\x7fb`},
		{"C1 CSI and NEL", "a\u009b31mRED\u0085", `a\u009b31mRED\u0085`, `a\u009b31mRED\u0085`},
		{"the issue's string", "a\u009b31mRED\u202eXYZ\u007fb", `a\u009b31mRED\u202eXYZ\x7fb`, `a\u009b31mRED\u202eXYZ\x7fb`},
		{"bidi embeddings and overrides", "\u202a\u202b\u202c\u202d\u202e", `\u202a\u202b\u202c\u202d\u202e`, `\u202a\u202b\u202c\u202d\u202e`},
		{"bidi isolates", "\u2066\u2067\u2068\u2069", `\u2066\u2067\u2068\u2069`, `\u2066\u2067\u2068\u2069`},
		{"bidi marks", "\u200e\u200f\u061c", `\u200e\u200f\u061c`, `\u200e\u200f\u061c`},
		{"zero width and BOM", "a\u200bb\ufeff", `a\u200bb\ufeff`, `a\u200bb\ufeff`},
		{"line and paragraph separators", "a\u2028b\u2029", `a\u2028b\u2029`, `a\u2028b\u2029`},
		{"no-break space", "a\u00a0b", `a\u00a0b`, `a\u00a0b`},
		{"tag characters", "a\U000e0041\U000e007f", `a\U000e0041\U000e007f`, `a\U000e0041\U000e007f`},
		{"invalid UTF-8", "a\xffb\xc2", `a\xffb\xc2`, `a\xffb\xc2`},
		{"a backslash stays", `C:\new`, `C:\new`, `C:\new`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := escape.Text(tc.in); got != tc.text {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.text)
			}
			if got := escape.Lines(tc.in); got != tc.lines {
				t.Errorf("Lines(%q) = %q, want %q", tc.in, got, tc.lines)
			}
			checkTerminal(t, escape.Text(tc.in), false)
			checkTerminal(t, escape.Lines(tc.in), true)
		})
	}
}

// checkTerminal fails when s holds a byte or rune a terminal would act on,
// tab and newline allowed when layout.
func checkTerminal(t *testing.T, s string, layout bool) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Errorf("%q is not valid UTF-8", s)
	}
	for _, r := range s {
		if !rollout.Printable(r) && !(layout && (r == '\n' || r == '\t')) {
			t.Errorf("%q holds %U raw", s, r)
		}
	}
}

// FuzzText: whatever the input, Text's output holds only printable runes,
// Lines' only those, tabs and newlines, and neither changes a printable
// string.
func FuzzText(f *testing.F) {
	f.Add("web-9\n<id>  prod  9.9.9")
	f.Add("a\u009b31mRED\u202eXYZ\u007fb\x1b[2J")
	f.Add("\xff\xc2\U000e0041")
	f.Fuzz(func(t *testing.T, s string) {
		checkTerminal(t, escape.Text(s), false)
		checkTerminal(t, escape.Lines(s), true)
		if rollout.ValidatePrintable(s) == nil && escape.Text(s) != s {
			t.Errorf("Text changed the printable %q to %q", s, escape.Text(s))
		}
	})
}

// TestJSON: JSON from encoding/json keeps its meaning and loses every raw
// rune a printer would act on.
func TestJSON(t *testing.T) {
	t.Parallel()
	hostile := "web-9\n\t\x1b[2J a\u009b31mRED\u202eXYZ\u007fb \u2066\u200e\u061c\u2028 \U000e0041 日本 <&> \"q\" \\"
	v := map[string]any{"hostname": hostile, "list": []string{hostile, "plain"}, hostile: 1}
	for _, indent := range []bool{false, true} {
		var data []byte
		var err error
		if indent {
			var buf bytes.Buffer
			enc := json.NewEncoder(escape.NewJSONWriter(&buf))
			enc.SetIndent("", "  ")
			err = enc.Encode(v)
			data = buf.Bytes()
		} else {
			data, err = escape.MarshalJSON(v)
		}
		if err != nil {
			t.Fatal(err)
		}
		checkTerminal(t, string(data), true)
		for _, want := range []string{`\u009b`, `\u202e`, `\u007f`, `\u2066`, `\u200e`, `\u061c`, `\u2028`, `\udb40\udc41`, `日本`} {
			if !bytes.Contains(data, []byte(want)) {
				t.Errorf("%s: want %s in it", data, want)
			}
		}
		var back map[string]any
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if back["hostname"] != hostile || back[hostile] != 1.0 {
			t.Errorf("the escaped JSON means something else: %v", back)
		}
	}
	if got := escape.JSON([]byte("\"a\xffb\"")); string(got) != `"a\ufffdb"` {
		t.Errorf("JSON of invalid UTF-8 = %s", got)
	}
	plain := []byte(`{"a":"日本 → ok"}`)
	if got := escape.JSON(plain); &got[0] != &plain[0] {
		t.Errorf("JSON copied printable data")
	}
}

// TestWriter: the writers escape what they are given even when a rune is
// split across writes, and pass a printer's tabs and newlines.
func TestWriter(t *testing.T) {
	t.Parallel()
	in := "GROUP\tHOST\nprod\ta\u009b31mRED\u202eXYZ\x7fb\x1b[2J 日本\n"
	var want strings.Builder
	want.WriteString(escape.Lines(in))
	for _, chunk := range []int{1, 2, 3, 5, len(in)} {
		var buf bytes.Buffer
		w := escape.NewWriter(&buf)
		for i := 0; i < len(in); i += chunk {
			n, err := w.Write([]byte(in[i:min(i+chunk, len(in))]))
			if err != nil || n != min(chunk, len(in)-i) {
				t.Fatalf("Write: %d, %v", n, err)
			}
		}
		if buf.String() != want.String() {
			t.Errorf("writes of %d bytes: %q, want %q", chunk, buf.String(), want.String())
		}
		if escape.Unwrap(w) != &buf {
			t.Errorf("Unwrap does not return the writer underneath")
		}
	}
	var buf bytes.Buffer
	jw := escape.NewJSONWriter(&buf)
	doc := "{\"h\":\"a\u009bb\u202e\"}\n"
	for i := range len(doc) {
		if _, err := jw.Write([]byte{doc[i]}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := buf.String(), `{"h":"a\u009bb\u202e"}`+"\n"; got != want {
		t.Errorf("JSON writer, a byte at a time: %q, want %q", got, want)
	}
}
