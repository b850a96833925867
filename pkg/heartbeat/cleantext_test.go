package heartbeat_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
)

// FuzzCleanText: whatever an app prints as an error (or a host calls
// itself), the agent's cleaned text (CleanText; CleanName for the host
// name) is accepted by the controller and fits the field.
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
			Hostname: heartbeat.CleanName(s, heartbeat.MaxHostnameLen), Error: got, At: time.Unix(1700000000, 0).UTC()}
		if _, err := heartbeat.Encode(&hb); err != nil {
			t.Fatalf("cleaned text rejected: %v", err)
		}
		out := heartbeat.CleanOutput(s)
		if len(out) > heartbeat.OutputBytes || strings.Count(out, "\n") >= heartbeat.OutputLines {
			t.Fatalf("CleanOutput(%q) = %q: %d bytes, %d lines; want at most %d and %d", s, out, len(out), strings.Count(out, "\n")+1,
				heartbeat.OutputBytes, heartbeat.OutputLines)
		}
		hb.Error, hb.ErrorOutput = "x", out
		if _, err := heartbeat.Encode(&hb); err != nil {
			t.Fatalf("cleaned output rejected: %v", err)
		}
		if len(s) <= limit && strings.ToValidUTF8(s, "") == s && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\t' && r != '\n' }) && got != s {
			t.Fatalf("CleanText changed clean text %q to %q", s, got)
		}
	})
}

// TestCleanName: a host name with characters a name may not hold is sent
// with each of them as '?', within the limit, and accepted; a plain one is
// sent as it is.
func TestCleanName(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"web-9.example.com", "web-9.example.com"},
		{"web-9\n1b4e28ba-2fa1-4d2e-883f-0016d3cca427  prod  9.9.9", "web-9?1b4e28ba-2fa1-4d2e-883f-0016d3cca427  prod  9.9.9"},
		{"a\u009b31mRED\u202eXYZ\u007fb", "a?31mRED?XYZ?b"},
		{"tab\there\x1b[2J", "tab?here?[2J"},
		{"bad\xffbyte", "bad?byte"},
		{"ünïcödé-hôst", "ünïcödé-hôst"},
	}
	for _, tc := range tests {
		got := heartbeat.CleanName(tc.in, heartbeat.MaxHostnameLen)
		if got != tc.want {
			t.Errorf("CleanName(%q) = %q, want %q", tc.in, got, tc.want)
		}
		hb := heartbeat.Heartbeat{V: 1, AgentID: "1b4e28ba-2fa1-4d2e-883f-0016d3cca427", Group: "g", Hostname: got,
			At: time.Unix(1700000000, 0).UTC()}
		if _, err := heartbeat.Encode(&hb); err != nil {
			t.Errorf("CleanName(%q) = %q, refused: %v", tc.in, got, err)
		}
	}
}

// TestCleanOutput: what an agent sends of an app's output is its last
// lines, at most OutputLines and OutputBytes, controls made spaces, and
// nothing for output that is only white space.
func TestCleanOutput(t *testing.T) {
	t.Parallel()
	var many []string
	for i := range 25 {
		many = append(many, "line "+strings.Repeat("x", i))
	}
	tests := []struct{ name, in, want string }{
		{"empty", "", ""},
		{"white space", " \n\t\r\n", ""},
		{"two lines", "starting\npanic: no config\n", "starting\npanic: no config"},
		{"CRLF", "a\r\nb\r\n", "a\nb"},
		{"last ten of 25", strings.Join(many, "\n") + "\n", strings.Join(many[15:], "\n")},
		{"escape sequences", "\x1b]0;title\x07red\x00\tok\xff", " ]0;title red \tok\uFFFD"},
		{"colours removed", "\x1b[31mFATAL:\x1b[0m config \x1b[1;4mmissing\x1b[m\x1b[2J", "FATAL: config missing"},
		{"a cut sequence", "tail \x1b[31", "tail  [31"},
		{"one long line keeps its end", strings.Repeat("a", 3000) + "END", "..." + strings.Repeat("a", heartbeat.OutputBytes-6) + "END"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := heartbeat.CleanOutput(tc.in); got != tc.want {
				t.Errorf("CleanOutput(%q) =\n%q, want\n%q", tc.in, got, tc.want)
			}
		})
	}
}
