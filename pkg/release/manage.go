package release

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/fleetwave/fleetwave/pkg/rollout"
	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// Roles are TUF's four top-level roles, in the order they are shown.
var Roles = []string{metadata.ROOT, metadata.TARGETS, metadata.SNAPSHOT, metadata.TIMESTAMP}

func knownRole(role string) bool { return slices.Contains(Roles, role) }

// checkRoot refuses a root whose timestamp key also holds another role:
// the timestamp key is the one key kept online (on the machine the timer
// runs on), and a stolen online key must buy no more than freshness.
func checkRoot(root *metadata.Metadata[metadata.RootType]) error {
	ts := root.Signed.Roles[metadata.TIMESTAMP]
	if ts == nil {
		return fmt.Errorf("%w: root names no timestamp role", ErrBadKeyChange)
	}
	for _, id := range ts.KeyIDs {
		for _, role := range Roles[:3] {
			if hasKey(root, role, id) {
				return fmt.Errorf("%w: key %s is both a timestamp and a %s key: the timestamp key is kept online, so it must be a key of its own", ErrBadKeyChange, ShortID(id), role)
			}
		}
	}
	return nil
}

// checkNoRepository refuses a directory that already holds a repository
// (published or staged).
func (r *Repo) checkNoRepository() error {
	for _, d := range []string{MetadataDir, StagedDir} {
		if _, err := os.Stat(filepath.Join(r.Dir, d)); err == nil {
			return fmt.Errorf("%s already holds a repository (%s/ exists): nothing done", r.Dir, d)
		}
	}
	return nil
}

// validSigners are the keys of root's role whose signature on md
// verifies (go-tuf checks each, as a role of that one key). It is what a
// person asks of a staged document: who has signed, who is still missing.
func validSigners[T metadata.Roles](root *metadata.Metadata[metadata.RootType], role string, md *metadata.Metadata[T]) []string {
	rl := root.Signed.Roles[role]
	if rl == nil {
		return nil
	}
	var out []string
	for _, id := range rl.KeyIDs {
		if !slices.ContainsFunc(md.Signatures, func(s metadata.Signature) bool { return s.KeyID == id }) {
			continue
		}
		one := metadata.Root()
		one.Signed.Keys = map[string]*metadata.Key{id: root.Signed.Keys[id]}
		one.Signed.Roles[role] = &metadata.Role{KeyIDs: []string{id}, Threshold: 1}
		if one.VerifyDelegate(role, md) == nil {
			out = append(out, id)
		}
	}
	return out
}

// whatWaits is a sentence on what is staged, for errors.
func (r *Repo) whatWaits() string {
	var staged []string
	if root, err := r.StagedRoot(); err == nil && root != nil {
		staged = append(staged, fmt.Sprintf("root v%d", root.Signed.Version))
	}
	if t, err := r.StagedTargets(); err == nil && t != nil {
		staged = append(staged, fmt.Sprintf("targets v%d", t.Signed.Version))
	}
	if len(staged) == 0 {
		return "nothing is staged ('fleetctl repo status " + r.Dir + "')"
	}
	return "staged: " + strings.Join(staged, ", ") + " ('fleetctl repo status " + r.Dir + "' says which keys may sign)"
}

// Signable lists the staged roles s may sign (Sign would sign them).
func (r *Repo) Signable(s *Signer) ([]string, error) {
	var out []string
	pub, err := r.PublishedRoot()
	if err != nil {
		return nil, err
	}
	root, err := r.StagedRoot()
	if err != nil {
		return nil, err
	}
	if root != nil && (hasKey(root, metadata.ROOT, s.ID) || (pub != nil && hasKey(pub, metadata.ROOT, s.ID))) {
		out = append(out, metadata.ROOT)
	}
	t, err := r.StagedTargets()
	if err != nil {
		return nil, err
	}
	if t != nil {
		trust, err := r.trustRoot()
		if err != nil {
			return nil, err
		}
		if hasKey(trust, metadata.TARGETS, s.ID) {
			out = append(out, metadata.TARGETS)
		}
	}
	return out, nil
}

// RolesOf lists the roles the key id holds in the root the next publish
// trusts (the staged root, else the published one).
func (r *Repo) RolesOf(id string) ([]string, error) {
	trust, err := r.trustRoot()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, role := range Roles {
		if hasKey(trust, role, id) {
			out = append(out, role)
		}
	}
	return out, nil
}

// Ready says why Publish would refuse what is staged (nil: it would
// publish, given snapshot and timestamp keys). Nothing staged is ready:
// publishing then re-signs the snapshot and timestamp.
func (r *Repo) Ready() error {
	_, err := r.publishable()
	return err
}

// FlagChange is what Flag changes of a release; nil leaves a field as it
// is.
type FlagChange struct {
	Security  *bool
	EndOfLife *bool
	Notes     *string
}

// CheckNotes refuses notes a terminal or a table would misread: control
// characters (a newline too: notes are one line), invisible format
// characters, invalid UTF-8, more than MaxNotes bytes. Printers escape
// what they show all the same (a repository may have been written by
// another tool).
func CheckNotes(notes string) error {
	if len(notes) > MaxNotes {
		return fmt.Errorf("notes: %d bytes, more than %d", len(notes), MaxNotes)
	}
	if !utf8.ValidString(notes) {
		return errors.New("notes: not valid UTF-8")
	}
	for i, c := range notes {
		if !rollout.Printable(c) {
			return fmt.Errorf("notes: character %q at byte %d: want printable text on one line", c, i)
		}
	}
	return nil
}

// Flag sets flags (security, end of life, notes) on every platform of
// app's version and stages a targets version with them (signed by the
// targets keys, then published, like an add). It returns the targets
// changed; none (and nothing staged) when the release has those flags
// already.
func (r *Repo) Flag(app, version string, f FlagChange) ([]string, error) {
	unlock, err := r.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := rollout.ValidateAppName(app); err != nil {
		return nil, err
	}
	if err := rollout.ValidateVersion(version); err != nil {
		return nil, err
	}
	if f.Notes != nil {
		if err := CheckNotes(*f.Notes); err != nil {
			return nil, err
		}
	}
	t, err := r.targetsToEdit()
	if err != nil {
		return nil, err
	}
	var found, changed []string
	for _, p := range sortedKeys(t.Signed.Targets) {
		tf := t.Signed.Targets[p]
		c, err := DecodeCustom(p, tf.Custom)
		if err != nil || c.App != app || c.Version != version {
			continue
		}
		found = append(found, p)
		n := c
		if f.Security != nil {
			n.Security = *f.Security
		}
		if f.EndOfLife != nil {
			n.EndOfLife = *f.EndOfLife
		}
		if f.Notes != nil {
			n.Notes = *f.Notes
		}
		if n == c {
			continue
		}
		raw, err := json.Marshal(n)
		if err != nil {
			return nil, err
		}
		rm := json.RawMessage(raw)
		tf.Custom = &rm
		changed = append(changed, p)
	}
	if len(found) == 0 {
		rs, _ := releasesOf(t.Signed.Targets)
		var vs []string
		for _, rel := range rs {
			if rel.App == app {
				vs = append(vs, rel.Version)
			}
		}
		have := "it has no release of " + app
		if len(vs) > 0 {
			have = "it has " + strings.Join(vs, ", ")
		}
		return nil, fmt.Errorf("%w: %s %s is not in %s (%s)", ErrNoRelease, app, version, r.Dir, have)
	}
	if len(changed) == 0 {
		return nil, nil
	}
	return changed, r.stage(metadata.TARGETS, t)
}

// KeyChange is a change to one role's keys in the root.
type KeyChange struct {
	Role string
	// Add are keys the role gains.
	Add []*metadata.Key
	// Revoke are key ids the role loses: their signatures count for
	// nothing once the new root is published.
	Revoke []string
	// Threshold is the role's new threshold; 0 keeps it.
	Threshold int
}

// RotateKey stages root v+1 (or changes the root already staged) with
// the role's keys and threshold changed, and clears the staged root's
// signatures: the new root must be signed by the threshold of the
// published root's root keys AND of its own (Sign, Publish). A change to
// the targets keys also stages a targets version, so that what clients
// trust under the new root is signed by the new targets keys. It returns
// the staged root.
func (r *Repo) RotateKey(c KeyChange) (*metadata.Metadata[metadata.RootType], error) {
	unlock, err := r.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !knownRole(c.Role) {
		return nil, fmt.Errorf("%w: role %q: want one of %s", ErrBadKeyChange, c.Role, strings.Join(Roles, ", "))
	}
	if len(c.Add) == 0 && len(c.Revoke) == 0 && c.Threshold == 0 {
		return nil, fmt.Errorf("%w: nothing to change: add a key, revoke one or set a threshold", ErrBadKeyChange)
	}
	root, err := r.rootToEdit()
	if err != nil {
		return nil, err
	}
	rl := root.Signed.Roles[c.Role]
	for _, k := range c.Add {
		if hasKey(root, c.Role, KeyID(k)) {
			return nil, fmt.Errorf("%w: key %s is a %s key already", ErrBadKeyChange, ShortID(KeyID(k)), c.Role)
		}
		if err := root.Signed.AddKey(k, c.Role); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadKeyChange, err)
		}
	}
	for _, id := range c.Revoke {
		if !hasKey(root, c.Role, id) {
			return nil, fmt.Errorf("%w: key %s is not a %s key (its keys: %s)", ErrBadKeyChange, ShortID(id), c.Role, shortIDs(rl.KeyIDs))
		}
		if err := root.Signed.RevokeKey(id, c.Role); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadKeyChange, err)
		}
	}
	if c.Threshold != 0 {
		rl.Threshold = c.Threshold
	}
	if len(rl.KeyIDs) == 0 {
		return nil, fmt.Errorf("%w: %s would have no key left: add its new key (--add) in the same change", ErrBadKeyChange, c.Role)
	}
	if n := len(rl.KeyIDs); rl.Threshold < 1 || rl.Threshold > n {
		return nil, fmt.Errorf("%w: %s would have threshold %d with %d keys: want 1-%d (--threshold)", ErrBadKeyChange, c.Role, rl.Threshold, n, max(n, 1))
	}
	if err := checkRoot(root); err != nil {
		return nil, err
	}
	var t *metadata.Metadata[metadata.TargetsType]
	if c.Role == metadata.TARGETS {
		if t, err = r.targetsToEdit(); err != nil {
			return nil, err
		}
	}
	if err := r.stage(metadata.ROOT, root); err != nil {
		return nil, err
	}
	if t != nil {
		if err := r.stage(metadata.TARGETS, t); err != nil {
			return nil, err
		}
	}
	return root, nil
}

// Renew stages a new version of root or targets with nothing changed but
// a fresh expiry, to be signed and published before the old one expires.
// (The snapshot is renewed by publishing with nothing staged, the
// timestamp by Timestamp.)
func (r *Repo) Renew(role string) (int64, error) {
	unlock, err := r.lock()
	if err != nil {
		return 0, err
	}
	defer unlock()
	switch role {
	case metadata.ROOT:
		root, err := r.rootToEdit()
		if err != nil {
			return 0, err
		}
		return root.Signed.Version, r.stage(metadata.ROOT, root)
	case metadata.TARGETS:
		t, err := r.targetsToEdit()
		if err != nil {
			return 0, err
		}
		return t.Signed.Version, r.stage(metadata.TARGETS, t)
	}
	return 0, fmt.Errorf("role %q: renew root or targets (the snapshot: 'fleetctl repo publish'; the timestamp: 'fleetctl repo timestamp')", role)
}

// rootToEdit is the staged root, or a new version of the published one;
// either way without signatures and with a fresh expiry.
func (r *Repo) rootToEdit() (*metadata.Metadata[metadata.RootType], error) {
	root, err := r.StagedRoot()
	if err != nil {
		return nil, err
	}
	if root == nil {
		if root, err = r.PublishedRoot(); err != nil {
			return nil, err
		}
		if root == nil {
			return nil, fmt.Errorf("%w: %s has published no root: sign and publish the one 'fleetctl repo init' staged first", ErrNoRepository, r.Dir)
		}
		root.Signed.Version++
	}
	root.ClearSignatures()
	root.Signed.Expires = r.now().Add(r.expiry().Root)
	return root, nil
}

func shortIDs(ids []string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = ShortID(id)
	}
	return strings.Join(out, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
