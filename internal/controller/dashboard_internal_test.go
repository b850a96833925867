package controller

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/fleetwave/fleetwave/internal/natsutil"
)

// TestUIRefusal: on a secured bus (--auth-dir, --creds, or a client
// certificate the server verifies) the dashboard is served in the clear
// only on a loopback address, unless --http-tls-cert or --ui-insecure.
func TestUIRefusal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       RunOptions
		refused bool
	}{
		{"open bus, all interfaces", RunOptions{HTTPAddr: ":8080"}, false},
		{"open bus, public address", RunOptions{HTTPAddr: "10.1.2.3:8080"}, false},
		{"creds, all interfaces", RunOptions{Creds: "c.creds", HTTPAddr: ":8080"}, true},
		{"creds, 0.0.0.0", RunOptions{Creds: "c.creds", HTTPAddr: "0.0.0.0:8080"}, true},
		{"creds, [::]", RunOptions{Creds: "c.creds", HTTPAddr: "[::]:8080"}, true},
		{"creds, public address", RunOptions{Creds: "c.creds", HTTPAddr: "10.1.2.3:8080"}, true},
		{"creds, host name", RunOptions{Creds: "c.creds", HTTPAddr: "dash.example.com:8080"}, true},
		{"auth dir, all interfaces", RunOptions{AuthDir: "/etc/fleetwave/auth", HTTPAddr: ":8080"}, true},
		{"client certificate, all interfaces", RunOptions{TLS: natsutil.TLS{Cert: "c.pem", Key: "k.pem"}, HTTPAddr: ":8080"}, true},
		{"server CA only, all interfaces", RunOptions{TLS: natsutil.TLS{CA: "ca.pem"}, HTTPAddr: ":8080"}, false},
		{"creds, 127.0.0.1", RunOptions{Creds: "c.creds", HTTPAddr: "127.0.0.1:8080"}, false},
		{"creds, 127.0.0.2", RunOptions{Creds: "c.creds", HTTPAddr: "127.0.0.2:8080"}, false},
		{"creds, [::1]", RunOptions{Creds: "c.creds", HTTPAddr: "[::1]:8080"}, false},
		{"creds, localhost", RunOptions{Creds: "c.creds", HTTPAddr: "localhost:8080"}, false},
		{"creds, LocalHost", RunOptions{Creds: "c.creds", HTTPAddr: "LocalHost:8080"}, false},
		{"creds, TLS", RunOptions{Creds: "c.creds", HTTPAddr: ":8443", HTTPCert: "c.pem", HTTPKey: "k.pem"}, false},
		{"creds, --ui-insecure", RunOptions{Creds: "c.creds", HTTPAddr: ":8080", UIInsecure: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.o.uiRefusal()
			if (got != "") != tc.refused {
				t.Fatalf("uiRefusal() = %q, want refused %v", got, tc.refused)
			}
			if got == "" {
				return
			}
			for _, want := range []string{tc.o.HTTPAddr, "--http-tls-cert", "127.0.0.1", "--ui-insecure", "--ui=false"} {
				if !strings.Contains(got, want) {
					t.Errorf("uiRefusal() = %q: does not say %q", got, want)
				}
			}
		})
	}
}

// TestPageOf: pageOf gives s[lo:hi] of the sorted s for every page of
// every length up to 40, in every input order tried (sorted, reversed,
// shuffled, organ pipe), and for a large shuffled slice.
func TestPageOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	orders := map[string]func(n int) []int{
		"sorted":   func(n int) []int { return seq(n) },
		"reversed": func(n int) []int { s := seq(n); slices.Reverse(s); return s },
		"shuffled": func(n int) []int { s := seq(n); rng.Shuffle(n, func(i, j int) { s[i], s[j] = s[j], s[i] }); return s },
		"organ pipe": func(n int) []int {
			s := make([]int, 0, n)
			for i := 0; i < n; i += 2 {
				s = append(s, i)
			}
			for i := n - 1 - n%2; i > 0; i -= 2 {
				s = append(s, i)
			}
			return s
		},
	}
	for name, order := range orders {
		for n := range 41 {
			for lo := 0; lo <= n; lo++ {
				for hi := lo; hi <= n; hi++ {
					s := order(n)
					if len(s) != n {
						t.Fatalf("%s %d: built %d elements", name, n, len(s))
					}
					got := pageOf(s, lo, hi, cmp.Compare[int])
					if want := seq(n)[lo:hi]; !slices.Equal(got, want) {
						t.Fatalf("%s, %d elements, [%d:%d]: got %v, want %v", name, n, lo, hi, got, want)
					}
					slices.Sort(s)
					if !slices.Equal(s, seq(n)) {
						t.Fatalf("%s, %d elements, [%d:%d]: lost or duplicated elements: %v", name, n, lo, hi, s)
					}
				}
			}
		}
	}
	big := orders["shuffled"](100_000)
	for _, r := range [][2]int{{0, 50}, {49_950, 50_000}, {99_950, 100_000}, {0, 100_000}, {12_345, 12_845}} {
		s := slices.Clone(big)
		if got, want := pageOf(s, r[0], r[1], cmp.Compare[int]), seq(100_000)[r[0]:r[1]]; !slices.Equal(got, want) {
			t.Errorf("100,000 shuffled, [%d:%d]: got %v…, want %v…", r[0], r[1], got[:min(3, len(got))], want[:min(3, len(want))])
		}
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// TestStringSet: the set keeps each value once, past the short list too.
func TestStringSet(t *testing.T) {
	for _, n := range []int{0, 1, 31, 32, 33, 100} {
		var s stringSet
		for round := range 3 {
			for i := range n {
				s.add(strings.Repeat("v", i+1))
			}
			got := s.list()
			if got == nil || len(got) != n {
				t.Fatalf("%d values, round %d: list has %d (nil %v)", n, round, len(got), got == nil)
			}
			slices.Sort(got)
			if len(slices.Compact(got)) != n {
				t.Fatalf("%d values: duplicates in %v", n, got)
			}
		}
	}
}
