package rollout_test

import (
	"errors"
	"strings"
	"testing"
	"unicode"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// TestNamesRefuseHostileRunes: every way a name enters the fleet (a host
// name through ValidatePrintable, a group, a version, a site, an agent
// id) refuses a control, DEL, C1 or bidirectional rune, and its error
// never carries the rune raw (it is printed to a terminal).
func TestNamesRefuseHostileRunes(t *testing.T) {
	t.Parallel()
	runes := []string{"\n", "\t", "\r", "\x1b", "\x00", "\x7f", "\u0085", "\u009b", "\u00a0", "\u061c", "\u200b", "\u200e", "\u200f",
		"\u2028", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\ufeff", "\U000e0041", "\xff"}
	validators := []struct {
		name  string
		valid string
		check func(string) error
	}{
		{"printable", "web-01.dc1", rollout.ValidatePrintable},
		{"group", "prod", rollout.ValidateGroupName},
		{"version", "1.4.2-rc.1", rollout.ValidateVersion},
		{"site", "edge-berlin", rollout.ValidateSite},
		{"agent id", "1b4e28ba-2fa1-4d2e-883f-0016d3cca42", func(s string) error { _, err := rollout.ParseAgentID(s); return err }},
	}
	for _, v := range validators {
		if v.name != "agent id" {
			if err := v.check(v.valid); err != nil {
				t.Fatalf("%s %q: %v", v.name, v.valid, err)
			}
		}
		for _, r := range runes {
			for _, s := range []string{v.valid + r, r + v.valid, v.valid[:2] + r + v.valid[2:]} {
				if v.name == "agent id" && len(s) != 36 {
					continue
				}
				err := v.check(s)
				if err == nil {
					t.Errorf("%s %q accepted", v.name, s)
					continue
				}
				if v.name == "printable" && !errors.Is(err, rollout.ErrUnprintable) {
					t.Errorf("%s %q: %v, want ErrUnprintable", v.name, s, err)
				}
				if i := strings.IndexFunc(err.Error(), func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
					t.Errorf("%s %q: the error %q holds a raw unprintable rune", v.name, s, err)
				}
			}
		}
	}
	for _, ok := range []string{"", "web-01", "hôte-日本", "a b", `C:\x`, "<b>web</b>"} {
		if err := rollout.ValidatePrintable(ok); err != nil {
			t.Errorf("ValidatePrintable(%q): %v", ok, err)
		}
	}
}
