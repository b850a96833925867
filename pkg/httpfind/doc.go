// Package httpfind owns the HTTP find endpoint (DESIGN §5): the handler the
// controller serves on --http-addr (GET /v1/find, /healthz, /readyz), the
// in-memory plan it answers from, the server wiring (timeouts, TLS, graceful
// shutdown) and the small client agentd falls back to when the bus is out of
// reach. The answer is rollout.Decide on the plan, so HTTP and the bus can
// never disagree; the package imports nothing of ours but pkg/rollout and no
// NATS, so the controller feeds the Store from its own bucket watch.
package httpfind
