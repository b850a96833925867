package release

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/renameio/v2"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// A release repository on disk (docs/release-repo.md):
//
//	DIR/metadata/   served: N.root.json (every root, for rotation),
//	                root.json (the newest, to hand to hosts), N.targets.json,
//	                N.snapshot.json, timestamp.json
//	DIR/targets/    served: <app>/<version>/<os>-<arch>/<sha256>.<file>
//	DIR/staged/     not served: root.json and targets.json waiting for
//	                signatures
//
// Consistent snapshots make every publish atomic for a static web server:
// no file a client may be reading is rewritten, except timestamp.json,
// which is written last and by rename.
const (
	MetadataDir = "metadata"
	TargetsDir  = "targets"
	StagedDir   = "staged"
)

// Expiry is how long each role's metadata is valid when signed.
type Expiry struct {
	Root, Targets, Snapshot, Timestamp time.Duration
}

// DefaultExpiry: the offline roles for a year and a quarter, the online
// timestamp for a day (re-signed every few hours by the timer).
var DefaultExpiry = Expiry{Root: 365 * 24 * time.Hour, Targets: 90 * 24 * time.Hour, Snapshot: 90 * 24 * time.Hour, Timestamp: 24 * time.Hour}

// Repo maintains a repository in Dir.
type Repo struct {
	Dir    string
	Expiry Expiry
	// Now is the clock for expiries; nil means time.Now.
	Now func() time.Time
	// LockWait bounds the wait for another command writing the
	// repository (0: DefaultLockWait).
	LockWait time.Duration
}

func (r *Repo) now() time.Time {
	if r.Now != nil {
		return r.Now().UTC()
	}
	return time.Now().UTC()
}

func (r *Repo) expiry() Expiry {
	e := r.Expiry
	d := DefaultExpiry
	if e.Root <= 0 {
		e.Root = d.Root
	}
	if e.Targets <= 0 {
		e.Targets = d.Targets
	}
	if e.Snapshot <= 0 {
		e.Snapshot = d.Snapshot
	}
	if e.Timestamp <= 0 {
		e.Timestamp = d.Timestamp
	}
	return e
}

// RoleKeys are the keys of one role and how many must sign.
type RoleKeys struct {
	Keys      []*metadata.Key
	Threshold int
}

// InitOptions names every role's keys.
type InitOptions struct {
	Root, Targets, Snapshot, Timestamp RoleKeys
}

// Init stages version 1 of root and an empty targets in a new repository.
// Nothing is served until they are signed (Sign) and published (Publish).
func (r *Repo) Init(o InitOptions) error {
	unlock, err := r.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := r.checkNoRepository(); err != nil {
		return err
	}
	root := metadata.Root(r.now().Add(r.expiry().Root))
	root.Signed.ConsistentSnapshot = true
	for _, role := range Roles {
		rk := map[string]RoleKeys{metadata.ROOT: o.Root, metadata.TARGETS: o.Targets, metadata.SNAPSHOT: o.Snapshot, metadata.TIMESTAMP: o.Timestamp}[role]
		if len(rk.Keys) == 0 {
			return fmt.Errorf("%s: no key", role)
		}
		for _, k := range rk.Keys {
			if err := root.Signed.AddKey(k, role); err != nil {
				return fmt.Errorf("%s: %w", role, err)
			}
		}
		// Counted after AddKey, which drops a key given twice: a
		// threshold of 2 over the same key twice is a threshold of 2
		// over one key, which nothing could ever meet.
		n := len(root.Signed.Roles[role].KeyIDs)
		if rk.Threshold < 1 || rk.Threshold > n {
			return fmt.Errorf("%s: threshold %d with %d distinct keys: want 1-%d", role, rk.Threshold, n, n)
		}
		root.Signed.Roles[role].Threshold = rk.Threshold
	}
	if err := checkRoot(root); err != nil {
		return err
	}
	targets := metadata.Targets(r.now().Add(r.expiry().Targets))
	for _, d := range []string{MetadataDir, TargetsDir, StagedDir} {
		if err := os.MkdirAll(filepath.Join(r.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := r.stage(metadata.ROOT, root); err != nil {
		return err
	}
	return r.stage(metadata.TARGETS, targets)
}

// stage writes a role's metadata to staged/.
func (r *Repo) stage(role string, md interface{ ToBytes(bool) ([]byte, error) }) error {
	b, err := md.ToBytes(true)
	if err != nil {
		return err
	}
	return writeServed(filepath.Join(r.Dir, StagedDir, role+".json"), b)
}

func (r *Repo) stagedPath(role string) string { return filepath.Join(r.Dir, StagedDir, role+".json") }

// StagedRoot and StagedTargets read what waits for signatures; nil when
// nothing does.
func (r *Repo) StagedRoot() (*metadata.Metadata[metadata.RootType], error) {
	return loadIfExists(r.stagedPath(metadata.ROOT), metadata.Root())
}

func (r *Repo) StagedTargets() (*metadata.Metadata[metadata.TargetsType], error) {
	return loadIfExists(r.stagedPath(metadata.TARGETS), metadata.Targets())
}

func loadIfExists[T metadata.Roles](name string, into *metadata.Metadata[T]) (*metadata.Metadata[T], error) {
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return into.FromBytes(b)
}

// PublishedRoot is the newest published root (nil before the first).
func (r *Repo) PublishedRoot() (*metadata.Metadata[metadata.RootType], error) {
	return loadIfExists(filepath.Join(r.Dir, MetadataDir, "root.json"), metadata.Root())
}

// PublishedTargets is the newest published targets (nil before the first).
func (r *Repo) PublishedTargets() (*metadata.Metadata[metadata.TargetsType], error) {
	snap, err := r.PublishedSnapshot()
	if err != nil || snap == nil {
		return nil, err
	}
	mf, ok := snap.Signed.Meta["targets.json"]
	if !ok {
		return nil, fmt.Errorf("snapshot v%d names no targets", snap.Signed.Version)
	}
	return loadIfExists(filepath.Join(r.Dir, MetadataDir, strconv.FormatInt(mf.Version, 10)+".targets.json"), metadata.Targets())
}

// PublishedSnapshot is the snapshot the served timestamp names.
func (r *Repo) PublishedSnapshot() (*metadata.Metadata[metadata.SnapshotType], error) {
	ts, err := r.PublishedTimestamp()
	if err != nil || ts == nil {
		return nil, err
	}
	mf, ok := ts.Signed.Meta["snapshot.json"]
	if !ok {
		return nil, fmt.Errorf("timestamp v%d names no snapshot", ts.Signed.Version)
	}
	return loadIfExists(filepath.Join(r.Dir, MetadataDir, strconv.FormatInt(mf.Version, 10)+".snapshot.json"), metadata.Snapshot())
}

// PublishedTimestamp is the served timestamp.
func (r *Repo) PublishedTimestamp() (*metadata.Metadata[metadata.TimestampType], error) {
	return loadIfExists(filepath.Join(r.Dir, MetadataDir, "timestamp.json"), metadata.Timestamp())
}

// trustRoot is the root that decides who may sign targets, snapshot and
// timestamp at the next publish: the staged root when there is one
// (Publish publishes nothing until a staged root is signed enough, so it
// is the root trusted when anything staged is next published), else the
// published one.
//
// The foundation took the staged root only once it was signed enough:
// then a targets key added by a rotation could not sign the staged
// targets until every root signature was in, and a revoked one could.
func (r *Repo) trustRoot() (*metadata.Metadata[metadata.RootType], error) {
	staged, err := r.StagedRoot()
	if err != nil || staged != nil {
		return staged, err
	}
	pub, err := r.PublishedRoot()
	if err != nil {
		return nil, err
	}
	if pub == nil {
		return nil, fmt.Errorf("%w: %s: run 'fleetctl repo init %s'", ErrNoRepository, r.Dir, r.Dir)
	}
	return pub, nil
}

// rootReady says why staged cannot be published yet (nil: it can): it
// must be signed by its own root threshold and, after version 1, by the
// previous root's.
func (r *Repo) rootReady(prev, staged *metadata.Metadata[metadata.RootType]) error {
	if prev != nil {
		if staged.Signed.Version != prev.Signed.Version+1 {
			return fmt.Errorf("staged root is v%d, the published v%d: want v%d", staged.Signed.Version, prev.Signed.Version, prev.Signed.Version+1)
		}
		if err := prev.VerifyDelegate(metadata.ROOT, staged); err != nil {
			return fmt.Errorf("%w: root v%d needs %d signatures of root v%d's root keys, it has %d: sign it with 'fleetctl repo sign %s --key ROOT-KEY' (%v)", ErrShortOfSignatures,
				staged.Signed.Version, prev.Signed.Roles[metadata.ROOT].Threshold, prev.Signed.Version, len(validSigners(prev, metadata.ROOT, staged)), r.Dir, err)
		}
	}
	if err := staged.VerifyDelegate(metadata.ROOT, staged); err != nil {
		return fmt.Errorf("%w: root v%d needs %d signatures of its own root keys, it has %d: sign it with 'fleetctl repo sign %s --key ROOT-KEY' (%v)", ErrShortOfSignatures,
			staged.Signed.Version, staged.Signed.Roles[metadata.ROOT].Threshold, len(validSigners(staged, metadata.ROOT, staged)), r.Dir, err)
	}
	return nil
}

// AddTarget copies file into the repository as app's version for
// goos/goarch and stages a targets version naming it, with c's flags (and
// app, version, os and arch from the arguments). Adding a target that is
// there already with the same bytes changes only its flags.
func (r *Repo) AddTarget(file string, c Custom) (string, error) {
	unlock, err := r.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	name := filepath.Base(file)
	tp, err := TargetPath(c.App, c.Version, c.OS, c.Arch, name)
	if err != nil {
		return "", err
	}
	if err := c.check(); err != nil {
		return "", err
	}
	if err := CheckNotes(c.Notes); err != nil {
		return "", err
	}
	if _, err := r.trustRoot(); err != nil {
		return "", err
	}
	tf, err := r.copyTarget(file, tp)
	if err != nil {
		return "", err
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	rm := json.RawMessage(raw)
	tf.Custom = &rm
	t, err := r.targetsToEdit()
	if err != nil {
		return "", err
	}
	for p := range t.Signed.Targets {
		if old, err := ParseTargetPath(p); err == nil && p != tp && old.App == c.App && old.Version == c.Version && old.OS == c.OS && old.Arch == c.Arch {
			delete(t.Signed.Targets, p) // one file per release and platform
		}
	}
	t.Signed.Targets[tp] = tf
	return tp, r.stage(metadata.TARGETS, t)
}

// targetsToEdit is the staged targets, or a new version of the published
// one; either way without signatures (an edit voids them) and with a
// fresh expiry.
func (r *Repo) targetsToEdit() (*metadata.Metadata[metadata.TargetsType], error) {
	t, err := r.StagedTargets()
	if err != nil {
		return nil, err
	}
	if t == nil {
		if t, err = r.PublishedTargets(); err != nil {
			return nil, err
		}
		if t == nil {
			return nil, fmt.Errorf("%w: %s: run 'fleetctl repo init %s'", ErrNoRepository, r.Dir, r.Dir)
		}
		t.Signed.Version++
	}
	t.ClearSignatures()
	t.Signed.Expires = r.now().Add(r.expiry().Targets)
	return t, nil
}

// copyTarget copies file to targets/<dir>/<sha256>.<name> and returns its
// length and hash.
func (r *Repo) copyTarget(file, tp string) (*metadata.TargetFiles, error) {
	in, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	dir, name := path.Split(tp)
	dst := filepath.Join(r.Dir, TargetsDir, filepath.FromSlash(dir))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dst, ".add-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), in)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("copy %s: %w", file, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("%s is empty", file)
	}
	sum := h.Sum(nil)
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dst, hex.EncodeToString(sum)+"."+name)); err != nil {
		return nil, err
	}
	return &metadata.TargetFiles{Length: n, Hashes: metadata.Hashes{"sha256": sum}}, nil
}

// Sign adds s's signature to every staged document s may sign: root (as a
// key of the staged root or of the published one) and targets (as a key of
// the root that will be trusted when it is published). It returns the
// roles signed; signing nothing is an error.
func (r *Repo) Sign(s *Signer) ([]string, error) {
	unlock, err := r.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	var signed []string
	pub, err := r.PublishedRoot()
	if err != nil {
		return nil, err
	}
	root, err := r.StagedRoot()
	if err != nil {
		return nil, err
	}
	t, err := r.StagedTargets()
	if err != nil {
		return nil, err
	}
	signRoot := root != nil && (hasKey(root, metadata.ROOT, s.ID) || (pub != nil && hasKey(pub, metadata.ROOT, s.ID)))
	signTargets := false
	if t != nil {
		trust, err := r.trustRoot()
		if err != nil {
			return nil, err
		}
		signTargets = hasKey(trust, metadata.TARGETS, s.ID)
	}
	if signRoot {
		if err := signOnce(root, s); err != nil {
			return nil, err
		}
		if err := r.stage(metadata.ROOT, root); err != nil {
			return nil, err
		}
		signed = append(signed, metadata.ROOT)
	}
	if signTargets {
		if err := signOnce(t, s); err != nil {
			return nil, err
		}
		if err := r.stage(metadata.TARGETS, t); err != nil {
			return nil, err
		}
		signed = append(signed, metadata.TARGETS)
	}
	if len(signed) == 0 {
		return nil, fmt.Errorf("%w: key %s (%s) may sign nothing staged in %s: %s", ErrKeyNotInRole, ShortID(s.ID), s.Path, r.Dir, r.whatWaits())
	}
	return signed, nil
}

func hasKey(root *metadata.Metadata[metadata.RootType], role, id string) bool {
	rl, ok := root.Signed.Roles[role]
	if !ok {
		return false
	}
	for _, k := range rl.KeyIDs {
		if k == id {
			return true
		}
	}
	return false
}

// signOnce signs md with s, replacing an earlier signature of s's key.
func signOnce[T metadata.Roles](md *metadata.Metadata[T], s *Signer) error {
	kept := md.Signatures[:0]
	for _, sig := range md.Signatures {
		if sig.KeyID != s.ID {
			kept = append(kept, sig)
		}
	}
	md.Signatures = kept
	_, err := md.Sign(s.s)
	return err
}

// Publish serves what is staged and signed enough: a new root, a new
// targets, then a snapshot (signed by snapshot) naming the targets and a
// timestamp (signed by timestamp) naming the snapshot. A staged document
// short of signatures is an error naming what it lacks, and nothing is
// published.
func (r *Repo) Publish(snapshot, timestamp *Signer) error {
	unlock, err := r.lock()
	if err != nil {
		return err
	}
	defer unlock()
	p, err := r.publishable()
	if err != nil {
		return err
	}
	root, trust, t := p.root, p.trust, p.targets
	for _, c := range []struct {
		role string
		s    *Signer
	}{{metadata.SNAPSHOT, snapshot}, {metadata.TIMESTAMP, timestamp}} {
		if c.s == nil {
			return fmt.Errorf("%w: publishing needs a %s key of root v%d", ErrKeyNotInRole, c.role, trust.Signed.Version)
		}
		if !hasKey(trust, c.role, c.s.ID) {
			return fmt.Errorf("%w: key %s (%s) is not a %s key of root v%d", ErrKeyNotInRole, ShortID(c.s.ID), c.s.Path, c.role, trust.Signed.Version)
		}
	}
	md := filepath.Join(r.Dir, MetadataDir)
	if root != nil {
		b, err := root.ToBytes(true)
		if err != nil {
			return err
		}
		if err := writeServed(filepath.Join(md, strconv.FormatInt(root.Signed.Version, 10)+".root.json"), b); err != nil {
			return err
		}
		if err := writeServed(filepath.Join(md, "root.json"), b); err != nil {
			return err
		}
	}
	tb, err := t.ToBytes(true)
	if err != nil {
		return err
	}
	if err := writeServed(filepath.Join(md, strconv.FormatInt(t.Signed.Version, 10)+".targets.json"), tb); err != nil {
		return err
	}
	snapVersion := int64(1)
	if old, err := r.PublishedSnapshot(); err != nil {
		return err
	} else if old != nil {
		snapVersion = old.Signed.Version + 1
	}
	snap := metadata.Snapshot(r.now().Add(r.expiry().Snapshot))
	snap.Signed.Version = snapVersion
	snap.Signed.Meta["targets.json"] = metadata.MetaFile(t.Signed.Version)
	if _, err := snap.Sign(snapshot.s); err != nil {
		return err
	}
	sb, err := snap.ToBytes(true)
	if err != nil {
		return err
	}
	if err := writeServed(filepath.Join(md, strconv.FormatInt(snapVersion, 10)+".snapshot.json"), sb); err != nil {
		return err
	}
	if err := r.writeTimestamp(snapVersion, timestamp); err != nil {
		return err
	}
	for _, role := range []string{metadata.ROOT, metadata.TARGETS} {
		if err := os.Remove(r.stagedPath(role)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// publishable is what Publish would serve: the staged root (nil when none
// is), the root clients will trust, and the targets the snapshot names
// (staged, else published), each checked against its signers; the error
// says why Publish would refuse.
type publishable struct {
	root, trust *metadata.Metadata[metadata.RootType]
	targets     *metadata.Metadata[metadata.TargetsType]
}

func (r *Repo) publishable() (publishable, error) {
	pub, err := r.PublishedRoot()
	if err != nil {
		return publishable{}, err
	}
	root, err := r.StagedRoot()
	if err != nil {
		return publishable{}, err
	}
	if root != nil {
		if err := r.rootReady(pub, root); err != nil {
			return publishable{}, err
		}
	}
	trust, err := r.trustRoot()
	if err != nil {
		return publishable{}, err
	}
	t, err := r.StagedTargets()
	if err != nil {
		return publishable{}, err
	}
	if t != nil {
		if err := trust.VerifyDelegate(metadata.TARGETS, t); err != nil {
			return publishable{}, fmt.Errorf("%w: targets v%d needs %d signatures of root v%d's targets keys, it has %d valid ones (%v): sign it with 'fleetctl repo sign %s --key TARGETS-KEY'",
				ErrShortOfSignatures, t.Signed.Version, trust.Signed.Roles[metadata.TARGETS].Threshold, trust.Signed.Version, len(validSigners(trust, metadata.TARGETS, t)), err, r.Dir)
		}
	} else if t, err = r.PublishedTargets(); err != nil {
		return publishable{}, err
	} else if t == nil {
		return publishable{}, fmt.Errorf("%w: %s: no targets staged or published", ErrNoRepository, r.Dir)
	} else if err := trust.VerifyDelegate(metadata.TARGETS, t); err != nil {
		// A root that changes the targets keys stages a targets version
		// (RotateKey); this catches a published targets the new root
		// would make every client refuse.
		return publishable{}, fmt.Errorf("%w: the published targets v%d is not signed by root v%d's targets keys (%v): stage one with 'fleetctl repo renew %s --role targets' and sign it",
			ErrShortOfSignatures, t.Signed.Version, trust.Signed.Version, err, r.Dir)
	}
	return publishable{root: root, trust: trust, targets: t}, nil
}

// Timestamp re-signs the timestamp with a fresh expiry, naming the same
// snapshot: what a timer runs so that hosts can tell a current repository
// from a frozen one.
func (r *Repo) Timestamp(s *Signer) error {
	unlock, err := r.lock()
	if err != nil {
		return err
	}
	defer unlock()
	trust, err := r.PublishedRoot()
	if err != nil {
		return err
	}
	if trust == nil {
		return fmt.Errorf("%s has published nothing yet", r.Dir)
	}
	if !hasKey(trust, metadata.TIMESTAMP, s.ID) {
		return fmt.Errorf("%w: key %s (%s) is not a timestamp key of root v%d", ErrKeyNotInRole, ShortID(s.ID), s.Path, trust.Signed.Version)
	}
	snap, err := r.PublishedSnapshot()
	if err != nil {
		return err
	}
	if snap == nil {
		return fmt.Errorf("%w: %s serves no snapshot: run 'fleetctl repo publish %s'", ErrNoRepository, r.Dir, r.Dir)
	}
	// A fresh timestamp over metadata clients refuse anyway would only
	// hide the outage from whoever watches this job: fail instead.
	now := r.now()
	if snap.Signed.IsExpired(now) {
		return fmt.Errorf("%w: snapshot v%d expired at %s: re-sign it with 'fleetctl repo publish %s --snapshot-key S --timestamp-key T'", ErrExpired, snap.Signed.Version, snap.Signed.Expires.Format(time.RFC3339), r.Dir)
	}
	if t, err := r.PublishedTargets(); err == nil && t != nil && t.Signed.IsExpired(now) {
		return fmt.Errorf("%w: targets v%d expired at %s: 'fleetctl repo renew %s --role targets', sign and publish", ErrExpired, t.Signed.Version, t.Signed.Expires.Format(time.RFC3339), r.Dir)
	}
	if trust.Signed.IsExpired(now) {
		return fmt.Errorf("%w: root v%d expired at %s: 'fleetctl repo renew %s --role root', sign and publish", ErrExpired, trust.Signed.Version, trust.Signed.Expires.Format(time.RFC3339), r.Dir)
	}
	return r.writeTimestamp(snap.Signed.Version, s)
}

func (r *Repo) writeTimestamp(snapVersion int64, s *Signer) error {
	v := int64(1)
	if old, err := r.PublishedTimestamp(); err != nil {
		return err
	} else if old != nil {
		v = old.Signed.Version + 1
	}
	ts := metadata.Timestamp(r.now().Add(r.expiry().Timestamp))
	ts.Signed.Version = v
	ts.Signed.Meta["snapshot.json"] = metadata.MetaFile(snapVersion)
	if _, err := ts.Sign(s.s); err != nil {
		return err
	}
	b, err := ts.ToBytes(true)
	if err != nil {
		return err
	}
	return writeServed(filepath.Join(r.Dir, MetadataDir, "timestamp.json"), b)
}

// writeServed writes one of the repository's files: through a synced
// temporary file and a rename (renameio), like writeFileAtomic, but readable by all
// (0644): a web server serves it under another user. (The foundation
// wrote them 0600, as a client's trusted metadata is, and a web server
// running as its own user answered 403 for every metadata file.)
func writeServed(name string, b []byte) error {
	pf, err := renameio.NewPendingFile(name, renameio.WithStaticPermissions(0o644))
	if err == nil {
		defer pf.Cleanup()
		if _, err = pf.Write(b); err == nil {
			err = pf.CloseAtomicallyReplace()
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
