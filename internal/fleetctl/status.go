package fleetctl

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// StatusOptions are the flags of "fleetctl status".
type StatusOptions struct {
	*Global
	Output string
}

// StatusReport is the JSON of "fleetctl status -o json". Stable: fields are
// only ever added.
type StatusReport struct {
	Groups []GroupReport `json:"groups"`
}

// GroupReport is one group in a StatusReport.
type GroupReport struct {
	Name     string                   `json:"name"`
	Agents   int                      `json:"agents"`
	Failed   int                      `json:"failed"`
	Versions map[string]VersionReport `json:"versions"`
	// Controllers is how many controllers report the group; At is when the
	// entry shown was written.
	Controllers int       `json:"controllers"`
	At          time.Time `json:"at"`
}

// VersionReport counts one version in one group.
type VersionReport struct {
	Count    int             `json:"count"`
	Failed   int             `json:"failed"`
	LowestID rollout.AgentID `json:"lowest_id,omitempty"`
}

func newStatusCmd(g *Global) *cobra.Command {
	o := &StatusOptions{Global: g}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show agents per group and version, as counted by the controllers",
		Long: `Show, per group, how many agents run each version and how many of them failed
(rolled back or reported an error). The counts are the controllers' fleet_stats
entries younger than one minute; agents count once they have heartbeated for
one interval, and drop out after the agent expiry.`,
		Example: `  fleetctl status
  fleetctl status -o json | jq '.groups[] | {name, agents}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			return RunStatus(cmd.Context(), o)
		},
	}
	outputFlag(cmd, &o.Output)
	return cmd
}

// RunStatus is "fleetctl status".
func RunStatus(ctx context.Context, o *StatusOptions) error {
	ctx, cancel := o.withTimeout(ctx)
	defer cancel()
	f, closeFn, err := o.fleet(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	entries, err := kv.ReadStats(ctx, f.Stats)
	if err != nil {
		return err
	}
	rep := BuildStatus(entries, o.Now())
	if o.Output == "json" {
		return writeJSON(o.Out, rep)
	}
	return writeStatusTable(o, rep)
}

// BuildStatus turns fleet_stats entries into the report at now.
func BuildStatus(entries []kv.Stats, now time.Time) StatusReport {
	rep := StatusReport{Groups: []GroupReport{}}
	for _, gs := range kv.MergeStats(entries, now) {
		gr := GroupReport{Name: gs.Group, Versions: map[string]VersionReport{}, Controllers: gs.Reporting, At: gs.At}
		for v, c := range gs.Versions {
			gr.Versions[v] = VersionReport{Count: c.Count, Failed: c.FailedCount, LowestID: c.LowestID}
			gr.Agents += c.Count
			gr.Failed += c.FailedCount
		}
		rep.Groups = append(rep.Groups, gr)
	}
	return rep
}

func writeStatusTable(o *StatusOptions, rep StatusReport) error {
	if len(rep.Groups) == 0 {
		_, err := fmt.Fprintln(o.Out, "No agents counted. Is a controller running, and have agents heartbeated for one interval?")
		return err
	}
	tw := newTable(o.Out)
	fmt.Fprintln(tw, "GROUP\tAGENTS\tFAILED\tVERSION\tCOUNT\tFAILED\tAS OF")
	for _, g := range rep.Groups {
		versions := make([]string, 0, len(g.Versions))
		for v := range g.Versions {
			versions = append(versions, v)
		}
		sort.Slice(versions, func(i, j int) bool { return versionLess(versions[i], versions[j]) })
		for i, v := range versions {
			vr := g.Versions[v]
			if i == 0 {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%s ago\n", g.Name, g.Agents, g.Failed, v, vr.Count, vr.Failed, age(o.Now(), g.At))
			} else {
				fmt.Fprintf(tw, "\t\t\t%s\t%d\t%d\t\n", v, vr.Count, vr.Failed)
			}
		}
	}
	return tw.Flush()
}

// versionLess orders newest version first, "none" last.
func versionLess(a, b string) bool {
	switch {
	case a == rollout.NoVersion:
		return false
	case b == rollout.NoVersion:
		return true
	}
	return rollout.CompareVersions(a, b) > 0
}
