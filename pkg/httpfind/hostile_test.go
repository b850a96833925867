package httpfind

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestFindHostileParams: a host or group parameter holding a newline, an
// 8-bit CSI, DEL, a right-to-left override or ESC is refused (400), and
// the answer, which a script may print, carries none of them raw.
func TestFindHostileParams(t *testing.T) {
	srv := serve(t, &Handler{Store: storeWith(rollout.DefaultSpec(v1, v2), testStatus(rollout.StateDone))})
	for _, r := range []string{"\n", "\u009b", "\x7f", "\u202e", "\x1b[2J"} {
		for _, q := range []url.Values{
			{"host": {string(idLow) + r}, "group": {testGroup}},
			{"host": {r + "x"}, "group": {testGroup}},
			{"host": {string(idLow)}, "group": {testGroup + r}},
		} {
			resp := get(t, http.DefaultClient, http.MethodGet, srv.URL+PathFind+"?"+q.Encode())
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s: %d, want 400", q.Encode(), resp.StatusCode)
			}
			if i := strings.IndexFunc(string(body), func(r rune) bool { return !unicode.IsPrint(r) && r != '\n' }); i >= 0 {
				t.Errorf("%s: the answer holds a raw unprintable rune at %d: %q", q.Encode(), i, body)
			}
		}
	}
}
