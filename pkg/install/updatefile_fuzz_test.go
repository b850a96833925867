package install_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// updateFileFuzzSeeds are the FuzzUpdateFile seeds kept in
// testdata/fuzz/FuzzUpdateFile: whole update.yaml files.
func updateFileFuzzSeeds(t testing.TB) map[string]string {
	t.Helper()
	full, err := fullUpdateFile().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	const head = "version: v1\nkind: update_config\n"
	var history strings.Builder
	for i := range 30 {
		fmt.Fprintf(&history, "    - 1.%d.%d\n", i/10, i%10)
	}
	return map[string]string{
		"full":       string(full),
		"empty":      "",
		"wrong-kind": "version: v1\nkind: something_else\nspec:\n  group: prod\n",
		"unknown-fields": head + `future_top: {a: 1, b: [x, y]}
spec:
  group: prod
  enabled: true
  proxy: http://proxy.example.net:3128
status:
  active_version: 1.2.3
  version_history: [1.2.2]
  future_status: keep-me
  future_nested: {depth: 2}
`,
		"huge-strings": head + "spec:\n  group: " + strings.Repeat("g", 63) +
			"\n  url_template: https://releases.example.net/" + strings.Repeat("x/", 600) + "{{.Version}}.tar.gz" +
			"\n? " + strings.Repeat("k", 1100) + "\n: an unknown key too long (1024) to be written as a simple key" +
			"\nstatus:\n  version_history:\n" + history.String() +
			"  error: " + fmt.Sprintf("%q", strings.Repeat("line with \"quotes\", # hash, é, \t tab\n", 40)) + "\n",
		"anchors-aliases": `version: &v v1
kind: update_config
base: &base {group: prod, enabled: true}
spec:
  <<: *base
  nats: nats://n:4222
status: &st
  active_version: &ver 1.2.3
  start_version: *ver
  version_history: [*ver, *v]
copy: *st
`,
		"tabs":                    head + "spec:\n  group:\tprod\n  nats: \"nats://a:4222\\tb\"\nstatus:\n  error: |\n    inner\ttab\n    trailing tab\t\n",
		"tab-indent":              head + "spec:\n\tgroup: prod\n",
		"comments":                "# head comment\n" + head + "spec: # spec\n  group: prod # line\n  # foot of spec\nstatus:\n  error: \"\" # empty\n# foot\n",
		"flow-json":               `{"version": "v1", "kind": "update_config", "spec": {"group": "prod", "find_urls": ["https://a/v1/find"]}, "status": {"start_time": "2025-03-01T10:00:00+01:00", "rollback": false}}`,
		"two-docs":                head + "---\nversion: v2\n",
		"app-systemd":             head + "spec:\n  group: prod\n  app:\n    systemd_unit: app.service\n    health_command: 'test \"$(cat /run/app.state)\" = ok'\n    future_app_field: [1, 2]\n",
		"app-both-runners":        head + "spec:\n  group: prod\n  app: {process: app, systemd_unit: app.service}\n",
		"app-relative-path":       head + "spec:\n  group: prod\n  app: {process: app, bin_dir: bin}\n",
		"app-empty":               head + "spec:\n  group: prod\n  app: {args: [], process: \"\"}\n",
		"error-class":             head + "spec:\n  group: prod\nstatus:\n  active_version: 1.2.3\n  error: 'install 1.3.0: fetch: download failed: HEAD https://r/1.3.0: 503 Service Unavailable'\n  error_class: infrastructure\n  error_cause: download failed (HTTP 503)\n",
		"error-class-unknown":     head + "spec:\n  group: prod\nstatus:\n  error: boom\n  error_class: weather\n",
		"error-class-alone":       head + "spec:\n  group: prod\nstatus:\n  error_class: artifact\n",
		"hostname":                head + "spec:\n  group: prod\n  hostname: web-1\n",
		"hostname-control":        head + "spec:\n  group: prod\n  hostname: \"web\\t1\\u001b[2J\"\n",
		"app-script":              head + "spec:\n  group: prod\n  app:\n    installer: script\n    script:\n      install: |\n        dpkg --configure -a\n        apt-get install -y --allow-downgrades \"app=$FLEETWAVE_VERSION\"\n      version: dpkg-query -W -f='${Version}' app\n      timeout: 15m\n    systemd_unit: app.service\n",
		"app-script-no-version":   head + "spec:\n  group: prod\n  app: {installer: script, script: {install: 'apt-get install -y app'}}\n",
		"app-script-and-process":  head + "spec:\n  group: prod\n  app: {installer: script, process: app, script: {install: a, version: b}}\n",
		"app-script-not-selected": head + "spec:\n  group: prod\n  app: {installer: tarball, script: {install: a, version: b}}\n",
		"app-script-bad-timeout":  head + "spec:\n  group: prod\n  app: {installer: script, script: {install: a, version: b, timeout: -1s}}\n",
		"app-installer-unknown":   head + "spec:\n  group: prod\n  app: {installer: docker}\n",
	}
}

// TestUpdateFileFuzzSeeds keeps testdata/fuzz/FuzzUpdateFile in step with
// updateFileFuzzSeeds; -gen-seeds rewrites the files. Other files there are
// regression inputs the fuzzer found, left alone.
func TestUpdateFileFuzzSeeds(t *testing.T) {
	t.Parallel()
	checkFuzzSeeds(t, "FuzzUpdateFile", updateFileFuzzSeeds(t))
}

// FuzzUpdateFile: whatever the bytes, parsing does not panic and fails only
// with ErrCorrupt; what parses encodes to a file that parses to the same
// value, and encoding that again writes the same bytes (a rewrite of an
// unchanged update.yaml does not drift).
func FuzzUpdateFile(f *testing.F) {
	for _, s := range []string{
		"{}",
		"null",
		"version: v1\nkind: update_config\n",
		"version: v1\nkind: update_config\nspec: ~\nstatus: ~\n",
		"version: v1\nkind: update_config\nspec: {find_urls: []}\nstatus: {version_history: []}\n",
		"version: v1\nkind: update_config\nstatus: {start_time: 2025-03-01 10:00:00}\n",
		"version: \"v1\"\nkind: !!str update_config\nspec: !!map {group: prod}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		first, err := install.ParseUpdateFile(data)
		if err != nil {
			if !errors.Is(err, install.ErrCorrupt) {
				t.Fatalf("parse failed with %v, want ErrCorrupt", err)
			}
			return
		}
		enc := fuzzRewrite(t, first, first, data)
		second, err := install.ParseUpdateFile(enc)
		if err != nil {
			t.Fatalf("the encoding does not parse: %v\n%s", err, enc)
		}
		again := fuzzRewrite(t, first, second, enc)
		if bytes.Equal(enc, again) {
			return
		}
		// yaml.v3 by itself does not always write a comment's surroundings
		// (blank lines, which node it hangs on) the way it read them: that
		// drift, shown by a plain yaml.v3 round trip of our encoding, is
		// allowed once; ours is not.
		if bytes.Equal(yamlRoundTrip(t, enc), enc) {
			t.Fatalf("encoding is not stable:\n--- first\n%s--- second\n%s", enc, again)
		}
		third, err := install.ParseUpdateFile(again)
		if err != nil {
			t.Fatalf("the second encoding does not parse: %v\n%s", err, again)
		}
		if last := fuzzRewrite(t, first, third, again); !bytes.Equal(again, last) {
			t.Fatalf("encoding is not stable after two rewrites:\n--- second\n%s--- third\n%s", again, last)
		}
	})
}

// fuzzRewrite checks that parsed, read from data, is the value want and
// returns its encoding.
func fuzzRewrite(t *testing.T, want, parsed *install.UpdateFile, data []byte) []byte {
	t.Helper()
	if diff := cmp.Diff(want, parsed, ignoreDoc, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("value changed by a rewrite (-want +got):\n%s\nread from:\n%s", diff, data)
	}
	enc, err := parsed.Marshal()
	if err != nil {
		t.Fatalf("parsed, but does not encode: %v\nread from:\n%s", err, data)
	}
	return enc
}

// yamlRoundTrip reads and writes data with yaml.v3 alone, as Marshal does.
func yamlRoundTrip(t *testing.T, data []byte) []byte {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) != 1 {
		t.Fatalf("yaml.v3 does not read our encoding (%v):\n%s", err, data)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc.Content[0]); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
