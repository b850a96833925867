package install_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

const someID = "1b4e28ba-2fa1-4d2e-883f-0016d3cca427"

func TestLoadOrCreateAgentID(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "state", "root")
	id, err := install.LoadOrCreateAgentID(root)
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	if _, err := rollout.ParseAgentID(string(id)); err != nil {
		t.Fatalf("created id %q is not canonical: %v", id, err)
	}
	path := filepath.Join(root, install.AgentIDFileName)
	if got, want := string(readFile(t, path)), string(id)+"\n"; got != want {
		t.Errorf("agent_id file holds %q, want %q", got, want)
	}
	if got, want := statMode(t, path), 0o644&^umask; got != want {
		t.Errorf("agent_id mode %v, want %v", got, want)
	}
	for i := range 3 {
		again, err := install.LoadOrCreateAgentID(root)
		if err != nil {
			t.Fatalf("call %d: %v", i+2, err)
		}
		if again != id {
			t.Fatalf("call %d returned %q, want the stored %q", i+2, again, id)
		}
	}
	if diff := cmp.Diff([]string{install.AgentIDFileName}, dirNames(t, root)); diff != "" {
		t.Errorf("files in root (-want +got):\n%s", diff)
	}

	// Another host draws another id.
	other, err := install.LoadOrCreateAgentID(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if other == id {
		t.Errorf("two roots got the same id %q", id)
	}
}

func TestLoadAgentIDExisting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
	}{
		{name: "as written", content: someID + "\n"},
		{name: "no newline", content: someID},
		{name: "CRLF and spaces from a hand edit", content: "  " + someID + " \r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			path := filepath.Join(root, install.AgentIDFileName)
			writeFile(t, path, tc.content)
			id, err := install.LoadOrCreateAgentID(root)
			if err != nil {
				t.Fatalf("LoadOrCreateAgentID: %v", err)
			}
			if id != someID {
				t.Errorf("id = %q, want %q", id, someID)
			}
			if got := string(readFile(t, path)); got != tc.content {
				t.Errorf("file rewritten to %q", got)
			}
		})
	}
}

func TestLoadAgentIDCorrupt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
	}{
		{name: "empty", content: ""},
		{name: "whitespace", content: " \n"},
		{name: "uppercase", content: strings.ToUpper(someID) + "\n"},
		{name: "no hyphens", content: strings.ReplaceAll(someID, "-", "") + "\n"},
		{name: "braced", content: "{" + someID + "}\n"},
		{name: "truncated", content: someID[:20] + "\n"},
		{name: "two ids", content: someID + "\n" + someID + "\n"},
		{name: "binary", content: "\x00\x01\x02\xff"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			path := filepath.Join(root, install.AgentIDFileName)
			writeFile(t, path, tc.content)
			id, err := install.LoadOrCreateAgentID(root)
			if !errors.Is(err, install.ErrCorrupt) {
				t.Errorf("LoadOrCreateAgentID = %q, %v; want ErrCorrupt", id, err)
			}
			if id != "" {
				t.Errorf("returned id %q along with an error", id)
			}
			if got := string(readFile(t, path)); got != tc.content {
				t.Errorf("corrupt agent_id was replaced with %q", got)
			}
			if diff := cmp.Diff([]string{install.AgentIDFileName}, dirNames(t, root)); diff != "" {
				t.Errorf("files in root (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLoadAgentIDUnreadable: a file that cannot be read is an error, never a
// reason to draw a new id.
func TestLoadAgentIDUnreadable(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	path := filepath.Join(root, install.AgentIDFileName)
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if id, err := install.LoadOrCreateAgentID(root); err == nil {
		t.Fatalf("agent_id is a directory, yet got id %q", id)
	}
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		t.Errorf("agent_id directory was replaced (stat: %v, %v)", fi, err)
	}
}
