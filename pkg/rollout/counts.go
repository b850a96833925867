package rollout

// VersionCount is what the controllers report for one version in one group:
// how many established agents run it, how many of those are unreachable,
// how many of the reachable ones failed (rolled back or report an error),
// and the lowest agent id among them. It is the value type
// of the "versions" map in fleet_stats entries.
type VersionCount struct {
	Count       int `json:"count"`
	FailedCount int `json:"failed_count"`
	// Updating counts the agents at this version that are installing
	// another one right now (their heartbeat's updating_to); they are also
	// in Count. Informational: the rollout engine does not use it.
	Updating int     `json:"updating,omitempty"`
	LowestID AgentID `json:"lowest_id,omitempty"`
	// Unreachable counts the agents at this version with no heartbeat for
	// longer than UnreachableAfter; they are also in Count (they have not
	// expired), and in neither FailedCount nor Updating.
	Unreachable int `json:"unreachable,omitempty"`
	// Blocked counts the reachable agents at this version whose last
	// update attempt hit an infrastructure failure they retry by
	// themselves (a release site down, a full disk): also in Count, not in
	// FailedCount.
	Blocked int `json:"blocked,omitempty"`
}

// Counts maps version → counts for one group. NoVersion is the key for agents
// that have nothing installed yet.
type Counts map[string]VersionCount

// NoVersion is the Counts key for agents whose active_version is empty.
const NoVersion = "none"

// Total is the number of agents over all versions.
func (c Counts) Total() int {
	n := 0
	for _, vc := range c {
		n += vc.Count
	}
	return n
}
