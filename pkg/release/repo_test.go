package release_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/theupdateframework/go-tuf/v2/metadata"
	"golang.org/x/sys/unix"

	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/release"
)

// keyAt generates dir/name.key and loads it.
func keyAt(t *testing.T, dir, name string) *release.Signer {
	t.Helper()
	p := filepath.Join(dir, name+".key")
	if _, err := release.GenerateKey(p); err != nil {
		t.Fatal(err)
	}
	s, err := release.LoadSigner(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pubs(ss ...*release.Signer) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Path+".pub")
	}
	return out
}

func roleKeys(t *testing.T, threshold int, ss ...*release.Signer) release.RoleKeys {
	t.Helper()
	rk, err := release.LoadRoleKeys(pubs(ss...), threshold)
	if err != nil {
		t.Fatal(err)
	}
	return rk
}

// unchanged fails unless dir holds what before read.
func unchanged(t *testing.T, what, dir string, before map[string]string) {
	t.Helper()
	if diff := cmp.Diff(before, tuftest.Files(t, dir)); diff != "" {
		t.Errorf("%s changed files (-before +after):\n%s", what, diff)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestThresholdInitFromPublicKeyFiles: a repository whose root is 2-of-3
// and targets 2-of-3, made from public key files alone (the private keys
// stay with their holders), published only once two of each signed; a
// short publish and a stranger's key change nothing.
func TestThresholdInitFromPublicKeyFiles(t *testing.T) {
	kd := t.TempDir()
	ra, rb, rc := keyAt(t, kd, "root-a"), keyAt(t, kd, "root-b"), keyAt(t, kd, "root-c")
	ta, tb, tc := keyAt(t, kd, "targets-a"), keyAt(t, kd, "targets-b"), keyAt(t, kd, "targets-c")
	sn, ts, stranger := keyAt(t, kd, "snapshot"), keyAt(t, kd, "timestamp"), keyAt(t, kd, "stranger")
	repo := &release.Repo{Dir: filepath.Join(t.TempDir(), "repo")}

	if _, err := release.LoadRoleKeys(pubs(ra, ra), 2); err == nil || !strings.Contains(err.Error(), "same key") {
		t.Fatalf("the same key twice: %v", err)
	}
	if _, err := release.LoadRoleKeys(pubs(ra, rb), 3); err == nil {
		t.Fatal("threshold 3 of 2 keys accepted")
	}
	if err := repo.Init(release.InitOptions{Root: roleKeys(t, 2, ra, rb, rc), Targets: roleKeys(t, 2, ta, tb, tc), Snapshot: roleKeys(t, 1, sn), Timestamp: roleKeys(t, 1, ta)}); err == nil || !errors.Is(err, release.ErrBadKeyChange) {
		t.Fatalf("a targets key as the timestamp key: %v", err)
	}
	if _, err := os.Stat(repo.Dir); !os.IsNotExist(err) {
		t.Fatalf("a refused init left %s: %v", repo.Dir, err)
	}
	if err := repo.Init(release.InitOptions{Root: roleKeys(t, 2, ra, rb, rc), Targets: roleKeys(t, 2, ta, tb, tc), Snapshot: roleKeys(t, 1, sn), Timestamp: roleKeys(t, 1, ts)}); err != nil {
		t.Fatal(err)
	}
	if err := repo.Init(release.InitOptions{}); err == nil {
		t.Fatal("init over a repository")
	}

	for _, s := range []*release.Signer{ra, ta} {
		if _, err := repo.Sign(s); err != nil {
			t.Fatal(err)
		}
	}
	before := tuftest.Files(t, repo.Dir)
	if _, err := repo.Sign(stranger); !errors.Is(err, release.ErrKeyNotInRole) {
		t.Fatalf("a stranger's key signs: %v", err)
	}
	unchanged(t, "a stranger's sign", repo.Dir, before)
	if err := repo.Publish(sn, ts); !errors.Is(err, release.ErrShortOfSignatures) {
		t.Fatalf("publish with one of two: %v", err)
	}
	unchanged(t, "a short publish", repo.Dir, before)
	st, err := repo.Status()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Staged) != 2 || st.Staged[0].Ready || st.Staged[0].Needs[0].Missing() != 1 || st.Staged[1].Needs[0].Missing() != 1 ||
		!cmp.Equal(st.Staged[0].Needs[0].SignedBy, []string{ra.ID}) || !cmp.Equal(st.Staged[1].Needs[0].SignedBy, []string{ta.ID}) {
		t.Fatalf("status: %+v", st.Staged)
	}
	// Signing twice with one key is one signature.
	if _, err := repo.Sign(ra); err != nil {
		t.Fatal(err)
	}
	if err := repo.Publish(sn, ts); !errors.Is(err, release.ErrShortOfSignatures) {
		t.Fatalf("publish with one key twice: %v", err)
	}
	for _, s := range []*release.Signer{rc, tb} {
		if _, err := repo.Sign(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := repo.Publish(ts, sn); !errors.Is(err, release.ErrKeyNotInRole) {
		t.Fatalf("publish with snapshot and timestamp keys swapped: %v", err)
	}
	if err := repo.Publish(sn, ts); err != nil {
		t.Fatal(err)
	}
	root, err := repo.PublishedRoot()
	if err != nil || root.Signed.Roles[metadata.ROOT].Threshold != 2 || len(root.Signed.Roles[metadata.ROOT].KeyIDs) != 3 || root.Signed.Roles[metadata.TARGETS].Threshold != 2 {
		t.Fatalf("root %+v: %v", root, err)
	}
}

// TestRootRotationFollowedByClient: a client that trusts root v1 follows
// v2 (a root key replaced, signed by the old key and the new) and v3
// (signed by the new alone); a v4 signed by the revoked key only is
// refused, and the client keeps v3.
func TestRootRotationFollowedByClient(t *testing.T) {
	r := tuftest.New(t, nil)
	r.Add(release.Custom{App: "web", Version: "1.0.0", OS: "linux", Arch: "amd64"}, "app.tar.gz", []byte("one"))
	c := r.Client(nil)
	ctx := context.Background()
	if tr, err := c.Refresh(ctx); err != nil || tr.RootVersion != 1 {
		t.Fatalf("refresh: %+v %v", tr, err)
	}
	newRoot := r.Key("root-2")
	if _, err := r.Repo.RotateKey(release.KeyChange{Role: metadata.ROOT, Add: []*metadata.Key{newRoot.Key}, Revoke: []string{r.Root.ID}}); err != nil {
		t.Fatal(err)
	}
	// The new key alone is short: root v1's threshold must sign too.
	r.Sign(newRoot)
	before := tuftest.Files(r.T, r.Repo.Dir)
	if err := r.Repo.Publish(r.Snapshot, r.Timestamp); !errors.Is(err, release.ErrShortOfSignatures) || !strings.Contains(err.Error(), "root v1") {
		t.Fatalf("root v2 without the old root key: %v", err)
	}
	unchanged(t, "a short root publish", r.Repo.Dir, before)
	r.Sign(r.Root)
	r.Publish()
	if tr, err := c.Refresh(ctx); err != nil || tr.RootVersion != 2 {
		t.Fatalf("after rotation: %+v %v", tr, err)
	}
	// v3: renewed, signed by the new key alone.
	if _, err := r.Repo.Renew(metadata.ROOT); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Repo.Sign(r.Root); !errors.Is(err, release.ErrKeyNotInRole) {
		t.Fatalf("the revoked root key signs root v3: %v", err)
	}
	r.Sign(newRoot)
	r.Publish()
	if tr, err := c.Refresh(ctx); err != nil || tr.RootVersion != 3 {
		t.Fatalf("v3: %+v %v", tr, err)
	}
	// A v4 signed by the revoked key, served: refused.
	v4, err := r.Repo.PublishedRoot()
	if err != nil {
		t.Fatal(err)
	}
	v4.Signed.Version = 4
	v4.ClearSignatures()
	v4.Signed.Roles[metadata.ROOT].KeyIDs = []string{r.Root.ID}
	v4.Signed.Keys[r.Root.ID] = r.Root.Key
	if err := release.SignWith(v4, r.Root); err != nil {
		t.Fatal(err)
	}
	b, _ := v4.ToBytes(true)
	if err := os.WriteFile(filepath.Join(r.Repo.Dir, "metadata", "4.root.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Refresh(ctx); !errors.Is(err, release.ErrUntrusted) {
		t.Fatalf("root v4 signed by a revoked key: %v", err)
	}
	got, err := release.TrustedRoot(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := os.ReadFile(filepath.Join(r.Repo.Dir, "metadata", "3.root.json")); string(got) != string(want) {
		t.Fatal("the client no longer trusts root v3")
	}
}

// TestTargetsKeyRotation: the targets key is replaced; the client follows
// (new root, targets signed by the new key), and targets signed by the
// revoked key are refused afterwards: by Sign and Publish on the
// repository side, and by the client when someone serves them anyway.
func TestTargetsKeyRotation(t *testing.T) {
	r := tuftest.New(t, nil)
	r.Add(release.Custom{App: "web", Version: "1.0.0", OS: "linux", Arch: "amd64"}, "app.tar.gz", []byte("one"))
	c := r.Client(nil)
	ctx := context.Background()
	if _, err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	old, t2 := r.Targets, r.Key("targets-2")
	if _, err := r.Repo.RotateKey(release.KeyChange{Role: metadata.TARGETS, Add: []*metadata.Key{t2.Key}, Revoke: []string{old.ID}}); err != nil {
		t.Fatal(err)
	}
	if staged, _ := r.Repo.StagedTargets(); staged == nil {
		t.Fatal("a targets key rotation staged no targets version for the new key to sign")
	}
	// Before any root key has signed, the revoked key may already sign
	// nothing and the new one may sign the staged targets (the holders
	// need not queue behind the root signers).
	if got, err := r.Repo.Signable(old); err != nil || len(got) != 0 {
		t.Fatalf("the revoked targets key may sign %v (%v)", got, err)
	}
	r.Sign(t2)
	if err := r.Repo.Publish(r.Snapshot, r.Timestamp); !errors.Is(err, release.ErrShortOfSignatures) {
		t.Fatalf("publish before the root keys signed: %v", err)
	}
	if _, err := r.Repo.Sign(r.Root); err != nil {
		t.Fatal(err)
	}
	r.Publish()
	r.Targets = t2
	tr, err := c.Refresh(ctx)
	if err != nil || tr.RootVersion != 2 {
		t.Fatalf("after rotation: %+v %v", tr, err)
	}
	if _, err := tr.Target("web", "1.0.0", "linux", "amd64"); err != nil {
		t.Fatal(err)
	}
	r.Add(release.Custom{App: "web", Version: "1.1.0", OS: "linux", Arch: "amd64"}, "app.tar.gz", []byte("two"))
	if tr, err = c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Target("web", "1.1.0", "linux", "amd64"); err != nil {
		t.Fatal(err)
	}
	goodTargets := tr.TargetsVersion

	// The holder of the revoked key (with the snapshot and timestamp
	// keys, or a repository tool that skipped the check) serves targets
	// it signed: refused.
	if _, err := r.Repo.Flag("web", "1.1.0", release.FlagChange{EndOfLife: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Repo.Sign(old); !errors.Is(err, release.ErrKeyNotInRole) {
		t.Fatalf("the revoked key signs targets: %v", err)
	}
	forged, err := r.Repo.StagedTargets()
	if err != nil {
		t.Fatal(err)
	}
	if err := release.SignWith(forged, old); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(r.Repo.Dir, "metadata")
	b, _ := forged.ToBytes(true)
	v := strconv.FormatInt(forged.Signed.Version, 10)
	if err := os.WriteFile(filepath.Join(md, v+".targets.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := r.Repo.PublishedSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	snap.Signed.Version++
	snap.Signed.Meta["targets.json"] = metadata.MetaFile(forged.Signed.Version)
	snap.ClearSignatures()
	if err := release.SignWith(snap, r.Snapshot); err != nil {
		t.Fatal(err)
	}
	b, _ = snap.ToBytes(true)
	if err := os.WriteFile(filepath.Join(md, strconv.FormatInt(snap.Signed.Version, 10)+".snapshot.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	ts := metadata.Timestamp(time.Now().Add(time.Hour))
	pts, _ := r.Repo.PublishedTimestamp()
	ts.Signed.Version = pts.Signed.Version + 1
	ts.Signed.Meta["snapshot.json"] = metadata.MetaFile(snap.Signed.Version)
	if err := release.SignWith(ts, r.Timestamp); err != nil {
		t.Fatal(err)
	}
	b, _ = ts.ToBytes(true)
	if err := os.WriteFile(filepath.Join(md, "timestamp.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Refresh(ctx); !errors.Is(err, release.ErrUntrusted) {
		t.Fatalf("targets signed by a revoked key: %v", err)
	}
	// A fresh client (no earlier state) refuses them too.
	if _, err := r.Client(nil).Refresh(ctx); !errors.Is(err, release.ErrUntrusted) {
		t.Fatalf("a new client, targets signed by a revoked key: %v", err)
	}
	_ = goodTargets
}

func ptr[T any](v T) *T { return &v }

// TestFlag: a flag set on a version reaches every platform of it, through
// the client; a version the repository lacks is named with those it has;
// a flag it has already stages nothing; notes with controls are refused.
func TestFlag(t *testing.T) {
	r := tuftest.New(t, nil)
	for _, arch := range []string{"amd64", "arm64"} {
		r.Add(release.Custom{App: "web", Version: "1.2.0", OS: "linux", Arch: arch}, "app.tar.gz", []byte("bytes "+arch))
	}
	r.Add(release.Custom{App: "web", Version: "1.3.0", OS: "linux", Arch: "amd64"}, "app.tar.gz", []byte("later"))
	changed, err := r.Repo.Flag("web", "1.2.0", release.FlagChange{EndOfLife: ptr(true), Notes: ptr("CVE-2026-1234: upgrade to 1.3.0")})
	if err != nil || len(changed) != 2 {
		t.Fatalf("flag: %v %v", changed, err)
	}
	r.Sign(r.Targets)
	r.Publish()
	tr, err := r.Client(nil).Refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		tg, err := tr.Target("web", "1.2.0", "linux", arch)
		if err != nil || !tg.Custom.EndOfLife || tg.Custom.Notes != "CVE-2026-1234: upgrade to 1.3.0" || tg.Custom.Security {
			t.Fatalf("%s: %+v %v", arch, tg, err)
		}
	}
	rs, bad, err := r.Repo.Releases()
	if err != nil || len(bad) != 0 || len(rs) != 2 || !rs[0].EndOfLife || rs[1].EndOfLife || !cmp.Equal(rs[0].Platforms, []string{"linux-amd64", "linux-arm64"}) {
		t.Fatalf("releases %+v %v %v", rs, bad, err)
	}

	before := tuftest.Files(t, r.Repo.Dir)
	if changed, err := r.Repo.Flag("web", "1.2.0", release.FlagChange{EndOfLife: ptr(true)}); err != nil || changed != nil {
		t.Fatalf("a flag it has: %v %v", changed, err)
	}
	if _, err := r.Repo.Flag("web", "9.9.9", release.FlagChange{Security: ptr(true)}); !errors.Is(err, release.ErrNoRelease) || !strings.Contains(err.Error(), "1.2.0, 1.3.0") {
		t.Fatalf("unknown version: %v", err)
	}
	for _, notes := range []string{"a\nb", "bell\a", "\x1b[31mred", "rtl\u202eevil", string([]byte{0xff})} {
		if _, err := r.Repo.Flag("web", "1.2.0", release.FlagChange{Notes: ptr(notes)}); err == nil {
			t.Errorf("notes %q accepted", notes)
		}
	}
	src := writeFile(t, "app.tar.gz", "x")
	if _, err := r.Repo.AddTarget(src, release.Custom{App: "web", Version: "1.4.0", OS: "linux", Arch: "amd64", Notes: "a\x1b]0;title\a"}); err == nil {
		t.Error("add with a control in notes accepted")
	}
	for _, c := range []release.Custom{
		{App: "web", Version: "not a version", OS: "linux", Arch: "amd64"},
		{App: "Web", Version: "1.0.0", OS: "linux", Arch: "amd64"},
		{App: "web", Version: "1.0.0", OS: "linux/x", Arch: "amd64"},
	} {
		if _, err := r.Repo.AddTarget(src, c); err == nil {
			t.Errorf("add %+v accepted", c)
		}
	}
	unchanged(t, "refused flags and adds", r.Repo.Dir, before)
}

// TestStatusAndTimestampExpiry: status warns as each role nears expiry;
// timestamp renews the timestamp and refuses (changing nothing) once the
// snapshot it would vouch for has expired.
func TestStatusAndTimestampExpiry(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	r := tuftest.New(t, clock)
	warnings := func() string {
		t.Helper()
		st, err := r.Repo.Status()
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Published) != 4 {
			t.Fatalf("published %+v", st.Published)
		}
		return strings.Join(st.Warnings, "\n")
	}
	if w := warnings(); w != "" {
		t.Fatalf("a fresh repository warns: %s", w)
	}
	now = now.Add(13 * time.Hour)
	if w := warnings(); !strings.Contains(w, "timestamp v1 expires in 11h") {
		t.Fatalf("13h on: %q", w)
	}
	if err := r.Repo.Timestamp(r.Timestamp); err != nil {
		t.Fatal(err)
	}
	if w := warnings(); w != "" {
		t.Fatalf("after timestamp: %q", w)
	}
	if err := r.Repo.Timestamp(r.Targets); !errors.Is(err, release.ErrKeyNotInRole) {
		t.Fatalf("timestamp with the targets key: %v", err)
	}
	now = now.Add(80 * 24 * time.Hour)
	w := warnings()
	for _, want := range []string{"timestamp v2 EXPIRED", "targets v1 expires in 9d", "snapshot v1 expires in 9d"} {
		if !strings.Contains(w, want) {
			t.Errorf("80 days on, no %q in:\n%s", want, w)
		}
	}
	if err := r.Repo.Timestamp(r.Timestamp); err != nil {
		t.Fatal(err)
	}
	now = now.Add(11 * 24 * time.Hour)
	before := tuftest.Files(t, r.Repo.Dir)
	if err := r.Repo.Timestamp(r.Timestamp); !errors.Is(err, release.ErrExpired) || !strings.Contains(err.Error(), "snapshot v1") {
		t.Fatalf("timestamp over an expired snapshot: %v", err)
	}
	unchanged(t, "a refused timestamp", r.Repo.Dir, before)
	// Publishing with nothing staged re-signs the snapshot; targets is
	// renewed by a new version.
	if _, err := r.Repo.Renew(metadata.TARGETS); err != nil {
		t.Fatal(err)
	}
	r.Sign(r.Targets)
	r.Publish()
	if w := warnings(); w != "" {
		t.Fatalf("after renewal: %q", w)
	}
}

// TestEphemeralClient: a client with a root and no Dir refreshes, follows
// a rotation, and writes no file anywhere (its working directory
// included).
func TestEphemeralClient(t *testing.T) {
	r := tuftest.New(t, nil)
	r.Add(release.Custom{App: "web", Version: "1.0.0", OS: "linux", Arch: "amd64"}, "app.tar.gz", []byte("one"))
	root := r.RootBytes()
	if _, err := r.Repo.RotateKey(release.KeyChange{Role: metadata.SNAPSHOT, Add: []*metadata.Key{r.Key("snapshot-2").Key}}); err != nil {
		t.Fatal(err)
	}
	r.Sign(r.Root)
	r.Publish()
	wd := t.TempDir()
	t.Chdir(wd)
	c := &release.Client{URL: r.Serve(), Root: root}
	tr, err := c.Refresh(context.Background())
	if err != nil || tr.RootVersion != 2 {
		t.Fatalf("%+v %v", tr, err)
	}
	if _, err := tr.Target("web", "1.0.0", "linux", "amd64"); err != nil {
		t.Fatal(err)
	}
	if files := tuftest.Files(t, wd); len(files) != 1 {
		t.Fatalf("an ephemeral client wrote %v", files)
	}
	if _, err := (&release.Client{URL: r.Serve()}).Refresh(context.Background()); !errors.Is(err, release.ErrUntrusted) {
		t.Fatalf("no root: %v", err)
	}
}

// TestServedFilesReadable: every file a web server serves (metadata/,
// targets/) is readable by all, whatever the umask: the server runs as
// another user than whoever publishes.
func TestServedFilesReadable(t *testing.T) {
	r := tuftest.New(t, nil)
	r.Add(release.Custom{App: "web", Version: "1.0.0", OS: "linux", Arch: "amd64"}, "app.tar.gz", []byte("one"))
	if err := r.Repo.Timestamp(r.Timestamp); err != nil {
		t.Fatal(err)
	}
	n := 0
	for p, v := range tuftest.Files(t, r.Repo.Dir) {
		if strings.HasSuffix(p, "/") || !(strings.HasPrefix(p, "metadata/") || strings.HasPrefix(p, "targets/")) {
			continue
		}
		n++
		if mode, _, _ := strings.Cut(v, " "); mode != "-rw-r--r--" {
			t.Errorf("%s: mode %s", p, mode)
		}
	}
	if n < 7 {
		t.Fatalf("only %d served files", n)
	}
}

// TestWritersExclude: while another command holds the repository (its
// directory's flock), a write waits, then gives up changing nothing; the
// timer's timestamp cannot interleave with a publish.
func TestWritersExclude(t *testing.T) {
	r := tuftest.New(t, nil)
	f, err := os.Open(r.Repo.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	r.Repo.LockWait = 100 * time.Millisecond
	before := tuftest.Files(t, r.Repo.Dir)
	if err := r.Repo.Timestamp(r.Timestamp); !errors.Is(err, release.ErrLocked) {
		t.Fatalf("timestamp while locked: %v", err)
	}
	if _, err := r.Repo.Renew(metadata.TARGETS); !errors.Is(err, release.ErrLocked) {
		t.Fatalf("renew while locked: %v", err)
	}
	unchanged(t, "writes while locked", r.Repo.Dir, before)
	if err := unix.Flock(int(f.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := r.Repo.Timestamp(r.Timestamp); err != nil {
		t.Fatal(err)
	}
	// Reads take no lock.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Repo.Status(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Repo.Releases(); err != nil {
		t.Fatal(err)
	}
}

// TestTimestampKeyRotation: the online key is replaced (docs/release-repo.md
// "Key custody"); a client with cached metadata follows, and the old key
// can no longer re-sign the timestamp.
func TestTimestampKeyRotation(t *testing.T) {
	r := tuftest.New(t, nil)
	r.Add(release.Custom{App: "web", Version: "1.0.0", OS: "linux", Arch: "amd64"}, "app.tar.gz", []byte("one"))
	c := r.Client(nil)
	ctx := context.Background()
	if _, err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	old, ts2 := r.Timestamp, r.Key("timestamp-2")
	if _, err := r.Repo.RotateKey(release.KeyChange{Role: metadata.TIMESTAMP, Add: []*metadata.Key{ts2.Key}, Revoke: []string{old.ID}}); err != nil {
		t.Fatal(err)
	}
	r.Sign(r.Root)
	if err := r.Repo.Publish(r.Snapshot, old); !errors.Is(err, release.ErrKeyNotInRole) {
		t.Fatalf("publish with the revoked timestamp key: %v", err)
	}
	r.Timestamp = ts2
	r.Publish()
	tr, err := c.Refresh(ctx)
	if err != nil || tr.RootVersion != 2 {
		t.Fatalf("%+v %v", tr, err)
	}
	if err := r.Repo.Timestamp(old); !errors.Is(err, release.ErrKeyNotInRole) {
		t.Fatalf("timestamp with the revoked key: %v", err)
	}
	if err := r.Repo.Timestamp(ts2); err != nil {
		t.Fatal(err)
	}
	if tr2, err := c.Refresh(ctx); err != nil || tr2.TimestampVersion != tr.TimestampVersion+1 {
		t.Fatalf("%+v %v", tr2, err)
	}
}
