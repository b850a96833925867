package decoders

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
)

var (
	oursMustMatch = flag.Bool("ours-must-match", false, "fail TestStrictness when ours differs from encoding/json in any way, error texts included")
	allRows       = flag.Bool("all-rows", false, "print every input of TestStrictness, not only those where a candidate differs")
	dump          = flag.String("dump", "", "write encoding/json's outcome for every input of TestStrictness and TestStrictnessMutants to this file, to compare two builds (GOEXPERIMENT=jsonv2 changes encoding/json)")
)

// dumper writes one line per input: its name, then ok and the decoded
// heartbeat, or the error text.
type dumper struct{ f *os.File }

func newDumper(t *testing.T, suffix string) dumper {
	t.Helper()
	if *dump == "" {
		return dumper{}
	}
	f, err := os.Create(*dump + suffix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return dumper{f}
}

func (d dumper) write(name string, o outcome) {
	if d.f == nil {
		return
	}
	if o.err != "" {
		fmt.Fprintf(d.f, "%s\trejects\t%q\n", name, o.err)
		return
	}
	fmt.Fprintf(d.f, "%s\taccepts\t%q\n", name, fmt.Sprintf("%+v %s %s", o.h, o.h.StartTime.Format(time.RFC3339Nano), o.h.At.Format(time.RFC3339Nano)))
}

// seedDir is pkg/heartbeat's fuzz corpus in the main module.
var seedDir = filepath.Join("..", "..", "..", "pkg", "heartbeat", "testdata", "fuzz")

// input is one payload of the strictness table; with a subject, it goes
// through DecodeFrom instead of Decode.
type input struct {
	name    string
	subject string
	data    []byte
}

// A valid heartbeat without its closing brace, for the hand cases to edit.
const open = `{"v":1,"agent_id":"1b4e28ba-2fa1-4d2e-883f-0016d3cca427","hostname":"web-01","group":"prod",` +
	`"active_version":"1.4.2","start_version":"1.4.1","start_time":"2025-03-01T10:00:00Z","rollback":false,` +
	`"rollback_from":"","error":"","updater_version":"1.4.2","at":"2025-03-01T10:05:00.123456789Z","seq":42`

const valid = open + "}"

// with is the valid heartbeat with extra just before its closing brace.
func with(extra string) string { return open + extra + "}" }

// edit is the valid heartbeat with old replaced by new; old must occur.
func edit(old, new string) string {
	if !strings.Contains(valid, old) {
		panic("edit: no " + old)
	}
	return strings.Replace(valid, old, new, 1)
}

// handCases are the corners where JSON decoders are known to part ways.
func handCases() []input {
	const at = `"at":"2025-03-01T10:05:00.123456789Z"`
	cases := []struct{ name, data string }{
		{"valid", valid},
		{"dup key hostname", with(`,"hostname":"web-02"`)},
		{"dup key v 2 then 1", edit(`"v":1`, `"v":2,"v":1`)},
		{"dup key seq", with(`,"seq":43`)},
		{"key Agent_ID", edit(`"agent_id"`, `"Agent_ID"`)},
		{"agent_id then AGENT_ID", with(`,"AGENT_ID":"00000000-0000-4000-8000-000000000001"`)},
		{`key \u017fite`, with(`,"ſite":"eu-1"`)},
		{`key \u017feq after seq`, with(`,"ſeq":7`)},
		{`key rollbac\u212a`, with(`,"rollbacK":true`)},
		{"key rollbacK", with(`,"rollbacK":true`)},
		{`key \u0061gent_id`, edit(`"agent_id"`, `"\u0061gent_id"`)},
		{"invalid UTF-8 in error", edit(`"error":""`, "\"error\":\"boom \xff\"")},
		{"invalid UTF-8 in hostname", edit(`"web-01"`, "\"web-\xc3\"")},
		{"invalid UTF-8 in unknown", with(",\"x\":\"\xff\"")},
		{"invalid UTF-8 in a key", with(",\"x\xff\":1")},
		{`lone surrogate \ud800 in error`, edit(`"error":""`, `"error":"boom \ud800"`)},
		{`escaped NUL in error`, edit(`"error":""`, `"error":"\u0000"`)},
		{"raw tab in a string", edit(`"error":""`, "\"error\":\"a\tb\"")},
		{`escapes in error`, edit(`"error":""`, `"error":"say \"hi\"\n\tand \u00fc \u2028 \/"`)},
		{"trailing whitespace", valid + " \r\n\t"},
		{"trailing x", valid + " x"},
		{"trailing }", valid + "}"},
		{"trailing ]", valid + "]"},
		{"two objects", valid + valid},
		{"two objects, newline", valid + "\n" + valid},
		{"leading BOM", "\xef\xbb\xbf" + valid},
		{"block comment", "/* c */" + valid},
		{"line comment", with("// c\n")},
		{"single quotes", strings.ReplaceAll(valid, `"`, `'`)},
		{"unquoted key", edit(`"v":1`, `v:1`)},
		{"trailing comma", with(",")},
		{"v 1.0", edit(`"v":1`, `"v":1.0`)},
		{"v 1e0", edit(`"v":1`, `"v":1e0`)},
		{"v -0", edit(`"v":1`, `"v":-0`)},
		{"v 01", edit(`"v":1`, `"v":01`)},
		{"v +1", edit(`"v":1`, `"v":+1`)},
		{"v 1.5", edit(`"v":1`, `"v":1.5`)},
		{`v "1"`, edit(`"v":1`, `"v":"1"`)},
		{"v true", edit(`"v":1`, `"v":true`)},
		{"v 2^64+1", edit(`"v":1`, `"v":18446744073709551617`)},
		{"seq 2^64-1", edit(`"seq":42`, `"seq":18446744073709551615`)},
		{"seq 2^64", edit(`"seq":42`, `"seq":18446744073709551616`)},
		{"seq -1", edit(`"seq":42`, `"seq":-1`)},
		{"seq 42.0", edit(`"seq":42`, `"seq":42.0`)},
		{"seq 1e3", edit(`"seq":42`, `"seq":1e3`)},
		{"seq 1e999", edit(`"seq":42`, `"seq":1e999`)},
		{"unknown 1e999", with(`,"x":1e999`)},
		{"unknown NaN", with(`,"x":NaN`)},
		{"unknown -", with(`,"x":-`)},
		{"unknown 1-2", with(`,"x":1-2`)},
		{"unknown .5", with(`,"x":.5`)},
		{"unknown 0.", with(`,"x":0.`)},
		{"unknown 1.e5", with(`,"x":1.e5`)},
		{"unknown 1e", with(`,"x":1e`)},
		{"unknown -01", with(`,"x":-01`)},
		{"unknown 1.2.3", with(`,"x":1.2.3`)},
		{`unknown long string with \0`, with(`,"x":"` + strings.Repeat("a", 40) + `\0` + strings.Repeat("b", 40) + `"`)},
		{`unknown long string with raw tab`, with(`,"x":"` + strings.Repeat("a", 40) + "\t" + strings.Repeat("b", 40) + `"`)},
		{"unknown nested", with(`,"x":[{"a":[1,{"b":null}]},[],{}]`)},
		{`unknown bad escape \q`, with(`,"x":"\q"`)},
		{"unknown tru", with(`,"x":tru`)},
		{"null hostname", edit(`"hostname":"web-01"`, `"hostname":null`)},
		{"null at", edit(at, `"at":null`)},
		{"null start_time", edit(`"start_time":"2025-03-01T10:00:00Z"`, `"start_time":null`)},
		{"null v", edit(`"v":1`, `"v":null`)},
		{"null rollback", edit(`"rollback":false`, `"rollback":null`)},
		{"null seq", edit(`"seq":42`, `"seq":null`)},
		{"null agent_id", edit(`"agent_id":"1b4e28ba-2fa1-4d2e-883f-0016d3cca427"`, `"agent_id":null`)},
		{"hostname 5", edit(`"hostname":"web-01"`, `"hostname":5`)},
		{"rollback 0", edit(`"rollback":false`, `"rollback":0`)},
		{`rollback "false"`, edit(`"rollback":false`, `"rollback":"false"`)},
		{"at lower t", edit(at, `"at":"2025-03-01t10:05:00Z"`)},
		{"at lower z", edit(at, `"at":"2025-03-01T10:05:00z"`)},
		{"at leap second", edit(at, `"at":"2016-12-31T23:59:60Z"`)},
		{"at comma fraction", edit(at, `"at":"2025-03-01T10:05:00,5Z"`)},
		{"at +01:00", edit(at, `"at":"2025-03-01T11:05:00+01:00"`)},
		{"at +24:00", edit(at, `"at":"2025-03-01T10:05:00+24:00"`)},
		{"at no seconds", edit(at, `"at":"2025-03-01T10:05Z"`)},
		{"at space separator", edit(at, `"at":"2025-03-01 10:05:00Z"`)},
		{"at 2025-02-30", edit(at, `"at":"2025-02-30T10:05:00Z"`)},
		{"at year 0000", edit(at, `"at":"0000-01-01T00:00:00Z"`)},
		{"at a number", edit(at, `"at":1740823500`)},
		{"top-level null", "null"},
		{"top-level [heartbeat]", "[" + valid + "]"},
		{"top-level string", `"x"`},
		{"empty", ""},
		{"whitespace only", " \n"},
		{"{}", "{}"},
		{"rollback without from", edit(`"rollback":false`, `"rollback":true`)},
	}
	out := make([]input, len(cases))
	for i, c := range cases {
		out[i] = input{name: c.name, data: []byte(c.data)}
	}
	return out
}

// seedCases are the seeds of pkg/heartbeat's FuzzDecode and FuzzDecodeFrom.
func seedCases(t testing.TB) []input {
	t.Helper()
	var out []input
	for _, fz := range []struct {
		name, short string
		types       []string
	}{
		{"FuzzDecode", "D", []string{"[]byte"}},
		{"FuzzDecodeFrom", "DF", []string{"string", "[]byte"}},
	} {
		entries, err := os.ReadDir(filepath.Join(seedDir, fz.name))
		if err != nil {
			t.Fatalf("read seed corpus: %v", err)
		}
		for _, e := range entries {
			args := readSeed(t, filepath.Join(seedDir, fz.name, e.Name()), fz.types)
			in := input{name: fz.short + "/" + e.Name(), data: []byte(args[len(args)-1])}
			if len(args) == 2 {
				in.subject = args[0]
			}
			out = append(out, in)
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d seeds in %s", len(out), seedDir)
	}
	return out
}

// readSeed parses a "go test fuzz v1" file whose values have the given
// types (pkg/heartbeat's fuzz_test.go has the same).
func readSeed(t testing.TB, path string, types []string) []string {
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
		quoted, ok := strings.CutPrefix(lines[i+1], typ+"(")
		if !ok || !strings.HasSuffix(quoted, ")") {
			t.Fatalf("%s: value %d is not a %s", path, i, typ)
		}
		s, err := strconv.Unquote(strings.TrimSuffix(quoted, ")"))
		if err != nil {
			t.Fatalf("%s: value %d: %v", path, i, err)
		}
		out = append(out, s)
	}
	return out
}

// outcome is what a decoder made of one input.
type outcome struct {
	h        heartbeat.Heartbeat
	err      string // "" when accepted
	panicked bool
}

func run(f func() (*heartbeat.Heartbeat, error)) (o outcome) {
	defer func() {
		if r := recover(); r != nil {
			o = outcome{err: fmt.Sprintf("panic: %v", r), panicked: true}
		}
	}()
	h, err := f()
	if err != nil {
		return outcome{err: err.Error()}
	}
	if h == nil {
		return outcome{err: "nil heartbeat and nil error"}
	}
	return outcome{h: *h} // a copy: the reuse decoder overwrites *h next time
}

// decodeFrom is heartbeat.DecodeFrom as it was before issue 17, over dec.
func decodeFrom(dec Decoder, subject string, data []byte) (*heartbeat.Heartbeat, error) {
	group, id, err := heartbeat.ParseSubject(subject)
	if err != nil {
		return nil, err
	}
	h, err := dec(data)
	if err != nil {
		return nil, err
	}
	if h.Group != group || h.AgentID != id {
		return nil, fmt.Errorf("%w: subject says group %q agent %q, body says group %q agent %q",
			heartbeat.ErrSubjectMismatch, group, id, h.Group, h.AgentID)
	}
	return h, nil
}

// diff compares heartbeats field by field; times must be the same instant
// with the same offset.
func diff(want, got *heartbeat.Heartbeat) string {
	return cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool {
		return a.Equal(b) && a.Format(time.RFC3339Nano) == b.Format(time.RFC3339Nano)
	}))
}

// verdict compares a candidate's outcome with encoding/json's: A accepts
// what encoding/json rejects, R rejects what it accepts, V accepts with
// another value, P panics, "" agrees. Error texts are compared apart.
func verdict(ref, got outcome) string {
	switch {
	case got.panicked:
		return "P"
	case ref.err != "" && got.err == "":
		return "A"
	case ref.err == "" && got.err != "":
		return "R"
	case ref.err == "" && diff(&ref.h, &got.h) != "":
		return "V"
	}
	return ""
}

// tally counts one candidate's differences over all inputs.
type tally struct {
	n        map[string][]string // verdict (upper: Decode, lower: parse only) → input names
	errText  int                 // both reject, error text differs
	rejected int                 // inputs both reject
	example  string              // the first error text that differs
}

// TestStrictness prints, for every input (pkg/heartbeat's fuzz seeds and
// the hand cases), where each candidate's Decode differs from encoding/json's
// (today's Decode): the evidence for choosing one. It fails only when the
// inputs cannot be read, or with -ours-must-match when ours differs.
func TestStrictness(t *testing.T) {
	if _, err := heartbeat.Decode([]byte(valid)); err != nil {
		t.Fatalf("the hand cases' base heartbeat is not valid: %v", err)
	}
	inputs := append(seedCases(t), handCases()...)
	cands := Candidates()
	ref := cands[0]
	refDec := ref.New()
	refParse := ref.NewParser()

	dumped := newDumper(t, ".cases")
	tallies := make([]tally, len(cands))
	var rows [][]string // input name, then one cell per candidate
	for _, in := range inputs {
		want := run(func() (*heartbeat.Heartbeat, error) {
			if in.subject != "" {
				return decodeFrom(refDec, in.subject, in.data)
			}
			return refDec(in.data)
		})
		dumped.write(strconv.Quote(in.name), want)
		wantParse := run(func() (*heartbeat.Heartbeat, error) {
			var h heartbeat.Heartbeat
			return &h, refParse(in.data, &h)
		})
		verb := "rejects"
		if want.err == "" {
			verb = "accepts"
		}
		row := []string{in.name, verb}
		differs := false
		for i, c := range cands {
			if i == 0 {
				continue
			}
			dec := c.New()
			got := run(func() (*heartbeat.Heartbeat, error) {
				switch {
				case c.Name == Ours && in.subject != "":
					return heartbeat.DecodeFrom(in.subject, in.data)
				case in.subject != "":
					return decodeFrom(dec, in.subject, in.data)
				}
				return dec(in.data)
			})
			tl := &tallies[i]
			if tl.n == nil {
				tl.n = map[string][]string{}
			}
			cell := verdict(want, got)
			if cell == "" && want.err != "" {
				tl.rejected++
				if got.err != want.err {
					tl.errText++
					if tl.example == "" {
						tl.example = fmt.Sprintf("%s: %q, encoding/json's %q", in.name, got.err, want.err)
					}
				}
			}
			if cell == "" && c.NewParser != nil {
				p := c.NewParser()
				cell = strings.ToLower(verdict(wantParse, run(func() (*heartbeat.Heartbeat, error) {
					var h heartbeat.Heartbeat
					return &h, p(in.data, &h)
				})))
			}
			if cell != "" {
				tl.n[cell] = append(tl.n[cell], in.name)
				differs = true
			} else {
				cell = "."
			}
			row = append(row, cell)
		}
		if differs || *allRows {
			rows = append(rows, row)
		}
	}

	w := tabwriter.NewWriter(os.Stdout, 0, 0, 1, ' ', 0)
	fmt.Fprintf(w, "Strictness: %d inputs (%d fuzz seeds of pkg/heartbeat, the rest by hand), each against encoding/json (today's Decode).\n",
		len(inputs), len(inputs)-len(handCases()))
	fmt.Fprintln(w, "A accepts what encoding/json rejects, R rejects what it accepts, V accepts with another value, P panics;")
	fmt.Fprintln(w, "lower case: the same difference in the parse alone (before Validate, which hides it today).")
	fmt.Fprintln(w)
	head := []string{"input", "json"}
	for _, c := range cands[1:] {
		head = append(head, c.Short)
	}
	fmt.Fprintln(w, strings.Join(head, "\t")+"\t")
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t")+"\t")
	}
	w.Flush()

	fmt.Println()
	w = tabwriter.NewWriter(os.Stdout, 0, 0, 1, ' ', 0)
	fmt.Fprintln(w, "candidate\tA\tV\tR\tP\ta/v/r (parse only)\terror text differs\t")
	for i, c := range cands[1:] {
		tl := tallies[i+1]
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d of %d\t\n", c.Name, len(tl.n["A"]), len(tl.n["V"]), len(tl.n["R"]), len(tl.n["P"]),
			len(tl.n["a"])+len(tl.n["v"])+len(tl.n["r"]), tl.errText, tl.rejected)
	}
	w.Flush()
	fmt.Println()
	for i, c := range cands[1:] {
		tl := tallies[i+1]
		var ex []string
		for _, k := range []string{"A", "V", "R", "P", "a", "v", "r"} {
			if names := tl.n[k]; len(names) > 0 {
				ex = append(ex, k+": "+strings.Join(names, ", "))
			}
		}
		if tl.example != "" {
			ex = append(ex, "error text, e.g. "+tl.example)
		}
		if len(ex) == 0 {
			ex = []string{"identical to encoding/json on every input, error texts included"}
		}
		fmt.Printf("%s:\n  %s\n", c.Name, strings.Join(ex, "\n  "))
	}

	ours := tallies[slices.IndexFunc(cands, func(c Candidate) bool { return c.Name == Ours })]
	if *oursMustMatch && (len(ours.n) > 0 || ours.errText > 0) {
		t.Errorf("ours differs from encoding/json (see the table above)")
	}
}

var mutants = flag.Int("mutants", 20000, "how many mutated heartbeats TestStrictnessMutants tries")

// mutate changes one to three bytes or spans of b, drawing replacements
// from what JSON decoders parse differently.
func mutate(r *rand.Rand, b []byte) []byte {
	const alphabet = "{}[],:\"\\ \t\n0123456789eE.-+tfnulrsaAKk\xff\xc3\xe2\x80\xa8"
	b = slices.Clone(b)
	for range 1 + r.IntN(3) {
		if len(b) == 0 {
			b = append(b, '{')
		}
		i := r.IntN(len(b))
		switch r.IntN(6) {
		case 0: // replace a byte
			b[i] = alphabet[r.IntN(len(alphabet))]
		case 1: // insert a byte
			b = slices.Insert(b, i, alphabet[r.IntN(len(alphabet))])
		case 2: // delete a span
			b = slices.Delete(b, i, min(len(b), i+1+r.IntN(8)))
		case 3: // repeat a span (a duplicate key, a second value)
			j := min(len(b), i+1+r.IntN(40))
			b = slices.Insert(b, j, b[i:j]...)
		case 4: // change a letter's case
			b[i] ^= 0x20
		case 5: // a rune that folds to an ASCII letter, or an escape
			b = slices.Insert(b, i, []byte([]string{"ſ", "K", `\u0073`, `\ud800`, `\"`, "\u2028"}[r.IntN(6)])...)
		}
	}
	return b
}

// editOf shows where mutant differs from base: the changed bytes with a
// few bytes of context either side, "[old→new]", and how many bytes changed.
func editOf(base, mutant []byte) (string, int) {
	p := 0
	for p < len(base) && p < len(mutant) && base[p] == mutant[p] {
		p++
	}
	s := 0
	for s < len(base)-p && s < len(mutant)-p && base[len(base)-1-s] == mutant[len(mutant)-1-s] {
		s++
	}
	from := max(0, p-12)
	return fmt.Sprintf("%q[%q→%q]%q", base[from:p], base[p:len(base)-s], mutant[p:len(mutant)-s],
		mutant[len(mutant)-s:min(len(mutant), len(mutant)-s+12)]), len(base) + len(mutant) - 2*(p+s)
}

// fieldDiff is cmp's diff of two heartbeats on one line.
func fieldDiff(want, got *heartbeat.Heartbeat) string {
	var out []string
	for l := range strings.Lines(diff(want, got)) {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "-") || strings.HasPrefix(l, "+") {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
	}
	return "encoding/json" + strings.Join(out, " ")
}

// TestStrictnessMutants prints, per candidate, on how many of -mutants
// random mutations of valid heartbeats its Decode differs from
// encoding/json's (verdicts as in TestStrictness), with the first example of
// each kind. The mutations are the same in every run (a fixed seed).
func TestStrictnessMutants(t *testing.T) {
	// The bases are the ordinary heartbeats, not the hand cases, where the
	// candidates part ways before any mutation.
	var bases [][]byte
	for _, in := range seedCases(t) {
		if _, err := heartbeat.Decode(in.data); err == nil {
			bases = append(bases, in.data)
		}
	}
	for _, p := range payloads(t) {
		bases = append(bases, p.data[0])
	}
	cands := Candidates()
	decs := make([]Decoder, len(cands))
	for i, c := range cands {
		decs[i] = c.New()
	}
	type count struct {
		n       map[string]int
		example map[string]string // the example with the smallest edit
		size    map[string]int
		errText int
	}
	counts := make([]count, len(cands))
	for i := range counts {
		counts[i] = count{n: map[string]int{}, example: map[string]string{}, size: map[string]int{}}
	}
	dumped := newDumper(t, ".mutants")
	r := rand.New(rand.NewPCG(17, 1))
	accepted := 0
	for range *mutants {
		base := bases[r.IntN(len(bases))]
		data := mutate(r, base)
		for bytes.Equal(data, base) { // TestStrictness has the bases
			data = mutate(r, base)
		}
		want := run(func() (*heartbeat.Heartbeat, error) { return decs[0](data) })
		dumped.write(strconv.Quote(string(data)), want)
		if want.err == "" {
			accepted++
		}
		for i := 1; i < len(cands); i++ {
			got := run(func() (*heartbeat.Heartbeat, error) { return decs[i](data) })
			v := verdict(want, got)
			if v == "" {
				if got.err != want.err {
					counts[i].errText++
				}
				continue
			}
			counts[i].n[v]++
			if ex, size := editOf(base, data); counts[i].example[v] == "" || size < counts[i].size[v] {
				what := fmt.Sprintf("encoding/json %.70q, %s %.70q", want.err, cands[i].Short, got.err)
				if v == "V" {
					what = fieldDiff(&want.h, &got.h)
				}
				counts[i].example[v], counts[i].size[v] = ex+" ("+what+")", size
			}
		}
	}
	fmt.Printf("\nStrictness on %d mutants of %d valid heartbeats (%d accepted by encoding/json), each against encoding/json:\n",
		*mutants, len(bases), accepted)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 1, ' ', 0)
	fmt.Fprintln(w, "candidate\tA\tV\tR\tP\terror text differs\t")
	for i, c := range cands[1:] {
		n := counts[i+1]
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t\n", c.Name, n.n["A"], n.n["V"], n.n["R"], n.n["P"], n.errText)
	}
	w.Flush()
	for i, c := range cands[1:] {
		for _, k := range []string{"A", "V", "R", "P"} {
			if ex := counts[i+1].example[k]; ex != "" {
				fmt.Printf("  %s %s, e.g. %s\n", c.Short, k, ex)
			}
		}
	}
	ours := counts[slices.IndexFunc(cands, func(c Candidate) bool { return c.Name == Ours })]
	if *oursMustMatch && (len(ours.n) > 0 || ours.errText > 0) {
		t.Errorf("ours differs from encoding/json on mutants (see above)")
	}
}
