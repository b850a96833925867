package httpfind

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Paths served by Handler.
const (
	PathFind    = "/v1/find"
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
)

// DefaultEdition is the edition answered when Handler.Edition is empty.
const DefaultEdition = "oss"

// MaxParamLen bounds each query parameter. An agent id is 36 bytes and a
// group name at most 63; the bound keeps error messages (which quote the
// value) and work per request small whatever a client sends.
const MaxParamLen = 256

// maxQueryLen bounds the raw query: two parameters of MaxParamLen,
// percent-encoded at worst three bytes a byte, with room for a cache-buster.
// A longer one is answered 414, as JSON: Server lets request lines far
// longer than this reach the handler (see maxHeaderBytes) so that net/http's
// own plain-text 431 is not what a client with a runaway query sees.
const maxQueryLen = 4096

// Handler serves the find endpoint and the health probes:
//
//	GET /v1/find?host=<agent id>&group=<group>[&app=<app>]  the Answer, as JSON
//	GET /healthz                                200 "ok" while the process serves
//	GET /readyz                                 200 "ok" when Ready is nil and a spec is loaded, else 503
//
// The host parameter may be in any case (macOS uuidgen writes uppercase); it
// is answered as the canonical lowercase id. HEAD is accepted wherever GET is
// (load balancers probe with it); any other method gets 405. Every error is
// JSON, {"error": "...", "field": "host"} with field naming the bad
// parameter when there is one; a group the config does not name is 404 with
// "field": "group" and "groups" listing the config's groups, an app it does
// not list 404 with "field": "app" and "apps" listing its apps. Nothing is
// cacheable: the answer changes with the plan, and a cache between agents
// and the controller would keep a halted rollout going.
//
// Handler takes no lock and does no I/O per request: the plan comes from the
// Store, which the controller keeps current from its watch of fleet_plan.
type Handler struct {
	// Store holds the plan; nil serves as an empty store (no plan yet).
	// With Apps set, it is the default app's for /readyz only.
	Store *Store
	// Apps, when set, picks the plan of the app a find request names (its
	// app parameter, "" when absent: the fleet's default app, as is the
	// default app's own name): the app's store, or ok false and the apps
	// there are. Nil: the endpoint serves Store alone, and refuses any
	// app parameter (it cannot tell which app the request means).
	Apps func(app string) (store *Store, known []string, ok bool)
	// Edition is answered as "edition"; empty means DefaultEdition.
	Edition string
	// Ready reports whether the plan can be trusted to be current: the
	// controller returns its bus connection's state. While it returns an
	// error, /readyz and /v1/find answer 503. Nil means always ready.
	Ready func() error
	// Log receives rejected requests at debug level; nil discards.
	Log *slog.Logger
}

// errorBody is the JSON of every non-200 answer.
type errorBody struct {
	Error string `json:"error"`
	// Field names the query parameter at fault, when one is.
	Field string `json:"field,omitempty"`
	// Groups are the config's groups, with an unknown group's 404.
	Groups []string `json:"groups,omitempty"`
	// Apps are the config's apps, with an unknown app's 404.
	Apps []string `json:"apps,omitempty"`
}

// ServeHTTP dispatches on the path. A switch rather than http.ServeMux
// because every miss (404, 405) must be JSON like the other errors.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr["Cache-Control"] = []string{"no-store"}
	// The body quotes what the client sent; never let a browser sniff it
	// into HTML.
	hdr["X-Content-Type-Options"] = []string{"nosniff"}
	var serve func(http.ResponseWriter, *http.Request)
	switch r.URL.Path {
	case PathFind:
		serve = h.find
	case PathHealthz:
		serve = h.healthz
	case PathReadyz:
		serve = h.readyz
	default:
		writeError(w, http.StatusNotFound, "", fmt.Sprintf("no such endpoint; try GET %s?host=<agent id>&group=<group>", PathFind))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr["Allow"] = []string{"GET, HEAD"}
		writeError(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("method %s not allowed; use GET", r.Method))
		return
	}
	serve(w, r)
}

// find answers GET /v1/find. Parameters are checked before readiness so a
// client with a bad id or group learns that whatever state the controller
// is in.
func (h *Handler) find(w http.ResponseWriter, r *http.Request) {
	if n := len(r.URL.RawQuery); n > maxQueryLen {
		writeError(w, http.StatusRequestURITooLong, "", fmt.Sprintf("query is %d bytes; at most %d", n, maxQueryLen))
		return
	}
	id, group, app, field, err := parseFindQuery(r.URL.RawQuery)
	if err != nil {
		h.logger().Debug("find: bad request", slog.String("remote", r.RemoteAddr), slog.String("field", field), slog.Any("err", err))
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	// A controller cut off from the bus may hold a plan the leader has since
	// changed (a halt, a rollback). Refuse rather than keep a halted rollout
	// going; the client asks the next controller, and an agent with no answer
	// keeps what it runs.
	if err := h.ready(); err != nil {
		writeError(w, http.StatusServiceUnavailable, "", "not ready: "+err.Error())
		return
	}
	store := h.store()
	switch {
	case h.Apps != nil:
		s, known, ok := h.Apps(app)
		if !ok {
			h.logger().Debug("find: unknown app", slog.String("remote", r.RemoteAddr), slog.String("app", app))
			writeJSON(w, http.StatusNotFound, errorBody{Error: fmt.Sprintf("%v %q: the config's apps are %s", ErrUnknownApp, app, strings.Join(known, ", ")),
				Field: "app", Apps: known})
			return
		}
		store = s
	case app != "":
		writeError(w, http.StatusNotFound, "app", fmt.Sprintf("%v %q: this endpoint serves one app; leave app out", ErrUnknownApp, app))
		return
	}
	a, err := store.Get().Find(id, group)
	var unknown *UnknownGroupError
	switch {
	case errors.As(err, &unknown):
		h.logger().Debug("find: unknown group", slog.String("remote", r.RemoteAddr), slog.String("group", group))
		writeJSON(w, http.StatusNotFound, errorBody{Error: err.Error(), Field: "group", Groups: unknown.Known})
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "", err.Error())
		return
	}
	a.Edition = h.edition()
	writeJSON(w, http.StatusOK, a)
}

func (h *Handler) healthz(w http.ResponseWriter, _ *http.Request) {
	writeText(w, http.StatusOK, "ok\n")
}

func (h *Handler) readyz(w http.ResponseWriter, _ *http.Request) {
	if err := h.ready(); err != nil {
		writeError(w, http.StatusServiceUnavailable, "", "not ready: "+err.Error())
		return
	}
	if !h.store().Get().HasSpec {
		writeError(w, http.StatusServiceUnavailable, "", ErrNoPlan.Error())
		return
	}
	writeText(w, http.StatusOK, "ok\n")
}

// parseFindQuery checks the query of a find request and returns the agent
// id, group and app ("" when absent), or the field at fault ("" for the
// query as a whole) and why. Parameters other than host, group and app are
// ignored: a later agent may send more, and a cache-buster must not break
// the request.
func parseFindQuery(raw string) (id rollout.AgentID, group, app, field string, err error) {
	if len(raw) > maxQueryLen {
		return "", "", "", "", fmt.Errorf("query longer than %d bytes", maxQueryLen)
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "", "", "", "", fmt.Errorf("query: %v", err)
	}
	host, err := param(q, "host")
	if err != nil {
		return "", "", "", "host", err
	}
	group, err = param(q, "group")
	if err != nil {
		return "", "", "", "group", err
	}
	if vs, given := q["app"]; given {
		switch {
		case len(vs) > 1:
			return "", "", "", "app", fmt.Errorf("parameter app given %d times; give it once", len(vs))
		case vs[0] == "":
			// app= is the default app, as no app is.
		case len(vs[0]) > MaxParamLen:
			return "", "", "", "app", fmt.Errorf("parameter app is %d bytes; at most %d", len(vs[0]), MaxParamLen)
		default:
			if err := rollout.ValidateAppName(vs[0]); err != nil {
				return "", "", "", "app", fmt.Errorf("app: %w", err)
			}
			app = vs[0]
		}
	}
	// Any case is the same id (macOS uuidgen writes capitals); the
	// canonical one is lowercase. ParseAgentID's own message asks for
	// lowercase, which is not what this endpoint wants.
	if id, err = rollout.ParseAgentID(strings.ToLower(host)); err != nil {
		return "", "", "", "host", fmt.Errorf("host: %w %q: want a UUID like 1b4e28ba-2fa1-4d2e-883f-0016d3cca427 (any case)",
			rollout.ErrBadAgentID, quoteMax(host, 40))
	}
	if err = rollout.ValidateGroupName(group); err != nil {
		return "", "", "", "group", fmt.Errorf("group: %w", err)
	}
	return id, group, app, "", nil
}

// param returns the one value of a required parameter. A repeated parameter
// is refused rather than resolved: a proxy and the controller picking
// different copies is how request smuggling starts.
func param(q url.Values, name string) (string, error) {
	vs := q[name]
	switch {
	case len(vs) == 0 || len(vs) == 1 && vs[0] == "":
		return "", fmt.Errorf("missing parameter %s: want %s?host=<agent id>&group=<group>", name, PathFind)
	case len(vs) > 1:
		return "", fmt.Errorf("parameter %s given %d times; give it once", name, len(vs))
	case len(vs[0]) > MaxParamLen:
		return "", fmt.Errorf("parameter %s is %d bytes; at most %d", name, len(vs[0]), MaxParamLen)
	}
	return vs[0], nil
}

// quoteMax is s cut to n bytes, with "…" when cut.
func quoteMax(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

func (h *Handler) ready() error {
	if h.Ready == nil {
		return nil
	}
	return h.Ready()
}

func (h *Handler) store() *Store {
	if h.Store == nil {
		return &Store{}
	}
	return h.Store
}

func (h *Handler) edition() string {
	if h.Edition == "" {
		return DefaultEdition
	}
	return h.Edition
}

func (h *Handler) logger() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

// writeJSON answers v as JSON. HTML escaping is off: bodies quote what the
// client sent, and "\u003c" for "<" only makes them harder to read; the
// Content-Type and nosniff keep a browser from reading them as HTML.
func writeJSON(w http.ResponseWriter, code int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b) // ends the body with a newline
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only our own types get here; they always marshal.
		panic(fmt.Sprintf("httpfind: marshal %T: %v", v, err))
	}
	w.Header()["Content-Type"] = []string{"application/json"}
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes()) // a failed write is the client's hang-up; nothing to do
}

func writeError(w http.ResponseWriter, code int, field, msg string) {
	writeJSON(w, code, errorBody{Error: msg, Field: field})
}

func writeText(w http.ResponseWriter, code int, s string) {
	w.Header()["Content-Type"] = []string{"text/plain; charset=utf-8"}
	w.WriteHeader(code)
	_, _ = w.Write([]byte(s))
}
