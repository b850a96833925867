package install_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/install"
)

const statementSum = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

var statementGood = install.Statement{App: "app", Version: "1.1.0", File: "app.tar.gz", Size: 1234, SHA256: statementSum}

// TestStatementBytes: the canonical text, byte for byte, as
// scripts/release.sh writes it (scripts/release_test.go checks that side).
func TestStatementBytes(t *testing.T) {
	t.Parallel()
	want := "fleetwave-release-statement v1\napp: app\nversion: 1.1.0\nfile: app.tar.gz\nsize: 1234\nsha256: " + statementSum + "\n"
	if diff := cmp.Diff(want, string(statementGood.Bytes())); diff != "" {
		t.Errorf("statement (-want +got):\n%s", diff)
	}
	got, err := install.ParseStatement([]byte(want))
	if err != nil || got != statementGood {
		t.Errorf("ParseStatement = %+v, %v; want %+v", got, err, statementGood)
	}
	if d := statementGood.Differences(statementGood); len(d) != 0 {
		t.Errorf("Differences of equal statements: %v", d)
	}
	other := statementGood
	other.Version, other.Size = "1.0.0", 99
	if diff := cmp.Diff([]string{"version 1.0.0, want 1.1.0", "size 99, want 1234"}, statementGood.Differences(other)); diff != "" {
		t.Errorf("Differences (-want +got):\n%s", diff)
	}
}

// statementFuzzSeeds are the FuzzParseStatement seeds kept in
// testdata/fuzz/FuzzParseStatement, and the cases of TestParseStatement
// (valid: whether it parses).
func statementFuzzSeeds() map[string]struct {
	text  string
	valid bool
} {
	good := string(statementGood.Bytes())
	edit := func(old, new string) string { return strings.Replace(good, old, new, 1) }
	return map[string]struct {
		text  string
		valid bool
	}{
		"good":                 {good, true},
		"prerelease-build":     {edit("1.1.0", "1.1.0-rc.1+linux.amd64"), true},
		"app-with-dash":        {edit("app: app", "app: billing-api"), true},
		"file-with-plus":       {edit("app.tar.gz", "app-1.1.0+b7-linux-amd64.tar.gz"), true},
		"crlf":                 {strings.ReplaceAll(good, "\n", "\r\n"), false},
		"no-final-newline":     {strings.TrimSuffix(good, "\n"), false},
		"extra-line":           {good + "os: linux\n", false},
		"blank-line":           {good + "\n", false},
		"order":                {edit("app: app\nversion: 1.1.0", "version: 1.1.0\napp: app"), false},
		"two-spaces":           {edit("app: app", "app:  app"), false},
		"trailing-space":       {edit("app: app", "app: app "), false},
		"no-space":             {edit("app: app", "app:app"), false},
		"format-v2":            {edit("v1", "v2"), false},
		"no-format-line":       {strings.SplitN(good, "\n", 2)[1], false},
		"upper-sha":            {edit(statementSum, strings.ToUpper(statementSum)), false},
		"short-sha":            {edit(statementSum, statementSum[:63]), false},
		"leading-zero-size":    {edit("size: 1234", "size: 01234"), false},
		"negative-size":        {edit("size: 1234", "size: -1234"), false},
		"zero-size":            {edit("size: 1234", "size: 0"), false},
		"plus-size":            {edit("size: 1234", "size: +1234"), false},
		"huge-size":            {edit("size: 1234", "size: 99999999999999999999"), false},
		"upper-app":            {edit("app: app", "app: App"), false},
		"long-app":             {edit("app: app", "app: a"+strings.Repeat("b", 32)), false},
		"v-version":            {edit("1.1.0", "v1.1.0"), false},
		"file-with-slash":      {edit("app.tar.gz", "../app.tar.gz"), false},
		"file-dotdot":          {edit("app.tar.gz", ".."), false},
		"file-with-space":      {edit("app.tar.gz", "app .tar.gz"), false},
		"control-in-app":       {edit("app: app", "app: a\x1bpp"), false},
		"nul":                  {edit("app: app", "app: a\x00pp"), false},
		"sha256sum-line":       {statementSum + "  app.tar.gz\n", false},
		"empty":                {"", false},
		"only-format":          {install.StatementFormat + "\n", false},
		"long":                 {good + strings.Repeat("x", 1100), false},
		"utf8-in-file":         {edit("app.tar.gz", "äpp.tar.gz"), false},
		"duplicate-key-order":  {edit("file: app.tar.gz", "version: 1.1.0"), false},
		"key-case":             {edit("sha256:", "SHA256:"), false},
		"bidi-in-version":      {edit("1.1.0", "1.1.0\u202e"), false},
		"empty-values":         {install.StatementFormat + "\napp: \nversion: \nfile: \nsize: \nsha256: \n", false},
		"windows-final-crlf":   {strings.TrimSuffix(good, "\n") + "\r\n", false},
		"tab-separator":        {edit("app: app", "app:\tapp"), false},
		"format-trailing-junk": {edit("v1\n", "v1 extra\n"), false},
	}
}

func TestStatementFuzzSeeds(t *testing.T) {
	t.Parallel()
	seeds := map[string]string{}
	for name, s := range statementFuzzSeeds() {
		seeds[name] = s.text
	}
	checkFuzzSeeds(t, "FuzzParseStatement", seeds)
}

// TestParseStatement: only the canonical text parses.
func TestParseStatement(t *testing.T) {
	t.Parallel()
	for name, tc := range statementFuzzSeeds() {
		got, err := install.ParseStatement([]byte(tc.text))
		switch {
		case tc.valid && err != nil:
			t.Errorf("%s: ParseStatement: %v", name, err)
		case tc.valid && !bytes.Equal(got.Bytes(), []byte(tc.text)):
			t.Errorf("%s: parsed %+v, which is not the text it was read from", name, got)
		case !tc.valid && err == nil:
			t.Errorf("%s: ParseStatement accepted %q as %+v", name, tc.text, got)
		}
	}
}

// FuzzParseStatement: whatever the bytes, parsing does not panic, and a
// statement that parses is valid and is exactly the bytes it was read from
// (so two different texts never parse to the same statement, and a
// signature over the text is a signature over the statement).
func FuzzParseStatement(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := install.ParseStatement(data)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("parsed an invalid statement %+v: %v", s, err)
		}
		if !bytes.Equal(s.Bytes(), data) {
			t.Fatalf("parsed %q as %+v, whose text is %q", data, s, s.Bytes())
		}
		if again, err := install.ParseStatement(s.Bytes()); err != nil || again != s {
			t.Fatalf("the statement's own text parses as %+v, %v", again, err)
		}
	})
}
