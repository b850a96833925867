package auth

import (
	"bytes"
	"fmt"

	"github.com/nats-io/jwt/v2"
)

// ResolverConf is the nats-server configuration include that makes a server
// trust the operator: the operator JWT, the system account, and every
// account JWT (SYS, FLEET, AGENTS) as resolver preloads. It holds no secrets. Every fleetwave
// server (single, cluster node, edge leaf, the controller's embedded one)
// includes the same file; "fleetctl auth revoke" rewrites it.
//
// The resolver itself (where account JWTs are kept) is the including
// config's choice: deploy/nats uses a full directory resolver, which stores
// pushed updates and syncs them across a cluster, and keeps the newer of a
// stored and a preloaded JWT, so a revocation survives restarts even on a
// server whose copy of this file is stale.
func ResolverConf(operatorJWT string, accountJWTs ...string) ([]byte, error) {
	oc, err := jwt.DecodeOperatorClaims(operatorJWT)
	if err != nil {
		return nil, fmt.Errorf("operator jwt: %w", err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `# fleetwave operator %q: the NATS trust root of this fleet.
# Written by "fleetctl auth init", rewritten by "fleetctl auth revoke"; do not
# edit by hand. No secrets here: JWTs are public, the seeds stay in keys/.
# Include it from every server's config: include "resolver.conf"
operator: %q
system_account: %s
resolver_preload: {
`, oc.Name, operatorJWT, oc.SystemAccount)
	for _, token := range accountJWTs {
		ac, err := jwt.DecodeAccountClaims(token)
		if err != nil {
			return nil, fmt.Errorf("account jwt: %w", err)
		}
		fmt.Fprintf(&b, "  # account %s (%d revocations)\n  %s: %q\n", ac.Name, len(ac.Revocations), ac.Subject, token)
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// AccountConf defines the FLEET account's public key as a config variable,
// for the one place a server config must name the account: a leaf node
// remote (account: $FLEET_ACCOUNT). Only configs that use it include it;
// nats-server rejects an unused top-level name.
func AccountConf(fleetJWT string) ([]byte, error) {
	ac, err := jwt.DecodeAccountClaims(fleetJWT)
	if err != nil {
		return nil, fmt.Errorf("account jwt: %w", err)
	}
	return fmt.Appendf(nil, "# The FLEET account's public key (written by \"fleetctl auth init\").\nFLEET_ACCOUNT: %s\n", ac.Subject), nil
}
