package heartbeat_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
)

// FuzzCleanText: whatever an app prints as an error, the agent's cleaned
// text is accepted by the controller and fits the field.
func FuzzCleanText(f *testing.F) {
	f.Add("plain", 1024)
	f.Add(strings.Repeat("\xff<\x00\"", 600), 1024)
	f.Add("ünïcödé", 4)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		if limit < 4 || limit > heartbeat.MaxErrorLen {
			limit = heartbeat.MaxErrorLen
		}
		got := heartbeat.CleanText(s, limit)
		if len(got) > limit {
			t.Fatalf("CleanText(%q, %d) is %d bytes", s, limit, len(got))
		}
		hb := heartbeat.Heartbeat{V: 1, AgentID: "1b4e28ba-2fa1-4d2e-883f-0016d3cca427", Group: "g",
			Hostname: heartbeat.CleanText(s, heartbeat.MaxHostnameLen), Error: got, At: time.Unix(1700000000, 0).UTC()}
		if _, err := heartbeat.Encode(&hb); err != nil {
			t.Fatalf("cleaned text rejected: %v", err)
		}
		if len(s) <= limit && strings.ToValidUTF8(s, "") == s && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\t' && r != '\n' }) && got != s {
			t.Fatalf("CleanText changed clean text %q to %q", s, got)
		}
	})
}
