package fleetctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theupdateframework/go-tuf/v2/metadata"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/release"
)

func repoGlobal(now time.Time) (*Global, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	return &Global{Out: &out, ErrOut: &errOut, Now: func() time.Time { return now }, Timeout: 10 * time.Second}, &out, &errOut
}

// TestRepoRotateKeyCommand: rotate-key with the root key and the new
// targets key given signs the staged root and targets and publishes; the
// revoked key is then refused by sign; a revocation that leaves no key,
// and --revoke of something neither a file nor a key id, change nothing.
func TestRepoRotateKeyCommand(t *testing.T) {
	r := tuftest.New(t, nil)
	r.Add(release.Custom{App: "web", Version: "1.0.0", OS: "linux", Arch: "amd64"}, "app.tar.gz", []byte("one"))
	dir := r.Repo.Dir
	newKey := filepath.Join(r.KeyDir, "targets-2.key")
	if _, err := release.GenerateKey(newKey); err != nil {
		t.Fatal(err)
	}
	g, out, _ := repoGlobal(time.Now())
	before := tuftest.Files(t, dir)
	for _, o := range []*RepoRotateOptions{
		{RepoOptions: RepoOptions{Global: g}, Role: "targets", Revoke: []string{r.Targets.Path}},
		{RepoOptions: RepoOptions{Global: g}, Role: "targets", Revoke: []string{"alice"}},
		{RepoOptions: RepoOptions{Global: g, Keys: []string{filepath.Join(t.TempDir(), "missing.key")}}, Role: "targets", Add: []string{newKey + ".pub"}},
	} {
		if err := RunRepoRotateKey(context.Background(), o, dir); err == nil {
			t.Errorf("%+v: no error", o)
		}
		sameFiles(t, "a refused rotate-key", dir, before)
	}
	o := &RepoRotateOptions{RepoOptions: RepoOptions{Global: g, Keys: []string{r.KeyDir}}, Role: "targets", Add: []string{newKey + ".pub"}, Revoke: []string{r.Targets.ID}}
	if err := RunRepoRotateKey(context.Background(), o, dir); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "published: root v2, targets v3") {
		t.Fatalf("rotate-key with every key did not publish:\n%s", out)
	}
	root, err := r.Repo.PublishedRoot()
	if err != nil || root.Signed.Roles[metadata.TARGETS].KeyIDs[0] == r.Targets.ID {
		t.Fatalf("root %v %v", root.Signed.Roles[metadata.TARGETS], err)
	}
	// The revoked key is refused by name, and skipped from a directory.
	if _, err := r.Repo.Flag("web", "1.0.0", release.FlagChange{Security: ptrTo(true)}); err != nil {
		t.Fatal(err)
	}
	staged := tuftest.Files(t, dir)
	err = RunRepoSign(context.Background(), &RepoOptions{Global: g, Keys: []string{r.Targets.Path}}, dir)
	if !errors.Is(err, release.ErrKeyNotInRole) {
		t.Fatalf("sign with the revoked key: %v", err)
	}
	sameFiles(t, "sign with the revoked key", dir, staged)
	out.Reset()
	if err := RunRepoSign(context.Background(), &RepoOptions{Global: g, Keys: []string{r.KeyDir}}, dir); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "signed targets with key "+release.ShortID(mustSigner(t, newKey).ID)) || strings.Contains(out.String(), r.Targets.Path) {
		t.Fatalf("sign with the key directory:\n%s", out)
	}
}

func ptrTo[T any](v T) *T { return &v }

func mustSigner(t *testing.T, path string) *release.Signer {
	t.Helper()
	s, err := release.LoadSigner(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRepoLsEscapesNotes: notes written by another tool with terminal
// controls (fleetctl refuses them) are shown escaped in the table, and
// JSON carries them as \u escapes; status -o json is one object.
func TestRepoLsEscapesNotes(t *testing.T) {
	r := tuftest.New(t, nil)
	r.Add(release.Custom{App: "web", Version: "1.0.0", OS: "linux", Arch: "amd64"}, "app.tar.gz", []byte("one"))
	if _, err := r.Repo.Flag("web", "1.0.0", release.FlagChange{Notes: ptrTo("placeholder")}); err != nil {
		t.Fatal(err)
	}
	staged := filepath.Join(r.Repo.Dir, release.StagedDir, "targets.json")
	b, err := os.ReadFile(staged)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("placeholder"), []byte(`\u001b[2J\u001b]0;pwned\u0007`), 1)
	if err := os.WriteFile(staged, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r.Sign(r.Targets)
	r.Publish()

	g, out, _ := repoGlobal(time.Now())
	before := tuftest.Files(t, r.Repo.Dir)
	defer sameFiles(t, "ls and status (read-only)", r.Repo.Dir, before)
	if err := RunRepoLs(context.Background(), &RepoLsOptions{RepoOptions: RepoOptions{Global: g, Output: "table"}}, r.Repo.Dir, false); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(out.String(), "\x1b\x07") || !strings.Contains(out.String(), `\x1b[2J\x1b]0;pwned\a`) {
		t.Fatalf("table:\n%q", out)
	}
	out.Reset()
	if err := RunRepoLs(context.Background(), &RepoLsOptions{RepoOptions: RepoOptions{Global: g, Output: "json"}, Root: "", App: "web"}, r.Repo.Dir, false); err != nil {
		t.Fatal(err)
	}
	var rep RepoLsReport
	oneObject(t, out.String(), &rep)
	if len(rep.Releases) != 1 || rep.Releases[0].Notes != "\x1b[2J\x1b]0;pwned\a" || strings.ContainsAny(out.String(), "\x1b\x07") {
		t.Fatalf("json %+v\n%q", rep, out)
	}
	out.Reset()
	if err := RunRepoStatus(context.Background(), &RepoOptions{Global: g, Output: "json"}, r.Repo.Dir); err != nil {
		t.Fatal(err)
	}
	var st release.Status
	if err := json.Unmarshal(out.Bytes(), &st); err != nil || len(st.Published) != 4 || len(st.Staged) != 0 {
		t.Fatalf("status json: %v %+v", err, st)
	}
}

// TestRepoUsageErrors: what a tired operator types is a usage error
// (exit 2) naming the fix, and changes nothing.
func TestRepoUsageErrors(t *testing.T) {
	r := tuftest.New(t, nil)
	before := tuftest.Files(t, r.Repo.Dir)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"repo", "add", r.Repo.Dir}, "want DIR and FILE"},
		{[]string{"repo", "add", r.Repo.Dir, "x.tar.gz", "--app", "web", "--version", "1.0.0", "--os", "linux"}, "--arch is required"},
		{[]string{"repo", "add", r.Repo.Dir, "x.tar.gz", "--app", "web", "--version", "v1.0.0", "--os", "linux", "--arch", "amd64"}, "invalid version"},
		{[]string{"repo", "add", r.Repo.Dir, "x.tar.gz", "--app", "web", "--version", "1.0.0", "--os", "linux", "--arch", "amd64", "--notes", "a\nb"}, "notes"},
		{[]string{"repo", "flag", r.Repo.Dir, "--app", "web", "--version", "1.0.0"}, "nothing to change"},
		{[]string{"repo", "sign", r.Repo.Dir}, "--key is required"},
		{[]string{"repo", "publish", r.Repo.Dir, "--snapshot-key", "s.key"}, "--timestamp-key are required"},
		{[]string{"repo", "timestamp", r.Repo.Dir, "--key", "t.key", "--expires", "1s"}, "--expires"},
		{[]string{"repo", "rotate-key", r.Repo.Dir, "--role", "admin", "--add", "x.pub"}, "want one of root, targets"},
		{[]string{"repo", "rotate-key", r.Repo.Dir, "--role", "targets"}, "nothing to change"},
		{[]string{"repo", "renew", r.Repo.Dir, "--role", "timestamp"}, "want root or targets"},
		{[]string{"repo", "ls", "https://example.com/repo"}, "--root is required"},
		{[]string{"repo", "init", filepath.Join(t.TempDir(), "new")}, "--generate-keys KEYDIR"},
		{[]string{"repo", "init", filepath.Join(t.TempDir(), "new"), "--root-key", "a.pub"}, "--targets-key is missing"},
		{[]string{"repo", "status", r.Repo.Dir, "-o", "yaml"}, "--output"},
	} {
		cmd := NewCommand()
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs(tc.args)
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		err := cmd.Execute()
		if cliutil.ExitCode(err) != cliutil.ExitUsage || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: exit %d, %v (want %q)", strings.Join(tc.args, " "), cliutil.ExitCode(err), err, tc.want)
		}
	}
	sameFiles(t, "usage errors", r.Repo.Dir, before)
}
