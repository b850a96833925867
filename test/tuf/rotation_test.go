package tuf

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/theupdateframework/go-tuf/v2/metadata"

	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/release"
)

// TestRotation rotates the root key and then the targets key of a
// repository whose roles have one key each (the simplest setup, where one
// key alone is the threshold), while two agentd processes run: they pick
// each new root up on their next refresh, with no re-enrolment (no
// 'agentd enable', no restart), and install the next release. Then an
// attacker holding a revoked key signs with it what that key could sign
// before its rotation (a new root; targets naming its own release): the
// old root would have accepted it, the hosts refuse it and hold.
//
//	go test ./test/tuf/ -run TestRotation -v
func TestRotation(t *testing.T) {
	repo := tuftest.New(t, nil)
	f := startFleet(t, repo, 2)
	m := f.mirror
	f.trustedRoots(1)
	oldRoot, oldTargets := repo.Root, repo.Targets

	t.Run("root key rotation", func(t *testing.T) {
		f.in(t)
		next := repo.Key("root-2")
		// Root v2 names the new key alone; it is signed by the old key
		// (the threshold of v1, which hosts trust) and the new one (its
		// own threshold).
		rotate(t, repo, metadata.ROOT, oldRoot, next, []*release.Signer{oldRoot, next}, nil)
		repo.Root, repo.Roots = next, []*release.Signer{next}
		v := "1.1.0"
		f.release(v)
		t0 := f.target(v)
		f.waitDone(v)
		f.noHalt(t, t0)
		f.trustedRoots(2)
		f.running()
	})

	t.Run("revoked root key", func(t *testing.T) {
		f.in(t)
		defer m.stop()
		// The attacker holds the revoked root key: it signs root v3
		// giving every role to a key of its own.
		evil := ownKey(t)
		forged := publishedRoot(t, repo)
		if forged.Signed.Version != 2 {
			t.Fatalf("published root v%d, want v2 (run the whole test)", forged.Signed.Version)
		}
		forged.Signed.Version = 3
		for role, r := range forged.Signed.Roles {
			for _, id := range r.KeyIDs {
				if err := forged.Signed.RevokeKey(id, role); err != nil {
					t.Fatal(err)
				}
			}
			if err := forged.Signed.AddKey(evil.meta, role); err != nil {
				t.Fatal(err)
			}
		}
		b := signed(t, forged, stolen(t, oldRoot))
		// Root v1 would have taken it: its key alone was the threshold.
		v1, err := metadata.Root().FromFile(filepath.Join(repo.Repo.Dir, release.MetadataDir, "1.root.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := v1.VerifyDelegate(metadata.ROOT, forged); err != nil {
			t.Fatalf("root v1 refuses what its own key signed: %v", err)
		}
		v := "1.2.0"
		f.release(v)
		m.set(replace(is(metadataPath(metadata.ROOT, 3)), b))
		t0 := f.target(v)
		f.refused(t, t0, v, because(repoCause+": refused", "Verifying root failed"))
		f.trustedRoots(2)
		m.stop()
		f.installs(t, v, t0)
		f.trustedRoots(2)
	})

	t.Run("targets key rotation", func(t *testing.T) {
		f.in(t)
		next := repo.Key("targets-2")
		// Root v3 names the new targets key; the published targets are
		// signed again with it.
		rotate(t, repo, metadata.TARGETS, oldTargets, next, []*release.Signer{repo.Root}, []*release.Signer{next})
		repo.Targets, repo.TargetsKeys = next, []*release.Signer{next}
		v := "1.3.0"
		f.release(v)
		t0 := f.target(v)
		f.waitDone(v)
		f.noHalt(t, t0)
		f.trustedRoots(3)
		f.running()
	})

	t.Run("revoked targets key", func(t *testing.T) {
		f.in(t)
		defer m.stop()
		v := "1.4.0"
		p, _ := f.release(v)
		// The attacker holds the revoked targets key: it signs targets
		// naming its own release file as 1.4.0.
		tg := publishedTargets(t, repo)
		bad := f.hostile(v)
		retarget(t, tg, p, bad)
		forged := signed(t, tg, stolen(t, oldTargets))
		v2, err := metadata.Root().FromFile(filepath.Join(repo.Repo.Dir, release.MetadataDir, "2.root.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := v2.VerifyDelegate(metadata.TARGETS, tg); err != nil {
			t.Fatalf("root v2 refuses what its targets key signed: %v", err)
		}
		if err := publishedRoot(t, repo).VerifyDelegate(metadata.TARGETS, tg); err == nil {
			t.Fatal("the published root accepts targets signed by the revoked key")
		}
		m.set(replace(is(metadataPath(metadata.TARGETS, tg.Signed.Version)), forged), replace(is(targetURLPath(p, bad)), bad))
		t0 := f.target(v)
		f.refused(t, t0, v, because(repoCause+": refused", "Verifying targets failed"))
		m.stop()
		f.installs(t, v, t0)
		f.trustedRoots(3)
	})

	// The hosts kept their roots of trust under their trees: the root
	// file they were given at enable is v1, and nothing rewrote it.
	b, err := os.ReadFile(f.rootFile)
	if err != nil {
		t.Fatal(err)
	}
	if v := rootVersionOf(t, b); v != 1 {
		t.Errorf("the --release-root file is v%d now", v)
	}
}
