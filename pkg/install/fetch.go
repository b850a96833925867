package install

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/template"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// DefaultSpaceMargin is kept free on top of what a release needs, so that
	// an update never fills the disk the app and its database live on.
	DefaultSpaceMargin = 64 << 20

	// spaceFactor: a release needs its tarball (1×) plus the extracted tree,
	// counted as 2× the tarball because gzip shrinks Go binaries to about half
	// their size. Extract's Limits are the hard ceiling; this is the cheap
	// check that refuses to start a download that cannot finish.
	spaceFactor = 3

	// The checksum and signature files are tiny; a server that sends more
	// is not serving them.
	maxChecksumFileBytes  = 4 << 10
	maxSignatureFileBytes = 1 << 10
)

// Fetcher downloads release tarballs and verifies them against their
// published sha256 and, when PublicKey is set, its Ed25519 signature.
type Fetcher struct {
	// Client makes the requests; nil means http.DefaultClient. Fetch's ctx,
	// StallTimeout and Deadline bound every request: a Client.Timeout is not
	// needed, and one shorter than Deadline cuts a slow but moving download.
	Client *http.Client
	// URLTemplate is a text/template for the tarball URL, with {{.Version}},
	// {{.OS}} and {{.Arch}}. The checksum is at URL+".sha256", the signature
	// at URL+".sig".
	URLTemplate string
	// PublicKey, when non-nil, makes a valid signature mandatory: at
	// URL+".sig", Ed25519 over the release's Statement (app, version, file
	// name, size, sha256), which Fetch builds from what it expects and
	// downloads, never from what the site says it is.
	PublicKey ed25519.PublicKey
	// App is the app name signatures must name; "" means the one the
	// tarball's file name implies (AppNameFromFile: "app.tar.gz" → "app").
	App string
	// Progress receives a progress line at most every 500ms while the
	// tarball downloads; nil means none. Pass a terminal only: the lines
	// overwrite each other with "\r".
	Progress io.Writer
	// FreeSpace reports the bytes available to an unprivileged user in dir;
	// nil means statfs(2). It is a seam for tests.
	FreeSpace func(dir string) (uint64, error)
	// SpaceMargin is kept free beyond what the release needs; 0 means
	// DefaultSpaceMargin.
	SpaceMargin int64

	// StallTimeout and MinProgress say when a server has stalled: every
	// request (HEAD, .sha256, .sig, tarball) must get its response headers
	// within StallTimeout, and then MinProgress more bytes within
	// StallTimeout of the headers or of the previous MinProgress bytes, until
	// the body is complete. A dead server and a trickle that only keeps the
	// connection open both fail within about StallTimeout; a slow but moving
	// download is left to Deadline. 0 means DefaultStallTimeout and
	// DefaultMinProgress; a negative StallTimeout turns the check off.
	StallTimeout time.Duration
	MinProgress  int64
	// Deadline bounds a whole Fetch, every request included; 0 means
	// DefaultDeadline, negative none.
	Deadline time.Duration
	// Clock times StallTimeout, Deadline and progress reports; zero means
	// the wall clock.
	Clock Clock
	// Log, when set, gets a "downloading" line when the tarball's transfer
	// starts, then, unless Progress shows the figures on a terminal, one
	// every ProgressEvery with the bytes received, the rate and the time
	// left, and a "downloaded" line at the end: a daemon's record that the
	// download moves, at a rate a fleet's log pipeline can take.
	Log *slog.Logger
	// OnProgress, when set, gets the tarball transfer's figures when it
	// starts, every ProgressEvery, and once it is complete (the Installer
	// records them in the journal for 'agentd status', and passes them on
	// to the OnProgress of its Fetcher, for agentd's metrics). It runs in the
	// downloading goroutine: it must be quick, and cannot fail the download.
	OnProgress func(DownloadProgress)
	// ProgressEvery is how often Log and OnProgress hear of a moving
	// download; 0 means DefaultProgressEvery.
	ProgressEvery time.Duration

	// Resolve, when set, is repository mode: it names the tarball of a
	// version for this host from a release repository's verified metadata
	// (agentd plugs a TUF client in here; pkg/install knows none), and is
	// used instead of URLTemplate, HEAD, .sha256 and .sig. The download
	// keeps the other rules (stall, deadline, resume, free space,
	// progress), must be exactly Length bytes (never more are read) and
	// hash to SHA256; a file that is not is the repository's (or its
	// mirror's) fault: ErrRepository, an infrastructure failure, never
	// ErrBadChecksum. Resolve's own errors should be ErrRepository
	// (RepositoryError) unless ctx ended; Fetch reports ctx's cause for it
	// then.
	Resolve func(ctx context.Context, version string) (ResolvedTarget, error)
}

// ResolvedTarget is a release file as a repository's verified metadata
// names it: where to download it, its exact length and its sha256.
type ResolvedTarget struct {
	URL    string
	Length int64
	// SHA256 is lowercase hex.
	SHA256 string
}

// Download is a verified release tarball on disk.
type Download struct {
	// Path is <dir>/.download-<version>.tar.gz.
	Path string
	// SHA256 is the tarball's checksum, lowercase hex, as published and as
	// computed.
	SHA256 string
	// Size is the tarball's length in bytes.
	Size int64
}

// URL renders the tarball URL of version for this host's OS and
// architecture.
func (f *Fetcher) URL(version string) (string, error) {
	if err := checkVersion(version); err != nil {
		return "", err
	}
	tmpl, err := template.New("url_template").Option("missingkey=error").Parse(f.URLTemplate)
	if err != nil {
		return "", fmt.Errorf("url_template %q: %w", redact(f.URLTemplate), err)
	}
	var b strings.Builder
	data := struct{ Version, OS, Arch string }{version, runtime.GOOS, runtime.GOARCH}
	if err := tmpl.Execute(&b, data); err != nil {
		return "", fmt.Errorf("url_template %q: %w (it may use {{.Version}}, {{.OS}} and {{.Arch}})", redact(f.URLTemplate), err)
	}
	raw := b.String()
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("url_template %q renders %q: %w", redact(f.URLTemplate), redact(raw), err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("url_template %q renders %q: want an http:// or https:// URL", redact(f.URLTemplate), redact(raw))
	}
	return raw, nil
}

// Fetch downloads version into dir and verifies it. In order, so that a
// release that cannot be installed costs as little as possible: HEAD for the
// size, a free-space check, the .sha256 file, its signature (when PublicKey
// is set), and only then the tarball. The tarball is written to
// <dir>/.download-<version>.part, resumed from there with a Range request
// when a previous attempt was cut off, and renamed to
// <dir>/.download-<version>.tar.gz once its checksum matches.
//
// A download cut short (ErrDownload, including ErrStalled and ErrDeadline,
// or ctx) keeps the .part file for the next attempt; a checksum mismatch
// removes it.
func (f *Fetcher) Fetch(ctx context.Context, version, dir string) (Download, error) {
	if f.Resolve != nil {
		return f.fetchResolved(ctx, version, dir)
	}
	rawURL, err := f.URL(version)
	if err != nil {
		return Download{}, fmt.Errorf("fetch %q: %w", version, err)
	}
	ctx, stop := f.withDeadline(ctx)
	defer stop()
	dl, err := f.fetch(ctx, version, dir, rawURL)
	if err != nil {
		return Download{}, fmt.Errorf("fetch %s: %w", version, err)
	}
	return dl, nil
}

func (f *Fetcher) fetch(ctx context.Context, version, dir, rawURL string) (Download, error) {
	if len(f.PublicKey) != ed25519.PublicKeySize && f.PublicKey != nil {
		// ed25519.Verify panics on a key of the wrong length.
		return Download{}, fmt.Errorf("public key has %d bytes, want %d", len(f.PublicKey), ed25519.PublicKeySize)
	}
	head, err := f.head(ctx, rawURL)
	if err != nil {
		return Download{}, err
	}
	size := head.ContentLength

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Download{}, fmt.Errorf("create %s: %w", dir, err)
	}
	part := filepath.Join(dir, ".download-"+version+".part")
	have := partialSize(part, size)
	if err := f.checkSpace(dir, size, have); err != nil {
		return Download{}, err
	}

	sumFile, err := f.getSmall(ctx, rawURL+".sha256", maxChecksumFileBytes)
	if err != nil {
		return Download{}, err
	}
	want, err := parseChecksumFile(sumFile)
	if err != nil {
		return Download{}, fmt.Errorf("%w: %s: %v", ErrDownload, redact(rawURL+".sha256"), err)
	}
	// What a signature must name: this app, the version asked for, the
	// file asked for, the size HEAD announced (the download must be that
	// long) and the published checksum (the download must hash to it).
	var expect Statement
	var sig []byte
	if f.PublicKey != nil {
		if expect, err = f.expected(version, rawURL, size, want); err != nil {
			return Download{}, err
		}
		sigFile, err := f.getSmall(ctx, rawURL+".sig", maxSignatureFileBytes)
		if err != nil {
			return Download{}, err
		}
		if sig, err = decodeSignature(sigFile); err == nil {
			err = f.verify(ctx, rawURL, expect, sumFile, sig)
		}
		if err != nil {
			return Download{}, fmt.Errorf("%s: %w", redact(rawURL+".sig"), err)
		}
	}

	got, err := f.download(ctx, version, rawURL, part, size, have, head.Header)
	if err != nil {
		return Download{}, err
	}
	if got != want {
		// The bytes are wrong, not missing: resuming from them would only
		// fail again.
		_ = os.Remove(part)
		if have > 0 {
			// The fault may be the old part (a crash can leave garbage at
			// the end of a file that was never fsynced, or the file was
			// replaced since): one more try, from zero.
			if got, err = f.download(ctx, version, rawURL, part, size, 0, head.Header); err != nil {
				return Download{}, err
			}
		}
	}
	if got != want {
		_ = os.Remove(part)
		return Download{}, fmt.Errorf("%w: %s has sha256 %s, published %s", ErrBadChecksum, redact(rawURL), got, want)
	}
	if f.PublicKey != nil {
		// The statement again, from the bytes on disk: their size (the
		// download stops at, and insists on, size) and the checksum just
		// computed. It equals the one verified above; checked anyway, so
		// that what is installed is what was signed whatever the steps
		// above become.
		expect.Size, expect.SHA256 = partialSize(part, size), got
		if !ed25519.Verify(f.PublicKey, expect.Bytes(), sig) {
			_ = os.Remove(part)
			return Download{}, fmt.Errorf("%s: %w: the download is not the release signed for %s", redact(rawURL+".sig"), ErrBadSignature, version)
		}
	}
	final := filepath.Join(dir, ".download-"+version+".tar.gz")
	if err := os.Rename(part, final); err != nil {
		return Download{}, fmt.Errorf("rename %s: %w", part, err)
	}
	return Download{Path: final, SHA256: got, Size: size}, nil
}

// fetchResolved is Fetch in repository mode (Resolve).
func (f *Fetcher) fetchResolved(ctx context.Context, version, dir string) (Download, error) {
	if err := checkVersion(version); err != nil {
		return Download{}, fmt.Errorf("fetch %q: %w", version, err)
	}
	ctx, stop := f.withDeadline(ctx)
	defer stop()
	t, err := f.Resolve(ctx, version)
	if err != nil {
		if ctx.Err() != nil {
			// Cut off (abandoned, deadline, stopping): that, not the
			// repository, is why.
			return Download{}, fmt.Errorf("fetch %s: %w: %w", version, context.Cause(ctx), err)
		}
		return Download{}, fmt.Errorf("fetch %s: %w", version, err)
	}
	dl, err := f.fetchTarget(ctx, version, dir, t)
	if err != nil {
		return Download{}, fmt.Errorf("fetch %s: %w", version, err)
	}
	return dl, nil
}

func (f *Fetcher) fetchTarget(ctx context.Context, version, dir string, t ResolvedTarget) (Download, error) {
	u, err := url.Parse(t.URL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return Download{}, &RepositoryError{Reason: "bad target", Err: fmt.Errorf("target URL %q: want an http:// or https:// URL", redact(t.URL))}
	case t.Length <= 0:
		return Download{}, &RepositoryError{Reason: "bad target", Err: fmt.Errorf("%s: length %d", redact(t.URL), t.Length)}
	case !isSHA256Hex(t.SHA256):
		return Download{}, &RepositoryError{Reason: "bad target", Err: fmt.Errorf("%s: sha256 %q", redact(t.URL), t.SHA256)}
	}
	want, size := strings.ToLower(t.SHA256), t.Length
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Download{}, fmt.Errorf("create %s: %w", dir, err)
	}
	part := filepath.Join(dir, ".download-"+version+".part")
	have := partialSize(part, size)
	if err := f.checkSpace(dir, size, have); err != nil {
		return Download{}, err
	}
	wrong := func(err error) error {
		if se := (*sizeError)(nil); errors.As(err, &se) {
			return &RepositoryError{Reason: "wrong file", Err: err}
		}
		return err
	}
	got, err := f.download(ctx, version, t.URL, part, size, have, nil)
	if err != nil {
		return Download{}, wrong(err)
	}
	if got != want {
		_ = os.Remove(part)
		if have > 0 {
			// The old part may be at fault (see fetch): once more, from
			// zero.
			if got, err = f.download(ctx, version, t.URL, part, size, 0, nil); err != nil {
				return Download{}, wrong(err)
			}
		}
	}
	if got != want {
		_ = os.Remove(part)
		return Download{}, &RepositoryError{Reason: "wrong file", Err: fmt.Errorf("%s has sha256 %s, the verified metadata says %s", redact(t.URL), got, want)}
	}
	final := filepath.Join(dir, ".download-"+version+".tar.gz")
	if err := os.Rename(part, final); err != nil {
		return Download{}, fmt.Errorf("rename %s: %w", part, err)
	}
	return Download{Path: final, SHA256: got, Size: size}, nil
}

// sizeError is a download whose length is not the one expected (a
// Content-Length, a Content-Range or a body of another size): the server
// sends another file. It is what it wraps (ErrDownload); repository mode
// makes it ErrRepository.
type sizeError struct{ error }

func (e *sizeError) Unwrap() error { return e.error }

// head asks for the tarball's size. A size is required: it drives the
// space check and is how a truncated or overlong body is recognised.
func (f *Fetcher) head(ctx context.Context, rawURL string) (*http.Response, error) {
	resp, err := f.do(ctx, http.MethodHead, rawURL, nil)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{Method: http.MethodHead, URL: redact(rawURL), Code: resp.StatusCode, Status: resp.Status}
	}
	if resp.ContentLength < 0 {
		return nil, fmt.Errorf("%w: HEAD %s: no Content-Length (needed for the free-space check)", ErrDownload, redact(rawURL))
	}
	return resp, nil
}

// do sends a request held to the stall rule (see watch); closing the
// response's body ends the watch.
func (f *Fetcher) do(ctx context.Context, method, rawURL string, hdr http.Header) (*http.Response, error) {
	w := f.watch(ctx)
	req, err := http.NewRequestWithContext(w.ctx, method, rawURL, nil)
	if err != nil {
		w.close()
		return nil, fmt.Errorf("%w: %s %s: %v", ErrDownload, method, redact(rawURL), err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	// Without this, net/http asks for gzip and transparently decompresses a
	// response a misconfigured server sends with Content-Encoding: gzip,
	// which would hash the uncompressed tar instead of the published file.
	req.Header.Set("Accept-Encoding", "identity")
	client := f.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		err = w.why(err)
		w.close()
		return nil, fmt.Errorf("%w: %s %s: %w", ErrDownload, method, redact(rawURL), err)
	}
	w.gotHeaders()
	resp.Body = &watchedBody{ReadCloser: resp.Body, w: w}
	return resp, nil
}

// getSmall fetches a small file whole.
func (f *Fetcher) getSmall(ctx context.Context, rawURL string, limit int64) ([]byte, error) {
	resp, err := f.do(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{Method: http.MethodGet, URL: redact(rawURL), Code: resp.StatusCode, Status: resp.Status}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: %w", ErrDownload, redact(rawURL), err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: GET %s: longer than %d bytes", ErrDownload, redact(rawURL), limit)
	}
	return b, nil
}

// partialSize is how much of an earlier attempt can be resumed: 0 when
// there is none, or when it is longer than the tarball (not ours to trust).
func partialSize(part string, size int64) int64 {
	fi, err := os.Lstat(part)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > size {
		return 0
	}
	return fi.Size()
}

func (f *Fetcher) checkSpace(dir string, size, have int64) error {
	margin := f.SpaceMargin
	if margin <= 0 {
		margin = DefaultSpaceMargin
	}
	if size > (1<<63-1-margin)/spaceFactor {
		return fmt.Errorf("%w: the release claims %d bytes", ErrNoSpace, size)
	}
	// The bytes of a partial download are on disk already (have <= size).
	need := uint64(size*spaceFactor + margin - have)
	freeSpace := f.FreeSpace
	if freeSpace == nil {
		freeSpace = statfsFree
	}
	free, err := freeSpace(dir)
	if err != nil {
		return fmt.Errorf("free space in %s: %w", dir, err)
	}
	if free < need {
		return fmt.Errorf("%w in %s: %d bytes free, need %d (%d×%d-byte tarball + %d margin - %d already downloaded); free %d bytes",
			ErrNoSpace, dir, free, need, spaceFactor, size, margin, have, need-free)
	}
	return nil
}

func statfsFree(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// parseChecksumFile reads "hex" or sha256sum's "hex  filename" (or
// "hex *filename", binary mode): exactly one line naming one checksum.
func parseChecksumFile(b []byte) (string, error) {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", errors.New("empty checksum file")
	}
	if strings.ContainsAny(s, "\n") {
		return "", errors.New("checksum file has more than one line")
	}
	sum, rest, _ := strings.Cut(s, " ")
	if rest != "" && !strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "*") {
		return "", fmt.Errorf("checksum file %q: want \"<hex>\" or \"<hex>  <file>\"", s)
	}
	if !isSHA256Hex(sum) {
		return "", fmt.Errorf("checksum file: %q is not a sha256 (want %d hex digits)", sum, 2*sha256.Size)
	}
	return strings.ToLower(sum), nil
}

// isSHA256Hex reports whether s is a sha256 checksum in hex (either case).
func isSHA256Hex(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size
}

// decodeSignature reads a .sig file: the Ed25519 signature, raw or base64.
func decodeSignature(sig []byte) ([]byte, error) {
	if len(sig) == ed25519.SignatureSize {
		return sig, nil
	}
	dec, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(sig)))
	if err != nil || len(dec) != ed25519.SignatureSize {
		return nil, fmt.Errorf("%w: want a %d-byte signature, raw or base64; got %d bytes", ErrBadSignature, ed25519.SignatureSize, len(sig))
	}
	return dec, nil
}

// expected is the statement a signature of version's tarball at rawURL
// must cover, given its size and published sha256.
func (f *Fetcher) expected(version, rawURL string, size int64, sum string) (Statement, error) {
	file, err := urlFileName(rawURL)
	if err != nil {
		return Statement{}, err
	}
	app := f.App
	if app == "" {
		var ok bool
		if app, ok = AppNameFromFile(file); !ok {
			return Statement{}, fmt.Errorf("release signatures name the app, and the file name %q implies none (want NAME.tar.gz with a name like [a-z][a-z0-9-]*): name it (agentd --app-name, scripts/release.sh --app-name)", file)
		}
	}
	s := Statement{App: app, Version: version, File: file, Size: size, SHA256: sum}
	if err := s.Validate(); err != nil {
		return Statement{}, fmt.Errorf("the release statement to verify: %w", err)
	}
	return s, nil
}

// urlFileName is the last element of a URL's path: the file name a
// statement names.
func urlFileName(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("%s: %w", redact(rawURL), err)
	}
	name := path.Base(u.Path)
	if !fileNameRE.MatchString(name) || name == "." || name == ".." {
		return "", fmt.Errorf("%s: release file name %q cannot be named in a signed statement (want letters, digits, '.', '_', '+', '-')", redact(rawURL), name)
	}
	return name, nil
}

// verify checks sig over expect. When it does not verify, the error says
// why as precisely as the site lets it: a signature over the checksum file
// (made the old way, which binds no version), or a genuine signature of
// another release (its published statement verifies: "version 1.0.0, want
// 1.1.0"), or neither. The published statement and the checksum file only
// explain a refusal; nothing is accepted because of them.
func (f *Fetcher) verify(ctx context.Context, rawURL string, expect Statement, sumFile, sig []byte) error {
	if ed25519.Verify(f.PublicKey, expect.Bytes(), sig) {
		return nil
	}
	if ed25519.Verify(f.PublicKey, sumFile, sig) {
		return fmt.Errorf("%w: %w: it covers only the .sha256 file, which names neither app nor version, so it would verify for any version; "+
			"re-sign the release: scripts/release.sh --key KEY.pem --resign %s SITEDIR (it signs a statement of app, version, file, size and sha256; the tarball stays as it is)",
			ErrBadSignature, ErrOldSignature, expect.Version)
	}
	if b, err := f.getSmall(ctx, rawURL+StatementSuffix, maxStatementBytes); err == nil {
		if signed, err := ParseStatement(b); err == nil && ed25519.Verify(f.PublicKey, b, sig) {
			return fmt.Errorf("%w: %w: signed for %s", ErrBadSignature, ErrOtherRelease, strings.Join(expect.Differences(signed), "; "))
		}
	}
	return fmt.Errorf("%w with the configured public key for app %s, version %s, file %s (%d bytes, sha256 %s): "+
		"signed with another key, or for another app, version or file",
		ErrBadSignature, expect.App, expect.Version, expect.File, expect.Size, expect.SHA256)
}

// download writes the tarball to part, resuming when part holds a prefix
// of have bytes (partialSize), and returns the sha256 of the whole file.
func (f *Fetcher) download(ctx context.Context, version, rawURL, part string, size, have int64, headHdr http.Header) (string, error) {
	h := sha256.New()
	if have > 0 {
		if err := hashPrefix(h, part, have); err != nil {
			return "", err
		}
	}
	if have == size && size > 0 {
		// A crash after the last byte and before the rename: nothing to ask.
		return hex.EncodeToString(h.Sum(nil)), nil
	}

	hdr := http.Header{}
	if have > 0 {
		hdr.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
		// If the file changed since HEAD, ask for all of it rather than the
		// tail of another file.
		if v := headHdr.Get("ETag"); v != "" && !strings.HasPrefix(v, "W/") {
			hdr.Set("If-Range", v)
		} else if v := headHdr.Get("Last-Modified"); v != "" {
			hdr.Set("If-Range", v)
		}
	}
	resp, err := f.do(ctx, http.MethodGet, rawURL, hdr)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()

	flags := os.O_WRONLY | os.O_CREATE
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0:
		if err := checkContentRange(resp.Header.Get("Content-Range"), have, size); err != nil {
			return "", &sizeError{fmt.Errorf("%w: GET %s: %v", ErrDownload, redact(rawURL), err)}
		}
		flags |= os.O_APPEND
	case resp.StatusCode == http.StatusOK:
		// No resume: the server ignored Range, or there was nothing to
		// resume from.
		flags |= os.O_TRUNC
		have = 0
		h.Reset()
	default:
		return "", &StatusError{Method: http.MethodGet, URL: redact(rawURL), Code: resp.StatusCode, Status: resp.Status}
	}
	want := size - have
	if resp.ContentLength >= 0 && resp.ContentLength != want {
		return "", &sizeError{fmt.Errorf("%w: GET %s: Content-Length %d, want %d (%d bytes in all)", ErrDownload, redact(rawURL), resp.ContentLength, want, size)}
	}

	out, err := os.OpenFile(part, flags, 0o644)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", part, err)
	}
	defer out.Close()
	var w io.Writer = io.MultiWriter(out, h)
	clk := f.Clock.orReal()
	var prog *progress
	if f.Progress != nil {
		prog = newProgress(f.Progress, progressName(rawURL), have, size, clk.Now)
		w = io.MultiWriter(w, prog)
	}
	var logProg *logProgress
	if f.Log != nil || f.OnProgress != nil {
		var log *slog.Logger
		if f.Log != nil {
			log = f.Log.With(slog.String("version", version))
		}
		every := f.ProgressEvery
		if every <= 0 {
			every = DefaultProgressEvery
		}
		logProg = newLogProgress(log, f.OnProgress, redact(rawURL), have, size, every, f.Progress == nil, clk.Now)
		w = io.MultiWriter(w, logProg)
	}
	// Read one byte more than expected to tell "exactly right" from "too
	// long" without writing the excess.
	n, err := io.Copy(w, io.LimitReader(resp.Body, want+1))
	if prog != nil {
		prog.done()
	}
	if err != nil {
		return "", fmt.Errorf("%w: GET %s: after %d of %d bytes: %w", ErrDownload, redact(rawURL), have+n, size, err)
	}
	switch {
	case n > want:
		// The server sends something other than what HEAD described.
		out.Close()
		_ = os.Remove(part)
		return "", &sizeError{fmt.Errorf("%w: GET %s: body longer than the %d bytes announced", ErrDownload, redact(rawURL), size)}
	case n < want:
		return "", fmt.Errorf("%w: GET %s: truncated at %d of %d bytes", ErrDownload, redact(rawURL), have+n, size)
	}
	if err := out.Sync(); err != nil {
		return "", fmt.Errorf("sync %s: %w", part, err)
	}
	if err := out.Close(); err != nil {
		return "", fmt.Errorf("close %s: %w", part, err)
	}
	if logProg != nil {
		logProg.done()
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashPrefix feeds the first n bytes of path to h, so that a resumed
// download is hashed as a whole.
func hashPrefix(h hash.Hash, path string, n int64) error {
	in, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("resume %s: %w", path, err)
	}
	defer in.Close()
	if _, err := io.CopyN(h, in, n); err != nil {
		return fmt.Errorf("resume %s: %w", path, err)
	}
	return nil
}

// checkContentRange accepts only "bytes <from>-<size-1>/<size or *>": the
// tail we asked for, of the file HEAD described.
func checkContentRange(cr string, from, size int64) error {
	want := fmt.Sprintf("bytes %d-%d/", from, size-1)
	total, ok := strings.CutPrefix(cr, want)
	if !ok || (total != "*" && total != strconv.FormatInt(size, 10)) {
		return fmt.Errorf("Content-Range %q, want %q%d", cr, want, size)
	}
	return nil
}

// redact hides a password in a URL's userinfo before it reaches an error
// message, a log or update.yaml. It works on the text, so that a template's
// "{{" is not escaped into "%7B%7B" on the way.
func redact(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return s
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return s
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}
