// Package deploy_test proves the server configs in deploy/nats: each parses
// as nats-server reads it (the CI also runs "nats-server -t" on each), a
// 3-node cluster started from cluster-*.conf loses no acknowledged write when
// the plan bucket's leader dies and the rollout continues, and an agent at an
// edge site (leaf-edge.conf) heartbeats into the hub's stream and reads the
// plan, also while the site is cut off.
package deploy_test
