package rollout

// VersionCount is what the controllers report for one version in one group:
// how many established agents run it, how many of those failed (rolled back or
// report an error), and the lowest agent id among them. It is the value type
// of the "versions" map in fleet_stats entries.
type VersionCount struct {
	Count       int `json:"count"`
	FailedCount int `json:"failed_count"`
	// Updating counts the agents at this version that are installing
	// another one right now (their heartbeat's updating_to); they are also
	// in Count. Informational: the rollout engine does not use it.
	Updating int     `json:"updating,omitempty"`
	LowestID AgentID `json:"lowest_id,omitempty"`
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
