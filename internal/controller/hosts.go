package controller

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// The Host allowlist of the HTTP port (controller run --http-allowed-hosts,
// docs/dashboard.md "Who can see it"). DNS rebinding points a name the
// attacker owns at the controller's address, so that a page of theirs in
// an operator's browser reads the controller as its own origin: the
// browser sends the attacker's name as Host. Answering only the names the
// controller is reached by closes that, whatever address it listens on.
//
// Always answered: IP addresses and "localhost" (rebinding needs a name the
// attacker controls; a page at an IP literal or localhost is that origin,
// not the attacker's). Otherwise a request is answered when its host is
// listed. With --http-allowed-hosts the list is exactly the flag's, and
// every request is checked. Without it, the list is the --http-addr host
// and, when that address is not loopback, this machine's host name; the
// dashboard's paths (/, /ui/, /api/) are checked for every client, the
// others (/v1/find, /metrics, /healthz, /readyz) only for browsers (a
// request with Fetch Metadata or Origin headers, which a browser always
// sends and a page cannot remove): agents and Prometheus reach a
// controller by names it cannot know (a DNS alias, a load balancer), and
// agents ask /v1/find only while the bus is down, so refusing them by
// default would surface exactly in an outage.
//
// A refused request is answered 421 Misdirected Request with a JSON error
// naming the flag.

// AnyHost is the --http-allowed-hosts entry that allows every host.
const AnyHost = "*"

// hostWarnEvery is the least time between two "Host refused" log lines.
const hostWarnEvery = time.Minute

// HostGuard answers 421 to requests for a Host it does not allow, and
// hands the others to Next.
type HostGuard struct {
	// Hosts are the host names allowed (lower case, no port, no trailing
	// dot), and "*.domain" for any name under domain; AnyHost allows all.
	Hosts []string
	// EveryRequest checks every request; otherwise only the dashboard's
	// paths and browsers' requests (see above).
	EveryRequest bool
	Next         http.Handler
	Log          *slog.Logger

	mu       sync.Mutex
	warnedAt time.Time
	refused  int // since the last line
}

// NewHostGuard is the guard of "controller run": flag is
// --http-allowed-hosts (nil when not given), httpAddr --http-addr.
func NewHostGuard(flag []string, httpAddr string, next http.Handler, log *slog.Logger) (*HostGuard, error) {
	if flag != nil {
		hosts, err := ParseAllowedHosts(flag)
		if err != nil {
			return nil, err
		}
		return &HostGuard{Hosts: hosts, EveryRequest: true, Next: next, Log: log}, nil
	}
	return &HostGuard{Hosts: DefaultAllowedHosts(httpAddr, os.Hostname), Next: next, Log: log}, nil
}

// ParseAllowedHosts checks and normalizes --http-allowed-hosts values:
// host names or IP addresses without a port, "*.domain", or "*" alone.
func ParseAllowedHosts(list []string) ([]string, error) {
	var out []string
	for _, raw := range list {
		h := normalizeHost(strings.TrimSpace(raw))
		switch {
		case h == AnyHost && strings.TrimSpace(raw) != AnyHost:
			return nil, fmt.Errorf("--http-allowed-hosts %q: want a host name or IP address without scheme, port or path (fleet.example.com), or *.example.com for the names under a domain", rollout.ClipText(raw, 80))
		case h == AnyHost:
			if len(list) > 1 {
				return nil, fmt.Errorf("--http-allowed-hosts: %q allows every host: give it alone", AnyHost)
			}
		case h == "":
			return nil, fmt.Errorf("--http-allowed-hosts: an empty entry: give host names, as in fleet.example.com,controller-1")
		case !validHostPattern(h):
			return nil, fmt.Errorf("--http-allowed-hosts %q: want a host name or IP address without scheme, port or path (fleet.example.com), or *.example.com for the names under a domain", rollout.ClipText(raw, 80))
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out, nil
}

// validHostPattern: letters, digits, '-', '.', '_' (a name), ':' inside an
// IPv6 address, or "*." before a name.
func validHostPattern(h string) bool {
	if ip := net.ParseIP(h); ip != nil {
		return true
	}
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 || strings.HasPrefix(h, ".") || strings.HasSuffix(h, ".") || strings.Contains(h, "..") {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

// DefaultAllowedHosts are the names answered without --http-allowed-hosts:
// httpAddr's host when it is a name, and, when httpAddr is not a loopback
// address, this machine's host name (hostname) and its first label.
func DefaultAllowedHosts(httpAddr string, hostname func() (string, error)) []string {
	host, _, err := net.SplitHostPort(httpAddr)
	if err != nil {
		host = httpAddr
	}
	host = normalizeHost(host)
	var out []string
	add := func(h string) {
		if h = normalizeHost(h); h != "" && net.ParseIP(h) == nil && h != "localhost" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	add(host)
	if isLoopback(host) {
		return out
	}
	if name, err := hostname(); err == nil {
		add(name)
		short, _, _ := strings.Cut(normalizeHost(name), ".")
		add(short)
	}
	return out
}

// normalizeHost is h in lower case, without brackets around an IPv6 address
// or a trailing dot.
func normalizeHost(h string) string {
	h = strings.ToLower(h)
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	return strings.TrimSuffix(h, ".")
}

// hostOf is the host of a request's Host header, without its port.
func hostOf(hostHeader string) string {
	h := hostHeader
	if host, _, err := net.SplitHostPort(hostHeader); err == nil {
		h = host
	}
	return normalizeHost(h)
}

// Allows reports whether a request with this Host header is answered. An
// empty Host (an HTTP/1.0 client: never a browser) is.
func (g *HostGuard) Allows(hostHeader string) bool {
	h := hostOf(hostHeader)
	if h == "" || h == "localhost" || net.ParseIP(h) != nil {
		return true
	}
	for _, a := range g.Hosts {
		switch {
		case a == AnyHost, a == h:
			return true
		case strings.HasPrefix(a, "*.") && strings.HasSuffix(h, a[1:]):
			return true
		}
	}
	return false
}

// fromBrowser reports whether r carries the headers every current browser
// adds to its requests and no page can take off: Fetch Metadata
// (Sec-Fetch-Site, Sec-Fetch-Mode) or Origin.
func fromBrowser(r *http.Request) bool {
	h := r.Header
	return h.Get("Sec-Fetch-Site") != "" || h.Get("Sec-Fetch-Mode") != "" || h.Get("Origin") != ""
}

// checks reports whether r's Host is checked.
func (g *HostGuard) checks(r *http.Request) bool {
	return g.EveryRequest || isDashboardPath(r.URL.Path) || fromBrowser(r)
}

func (g *HostGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.checks(r) || g.Allows(r.Host) {
		g.Next.ServeHTTP(w, r)
		return
	}
	g.noteRefused(r)
	writeJSONError(w, fmt.Sprintf("host %q is not one this controller answers to: add it to controller run --http-allowed-hosts (docs/dashboard.md)",
		rollout.ClipText(r.Host, 100)), http.StatusMisdirectedRequest)
}

// noteRefused logs a refused request: the first at once, then at most one
// line every hostWarnEvery with the count since.
func (g *HostGuard) noteRefused(r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refused++
	now := time.Now()
	if !g.warnedAt.IsZero() && now.Sub(g.warnedAt) < hostWarnEvery {
		return
	}
	if g.Log != nil {
		g.Log.Warn("HTTP: refused a request for a host not allowed (421); if it is a name clients use, add it to --http-allowed-hosts",
			slog.String("host", rollout.ClipText(r.Host, 100)), slog.String("path", rollout.ClipText(r.URL.Path, 100)),
			slog.String("remote", r.RemoteAddr), slog.Int("refused_since_last_line", g.refused))
	}
	g.warnedAt, g.refused = now, 0
}
