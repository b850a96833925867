package install

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/renameio/v2"
)

// Links records what a bin dir held before a swap: for each name the link
// target it had, or "" when the name did not exist. RestoreLinks puts exactly
// that back.
type Links map[string]string

// The bin dir is shared with the operator and the system (/usr/local/bin), so
// it is ours only where we put links. An entry is ours when it is a symlink
// into <root>/versions/ and links.yaml lists its name for this bin dir; we
// replace or remove nothing else. links.yaml is written (and fsynced) before
// a link is created and shrunk only after the link is removed, so after a
// crash it may list a name whose link is absent: such a name is free. A
// listed name that is now a file, or a symlink elsewhere, was replaced by
// someone else and is theirs.
//
// Hosts set up by an agentd older than links.yaml have links but no record:
// while links.yaml has no entry for a bin dir (no file at all, or a bin dir
// never linked into since), every symlink there into versions/ counts as
// ours, and the first change writes them into the record.

// Link points every executable of version v's bin/ into BinDir, each with an
// atomic symlink replace (a process exec'ing the path sees the old or the new
// binary, never none), and removes links of ours into another version that v
// no longer ships (they would dangle once that version is pruned). It returns
// what it replaced. When a name v ships is taken by an entry that is not ours
// it changes nothing and names the entry (ErrNotOurs).
func (t Tree) Link(v string) (Links, error) {
	if err := checkVersion(v); err != nil {
		return nil, err
	}
	if err := t.checkAbs(); err != nil {
		return nil, fmt.Errorf("link %s: %w", v, err)
	}
	names, bin, err := t.linkable(v)
	if err != nil {
		return nil, err
	}
	// Claim the names before creating their links.
	claim := bin.oursSet()
	for _, name := range names {
		claim[name] = true
	}
	if err := bin.record(claim); err != nil {
		return nil, fmt.Errorf("link %s: %w", v, err)
	}
	if err := os.MkdirAll(t.BinDir, 0o755); err != nil {
		return nil, fmt.Errorf("link %s: %w", v, err)
	}
	prev := Links{}
	for _, name := range names {
		path := filepath.Join(t.BinDir, name)
		prev[name] = bin.ours[name] // "" when free
		if err := renameio.Symlink(filepath.Join(t.VersionDir(v), "bin", name), path); err != nil {
			return prev, t.undo(prev, fmt.Errorf("link %s: %w", path, err))
		}
	}
	// Links of ours that v does not ship.
	for _, name := range slices.Sorted(maps.Keys(bin.ours)) {
		if _, shipped := prev[name]; shipped {
			continue
		}
		prev[name] = bin.ours[name]
		if err := os.Remove(filepath.Join(t.BinDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return prev, t.undo(prev, fmt.Errorf("unlink %s: %w", name, err))
		}
	}
	// The removals on disk before the record forgets their names.
	if err := syncDir(t.BinDir); err != nil {
		return prev, t.undo(prev, fmt.Errorf("link %s: %w", v, err))
	}
	shipped := map[string]bool{}
	for _, name := range names {
		shipped[name] = true
	}
	if err := bin.record(shipped); err != nil {
		return prev, t.undo(prev, fmt.Errorf("link %s: %w", v, err))
	}
	return prev, nil
}

// CheckLink reports what would make Link(v) refuse, changing nothing: a
// name v ships that is taken by an entry that is not ours (ErrNotOurs),
// or a v with no executable. The Installer asks before it touches the app,
// so that a refused release does not disturb it.
func (t Tree) CheckLink(v string) error {
	if err := checkVersion(v); err != nil {
		return err
	}
	if err := t.checkAbs(); err != nil {
		return fmt.Errorf("link %s: %w", v, err)
	}
	_, _, err := t.linkable(v)
	return err
}

// linkable lists the executables v ships and reads the bin dir, and
// refuses when one of the names is taken by an entry that is not ours.
func (t Tree) linkable(v string) ([]string, *binDir, error) {
	names, err := t.binaries(v)
	if err != nil {
		return nil, nil, err
	}
	bin, err := t.readBinDir()
	if err != nil {
		return nil, nil, fmt.Errorf("link %s: %w", v, err)
	}
	var refused []error
	for _, name := range names {
		if err := bin.free(name); err != nil {
			refused = append(refused, fmt.Errorf("link %s: %w; move it away or remove it from the release", v, err))
		}
	}
	if len(refused) > 0 {
		return nil, nil, errors.Join(refused...)
	}
	return names, bin, nil
}

// RestoreLinks puts the bin dir back exactly as prev recorded it, touching
// only names that are ours or absent: an entry someone else put there since
// is left alone and reported.
func (t Tree) RestoreLinks(prev Links) error {
	if len(prev) == 0 {
		return nil
	}
	if err := t.checkAbs(); err != nil {
		return fmt.Errorf("restore links: %w", err)
	}
	bin, err := t.readBinDir()
	if err != nil {
		return fmt.Errorf("restore links: %w", err)
	}
	var errs []error
	var touch []string
	claim := bin.oursSet()
	for _, name := range slices.Sorted(maps.Keys(prev)) {
		if err := bin.free(name); err != nil {
			errs = append(errs, fmt.Errorf("restore links: %w; left alone", err))
			continue
		}
		touch = append(touch, name)
		if t.intoVersions(prev[name]) {
			claim[name] = true
		}
	}
	if err := bin.record(claim); err != nil {
		return errors.Join(append(errs, fmt.Errorf("restore links: %w", err))...)
	}
	final := maps.Clone(claim)
	for _, name := range touch {
		path := filepath.Join(t.BinDir, name)
		if target := prev[name]; target != "" {
			if err := renameio.Symlink(target, path); err != nil {
				errs = append(errs, fmt.Errorf("restore link %s: %w", path, err))
				continue
			}
			if !t.intoVersions(target) {
				// A link an older agentd replaced: the operator's again.
				delete(final, name)
			}
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove link %s: %w", path, err))
			continue
		}
		delete(final, name)
	}
	if err := syncDir(t.BinDir); err != nil {
		errs = append(errs, fmt.Errorf("restore links: %w", err))
	} else if err := bin.record(final); err != nil {
		errs = append(errs, fmt.Errorf("restore links: %w", err))
	}
	return errors.Join(errs...)
}

// Unlink removes the bin dir's links that are ours and reports how many.
func (t Tree) Unlink() (int, error) {
	if err := t.checkAbs(); err != nil {
		return 0, fmt.Errorf("unlink: %w", err)
	}
	bin, err := t.readBinDir()
	if err != nil {
		return 0, fmt.Errorf("unlink: %w", err)
	}
	if len(bin.ours) == 0 {
		return 0, nil
	}
	n := 0
	for _, name := range slices.Sorted(maps.Keys(bin.ours)) {
		if err := os.Remove(filepath.Join(t.BinDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("unlink %s: %w", name, err)
		}
		n++
	}
	if err := syncDir(t.BinDir); err != nil {
		return n, fmt.Errorf("unlink: %w", err)
	}
	// An empty entry, not none: the bin dir stays known, so a link into
	// versions/ that the operator makes there later is not adopted.
	if err := bin.record(map[string]bool{}); err != nil {
		return n, fmt.Errorf("unlink: %w", err)
	}
	return n, nil
}

// LinkedVersion reports which version the bin dir's links of ours point
// into: "" when there are none, an error when they point into several.
func (t Tree) LinkedVersion() (string, error) {
	if err := t.checkAbs(); err != nil {
		return "", err
	}
	bin, err := t.readBinDir()
	if err != nil {
		return "", err
	}
	found := ""
	prefix := t.VersionsDir() + string(filepath.Separator)
	for _, name := range slices.Sorted(maps.Keys(bin.ours)) {
		v, _, _ := strings.Cut(strings.TrimPrefix(bin.ours[name], prefix), string(filepath.Separator))
		if found != "" && v != found {
			return "", fmt.Errorf("bin dir %s links into both %s and %s (at %s): an interrupted swap", t.BinDir, found, v, name)
		}
		found = v
	}
	return found, nil
}

func (t Tree) undo(prev Links, cause error) error {
	if err := t.RestoreLinks(prev); err != nil {
		return errors.Join(cause, fmt.Errorf("and restoring the previous links failed: %w", err))
	}
	return cause
}

// checkAbs refuses a tree with a relative root or bin dir: the links would
// be relative to the bin dir, not to the working directory, and dangle, and
// links.yaml could not say which bin dir it means.
func (t Tree) checkAbs() error {
	for _, p := range []struct{ what, path string }{{"root", t.Root}, {"bin dir", t.BinDir}} {
		if !filepath.IsAbs(p.path) {
			return fmt.Errorf("%s %q is not an absolute path; links must not depend on the working directory", p.what, p.path)
		}
	}
	return nil
}

// intoVersions reports whether a link target is inside <root>/versions/.
func (t Tree) intoVersions(target string) bool {
	return strings.HasPrefix(filepath.Clean(target), t.VersionsDir()+string(filepath.Separator))
}

// binDir is the bin dir as read before a change: the record, and which
// entries are ours.
type binDir struct {
	t   Tree
	rec linkRecord
	// known: links.yaml has an entry for this bin dir. Until it has, every
	// link into versions/ is ours (hosts set up before links.yaml).
	known bool
	// ours maps the names of the entries that are ours to their targets.
	ours map[string]string
}

func (t Tree) readBinDir() (*binDir, error) {
	rec, err := loadLinkRecord(t.LinksPath())
	if err != nil {
		return nil, err
	}
	recorded, known := rec[filepath.Clean(t.BinDir)]
	b := &binDir{t: t, rec: rec, known: known, ours: map[string]string{}}
	entries, err := os.ReadDir(t.BinDir)
	if errors.Is(err, fs.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", t.BinDir, err)
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 || known && !recorded[e.Name()] {
			continue
		}
		target, err := os.Readlink(filepath.Join(t.BinDir, e.Name()))
		if err == nil && t.intoVersions(target) {
			b.ours[e.Name()] = target
		}
	}
	return b, nil
}

// oursSet is a fresh set of the names that are ours.
func (b *binDir) oursSet() map[string]bool {
	s := map[string]bool{}
	for name := range b.ours {
		s[name] = true
	}
	return s
}

// free reports nil when name may be (re)linked: it is absent or ours.
// Otherwise the error names the entry and says what it is.
func (b *binDir) free(name string) error {
	if _, ok := b.ours[name]; ok {
		return nil
	}
	path := filepath.Join(b.t.BinDir, name)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var what string
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		what = "it points to " + target
		if b.t.intoVersions(target) {
			what += ", but " + b.t.LinksPath() + " does not list it"
		}
	case fi.Mode().IsRegular():
		what = "it is a regular file, not a symlink"
	case fi.IsDir():
		what = "it is a directory"
	default:
		what = "it is a " + fi.Mode().Type().String() + ", not a symlink"
	}
	return fmt.Errorf("%s exists and was %w (%s)", path, ErrNotOurs, what)
}

// record makes names this bin dir's entry in links.yaml, durably, unless it
// already is.
func (b *binDir) record(names map[string]bool) error {
	dir := filepath.Clean(b.t.BinDir)
	if b.known && maps.Equal(b.rec[dir], names) {
		return nil
	}
	rec := maps.Clone(b.rec)
	rec[dir] = maps.Clone(names)
	if err := rec.save(b.t.LinksPath()); err != nil {
		return err
	}
	b.rec, b.known = rec, true
	return nil
}

// binaries lists the executables a version ships in bin/.
func (t Tree) binaries(v string) ([]string, error) {
	dir := filepath.Join(t.VersionDir(v), "bin")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", v, err)
	}
	var names []string
	for _, e := range entries {
		info, err := os.Stat(filepath.Join(dir, e.Name())) // follows in-tree links
		if err != nil || !info.Mode().IsRegular() || info.Mode()&0o111 == 0 {
			continue
		}
		names = append(names, e.Name())
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("link %s: %s holds no executable", v, dir)
	}
	return names, nil
}
