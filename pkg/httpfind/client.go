package httpfind

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// MaxBodyBytes bounds a response body the client reads. An answer is about
// a hundred bytes; anything near this is not one.
const MaxBodyBytes = 64 << 10

// DefaultAttemptTimeout bounds one URL's attempt when Client.Timeout is 0,
// so a controller that accepts and never answers cannot use up the caller's
// whole deadline before the others are tried.
const DefaultAttemptTimeout = 10 * time.Second

// Client asks the controllers' find endpoints for an agent's answer. Each
// call tries the URLs in turn until one answers 200, starting one URL later
// than the previous call, so a fleet of agents spreads its polls over the
// controllers instead of all hitting the first. A Client is safe for
// concurrent use; do not copy one after first use.
type Client struct {
	// URLs are find endpoints, as in update.yaml's find_urls
	// ("https://ctl-1.example.net/v1/find"). A URL with no path gets
	// /v1/find; its own query parameters are kept.
	URLs []string
	// HTTP sends the requests; nil means http.DefaultClient (which honours
	// HTTPS_PROXY and friends).
	HTTP *http.Client
	// Timeout bounds each URL's attempt; 0 means DefaultAttemptTimeout.
	Timeout time.Duration
	// App is the app whose plan is asked for (the app parameter); empty:
	// the fleet's default app, and no parameter is sent, as before apps.
	App string

	next atomic.Uint32 // where the next call starts
}

// StatusError is a non-200 response from a find endpoint.
type StatusError struct {
	URL  string
	Code int
	// Message is the server's "error", or the start of a body that is not
	// one (a proxy's error page).
	Message string
	// Field names the query parameter the server refused, if any.
	Field string
	// Groups are the config's groups, when the server refused the group as
	// unknown (404, field "group").
	Groups []string
	// Apps are the config's apps, when the server refused the app as
	// unknown (404, field "app").
	Apps []string
}

// Unwrap is ErrUnknownGroup for a controller's 404 of the group, and
// ErrUnknownApp for one of the app, so that errors.Is tells "this agent's
// group (or app) is wrong" from "nobody answered".
func (e *StatusError) Unwrap() error {
	switch {
	case e.Code == http.StatusNotFound && e.Field == "group":
		return ErrUnknownGroup
	case e.Code == http.StatusNotFound && e.Field == "app":
		return ErrUnknownApp
	}
	return nil
}

// Error says which URL answered what: "https://ctl-1/v1/find: 503 Service
// Unavailable: no plan yet".
func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s: %d %s", e.URL, e.Code, http.StatusText(e.Code))
	if e.Field != "" {
		s += " (" + e.Field + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Find returns the answer for agent id of group from the first URL that
// gives one. When none does, the error lists every URL's failure, in the
// order tried (errors.Is and errors.As see each of them).
func (c *Client) Find(ctx context.Context, id rollout.AgentID, group string) (Answer, error) {
	// Check here what the server would refuse: a bad id or group is our bug,
	// and asking every controller would not fix it.
	if _, err := rollout.ParseAgentID(string(id)); err != nil {
		return Answer{}, fmt.Errorf("find: %w", err)
	}
	if err := rollout.ValidateGroupName(group); err != nil {
		return Answer{}, fmt.Errorf("find: %w", err)
	}
	if c.App != "" {
		if err := rollout.ValidateAppName(c.App); err != nil {
			return Answer{}, fmt.Errorf("find: %w", err)
		}
	}
	n := len(c.URLs)
	if n == 0 {
		return Answer{}, fmt.Errorf("find: %w", ErrNoURL)
	}
	start := int((c.next.Add(1) - 1) % uint32(n))
	var errs failures
	for i := range n {
		if err := ctx.Err(); err != nil {
			errs = append(errs, fmt.Errorf("find: %w", err))
			break
		}
		a, err := c.try(ctx, c.URLs[(start+i)%n], id, group)
		if err == nil {
			return a, nil
		}
		errs = append(errs, err)
	}
	return Answer{}, errs
}

// try asks one URL.
func (c *Client) try(ctx context.Context, base string, id rollout.AgentID, group string) (Answer, error) {
	u, err := findURL(base, id, group, c.App)
	if err != nil {
		return Answer{}, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultAttemptTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Answer{}, fmt.Errorf("%s: %w", base, err)
	}
	req.Header.Set("Accept", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("%s: %w", base, err) // *url.Error already names the URL, but not which of ours
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err != nil {
		return Answer{}, fmt.Errorf("%s: read answer: %w", base, err)
	}
	if resp.StatusCode != http.StatusOK {
		return Answer{}, statusError(base, resp.StatusCode, body)
	}
	if len(body) > MaxBodyBytes {
		return Answer{}, fmt.Errorf("%s: %w: body larger than %d bytes", base, ErrBadAnswer, MaxBodyBytes)
	}
	a, err := DecodeAnswer(body)
	if err != nil {
		return Answer{}, fmt.Errorf("%s: %w", base, err)
	}
	return a, nil
}

// findURL builds the request URL for one endpoint; app "" sends no app
// parameter (the default app).
func findURL(base string, id rollout.AgentID, group, app string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("find URL %q: %w", base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("find URL %q: want http(s)://host[:port][/v1/find]", base)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = PathFind
	}
	q := u.Query()
	q.Set("host", string(id))
	q.Set("group", group)
	if app != "" {
		q.Set("app", app)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// statusError makes a StatusError from a non-200 body, which is our JSON
// error when a controller sent it and anything at all when a proxy did.
func statusError(base string, code int, body []byte) *StatusError {
	e := &StatusError{URL: base, Code: code}
	var eb errorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error != "" {
		e.Message, e.Field, e.Groups, e.Apps = eb.Error, eb.Field, eb.Groups, eb.Apps
		return e
	}
	const shown = 200
	s := strings.ToValidUTF8(strings.TrimSpace(string(body[:min(len(body), shown)])), "?")
	if len(body) > shown {
		s += "…"
	}
	e.Message = s
	return e
}

// failures is every URL's error from one Find, in the order tried.
type failures []error

func (f failures) Error() string {
	parts := make([]string, len(f))
	for i, err := range f {
		parts[i] = err.Error()
	}
	return "find: no URL answered: " + strings.Join(parts, "; ")
}

func (f failures) Unwrap() []error { return f }
