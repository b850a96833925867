package controller

import (
	"net"
	"net/http"
	"strings"
	"testing"
)

// FuzzHostGuard: any Host header and --http-allowed-hosts value is
// handled without a panic; a list that parses holds only normalized
// entries; the default loopback guard answers a browser only for no Host,
// localhost or an IP address.
func FuzzHostGuard(f *testing.F) {
	for _, s := range [][2]string{{"evil.example", "fleet.example.com"}, {"[::1]:80", "*.a"}, {"LOCALHOST.", "*"},
		{"a.b:c:d", "[::1]"}, {"\x00", ""}, {"127.0.0.1", "x:1"}, {"A.CTL.example:443", "*.ctl.example,10.0.0.1"}} {
		f.Add(s[0], s[1])
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	noName := func() (string, error) { return "", nil }
	loopback := &HostGuard{Hosts: DefaultAllowedHosts("127.0.0.1:8080", noName), Next: ok}
	f.Fuzz(func(t *testing.T, host, list string) {
		if loopback.Allows(host) {
			if h := hostOf(host); h != "" && h != "localhost" && net.ParseIP(h) == nil {
				t.Errorf("the loopback guard allows %q", host)
			}
		}
		hosts, err := ParseAllowedHosts(strings.Split(list, ","))
		if err != nil {
			return
		}
		for _, h := range hosts {
			if h != normalizeHost(h) || strings.ContainsAny(h, "/: ") && net.ParseIP(h) == nil {
				t.Errorf("entry %q of %q is not a normalized host", h, list)
			}
		}
		g := &HostGuard{Hosts: hosts, EveryRequest: true, Next: ok}
		if g.Allows(host) && !slicesAllow(hosts, hostOf(host)) {
			t.Errorf("%q allowed by %q", host, hosts)
		}
	})
}

// slicesAllow is Allows written out another way: the oracle of the fuzz.
func slicesAllow(hosts []string, h string) bool {
	if h == "" || h == "localhost" || net.ParseIP(h) != nil {
		return true
	}
	for _, a := range hosts {
		if a == "*" || a == h || len(a) > 2 && a[:2] == "*." && len(h) > len(a)-1 && h[len(h)-(len(a)-1):] == a[1:] {
			return true
		}
	}
	return false
}
