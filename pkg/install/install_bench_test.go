package install_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/install"
)

const benchVersion = "2.0.0"

// benchShape is what a benchmark release holds: a few large binaries of
// pseudo-random bytes (gzip cannot shrink them, as it barely shrinks real
// ones) and many small text files.
type benchShape struct {
	bins       map[string]int64 // name under the release root → size
	smallFiles int
	smallSize  int
}

// bench100MB is 100 MiB of content: 92 MiB in three binaries, 8 MiB in
// 2,048 files of 4 KiB spread over 64 directories.
var bench100MB = benchShape{
	bins:       map[string]int64{"bin/app": 48 << 20, "bin/app-migrate": 16 << 20, "lib/libapp.so": 28 << 20},
	smallFiles: 2048,
	smallSize:  4 << 10,
}

// benchRelease is a release tarball on disk and the server that serves it
// as a Fetcher expects: the tarball and its .sha256.
type benchRelease struct {
	tarGz   string
	sum     string
	size    int64
	files   int
	fetcher *install.Fetcher
}

// newBenchRelease writes the release of shape under dir, byte for byte the
// same on every run, and serves it from a real HTTP server.
func newBenchRelease(tb testing.TB, dir string, shape benchShape) benchRelease {
	tb.Helper()
	name := "app-" + benchVersion + ".tar.gz"
	rel := benchRelease{tarGz: filepath.Join(dir, name)}
	out, err := os.Create(rel.tarGz)
	if err != nil {
		tb.Fatal(err)
	}
	h := sha256.New()
	zw := gzip.NewWriter(io.MultiWriter(out, h))
	tw := tar.NewWriter(zw)
	mtime := time.Unix(1_700_000_000, 0)
	add := func(name string, mode int64, size int64, body io.Reader) {
		hdr := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: size, ModTime: mtime}
		if body == nil {
			hdr = &tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode, ModTime: mtime}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			tb.Fatal(err)
		}
		if body != nil {
			if _, err := io.CopyN(tw, body, size); err != nil {
				tb.Fatal(err)
			}
		}
		rel.files++
	}
	random := rand.NewChaCha8([32]byte{'f', 'l', 'e', 'e', 't', 'w', 'a', 'v', 'e'})
	for _, d := range []string{"bin", "lib", "share", "share/assets"} {
		add(d, 0o755, 0, nil)
	}
	for _, name := range []string{"bin/app", "bin/app-migrate", "lib/libapp.so"} {
		if size, ok := shape.bins[name]; ok {
			add(name, 0o755, size, random)
		}
	}
	const perDir = 32
	for i := range shape.smallFiles {
		if i%perDir == 0 {
			add(fmt.Sprintf("share/assets/%02d", i/perDir), 0o755, 0, nil)
		}
		var b strings.Builder
		for line := 0; b.Len() < shape.smallSize; line++ {
			fmt.Fprintf(&b, "asset %d line %d: %016x\n", i, line, random.Uint64())
		}
		body := b.String()[:shape.smallSize]
		add(fmt.Sprintf("share/assets/%02d/file-%04d.txt", i/perDir, i), 0o644, int64(len(body)), strings.NewReader(body))
	}
	for _, c := range []io.Closer{tw, zw} {
		if err := c.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	fi, err := out.Stat()
	if err != nil {
		tb.Fatal(err)
	}
	if err := out.Close(); err != nil {
		tb.Fatal(err)
	}
	rel.size = fi.Size()
	rel.sum = hex.EncodeToString(h.Sum(nil))
	if err := os.WriteFile(rel.tarGz+".sha256", []byte(rel.sum+"  "+name+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	tb.Cleanup(srv.Close)
	rel.fetcher = &install.Fetcher{Client: srv.Client(), URLTemplate: srv.URL + "/app-{{.Version}}.tar.gz"}
	return rel
}

// benchTimes is where one install spent its time.
type benchTimes struct{ fetch, extract, link, cpu time.Duration }

// installOurs is Installer.ensureVersion and the link swap of
// Installer.Install: download and verify against the published sha256,
// extract (which hashes again, checks and fsyncs), remove the download,
// link bin/.
func installOurs(ctx context.Context, rel benchRelease, tree install.Tree) (benchTimes, error) {
	var t benchTimes
	start := time.Now()
	dl, err := rel.fetcher.Fetch(ctx, benchVersion, tree.VersionsDir())
	if err != nil {
		return t, err
	}
	t.fetch = time.Since(start)
	start = time.Now()
	if err := install.Extract(dl.Path, tree, benchVersion, dl.SHA256, install.Limits{}); err != nil {
		return t, err
	}
	if err := os.Remove(dl.Path); err != nil {
		return t, err
	}
	t.extract = time.Since(start)
	start = time.Now()
	if _, err := tree.Link(benchVersion); err != nil {
		return t, err
	}
	t.link = time.Since(start)
	return t, nil
}

// installBaseline is `sha256sum file && tar xzf file -C dir`: the same
// verification and unpacking, by the standard tools, with no download, no
// fsync and no checks.
// It returns the CPU time the tools used (tar's includes its gzip).
func installBaseline(ctx context.Context, rel benchRelease, dir string) (cpu time.Duration, err error) {
	sum := exec.CommandContext(ctx, "sha256sum", rel.tarGz)
	out, err := sum.Output()
	if err != nil {
		return 0, fmt.Errorf("sha256sum: %w", err)
	}
	if got, _, _ := strings.Cut(string(out), " "); got != rel.sum {
		return 0, fmt.Errorf("sha256sum says %q, want %s", out, rel.sum)
	}
	tar := exec.CommandContext(ctx, "tar", "xzf", rel.tarGz, "-C", dir)
	if out, err := tar.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("tar xzf: %w: %s", err, out)
	}
	for _, ps := range []*os.ProcessState{sum.ProcessState, tar.ProcessState} {
		cpu += ps.UserTime() + ps.SystemTime()
	}
	return cpu, nil
}

// processCPU is the CPU time this process has used so far: ours, and the
// test server's, which is no part of the baseline.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchNeedTools(tb testing.TB) {
	tb.Helper()
	for _, tool := range []string{"sha256sum", "tar", "gzip"} {
		if _, err := exec.LookPath(tool); err != nil {
			tb.Skipf("the baseline needs %s in PATH: %v", tool, err)
		}
	}
}

// BenchmarkInstall100MB: installing a 100 MiB release (download over
// loopback HTTP and verify its .sha256, extract, link) against the baseline
// `sha256sum file && tar xzf file` on the same tarball.
//
// baseline times the tools alone. ours times our install and reports where
// the time went (fetch, extract, link) and x-baseline: its time over that of
// a baseline run just before each of its iterations (untimed, reported as
// baseline-s/op), so that each ratio compares two runs a few seconds apart
// on a machine whose load changes. (-count repeats each sub-benchmark in
// turn, so ours cannot pair with the baseline sub-benchmark.) Both report
// cpu-s/op, the CPU time used (the tools'; ours includes the test server's),
// which a busy machine disturbs less than the time.
//
//	go test -run '^$' -bench Install100MB -benchtime 1x -count 5 ./pkg/install/
func BenchmarkInstall100MB(b *testing.B) {
	benchNeedTools(b)
	ctx := b.Context()
	rel := newBenchRelease(b, b.TempDir(), bench100MB)
	work := b.TempDir()
	// baselineOnce runs the baseline into a fresh dir; b's timer, stopped
	// on entry, runs only around it when timed.
	baselineOnce := func(b *testing.B, i int, timed bool) (wall, cpu time.Duration) {
		dir := filepath.Join(work, fmt.Sprintf("baseline-%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if timed {
			b.StartTimer()
		}
		start := time.Now()
		cpu, err := installBaseline(ctx, rel, dir)
		wall = time.Since(start)
		if timed {
			b.StopTimer()
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		return wall, cpu
	}
	b.Run("baseline", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(rel.size)
		var cpu time.Duration
		b.StopTimer()
		for i := range b.N {
			_, c := baselineOnce(b, i, true)
			cpu += c
		}
		b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	})
	b.Run("ours", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(rel.size)
		var total benchTimes
		var paired time.Duration
		for i := range b.N {
			b.StopTimer()
			w, _ := baselineOnce(b, i, false)
			paired += w
			host := filepath.Join(work, fmt.Sprintf("ours-%d", i))
			tree := install.Tree{Root: filepath.Join(host, "root"), BinDir: filepath.Join(host, "bin")}
			cpu0 := processCPU(b)
			b.StartTimer()
			t, err := installOurs(ctx, rel, tree)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			total.cpu += processCPU(b) - cpu0
			total.fetch += t.fetch
			total.extract += t.extract
			total.link += t.link
			if err := os.RemoveAll(host); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		n := float64(b.N)
		b.ReportMetric(total.fetch.Seconds()/n, "fetch-s/op")
		b.ReportMetric(total.extract.Seconds()/n, "extract-s/op")
		b.ReportMetric(total.link.Seconds()/n, "link-s/op")
		b.ReportMetric(total.cpu.Seconds()/n, "cpu-s/op")
		b.ReportMetric(paired.Seconds()/n, "baseline-s/op")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(paired.Nanoseconds()), "x-baseline")
	})
}

// TestInstallBenchSmall runs both sides of BenchmarkInstall100MB once on a
// small release, so that the benchmark keeps working and keeps comparing
// like with like: the same files, modes and content on both sides, and our
// links into them.
func TestInstallBenchSmall(t *testing.T) {
	t.Parallel()
	benchNeedTools(t)
	ctx := t.Context()
	rel := newBenchRelease(t, t.TempDir(), benchShape{
		bins:       map[string]int64{"bin/app": 1 << 20, "bin/app-migrate": 64 << 10, "lib/libapp.so": 256 << 10},
		smallFiles: 70,
		smallSize:  4 << 10,
	})
	host := t.TempDir()
	tree := install.Tree{Root: filepath.Join(host, "root"), BinDir: filepath.Join(host, "bin")}
	if _, err := installOurs(ctx, rel, tree); err != nil {
		t.Fatalf("ours: %v", err)
	}
	base := t.TempDir()
	if _, err := installBaseline(ctx, rel, base); err != nil {
		t.Fatalf("baseline: %v", err)
	}

	// Modes as the umask leaves them: tar applies it unless run as root,
	// Extract never does; the completion marker is ours alone.
	masked := func(snap map[string]string) map[string]string {
		for p, v := range snap {
			var kind string
			var mode os.FileMode
			if _, err := fmt.Sscanf(v, "%s %o", &kind, &mode); err == nil && (kind == "file" || kind == "dir") {
				snap[p] = fmt.Sprintf("%s %o%s", kind, mode&^umask, strings.TrimPrefix(v, fmt.Sprintf("%s %o", kind, mode)))
			}
		}
		return snap
	}
	want := masked(extractSnapshot(t, base))
	if len(want) != rel.files+1 { // and the root
		t.Fatalf("tar extracted %d entries, the release has %d", len(want)-1, rel.files)
	}
	got := masked(extractSnapshot(t, tree.VersionDir(benchVersion)))
	delete(got, "sha256")
	want["."] = got["."] // a temp dir, and ours
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("our extraction differs from tar's (-tar +ours):\n%s", diff)
	}
	versionBin := filepath.Join(tree.VersionDir(benchVersion), "bin")
	wantLinks := map[string]string{
		"app":         "symlink " + filepath.Join(versionBin, "app"),
		"app-migrate": "symlink " + filepath.Join(versionBin, "app-migrate"),
	}
	links := extractSnapshot(t, tree.BinDir)
	delete(links, ".")
	if diff := cmp.Diff(wantLinks, links); diff != "" {
		t.Errorf("bin dir (-want +got):\n%s", diff)
	}
	if names := dirNames(t, tree.VersionsDir()); !cmp.Equal(names, []string{benchVersion}) {
		t.Errorf("versions dir holds %v, want only %s (the download removed)", names, benchVersion)
	}
}
