package heartbeat_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The seeds of both fuzzers are the files in testdata/fuzz/<FuzzName>/,
// which `go test` runs as ordinary test cases.

// checkDecoded asserts what must hold for every payload Decode accepts.
func checkDecoded(t *testing.T, data []byte, h *heartbeat.Heartbeat) {
	t.Helper()
	if len(data) > heartbeat.MaxSize {
		t.Fatalf("Decode accepted %d bytes, over MaxSize %d", len(data), heartbeat.MaxSize)
	}
	if !json.Valid(data) {
		t.Fatalf("Decode accepted a payload that is not exactly one JSON value: %q", data)
	}
	if err := h.Validate(); err != nil {
		t.Fatalf("Decode returned a heartbeat that fails Validate: %v", err)
	}
	// Every name is printed as it is: none may hold a control, DEL, C1 or
	// bidirectional rune.
	for _, name := range []string{string(h.AgentID), h.Hostname, h.Group, h.Site, h.ActiveVersion, h.StartVersion,
		h.RollbackFrom, h.UpdatingTo, h.UpdaterVersion} {
		if err := rollout.ValidatePrintable(name); err != nil {
			t.Fatalf("Decode accepted the name %q: %v", name, err)
		}
	}
	enc, err := heartbeat.Encode(h)
	if err != nil {
		t.Fatalf("Encode of a decoded heartbeat: %v\ninput: %q", err, data)
	}
	h2, err := heartbeat.Decode(enc)
	if err != nil {
		t.Fatalf("Decode(Encode(h)): %v\nencoded: %q", err, enc)
	}
	if diff := cmp.Diff(h, h2); diff != "" {
		t.Fatalf("Decode(Encode(h)) != h (-want +got):\n%s", diff)
	}
	enc2, err := heartbeat.Encode(h2)
	if err != nil {
		t.Fatalf("second Encode: %v", err)
	}
	if !bytes.Equal(enc, enc2) {
		t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
	}
}

// checkRejected asserts that a rejection wraps one of the package's
// sentinels, so callers can tell why.
func checkRejected(t *testing.T, h *heartbeat.Heartbeat, err error) {
	t.Helper()
	if h != nil {
		t.Fatalf("a heartbeat (%+v) was returned along with error %v", h, err)
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("error %v wraps none of the package's sentinel errors", err)
}

// sameAsStd fails unless Decode's answer for data is exactly what
// encoding/json alone gives (DecodeStd): the same heartbeat, times in the
// same zone, or the same error text. The fast path may only be faster.
func sameAsStd(t *testing.T, data []byte, h *heartbeat.Heartbeat, err error) {
	t.Helper()
	std, stdErr := heartbeat.DecodeStd(data)
	if (err == nil) != (stdErr == nil) || (err != nil && err.Error() != stdErr.Error()) {
		t.Fatalf("Decode and encoding/json disagree on %q (fast path %v):\nDecode:        %v\nencoding/json: %v",
			data, heartbeat.FastPath(data), err, stdErr)
	}
	if err != nil {
		return
	}
	if diff := cmp.Diff(std, h); diff != "" {
		t.Fatalf("Decode and encoding/json decode %q differently (-encoding/json +Decode):\n%s", data, diff)
	}
	for _, p := range [][2]time.Time{{std.At, h.At}, {std.StartTime, h.StartTime}} {
		if p[0].String() != p[1].String() {
			t.Fatalf("Decode and encoding/json read a time of %q differently: %s vs %s", data, p[0], p[1])
		}
	}
}

// decoder is one Decoder reused across every fuzz input, as a controller
// reuses its own: nothing of one input may leak into the next.
var decoder struct {
	sync.Mutex
	heartbeat.Decoder
}

func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := heartbeat.Decode(data)
		sameAsStd(t, data, h, err)
		if err != nil {
			checkRejected(t, h, err)
			if errors.Is(err, heartbeat.ErrSubjectMismatch) {
				t.Fatalf("Decode has no subject to mismatch, yet: %v", err)
			}
			return
		}
		checkDecoded(t, data, h)
	})
}

func FuzzDecodeFrom(f *testing.F) {
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		h, err := heartbeat.DecodeFrom(subject, data)
		decoder.Lock()
		dh, derr := decoder.DecodeFrom(subject, data)
		if (err == nil) != (derr == nil) || (err != nil && err.Error() != derr.Error()) {
			t.Fatalf("Decoder.DecodeFrom and DecodeFrom disagree on %q %q: %v vs %v", subject, data, derr, err)
		}
		if err == nil {
			if diff := cmp.Diff(h, dh); diff != "" {
				t.Fatalf("Decoder.DecodeFrom and DecodeFrom decode differently (-DecodeFrom +Decoder):\n%s", diff)
			}
		}
		decoder.Unlock()
		if err != nil {
			checkRejected(t, h, err)
			return
		}
		checkDecoded(t, data, h)
		if got := heartbeat.SubjectFor(h.Group, h.AgentID); got != subject {
			t.Fatalf("DecodeFrom accepted subject %q for a body that belongs on %q", subject, got)
		}
		group, id, err := heartbeat.ParseSubject(subject)
		if err != nil || group != h.Group || id != h.AgentID {
			t.Fatalf("ParseSubject(%q) = %q, %q, %v; body has %q, %q", subject, group, id, err, h.Group, h.AgentID)
		}
		plain, err := heartbeat.Decode(data)
		if err != nil {
			t.Fatalf("DecodeFrom accepted what Decode rejects: %v", err)
		}
		if diff := cmp.Diff(plain, h); diff != "" {
			t.Fatalf("DecodeFrom and Decode disagree (-Decode +DecodeFrom):\n%s", diff)
		}
	})
}

// TestFuzzSeeds makes sure the seed corpora exist, are in the corpus format,
// and hold both accepted and rejected inputs, so the fuzzers' properties are
// exercised on every `go test` run.
func TestFuzzSeeds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fuzzer string
		args   []string // argument types in order
	}{
		{fuzzer: "FuzzDecode", args: []string{"[]byte"}},
		{fuzzer: "FuzzDecodeFrom", args: []string{"string", "[]byte"}},
	}
	for _, tc := range tests {
		t.Run(tc.fuzzer, func(t *testing.T) {
			dir := filepath.Join("testdata", "fuzz", tc.fuzzer)
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatalf("read seed corpus: %v", err)
			}
			accepted, rejected := 0, 0
			for _, e := range entries {
				args := readSeed(t, filepath.Join(dir, e.Name()), tc.args)
				var err error
				switch tc.fuzzer {
				case "FuzzDecode":
					_, err = heartbeat.Decode([]byte(args[0]))
				case "FuzzDecodeFrom":
					_, err = heartbeat.DecodeFrom(args[0], []byte(args[1]))
				}
				if err == nil {
					accepted++
				} else {
					rejected++
				}
			}
			if accepted < 2 || rejected < 4 {
				t.Errorf("%s seeds: %d accepted, %d rejected; want at least 2 and 4", tc.fuzzer, accepted, rejected)
			}
		})
	}
}

// readSeed parses a "go test fuzz v1" file whose values have the given types.
func readSeed(t *testing.T, path string, types []string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) != len(types)+1 || lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: want a \"go test fuzz v1\" header and %d values, got %d lines", path, len(types), len(lines))
	}
	var out []string
	for i, typ := range types {
		line := lines[i+1]
		quoted, ok := strings.CutPrefix(line, typ+"(")
		if !ok || !strings.HasSuffix(quoted, ")") {
			t.Fatalf("%s: value %d is not a %s: %.40s", path, i, typ, line)
		}
		s, err := strconv.Unquote(strings.TrimSuffix(quoted, ")"))
		if err != nil {
			t.Fatalf("%s: value %d: %v", path, i, err)
		}
		out = append(out, s)
	}
	return out
}
