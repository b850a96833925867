package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// AgentsOptions are the flags of "fleetctl agents ls".
type AgentsOptions struct {
	*Global
	Group   string
	Version string
	Output  string
}

// AgentRow is one agent in "agents ls -o json": its last heartbeat plus when
// the stream stored it.
type AgentRow struct {
	heartbeat.Heartbeat
	LastSeen time.Time `json:"last_seen"`
}

// AgentsReport is the JSON of "fleetctl agents ls -o json".
type AgentsReport struct {
	Agents []AgentRow `json:"agents"`
	// Invalid counts heartbeats in the stream that failed validation or are
	// foreign (a JetStream response stored on a heartbeat subject).
	Invalid int `json:"invalid"`
	// Problems names each of them (key FLEET_HB/<subject>); absent when
	// there are none.
	Problems []Problem `json:"problems,omitempty"`
}

func newAgentsCmd(g *Global) *cobra.Command {
	agents := &cobra.Command{
		Use:   "agents",
		Short: "Inspect the agents the bus knows",
	}
	o := &AgentsOptions{Global: g}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List agents from their last heartbeat in the stream",
		Long: `List every agent whose last heartbeat is still in the FLEET_HB stream, read
straight from the stream (no controller involved), sorted by group and id.
Agents silent for longer than the agent expiry are gone from the stream.

STATE is "updating → V (12s)" while the agent installs V (downloading, or
waiting for V to prove healthy; the time is since the install started),
"rolled back from V" after an automatic rollback, "error" when its last
update attempt failed, else "ok".`,
		Example: `  fleetctl agents ls
  fleetctl agents ls --group staging --version 1.4.2
  fleetctl agents ls -o json | jq -r '.agents[] | select(.rollback) | .hostname'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			if err := checkGroupFilter(o.Group); err != nil {
				return err
			}
			if o.Version != "" && o.Version != rollout.NoVersion {
				if err := rollout.ValidateVersion(o.Version); err != nil {
					return cliutil.Usagef("--version: %v", err)
				}
			}
			return RunAgentsList(cmd.Context(), o)
		},
	}
	ls.Flags().StringVar(&o.Group, "group", "", "only agents of this group")
	ls.Flags().StringVar(&o.Version, "version", "", `only agents running this version ("none": nothing installed)`)
	outputFlag(ls, &o.Output)
	agents.AddCommand(ls)
	return agents
}

// RunAgentsList is "fleetctl agents ls".
func RunAgentsList(ctx context.Context, o *AgentsOptions) error {
	ctx, f, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	stored, err := f.LastHeartbeats(ctx, o.Group)
	if err != nil {
		return err
	}
	rep := AgentsReport{Agents: []AgentRow{}}
	for _, s := range stored {
		hb, err := s.Decode()
		var p *kv.Problem
		if errors.As(err, &p) {
			rep.Invalid++
			rep.Problems = append(rep.Problems, problemOf(p))
			continue
		}
		if err != nil {
			return err
		}
		if o.Version != "" && hb.Version() != o.Version {
			continue
		}
		rep.Agents = append(rep.Agents, AgentRow{Heartbeat: *hb, LastSeen: s.Stored})
	}
	// The stream yields subjects in storage order; sort for people and diffs.
	sortAgents(rep.Agents)
	sort.Slice(rep.Problems, func(i, j int) bool { return rep.Problems[i].Key < rep.Problems[j].Key })
	warnProblems(o.ErrOut, rep.Problems)
	if len(rep.Agents) == 0 && o.Group != "" {
		// No agents of a group the config lacks: most likely a typo.
		if cfg, isDefault, err := f.ReadConfig(ctx); err == nil && !inConfig(o.Group, cfg.Value) {
			fmt.Fprintf(o.ErrOut, "note: %s\n", notInConfig(o.Group, cfg.Value, isDefault))
		}
	}
	if o.Output == "json" {
		return writeJSON(o.Out, rep)
	}
	if len(rep.Agents) == 0 {
		_, err := fmt.Fprintln(o.Out, "No agents.")
		return err
	}
	tw := newTable(o.Out)
	fmt.Fprintln(tw, "AGENT ID\tGROUP\tHOSTNAME\tVERSION\tSTATE\tSEEN")
	now := o.Now()
	for _, a := range rep.Agents {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s ago\n", a.AgentID, shorten(a.Group, 16), shorten(a.Hostname, 20),
			a.Version(), agentState(&a.Heartbeat, now), age(now, a.LastSeen))
	}
	return tw.Flush()
}

// agentState is the STATE column: what the agent's update is doing or last
// did. now dates an install in progress.
func agentState(h *heartbeat.Heartbeat, now time.Time) string {
	switch {
	case h.UpdatingTo != "":
		s := "updating → " + h.UpdatingTo
		if !h.StartTime.IsZero() {
			s += " (" + age(now, h.StartTime) + ")"
		}
		return s
	case h.Rollback:
		return "rolled back from " + h.RollbackFrom
	case h.Error != "":
		return "error"
	default:
		return "ok"
	}
}

func sortAgents(rows []AgentRow) {
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Group != rows[j].Group {
			return rows[i].Group < rows[j].Group
		}
		return rows[i].AgentID < rows[j].AgentID
	})
}
