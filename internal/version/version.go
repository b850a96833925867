// Package version is the fleetwave build version, reported by every binary
// and by agents in their heartbeats (updater_version).
package version

// Version is set at build time with
// -ldflags "-X github.com/fleetwave/fleetwave/internal/version.Version=1.2.3".
var Version = "0.1.0"
