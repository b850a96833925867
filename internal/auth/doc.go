// Package auth mints fleetwave's decentralized NATS identities with jwt/v2
// and nkeys: one operator, the system account, the FLEET account, and its
// users (controller, admin, leaf, and one per agent, each with a fixed set
// of grants). Minting is pure (keys in, JWTs, creds and config text out);
// Dir keeps the results in a directory, writing every seed 0600 in one place.
package auth
