package decoders

import (
	"flag"
	"slices"
	"testing"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
)

var (
	fuzzDec     = flag.String("fuzz.dec", Ours, "the candidate (its short name) FuzzSameAsJSON compares with encoding/json")
	fuzzErrText = flag.Bool("fuzz.errtext", true, "FuzzSameAsJSON: error texts must be the same too")
)

// FuzzSameAsJSON fails when the -fuzz.dec candidate's Decode (by default
// ours, pkg/heartbeat's) accepts, rejects or decodes anything differently
// from encoding/json's (today's Decode), or rejects with another error text:
// the check that a new decoder kept Decode's strictness and messages.
//
//	go test -run '^$' -fuzz FuzzSameAsJSON -fuzztime 1000000x
//	go test -run '^$' -fuzz FuzzSameAsJSON -fuzztime 60s -fuzz.dec goccy -fuzz.errtext=false
func FuzzSameAsJSON(f *testing.F) {
	cands := Candidates()
	i := slices.IndexFunc(cands, func(c Candidate) bool { return c.Short == *fuzzDec })
	if i < 0 {
		f.Fatalf("no candidate %q", *fuzzDec)
	}
	ref, dec := cands[0].New(), cands[i].New()
	for _, in := range append(seedCases(f), handCases()...) {
		f.Add(in.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want := run(func() (*heartbeat.Heartbeat, error) { return ref(data) })
		got := run(func() (*heartbeat.Heartbeat, error) { return dec(data) })
		if v := verdict(want, got); v != "" {
			t.Fatalf("%s: %s on %q\nencoding/json: %q %+v\n%s: %q %+v", cands[i].Short, v, data, want.err, want.h, cands[i].Short, got.err, got.h)
		}
		if *fuzzErrText && got.err != want.err {
			t.Fatalf("%s: error text on %q\nencoding/json: %q\n%s: %q", cands[i].Short, data, want.err, cands[i].Short, got.err)
		}
	})
}
