// Package scripts_test runs scripts/release.sh and serves what it publishes
// with test/cmd/releases --dir, fetched and verified as agentd does.
package scripts_test

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/install"
)

func releaseSh(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("bash", append([]string{"release.sh"}, args...)...).CombinedOutput()
	return string(out), err
}

// serve runs the real test/cmd/releases on site and returns the URL
// template it prints.
func serve(t *testing.T, site string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "releases")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/fleetwave/fleetwave/test/cmd/releases").CombinedOutput(); err != nil {
		t.Fatalf("go build releases: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--dir", site)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("releases --dir printed no URL template: %v", err)
	}
	return strings.TrimSpace(line)
}

// tarFiles lists a release tarball's regular files and their modes.
func tarFiles(t *testing.T, path string) map[string]fs.FileMode {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]fs.FileMode{}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			files[hdr.Name] = fs.FileMode(hdr.Mode).Perm()
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// copyDir copies the files of from into a new directory to.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Mkdir(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.WriteFile(filepath.Join(to, e.Name()), readFile(t, filepath.Join(from, e.Name())), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshot is every file under dir with its contents, and every directory.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			files[strings.TrimPrefix(p, dir)+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		files[strings.TrimPrefix(p, dir)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestReleaseScript(t *testing.T) {
	app := t.TempDir()
	if err := os.MkdirAll(filepath.Join(app, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(app, "bin/app"), []byte("#!/bin/sh\nexec sleep 1000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	site := filepath.Join(t.TempDir(), "site")
	if out, err := releaseSh(t, "1.0.0", app, site); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, out)
	}
	signed := false
	var pub ed25519.PublicKey
	key := filepath.Join(t.TempDir(), "release.pem")
	if _, err := exec.LookPath("openssl"); err == nil {
		if out, err := releaseSh(t, "--new-key", key); err != nil {
			t.Fatalf("release.sh --new-key: %v\n%s", err, out)
		}
		if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("private key %v, %v: want mode 0600", fi, err)
		}
		b, err := os.ReadFile(key + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(raw) != ed25519.PublicKeySize {
			t.Fatalf("%s.pub = %q: want a base64 Ed25519 public key (%v)", key, b, err)
		}
		pub = raw
		if out, err := releaseSh(t, "--key", key, "1.1.0", app, site); err != nil {
			t.Fatalf("release.sh --key: %v\n%s", err, out)
		}
		signed = true
	} else {
		t.Fatal("openssl, which release.sh signs with, is not installed (.ci/run installs it)")
	}
	if diff := cmp.Diff(map[string]fs.FileMode{"bin/app": 0o755}, tarFiles(t, filepath.Join(site, "1.0.0/app.tar.gz"))); diff != "" {
		t.Errorf("release files (-want +got):\n%s", diff)
	}
	// What is signed is the statement agentd builds, byte for byte.
	if signed {
		tarball := readFile(t, filepath.Join(site, "1.1.0/app.tar.gz"))
		sum := sha256.Sum256(tarball)
		want := install.Statement{App: "app", Version: "1.1.0", File: "app.tar.gz", Size: int64(len(tarball)), SHA256: hex.EncodeToString(sum[:])}
		if diff := cmp.Diff(string(want.Bytes()), string(readFile(t, filepath.Join(site, "1.1.0/app.tar.gz.statement")))); diff != "" {
			t.Errorf("statement (-agentd's +release.sh's):\n%s", diff)
		}
	}

	// Served as a site, the releases pass agentd's checks: checksum always,
	// signature when signed.
	template := serve(t, site)
	fetch := func(version string, key ed25519.PublicKey) error {
		f := &install.Fetcher{Client: http.DefaultClient, URLTemplate: template, PublicKey: key}
		_, err := f.Fetch(t.Context(), version, t.TempDir())
		return err
	}
	if err := fetch("1.0.0", nil); err != nil {
		t.Errorf("fetch 1.0.0: %v", err)
	}
	if signed {
		if err := fetch("1.1.0", pub); err != nil {
			t.Errorf("fetch signed 1.1.0: %v", err)
		}
		other, _, _ := ed25519.GenerateKey(nil)
		if err := fetch("1.1.0", other); !errors.Is(err, install.ErrBadSignature) {
			t.Errorf("fetch 1.1.0 with another key: %v, want ErrBadSignature", err)
		}
		if err := fetch("1.0.0", pub); err == nil {
			t.Error("fetch unsigned 1.0.0 with a key: no error")
		}

		// 1.1.0's signed files published as 1.3.0 (a site in an
		// attacker's hands): refused, saying what they were signed for.
		copyDir(t, filepath.Join(site, "1.1.0"), filepath.Join(site, "1.3.0"))
		err := fetch("1.3.0", pub)
		if !errors.Is(err, install.ErrOtherRelease) || !strings.Contains(err.Error(), "signed for version 1.1.0, want 1.3.0") {
			t.Errorf("fetch 1.1.0's files as 1.3.0: %v, want ErrOtherRelease naming both versions", err)
		}

		// Signed the old way (the .sig over the .sha256 file, as release.sh
		// did before): refused, naming the fix; --resign fixes it without
		// touching the tarball.
		old := filepath.Join(site, "1.4.0")
		copyDir(t, filepath.Join(site, "1.0.0"), old)
		if out, err := exec.Command("sh", "-c", `openssl pkeyutl -sign -inkey "$1" -rawin -in "$2/app.tar.gz.sha256" | base64 | tr -d '\n' > "$2/app.tar.gz.sig"`,
			"sh", key, old).CombinedOutput(); err != nil {
			t.Fatalf("signing the old way: %v\n%s", err, out)
		}
		err = fetch("1.4.0", pub)
		if !errors.Is(err, install.ErrOldSignature) || !strings.Contains(err.Error(), "scripts/release.sh --key KEY.pem --resign 1.4.0 SITEDIR") {
			t.Errorf("fetch 1.4.0 signed the old way: %v, want ErrOldSignature naming release.sh --resign", err)
		}
		tarball := readFile(t, filepath.Join(old, "app.tar.gz"))
		if out, err := releaseSh(t, "--key", key, "--resign", "1.4.0", site); err != nil {
			t.Fatalf("release.sh --resign: %v\n%s", err, out)
		}
		if err := fetch("1.4.0", pub); err != nil {
			t.Errorf("fetch 1.4.0 re-signed: %v", err)
		}
		if got := readFile(t, filepath.Join(old, "app.tar.gz")); string(got) != string(tarball) {
			t.Error("--resign changed the tarball")
		}

		// Another app's name in the statement: agentd with --app-name
		// billing takes it, with the default (app) it does not.
		if out, err := releaseSh(t, "--key", key, "--app-name", "billing", "1.5.0", app, site); err != nil {
			t.Fatalf("release.sh --app-name: %v\n%s", err, out)
		}
		fetchApp := func(name string) error {
			f := &install.Fetcher{Client: http.DefaultClient, URLTemplate: template, PublicKey: pub, App: name}
			_, err := f.Fetch(t.Context(), "1.5.0", t.TempDir())
			return err
		}
		if err := fetchApp("billing"); err != nil {
			t.Errorf("fetch 1.5.0 of billing as billing: %v", err)
		}
		if err := fetchApp(""); !errors.Is(err, install.ErrOtherRelease) || !strings.Contains(err.Error(), "signed for app billing, want app") {
			t.Errorf("fetch 1.5.0 of billing as app: %v, want ErrOtherRelease", err)
		}
	}

	// Refusals leave the site byte-identical.
	before := snapshot(t, site)
	notKey := filepath.Join(app, "bin/app")
	for name, args := range map[string][]string{
		"version published already": {"1.0.0", app, site},
		"v prefix":                  {"v1.2.0", app, site},
		"short version":             {"1.2", app, site},
		"no app dir":                {"1.2.0", filepath.Join(app, "nope"), site},
		"empty app dir":             {"1.2.0", t.TempDir(), site},
		"not a key":                 {"--key", notKey, "1.2.0", app, site},
		"bad app name":              {"--app-name", "Billing", "1.2.0", app, site},
		"name implying no app":      {"--name", "app-1.2.0.tar.gz", "1.2.0", app, site},
		"resign without key":        {"--resign", "1.0.0", site},
		"resign unpublished":        {"--key", key, "--resign", "1.9.0", site},
		"resign with an app dir":    {"--key", notKey, "--resign", "1.0.0", app, site},
		"missing key":               {"--key", filepath.Join(app, "nope.pem"), "1.2.0", app, site},
		"two arguments":             {"1.2.0", app},
		"unknown flag":              {"--colour", "1.2.0", app, site},
	} {
		t.Run(name, func(t *testing.T) {
			if out, err := releaseSh(t, args...); err == nil {
				t.Errorf("release.sh accepted it:\n%s", out)
			}
			if diff := cmp.Diff(before, snapshot(t, site)); diff != "" {
				t.Errorf("site changed (-before +after):\n%s", diff)
			}
		})
	}
}
