package install_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/install"
)

var genSeeds = flag.Bool("gen-seeds", false, "rewrite the fuzz seeds in testdata/fuzz (FuzzExtract, FuzzUpdateFile)")

const extractVersion = "2.0.0"

// extractEntry is one entry of a test archive. Type defaults to a regular
// file; Mode to 0644 for files and 0755 for directories.
type extractEntry struct {
	Name string
	Type byte
	Mode int64
	Body string
	Link string
}

// extractTar writes entries as an uncompressed tar stream, byte for byte
// the same on every run.
func extractTar(t testing.TB, entries ...extractEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:     e.Name,
			Typeflag: e.Type,
			Mode:     e.Mode,
			Linkname: e.Link,
			ModTime:  time.Unix(1_700_000_000, 0),
		}
		switch hdr.Typeflag {
		case 0:
			hdr.Typeflag = tar.TypeReg
		case tar.TypeXGlobalHeader:
			hdr = &tar.Header{Typeflag: e.Type, PAXRecords: map[string]string{"comment": e.Body}}
		case tar.TypeChar, tar.TypeBlock:
			hdr.Devmajor, hdr.Devminor = 1, 3
		}
		if hdr.Mode == 0 && hdr.Typeflag != tar.TypeXGlobalHeader {
			hdr.Mode = 0o644
			if hdr.Typeflag == tar.TypeDir {
				hdr.Mode = 0o755
			}
		}
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeCont {
			hdr.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %q: %v", e.Name, err)
		}
		if hdr.Size > 0 {
			if _, err := tw.Write([]byte(e.Body)); err != nil {
				t.Fatalf("tar body %q: %v", e.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func extractGzip(t testing.TB, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// extractWriteFile writes a tarball file and returns its path and sha256.
func extractWriteFile(t testing.TB, dir string, data []byte) (path, sum string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "release.tar.gz")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(data)
	return path, hex.EncodeToString(s[:])
}

// extractGoodRelease has a bit of everything a release may hold.
func extractGoodRelease() []extractEntry {
	return []extractEntry{
		{Name: "pax_global_header", Type: tar.TypeXGlobalHeader, Body: "git archive"},
		{Name: "./", Type: tar.TypeDir},
		{Name: "./bin/", Type: tar.TypeDir, Mode: 0o700},
		{Name: "./bin/app", Mode: 0o755, Body: "#!/bin/sh\necho app\n"},
		{Name: "./bin/tool", Type: tar.TypeSymlink, Link: "../libexec/tool"},
		{Name: "bin/app-hard", Type: tar.TypeLink, Link: "./bin/app"},
		{Name: "libexec/tool", Mode: 0o777, Body: "tool"},
		{Name: "bin/", Type: tar.TypeDir}, // listed twice: harmless
		{Name: "share//doc/README", Mode: 0o666, Body: "readme"},
		{Name: "share/doc/private", Mode: 0o600, Body: "p"},
		{Name: "share/doc/empty"},
		{Name: "share/doc/conf", Type: tar.TypeSymlink, Link: "../../etc/app.conf"},
		{Name: "share/self", Type: tar.TypeSymlink, Link: "."},
		{Name: "share/via-self", Type: tar.TypeSymlink, Link: "self/doc/README"},
		{Name: "share/group", Type: tar.TypeDir, Mode: 0o2775},
		{Name: "etc/app.conf", Body: "a=1\n"},
		{Name: "dangling", Type: tar.TypeSymlink, Link: "not/there"},
	}
}

// extractGoodTree is extractGoodRelease as extracted, marker aside.
func extractGoodTree() map[string]string {
	return map[string]string{
		".":                 "dir 755",
		"bin":               "dir 755",
		"bin/app":           `file 755 "#!/bin/sh\necho app\n"`,
		"bin/app-hard":      `file 755 "#!/bin/sh\necho app\n"`,
		"bin/tool":          "symlink ../libexec/tool",
		"libexec":           "dir 755",
		"libexec/tool":      `file 755 "tool"`,
		"share":             "dir 755",
		"share/doc":         "dir 755",
		"share/doc/README":  `file 644 "readme"`,
		"share/doc/private": `file 600 "p"`,
		"share/doc/empty":   `file 644 ""`,
		"share/doc/conf":    "symlink ../../etc/app.conf",
		"share/self":        "symlink .",
		"share/via-self":    "symlink self/doc/README",
		"share/group":       "dir 755",
		"etc":               "dir 755",
		"etc/app.conf":      `file 644 "a=1\n"`,
		"dangling":          "symlink not/there",
	}
}

// extractSnapshot describes every path under dir, without following
// symlinks: kind, permission bits and content or target.
func extractSnapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			snap[rel] = fmt.Sprintf("dir %o", fi.Mode().Perm())
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			snap[rel] = fmt.Sprintf("file %o %q", fi.Mode().Perm(), b)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			snap[rel] = "symlink " + target
		default:
			snap[rel] = "other " + fi.Mode().String()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return snap
}

// extractSetup makes a host with things to protect: another complete
// version, update.yaml, and a directory beside the root.
func extractSetup(t testing.TB) (base string, tree install.Tree) {
	t.Helper()
	base = t.TempDir()
	tree = install.Tree{Root: filepath.Join(base, "root"), BinDir: filepath.Join(base, "bin")}
	files := map[string]string{
		"root/update.yaml":              "version: v1\n",
		"root/versions/1.0.0/bin/app":   "old app",
		"root/versions/1.0.0/sha256":    strings.Repeat("ab", 32) + "\n",
		"outside/secret":                "keep out",
		"bin/.keep":                     "",
		"root/versions/.not-an-extract": "someone else's",
	}
	for name, content := range files {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return base, tree
}

func extractNotExist(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s exists after a failed extraction (lstat: %v)", path, err)
	}
}

func TestExtractGood(t *testing.T) {
	t.Parallel()
	base, tree := extractSetup(t)
	tarGz, sum := extractWriteFile(t, filepath.Join(base, "dl"), extractGzip(t, extractTar(t, extractGoodRelease()...)))
	before := extractSnapshot(t, base)

	if err := install.Extract(tarGz, tree, extractVersion, sum, install.Limits{}); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	vdir := tree.VersionDir(extractVersion)
	want := extractGoodTree()
	want["sha256"] = fmt.Sprintf("file %o %q", 0o644&^umask, sum+"\n")
	if diff := cmp.Diff(want, extractSnapshot(t, vdir)); diff != "" {
		t.Errorf("version dir (-want +got):\n%s", diff)
	}
	// The links work where they landed.
	for link, content := range map[string]string{"bin/tool": "tool", "share/doc/conf": "a=1\n", "share/via-self": "readme"} {
		if b, err := os.ReadFile(filepath.Join(vdir, link)); err != nil || string(b) != content {
			t.Errorf("read through %s = %q, %v; want %q", link, b, err, content)
		}
	}
	a, errA := os.Stat(filepath.Join(vdir, "bin/app"))
	b, errB := os.Stat(filepath.Join(vdir, "bin/app-hard"))
	if errA != nil || errB != nil || !os.SameFile(a, b) {
		t.Errorf("bin/app-hard is not a hard link of bin/app (%v, %v)", errA, errB)
	}
	// Nothing else changed: no temp dir left, the other version untouched.
	after := extractSnapshot(t, base)
	for p := range after {
		if p == "root/versions/"+extractVersion || strings.HasPrefix(p, "root/versions/"+extractVersion+"/") {
			delete(after, p)
		}
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("outside the version dir (-before +after):\n%s", diff)
	}
}

// TestExtractMarkerWrittenLast: when the marker appears, everything else is
// already in place. Not parallel: it sets a package hook.
func TestExtractMarkerWrittenLast(t *testing.T) {
	base, tree := extractSetup(t)
	tarGz, sum := extractWriteFile(t, filepath.Join(base, "dl"), extractGzip(t, extractTar(t, extractGoodRelease()...)))
	var atHook map[string]string
	restore := install.SetTestHookBeforeMarker(func(dir string) { atHook = extractSnapshot(t, dir) })
	defer restore()

	if err := install.Extract(tarGz, tree, extractVersion, sum, install.Limits{}); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	if diff := cmp.Diff(extractGoodTree(), atHook); diff != "" {
		t.Errorf("version dir just before the marker (-want +got):\n%s", diff)
	}
	if got := string(readFile(t, tree.MarkerPath(extractVersion))); got != sum+"\n" {
		t.Errorf("marker = %q, want %q", got, sum+"\n")
	}
}

// extractBin is the smallest valid release, to put hostile entries after.
var extractBin = extractEntry{Name: "bin/app", Mode: 0o755, Body: "app"}

func TestExtractHostile(t *testing.T) {
	t.Parallel()
	e := func(entries ...extractEntry) []extractEntry { return append([]extractEntry{extractBin}, entries...) }
	dir := func(name string) extractEntry { return extractEntry{Name: name, Type: tar.TypeDir} }
	file := func(name string) extractEntry { return extractEntry{Name: name, Body: "x"} }
	symlink := func(name, target string) extractEntry {
		return extractEntry{Name: name, Type: tar.TypeSymlink, Link: target}
	}
	hardlink := func(name, target string) extractEntry {
		return extractEntry{Name: name, Type: tar.TypeLink, Link: target}
	}
	goodGz := extractGzip(t, extractTar(t, extractGoodRelease()...))

	tests := []struct {
		name    string
		entries []extractEntry
		raw     []byte // a crafted tar stream instead of entries
		file    []byte // the tarball's exact bytes instead of either
		lim     install.Limits
		want    string // in the error: the entry, or what is wrong
	}{
		{name: "absolute path", entries: e(file("/etc/cron.d/evil")), want: `entry "/etc/cron.d/evil": absolute path`},
		{name: "leading dotdot", entries: e(file("../evil")), want: `entry "../evil": path has a ".." component`},
		{name: "dotdot deeper", entries: e(file("bin/../../evil")), want: `entry "bin/../../evil"`},
		{name: "dotdot that cleans away", entries: e(file("bin/../bin/x")), want: `entry "bin/../bin/x"`},
		{name: "dotdot directory", entries: e(dir("a/../../")), want: `entry "a/../../"`},
		{name: "long name", entries: e(file(strings.Repeat("d/", 600) + "f")), want: "longer than 1024 bytes"},
		{name: "deep name", entries: e(file(strings.Repeat("d/", 64) + "f")), want: "more than 64 path components"},
		{name: "deep hard link target", entries: e(hardlink("h", strings.Repeat("d/", 64)+"f")), want: "more than 64 path components"},
		{name: "symlink absolute", entries: e(symlink("bin/sh", "/bin/sh")), want: `entry "bin/sh": symlink to the absolute path "/bin/sh"`},
		{name: "symlink up and out", entries: e(symlink("bin/up", "../../..")), want: `entry "bin/up": symlink target "../../.." leads out`},
		{name: "symlink to the parent", entries: e(symlink("up", "..")), want: `entry "up"`},
		{name: "symlink empty target", entries: e(symlink("empty", "")), want: `entry "empty": symlink with an empty target`},
		{
			name:    "symlink out through a symlink to the root",
			entries: e(symlink("self", "."), symlink("esc", "self/..")),
			want:    `entry "esc": symlink target "self/.." leads out`,
		},
		{
			name:    "symlink out through a symlink in a subdir",
			entries: e(dir("lib"), symlink("lib/up", ".."), symlink("esc", "lib/up/../x")),
			want:    `entry "esc"`,
		},
		{
			name:    "symlink made escaping by a later symlink",
			entries: e(symlink("esc", "later/.."), symlink("later", ".")),
			want:    `entry "esc"`,
		},
		{name: "symlink loop", entries: e(symlink("a", "b"), symlink("b", "a")), want: `entry "a": symlink loop`},
		{
			name:    "file through a directory symlink",
			entries: e(symlink("lib", "bin"), file("lib/evil")),
			want:    `entry "lib/evil": path goes through the symlink "lib"`,
		},
		{
			name:    "file through an escaping-looking chain",
			entries: e(symlink("self", "."), file("self/sha256")),
			want:    `entry "self/sha256": path goes through the symlink "self"`,
		},
		{
			name:    "file replacing a symlink",
			entries: e(file("share/t"), symlink("bin/tool", "../share/t"), file("bin/tool")),
			want:    `entry "bin/tool": duplicate entry would replace a symlink`,
		},
		{
			name:    "symlink replacing a symlink",
			entries: e(symlink("bin/tool", "app"), symlink("bin/tool", "../../x")),
			want:    `entry "bin/tool"`,
		},
		{name: "duplicate file", entries: e(file("bin/app")), want: `entry "bin/app": duplicate entry would replace a file`},
		{name: "directory over a file", entries: e(dir("bin/app")), want: `entry "bin/app": duplicate entry would replace a file`},
		{name: "file under a file", entries: e(file("bin/app/x")), want: `entry "bin/app/x": parent "bin/app" is a file`},
		{name: "hard link absolute", entries: e(hardlink("bin/passwd", "/etc/passwd")), want: `entry "bin/passwd": hard link to "/etc/passwd": absolute path`},
		{name: "hard link up", entries: e(hardlink("bin/secret", "../outside/secret")), want: `entry "bin/secret": hard link to "../outside/secret"`},
		{name: "hard link to nothing", entries: e(hardlink("bin/x", "bin/missing")), want: `entry "bin/x": hard link to "bin/missing", which is not in the archive`},
		{name: "hard link ahead", entries: e(hardlink("bin/x", "bin/later"), file("bin/later")), want: `entry "bin/x"`},
		{name: "hard link to a symlink", entries: e(symlink("lib/l", "../bin/app"), hardlink("l2", "lib/l")), want: `entry "l2": hard link to "lib/l", a symlink`},
		{name: "hard link to a directory", entries: e(hardlink("b2", "bin")), want: `entry "b2": hard link to "bin", a directory`},
		{name: "hard link through a symlink", entries: e(symlink("b", "bin"), hardlink("x", "b/app")), want: `entry "x"`},
		{name: "char device", entries: e(extractEntry{Name: "dev/null", Type: tar.TypeChar}), want: `entry "dev/null": device file`},
		{name: "block device", entries: e(extractEntry{Name: "dev/sda", Type: tar.TypeBlock}), want: `entry "dev/sda": device file`},
		{name: "fifo", entries: e(extractEntry{Name: "run/pipe", Type: tar.TypeFifo}), want: `entry "run/pipe": fifo`},
		{name: "contiguous file", entries: e(extractEntry{Name: "c", Type: tar.TypeCont, Body: "x"}), want: `entry "c": unsupported entry type '7'`},
		{name: "setuid", entries: e(extractEntry{Name: "bin/su", Mode: 0o4755, Body: "x"}), want: `entry "bin/su": setuid or setgid bit`},
		{name: "setgid", entries: e(extractEntry{Name: "bin/sg", Mode: 0o2755, Body: "x"}), want: `entry "bin/sg": setuid or setgid bit`},
		{name: "root is a file", entries: e(extractEntry{Name: ".", Body: ""}), want: "the archive root is not a directory"},
		{name: "marker file", entries: e(file("sha256")), want: `entry "sha256": "sha256" at the root is reserved`},
		{name: "marker file dotted", entries: e(file("./sha256")), want: `entry "./sha256"`},
		{name: "marker directory", entries: e(file("sha256/x")), want: `entry "sha256/x"`},
		{name: "marker symlink", entries: e(symlink("sha256", "bin/app")), want: `entry "sha256"`},
		{name: "backup", entries: e(file("backup/app.db")), want: `entry "backup/app.db": "backup" at the root is reserved`},
		// bin (created for bin/app), bin/app, a: b is the fourth.
		{name: "too many entries", entries: e(file("a"), file("b"), file("c")), lim: install.Limits{MaxFiles: 3}, want: `entry "b": more than 3 entries`},
		{
			name:    "file over the limit",
			entries: e(extractEntry{Name: "big", Body: strings.Repeat("x", 101)}),
			lim:     install.Limits{MaxFileBytes: 100},
			want:    `entry "big": 101 bytes, more than the 100 allowed for one file`,
		},
		{
			name:    "total over the limit",
			entries: e(extractEntry{Name: "a", Body: strings.Repeat("a", 400)}, extractEntry{Name: "b", Body: strings.Repeat("b", 400)}),
			lim:     install.Limits{MaxTotalBytes: 700},
			want:    `entry "b": the archive expands to more than 700 bytes`,
		},
		{
			name:    "gzip bomb",
			entries: e(extractEntry{Name: "zeros", Body: string(make([]byte, 16<<20))}),
			lim:     install.Limits{MaxTotalBytes: 1 << 20},
			want:    `entry "zeros": the archive expands to more than 1048576 bytes`,
		},
		{
			name: "PAX header flood",
			raw:  extractPAXFlood(t, 3, 900<<10),
			lim:  install.Limits{MaxTotalBytes: 64 << 10, MaxFiles: 10},
			want: "the tar stream expands to more than",
		},
		{name: "no bin", entries: []extractEntry{file("share/x")}, want: "no bin/ directory"},
		{name: "bin not executable", entries: []extractEntry{file("bin/readme")}, want: "bin/ holds no executable regular file"},
		{name: "bin only a symlink to an executable", entries: []extractEntry{{Name: "lib/app", Mode: 0o755, Body: "x"}, symlink("bin/app", "../lib/app")}, want: "bin/ holds no executable"},
		{name: "executable only in a subdir", entries: []extractEntry{{Name: "bin/sub/app", Mode: 0o755, Body: "x"}}, want: "bin/ holds no executable"},
		{name: "bin is a symlink", entries: []extractEntry{{Name: "real/app", Mode: 0o755, Body: "x"}, symlink("bin", "real")}, want: "no bin/ directory"},
		{name: "empty archive", entries: []extractEntry{}, want: "no bin/ directory"},
		{name: "not gzip", file: []byte("<html>captive portal</html>"), want: "is not gzip"},
		{name: "truncated", file: goodGz[:len(goodGz)/2], want: "reading the tar stream"},
		{name: "not tar", raw: bytes.Repeat([]byte("garbage!"), 200), want: "reading the tar stream"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, tree := extractSetup(t)
			data := tc.file
			if data == nil {
				raw := tc.raw
				if raw == nil {
					raw = extractTar(t, tc.entries...)
				}
				data = extractGzip(t, raw)
			}
			tarGz, sum := extractWriteFile(t, filepath.Join(base, "dl"), data)
			before := extractSnapshot(t, base)

			err := install.Extract(tarGz, tree, extractVersion, sum, tc.lim)
			if !errors.Is(err, install.ErrHostileArchive) {
				t.Fatalf("Extract = %v, want ErrHostileArchive", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if diff := cmp.Diff(before, extractSnapshot(t, base)); diff != "" {
				t.Errorf("a rejected archive changed the host (-before +after):\n%s", diff)
			}
			extractNotExist(t, tree.VersionDir(extractVersion))
		})
	}
}

// extractPAXFlood is n PAX extended headers of about size bytes each in a
// row, then a valid release: archive/tar reads all of them inside one Next
// call, so only a cap on the decompressed stream sees them.
func extractPAXFlood(t testing.TB, n, size int) []byte {
	t.Helper()
	rec := extractPAXRecord("comment", strings.Repeat("a", size))
	var buf bytes.Buffer
	for range n {
		buf.Write(extractRawHeader("PaxHeaders/flood", tar.TypeXHeader, int64(len(rec))))
		buf.WriteString(rec)
		buf.Write(make([]byte, (512-len(rec)%512)%512))
	}
	buf.Write(extractTar(t, extractBin))
	return buf.Bytes()
}

// extractPAXRecord formats "<len> key=value\n", where len counts itself.
func extractPAXRecord(k, v string) string {
	n := len(k) + len(v) + 3
	size := n + len(strconv.Itoa(n))
	if len(strconv.Itoa(size)) != len(strconv.Itoa(n)) {
		size++
	}
	return fmt.Sprintf("%d %s=%s\n", size, k, v)
}

// extractRawHeader builds a ustar header by hand, for entries tar.Writer
// would not write.
func extractRawHeader(name string, flag byte, size int64) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	copy(b[100:108], "0000644\x00")
	copy(b[108:116], "0000000\x00")
	copy(b[116:124], "0000000\x00")
	copy(b[124:136], fmt.Sprintf("%011o\x00", size))
	copy(b[136:148], fmt.Sprintf("%011o\x00", 1_700_000_000))
	b[156] = flag
	copy(b[257:265], "ustar\x0000")
	copy(b[148:156], "        ")
	var sum int
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

func TestExtractLimitsBoundary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entries []extractEntry
		lim     install.Limits
		ok      bool
	}{
		{name: "file at the limit", entries: []extractEntry{{Name: "bin/app", Mode: 0o755, Body: strings.Repeat("x", 100)}}, lim: install.Limits{MaxFileBytes: 100}, ok: true},
		{name: "file over the limit", entries: []extractEntry{{Name: "bin/app", Mode: 0o755, Body: strings.Repeat("x", 101)}}, lim: install.Limits{MaxFileBytes: 100}},
		{name: "total at the limit", entries: []extractEntry{extractBin, {Name: "a", Body: "1234567"}}, lim: install.Limits{MaxTotalBytes: 10}, ok: true},
		{name: "total over the limit", entries: []extractEntry{extractBin, {Name: "a", Body: "12345678"}}, lim: install.Limits{MaxTotalBytes: 10}},
		// bin, bin/app and a: the bin/ created for bin/app is an entry.
		{name: "entries at the limit", entries: []extractEntry{extractBin, {Name: "a"}}, lim: install.Limits{MaxFiles: 3}, ok: true},
		{name: "entries over the limit", entries: []extractEntry{extractBin, {Name: "a"}}, lim: install.Limits{MaxFiles: 2}},
		{name: "listed dir counted once", entries: []extractEntry{{Name: "bin", Type: tar.TypeDir}, extractBin, {Name: "a"}}, lim: install.Limits{MaxFiles: 3}, ok: true},
		{name: "path at the depth limit", entries: []extractEntry{extractBin, {Name: strings.Repeat("d/", 63) + "f"}}, ok: true},
		{name: "negative limits mean defaults", entries: []extractEntry{extractBin}, lim: install.Limits{MaxTotalBytes: -1, MaxFiles: -1, MaxFileBytes: -1}, ok: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, tree := extractSetup(t)
			tarGz, sum := extractWriteFile(t, filepath.Join(base, "dl"), extractGzip(t, extractTar(t, tc.entries...)))
			err := install.Extract(tarGz, tree, extractVersion, sum, tc.lim)
			switch {
			case tc.ok && err != nil:
				t.Errorf("Extract: %v", err)
			case !tc.ok && !errors.Is(err, install.ErrHostileArchive):
				t.Errorf("Extract = %v, want ErrHostileArchive", err)
			}
		})
	}
}

// extractDeepParents is the shape of the attack in issue 12 (point 9): few
// entries, each under depth directories of its own that the archive does
// not list, so that one entry makes depth+1 inodes.
func extractDeepParents(n, depth int) []extractEntry {
	entries := []extractEntry{extractBin}
	for i := range n {
		name := fmt.Sprintf("p%d/", i) + strings.Repeat("d/", depth-1) + "f"
		entries = append(entries, extractEntry{Name: name, Body: "x"})
	}
	return entries
}

// extractCountEntries counts what an extraction created in dir: every
// path but the root and the marker.
func extractCountEntries(t testing.TB, dir string) int {
	t.Helper()
	snap := extractSnapshot(t, dir)
	delete(snap, ".")
	delete(snap, "sha256")
	return len(snap)
}

// TestExtractEntryCapCountsImplicitDirs: MaxFiles bounds the inodes an
// extraction creates, the directories made for unlisted parents included
// (issue 12, point 9: 203 entries made 96,408 inodes).
func TestExtractEntryCapCountsImplicitDirs(t *testing.T) {
	t.Parallel()
	abc := []extractEntry{extractBin, {Name: "a/b/c/f", Body: "x"}} // bin bin/app a a/b a/b/c a/b/c/f
	tests := []struct {
		name     string
		entries  []extractEntry
		maxFiles int
		want     []string // in the error; nil: success
	}{
		{
			// bin, bin/app, then 41 per entry: p2's parents pass 100.
			name:     "deep unlisted parents",
			entries:  extractDeepParents(10, 40),
			maxFiles: 100,
			want:     []string{`entry "p2/d/d/`, `more than 100 entries, counting the parent directories created for it`},
		},
		{name: "one unlisted parent too many", entries: abc, maxFiles: 5, want: []string{`entry "a/b/c/f": more than 5 entries, counting the parent directories`}},
		{name: "unlisted parents at the cap", entries: abc, maxFiles: 6},
		{
			name:     "symlink under unlisted parents",
			entries:  []extractEntry{extractBin, {Name: "x/y/z/l", Type: tar.TypeSymlink, Link: "../../../bin/app"}},
			maxFiles: 5,
			want:     []string{`entry "x/y/z/l": more than 5 entries, counting the parent directories`},
		},
		{
			name:     "directory under unlisted parents",
			entries:  []extractEntry{extractBin, {Name: "x/y/z/", Type: tar.TypeDir}},
			maxFiles: 4,
			want:     []string{`entry "x/y/z/": more than 4 entries, counting the parent directories`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, tree := extractSetup(t)
			tarGz, sum := extractWriteFile(t, filepath.Join(base, "dl"), extractGzip(t, extractTar(t, tc.entries...)))
			before := extractSnapshot(t, base)

			err := install.Extract(tarGz, tree, extractVersion, sum, install.Limits{MaxFiles: tc.maxFiles})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Extract: %v", err)
				}
				if n := extractCountEntries(t, tree.VersionDir(extractVersion)); n > tc.maxFiles {
					t.Errorf("Extract created %d entries, more than MaxFiles %d", n, tc.maxFiles)
				}
				return
			}
			if err == nil {
				t.Fatalf("Extract succeeded and created %d entries from %d in the archive; want it stopped at MaxFiles %d",
					extractCountEntries(t, tree.VersionDir(extractVersion)), len(tc.entries), tc.maxFiles)
			}
			if !errors.Is(err, install.ErrHostileArchive) {
				t.Errorf("Extract = %v, want ErrHostileArchive", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if diff := cmp.Diff(before, extractSnapshot(t, base)); diff != "" {
				t.Errorf("a rejected archive changed the host (-before +after):\n%s", diff)
			}
		})
	}
}

// extractSparse is a regular file in the PAX GNU sparse 1.0 format, as GNU
// tar writes it and tar.Writer cannot: realSize bytes of which only the
// last is stored, after the sparse map at the start of the data. The rest
// is a hole, which archive/tar's Reader returns as zeros. No end marker:
// append an extractTar stream.
func extractSparse(name string, realSize int64) []byte {
	pad := func(b []byte) []byte { return append(b, make([]byte, (512-len(b)%512)%512)...) }
	recs := extractPAXRecord("GNU.sparse.major", "1") +
		extractPAXRecord("GNU.sparse.minor", "0") +
		extractPAXRecord("GNU.sparse.name", name) +
		extractPAXRecord("GNU.sparse.realsize", strconv.FormatInt(realSize, 10))
	data := append(pad(fmt.Appendf(nil, "1\n%d\n1\n", realSize-1)), 'x')
	var b []byte
	b = append(b, extractRawHeader("PaxHeaders/"+name, tar.TypeXHeader, int64(len(recs)))...)
	b = append(b, pad([]byte(recs))...)
	b = append(b, extractRawHeader("GNUSparseFile.0/"+name, tar.TypeReg, int64(len(data)))...)
	return append(b, pad(data)...)
}

// TestExtractSpaceBound: what an extraction writes is bounded by the free
// space of the versions dir when it starts, less the margin, counted on
// the bytes written, whatever the tarball's size or its headers say (issue
// 12, point 10: 1.9 GB of zeros from a 1.9 MB tarball, and 2×900 MiB of
// sparse files from 1.2 KB, were written). FreeSpace simulates the disk.
func TestExtractSpaceBound(t *testing.T) {
	t.Parallel()
	const margin = install.DefaultSpaceMargin
	sparse := func(sizes ...int64) []byte {
		var raw []byte
		for i, n := range sizes {
			raw = append(raw, extractSparse(fmt.Sprintf("big%d", i+1), n)...)
		}
		return append(raw, extractTar(t, extractBin)...)
	}
	empties := []extractEntry{extractBin}
	for i := range 20 {
		empties = append(empties, extractEntry{Name: fmt.Sprintf("e%d", i)})
	}
	statfsErr := errors.New("statfs: input/output error")

	tests := []struct {
		name    string
		raw     []byte // the tar stream
		free    uint64 // what FreeSpace answers
		freeErr error  // or its error
		lim     install.Limits
		wantIs  error                           // nil: success
		want    []string                        // in the error
		check   func(t *testing.T, vdir string) // on success
	}{
		{
			name:   "gzip bomb on a small disk",
			raw:    extractTar(t, extractBin, extractEntry{Name: "zeros", Body: string(make([]byte, 8<<20))}),
			free:   margin + 1<<20,
			wantIs: install.ErrNoSpace,
			want:   []string{`entry "zeros": the release needs more than the 1048576 bytes it may use there`, fmt.Sprintf("(%d free when extraction began, less the %d-byte margin", margin+1<<20, margin)},
		},
		{
			name:   "sparse files on a small disk",
			raw:    sparse(48<<20, 48<<20),
			free:   margin + 1<<20,
			wantIs: install.ErrNoSpace,
			want:   []string{`entry "big1": the release needs more than the 1048576 bytes`},
		},
		{
			name:   "sparse files count at their size against MaxTotalBytes",
			raw:    sparse(6<<20, 6<<20),
			free:   1 << 40,
			lim:    install.Limits{MaxTotalBytes: 8 << 20},
			wantIs: install.ErrHostileArchive,
			want:   []string{`entry "big2": the archive expands to more than 8388608 bytes`},
		},
		{
			name: "sparse files that fit",
			raw:  sparse(1<<20, 1<<20),
			free: margin + 3<<20,
			lim:  install.Limits{MaxTotalBytes: 2<<20 + 3},
			check: func(t *testing.T, vdir string) {
				want := append(make([]byte, 1<<20-1), 'x') // the hole written as zeros
				for _, name := range []string{"big1", "big2"} {
					if !bytes.Equal(readFile(t, filepath.Join(vdir, name)), want) {
						t.Errorf("%s is not %d zeros and an x", name, len(want)-1)
					}
				}
			},
		},
		{
			name:   "every entry takes a block",
			raw:    extractTar(t, empties...),
			free:   margin + 10*4096,
			wantIs: install.ErrNoSpace,
			want:   []string{`entry "e7": the release needs more than the 40960 bytes`},
		},
		{
			name:   "own margin",
			raw:    extractTar(t, extractBin, extractEntry{Name: "data", Body: strings.Repeat("d", 600<<10)}),
			free:   1 << 20,
			lim:    install.Limits{SpaceMargin: 512 << 10},
			wantIs: install.ErrNoSpace,
			want:   []string{`entry "data": the release needs more than the 524288 bytes`, "less the 524288-byte margin"},
		},
		{
			name:   "PAX header flood bounded by the free space",
			raw:    extractPAXFlood(t, 3, 900<<10),
			free:   margin + 64<<10,
			lim:    install.Limits{MaxFiles: 10},
			wantIs: install.ErrHostileArchive,
			want:   []string{"the tar stream expands to more than"},
		},
		{
			name:   "no space at all",
			raw:    extractTar(t, extractGoodRelease()...),
			free:   margin,
			wantIs: install.ErrNoSpace,
			want:   []string{fmt.Sprintf("%d bytes free, %d of them to be kept free; free some space", margin, margin)},
		},
		{
			name:    "free space unknown",
			raw:     extractTar(t, extractGoodRelease()...),
			freeErr: statfsErr,
			wantIs:  statfsErr,
			want:    []string{"free space in "},
		},
		{name: "fits", raw: extractTar(t, extractGoodRelease()...), free: margin + 1<<20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, tree := extractSetup(t)
			tarGz, sum := extractWriteFile(t, filepath.Join(base, "dl"), extractGzip(t, tc.raw))
			before := extractSnapshot(t, base)
			var asked []string
			lim := tc.lim
			lim.FreeSpace = func(dir string) (uint64, error) {
				asked = append(asked, dir)
				return tc.free, tc.freeErr
			}

			start := time.Now()
			err := install.Extract(tarGz, tree, extractVersion, sum, lim)
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Extract took %v", d) // it wrote far more than it may
			}
			if diff := cmp.Diff([]string{tree.VersionsDir()}, asked); diff != "" {
				t.Errorf("FreeSpace asked about (-want +got):\n%s", diff)
			}
			if tc.wantIs == nil {
				if err != nil {
					t.Fatalf("Extract: %v", err)
				}
				if tc.check != nil {
					tc.check(t, tree.VersionDir(extractVersion))
				}
				return
			}
			if err == nil {
				t.Fatalf("Extract succeeded, writing %d bytes from a %d-byte tarball; want %v",
					extractDirBytes(t, tree.VersionDir(extractVersion)), len(extractGzip(t, tc.raw)), tc.wantIs)
			}
			if !errors.Is(err, tc.wantIs) {
				t.Errorf("Extract = %v, want %v", err, tc.wantIs)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			// Nothing left: no version dir, no temp dir, nothing else
			// changed.
			if diff := cmp.Diff(before, extractSnapshot(t, base)); diff != "" {
				t.Errorf("a failed Extract changed the host (-before +after):\n%s", diff)
			}
		})
	}
}

// extractDirBytes is the size of the regular files under dir.
func extractDirBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n += fi.Size()
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return n
}

func TestExtractBadArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		version   string
		sum       func(good string) string
		wantIs    error
		wantInErr string
	}{
		{name: "traversal version", version: "../x", sum: func(s string) string { return s }, wantInErr: `extract "../x"`},
		{name: "version with v", version: "v2.0.0", sum: func(s string) string { return s }, wantInErr: "without the leading"},
		{name: "empty version", version: "", sum: func(s string) string { return s }, wantInErr: "empty"},
		{name: "checksum not hex", version: extractVersion, sum: func(string) string { return strings.Repeat("z", 64) }, wantInErr: "not a sha256"},
		{name: "checksum short", version: extractVersion, sum: func(s string) string { return s[:63] }, wantInErr: "not a sha256"},
		{name: "checksum of another file", version: extractVersion, sum: func(string) string { return strings.Repeat("0", 64) }, wantIs: install.ErrBadChecksum},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, tree := extractSetup(t)
			tarGz, sum := extractWriteFile(t, filepath.Join(base, "dl"), extractGzip(t, extractTar(t, extractGoodRelease()...)))
			before := extractSnapshot(t, base)
			err := install.Extract(tarGz, tree, tc.version, tc.sum(sum), install.Limits{})
			if err == nil {
				t.Fatal("Extract succeeded")
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Extract = %v, want %v", err, tc.wantIs)
			}
			if !strings.Contains(err.Error(), tc.wantInErr) {
				t.Errorf("error %q does not say %q", err, tc.wantInErr)
			}
			if diff := cmp.Diff(before, extractSnapshot(t, base)); diff != "" {
				t.Errorf("a failed Extract changed the host (-before +after):\n%s", diff)
			}
		})
	}
}

// TestExtractReplacesIncomplete: what a crash left behind is replaced.
func TestExtractReplacesIncomplete(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup map[string]string // under versions/
	}{
		{name: "version dir without marker", setup: map[string]string{
			extractVersion + "/bin/app":                    "half-written",
			extractVersion + "/stale/file":                 "from a crashed run",
			".extract-" + extractVersion + "-1234/bin/app": "temp dir of a crashed run",
		}},
		{name: "version path is a file", setup: map[string]string{extractVersion: "not a dir"}},
		{name: "only a stale temp dir", setup: map[string]string{".extract-" + extractVersion + "-99/x": "x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, tree := extractSetup(t)
			// Another version's temp dir is not ours to remove.
			tc.setup[".extract-"+extractVersion+"-rc.1-777/x"] = "another version's"
			for name, content := range tc.setup {
				p := filepath.Join(tree.VersionsDir(), name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			tarGz, sum := extractWriteFile(t, filepath.Join(base, "dl"), extractGzip(t, extractTar(t, extractGoodRelease()...)))
			if err := install.Extract(tarGz, tree, extractVersion, sum, install.Limits{}); err != nil {
				t.Fatalf("Extract: %v", err)
			}
			want := extractGoodTree()
			want["sha256"] = fmt.Sprintf("file %o %q", 0o644&^umask, sum+"\n")
			if diff := cmp.Diff(want, extractSnapshot(t, tree.VersionDir(extractVersion))); diff != "" {
				t.Errorf("version dir (-want +got):\n%s", diff)
			}
			wantNames := []string{".extract-" + extractVersion + "-rc.1-777", ".not-an-extract", "1.0.0", extractVersion}
			if diff := cmp.Diff(wantNames, dirNames(t, tree.VersionsDir())); diff != "" {
				t.Errorf("versions/ (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExtractKeepsComplete: a complete extraction is never redone (it may
// be the running version); one of another tarball is reported, not
// replaced.
func TestExtractKeepsComplete(t *testing.T) {
	t.Parallel()
	const sum = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	tests := []struct {
		name   string
		marker string
		wantIs error
	}{
		{name: "same checksum", marker: sum + "\n"},
		{name: "same checksum without newline", marker: sum},
		{name: "another checksum", marker: strings.Repeat("1", 64) + "\n", wantIs: install.ErrCorrupt},
		{name: "garbage marker", marker: "garbage", wantIs: install.ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, tree := extractSetup(t)
			vdir := tree.VersionDir(extractVersion)
			if err := os.MkdirAll(filepath.Join(vdir, "bin"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(vdir, "bin/app"), []byte("installed"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(tree.MarkerPath(extractVersion), []byte(tc.marker), 0o644); err != nil {
				t.Fatal(err)
			}
			before := extractSnapshot(t, base)
			// The tarball does not even exist: a complete version is not
			// looked at again.
			err := install.Extract(filepath.Join(base, "missing.tar.gz"), tree, extractVersion, sum, install.Limits{})
			if tc.wantIs == nil && err != nil {
				t.Errorf("Extract: %v", err)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Extract = %v, want %v", err, tc.wantIs)
			}
			if diff := cmp.Diff(before, extractSnapshot(t, base)); diff != "" {
				t.Errorf("Extract changed a complete version (-before +after):\n%s", diff)
			}
		})
	}
}

// extractFuzzSeeds are the FuzzExtract seeds: raw tar streams.
func extractFuzzSeeds(t testing.TB) map[string][]byte {
	return map[string][]byte{
		"good":           extractTar(t, extractGoodRelease()...),
		"minimal":        extractTar(t, extractBin),
		"traversal":      extractTar(t, extractBin, extractEntry{Name: "../evil", Body: "x"}),
		"absolute":       extractTar(t, extractBin, extractEntry{Name: "/tmp/evil", Body: "x"}),
		"symlink-escape": extractTar(t, extractBin, extractEntry{Name: "self", Type: tar.TypeSymlink, Link: "."}, extractEntry{Name: "esc", Type: tar.TypeSymlink, Link: "self/.."}),
		"symlink-write-through": extractTar(t, extractBin,
			extractEntry{Name: "lib", Type: tar.TypeSymlink, Link: "bin"}, extractEntry{Name: "lib/x", Body: "x"}),
		"hardlink-out": extractTar(t, extractBin, extractEntry{Name: "h", Type: tar.TypeLink, Link: "../../outside/secret"}),
		"device":       extractTar(t, extractBin, extractEntry{Name: "null", Type: tar.TypeChar}),
		"setuid":       extractTar(t, extractEntry{Name: "bin/su", Mode: 0o4755, Body: "x"}),
		// 5 entries, 305 inodes: over FuzzExtract's MaxFiles of 200.
		"implicit-dirs": extractTar(t, extractDeepParents(5, 60)...),
		// 2 MiB written from 2 KiB: over FuzzExtract's MaxTotalBytes.
		"sparse": append(extractSparse("big", 2<<20), extractTar(t, extractBin)...),
	}
}

// TestExtractFuzzSeeds keeps testdata/fuzz/FuzzExtract in step with
// extractFuzzSeeds; -gen-seeds rewrites the files.
func TestExtractFuzzSeeds(t *testing.T) {
	t.Parallel()
	checkFuzzSeeds(t, "FuzzExtract", extractFuzzSeeds(t))
}

// checkFuzzSeeds compares testdata/fuzz/<fuzz>/seed-<name> with each seed,
// or with -gen-seeds writes them. Other files there (regression inputs the
// fuzzer found) are left alone.
func checkFuzzSeeds[S string | []byte](t *testing.T, fuzz string, seeds map[string]S) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", fuzz)
	for name, data := range seeds {
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		path := filepath.Join(dir, "seed-"+name)
		if *genSeeds {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%v (run go test -run %s -gen-seeds)", err, t.Name())
			continue
		}
		if string(got) != want {
			t.Errorf("%s is stale (run go test -run %s -gen-seeds)", path, t.Name())
		}
	}
}

// FuzzExtract: whatever the tar stream, Extract does not panic, writes
// nothing outside the version's own dir, and either fails leaving no
// version dir or leaves a complete one.
func FuzzExtract(f *testing.F) {
	lim := install.Limits{MaxTotalBytes: 1 << 20, MaxFiles: 200, MaxFileBytes: 256 << 10}
	f.Fuzz(func(t *testing.T, stream []byte) {
		base, tree := extractSetup(t)
		tarGz, sum := extractWriteFile(t, filepath.Join(base, "dl"), extractGzip(t, stream))
		before := extractSnapshot(t, base)

		err := install.Extract(tarGz, tree, extractVersion, sum, lim)

		after := extractSnapshot(t, base)
		vrel := filepath.Join("root", "versions", extractVersion)
		var got map[string]string // the version dir, relative to it
		for p, v := range after {
			if p == vrel || strings.HasPrefix(p, vrel+"/") {
				if got == nil {
					got = map[string]string{}
				}
				got[strings.TrimPrefix(strings.TrimPrefix(p, vrel), "/")] = v
				delete(after, p)
			}
		}
		if diff := cmp.Diff(before, after); diff != "" {
			t.Fatalf("Extract (err %v) changed the host outside its version dir (-before +after):\n%s", err, diff)
		}
		if err != nil {
			if got != nil {
				t.Fatalf("Extract failed (%v) but left a version dir: %v", err, got)
			}
			return
		}
		if want := fmt.Sprintf("file %o %q", 0o644&^umask, sum+"\n"); got["sha256"] != want {
			t.Fatalf("Extract succeeded; marker is %q, want %q", got["sha256"], want)
		}
		if got["bin"] != "dir 755" {
			t.Fatalf("Extract succeeded without a bin/ dir: %v", got)
		}
		for p, v := range got {
			if strings.HasPrefix(v, "other") {
				t.Fatalf("Extract created %s: %s", p, v)
			}
		}
	})
}
