package view

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestJSONCut: whatever a string holds, its cut encodes to at most n bytes
// of JSON, is a prefix of it on a character boundary with "…" when cut, and
// a string that fits is kept whole.
func TestJSONCut(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
	}{
		{"plain", "canaries healthy"},
		{"long ascii", strings.Repeat("a", 2000)},
		{"escapes", strings.Repeat("\x1b[31m<b>&\"\\\n", 300)},
		{"multibyte", strings.Repeat("é→\u202e", 400)},
		{"invalid bytes", strings.Repeat("\xff\xfe", 600)},
		{"real replacement char", strings.Repeat("\uFFFD", 400)},
		{"separators", strings.Repeat("\u2028\u2029", 300)},
	} {
		for _, n := range []int{16, 128, 512} {
			got := JSONCut(tc.s, n)
			enc, _ := json.Marshal(got)
			if len(enc)-2 > n {
				t.Errorf("%s, %d: encodes to %d bytes", tc.name, n, len(enc)-2)
			}
			whole, _ := json.Marshal(tc.s)
			switch {
			case len(whole)-2 <= n && got != tc.s:
				t.Errorf("%s, %d: cut %q although it fits", tc.name, n, got)
			case got != tc.s && (!strings.HasSuffix(got, "…") || !strings.HasPrefix(tc.s, strings.TrimSuffix(got, "…"))):
				t.Errorf("%s, %d: %q is not a prefix and an ellipsis", tc.name, n, got)
			case utf8.ValidString(tc.s) && !utf8.ValidString(got):
				t.Errorf("%s, %d: cut inside a character", tc.name, n)
			}
		}
	}
}
