package install

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/renameio/v2"
)

// Default extraction limits: generous for a release of a few Go binaries,
// small enough that a hostile tarball cannot fill the inode table. The disk
// is guarded by its free space (Limits.FreeSpace), whatever these say.
const (
	DefaultMaxTotalBytes = 2 << 30
	DefaultMaxFiles      = 10000
	DefaultMaxFileBytes  = 1 << 30
)

const (
	// markerName is the completion marker at the root of a version dir;
	// an archive may not ship it.
	markerName = "sha256"
	// backupName is where backup.go keeps the database taken while the
	// version was active; an archive may not pre-fill it, or a rollback
	// could restore a database the release shipped.
	backupName = "backup"

	// maxEntryNameLen keeps every extracted path, once under the root,
	// well below PATH_MAX, so that links, walks and removal by path work.
	maxEntryNameLen = 1024
	// maxPathDepth bounds a name's components: no release nests deeper,
	// and a name's missing parents are created (and counted) one by one.
	maxPathDepth = 64
	// maxSymlinkHops is how many symlinks resolving one target may pass
	// through before it is called a loop (Linux stops at 40).
	maxSymlinkHops = 40
	// streamOverheadPerEntry bounds the tar stream's bytes that are not
	// file content: a header, a PAX header and its records, padding.
	streamOverheadPerEntry = 4 << 10
	// streamOverheadFixed allows one maximal PAX or GNU long-name header
	// (archive/tar's own limit) and the end-of-archive blocks.
	streamOverheadFixed = 1<<20 + 1<<10
	// entryDiskBytes is what an entry costs on disk besides its content:
	// an inode's block (a directory's, a symlink's, the tail of a file's
	// last block). Charged against the free space, not MaxTotalBytes.
	entryDiskBytes = 4 << 10

	modeSetuid = 0o4000
	modeSetgid = 0o2000
)

// Limits bound what one archive may put on disk. Zero fields take the
// defaults.
//
// Every byte limit counts the bytes written, not what headers claim: a
// sparse file's holes are written as zeros and count at their full size.
type Limits struct {
	// MaxTotalBytes caps the sum of all file contents, counted as written:
	// the largest release this host accepts.
	MaxTotalBytes int64
	// MaxFiles caps the number of entries of any type, and of the
	// directories created for entries whose parents the archive does not
	// list: every inode the extraction makes counts.
	MaxFiles int
	// MaxFileBytes caps one file's content, counted as written.
	MaxFileBytes int64
	// FreeSpace reports the bytes available to an unprivileged user in dir;
	// nil means statfs(2). Extract asks once, about the versions dir, and
	// stops when the release would use more than that less SpaceMargin. It
	// is a seam for tests, as Fetcher.FreeSpace.
	FreeSpace func(dir string) (uint64, error)
	// SpaceMargin is left free by the extraction; 0 means
	// DefaultSpaceMargin.
	SpaceMargin int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = DefaultMaxTotalBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultMaxFileBytes
	}
	if l.FreeSpace == nil {
		l.FreeSpace = statfsFree
	}
	if l.SpaceMargin <= 0 {
		l.SpaceMargin = DefaultSpaceMargin
	}
	return l
}

// streamCap is how many decompressed bytes the tar stream may have: the
// most content that may be written plus per-entry overhead. It stops what
// the content count cannot see, such as a flood of PAX headers that
// archive/tar reads inside one Next call, or content it skips.
func (x *extractor) streamCap() int64 {
	const maxInt64 = 1<<63 - 1
	content := min(x.lim.MaxTotalBytes, x.space)
	per := (int64(min(x.lim.MaxFiles, 1<<40)) + 1) * streamOverheadPerEntry
	if content > maxInt64-per-streamOverheadFixed {
		return maxInt64
	}
	return content + per + streamOverheadFixed
}

// testHookBeforeMarker, when set by a test, runs after the version dir is
// in place and before its marker is written.
var testHookBeforeMarker func(versionDir string)

// Extract unpacks the release tarball tarGz as version into t, refusing
// anything that could write, link or point outside the version dir. The
// tarball must hash to sha256hex, which the marker records.
//
// It extracts into versions/.extract-<version>-*, checks the result (every
// symlink resolves inside, bin/ holds an executable), fsyncs it, renames it
// to t.VersionDir(version) and writes the marker last: a version dir with a
// marker is complete, one without is a crashed extraction and is replaced.
// A version dir whose marker holds sha256hex is kept as it is; one whose
// marker holds another checksum is ErrCorrupt, left for the operator.
//
// The release may use what the versions dir has free when Extract starts,
// less lim.SpaceMargin: more is ErrNoSpace, checked on the bytes written
// as they are written (plus entryDiskBytes per entry), so neither a gzip
// bomb nor a sparse file can fill the disk. The tarball's size, which
// Fetch's free-space check is based on, says nothing about this.
//
// A rejected archive (ErrHostileArchive, naming the entry) or one too big
// for the disk (ErrNoSpace) leaves nothing behind. Policy: setuid and
// setgid bits on files are rejected, not stripped, as no release needs them
// and stripping would change what the program does; on directories they
// are dropped, as every directory is created 0755. Regular files keep
// their permission bits masked with 0755. Duplicate entries are rejected,
// except a directory listed twice.
//
// Extract must run under the updater lock: it removes leftovers of earlier
// extractions of version.
func Extract(tarGz string, t Tree, version, sha256hex string, lim Limits) error {
	if err := checkVersion(version); err != nil {
		return fmt.Errorf("extract %q: %w", version, err)
	}
	if err := extract(tarGz, t, version, sha256hex, lim.withDefaults()); err != nil {
		return fmt.Errorf("extract %s: %w", version, err)
	}
	return nil
}

func extract(tarGz string, t Tree, version, sha256hex string, lim Limits) (err error) {
	sum := strings.ToLower(sha256hex)
	if !isSHA256Hex(sum) {
		return fmt.Errorf("checksum %q is not a sha256 in hex", sha256hex)
	}
	final := t.VersionDir(version)
	done, exists, err := existingVersion(t, version, sum)
	if err != nil || done {
		return err
	}

	versions := t.VersionsDir()
	if err := os.MkdirAll(versions, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", versions, err)
	}
	if err := removeStaleExtractions(versions, version); err != nil {
		return err
	}
	// Read once: what the release may use is decided before it starts, so
	// it cannot take what others (the app's database) write meanwhile.
	free, err := lim.FreeSpace(versions)
	if err != nil {
		return fmt.Errorf("free space in %s: %w", versions, err)
	}
	space := int64(min(free, 1<<63-1)) - lim.SpaceMargin
	if space <= 0 {
		return fmt.Errorf("%w in %s: %d bytes free, %d of them to be kept free; free some space", ErrNoSpace, versions, free, lim.SpaceMargin)
	}
	tmp, err := os.MkdirTemp(versions, ".extract-"+version+"-*")
	if err != nil {
		return fmt.Errorf("create temp dir: %w", err)
	}
	defer func() {
		if tmp != "" {
			_ = os.RemoveAll(tmp)
		}
	}()
	// Every path operation goes through an os.Root on the temp dir: the
	// checks below decide what is allowed, the Root makes sure that even a
	// mistake in them cannot reach outside.
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return fmt.Errorf("open %s: %w", tmp, err)
	}
	defer root.Close()

	x := &extractor{
		root:     root,
		lim:      lim,
		versions: versions,
		free:     free,
		space:    space,
		kinds:    map[string]entryKind{".": kindDir},
		modes:    map[string]fs.FileMode{},
		targets:  map[string]string{},
	}
	got, err := x.unpack(tarGz)
	if err != nil {
		return err
	}
	if got != sum {
		return fmt.Errorf("%w: %s has sha256 %s, want %s", ErrBadChecksum, tarGz, got, sum)
	}
	if err := x.checkSymlinks(); err != nil {
		return err
	}
	if err := x.checkBin(); err != nil {
		return err
	}
	if err := x.syncTree(); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp made it 0700
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}

	if exists {
		// No marker: an extraction that crashed after its rename.
		if err := os.RemoveAll(final); err != nil {
			return fmt.Errorf("remove incomplete %s: %w", final, err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	tmp = ""
	if err := syncDir(versions); err != nil {
		return err
	}
	if testHookBeforeMarker != nil {
		testHookBeforeMarker(final)
	}
	// The temp file of renameio goes next to the marker, not to $TMPDIR.
	marker := t.MarkerPath(version)
	if err := renameio.WriteFile(marker, []byte(sum+"\n"), 0o644, renameio.WithTempDir(final)); err != nil {
		return fmt.Errorf("write %s: %w", marker, err)
	}
	return syncDir(final)
}

// existingVersion looks at what is already at t.VersionDir(v): done when it
// is a complete extraction of sum, exists when something incomplete is
// there to be replaced.
func existingVersion(t Tree, v, sum string) (done, exists bool, err error) {
	dir := t.VersionDir(v)
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("stat %s: %w", dir, err)
	case !fi.IsDir():
		return false, true, nil
	}
	marker := t.MarkerPath(v)
	b, err := os.ReadFile(marker)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, true, nil
	case err != nil:
		return false, false, fmt.Errorf("read %s: %w", marker, err)
	case strings.TrimSpace(string(b)) == sum:
		return true, true, nil
	}
	// Another tarball under the same version, or a damaged marker. The dir
	// may be the active version: the operator decides.
	return false, true, fmt.Errorf("%s: %w: holds %q, not sha256 %s (remove %s to extract again)", marker, ErrCorrupt, strings.TrimSpace(string(b)), sum, dir)
}

// removeStaleExtractions removes versions/.extract-<version>-<digits> dirs
// left by a crash. The digits test keeps 1.2.3 from matching 1.2.3-rc.1's.
func removeStaleExtractions(versions, version string) error {
	entries, err := os.ReadDir(versions)
	if err != nil {
		return fmt.Errorf("read %s: %w", versions, err)
	}
	prefix := ".extract-" + version + "-"
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || rest == "" || strings.Trim(rest, "0123456789") != "" {
			continue
		}
		p := filepath.Join(versions, e.Name())
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("remove stale %s: %w", p, err)
		}
	}
	return nil
}

type entryKind int

const (
	kindDir entryKind = iota + 1
	kindFile
	kindSymlink
)

func (k entryKind) String() string {
	switch k {
	case kindDir:
		return "directory"
	case kindFile:
		return "file"
	case kindSymlink:
		return "symlink"
	}
	return "unknown"
}

// extractor keeps, for every path it created, what it is. The temp dir is
// ours alone, so this map is the truth about it, and every decision (is a
// parent a real directory, where does a symlink lead) is made on it.
type extractor struct {
	root     *os.Root
	lim      Limits
	versions string // for messages
	free     uint64 // in versions/ when the extraction began
	space    int64  // what it may use: free less the margin
	entries  int
	total    int64
	kinds    map[string]entryKind   // cleaned name → kind; "." is the root
	modes    map[string]fs.FileMode // regular files (hard links included)
	targets  map[string]string      // symlinks → their target
	links    []string               // symlinks, in archive order
	dirs     []string               // directories, in creation order
}

func hostile(name, format string, args ...any) error {
	return fmt.Errorf("%w: entry %q: %s", ErrHostileArchive, name, fmt.Sprintf(format, args...))
}

// unpack extracts tarGz and returns its sha256, computed from the same
// reads, so the marker states the checksum of what was extracted.
func (x *extractor) unpack(tarGz string) (string, error) {
	f, err := os.Open(tarGz)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", tarGz, err)
	}
	defer f.Close()
	h := sha256.New()
	zr, err := gzip.NewReader(io.TeeReader(f, h))
	if err != nil {
		return "", fmt.Errorf("%w: %s is not gzip: %v", ErrHostileArchive, tarGz, err)
	}
	stream := &capReader{r: zr, left: x.streamCap()}
	tr := tar.NewReader(stream)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if errors.Is(err, tar.ErrInsecurePath) && hdr != nil {
			return "", hostile(hdr.Name, "insecure path")
		}
		if errors.Is(err, errStreamCap) {
			return "", fmt.Errorf("%w: the tar stream expands to more than %d bytes", ErrHostileArchive, x.streamCap())
		}
		if err != nil {
			return "", fmt.Errorf("%w: reading the tar stream after %d entries: %v", ErrHostileArchive, x.entries, err)
		}
		if err := x.count(hdr.Name, false); err != nil {
			return "", err
		}
		if err := x.entry(tr, hdr); err != nil {
			return "", err
		}
	}
	// The tar reader stops at its end marker; the checksum covers the
	// whole file.
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", tarGz, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// count admits one more entry against MaxFiles and the free space,
// before anything is created for it: every header, and every directory
// made for an entry's missing parents (implicit), which the header count
// alone would not see. A single entry "a/b/…/f" can otherwise create one
// directory per component.
func (x *extractor) count(raw string, implicit bool) error {
	x.entries++
	switch {
	case x.entries > x.lim.MaxFiles && implicit:
		return hostile(raw, "more than %d entries, counting the parent directories created for it", x.lim.MaxFiles)
	case x.entries > x.lim.MaxFiles:
		return hostile(raw, "more than %d entries", x.lim.MaxFiles)
	case x.used() > x.space:
		return x.noSpace(raw)
	}
	return nil
}

// used is what the extraction has put on disk so far, by its count: the
// content written and a block per entry.
func (x *extractor) used() int64 {
	return x.total + int64(x.entries)*entryDiskBytes
}

func (x *extractor) noSpace(raw string) error {
	return fmt.Errorf("%w in %s: entry %q: the release needs more than the %d bytes it may use there (%d free when extraction began, less the %d-byte margin; contents count as written, plus %d bytes per entry)",
		ErrNoSpace, x.versions, raw, x.space, x.free, x.lim.SpaceMargin, entryDiskBytes)
}

// cleanName validates an entry name as written in the archive and returns
// it cleaned ("./bin//x" → "bin/x").
func cleanName(raw string) (string, error) {
	if problem := nameProblem(raw); problem != "" {
		return "", hostile(truncate(raw, 64), "%s", problem)
	}
	return path.Clean(raw), nil
}

// nameProblem says what is wrong with a name or hard-link target, or "".
func nameProblem(raw string) string {
	switch {
	case raw == "":
		return "empty name"
	case len(raw) > maxEntryNameLen:
		return fmt.Sprintf("name longer than %d bytes", maxEntryNameLen)
	case strings.ContainsRune(raw, 0):
		return "NUL in name"
	case strings.HasPrefix(raw, "/"):
		return "absolute path"
	case strings.Count(path.Clean(raw), "/") >= maxPathDepth:
		return fmt.Sprintf("more than %d path components", maxPathDepth)
	}
	// Rejected even where it would clean away ("bin/../x"): no release needs
	// it, and it is how traversal attacks look.
	for c := range strings.SplitSeq(raw, "/") {
		if c == ".." {
			return "path has a \"..\" component"
		}
	}
	return ""
}

func (x *extractor) entry(tr *tar.Reader, hdr *tar.Header) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil // archive-wide PAX records (git archive writes one)
	}
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	switch top, _, _ := strings.Cut(name, "/"); {
	case name == ".":
		if hdr.Typeflag != tar.TypeDir {
			return hostile(hdr.Name, "the archive root is not a directory")
		}
		return nil // the root's mode is ours: 0755
	case top == markerName:
		return hostile(hdr.Name, "%q at the root is reserved for the completion marker", markerName)
	case top == backupName:
		return hostile(hdr.Name, "%q at the root is reserved for database backups", backupName)
	}
	if err := x.checkParents(hdr.Name, name); err != nil {
		return err
	}
	if k, ok := x.kinds[name]; ok {
		if k == kindDir && hdr.Typeflag == tar.TypeDir {
			return nil
		}
		return hostile(hdr.Name, "duplicate entry would replace a %s", k)
	}
	if hdr.Typeflag != tar.TypeDir && hdr.Mode&(modeSetuid|modeSetgid) != 0 {
		return hostile(hdr.Name, "setuid or setgid bit (mode %#o)", hdr.Mode)
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		// The entry itself is counted already; its missing parents are not.
		if err := x.mkdirs(hdr.Name, path.Dir(name)); err != nil {
			return err
		}
		return x.mkdir(name)
	case tar.TypeReg:
		return x.file(tr, hdr, name)
	case tar.TypeSymlink:
		return x.symlink(hdr, name)
	case tar.TypeLink:
		return x.hardlink(hdr, name)
	case tar.TypeChar, tar.TypeBlock:
		return hostile(hdr.Name, "device file")
	case tar.TypeFifo:
		return hostile(hdr.Name, "fifo")
	}
	return hostile(hdr.Name, "unsupported entry type %q", hdr.Typeflag)
}

// checkParents refuses a path whose parents are anything but directories
// this archive created or will create: writing through a symlink, even one
// that points inside, could replace a file already checked.
func (x *extractor) checkParents(raw, name string) error {
	for i := range len(name) {
		if name[i] != '/' {
			continue
		}
		p := name[:i]
		switch k, ok := x.kinds[p]; {
		case !ok, k == kindDir:
		case k == kindSymlink:
			return hostile(raw, "path goes through the symlink %q", p)
		default:
			return hostile(raw, "parent %q is a %s", p, k)
		}
	}
	return nil
}

// mkdirs creates dir and any missing parent for the entry raw, each
// counted as an entry of its own.
func (x *extractor) mkdirs(raw, dir string) error {
	var missing []string
	for p := dir; p != "."; p = path.Dir(p) {
		if _, ok := x.kinds[p]; ok {
			break
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := x.count(raw, true); err != nil {
			return err
		}
		if err := x.mkdir(missing[i]); err != nil {
			return err
		}
	}
	return nil
}

// mkdir creates the directory p, 0755 whatever the umask.
func (x *extractor) mkdir(p string) error {
	if err := x.root.Mkdir(p, 0o755); err != nil {
		return fmt.Errorf("create %q: %w", p, err)
	}
	if err := x.root.Chmod(p, 0o755); err != nil {
		return fmt.Errorf("chmod %q: %w", p, err)
	}
	x.kinds[p] = kindDir
	x.dirs = append(x.dirs, p)
	return nil
}

func (x *extractor) file(tr *tar.Reader, hdr *tar.Header, name string) error {
	// The header's size is only a hint for failing early; the limits are
	// enforced on the bytes actually written. Reading goes through Read,
	// which returns a sparse file's holes as zeros, never through
	// tar.Reader.WriteTo, which would seek over them and write less than
	// the file's size: every byte of the file is written and counted.
	if hdr.Size > x.lim.MaxFileBytes {
		return hostile(hdr.Name, "%d bytes, more than the %d allowed for one file", hdr.Size, x.lim.MaxFileBytes)
	}
	if err := x.mkdirs(hdr.Name, path.Dir(name)); err != nil {
		return err
	}
	mode := fs.FileMode(hdr.Mode) & 0o755
	// O_EXCL: never open anything that exists, so never through a link.
	out, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("create %q: %w", name, err)
	}
	defer out.Close()
	x.kinds[name] = kindFile
	x.modes[name] = mode

	limit := min(x.lim.MaxFileBytes, x.lim.MaxTotalBytes-x.total, x.space-x.used())
	src := &readErrReader{r: tr}
	n, err := io.Copy(out, io.LimitReader(src, limit+1))
	x.total += n
	switch {
	case errors.Is(src.err, errStreamCap):
		return fmt.Errorf("%w: the tar stream expands to more than %d bytes", ErrHostileArchive, x.streamCap())
	case src.err != nil:
		return hostile(hdr.Name, "reading its content: %v", src.err)
	case err != nil:
		return fmt.Errorf("write %q: %w", name, err)
	case x.total > x.lim.MaxTotalBytes:
		return hostile(hdr.Name, "the archive expands to more than %d bytes", x.lim.MaxTotalBytes)
	case n > x.lim.MaxFileBytes:
		return hostile(hdr.Name, "more than the %d bytes allowed for one file", x.lim.MaxFileBytes)
	case x.used() > x.space:
		return x.noSpace(hdr.Name)
	}
	// Set the mode exactly: the umask must not take bits a user of the
	// linked programs needs.
	if err := out.Chmod(mode); err != nil {
		return fmt.Errorf("chmod %q: %w", name, err)
	}
	if err := x.syncFile(out); err != nil {
		return fmt.Errorf("sync %q: %w", name, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("close %q: %w", name, err)
	}
	return nil
}

// symlink creates a relative symlink whose target, read from the link's
// directory, stays inside. Whether it still does once every symlink in the
// tree is known is checkSymlinks' job.
func (x *extractor) symlink(hdr *tar.Header, name string) error {
	target := hdr.Linkname
	switch {
	case target == "":
		return hostile(hdr.Name, "symlink with an empty target")
	case len(target) > maxEntryNameLen:
		return hostile(hdr.Name, "symlink target longer than %d bytes", maxEntryNameLen)
	case strings.ContainsRune(target, 0):
		return hostile(hdr.Name, "NUL in symlink target")
	case path.IsAbs(target):
		return hostile(hdr.Name, "symlink to the absolute path %q", target)
	}
	if p := path.Join(path.Dir(name), target); p == ".." || strings.HasPrefix(p, "../") {
		return hostile(hdr.Name, "symlink target %q leads out of the release", target)
	}
	if err := x.mkdirs(hdr.Name, path.Dir(name)); err != nil {
		return err
	}
	if err := x.root.Symlink(target, name); err != nil {
		return fmt.Errorf("symlink %q: %w", name, err)
	}
	x.kinds[name] = kindSymlink
	x.targets[name] = target
	x.links = append(x.links, name)
	return nil
}

// hardlink links name to a regular file this archive already created.
// Not to a symlink: the new name would hold the same relative target,
// read from another directory.
func (x *extractor) hardlink(hdr *tar.Header, name string) error {
	if problem := nameProblem(hdr.Linkname); problem != "" {
		return hostile(hdr.Name, "hard link to %q: %s", hdr.Linkname, problem)
	}
	target := path.Clean(hdr.Linkname)
	switch k, ok := x.kinds[target]; {
	case !ok:
		return hostile(hdr.Name, "hard link to %q, which is not in the archive before it", hdr.Linkname)
	case k != kindFile:
		return hostile(hdr.Name, "hard link to %q, a %s", hdr.Linkname, k)
	}
	if err := x.mkdirs(hdr.Name, path.Dir(name)); err != nil {
		return err
	}
	if err := x.root.Link(target, name); err != nil {
		return fmt.Errorf("link %q: %w", name, err)
	}
	x.kinds[name] = kindFile
	x.modes[name] = x.modes[target]
	return nil
}

// checkSymlinks resolves every symlink as the kernel would, through the
// other symlinks of the finished tree, and rejects any that lead outside.
// Checking each target alone is not enough: with "a -> ." at the root,
// "b -> a/.." looks like "." but is the root's parent.
func (x *extractor) checkSymlinks() error {
	for _, name := range x.links {
		if err := x.resolve(name); err != nil {
			return err
		}
	}
	return nil
}

func (x *extractor) resolve(link string) error {
	dir := splitPath(path.Dir(link)) // real directories only (checkParents)
	pending := splitPath(x.targets[link])
	hops := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case ".":
			continue
		case "..":
			if len(dir) == 0 {
				return hostile(link, "symlink target %q leads out of the release", x.targets[link])
			}
			dir = dir[:len(dir)-1]
			continue
		}
		p := path.Join(append(dir[:len(dir):len(dir)], c)...)
		if x.kinds[p] == kindSymlink {
			if hops++; hops > maxSymlinkHops {
				return hostile(link, "symlink loop")
			}
			// The target is read from the directory holding p: dir.
			pending = append(splitPath(x.targets[p]), pending...)
			continue
		}
		// A directory, or something the walk cannot enter (a file, a
		// missing name); going on lexically only rejects more.
		dir = append(dir, c)
	}
	return nil
}

func splitPath(p string) []string {
	var out []string
	for c := range strings.SplitSeq(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// checkBin requires what the links point at: bin/ as a real directory with
// at least one executable regular file directly in it.
func (x *extractor) checkBin() error {
	if x.kinds["bin"] != kindDir {
		return fmt.Errorf("%w: %w: no bin/ directory (a release ships its programs in bin/)", ErrHostileArchive, ErrInvalidRelease)
	}
	for name, mode := range x.modes {
		if path.Dir(name) == "bin" && mode&0o111 != 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: %w: bin/ holds no executable regular file", ErrHostileArchive, ErrInvalidRelease)
}

// syncDirs makes every created directory entry durable before the rename
// and the marker claim the extraction is complete.
func (x *extractor) syncDirs() error {
	for _, d := range append(x.dirs, ".") {
		f, err := x.root.Open(d)
		if err != nil {
			return fmt.Errorf("open %q: %w", d, err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %q: %w", d, err)
		}
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

var errStreamCap = errors.New("decompressed stream over its limit")

// capReader fails once more than left bytes have been read.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errStreamCap
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// readErrReader remembers a read error, so a failed copy can be told apart
// from a failed write: a broken archive is the archive's fault, a full disk
// is not.
type readErrReader struct {
	r   io.Reader
	err error
}

func (r *readErrReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}
