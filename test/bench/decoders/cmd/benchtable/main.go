// Command benchtable turns rounds of BenchmarkDecode output into the
// markdown table of README.md: per payload and candidate the median ns/op
// and cpu-ns/op with their spread, the median of each round's ratio to
// encoding/json's in that same round (rounds interleave the candidates, so
// each ratio compares runs a few seconds apart), B/op and allocs/op.
//
//	go run ./cmd/benchtable bench.txt
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// result is one benchmark line.
type result struct {
	ns, cpu, bytes, allocs float64
}

func main() {
	in := io.Reader(os.Stdin)
	if len(os.Args) > 1 {
		f, err := os.Open(os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer f.Close()
		in = f
	}
	if err := run(in, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	runs := map[[2]string][]result{} // (payload, dec) → one result per round
	var payloads, decs, validate []string
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0][:strings.LastIndexByte(f[0], '-')] // drop -GOMAXPROCS
		r := result{ns: metric(f, "ns/op"), cpu: metric(f, "cpu-ns/op"), bytes: metric(f, "B/op"), allocs: metric(f, "allocs/op")}
		if p, ok := strings.CutPrefix(name, "BenchmarkValidate/payload="); ok {
			validate = append(validate, fmt.Sprintf("%s %.0f ns/op, %.0f cpu-ns/op, %.0f allocs/op", p, r.ns, r.cpu, r.allocs))
			continue
		}
		rest, ok := strings.CutPrefix(name, "BenchmarkDecode/payload=")
		if !ok {
			continue
		}
		p, d, ok := strings.Cut(rest, "/dec=")
		if !ok {
			continue
		}
		if !slices.Contains(payloads, p) {
			payloads = append(payloads, p)
		}
		if !slices.Contains(decs, d) {
			decs = append(decs, d)
		}
		runs[[2]string{p, d}] = append(runs[[2]string{p, d}], r)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(decs) == 0 {
		return fmt.Errorf("no BenchmarkDecode results")
	}
	base := decs[0]
	fmt.Fprintf(out, "%d rounds; each figure the median over rounds (min–max); a ratio is the median of each round's ÷ %s's in the same round\n\n",
		len(runs[[2]string{payloads[0], base}]), base)
	fmt.Fprintln(out, "| payload | decoder | ns/op | cpu-ns/op | ratio ns | ratio cpu | B/op | allocs/op |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---:|")
	for _, p := range payloads {
		for _, d := range decs {
			rs, bs := runs[[2]string{p, d}], runs[[2]string{p, base}]
			if len(rs) == 0 {
				continue
			}
			var ns, cpu, rns, rcpu []float64
			for i, r := range rs {
				ns, cpu = append(ns, r.ns), append(cpu, r.cpu)
				if i < len(bs) {
					rns, rcpu = append(rns, r.ns/bs[i].ns), append(rcpu, r.cpu/bs[i].cpu)
				}
			}
			last := rs[len(rs)-1]
			fmt.Fprintf(out, "| %s | %s | %s | %s | %.2f× | %.2f× | %.0f | %.0f |\n",
				p, d, spread(ns), spread(cpu), median(rns), median(rcpu), last.bytes, last.allocs)
		}
	}
	if len(validate) > 0 {
		fmt.Fprintf(out, "\nValidate alone (in every row above), last round: %s\n", strings.Join(validate[max(0, len(validate)-len(payloads)):], "; "))
	}
	return nil
}

// spread is "median (min–max)", or the one value.
func spread(v []float64) string {
	if len(v) == 1 {
		return fmt.Sprintf("%.0f", v[0])
	}
	return fmt.Sprintf("%.0f (%.0f–%.0f)", median(v), slices.Min(v), slices.Max(v))
}

// metric is the value before unit in a benchmark line, or 0.
func metric(f []string, unit string) float64 {
	for i := 1; i < len(f); i++ {
		if f[i] == unit {
			v, _ := strconv.ParseFloat(f[i-1], 64)
			return v
		}
	}
	return 0
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
