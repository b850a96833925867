package install_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// umask is the process umask, read once at start-up before any test creates
// files (reading it means setting it).
var umask = func() os.FileMode {
	m := syscall.Umask(0)
	syscall.Umask(m)
	return os.FileMode(m)
}()

var ignoreDoc = cmpopts.IgnoreUnexported(install.UpdateFile{})

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// yamlMap reads a file as generic YAML, to see exactly which keys it holds.
func yamlMap(t *testing.T, path string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(readFile(t, path), &m); err != nil {
		t.Fatalf("%s is not YAML: %v", path, err)
	}
	return m
}

func fullUpdateFile() *install.UpdateFile {
	f := install.NewUpdateFile("prod")
	f.Spec = install.UpdateSpec{
		NATS:        "nats://nats-1.example.net:4222",
		FindURLs:    []string{"https://ctl-1.example.net/v1/find", "https://ctl-2.example.net/v1/find"},
		Group:       "prod",
		URLTemplate: "https://releases.example.net/app-{{.Version}}-{{.OS}}-{{.Arch}}.tar.gz",
		Enabled:     true,
		App: install.AppSpec{
			Process:       "app",
			Args:          []string{"--port", "8080", "--name=a b"},
			BinDir:        "/usr/local/bin",
			HealthURL:     "http://127.0.0.1:8080/healthz",
			HealthCommand: "curl -fsS http://127.0.0.1:8080/ready && test -S /run/app.sock",
			DB:            "/var/lib/app/app.db",
			PublicKey:     "/etc/fleetwave/release.pub",
		},
	}
	f.Status = install.Status{
		StartTime:      time.Date(2025, 3, 1, 10, 0, 0, 123456789, time.UTC),
		StartVersion:   "1.4.1",
		ActiveVersion:  "1.4.1",
		VersionHistory: []string{"1.4.0", "1.3.9"},
		Rollback:       true,
		RollbackFrom:   "1.5.0-rc.1",
		Error:          "health check: GET http://127.0.0.1:8080/healthz: 503\nsecond line: \"quoted\" #not-a-comment",
		ErrorClass:     install.ClassRelease,
		ErrorCause:     "unhealthy",
		RetryToken:     "20250301T100500.000000000Z",
	}
	return f
}

func TestUpdateFileRoundTrip(t *testing.T) {
	t.Parallel()
	nonUTC := fullUpdateFile()
	nonUTC.Status.StartTime = time.Date(2025, 3, 1, 11, 0, 0, 0, time.FixedZone("CET", 3600))
	tests := []struct {
		name string
		file *install.UpdateFile
	}{
		{name: "new", file: install.NewUpdateFile("prod")},
		{name: "new without group", file: install.NewUpdateFile("")},
		{name: "full", file: fullUpdateFile()},
		{name: "non-UTC start time", file: nonUTC},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := filepath.Join(t.TempDir(), "not", "yet", "there")
			if err := tc.file.Save(root); err != nil {
				t.Fatalf("Save: %v", err)
			}
			path := filepath.Join(root, install.UpdateFileName)
			if got, want := statMode(t, path), 0o644&^umask; got != want {
				t.Errorf("update.yaml mode %v, want %v", got, want)
			}
			got, err := install.LoadUpdateFile(root)
			if err != nil {
				t.Fatalf("Load: %v\n%s", err, readFile(t, path))
			}
			if diff := cmp.Diff(tc.file, got, ignoreDoc); diff != "" {
				t.Errorf("Load(Save(f)) (-want +got):\n%s", diff)
			}
			// Saving what was loaded, unchanged, writes the same bytes.
			first := readFile(t, path)
			if err := got.Save(root); err != nil {
				t.Fatalf("second Save: %v", err)
			}
			if second := readFile(t, path); !bytes.Equal(first, second) {
				t.Errorf("saving an unchanged file changed it:\n--- first\n%s--- second\n%s", first, second)
			}
			if diff := cmp.Diff([]string{install.UpdateFileName}, dirNames(t, root)); diff != "" {
				t.Errorf("files in root (-want +got):\n%s", diff)
			}
		})
	}
}

func statMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestUpdateFileKeepsUnknownFields: a newer agentd (or an operator) may have
// written fields this build does not know; a rewrite keeps them, while known
// fields that were cleared really disappear.
func TestUpdateFileKeepsUnknownFields(t *testing.T) {
	t.Parallel()
	const written = `version: v1
kind: update_config
future_top: {a: 1, b: [x, y]}
spec:
  group: prod
  enabled: true
  url_template: https://releases.example.net/{{.Version}}.tar.gz
  find_urls: [https://ctl-1.example.net/v1/find]
  proxy: http://proxy.example.net:3128
status:
  active_version: 1.2.3
  start_version: 1.2.2
  version_history: [1.2.2]
  rollback: true
  rollback_from: 1.3.0
  error: "download failed: HTTP 404"
  future_status: keep-me
  future_nested: {depth: 2}
`
	tests := []struct {
		name string
		edit func(f *install.UpdateFile)
		want map[string]any
	}{
		{
			name: "unchanged",
			edit: func(f *install.UpdateFile) {},
			want: map[string]any{
				"version": "v1", "kind": "update_config",
				"future_top": map[string]any{"a": 1, "b": []any{"x", "y"}},
				"spec": map[string]any{
					"group": "prod", "enabled": true,
					"url_template": "https://releases.example.net/{{.Version}}.tar.gz",
					"find_urls":    []any{"https://ctl-1.example.net/v1/find"},
					"proxy":        "http://proxy.example.net:3128",
				},
				"status": map[string]any{
					"active_version": "1.2.3", "start_version": "1.2.2", "version_history": []any{"1.2.2"},
					"rollback": true, "rollback_from": "1.3.0", "error": "download failed: HTTP 404",
					"future_status": "keep-me", "future_nested": map[string]any{"depth": 2},
				},
			},
		},
		{
			name: "known fields changed and cleared",
			edit: func(f *install.UpdateFile) {
				f.Spec.Group, f.Spec.Enabled, f.Spec.URLTemplate, f.Spec.FindURLs = "staging", false, "", nil
				f.Spec.NATS = "nats://new:4222"
				f.Status.ActiveVersion, f.Status.StartVersion = "1.2.4", "1.2.3"
				f.Status.VersionHistory = []string{"1.2.3", "1.2.2"}
				f.Status.Rollback, f.Status.RollbackFrom, f.Status.Error = false, "", ""
			},
			want: map[string]any{
				"version": "v1", "kind": "update_config",
				"future_top": map[string]any{"a": 1, "b": []any{"x", "y"}},
				"spec": map[string]any{
					"group": "staging", "enabled": false, "nats": "nats://new:4222",
					"proxy": "http://proxy.example.net:3128",
				},
				"status": map[string]any{
					"active_version": "1.2.4", "start_version": "1.2.3", "version_history": []any{"1.2.3", "1.2.2"},
					"rollback":      false,
					"future_status": "keep-me", "future_nested": map[string]any{"depth": 2},
				},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			path := filepath.Join(root, install.UpdateFileName)
			writeFile(t, path, written)
			f, err := install.LoadUpdateFile(root)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			tc.edit(f)
			if err := f.Save(root); err != nil {
				t.Fatalf("Save: %v", err)
			}
			if diff := cmp.Diff(tc.want, yamlMap(t, path)); diff != "" {
				t.Errorf("update.yaml after Save (-want +got):\n%s\nfile:\n%s", diff, readFile(t, path))
			}
			// And this build reads back what it wrote.
			got, err := install.LoadUpdateFile(root)
			if err != nil {
				t.Fatalf("Load after Save: %v", err)
			}
			if diff := cmp.Diff(f, got, ignoreDoc); diff != "" {
				t.Errorf("Load after Save (-want +got):\n%s", diff)
			}
			// A second round keeps the unknown fields too.
			if err := got.Save(root); err != nil {
				t.Fatalf("second Save: %v", err)
			}
			if diff := cmp.Diff(tc.want, yamlMap(t, path)); diff != "" {
				t.Errorf("update.yaml after a second Save (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUpdateFileCorrupt(t *testing.T) {
	t.Parallel()
	const head = "version: v1\nkind: update_config\n"
	tests := []struct {
		name    string
		content string
	}{
		{name: "bad YAML", content: "version: v1\nkind: [update_config\n"},
		{name: "tab indentation", content: head + "spec:\n\tgroup: prod\n"},
		{name: "empty", content: ""},
		{name: "only a comment", content: "# nothing here\n"},
		{name: "a list", content: "- version: v1\n"},
		{name: "a scalar", content: "update_config\n"},
		{name: "wrong kind", content: "version: v1\nkind: something_else\n"},
		{name: "missing kind", content: "version: v1\n"},
		{name: "wrong version", content: "version: v2\nkind: update_config\n"},
		{name: "duplicate key", content: head + "version: v1\n"},
		{name: "spec is a list", content: head + "spec: [a, b]\n"},
		{name: "status is a number", content: head + "status: 5\n"},
		{name: "rollback not a bool", content: head + "status:\n  rollback: maybe\n"},
		{name: "start_time not a time", content: head + "status:\n  start_time: yesterday\n"},
		{name: "bad group", content: head + "spec:\n  group: Prod\n"},
		{name: "active_version with v", content: head + "status:\n  active_version: v1.2.3\n"},
		{name: "start_version short", content: head + "status:\n  start_version: \"1.2\"\n"},
		{name: "rollback_from not a version", content: head + "status:\n  rollback_from: abc\n"},
		{name: "app runs two ways", content: head + "spec:\n  app: {process: app, systemd_unit: app.service}\n"},
		{name: "app process a path", content: head + "spec:\n  app: {process: ../../bin/sh}\n"},
		{name: "app bin_dir relative", content: head + "spec:\n  app: {bin_dir: bin}\n"},
		{name: "app db relative", content: head + "spec:\n  app: {db: app.db}\n"},
		{name: "app public_key relative", content: head + "spec:\n  app: {public_key: key.pub}\n"},
		{name: "app args not a list", content: head + "spec:\n  app: {args: 5}\n"},
		{name: "retry_token too long", content: head + "status:\n  retry_token: " + strings.Repeat("t", 65) + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			path := filepath.Join(root, install.UpdateFileName)
			writeFile(t, path, tc.content)

			if _, err := install.LoadUpdateFile(root); !errors.Is(err, install.ErrCorrupt) {
				t.Errorf("LoadUpdateFile: %v, want ErrCorrupt", err)
			}
			f, err := install.LoadOrCreateUpdateFile(root, "prod")
			if !errors.Is(err, install.ErrCorrupt) {
				t.Errorf("LoadOrCreateUpdateFile: %v, want ErrCorrupt", err)
			}
			if f != nil {
				t.Errorf("LoadOrCreateUpdateFile returned %+v along with an error", f)
			}
			if got := string(readFile(t, path)); got != tc.content {
				t.Errorf("corrupt file was rewritten:\n%s", got)
			}
			if diff := cmp.Diff([]string{install.UpdateFileName}, dirNames(t, root)); diff != "" {
				t.Errorf("files in root (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadUpdateFileMissing(t *testing.T) {
	t.Parallel()
	_, err := install.LoadUpdateFile(t.TempDir())
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadUpdateFile of a missing file: %v, want fs.ErrNotExist", err)
	}
	if errors.Is(err, install.ErrCorrupt) {
		t.Errorf("a missing file is reported as corrupt: %v", err)
	}
}

func TestLoadOrCreateUpdateFile(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "var", "lib", "fleetwave")
	f, err := install.LoadOrCreateUpdateFile(root, "prod")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	want := install.NewUpdateFile("prod")
	if diff := cmp.Diff(want, f, ignoreDoc); diff != "" {
		t.Errorf("created file (-want +got):\n%s", diff)
	}
	onDisk, err := install.LoadUpdateFile(root)
	if err != nil {
		t.Fatalf("the created file does not load: %v", err)
	}
	if diff := cmp.Diff(want, onDisk, ignoreDoc); diff != "" {
		t.Errorf("created file on disk (-want +got):\n%s", diff)
	}

	// An existing file wins over the group argument and is not rewritten.
	f.Status.ActiveVersion = "1.2.3"
	if err := f.Save(root); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, filepath.Join(root, install.UpdateFileName))
	again, err := install.LoadOrCreateUpdateFile(root, "staging")
	if err != nil {
		t.Fatalf("load existing: %v", err)
	}
	if again.Spec.Group != "prod" || again.Status.ActiveVersion != "1.2.3" {
		t.Errorf("LoadOrCreateUpdateFile = group %q, active %q; want the existing prod, 1.2.3", again.Spec.Group, again.Status.ActiveVersion)
	}
	if after := readFile(t, filepath.Join(root, install.UpdateFileName)); !bytes.Equal(before, after) {
		t.Errorf("loading an existing file rewrote it:\n%s", after)
	}
}

func TestLoadOrCreateUpdateFileBadGroup(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if _, err := install.LoadOrCreateUpdateFile(root, "Not A Group"); err == nil {
		t.Fatal("created an update.yaml with an invalid group")
	}
	if names := dirNames(t, root); len(names) != 0 {
		t.Errorf("files left after a failed create: %v", names)
	}
}

// TestSaveInvalidKeepsFile: Save refuses what Load would call corrupt, and
// leaves the previous file in place.
func TestSaveInvalidKeepsFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(f *install.UpdateFile)
	}{
		{name: "bad active_version", edit: func(f *install.UpdateFile) { f.Status.ActiveVersion = "v2" }},
		{name: "bad start_version", edit: func(f *install.UpdateFile) { f.Status.StartVersion = "1.2" }},
		{name: "bad rollback_from", edit: func(f *install.UpdateFile) { f.Status.RollbackFrom = "abc" }},
		{name: "bad group", edit: func(f *install.UpdateFile) { f.Spec.Group = "a.b" }},
		{name: "wrong kind", edit: func(f *install.UpdateFile) { f.Kind = "other" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			f := fullUpdateFile()
			if err := f.Save(root); err != nil {
				t.Fatal(err)
			}
			before := readFile(t, filepath.Join(root, install.UpdateFileName))
			tc.edit(f)
			if err := f.Save(root); err == nil {
				t.Fatal("Save of an invalid file succeeded")
			}
			if after := readFile(t, filepath.Join(root, install.UpdateFileName)); !bytes.Equal(before, after) {
				t.Errorf("failed Save changed the file:\n%s", after)
			}
		})
	}
}

func TestUpdateFileScriptInstaller(t *testing.T) {
	root := t.TempDir()
	f := install.NewUpdateFile("prod")
	f.Spec.App = install.AppSpec{Installer: "script", SystemdUnit: "app.service",
		Script: install.ScriptSpec{Install: "apt-get install -y \"app=$FLEETWAVE_VERSION\"", Version: "dpkg-query -W -f='${Version}' app", Timeout: 90 * time.Second}}
	if err := f.Save(root); err != nil {
		t.Fatal(err)
	}
	data := string(readFile(t, filepath.Join(root, install.UpdateFileName)))
	if !strings.Contains(data, "installer: script") || !strings.Contains(data, "timeout: 1m30s") {
		t.Fatalf("update.yaml:\n%s", data)
	}
	g, err := install.LoadUpdateFile(root)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(f.Spec.App, g.Spec.App); diff != "" {
		t.Fatalf("read back %+v, want %+v", g.Spec.App, f.Spec.App)
	}
	for name, app := range map[string]install.AppSpec{
		"no install command":  {Installer: "script", Script: install.ScriptSpec{Version: "v"}},
		"no version command":  {Installer: "script", Script: install.ScriptSpec{Install: "i"}},
		"a process":           {Installer: "script", Process: "app", Script: install.ScriptSpec{Install: "i", Version: "v"}},
		"script, not chosen":  {Script: install.ScriptSpec{Install: "i", Version: "v"}},
		"negative timeout":    {Installer: "script", Script: install.ScriptSpec{Install: "i", Version: "v", Timeout: -time.Second}},
		"unknown installer":   {Installer: "docker"},
		"NUL in the command":  {Installer: "script", Script: install.ScriptSpec{Install: "i\x00", Version: "v"}},
		"a command too large": {Installer: "script", Script: install.ScriptSpec{Install: strings.Repeat("x", install.MaxScriptLen+1), Version: "v"}},
	} {
		if err := app.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
