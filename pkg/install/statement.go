package install

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// A release signature (DESIGN §10, minimal mode) covers a statement that
// names what is signed: the app, the version and the file, by name, size
// and sha256. A signature over the checksum alone (what scripts/release.sh
// made before) names no version: 1.0.0's tarball, .sha256 and .sig served
// as 1.1.0 would verify, and install 1.0.0's code under the name 1.1.0.
//
// agentd never takes the statement from the release site to decide
// anything: it builds the statement it expects (its app, the version it
// wants, the file it asked for, the size and sha256 of what it downloads)
// and verifies the signature over exactly those bytes. The statement the
// site publishes beside the release (<file>.statement) is read only after
// a signature failed, to say in the error what it was signed for.
//
// The text is canonical, one "key: value" line each, in this order, each
// ending in "\n", nothing else:
//
//	fleetwave-release-statement v1
//	app: app
//	version: 1.1.0
//	file: app.tar.gz
//	size: 1234
//	sha256: <64 lowercase hex digits>

// StatementFormat is the statement's first line: what it is, and the
// version of its format.
const StatementFormat = "fleetwave-release-statement v1"

// StatementSuffix is appended to the tarball's URL for the statement the
// release site publishes (informational; see above).
const StatementSuffix = ".statement"

// maxStatementBytes bounds a statement: the fields are bounded, and a
// server that sends more is not serving one.
const maxStatementBytes = 1 << 10

// Statement is what a release signature covers.
type Statement struct {
	// App is the app's name (ValidAppName).
	App string
	// Version is the release's version.
	Version string
	// File is the tarball's file name, the last element of its URL.
	File string
	// Size is the tarball's length in bytes.
	Size int64
	// SHA256 is the tarball's checksum, lowercase hex.
	SHA256 string
}

var (
	appNameRE  = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
	fileNameRE = regexp.MustCompile(`^[A-Za-z0-9._+-]{1,200}$`)
)

// ValidAppName reports whether name can name an app: a lowercase letter,
// then up to 31 lowercase letters, digits and '-' (DESIGN §9).
func ValidAppName(name string) bool { return appNameRE.MatchString(name) }

// AppNameFromFile is the app name a release file's name implies when none
// is configured: the name without ".tar.gz" or ".tgz" ("app.tar.gz" →
// "app"). ok is false when that is not a valid app name (a file name that
// carries the version or dots): the app must then be named explicitly
// (agentd --app-name, scripts/release.sh --app-name).
func AppNameFromFile(file string) (name string, ok bool) {
	switch {
	case strings.HasSuffix(file, ".tar.gz"):
		name = strings.TrimSuffix(file, ".tar.gz")
	case strings.HasSuffix(file, ".tgz"):
		name = strings.TrimSuffix(file, ".tgz")
	default:
		name = file
	}
	return name, ValidAppName(name)
}

// Validate checks every field.
func (s Statement) Validate() error {
	switch {
	case !ValidAppName(s.App):
		return fmt.Errorf("app %q: want a lowercase name ([a-z][a-z0-9-]{0,31})", s.App)
	case checkVersion(s.Version) != nil:
		return fmt.Errorf("version %q: %w", s.Version, checkVersion(s.Version))
	case !fileNameRE.MatchString(s.File) || s.File == "." || s.File == "..":
		return fmt.Errorf("file %q: want a file name (letters, digits, '.', '_', '+', '-'; at most 200)", s.File)
	case s.Size <= 0:
		return fmt.Errorf("size %d: want a positive byte count", s.Size)
	case !isSHA256Hex(s.SHA256) || strings.ToLower(s.SHA256) != s.SHA256:
		return fmt.Errorf("sha256 %q: want %d lowercase hex digits", s.SHA256, 64)
	}
	return nil
}

// Bytes is the statement's canonical text, the bytes a signature covers.
// It does not validate: Validate first.
func (s Statement) Bytes() []byte {
	var b bytes.Buffer
	b.WriteString(StatementFormat + "\n")
	for _, f := range s.fields() {
		b.WriteString(f.key + ": " + f.value + "\n")
	}
	return b.Bytes()
}

type statementField struct{ key, value string }

func (s Statement) fields() []statementField {
	return []statementField{
		{"app", s.App}, {"version", s.Version}, {"file", s.File},
		{"size", strconv.FormatInt(s.Size, 10)}, {"sha256", s.SHA256},
	}
}

// Differences names the fields in which got differs from s, the expected
// statement: "version 1.0.0, want 1.1.0". Empty when they are equal.
func (s Statement) Differences(got Statement) []string {
	var d []string
	gf := got.fields()
	for i, f := range s.fields() {
		if gf[i].value != f.value {
			d = append(d, fmt.Sprintf("%s %s, want %s", f.key, gf[i].value, f.value))
		}
	}
	return d
}

// errStatement: a published statement that is not one.
var errStatement = errors.New("not a release statement")

// ParseStatement reads a statement in its canonical text, and nothing
// else: a statement that parses is one whose Bytes are exactly b.
func ParseStatement(b []byte) (Statement, error) {
	if len(b) > maxStatementBytes {
		return Statement{}, fmt.Errorf("%w: longer than %d bytes", errStatement, maxStatementBytes)
	}
	lines := strings.Split(string(b), "\n")
	// Six lines, each ending in "\n": seven elements, the last empty.
	if len(lines) != 7 || lines[6] != "" {
		return Statement{}, fmt.Errorf("%w: want 6 lines, each ending in a newline", errStatement)
	}
	if lines[0] != StatementFormat {
		return Statement{}, fmt.Errorf("%w: first line %q, want %q", errStatement, truncate(lines[0], 60), StatementFormat)
	}
	var values [5]string
	for i, key := range []string{"app", "version", "file", "size", "sha256"} {
		v, ok := strings.CutPrefix(lines[i+1], key+": ")
		if !ok {
			return Statement{}, fmt.Errorf("%w: line %d %q, want %q", errStatement, i+2, truncate(lines[i+1], 60), key+": …")
		}
		values[i] = v
	}
	s := Statement{App: values[0], Version: values[1], File: values[2], SHA256: values[4]}
	size, err := strconv.ParseInt(values[3], 10, 64)
	if err != nil || strconv.FormatInt(size, 10) != values[3] {
		return Statement{}, fmt.Errorf("%w: size %q: want a byte count", errStatement, truncate(values[3], 30))
	}
	s.Size = size
	if err := s.Validate(); err != nil {
		return Statement{}, fmt.Errorf("%w: %w", errStatement, err)
	}
	if !bytes.Equal(s.Bytes(), b) {
		return Statement{}, fmt.Errorf("%w: not in canonical form", errStatement)
	}
	return s, nil
}
