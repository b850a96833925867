// Package natsutil holds how all three binaries connect to NATS: reconnect
// forever with jittered backoff, log state changes once, and surface the
// permission errors that otherwise only look like timeouts.
package natsutil
