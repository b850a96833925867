package fleetctl

import (
	"fmt"
	"io"

	"github.com/fleetwave/fleetwave/internal/view"
)

// writeSiteTable prints the groups' agents by site (GroupReport.Sites)
// when any group has some, or, with force, says that none does.
func writeSiteTable(w io.Writer, rep StatusReport, force bool) error {
	sited, plan := false, false
	for _, g := range rep.Groups {
		if len(g.Sites) > 0 {
			sited = true
		}
		if g.Rollout != nil {
			plan = true
		}
	}
	if !sited {
		if force {
			_, err := fmt.Fprintln(w, "\nNo agent names a site (agentd --site, or a NATS server with a JetStream domain).")
			return err
		}
		return nil
	}
	fmt.Fprintln(w, "\nAgents by site:")
	tw := newTable(w)
	if plan {
		fmt.Fprintln(tw, "GROUP\tSITE\tAGENTS\tUPDATED\tUPDATING\tWAITING\tFAILED\tUNREACHABLE")
	} else {
		fmt.Fprintln(tw, "GROUP\tSITE\tAGENTS\tFAILED\tUNREACHABLE")
	}
	for _, g := range rep.Groups {
		for i, s := range g.Sites {
			name := ""
			if i == 0 {
				name = cell(g.Name, groupWidth)
			}
			if sp := s.Split; plan && sp != nil {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\n", name, cell(s.Site, 40), s.Agents,
					view.Share(sp.Updated, s.Agents), sp.Updating, sp.Waiting, sp.Failed, sp.Unreachable)
			} else if plan {
				fmt.Fprintf(tw, "%s\t%s\t%d\t-\t-\t-\t%d\t%d\n", name, cell(s.Site, 40), s.Agents, s.Failed, s.Unreachable)
			} else {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", name, cell(s.Site, 40), s.Agents, s.Failed, s.Unreachable)
			}
		}
	}
	return tw.Flush()
}
