package systemd_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/internal/tuftest"
)

// buildFleetctl builds cmd/fleetctl for the unit tests below.
func buildFleetctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fleetctl")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/fleetwave/fleetwave/cmd/fleetctl").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// unitValue is the value of key= in a unit file (the last, as systemd
// takes it).
func unitValue(t *testing.T, unit, key string) string {
	t.Helper()
	var v string
	for _, l := range strings.Split(unit, "\n") {
		if rest, ok := strings.CutPrefix(l, key+"="); ok {
			v = rest
		}
	}
	if v == "" {
		t.Fatalf("no %s= in the unit", key)
	}
	return v
}

// TestRepoTimestampUnitsVerify: systemd-analyze verify accepts the timer
// and its service (with ExecStart pointing at a real fleetctl; the shipped
// path is /usr/local/bin).
func TestRepoTimestampUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	bin := buildFleetctl(t)
	dir := t.TempDir()
	for _, name := range []string{"fleetwave-repo-timestamp.service", "fleetwave-repo-timestamp.timer"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte("/usr/local/bin/fleetctl"), []byte(bin))
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(analyze, "verify", "./fleetwave-repo-timestamp.timer", "./fleetwave-repo-timestamp.service")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	timer, _ := os.ReadFile("fleetwave-repo-timestamp.timer")
	if unitValue(t, string(timer), "Persistent") != "yes" && unitValue(t, string(timer), "Persistent") != "true" {
		t.Error("the timer is not Persistent: a run missed while the machine was off would wait for the next")
	}
}

// TestRepoTimestampUnitRuns runs the service's ExecStart as systemd would
// (REPO_DIR and the credential directory %d substituted) against a real
// repository: quiet and exit 0 with the timestamp key, the timestamp
// re-signed; non-zero and nothing changed with another key.
func TestRepoTimestampUnitRuns(t *testing.T) {
	bin := buildFleetctl(t)
	unit, err := os.ReadFile("fleetwave-repo-timestamp.service")
	if err != nil {
		t.Fatal(err)
	}
	r := tuftest.New(t, nil)
	credDir := t.TempDir()
	run := func(key string) (string, string, int) {
		t.Helper()
		kb, err := os.ReadFile(key)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(credDir, "timestamp.key"), kb, 0o600); err != nil {
			t.Fatal(err)
		}
		line := unitValue(t, string(unit), "ExecStart")
		line = strings.NewReplacer("/usr/local/bin/fleetctl", bin, "${REPO_DIR}", r.Repo.Dir, "%d", credDir, "$TIMESTAMP_ARGS", "").Replace(line)
		args := strings.Fields(line)
		if regexp.MustCompile(`[$%]`).MatchString(line) {
			t.Fatalf("unsubstituted ExecStart: %s", line)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		_ = cmd.Run()
		return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
	}
	before, err := r.Repo.PublishedTimestamp()
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(r.Timestamp.Path)
	if code != 0 || out != "" || errOut != "" {
		t.Fatalf("with the timestamp key: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	after, err := r.Repo.PublishedTimestamp()
	if err != nil || after.Signed.Version != before.Signed.Version+1 {
		t.Fatalf("timestamp v%d after v%d (%v)", after.Signed.Version, before.Signed.Version, err)
	}
	files := tuftest.Files(t, r.Repo.Dir)
	_, errOut, code = run(r.Targets.Path)
	if code != 1 || !strings.Contains(errOut, "is not a timestamp key") {
		t.Fatalf("with the targets key: exit %d, stderr %q", code, errOut)
	}
	if got := tuftest.Files(t, r.Repo.Dir); len(got) != len(files) || got["metadata/timestamp.json"] != files["metadata/timestamp.json"] {
		t.Fatal("a failed timestamp run changed the repository")
	}
}
