// Package aptenv builds what the tests of the script installer need to run
// real apt and dpkg without touching the machine's own package state:
// versions of a small Debian package built with dpkg-deb, a local apt
// repository of them (dpkg-scanpackages, a file: source), and throwaway
// system roots apt and dpkg work in (apt's Dir, dpkg's --root and
// --admindir, maintainer scripts run chrootless), all under a test's temp
// dir. It also has the install and version commands the docs' apt example
// gives, pointed at such a root. test/apt and test/e2e use it; it is not
// part of the product.
package aptenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Tools are the programs the tests need; Require skips a test without them.
var Tools = []string{"dpkg", "dpkg-deb", "dpkg-query", "dpkg-scanpackages", "apt-get"}

// Require skips t when one of Tools is missing (.ci/run installs them).
func Require(t testing.TB) {
	t.Helper()
	for _, tool := range Tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (apt-get install dpkg-dev apt; .ci/run does): %v", tool, err)
		}
	}
}

// Deb is one version of a package: its files (paths relative to the
// system root, e.g. "opt/app/version") and its maintainer scripts
// (preinst, postinst, ...), each with its content. Executables are those
// under a bin/ directory and the maintainer scripts.
type Deb struct {
	Name, Version string
	Files         map[string]string
	Scripts       map[string]string
}

// WriteFile writes content to path (its directories made) with mode.
func WriteFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// BuildRepo builds every deb with dpkg-deb in dir/build and publishes them
// in the apt repository dir/repo (a Packages index of every version, for a
// "deb [trusted=yes] file:DIR ./" source); it returns the repository's
// directory.
func BuildRepo(t testing.TB, dir string, debs []Deb) string {
	t.Helper()
	repo := filepath.Join(dir, "repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range debs {
		b := filepath.Join(dir, "build", d.Name+"-"+d.Version)
		WriteFile(t, filepath.Join(b, "DEBIAN", "control"), fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: fleetwave tests <tests@fleetwave.invalid>\nDescription: a fleetwave test app\n", d.Name, d.Version), 0o644)
		for phase, s := range d.Scripts {
			WriteFile(t, filepath.Join(b, "DEBIAN", phase), s, 0o755)
		}
		for p, content := range d.Files {
			mode := os.FileMode(0o644)
			if filepath.Base(filepath.Dir(p)) == "bin" {
				mode = 0o755
			}
			WriteFile(t, filepath.Join(b, filepath.FromSlash(p)), content, mode)
		}
		out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", b, filepath.Join(repo, d.Name+"_"+d.Version+"_all.deb")).CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg-deb %s %s: %v\n%s", d.Name, d.Version, err, out)
		}
	}
	cmd := exec.Command("dpkg-scanpackages", "--multiversion", ".", "/dev/null")
	cmd.Dir = repo
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("dpkg-scanpackages: %v\n%s", err, stderr.String())
	}
	WriteFile(t, filepath.Join(repo, "Packages"), out.String(), 0o644)
	return repo
}

// Root is a throwaway system root apt and dpkg work in: dpkg's database,
// apt's dirs, a file: source, and an apt.conf (Conf) that points apt and
// dpkg at it.
type Root struct {
	t testing.TB
	// Dir is the system root; Conf the apt.conf (APT_CONFIG) for it.
	Dir, Conf string
}

// NewRoot makes a root at dir/sys whose apt source is repo, its apt.conf
// at dir/apt.conf, and runs apt-get update in it.
func NewRoot(t testing.TB, dir, repo string) *Root {
	t.Helper()
	r := &Root{t: t, Dir: filepath.Join(dir, "sys"), Conf: filepath.Join(dir, "apt.conf")}
	for _, d := range []string{"var/lib/dpkg/updates", "var/lib/dpkg/info", "var/lib/dpkg/triggers", "etc/apt/sources.list.d", "etc/apt/preferences.d",
		"etc/apt/apt.conf.d", "var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/log/apt"} {
		if err := os.MkdirAll(filepath.Join(r.Dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	WriteFile(t, filepath.Join(r.Admindir(), "status"), "", 0o644)
	WriteFile(t, filepath.Join(r.Dir, "etc", "apt", "sources.list"), "deb [trusted=yes] file:"+repo+" ./\n", 0o644)
	WriteFile(t, r.Conf, fmt.Sprintf(`Dir "%[1]s/";
Dir::State::status "%[1]s/var/lib/dpkg/status";
DPkg::Options { "--root=%[1]s"; "--admindir=%[1]s/var/lib/dpkg"; "--force-script-chrootless"; "--force-not-root"; };
APT::Sandbox::User "root";
`, r.Dir), 0o644)
	r.Must("apt-get", "update", "-qq")
	return r
}

// Admindir is dpkg's database of the root.
func (r *Root) Admindir() string { return filepath.Join(r.Dir, "var", "lib", "dpkg") }

// Path is a path under the root (given with slashes, relative to it).
func (r *Root) Path(p string) string { return filepath.Join(r.Dir, filepath.FromSlash(p)) }

// Must runs name (apt-get, dpkg ...) against the root and fails the test
// if it fails; it returns the output.
func (r *Root) Must(name string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "APT_CONFIG="+r.Conf, "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// InstallCmd is the docs' apt example for package pkg, pointed at the
// root: finish what an interrupted dpkg left (dpkg --configure -a),
// install exactly the version asked for, downgrades allowed (a rollback
// is one), and reinstall it when dpkg still does not call it installed: a
// kill while dpkg unpacked leaves the package half-installed, which
// neither dpkg --configure -a nor apt-get install (the version is already
// there) repairs.
func (r *Root) InstallCmd(pkg string) string {
	return fmt.Sprintf(`set -eu
export APT_CONFIG=%q DEBIAN_FRONTEND=noninteractive
dpkg --root=%q --admindir=%q --force-script-chrootless --force-not-root --configure -a
apt-get update -qq
apt-get install -y -q --allow-downgrades "%[4]s=$FLEETWAVE_VERSION"
if [ "$(dpkg-query --admindir=%[3]q -W -f='${db:Status-Status} ${Version}' %[4]s)" != "installed $FLEETWAVE_VERSION" ]; then
  apt-get install -y -q --allow-downgrades --reinstall "%[4]s=$FLEETWAVE_VERSION"
fi
`, r.Conf, r.Dir, r.Admindir(), pkg)
}

// VersionCmd prints the version of pkg dpkg has fully installed; nothing
// when none is; an error when dpkg is in the middle of one.
func (r *Root) VersionCmd(pkg string) string {
	return fmt.Sprintf(`s=$(dpkg-query --admindir=%q -W -f='${db:Status-Status} ${Version}' %[2]s 2>/dev/null) || exit 0
case "$s" in
  "installed "*) echo "${s#installed }" ;;
  not-installed*|config-files*|"") ;;
  *) echo "%[2]s is $s (dpkg --configure -a finishes it)" >&2; exit 1 ;;
esac`, r.Admindir(), pkg)
}

// State is what dpkg says of pkg in the root: "installed 1.1.0",
// "half-configured 1.3.0"..., "unknown: ..." when it cannot tell.
func (r *Root) State(pkg string) string {
	out, err := exec.Command("dpkg-query", "--admindir="+r.Admindir(), "-W", "-f=${db:Status-Status} ${Version}", pkg).Output()
	if err != nil {
		return "unknown: " + err.Error()
	}
	return string(out)
}

// Audit is nil when dpkg --audit finds nothing half done in the root.
func (r *Root) Audit() error {
	out, err := exec.Command("dpkg", "--admindir="+r.Admindir(), "--audit").CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		return fmt.Errorf("dpkg --audit: %v %s", err, out)
	}
	return nil
}
