package crash_test

// The release site and the release are not trusted (issue 24, items 3-5):
// a release agentd refuses must leave the host as it was, with the app
// (test/cmd/dbapp committing a row every 2 ms) never stopped, and the
// release's own programs never run. These run the real agentd binary on a
// host of crash_test.go (agentd update, systemd stand-in).

import (
	"crypto/ed25519"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/pkg/install"
	"github.com/fleetwave/fleetwave/test/releases"
)

// dbappScript is bin/app of a dbapp release.
func dbappScript(v string, schema int, mode string) string {
	return fmt.Sprintf("#!/bin/sh\nexec %s --db \"$CRASH_DB\" --marker \"$CRASH_MARKER\" --version %s --schema %d --mode %s\n",
		dbappBin, v, schema, mode)
}

// recorder is a program a release ships in place of one agentd runs: it
// records that it ran (in the systemd stand-in's dir, from the environment
// agentd passes on) and says all is well.
const recorder = "#!/bin/sh\necho \"$0 $*\" >> \"$FAKE_SYSTEMD/release-programs.ran\"\nexit 0\n"

// site serves releases for one test, signed with key when it is not nil,
// and returns the URL template.
func site(t *testing.T, key ed25519.PrivateKey) (*releases.Server, string) {
	t.Helper()
	rs := releases.NewServer(key)
	srv := httptest.NewServer(rs)
	t.Cleanup(srv.Close)
	return rs, releases.URLTemplate(srv.URL)
}

// appState is what must not change when a release is refused.
type appState struct {
	pid    string            // the running app's, from the systemd stand-in
	starts int               // how many times the stand-in started it
	links  map[string]string // the bin dir
	active string            // update.yaml
}

func (h *host) appState() appState {
	h.t.Helper()
	pid, _ := os.ReadFile(filepath.Join(h.sysd, "pid"))
	starts, _ := os.ReadFile(filepath.Join(h.sysd, "starts"))
	links := map[string]string{}
	entries, err := os.ReadDir(filepath.Join(h.root, "bin"))
	if err != nil {
		h.t.Fatal(err)
	}
	for _, e := range entries {
		p := filepath.Join(h.root, "bin", e.Name())
		if target, err := os.Readlink(p); err == nil {
			links[e.Name()] = "-> " + target
		} else {
			b, _ := os.ReadFile(p)
			links[e.Name()] = "file: " + string(b)
		}
	}
	st, err := h.status()
	if err != nil {
		h.t.Fatal(err)
	}
	return appState{pid: strings.TrimSpace(string(pid)), starts: strings.Count(string(starts), "\n"), links: links, active: st.ActiveVersion}
}

// writes are the ids dbapp acknowledged (its commit returned) and those the
// database holds.
func (h *host) writes() (acked []int, stored map[int]bool) {
	h.t.Helper()
	b, _ := os.ReadFile(h.db + ".acked")
	for _, l := range strings.Fields(string(b)) {
		id, err := strconv.Atoi(l)
		if err != nil {
			h.t.Fatalf("%s.acked: %q", h.db, l)
		}
		acked = append(acked, id)
	}
	db, err := sql.Open("sqlite", "file:"+h.db+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		h.t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT id FROM writes")
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	stored = map[int]bool{}
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			h.t.Fatal(err)
		}
		stored[id] = true
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return acked, stored
}

// waitWrites waits until dbapp acknowledged at least n more writes than
// it had.
func (h *host) waitWrites(n int) int {
	h.t.Helper()
	var got int
	natstest.Eventually(h.t, 30*time.Second, func() error {
		acked, _ := h.writes()
		if got = len(acked); got < n {
			return fmt.Errorf("%d writes acknowledged, want %d", got, n)
		}
		return nil
	})
	return got
}

// lost is how many acknowledged writes the database lacks.
func (h *host) lost() (lost, acked int) {
	h.t.Helper()
	ids, stored := h.writes()
	for _, id := range ids {
		if !stored[id] {
			lost++
		}
	}
	return lost, len(ids)
}

// enable installs v as the host's first version (agentd enable, which
// turns updates on).
func (h *host) enable(v string) {
	h.t.Helper()
	h.setPlan(v)
	h.mustRun(h.args("enable")...)
}

// refused runs agentd update towards v, which must be refused with an
// error saying want, and checks that nothing the app depends on changed:
// same process (never stopped or restarted), links, active version, no
// rollback, no database backup taken, no journal, no version dir (unless
// the refusal comes after the download), no write lost while the app kept
// writing, and none of the release's programs run.
func (h *host) refused(v, want string, class install.FailureClass, extracted bool) {
	h.t.Helper()
	before := h.appState()
	n := h.waitWrites(1)
	h.setPlan(v)
	start := time.Now()
	out, err := h.agentd("", h.args("update")...)
	took := time.Since(start)
	if err == nil || !strings.Contains(out, want) {
		h.t.Fatalf("agentd update to %s: %v, want refused saying %q\n%s", v, err, want, out)
	}
	// The app goes on writing, and lost none of it.
	h.waitWrites(n + 50)
	lost, acked := h.lost()
	h.t.Logf("refused %s in %s; %d writes acknowledged, %d lost", v, took.Round(time.Millisecond), acked, lost)
	if lost != 0 {
		h.t.Errorf("%d of %d acknowledged writes lost", lost, acked)
	}
	if diff := cmp.Diff(before, h.appState(), cmp.AllowUnexported(appState{})); diff != "" {
		h.t.Errorf("refusing %s changed the app's state (-before +after):\n%s\n%s", v, diff, h.log())
	}
	st, err := h.status()
	if err != nil {
		h.t.Fatal(err)
	}
	if st.Rollback || st.ErrorClass != class || !strings.Contains(st.Error, want) {
		h.t.Errorf("update.yaml status %+v, want a %s error saying %q and no rollback", st, class, want)
	}
	tr := h.tree()
	if _, err := os.Stat(filepath.Join(tr.VersionDir(before.active), "backup")); err == nil {
		h.t.Errorf("the database of %s was backed up for a refused release", before.active)
	}
	if _, err := os.Stat(tr.VersionDir(v)); (err == nil) != extracted {
		h.t.Errorf("versions/%s: %v; want it extracted: %v", v, err, extracted)
	}
	if j, err := install.LoadJournal(tr); err != nil || j != nil {
		h.t.Errorf("journal %+v, %v; want none", j, err)
	}
	if b, err := os.ReadFile(filepath.Join(h.sysd, "release-programs.ran")); err == nil {
		h.t.Errorf("the release's own programs ran:\n%s", b)
	}
}

// TestRefusedReleaseLeavesTheAppAlone (issue 24, item 5): a release that
// ships a name the bin dir holds for someone else is refused before the
// app is stopped or its database backed up: with dbapp committing every
// 2 ms, no acknowledged commit is lost and the app is never restarted.
func TestRefusedReleaseLeavesTheAppAlone(t *testing.T) {
	rs, url := site(t, nil)
	if err := rs.AddBin("1.0.0", map[string]string{"app": dbappScript("1.0.0", 1, "write")}); err != nil {
		t.Fatal(err)
	}
	if err := rs.AddBin("2.0.0", map[string]string{"app": dbappScript("2.0.0", 2, "write"), "tool": recorder}); err != nil {
		t.Fatal(err)
	}
	h := newHost(t, false, "")
	h.url = url
	h.enable("1.0.0")
	// The operator's own tool, where 2.0.0 puts a link.
	if err := os.WriteFile(filepath.Join(h.root, "bin", "tool"), []byte("#!/bin/sh\necho the operator's\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h.waitWrites(100)
	h.refused("2.0.0", "not created by agentd", install.ClassInfrastructure, true)
}

// TestShadowingReleaseRefused (issue 24, item 4): with the bin dir first in
// agentd's PATH, a release shipping bin/systemctl (whose app would not
// even run) or bin/sh is refused before anything changes, and its
// programs are never run: agentd runs systemctl and the health command's
// shell by absolute path, and the release's would only have stood in for
// them in a shell's PATH.
func TestShadowingReleaseRefused(t *testing.T) {
	rs, url := site(t, nil)
	for v, bin := range map[string]map[string]string{
		"1.0.0": {"app": dbappScript("1.0.0", 1, "write")},
		// Its app exits at once; its systemctl says all is well.
		"2.0.0": {"app": dbappScript("2.0.0", 2, "crash"), "systemctl": recorder},
		"2.1.0": {"app": dbappScript("2.1.0", 2, "write"), "sh": recorder},
	} {
		if err := rs.AddBin(v, bin); err != nil {
			t.Fatal(err)
		}
	}
	h := newHost(t, false, "")
	h.url = url
	h.pathFirst = filepath.Join(h.root, "bin")
	h.enable("1.0.0")
	h.waitWrites(100)
	h.refused("2.0.0", "ships bin/systemctl", install.ClassRelease, true)
	h.refused("2.1.0", "ships bin/sh", install.ClassRelease, true)
	// The host still installs what it may.
	if err := rs.AddBin("2.2.0", map[string]string{"app": dbappScript("2.2.0", 2, "write")}); err != nil {
		t.Fatal(err)
	}
	h.setPlan("2.2.0")
	h.mustRun(h.args("update")...)
	if st := h.appState(); st.active != "2.2.0" || st.starts != 2 {
		t.Errorf("after installing 2.2.0: %+v, want it active and started once more", st)
	}
}

// TestSignatureReplay (issue 24, item 3): the release site serves 1.0.0's
// genuine tarball, .sha256, .sig and .statement as 1.1.0: refused, naming
// the version it was signed for, with nothing installed and the app
// untouched. A release signed the old way (over the .sha256 file) is
// refused naming the fix. A correctly signed 1.1.0 installs.
func TestSignatureReplay(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	rs, url := site(t, priv)
	if err := rs.AddBin("1.0.0", map[string]string{"app": dbappScript("1.0.0", 1, "write")}); err != nil {
		t.Fatal(err)
	}
	if err := rs.Replay("1.1.0", "1.0.0"); err != nil {
		t.Fatal(err)
	}
	if err := rs.AddBin("1.2.0", map[string]string{"app": dbappScript("1.2.0", 2, "write")}); err != nil {
		t.Fatal(err)
	}
	if err := rs.SignOldStyle("1.2.0"); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "release.pub")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(pub)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHost(t, false, "")
	h.url = url
	// Healthy: the app says it runs the version its release's VERSION
	// file names. 1.0.0's code under the name 1.1.0 would pass this: what
	// stops a replay is the signature.
	h.extra = []string{"--public-key", keyFile,
		"--health-command", `v=$(readlink "$CRASH_ROOT/bin/app"); [ "$(cat "$CRASH_DB.ready" 2>/dev/null)" = "$(cat "${v%/bin/app}/VERSION")" ]`}
	h.enable("1.0.0")
	h.waitWrites(100)

	h.refused("1.1.0", "signed for version 1.0.0, want 1.1.0", install.ClassArtifact, false)
	h.refused("1.2.0", "scripts/release.sh --key KEY.pem --resign 1.2.0 SITEDIR", install.ClassArtifact, false)

	// The real 1.1.0, signed for what it is.
	if err := rs.AddBin("1.1.0", map[string]string{"app": dbappScript("1.1.0", 2, "write")}); err != nil {
		t.Fatal(err)
	}
	h.setPlan("1.1.0")
	h.mustRun(h.args("update")...)
	st := h.appState()
	if st.active != "1.1.0" || st.links["app"] != "-> "+filepath.Join(h.tree().VersionDir("1.1.0"), "bin", "app") {
		t.Errorf("after installing the signed 1.1.0: %+v", st)
	}
	if err := natstest.Within(20*time.Second, func() error {
		if apps := h.apps(); len(apps) != 1 || apps[0].version != "1.1.0" {
			return fmt.Errorf("app processes %+v, want exactly one of 1.1.0", apps)
		}
		return nil
	}); err != nil {
		t.Errorf("%v\n%s", err, h.log())
	}
}
