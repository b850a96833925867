// Package install owns an agent host's install tree under one root directory:
// update.yaml (the updater's config and status), and, as it grows, download,
// verification, extraction, links, database backup, health checks and
// rollback. It does no NATS.
package install
