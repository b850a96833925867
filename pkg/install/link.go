package install

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/renameio/v2"
)

// Links records what a bin dir held before a swap: for each name the link
// target it had, or "" when the name did not exist. RestoreLinks puts exactly
// that back.
type Links map[string]string

// Link points every executable of version v's bin/ into BinDir, each with an
// atomic symlink replace (a process exec'ing the path sees the old or the new
// binary, never none), and removes links into another version that v no
// longer ships (they would dangle once that version is pruned). It returns
// what it replaced.
func (t Tree) Link(v string) (Links, error) {
	if err := checkVersion(v); err != nil {
		return nil, err
	}
	if err := t.checkAbs(); err != nil {
		return nil, fmt.Errorf("link %s: %w", v, err)
	}
	names, err := t.binaries(v)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(t.BinDir, 0o755); err != nil {
		return nil, fmt.Errorf("link %s: %w", v, err)
	}
	prev := Links{}
	for _, name := range names {
		path := filepath.Join(t.BinDir, name)
		old, err := os.Readlink(path)
		switch {
		case err == nil:
			prev[name] = old
		case errors.Is(err, fs.ErrNotExist):
			prev[name] = ""
		default:
			// A regular file where our link should go: never clobber
			// something we did not create.
			return prev, t.undo(prev, fmt.Errorf("link %s: %s exists and is not a symlink; move it away first", v, path))
		}
		if err := renameio.Symlink(filepath.Join(t.VersionDir(v), "bin", name), path); err != nil {
			return prev, t.undo(prev, fmt.Errorf("link %s: %w", path, err))
		}
	}
	// Links of ours (into versions/) that v does not ship.
	owned, err := t.ownedLinks()
	if err != nil {
		return prev, t.undo(prev, err)
	}
	for name, target := range owned {
		if _, ours := prev[name]; ours {
			continue
		}
		prev[name] = target
		if err := os.Remove(filepath.Join(t.BinDir, name)); err != nil {
			return prev, t.undo(prev, fmt.Errorf("unlink %s: %w", name, err))
		}
	}
	return prev, nil
}

// RestoreLinks puts the bin dir back exactly as prev recorded it.
func (t Tree) RestoreLinks(prev Links) error {
	if err := t.checkAbs(); err != nil {
		return fmt.Errorf("restore links: %w", err)
	}
	var errs []error
	for _, name := range sortedNames(prev) {
		path := filepath.Join(t.BinDir, name)
		if target := prev[name]; target != "" {
			if err := renameio.Symlink(target, path); err != nil {
				errs = append(errs, fmt.Errorf("restore link %s: %w", path, err))
			}
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove link %s: %w", path, err))
		}
	}
	return errors.Join(errs...)
}

// Unlink removes the bin dir's links into versions/ and reports how many.
func (t Tree) Unlink() (int, error) {
	if err := t.checkAbs(); err != nil {
		return 0, fmt.Errorf("unlink: %w", err)
	}
	owned, err := t.ownedLinks()
	if err != nil {
		return 0, err
	}
	n := 0
	for name := range owned {
		if err := os.Remove(filepath.Join(t.BinDir, name)); err != nil {
			return n, fmt.Errorf("unlink %s: %w", name, err)
		}
		n++
	}
	return n, nil
}

// LinkedVersion reports which version the bin dir's links point into: ""
// when there are none, an error when they point into several.
func (t Tree) LinkedVersion() (string, error) {
	if err := t.checkAbs(); err != nil {
		return "", err
	}
	owned, err := t.ownedLinks()
	if err != nil {
		return "", err
	}
	found := ""
	prefix := t.VersionsDir() + string(filepath.Separator)
	for name, target := range owned {
		v, _, _ := strings.Cut(strings.TrimPrefix(target, prefix), string(filepath.Separator))
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
// be relative to the bin dir, not to the working directory, and dangle.
func (t Tree) checkAbs() error {
	for _, p := range []struct{ what, path string }{{"root", t.Root}, {"bin dir", t.BinDir}} {
		if !filepath.IsAbs(p.path) {
			return fmt.Errorf("%s %q is not an absolute path; links must not depend on the working directory", p.what, p.path)
		}
	}
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

// ownedLinks maps the bin dir's symlinks that point into our versions/ to
// their targets.
func (t Tree) ownedLinks() (map[string]string, error) {
	entries, err := os.ReadDir(t.BinDir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", t.BinDir, err)
	}
	out := map[string]string{}
	prefix := t.VersionsDir() + string(filepath.Separator)
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		target, err := os.Readlink(filepath.Join(t.BinDir, e.Name()))
		if err == nil && strings.HasPrefix(target, prefix) {
			out[e.Name()] = target
		}
	}
	return out, nil
}

func sortedNames(l Links) []string {
	names := make([]string, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
