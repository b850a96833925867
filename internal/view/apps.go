package view

import "github.com/fleetwave/fleetwave/pkg/rollout"

// AppProgress is one app's rollout in one line, from its StatusReport (the
// report of the app's own plan and counts: kv.State.AppView and
// kv.StatsOf): what the dashboard's all-apps overview shows of each app,
// in the numbers fleetctl status prints for it.
type AppProgress struct {
	// Start and Target are the plan's versions; absent with no plan.
	Start  string `json:"start,omitempty"`
	Target string `json:"target,omitempty"`
	// Mode is the plan's effective mode; absent with no plan.
	Mode rollout.Mode `json:"mode,omitempty"`
	// Groups are the config's groups (those with a rollout in the
	// config), GroupsDone those of them done on the target.
	Groups     int `json:"groups"`
	GroupsDone int `json:"groups_done"`
	// Halted and RolledBack name the groups halted or rolled back, in
	// the report's order; [] for none.
	Halted     []string `json:"halted"`
	RolledBack []string `json:"rolled_back"`
	// Agents is every agent counted for the app; OnTarget those on the
	// target (the UPDATED cells summed) and Failed those that failed it
	// (the FAILED cells summed); both 0 with no plan.
	Agents   int `json:"agents"`
	OnTarget int `json:"on_target"`
	Failed   int `json:"failed"`
}

// Progress sums rep into one line.
func Progress(rep StatusReport) AppProgress {
	p := AppProgress{Halted: []string{}, RolledBack: []string{}}
	if rep.Plan != nil {
		p.Start, p.Target, p.Mode = rep.Plan.StartVersion, rep.Plan.TargetVersion, rep.Plan.Mode
	}
	for _, g := range rep.Groups {
		p.Agents += g.Agents
		r := g.Rollout
		if r == nil {
			continue
		}
		p.OnTarget += r.Agents.Updated
		p.Failed += r.Agents.Failed
		if !r.InConfig {
			continue
		}
		p.Groups++
		switch {
		case r.Stale || r.StatusInvalid:
		case r.Halted:
			p.Halted = append(p.Halted, g.Name)
		case r.State == rollout.StateRolledBack:
			p.RolledBack = append(p.RolledBack, g.Name)
		case r.State == rollout.StateDone:
			p.GroupsDone++
		}
	}
	return p
}
