package rollout

import (
	"fmt"
	"sort"
	"strings"
)

// A site is where an agent runs (a data centre, an edge location): an
// optional label its heartbeat carries (agentd --site, by default the
// JetStream domain of the server it connects to). Sites change no rule:
// counts are broken down by site for people, and a halt names the sites
// its failures came from, so that a failure confined to one site reads as
// that site's problem.

// MaxSiteLen bounds site names: they appear in halt reasons and tables.
const MaxSiteLen = 40

// Keys of SiteCounts that are not site names (neither is a valid one):
// agents whose heartbeat names no site, and, past MaxSites, the sites left
// out.
const (
	NoSite     = "(none)"
	OtherSites = "(other)"
)

// MaxSites bounds how many sites one group's SiteCounts keeps (in
// fleet_stats); the agents of the others are counted under OtherSites.
const MaxSites = 100

// maxHaltSites bounds how many sites a halt reason names.
const maxHaltSites = 3

// ValidateSite checks a site name: 1-MaxSiteLen bytes of letters, digits,
// '-', '_' and '.', starting and ending with a letter or digit (a
// JetStream domain name of that shape is one).
func ValidateSite(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", ErrBadSite)
	}
	if len(s) > MaxSiteLen {
		return fmt.Errorf("%w %q: longer than %d characters", ErrBadSite, truncate(s, MaxSiteLen+10), MaxSiteLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if alnum || (c == '-' || c == '_' || c == '.') && i != 0 && i != len(s)-1 {
			continue
		}
		return fmt.Errorf("%w %q: use letters, digits, '-', '_' and '.', starting and ending with a letter or digit", ErrBadSite, s)
	}
	return nil
}

// SiteCounts maps site → the Counts of its agents (without LowestID), for
// one group: the "sites" of a fleet_stats entry. NoSite holds the agents
// that name none, OtherSites those of sites past MaxSites.
type SiteCounts map[string]Counts

// CountSites tallies agents by site; nil when none names a site, so that
// fleets without sites carry no breakdown. At most MaxSites sites are kept
// (those with the most agents, then by name); the rest go to OtherSites.
func CountSites(agents []AgentView) SiteCounts {
	sc := SiteCounts{}
	for _, a := range agents {
		sc.Add(a)
	}
	return sc.Done()
}

// Add counts one agent into sc (CountSites' rule for callers that tally
// without building a slice; call Done at the end).
func (sc SiteCounts) Add(a AgentView) {
	site := a.Site
	if site == "" {
		site = NoSite
	}
	c := sc[site]
	if c == nil {
		c = Counts{}
		sc[site] = c
	}
	a.ID = "" // the lowest id is the group's business, not the site's
	c.Add(a)
}

// Done is sc as CountSites returns it: nil when no agent names a site, at
// most MaxSites sites plus OtherSites.
func (sc SiteCounts) Done() SiteCounts {
	if len(sc) == 0 || len(sc) == 1 && sc[NoSite] != nil {
		return nil
	}
	named := len(sc)
	if sc[NoSite] != nil {
		named--
	}
	if named <= MaxSites {
		return sc
	}
	sites := make([]string, 0, named)
	for s := range sc {
		if s != NoSite && s != OtherSites {
			sites = append(sites, s)
		}
	}
	sort.Slice(sites, func(i, j int) bool {
		ni, nj := sc[sites[i]].Total(), sc[sites[j]].Total()
		if ni != nj {
			return ni > nj
		}
		return sites[i] < sites[j]
	})
	other := sc[OtherSites]
	if other == nil {
		other = Counts{}
	}
	for _, s := range sites[MaxSites:] {
		for v, vc := range sc[s] {
			o := other[v]
			o.Count += vc.Count
			o.FailedCount += vc.FailedCount
			o.Updating += vc.Updating
			o.Unreachable += vc.Unreachable
			other[v] = o
		}
		delete(sc, s)
	}
	sc[OtherSites] = other
	return sc
}

// describeSites names the sites of agents, most agents first (then by
// name), at most maxHaltSites of them: " (sites: edge-a 3, edge-b 1)", or
// "" when none of them names a site. Agents naming none count as "no
// site" once another does.
func describeSites(agents []AgentView) string {
	n := map[string]int{}
	named := false
	for _, a := range agents {
		n[a.Site]++
		named = named || a.Site != ""
	}
	if !named {
		return ""
	}
	sites := make([]string, 0, len(n))
	for s := range n {
		sites = append(sites, s)
	}
	sort.Slice(sites, func(i, j int) bool {
		if n[sites[i]] != n[sites[j]] {
			return n[sites[i]] > n[sites[j]]
		}
		return sites[i] < sites[j]
	})
	word := "sites"
	if len(sites) == 1 {
		word = "site"
	}
	parts := make([]string, 0, maxHaltSites+1)
	for i, s := range sites {
		if i == maxHaltSites {
			parts = append(parts, fmt.Sprintf("%d more", len(sites)-maxHaltSites))
			break
		}
		name := s
		if s == "" {
			name = "no site"
		}
		parts = append(parts, fmt.Sprintf("%s %d", name, n[s]))
	}
	return " (" + word + ": " + strings.Join(parts, ", ") + ")"
}
