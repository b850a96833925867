package fleetctl

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/release"
)

// runBinIn is runBin in working directory dir.
func runBinIn(t *testing.T, bin, dir string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// TestRepoThresholdTwoInvocations (issue 27, "threshold test"): a 2-of-3
// targets role signed by two separate fleetctl invocations with separate
// key files. One signature is refused at publish and changes no file; a
// key not in the role cannot sign (no file changes); two signatures
// publish, and a client that trusted the root before sees the target and
// downloads exactly its bytes. An add with a bad version changes nothing
// either; repo ls URL --root verifies and writes no file.
func TestRepoThresholdTwoInvocations(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the fleetctl binary")
	}
	bin := fleetctlBin(t)
	work := t.TempDir()
	run := func(wantCode int, args ...string) (string, string) {
		t.Helper()
		out, errOut, code := runBinIn(t, bin, work, args...)
		if code != wantCode {
			t.Fatalf("fleetctl %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, wantCode, out, errOut)
		}
		return out, errOut
	}
	// Each holder makes their key (here in one directory; in life on
	// their own machines, only the .pub travels).
	for _, k := range []string{"root", "alice", "bob", "carol", "snapshot", "timestamp", "stranger"} {
		run(0, "repo", "keygen", k+".key")
	}
	dir := filepath.Join(work, "repo")
	out, _ := run(0, "repo", "init", "repo", "--root-key", "root.key.pub",
		"--targets-key", "alice.key.pub", "--targets-key", "bob.key.pub", "--targets-key", "carol.key.pub", "--targets-threshold", "2",
		"--snapshot-key", "snapshot.key.pub", "--timestamp-key", "timestamp.key.pub", "--key", "root.key")
	if !strings.Contains(out, "0 of 2 root v1 targets keys have signed") || !strings.Contains(out, "fleetctl repo sign repo --key KEY") {
		t.Fatalf("init does not say what is next:\n%s", out)
	}
	run(0, "repo", "sign", "repo", "--key", "alice.key")
	run(0, "repo", "sign", "repo", "--key", "carol.key")
	run(0, "repo", "publish", "repo", "--snapshot-key", "snapshot.key", "--timestamp-key", "timestamp.key")

	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	rootJSON, err := os.ReadFile(filepath.Join(dir, "metadata", "root.json"))
	if err != nil {
		t.Fatal(err)
	}
	trust := filepath.Join(t.TempDir(), "trust")
	if err := release.TrustRoot(trust, rootJSON); err != nil {
		t.Fatal(err)
	}
	client := &release.Client{URL: srv.URL, Dir: trust}
	ctx := context.Background()
	if _, err := client.Refresh(ctx); err != nil {
		t.Fatal(err)
	}

	content := []byte("web 1.2.0, the release")
	if err := os.WriteFile(filepath.Join(work, "web.tar.gz"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	before := tuftest.Files(t, dir)
	_, errOut := run(2, "repo", "add", "repo", "web.tar.gz", "--app", "web", "--version", "1.2", "--os", "linux", "--arch", "amd64")
	if !strings.Contains(errOut, `invalid version "1.2"`) {
		t.Errorf("bad version: %s", errOut)
	}
	sameFiles(t, "add with a bad version", dir, before)

	out, _ = run(0, "repo", "add", "repo", "web.tar.gz", "--app", "web", "--version", "1.2.0", "--os", "linux", "--arch", "amd64", "--security")
	if !strings.Contains(out, "staged targets v2: waiting for signatures") {
		t.Fatalf("add without keys:\n%s", out)
	}
	// Invocation one: alice.
	out, _ = run(0, "repo", "sign", "repo", "--key", "alice.key")
	if !strings.Contains(out, "1 of 2 root v1 targets keys have signed") || !strings.Contains(out, "1 more of root v1 targets keys") {
		t.Fatalf("after alice:\n%s", out)
	}
	signedOnce := tuftest.Files(t, dir)
	_, errOut = run(1, "repo", "publish", "repo", "--snapshot-key", "snapshot.key", "--timestamp-key", "timestamp.key")
	if !strings.Contains(errOut, "targets v2 needs 2 signatures") || !strings.Contains(errOut, "it has 1") || !strings.Contains(errOut, "nothing published") {
		t.Errorf("publish with one signature: %s", errOut)
	}
	sameFiles(t, "publish with one of two signatures", dir, signedOnce)
	// Keys outside the targets role.
	for _, k := range []string{"stranger.key", "snapshot.key", "root.key"} {
		_, errOut = run(1, "repo", "sign", "repo", "--key", k)
		if !strings.Contains(errOut, "may sign nothing staged") {
			t.Errorf("sign with %s: %s", k, errOut)
		}
		sameFiles(t, "sign with "+k, dir, signedOnce)
	}
	// alice again is still one signature.
	run(0, "repo", "sign", "repo", "--key", "alice.key")
	run(1, "repo", "publish", "repo", "--snapshot-key", "snapshot.key", "--timestamp-key", "timestamp.key")
	if tr, err := client.Refresh(ctx); err != nil {
		t.Fatal(err)
	} else if _, err := tr.Target("web", "1.2.0", "linux", "amd64"); !errors.Is(err, release.ErrNoTarget) {
		t.Fatalf("before publish the client sees: %v", err)
	}
	// Invocation two: bob.
	out, _ = run(0, "repo", "sign", "repo", "--key", "bob.key")
	if !strings.Contains(out, "signed, ready to publish") {
		t.Fatalf("after bob:\n%s", out)
	}
	run(0, "repo", "publish", "repo", "--snapshot-key", "snapshot.key", "--timestamp-key", "timestamp.key")

	tr, err := client.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := tr.Target("web", "1.2.0", "linux", "amd64")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	if tg.Length != int64(len(content)) || tg.SHA256 != hex.EncodeToString(sum[:]) || !tg.Custom.Security {
		t.Fatalf("target %+v", tg)
	}
	resp, err := http.Get(tg.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(got, content) {
		t.Fatalf("GET %s: %q", tg.URL, got)
	}

	// ls as hosts see it: verified, and no file written (the working
	// directory is HOME too).
	lsDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(lsDir, "root.json"), rootJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	beforeLs := tuftest.Files(t, lsDir)
	out, errOut, code := runBinIn(t, bin, lsDir, "repo", "ls", srv.URL, "--root", "root.json", "-o", "json")
	if code != 0 {
		t.Fatalf("ls URL: exit %d: %s", code, errOut)
	}
	var rep RepoLsReport
	oneObject(t, out, &rep)
	want := RepoLsReport{Source: srv.URL, Verified: true, RootVersion: 1, TargetsVersion: 2,
		Releases: []release.Release{{App: "web", Version: "1.2.0", Platforms: []string{"linux-amd64"}, Security: true}}}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("ls URL (-want +got):\n%s", diff)
	}
	sameFiles(t, "ls URL", lsDir, beforeLs)
	// A root that does not sign this repository: refused.
	other := tuftest.New(t, nil)
	if err := os.WriteFile(filepath.Join(lsDir, "other.json"), other.RootBytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = runBinIn(t, bin, lsDir, "repo", "ls", srv.URL, "--root", "other.json")
	if code != 1 || !strings.Contains(errOut, "metadata refused") {
		t.Errorf("ls URL with another root: exit %d: %s", code, errOut)
	}
}

func sameFiles(t *testing.T, what, dir string, before map[string]string) {
	t.Helper()
	if diff := cmp.Diff(before, tuftest.Files(t, dir)); diff != "" {
		t.Errorf("%s changed files (-before +after):\n%s", what, diff)
	}
}
