package agentd_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/pkg/release"
	"github.com/fleetwave/fleetwave/test/releases"
)

// TestEnableReleaseRepo drives 'agentd enable' in repository mode as an
// operator would: the flags are checked before anything is written, the
// root is kept under the app's tree and the URL in its update.yaml, per
// app (--app), and giving the first root again after the host followed a
// rotation keeps the newer root (no re-enrolment, no undoing it).
func TestEnableReleaseRepo(t *testing.T) {
	repo := tuftest.New(t, nil)
	addRelease(t, repo, "2.0.0", releases.Good, "")
	url := repo.Serve()
	rootV1 := writeRoot(t, repo)
	base := t.TempDir()
	root := filepath.Join(base, "host")
	bin := filepath.Join(base, "bin")
	enable := func(args ...string) (string, int) {
		return runAgentd(t, append([]string{"enable", "--root", root, "--group", "blue", "--process", "app", "--bin-dir", bin}, args...)...)
	}
	keyFile := filepath.Join(base, "key.pub")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("ab", 32)), 0o644); err != nil {
		t.Fatal(err)
	}
	notRoot := filepath.Join(base, "targets.json")
	if err := os.WriteFile(notRoot, []byte(`{"signed":{"_type":"targets"},"signatures":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--release-repo", url, "--release-root", rootV1, "--url-template", "http://x/{{.Version}}/app.tar.gz"}, "exclude each other"},
		{[]string{"--release-repo", url, "--release-root", rootV1, "--public-key", keyFile}, "exclude each other"},
		{[]string{"--release-repo", url}, "pass --release-root FILE"},
		{[]string{"--release-repo", "ftp://" + strings.TrimPrefix(url, "http://"), "--release-root", rootV1}, "want an http:// or https:// URL"},
		{[]string{"--release-repo", url, "--release-root", notRoot}, "--release-root"},
		{[]string{"--release-repo", url, "--release-root", filepath.Join(base, "missing.json")}, "--release-root"},
		{[]string{"--release-root", rootV1}, "goes with --release-repo"},
	} {
		out, code := enable(c.args...)
		if code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("enable %v: exit %d, %q; want 2 and %q", c.args, code, out, c.want)
		}
		if _, err := os.Stat(root); !os.IsNotExist(err) {
			t.Fatalf("enable %v created %s (%v): a refused enable must change nothing", c.args, root, err)
		}
	}

	if out, code := enable("--release-repo", url, "--release-root", rootV1); code != 0 {
		t.Fatalf("enable: exit %d: %s", code, out)
	} else if strings.Contains(out, "warning: the release repository") {
		t.Errorf("enable warned of a repository that has the app's release:\n%s", out)
	}
	uf, err := install.LoadUpdateFile(root)
	if err != nil {
		t.Fatal(err)
	}
	if uf.Spec.ReleaseRepo != url || uf.Spec.URLTemplate != "" || !uf.Spec.Enabled {
		t.Errorf("update.yaml spec %+v, want release_repo %s, enabled", uf.Spec, url)
	}
	trusted := func(dir string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "tuf", "root.json"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	v1 := repo.RootBytes()
	if !bytes.Equal(trusted(root), v1) {
		t.Errorf("<root>/tuf/root.json is not the root given")
	}

	// The repository rotates; the host's client follows (what 'agentd
	// run' does before each install).
	rotate(t, repo, "3.0.0")
	c := &release.Client{URL: url, Dir: filepath.Join(root, "tuf")}
	if tr, err := c.Refresh(context.Background()); err != nil || tr.RootVersion != 2 {
		t.Fatalf("refresh after the rotation: %v", err)
	}
	// Enabling again with the first root (a provisioning script's re-run)
	// keeps root v2: v1's keys are revoked.
	if out, code := enable("--release-repo", url, "--release-root", rootV1); code != 0 {
		t.Fatalf("enable again: exit %d: %s", code, out)
	}
	if bytes.Equal(trusted(root), v1) || !bytes.Equal(trusted(root), repo.RootBytes()) {
		t.Errorf("enable with the first root again undid the rotation the host followed")
	}
	out, code := runAgentd(t, "status", "--root", root, "-o", "table")
	if code != 0 || !strings.Contains(out, "release repository of (default): "+url+", root v2") {
		t.Errorf("status -o table: exit %d:\n%s\nwant the release repository line with root v2", code, out)
	}

	// Another app of the host, its own trust under its own tree.
	// The repository has no release of web: enable says so, and how to
	// name the app as the repository does (a stranger's host would
	// otherwise only ever hold on "no such release").
	if out, code := enable("--app", "web", "--release-repo", url, "--release-root", rootV1); code != 0 {
		t.Fatalf("enable --app web: exit %d: %s", code, out)
	} else if !strings.Contains(out, `warning: the release repository has no release of "web"`) || !strings.Contains(out, "it has releases of default") || !strings.Contains(out, "--app-name") {
		t.Errorf("enable --app web of a repository without web:\n%s\nwant the warning naming the apps it has and --app-name", out)
	}
	// enable's check read the repository through the root given, and
	// followed its rotation already.
	if !bytes.Equal(trusted(filepath.Join(root, "apps", "web")), repo.RootBytes()) {
		t.Errorf("apps/web/tuf/root.json is not the repository's root v2, reached from the root given")
	}

	// Back to a URL template: the repository is dropped from update.yaml.
	if out, code := enable("--url-template", url+"/{{.Version}}/app.tar.gz"); code != 0 {
		t.Fatalf("enable --url-template: exit %d: %s", code, out)
	}
	if uf, err = install.LoadUpdateFile(root); err != nil || uf.Spec.ReleaseRepo != "" || uf.Spec.URLTemplate == "" {
		t.Errorf("update.yaml spec %+v (%v), want the url_template only", uf.Spec, err)
	}
}
