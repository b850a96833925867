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
	"go.yaml.in/yaml/v3"
)

// LinksFileName is the record, under the root, of the bin dir entries agentd
// created. The bin dir is shared with the operator and the system: an entry
// not listed there is never replaced or removed.
const LinksFileName = "links.yaml"

// LinksPath is the record of the links agentd created.
func (t Tree) LinksPath() string { return filepath.Join(t.Root, LinksFileName) }

const (
	linksFileVersion = "v1"
	linksFileKind    = "links"
)

// linksHeader tells an operator reading links.yaml what it is for.
const linksHeader = `# Written by agentd: the entries of each bin dir that agentd created.
# agentd never replaces or removes a bin dir entry that is not listed here.
`

// linksFile is links.yaml, in the version/kind/spec shape of update.yaml.
type linksFile struct {
	Version string    `yaml:"version"`
	Kind    string    `yaml:"kind"`
	Spec    linksSpec `yaml:"spec"`
}

type linksSpec struct {
	BinDirs []binDirLinks `yaml:"bin_dirs"`
}

// binDirLinks lists the names agentd created in one bin dir. It may list a
// name whose link is gone (a crash between recording it and creating the
// link, or between removing the link and forgetting it): that name is free.
type binDirLinks struct {
	Path  string   `yaml:"path"`
	Names []string `yaml:"names"`
}

// linkRecord is links.yaml as read: for each bin dir (cleaned absolute path)
// the set of names agentd created there.
type linkRecord map[string]map[string]bool

// loadLinkRecord reads path; a missing file is an empty record.
func loadLinkRecord(path string) (linkRecord, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return linkRecord{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var f linksFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w: %v (fix it; removing it makes agentd adopt every link into versions/)", path, ErrCorrupt, err)
	}
	rec, err := f.record()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
	}
	return rec, nil
}

func (f linksFile) record() (linkRecord, error) {
	if f.Version != linksFileVersion || f.Kind != linksFileKind {
		return nil, fmt.Errorf("want version %q and kind %q, have %q and %q", linksFileVersion, linksFileKind, f.Version, f.Kind)
	}
	rec := linkRecord{}
	for _, d := range f.Spec.BinDirs {
		if !filepath.IsAbs(d.Path) {
			return nil, fmt.Errorf("bin dir %q is not an absolute path", d.Path)
		}
		dir := filepath.Clean(d.Path)
		if rec[dir] != nil {
			return nil, fmt.Errorf("bin dir %s listed twice", dir)
		}
		rec[dir] = map[string]bool{}
		for _, n := range d.Names {
			if n == "" || n == "." || n == ".." || strings.ContainsRune(n, filepath.Separator) {
				return nil, fmt.Errorf("bin dir %s: %q is not a file name", dir, n)
			}
			rec[dir][n] = true
		}
	}
	return rec, nil
}

// save writes the record to path atomically and durably: the file is
// fsynced before the rename and its directory after, so a link created
// after save returns is never on disk without its name in the record.
func (r linkRecord) save(path string) error {
	f := linksFile{Version: linksFileVersion, Kind: linksFileKind}
	for _, dir := range slices.Sorted(maps.Keys(r)) {
		f.Spec.BinDirs = append(f.Spec.BinDirs, binDirLinks{Path: dir, Names: slices.Sorted(maps.Keys(r[dir]))})
	}
	var b strings.Builder
	b.WriteString(linksHeader)
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	if err := renameio.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	return nil
}
