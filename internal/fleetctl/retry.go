package fleetctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetwave/fleetwave/internal/cliutil"
	"github.com/fleetwave/fleetwave/pkg/kv"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

// RetryOptions are the flags of "fleetctl retry".
type RetryOptions struct {
	GroupActionOptions
	// Agents are the --agent values as typed; none: every agent of the
	// group that rolled back from the target.
	Agents []string
}

func newRetryCmd(g *Global) *cobra.Command {
	o := &RetryOptions{GroupActionOptions: GroupActionOptions{Global: g}}
	cmd := &cobra.Command{
		Use:   "retry --group G [--agent ID]...",
		Short: "Let agents that rolled back from the target try it once more",
		Long: `Ask agents that rolled back from the group's target version to try it once
more, without resetting the group: its state, progress and failure count stay.
Each agent retries at most once per request (it records the request in its
update.yaml, so a restart never retries twice); if the retry fails it rolls
back as usual and stays there. A retrying agent is no longer counted as failed;
if it fails again it counts again.

Without --agent, every agent of the group that rolled back from the target
retries; --agent (repeatable, up to 100) names the ones that should. An agent
retries only when the plan tells it to update (its turn has come, the mode is
enabled), and only if it had rolled back when it first saw the request: agents
that fail later are not retried by it. A new request replaces the last one.

fleetctl reads the group's agents from their heartbeats and says how many will
retry; it refuses, writing nothing, when none rolled back from the target or a
named agent did not. Allowed in canary, active and done. A halted group must be
reset first (fleetctl reset: it clears the halt and forgives the failures so
far; --force and --reason, since it clears a halt), since a halted group
tells no agent to update. A group whose target is quarantined retries only
with --force and --reason. Agents using the HTTP find
fallback (the bus lost) retry once they are back on the bus.

Fix the cause first, then retry. A retry reuses the release the host already
downloaded and verified: a version is immutable, so a broken release is fixed
by a new version (fleetctl plan set --target), not by a retry. Retry is for
causes outside the release: a host repaired, a dependency or a setting
the app needed put right, a flaky start.`,
		Example: `  # one host whose disk was repaired
  fleetctl retry --group prod --agent 1b4e28ba-2fa1-4d2e-883f-0016d3cca427 --reason "disk replaced"
  # every agent of staging that rolled back from the target
  fleetctl retry --group staging --reason "the app's config on the hosts fixed"
  # after a halt: clear it, then retry
  fleetctl reset --group prod --force --reason "disk replaced" && fleetctl retry --group prod --reason "disk replaced"
  # the agents that will retry, for a script
  fleetctl retry --group prod -o json | jq -r '.agents[]'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkWriteOutput(o.Output); err != nil {
				return err
			}
			return RunRetry(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.Group, "group", "", "the group whose agents retry")
	cmd.Flags().StringArrayVar(&o.Agents, "agent", nil, "an agent id that should retry (repeatable; default: every agent that rolled back from the target)")
	noteFlag(cmd, &o.Note)
	forceFlag(cmd, &o.Force)
	writeOutputFlag(cmd, &o.Output)
	appFlag(cmd, g)
	_ = cmd.RegisterFlagCompletionFunc("agent", g.completeRetryAgents)
	return cmd
}

// parseAgentFlags checks --agent values: canonical agent ids (surrounding
// space and upper case forgiven), each once.
func parseAgentFlags(values []string) ([]rollout.AgentID, error) {
	if len(values) > rollout.MaxRetryAgents {
		return nil, cliutil.Usagef("--agent given %d times, at most %d: leave it out to retry every agent that rolled back", len(values), rollout.MaxRetryAgents)
	}
	var ids []rollout.AgentID
	for _, v := range values {
		id, err := rollout.ParseAgentID(strings.ToLower(strings.TrimSpace(v)))
		if err != nil {
			return nil, cliutil.Usagef("--agent: %v (fleetctl agents ls --group G lists them)", err)
		}
		if !containsID(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func containsID(ids []rollout.AgentID, id rollout.AgentID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// RunRetry is "fleetctl retry".
func RunRetry(ctx context.Context, o *RetryOptions) error {
	if err := checkGroupFlag(o.Group); err != nil {
		return err
	}
	ids, err := parseAgentFlags(o.Agents)
	if err != nil {
		return err
	}
	action := func(st rollout.GroupStatus, note string, now time.Time) (rollout.GroupStatus, rollout.Event, error) {
		return rollout.Retry(st, ids, note, now)
	}
	check := func(ctx context.Context, f appFleet, next rollout.GroupStatus) (actionReport, error) {
		return o.eligible(ctx, f, next, ids)
	}
	return runGroupActionChecked(ctx, &o.GroupActionOptions, "retry", action, check)
}

// eligible reads the group's agents from the heartbeat stream and finds
// those the retry concerns. It refuses a retry that concerns nobody, or
// names an agent that did not roll back from the target. When the stream
// cannot be read it says so and lets the retry be written unchecked.
func (o *RetryOptions) eligible(ctx context.Context, f appFleet, st rollout.GroupStatus, named []rollout.AgentID) (actionReport, error) {
	views, err := groupViews(ctx, f, o.Group)
	if err != nil {
		fmt.Fprintf(o.ErrOut, "warning: could not read the agents of group %q (%v): the retry is written without checking which agents it concerns\n", o.Group, err)
		return actionReport{lines: []string{"agents concerned: not known (the heartbeat stream could not be read)"}}, nil
	}
	target := st.TargetVersion
	eligible := rollout.RetryEligible(st, views, named)
	byID := make(map[rollout.AgentID]rollout.AgentView, len(views))
	for _, v := range views {
		byID[v.ID] = v
	}
	var problems []string
	for _, id := range named {
		v, ok := byID[id]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("agent %s is not in group %q (no heartbeat of it in the stream: fleetctl agents ls --group %s)", id, o.Group, o.Group))
		case !containsID(eligible, id):
			problems = append(problems, fmt.Sprintf("agent %s did not roll back from %s (it runs %s%s)", id, target, orNothing(v.ActiveVersion), rolledBackNote(v)))
		}
	}
	if len(problems) > 0 {
		return actionReport{}, fmt.Errorf("retry --group %s: %s; nothing written", o.Group, strings.Join(problems, "; "))
	}
	if len(eligible) == 0 {
		return actionReport{}, fmt.Errorf("retry --group %s: none of its %d agents rolled back from %s, so none would retry; nothing written", o.Group, len(views), target)
	}
	lines := []string{fmt.Sprintf("%d of the group's %d agents rolled back from %s; each tries it once more when the plan lets it:",
		len(eligible), len(views), target)}
	lines = append(lines, listIDs(eligible, 10)...)
	return actionReport{lines: lines, agents: eligible}, nil
}

// groupViews are the group's agents as the rollout rules see them, from
// their last heartbeats (those that fail validation left out).
func groupViews(ctx context.Context, f appFleet, group string) ([]rollout.AgentView, error) {
	stored, err := f.LastHeartbeats(ctx, group)
	if err != nil {
		return nil, err
	}
	var views []rollout.AgentView
	for _, s := range stored {
		hb, err := s.Decode()
		var p *kv.Problem
		if errors.As(err, &p) {
			continue
		}
		if err != nil {
			return nil, err
		}
		views = append(views, rollout.AgentView{ID: hb.AgentID, ActiveVersion: hb.ActiveVersion, Rollback: hb.Rollback,
			RollbackFrom: hb.RollbackFrom, Error: hb.Error, StartTime: hb.StartTime, UpdatingTo: hb.UpdatingTo})
	}
	return views, nil
}

func rolledBackNote(v rollout.AgentView) string {
	if v.Rollback && v.RollbackFrom != "" {
		return ", rolled back from " + v.RollbackFrom
	}
	return ""
}

func orNothing(v string) string {
	if v == "" {
		return "nothing"
	}
	return v
}

// listIDs lists at most n ids, indented, one a line, then how many more.
func listIDs(ids []rollout.AgentID, n int) []string {
	var lines []string
	for i, id := range ids {
		if i == n {
			lines = append(lines, fmt.Sprintf("  and %d more (-o json lists them all)", len(ids)-n))
			break
		}
		lines = append(lines, "  "+string(id))
	}
	return lines
}

// completeRetryAgents offers the agents of --group that rolled back from
// the plan's target, described by what they run.
func (g *Global) completeRetryAgents(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
	group, _ := cmd.Flags().GetString("group")
	if rollout.ValidateGroupName(group) != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	g.completeFrom(cmd.Context(), func(ctx context.Context, kf *kv.Fleet) {
		f, err := g.resolveApp(ctx, kf)
		if err != nil {
			return
		}
		spec, err := f.ReadSpec(ctx)
		if err != nil {
			return
		}
		views, err := groupViews(ctx, f, group)
		if err != nil {
			return
		}
		for _, id := range rollout.RetryEligible(rollout.GroupStatus{TargetVersion: spec.Value.TargetVersion}, views, nil) {
			if strings.HasPrefix(string(id), prefix) {
				out = append(out, string(id)+"\trolled back from "+spec.Value.TargetVersion)
			}
		}
	})
	return out, cobra.ShellCompDirectiveNoFileComp
}
