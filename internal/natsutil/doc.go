// Package natsutil holds what all three binaries share about NATS: how they
// connect (reconnect forever, log state changes and permission errors), and
// the embedded JetStream server the controller runs when given no URL.
package natsutil
