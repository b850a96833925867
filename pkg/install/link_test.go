package install_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/install"
)

// linkFakeVersion creates versions/<v>/bin with the given executables (shell
// scripts with body) and a marker.
func linkFakeVersion(t *testing.T, tr install.Tree, v string, bins map[string]string) {
	t.Helper()
	dir := filepath.Join(tr.VersionDir(v), "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range bins {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(tr.MarkerPath(v), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// linkSnapshot maps every entry of dir to its link target, or to "file: "
// and the content of a regular file, or "dir".
func linkSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		switch target, err := os.Readlink(path); {
		case err == nil:
			out[e.Name()] = target
		case e.IsDir():
			out[e.Name()] = "dir"
		default:
			out[e.Name()] = "file: " + string(readFile(t, path))
		}
	}
	return out
}

func TestLinkSwapAndRestoreExactly(t *testing.T) {
	root := t.TempDir()
	tr := install.Tree{Root: root, BinDir: filepath.Join(root, "bin")}
	linkFakeVersion(t, tr, "1.0.0", map[string]string{"app": "echo 1", "tool": "echo tool"})
	linkFakeVersion(t, tr, "2.0.0", map[string]string{"app": "echo 2", "newtool": "echo new"})
	// Something of the operator's in the bin dir: never touched.
	if err := os.MkdirAll(tr.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/env", filepath.Join(tr.BinDir, "theirs")); err != nil {
		t.Fatal(err)
	}

	if _, err := tr.Link("1.0.0"); err != nil {
		t.Fatal(err)
	}
	if v, err := tr.LinkedVersion(); err != nil || v != "1.0.0" {
		t.Fatalf("LinkedVersion = %q, %v; want 1.0.0", v, err)
	}
	before := linkSnapshot(t, tr.BinDir)

	prev, err := tr.Link("2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"app":     filepath.Join(tr.VersionDir("2.0.0"), "bin", "app"),
		"newtool": filepath.Join(tr.VersionDir("2.0.0"), "bin", "newtool"),
		"theirs":  "/usr/bin/env",
	}
	if diff := cmp.Diff(want, linkSnapshot(t, tr.BinDir)); diff != "" {
		t.Errorf("bin dir after linking 2.0.0 (-want +got):\n%s", diff)
	}
	out, err := runBin(t, filepath.Join(tr.BinDir, "app"))
	if err != nil || out != "2" {
		t.Errorf("running the linked app: %q, %v; want 2", out, err)
	}

	if err := tr.RestoreLinks(prev); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, linkSnapshot(t, tr.BinDir)); diff != "" {
		t.Errorf("bin dir after restore (-before +after):\n%s", diff)
	}
	// The restored links are ours again: the next swap may replace them.
	if _, err := tr.Link("2.0.0"); err != nil {
		t.Errorf("Link after restore: %v", err)
	}
}

func TestLinkNeverClobbersAFile(t *testing.T) {
	root := t.TempDir()
	tr := install.Tree{Root: root, BinDir: filepath.Join(root, "bin")}
	linkFakeVersion(t, tr, "1.0.0", map[string]string{"app": "echo 1", "zz": "echo z"})
	if err := os.MkdirAll(tr.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tr.BinDir, "zz"), []byte("operator's own"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := linkSnapshot(t, tr.BinDir)
	if _, err := tr.Link("1.0.0"); err == nil || !strings.Contains(err.Error(), "not a symlink") {
		t.Fatalf("Link over a regular file: %v, want a refusal", err)
	}
	if diff := cmp.Diff(before, linkSnapshot(t, tr.BinDir)); diff != "" {
		t.Errorf("bin dir changed by a refused link (-before +after):\n%s", diff)
	}
	if _, err := tr.Link("../../etc"); err == nil {
		t.Error("Link accepted a version that is a path")
	}
}

// linkTree is a tree whose bin dir is outside the root, as /usr/local/bin
// is outside /var/lib/fleetwave.
func linkTree(t *testing.T) install.Tree {
	t.Helper()
	return install.Tree{Root: t.TempDir(), BinDir: filepath.Join(t.TempDir(), "bin")}
}

// symlink makes path -> target.
func symlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// systemBinary is an executable outside the tree that prints "system": a
// stand-in for /usr/bin/python3.
func systemBinary(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho system\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// readIfAny is the content of path, or "absent".
func readIfAny(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "absent"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLinkRefusesAForeignSymlink: python3 -> /usr/bin/python3 is the
// operator's; a release that ships bin/python3 must not take it.
func TestLinkRefusesAForeignSymlink(t *testing.T) {
	tr := linkTree(t)
	linkFakeVersion(t, tr, "1.2.0", map[string]string{"app": "echo 1", "python3": "echo ours"})
	system := systemBinary(t, "python3")
	python := filepath.Join(tr.BinDir, "python3")
	symlink(t, system, python)
	before := linkSnapshot(t, tr.BinDir)

	prev, err := tr.Link("1.2.0")
	want := fmt.Sprintf("link 1.2.0: %s exists and was not created by agentd (it points to %s); move it away or remove it from the release", python, system)
	if !errors.Is(err, install.ErrNotOurs) || err.Error() != want {
		t.Errorf("Link over the operator's symlink:\n got: %v\nwant: %s", err, want)
	}
	if prev != nil {
		t.Errorf("a refused Link reports replacing %v", prev)
	}
	if diff := cmp.Diff(before, linkSnapshot(t, tr.BinDir)); diff != "" {
		t.Errorf("bin dir changed by a refused link (-before +after):\n%s", diff)
	}
	if got := readIfAny(t, filepath.Join(tr.Root, "links.yaml")); got != "absent" {
		t.Errorf("a refused Link wrote links.yaml:\n%s", got)
	}
}

// TestLinkNeverDeletesAForeignSymlink: the sequence. A release that
// ships python3 used to replace the operator's link, and the next release,
// which does not ship it, deleted it.
func TestLinkNeverDeletesAForeignSymlink(t *testing.T) {
	tr := linkTree(t)
	linkFakeVersion(t, tr, "1.0.0", map[string]string{"app": "echo 1", "python3": "echo ours"})
	linkFakeVersion(t, tr, "2.0.0", map[string]string{"app": "echo 2"})
	system := systemBinary(t, "python3")
	python := filepath.Join(tr.BinDir, "python3")
	symlink(t, system, python)
	check := func(step string) {
		t.Helper()
		if got, err := os.Readlink(python); err != nil || got != system {
			t.Errorf("after %s: python3 -> %q (%v), want the operator's %s", step, got, err, system)
		}
	}

	if _, err := tr.Link("1.0.0"); !errors.Is(err, install.ErrNotOurs) {
		t.Errorf("Link 1.0.0, which ships python3: %v, want ErrNotOurs", err)
	}
	check("Link 1.0.0")
	if _, err := tr.Link("2.0.0"); err != nil {
		t.Fatal(err)
	}
	check("Link 2.0.0")
	if out, err := runBin(t, python); err != nil || out != "system" {
		t.Errorf("running python3: %q, %v; want the system's", out, err)
	}
	if out, err := runBin(t, filepath.Join(tr.BinDir, "app")); err != nil || out != "2" {
		t.Errorf("running app: %q, %v; want 2", out, err)
	}
}

// TestLinkKeepsAnOperatorsLinkIntoVersions: once links.yaml exists, a link
// into versions/ that agentd did not make is not ours either.
func TestLinkKeepsAnOperatorsLinkIntoVersions(t *testing.T) {
	tr := linkTree(t)
	linkFakeVersion(t, tr, "1.0.0", map[string]string{"app": "echo 1"})
	linkFakeVersion(t, tr, "2.0.0", map[string]string{"app": "echo 2"})
	linkFakeVersion(t, tr, "3.0.0", map[string]string{"app": "echo 3", "helper": "echo ours"})
	if _, err := tr.Link("1.0.0"); err != nil {
		t.Fatal(err)
	}
	helperTarget := filepath.Join(tr.VersionDir("1.0.0"), "bin", "app")
	helper := filepath.Join(tr.BinDir, "helper")
	symlink(t, helperTarget, helper)
	check := func(step string) {
		t.Helper()
		if got, err := os.Readlink(helper); err != nil || got != helperTarget {
			t.Errorf("after %s: helper -> %q (%v), want the operator's link to %s", step, got, err, helperTarget)
		}
	}

	if _, err := tr.Link("2.0.0"); err != nil {
		t.Fatal(err)
	}
	check("Link 2.0.0, which does not ship helper")
	if v, err := tr.LinkedVersion(); err != nil || v != "2.0.0" {
		t.Errorf("LinkedVersion = %q, %v; want 2.0.0 (helper is not ours)", v, err)
	}
	before := linkSnapshot(t, tr.BinDir)
	_, err := tr.Link("3.0.0")
	if !errors.Is(err, install.ErrNotOurs) || !strings.Contains(err.Error(), filepath.Join(tr.Root, "links.yaml")+" does not list it") {
		t.Errorf("Link 3.0.0, which ships helper: %v; want ErrNotOurs saying links.yaml does not list it", err)
	}
	if diff := cmp.Diff(before, linkSnapshot(t, tr.BinDir)); diff != "" {
		t.Errorf("bin dir changed by a refused link (-before +after):\n%s", diff)
	}
	if n, err := tr.Unlink(); err != nil || n != 1 {
		t.Errorf("Unlink = %d, %v; want 1 (app only)", n, err)
	}
	check("Unlink")
}

// TestLinkOwnership: what each state of a name Link would create leads to.
// An entry is ours when it is a symlink into versions/ and links.yaml lists
// it for this bin dir, or links.yaml has no entry for this bin dir (hosts
// set up before links.yaml).
func TestLinkOwnership(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(t *testing.T, tr, other install.Tree)
		wantErr string // "" links 2.0.0
	}{
		{name: "absent", setup: func(*testing.T, install.Tree, install.Tree) {}},
		{name: "ours", setup: func(t *testing.T, tr, _ install.Tree) { mustLink(t, tr, "1.0.0") }},
		{name: "recorded, link gone (crash)", setup: func(t *testing.T, tr, _ install.Tree) {
			mustLink(t, tr, "1.0.0")
			mustRemove(t, filepath.Join(tr.BinDir, "app"))
		}},
		{name: "recorded, replaced by a file", wantErr: "it is a regular file, not a symlink", setup: func(t *testing.T, tr, _ install.Tree) {
			mustLink(t, tr, "1.0.0")
			mustRemove(t, filepath.Join(tr.BinDir, "app"))
			if err := os.WriteFile(filepath.Join(tr.BinDir, "app"), []byte("theirs"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "recorded, replaced by a symlink elsewhere", wantErr: "it points to /usr/bin/env)", setup: func(t *testing.T, tr, _ install.Tree) {
			mustLink(t, tr, "1.0.0")
			mustRemove(t, filepath.Join(tr.BinDir, "app"))
			symlink(t, "/usr/bin/env", filepath.Join(tr.BinDir, "app"))
		}},
		{name: "directory", wantErr: "it is a directory", setup: func(t *testing.T, tr, _ install.Tree) {
			if err := os.MkdirAll(filepath.Join(tr.BinDir, "app"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "into versions, not recorded", wantErr: "does not list it", setup: func(t *testing.T, tr, _ install.Tree) {
			mustLink(t, tr, "1.0.0")
			if _, err := tr.Unlink(); err != nil {
				t.Fatal(err)
			}
			symlink(t, filepath.Join(tr.VersionDir("1.0.0"), "bin", "app"), filepath.Join(tr.BinDir, "app"))
		}},
		{name: "into versions, recorded for another bin dir only", wantErr: "does not list it", setup: func(t *testing.T, tr, other install.Tree) {
			mustLink(t, other, "1.0.0")
			mustLink(t, tr, "0.9.0") // this bin dir is known, without app
			symlink(t, filepath.Join(tr.VersionDir("1.0.0"), "bin", "app"), filepath.Join(tr.BinDir, "app"))
		}},
		{name: "into versions, no links.yaml (an older agentd's link)", setup: func(t *testing.T, tr, _ install.Tree) {
			symlink(t, filepath.Join(tr.VersionDir("1.0.0"), "bin", "app"), filepath.Join(tr.BinDir, "app"))
		}},
		{name: "into versions, links.yaml knows only another bin dir", setup: func(t *testing.T, tr, other install.Tree) {
			mustLink(t, other, "1.0.0")
			symlink(t, filepath.Join(tr.VersionDir("1.0.0"), "bin", "app"), filepath.Join(tr.BinDir, "app"))
		}},
		{name: "corrupt links.yaml", wantErr: "corrupt state file", setup: func(t *testing.T, tr, _ install.Tree) {
			if err := os.WriteFile(filepath.Join(tr.Root, "links.yaml"), []byte("version: [\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := linkTree(t)
			other := install.Tree{Root: tr.Root, BinDir: filepath.Join(t.TempDir(), "bin")}
			linkFakeVersion(t, tr, "0.9.0", map[string]string{"other": "echo 0"})
			linkFakeVersion(t, tr, "1.0.0", map[string]string{"app": "echo 1"})
			linkFakeVersion(t, tr, "2.0.0", map[string]string{"app": "echo 2"})
			tc.setup(t, tr, other)
			before, record := linkSnapshot(t, tr.BinDir), readIfAny(t, filepath.Join(tr.Root, "links.yaml"))

			_, err := tr.Link("2.0.0")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Link: %v; want an error saying %q", err, tc.wantErr)
				}
				if diff := cmp.Diff(before, linkSnapshot(t, tr.BinDir)); diff != "" {
					t.Errorf("bin dir changed by a refused link (-before +after):\n%s", diff)
				}
				if diff := cmp.Diff(record, readIfAny(t, filepath.Join(tr.Root, "links.yaml"))); diff != "" {
					t.Errorf("links.yaml changed by a refused link (-before +after):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Link: %v", err)
			}
			if out, err := runBin(t, filepath.Join(tr.BinDir, "app")); err != nil || out != "2" {
				t.Errorf("running app: %q, %v; want 2", out, err)
			}
			// Recorded as ours: Unlink takes it.
			if n, err := tr.Unlink(); err != nil || n < 1 {
				t.Errorf("Unlink = %d, %v; want app removed", n, err)
			}
			if _, err := os.Lstat(filepath.Join(tr.BinDir, "app")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("app after Unlink: %v", err)
			}
		})
	}
}

func mustLink(t *testing.T, tr install.Tree, v string) {
	t.Helper()
	if _, err := tr.Link(v); err != nil {
		t.Fatal(err)
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// TestLinkAdoptsLinksMadeBeforeLinksYAML: a host an older agentd set up has
// links into versions/ and no links.yaml. They are ours: the next Link
// replaces or removes them and records what it made.
func TestLinkAdoptsLinksMadeBeforeLinksYAML(t *testing.T) {
	tr := linkTree(t)
	linkFakeVersion(t, tr, "1.0.0", map[string]string{"app": "echo 1", "tool": "echo tool"})
	linkFakeVersion(t, tr, "2.0.0", map[string]string{"app": "echo 2"})
	for _, name := range []string{"app", "tool"} {
		symlink(t, filepath.Join(tr.VersionDir("1.0.0"), "bin", name), filepath.Join(tr.BinDir, name))
	}
	symlink(t, "/usr/bin/env", filepath.Join(tr.BinDir, "theirs"))

	if _, err := tr.Link("2.0.0"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"app":    filepath.Join(tr.VersionDir("2.0.0"), "bin", "app"),
		"theirs": "/usr/bin/env",
	}
	if diff := cmp.Diff(want, linkSnapshot(t, tr.BinDir)); diff != "" {
		t.Errorf("bin dir (-want +got):\n%s", diff)
	}
	wantRecord := fmt.Sprintf(`# Written by agentd: the entries of each bin dir that agentd created.
# agentd never replaces or removes a bin dir entry that is not listed here.
version: v1
kind: links
spec:
  bin_dirs:
    - path: %s
      names:
        - app
`, tr.BinDir)
	if diff := cmp.Diff(wantRecord, readIfAny(t, filepath.Join(tr.Root, "links.yaml"))); diff != "" {
		t.Errorf("links.yaml (-want +got):\n%s", diff)
	}
}

// TestRestoreLinksLeavesWhatIsNotOurs: between a swap and its undo, the
// operator put a file where a new link of ours was; the undo must not
// remove it.
func TestRestoreLinksLeavesWhatIsNotOurs(t *testing.T) {
	tr := linkTree(t)
	linkFakeVersion(t, tr, "1.0.0", map[string]string{"app": "echo 1"})
	linkFakeVersion(t, tr, "2.0.0", map[string]string{"app": "echo 2", "newtool": "echo new"})
	mustLink(t, tr, "1.0.0")
	prev, err := tr.Link("2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	newtool := filepath.Join(tr.BinDir, "newtool")
	mustRemove(t, newtool)
	if err := os.WriteFile(newtool, []byte("theirs"), 0o755); err != nil {
		t.Fatal(err)
	}

	err = tr.RestoreLinks(prev)
	if !errors.Is(err, install.ErrNotOurs) || !strings.Contains(err.Error(), newtool) || !strings.Contains(err.Error(), "left alone") {
		t.Errorf("RestoreLinks: %v; want ErrNotOurs naming %s", err, newtool)
	}
	want := map[string]string{
		"app":     filepath.Join(tr.VersionDir("1.0.0"), "bin", "app"),
		"newtool": "file: theirs",
	}
	if diff := cmp.Diff(want, linkSnapshot(t, tr.BinDir)); diff != "" {
		t.Errorf("bin dir after restore (-want +got):\n%s", diff)
	}
}

// TestLinkRefusesARelativeTree: links into a relative root would be
// relative to the bin dir and dangle.
func TestLinkRefusesARelativeTree(t *testing.T) {
	t.Chdir(t.TempDir())
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	abs := install.Tree{Root: filepath.Join(wd, "root"), BinDir: filepath.Join(wd, "bin")}
	linkFakeVersion(t, abs, "1.0.0", map[string]string{"app": "echo 1"})
	cases := []struct {
		name string
		tree install.Tree
		want string
	}{
		{name: "relative root", tree: install.Tree{Root: "root", BinDir: abs.BinDir}, want: `root "root" is not an absolute path`},
		{name: "relative bin dir", tree: install.Tree{Root: abs.Root, BinDir: "bin"}, want: `bin dir "bin" is not an absolute path`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { os.RemoveAll(abs.BinDir) })
			if _, err := tc.tree.Link("1.0.0"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Link: %v; want an error saying %q", err, tc.want)
			}
			if _, err := os.Lstat(abs.BinDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused Link made the bin dir: %v; it holds %v", err, linkSnapshot(t, abs.BinDir))
			}
			if _, err := tc.tree.Unlink(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Unlink: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

func runBin(t *testing.T, path string) (string, error) {
	t.Helper()
	out, err := exec.Command(path).Output()
	return strings.TrimSpace(string(out)), err
}

func TestLockIsExclusiveAndNamesItsHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	l1, err := install.AcquireLock(path, "agentd run")
	if err != nil {
		t.Fatal(err)
	}
	_, err = install.AcquireLock(path, "")
	var le *install.LockedError
	if !errors.Is(err, install.ErrLocked) || !errors.As(err, &le) || !strings.HasPrefix(le.Holder, fmt.Sprintf("agentd run (pid %d, started ", os.Getpid())) {
		t.Fatalf("second lock: %v; want ErrLocked naming agentd run, pid %d", err, os.Getpid())
	}
	if err := l1.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := install.AcquireLock(path, "")
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Release()
}

func healthApp(t *testing.T, body string) *install.ProcessRunner {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &install.ProcessRunner{Path: path, StopTimeout: 2 * time.Second}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	if err := r.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestWaitHealthy(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	const timeout, minHealthy, interval = 2 * time.Second, 300 * time.Millisecond, 20 * time.Millisecond
	cases := []struct {
		name       string
		app        string
		health     install.Health
		status     int32
		minHealthy time.Duration
		wantErr    string
	}{
		{name: "stays up", app: "exec sleep 60"},
		// Exits at once; a long minHealthy means only an app that stays up
		// 5s could pass, so a slow machine cannot make this flaky.
		{name: "exits", app: "exit 3", minHealthy: 5 * time.Second, wantErr: "exit status 3"},
		{name: "health URL ok", app: "exec sleep 60", health: install.Health{URL: srv.URL}, status: 200},
		{name: "health URL 503", app: "exec sleep 60", health: install.Health{URL: srv.URL}, status: 503, wantErr: "503"},
		{name: "health command ok", app: "exec sleep 60", health: install.Health{Command: []string{"true"}}},
		{name: "health command fails", app: "exec sleep 60", health: install.Health{Command: []string{"sh", "-c", "echo broken; exit 1"}}, wantErr: "broken"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status.Store(tc.status)
			r := healthApp(t, tc.app)
			h := tc.health
			h.Interval = interval
			mh := minHealthy
			if tc.minHealthy != 0 {
				mh = tc.minHealthy
			}
			err := install.WaitHealthy(context.Background(), h, r, timeout, mh, install.Clock{})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("WaitHealthy: %v", err)
				}
				return
			}
			if !errors.Is(err, install.ErrUnhealthy) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("WaitHealthy: %v; want ErrUnhealthy mentioning %q", err, tc.wantErr)
			}
		})
	}
}

// TestWaitHealthyProbesLastAtTimeout: probes every interval, and the last
// exactly at health_timeout, not up to an interval after it.
func TestWaitHealthyProbesLastAtTimeout(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	start := now
	clk := install.Clock{
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		After: func(d time.Duration) <-chan time.Time {
			mu.Lock()
			defer mu.Unlock()
			now = now.Add(d)
			c := make(chan time.Time, 1)
			c <- now
			return c
		},
	}
	var probes []time.Duration
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		probes = append(probes, now.Sub(start))
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	r := healthApp(t, "exec sleep 60")
	err := install.WaitHealthy(context.Background(), install.Health{URL: srv.URL, Interval: time.Second}, r, 2500*time.Millisecond, time.Second, clk)
	if !errors.Is(err, install.ErrUnhealthy) {
		t.Fatalf("WaitHealthy: %v; want ErrUnhealthy", err)
	}
	want := []time.Duration{0, time.Second, 2 * time.Second, 2500 * time.Millisecond}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, probes); diff != "" {
		t.Errorf("probes at (-want +got):\n%s", diff)
	}
}

// TestWaitHealthyBoundsAHangingProbe: a health URL that never answers, or a
// health command that never ends, fails the wait at health_timeout, not
// after the probe's own timeout (10 s for a URL, 30 s for a command), which
// held a rollback for 21 s with a 3 s health_timeout (docs/PERFORMANCE.md
// §5). The command's whole process group is ended, the child it started
// too.
func TestWaitHealthyBoundsAHangingProbe(t *testing.T) {
	hung := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hung:
		}
	}))
	defer srv.Close()
	defer close(hung)
	child := filepath.Join(t.TempDir(), "child.pid")
	const timeout, interval = 300 * time.Millisecond, 100 * time.Millisecond
	for _, tc := range []struct {
		name   string
		health install.Health
	}{
		{"URL", install.Health{URL: srv.URL}},
		{"command", install.Health{Command: []string{"/bin/sh", "-c", fmt.Sprintf("sleep 60 & echo $! > '%s'; wait", child)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := healthApp(t, "exec sleep 60")
			h := tc.health
			h.Interval = interval
			start := time.Now()
			err := install.WaitHealthy(context.Background(), h, r, timeout, time.Second, install.Clock{})
			// Far below the probes' own timeouts, far above what it takes
			// (timeout + interval) even on a busy machine.
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("WaitHealthy took %v with health_timeout %v", took, timeout)
			}
			if !errors.Is(err, install.ErrUnhealthy) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("WaitHealthy: %v; want ErrUnhealthy (not a deadline: that would not blame the version)", err)
			}
			if len(h.Command) == 0 {
				return
			}
			pid := waitChildPid(t, child)
			deadline := time.Now().Add(10 * time.Second)
			for {
				if state, gone := procState(t, pid); gone || state == "Z" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the health command's child %d still runs", pid)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func TestProcessRunnerStopKillsTheGroup(t *testing.T) {
	// The app ignores SIGTERM: Stop must still end it (SIGKILL after the
	// timeout), and with it the child it started in the background, which
	// only a signal to the whole process group reaches.
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	r := healthApp(t, fmt.Sprintf("trap '' TERM; sleep 60 & echo $! > '%s.tmp' && mv '%[1]s.tmp' '%[1]s'; wait", pidFile))
	r.StopTimeout = 200 * time.Millisecond
	if err := r.Alive(context.Background()); err != nil {
		t.Fatalf("Alive before stop: %v", err)
	}
	child := waitChildPid(t, pidFile)
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Alive(context.Background()); err == nil {
		t.Fatal("Alive after Stop: nil, want an error")
	}
	// Killed, it is gone once reaped, or a zombie until then.
	deadline := time.Now().Add(10 * time.Second)
	for {
		state, gone := procState(t, child)
		if gone || state == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app's background child (pid %d) survived Stop (state %s): Stop did not signal the process group", child, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitChildPid reads the pid the app writes to path once it has started.
func waitChildPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || pid <= 0 {
				t.Fatalf("%s holds %q, want a pid", path, b)
			}
			return pid
		}
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app did not write %s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procState is the state letter of pid from /proc/<pid>/stat, or gone when
// there is no such process.
func procState(t *testing.T, pid int) (state string, gone bool) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return "", true
	}
	if err != nil {
		t.Fatal(err)
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses.
	var fields []string
	if i := bytes.LastIndexByte(b, ')'); i >= 0 {
		fields = strings.Fields(string(b[i+1:]))
	}
	if len(fields) == 0 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return fields[0], false
}
