package tuf

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/theupdateframework/go-tuf/v2/metadata"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/release"
	"github.com/fleetwave/fleetwave/test/releases"
)

// repoCause starts every refusal the repository or its mirror causes.
const repoCause = "release repository"

// TestAttacks runs every attack class of TUF's threat model that applies
// to a fleet installing from a release repository (theupdateframework.io
// "Security": arbitrary installation, endless data, fast-forward,
// indefinite freeze, malicious mirrors, mix-and-match, rollback, slow
// retrieval, wrong software installation, and keys compromised below a
// threshold) against two real agentd processes of one group, a real
// controller, and a repository set up as in production: root and targets
// 2-of-3, one snapshot and one (online) timestamp key. Each subtest
// publishes the genuine release, sets the plan's target to it while the
// mirror attacks, checks the refusal (fleet.refused: every host reports an
// infrastructure failure whose cause names the repository, keeps its
// version and files, and the group holds without halting or counting a
// failure), then ends the attack and sees the genuine release installed.
//
//	go test ./test/tuf/ -run TestAttacks -v
//	go test ./test/tuf/ -run 'TestAttacks/rollback' -v   # one class
func TestAttacks(t *testing.T) {
	repo := tuftest.NewWith(t, tuftest.Options{RootKeys: 3, RootThreshold: 2, TargetsKeys: 3, TargetsThreshold: 2})
	f := startFleet(t, repo, 2)
	m := f.mirror

	// Arbitrary installation: the mirror serves the attacker's release in
	// place of the genuine file, first of the same length (the sha256
	// refuses it), then of another (the length refuses it, before a byte
	// more than the verified length is read).
	t.Run("arbitrary installation", func(t *testing.T) {
		f.in(t)
		defer m.stop()
		v := "1.1.0"
		p, genuine := f.release(v)
		bad := f.hostile(v)
		m.set(replace(is(targetURLPath(p, genuine)), fit(bad, len(genuine))))
		t0 := f.target(v)
		f.refused(t, t0, v, because(repoCause+": wrong file", "sha256"))
		m.set(replace(is(targetURLPath(p, genuine)), fit(bad, len(genuine)+1000)))
		f.refused(t, t0, v, because(repoCause+": wrong file", "Content-Length"))
		m.stop()
		f.installs(t, v, t0)
	})

	// Endless data: the mirror follows the genuine timestamp, then the
	// genuine release file, with bytes that never end. The client stops
	// reading at the bound (a timestamp's 16 KiB, the target's verified
	// length) and hangs up.
	t.Run("endless data", func(t *testing.T) {
		f.in(t)
		defer m.stop()
		v := "1.2.0"
		p, genuine := f.release(v)
		var meta, file stream
		m.set(m.endless(is(metadataPath(metadata.TIMESTAMP, 0)), &meta))
		t0 := f.target(v)
		f.refused(t, t0, v, because(repoCause+": refused", "timestamp.json", "bytes expected"))
		hungUp(t, &meta, 64<<20)
		m.set(m.endless(is(targetURLPath(p, genuine)), &file))
		f.refused(t, t0, v, because(repoCause+": wrong file"))
		hungUp(t, &file, 64<<20)
		m.stop()
		f.installs(t, v, t0)
	})

	// Rollback: the mirror serves the repository as it was two releases
	// ago (genuine, signed, unexpired metadata) to hosts that have
	// verified newer: the timestamp's version went back.
	t.Run("rollback", func(t *testing.T) {
		f.in(t)
		defer m.stop()
		old := filepath.Join(t.TempDir(), "old")
		copyDir(t, repo.Repo.Dir, old)
		f.release("1.3.0")
		f.target("1.3.0")
		f.waitDone("1.3.0")
		v := "1.3.1"
		f.release(v)
		m.set(serveDir(old, "/"+release.MetadataDir+"/", "/"+release.TargetsDir+"/"))
		t0 := f.target(v)
		f.refused(t, t0, v, because(repoCause+": refused", "timestamp version"))
		m.stop()
		f.installs(t, v, t0)
	})

	// Fast-forward: timestamp metadata with a version far ahead. Signed by
	// a key of the attacker's own, it is refused outright. Signed with
	// the leaked timestamp key (the one online key), it verifies, and every
	// later genuine timestamp looks like a rollback: the hosts hold on
	// every release until the timestamp key is rotated (a new root), after
	// which they drop the fast-forwarded timestamp and go on.
	t.Run("fast-forward", func(t *testing.T) {
		f.in(t)
		defer m.stop()
		v := "1.4.0"
		f.release(v)
		ts := publishedTimestamp(t, repo)
		ts.Signed.Version += 1_000_000
		m.set(replace(is(metadataPath(metadata.TIMESTAMP, 0)), signed(t, ts, ownKey(t))))
		t0 := f.target(v)
		f.refused(t, t0, v, because(repoCause+": refused", "Verifying timestamp failed"))
		// With the leaked key, the fast-forward lands (naming the genuine
		// snapshot: nothing else changes) and 1.4.0 installs.
		m.set(replace(is(metadataPath(metadata.TIMESTAMP, 0)), signed(t, ts, stolen(t, repo.Timestamp))))
		f.installs(t, v, t0)
		m.stop()
		v = "1.4.1"
		f.release(v)
		t0 = f.target(v)
		f.refused(t, t0, v, because(repoCause+": refused", "new timestamp version"))
		// Recovery: the root keyholders (2 of 3) replace the timestamp key.
		leaked, next := repo.Timestamp, repo.Key("timestamp-2")
		repo.Timestamp = next
		rotate(t, repo, metadata.TIMESTAMP, leaked, next, repo.Roots[:2], nil)
		f.installs(t, v, t0)
		f.trustedRoots(2)
	})

	// Indefinite freeze: the mirror serves the repository as it recorded
	// it a day ago (genuine, signed; its timestamp, valid for 24h, expired
	// since) to hide the release published since. Expired metadata is
	// refused as expired, not read as "no such release".
	t.Run("indefinite freeze", func(t *testing.T) {
		f.in(t)
		defer m.stop()
		repo.Repo.Now = func() time.Time { return time.Now().Add(-25 * time.Hour) }
		if err := repo.Repo.Timestamp(repo.Timestamp); err != nil {
			t.Fatal(err)
		}
		repo.Repo.Now = nil
		frozen := filepath.Join(t.TempDir(), "frozen")
		copyDir(t, repo.Repo.Dir, frozen)
		v := "1.5.0"
		f.release(v)
		m.set(serveDir(frozen, "/"+release.MetadataDir+"/"))
		t0 := f.target(v)
		f.refused(t, t0, v, because(repoCause+": expired", "timestamp.json is expired"))
		m.stop()
		f.installs(t, v, t0)
	})

	// Malicious mirror: the mirror edits the targets metadata to name its
	// own release file (length and sha256) and serves that file; it
	// cannot re-sign, so the signatures no longer match.
	t.Run("malicious mirror", func(t *testing.T) {
		f.in(t)
		defer m.stop()
		v := "1.6.0"
		p, _ := f.release(v)
		tg := publishedTargets(t, repo)
		bad := f.hostile(v)
		retarget(t, tg, p, bad)
		b, err := tg.ToBytes(true)
		if err != nil {
			t.Fatal(err)
		}
		m.set(replace(is(metadataPath(metadata.TARGETS, tg.Signed.Version)), b), replace(is(targetURLPath(p, bad)), bad))
		t0 := f.target(v)
		f.refused(t, t0, v, because(repoCause+": refused", "Verifying targets failed"))
		m.stop()
		f.installs(t, v, t0)
	})

	// Mix-and-match: 1.7.0 was published with a build that does not start,
	// then withdrawn and published again fixed. The mirror serves the
	// newest timestamp and snapshot with the targets metadata of the
	// withdrawn build (genuine, signed by the threshold): a combination
	// the repository never published. Installed, it would fail on every
	// host and halt the group; it is refused, and the group holds.
	t.Run("mix-and-match", func(t *testing.T) {
		f.in(t)
		defer m.stop()
		v := "1.7.0"
		broken, err := releases.Tarball(v, releases.Crash)
		if err != nil {
			t.Fatal(err)
		}
		repo.Add(custom(app, v), releases.File, broken)
		withdrawn, err := os.ReadFile(filepath.Join(repo.Repo.Dir, release.MetadataDir, fmt.Sprintf("%d.targets.json", publishedTargets(t, repo).Signed.Version)))
		if err != nil {
			t.Fatal(err)
		}
		f.release(v)
		m.set(replace(is(metadataPath(metadata.TARGETS, publishedTargets(t, repo).Signed.Version)), withdrawn))
		t0 := f.target(v)
		f.refused(t, t0, v, because(repoCause+": refused", "expected targets version"))
		m.stop()
		f.installs(t, v, t0)
	})

	// Slow retrieval: the mirror sends the timestamp, then the release
	// file, a byte at a time: never silent, far too slow to finish. Each
	// attempt gives up at the stall timeout (--download-stall-timeout 2s,
	// which bounds each metadata request too) and is retried; no host
	// waits on the mirror for good.
	t.Run("slow retrieval", func(t *testing.T) {
		f.in(t)
		defer m.stop()
		v := "1.8.0"
		p, genuine := f.release(v)
		var meta, file stream
		m.set(m.trickle(is(metadataPath(metadata.TIMESTAMP, 0)), 100*time.Millisecond, &meta))
		t0 := f.target(v)
		f.refused(t, t0, v, because(repoCause+": unavailable", "deadline"))
		hungUp(t, &meta, 1<<10)
		m.set(m.trickle(is(targetURLPath(p, genuine)), 50*time.Millisecond, &file))
		f.refused(t, t0, v, refusal{causes: []string{repoCause, "download stalled"}, words: []string{targetURLPath(p, genuine)}})
		hungUp(t, &file, int64(len(genuine)))
		m.stop()
		f.installs(t, v, t0)
	})

	// Wrong software installation: the repository holds 1.9.0 of another
	// app and of this app for another platform only: no host installs
	// either. Once it holds this app's 1.9.0, the mirror serves the other
	// app's (genuine, signed) file in its place: refused too.
	t.Run("wrong software installation", func(t *testing.T) {
		f.in(t)
		defer m.stop()
		v := "1.9.0"
		other, err := releases.TarballScript(v, "#!/bin/sh\necho 'other 1.9.0 running'\nexec sleep 1000000\n")
		if err != nil {
			t.Fatal(err)
		}
		repo.Add(custom("other", v), releases.File, other)
		arch := "arm64"
		if runtime.GOARCH == arch {
			arch = "amd64"
		}
		otherArch, err := releases.TarballScript(v, "#!/bin/sh\necho 'app 1.9.0 for "+arch+"'\nexec sleep 1000000\n")
		if err != nil {
			t.Fatal(err)
		}
		repo.Add(release.Custom{App: app, Version: v, OS: runtime.GOOS, Arch: arch}, releases.File, otherArch)
		t0 := f.target(v)
		f.refused(t, t0, v, because(repoCause+": no such release"))
		p, genuine := f.release(v)
		m.set(replace(is(targetURLPath(p, genuine)), other))
		f.refused(t, t0, v, because(repoCause+": wrong file"))
		m.stop()
		f.installs(t, v, t0)
	})

	// A compromised key below the threshold: the attacker holds one of the
	// three targets keys (2 must sign) and signs targets naming its own
	// release file (the same forgery with a second key would verify: what
	// refuses it is the threshold); then one of the three root keys, and
	// signs a root handing the targets role to a key of its own.
	t.Run("compromised key below threshold", func(t *testing.T) {
		f.in(t)
		defer m.stop()
		v := "1.10.0"
		p, _ := f.release(v)
		tg := publishedTargets(t, repo)
		bad := f.hostile(v)
		retarget(t, tg, p, bad)
		forged := signed(t, tg, stolen(t, repo.TargetsKeys[2]))
		root := publishedRoot(t, repo)
		if err := root.VerifyDelegate(metadata.TARGETS, tg); err == nil {
			t.Fatal("targets signed by 1 of 3 keys verify against a 2-of-3 role")
		}
		if _, err := tg.Sign(stolen(t, repo.TargetsKeys[0])); err != nil {
			t.Fatal(err)
		}
		if err := root.VerifyDelegate(metadata.TARGETS, tg); err != nil {
			t.Fatalf("the same forgery signed by 2 of 3 keys: %v (the threshold is not what refuses it)", err)
		}
		m.set(replace(is(metadataPath(metadata.TARGETS, tg.Signed.Version)), forged), replace(is(targetURLPath(p, bad)), bad))
		t0 := f.target(v)
		f.refused(t, t0, v, because(repoCause+": refused", "not enough signatures, got 1, want 2"))
		// One of the three root keys signs the next root, making its own
		// key the targets key: no host follows it.
		evil := ownKey(t)
		next := publishedRoot(t, repo)
		trusted := next.Signed.Version
		next.Signed.Version++
		for _, id := range next.Signed.Roles[metadata.TARGETS].KeyIDs {
			if err := next.Signed.RevokeKey(id, metadata.TARGETS); err != nil {
				t.Fatal(err)
			}
		}
		if err := next.Signed.AddKey(evil.meta, metadata.TARGETS); err != nil {
			t.Fatal(err)
		}
		next.Signed.Roles[metadata.TARGETS].Threshold = 1
		m.set(replace(is(metadataPath(metadata.ROOT, next.Signed.Version)), signed(t, next, stolen(t, repo.Roots[2]))))
		f.refused(t, t0, v, because(repoCause+": refused", "Verifying root failed, not enough signatures, got 1, want 2"))
		f.trustedRoots(trusted)
		m.stop()
		f.installs(t, v, t0)
		f.trustedRoots(trusted)
	})
}

// fit is b cut or padded with zeros to n bytes.
func fit(b []byte, n int) []byte {
	out := make([]byte, n)
	copy(out, b)
	return out
}

// hungUp waits until every request of an endless or trickling attack has
// ended (the client hung up: nobody waits on it for good) and checks the
// attack could not make a client read more than most bytes in all.
func hungUp(t *testing.T, s *stream, most int64) {
	t.Helper()
	natstest.Eventually(t, 30*time.Second, func() error {
		if n, e := s.requests.Load(), s.ended.Load(); n == 0 || e < n {
			return fmt.Errorf("%d requests, %d ended", n, e)
		}
		return nil
	})
	if b := s.bytes.Load(); b > most*s.requests.Load() {
		t.Errorf("the mirror got %d bytes out in %d requests (more than %d each)", b, s.requests.Load(), most)
	}
	t.Logf("%d requests, %d bytes served, every one hung up on", s.requests.Load(), s.bytes.Load())
}
