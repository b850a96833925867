package cliutil_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
)

// hostile holds a newline, ESC, an 8-bit CSI, DEL and a right-to-left
// override.
const hostile = "line one\nline two \x1b[2J a\u009b31mRED\u202eXYZ\u007fb"

// unprintable is the first rune of s a terminal would act on (tab and
// newline allowed), or -1.
func unprintable(s string) int {
	return strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != '\n' && r != '\t' })
}

// TestMainEscapesErrors: an error quoting what a peer sent is printed with
// its lines, its controls escaped.
func TestMainEscapesErrors(t *testing.T) {
	var errOut bytes.Buffer
	root := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return errors.New(hostile) }}
	root.SetErr(&errOut)
	root.SetArgs(nil)
	if code := cliutil.Main(root); code != cliutil.ExitFailure {
		t.Errorf("exit %d, want %d", code, cliutil.ExitFailure)
	}
	got := errOut.String()
	if i := unprintable(got); i >= 0 {
		t.Errorf("stderr holds a raw control at %d: %q", i, got)
	}
	if want := "x: line one\nline two \\x1b[2J a\\u009b31mRED\\u202eXYZ\\x7fb\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

// TestLoggerEscapes: the daemons' log lines, text or JSON, carry a
// peer's string with its controls escaped.
func TestLoggerEscapes(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		log, err := (&cliutil.LogFlags{Level: "info", Format: format}).Logger(&buf)
		if err != nil {
			t.Fatal(err)
		}
		log.Warn("rejected "+hostile, "reason", hostile, "err", errors.New(hostile))
		got := strings.TrimSuffix(buf.String(), "\n")
		if i := strings.IndexFunc(got, func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
			t.Errorf("%s log holds a raw control at %d: %q", format, i, got)
		}
		if !strings.Contains(got, `a\u009b31mRED\u202eXYZ`) {
			t.Errorf("%s log: %q, want the escaped text", format, got)
		}
	}
}
