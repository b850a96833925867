package tuf

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path"
	"strconv"
	"testing"

	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/theupdateframework/go-tuf/v2/metadata"

	"github.com/fleetwave/fleetwave/internal/tuftest"
	"github.com/fleetwave/fleetwave/pkg/release"
)

// What an attacker forges, with go-tuf's metadata API and the keys it
// holds: a key file it stole (one tuftest wrote), or a key of its own.

// key is a signing key as an attacker holds it.
type key struct {
	signature.Signer
	meta *metadata.Key
	id   string
}

// stolen is a key file the repository's keyholder wrote, in the
// attacker's hands.
func stolen(t *testing.T, s *release.Signer) key {
	t.Helper()
	return key{Signer: s.Sign(), meta: s.Key, id: s.ID}
}

// ownKey is a key the attacker made.
func ownKey(t *testing.T) key {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return newKey(t, priv)
}

func newKey(t *testing.T, priv ed25519.PrivateKey) key {
	t.Helper()
	s, err := signature.LoadSigner(priv, crypto.Hash(0))
	if err != nil {
		t.Fatal(err)
	}
	mk, err := metadata.KeyFromPublicKey(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	id, err := mk.ID()
	if err != nil {
		t.Fatal(err)
	}
	return key{Signer: s, meta: mk, id: id}
}

// signed replaces md's signatures with the keys' and returns its bytes.
func signed[T metadata.Roles](t *testing.T, md *metadata.Metadata[T], keys ...key) []byte {
	t.Helper()
	md.ClearSignatures()
	for _, k := range keys {
		if _, err := md.Sign(k); err != nil {
			t.Fatal(err)
		}
	}
	b, err := md.ToBytes(true)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// published reads the repository's served metadata (what an attacker
// copies from any mirror before editing it).
func publishedTargets(t *testing.T, r *tuftest.Repo) *metadata.Metadata[metadata.TargetsType] {
	t.Helper()
	md, err := r.Repo.PublishedTargets()
	if err != nil || md == nil {
		t.Fatalf("published targets: %v", err)
	}
	return md
}

func publishedTimestamp(t *testing.T, r *tuftest.Repo) *metadata.Metadata[metadata.TimestampType] {
	t.Helper()
	md, err := r.Repo.PublishedTimestamp()
	if err != nil || md == nil {
		t.Fatalf("published timestamp: %v", err)
	}
	return md
}

func publishedRoot(t *testing.T, r *tuftest.Repo) *metadata.Metadata[metadata.RootType] {
	t.Helper()
	md, err := r.Repo.PublishedRoot()
	if err != nil || md == nil {
		t.Fatalf("published root: %v", err)
	}
	return md
}

// metadataPath is where a client fetches role's version v ("" for the
// unversioned timestamp.json).
func metadataPath(role string, v int64) string {
	if v == 0 {
		return "/" + release.MetadataDir + "/" + role + ".json"
	}
	return "/" + release.MetadataDir + "/" + strconv.FormatInt(v, 10) + "." + role + ".json"
}

// targetURLPath is where a client downloads a target named p whose
// content is b (consistent snapshots: <dir>/<sha256>.<file>).
func targetURLPath(p string, b []byte) string {
	sum := sha256.Sum256(b)
	dir, file := path.Split(p)
	return "/" + release.TargetsDir + "/" + dir + hex.EncodeToString(sum[:]) + "." + file
}

// retarget makes targets name content as the file of target path p, as a
// forger edits it (length, sha256; the custom metadata kept).
func retarget(t *testing.T, md *metadata.Metadata[metadata.TargetsType], p string, content []byte) {
	t.Helper()
	tf, ok := md.Signed.Targets[p]
	if !ok {
		t.Fatalf("targets v%d names no %s", md.Signed.Version, p)
	}
	sum := sha256.Sum256(content)
	tf.Length, tf.Hashes = int64(len(content)), metadata.Hashes{"sha256": sum[:]}
}

// targetPath is the repository path of the app's version for this host.
func targetPath(t *testing.T, appName, v string) string {
	t.Helper()
	c := custom(appName, v)
	p, err := release.TargetPath(c.App, c.Version, c.OS, c.Arch, "app.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rotate is an operator's key ceremony (release.Repo.RotateKey, as
// 'fleetctl repo rotate-key' runs it): root version+1 with role's key old
// replaced by new, signed by rootKeys (the previous root's threshold and
// the new one's) and, for the targets role, the targets signed again by
// targetsKeys; then published with a new snapshot and timestamp signed by
// r.Snapshot and r.Timestamp (set them first when rotating those).
func rotate(t *testing.T, r *tuftest.Repo, role string, old, new *release.Signer, rootKeys, targetsKeys []*release.Signer) {
	t.Helper()
	if _, err := r.Repo.RotateKey(release.KeyChange{Role: role, Add: []*metadata.Key{new.Key}, Revoke: []string{old.ID}}); err != nil {
		t.Fatal(err)
	}
	r.Sign(rootKeys...)
	r.Sign(targetsKeys...)
	r.Publish()
}

// rootVersionOf reads a root document's version.
func rootVersionOf(t testing.TB, b []byte) int64 {
	t.Helper()
	var r struct {
		Signed struct {
			Version int64 `json:"version"`
		} `json:"signed"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r.Signed.Version
}
