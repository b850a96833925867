package agentd

import (
	"log/slog"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// Where a site label comes from (agentd status' site_from).
const (
	siteFromSpec   = "update.yaml"
	siteFromDomain = "jetstream domain"
)

// noteDomain records the JetStream domain of the server the agent is
// connected to (nats.Conn.ConnectedDomain: the server's INFO carries it,
// no JetStream request is made). An edge site's leaf node has its own
// domain (deploy/nats/leaf-edge.conf), so by default the heartbeat names
// the site the agent reaches the bus through. An empty domain (not
// connected, or a server without one) keeps the last one: a heartbeat sent
// just after a reconnect names the site it was sent from. A domain that is
// not a valid site name is left out, and logged once.
func (a *Agent) noteDomain(domain string) {
	if domain == "" {
		return
	}
	if err := rollout.ValidateSite(domain); err != nil {
		if a.domainBad != domain {
			a.domainBad = domain
			a.o.Log.Warn("the NATS server's JetStream domain is not a valid site name; heartbeats name no site (set one with --site)",
				slog.Any("err", err))
		}
		a.domainSite = ""
		return
	}
	a.domainSite = domain
}

// siteLocked is the site the heartbeat names and where it comes from:
// update.yaml's spec.site (agentd --site), else the JetStream domain of the
// server the agent is (or last was) connected to, else none. a.mu is held.
func (a *Agent) siteLocked() (site, from string) {
	if s := a.update.Spec.Site; s != "" {
		return s, siteFromSpec
	}
	if nc := a.busConn.Load(); nc != nil {
		a.noteDomain(nc.ConnectedDomain())
	}
	if a.domainSite != "" {
		return a.domainSite, siteFromDomain
	}
	return "", ""
}

// site is siteLocked for callers that do not hold a.mu.
func (a *Agent) site() (site, from string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.siteLocked()
}
