package controller_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/internal/controller"
)

// TestHostGuard: which requests the HTTP port answers, by Host, path and
// whether a browser sends them, with the default list (loopback and
// network listens) and with --http-allowed-hosts.
func TestHostGuard(t *testing.T) {
	hostname := func() (string, error) { return "ctl-1.corp.example", nil }
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	guard := func(flag []string, addr string) *controller.HostGuard {
		if flag == nil {
			return &controller.HostGuard{Hosts: controller.DefaultAllowedHosts(addr, hostname), Next: ok}
		}
		g, err := controller.NewHostGuard(flag, addr, ok, nil)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	loopback, network, listed := guard(nil, "127.0.0.1:8080"), guard(nil, ":8080"), guard([]string{"fleet.example.com", "*.ctl.example"}, ":8080")
	any := guard([]string{"*"}, ":8080")
	paths := []string{"/", "/ui/app.js", "/api/v1/status", "/api/v1/stream", "/v1/find?host=x&group=prod", "/metrics", "/healthz"}
	dashboard := func(p string) bool { return p == "/" || strings.HasPrefix(p, "/ui/") || strings.HasPrefix(p, "/api/") }
	for _, tc := range []struct {
		name    string
		g       *controller.HostGuard
		host    string
		browser bool
		allowed func(path string) bool
	}{
		{"loopback listen: evil.example from a browser", loopback, "evil.example", true, func(string) bool { return false }},
		{"loopback listen: evil.example from a client", loopback, "evil.example:8080", false, func(p string) bool { return !dashboard(p) }},
		{"loopback listen: localhost", loopback, "localhost:8080", true, func(string) bool { return true }},
		{"loopback listen: LOCALHOST.", loopback, "LOCALHOST.:8080", true, func(string) bool { return true }},
		{"loopback listen: 127.0.0.1", loopback, "127.0.0.1:8080", true, func(string) bool { return true }},
		{"loopback listen: [::1]", loopback, "[::1]:8080", true, func(string) bool { return true }},
		{"loopback listen: the host name is not loopback's", loopback, "ctl-1.corp.example", true, func(string) bool { return false }},
		{"network listen: the host name", network, "ctl-1.corp.example:8080", true, func(string) bool { return true }},
		{"network listen: the short host name", network, "CTL-1", true, func(string) bool { return true }},
		{"network listen: a LAN address", network, "10.1.2.3:8080", true, func(string) bool { return true }},
		{"network listen: an alias from an agent", network, "fleet-find.corp.example", false, func(p string) bool { return !dashboard(p) }},
		{"network listen: an alias from a browser", network, "fleet-find.corp.example", true, func(string) bool { return false }},
		{"network listen: no Host (HTTP/1.0)", network, "", true, func(string) bool { return true }},
		{"listed: the name", listed, "fleet.example.com", false, func(string) bool { return true }},
		{"listed: a name under the domain", listed, "a.ctl.example", false, func(string) bool { return true }},
		{"listed: not the domain itself", listed, "ctl.example", false, func(string) bool { return false }},
		{"listed: not a name ending the same", listed, "evilctl.example", false, func(string) bool { return false }},
		{"listed: evil.example from a client, every path", listed, "evil.example", false, func(string) bool { return false }},
		{"listed: the host name is no more", listed, "ctl-1.corp.example", false, func(string) bool { return false }},
		{"listed: an IP address", listed, "192.0.2.7", false, func(string) bool { return true }},
		{"any", any, "evil.example", true, func(string) bool { return true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range paths {
				r := httptest.NewRequest(http.MethodGet, p, nil)
				r.Host = tc.host
				if tc.browser {
					r.Header.Set("Sec-Fetch-Site", "same-origin")
					r.Header.Set("Sec-Fetch-Mode", "cors")
				}
				w := httptest.NewRecorder()
				tc.g.ServeHTTP(w, r)
				want := http.StatusMisdirectedRequest
				if tc.allowed(p) {
					want = http.StatusOK
				}
				if w.Code != want {
					t.Errorf("%s: %d %s, want %d", p, w.Code, strings.TrimSpace(w.Body.String()), want)
				}
				if w.Code == http.StatusMisdirectedRequest && !strings.Contains(w.Body.String(), `--http-allowed-hosts`) {
					t.Errorf("%s: the 421 does not name the flag: %s", p, w.Body.String())
				}
			}
		})
	}
}

func TestParseAllowedHosts(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    []string
		wantErr string
	}{
		{in: []string{"Fleet.Example.com", " fleet.example.com. ", "*.ctl.example", "10.0.0.1", "[::1]"}, want: []string{"fleet.example.com", "*.ctl.example", "10.0.0.1", "::1"}},
		{in: []string{"*"}, want: []string{"*"}},
		{in: []string{"*", "a"}, wantErr: "give it alone"},
		{in: []string{""}, wantErr: "an empty entry"},
		{in: []string{"fleet.example.com:443"}, wantErr: "without scheme, port or path"},
		{in: []string{"https://fleet.example.com"}, wantErr: "without scheme, port or path"},
		{in: []string{"a/b"}, wantErr: "without scheme, port or path"},
		{in: []string{"a..b"}, wantErr: "without scheme, port or path"},
		{in: []string{"*."}, wantErr: "without scheme, port or path"},
		{in: []string{"a*b"}, wantErr: "without scheme, port or path"},
	} {
		got, err := controller.ParseAllowedHosts(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestDefaultAllowedHosts(t *testing.T) {
	named := func() (string, error) { return "Ctl-1.Corp.Example.", nil }
	for _, tc := range []struct {
		addr     string
		hostname func() (string, error)
		want     []string
	}{
		{"127.0.0.1:8080", named, nil},
		{"localhost:8080", named, nil},
		{"[::1]:8080", named, nil},
		{":8080", named, []string{"ctl-1.corp.example", "ctl-1"}},
		{"0.0.0.0:8080", named, []string{"ctl-1.corp.example", "ctl-1"}},
		{"fleet.example.com:8080", named, []string{"fleet.example.com", "ctl-1.corp.example", "ctl-1"}},
		{"10.0.0.5:8080", func() (string, error) { return "", errors.New("no name") }, nil},
	} {
		if diff := cmp.Diff(tc.want, controller.DefaultAllowedHosts(tc.addr, tc.hostname)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.addr, diff)
		}
	}
}
